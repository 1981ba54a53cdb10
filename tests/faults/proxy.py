"""proxy.py -- a TCP proxy of the harness's own, in-process, on a loopback
port, whose mode is switched while it runs:

  forward    bytes pass both ways
  drop       every open connection is reset (RST) and new ones are accepted
             and reset at once: a firewall's REJECT
  delay      bytes pass, each chunk held `delay_ms` first (a slow link)
  blackhole  nothing passes and nothing is closed: the bytes wait in the
             kernel's buffers (the proxy stops reading), as on a link that
             drops every packet and TCP keeps retransmitting; when the mode
             is forward again they flow on, unless an end gave up meanwhile

The upstream is a callable returning (host, port), asked at each new
connection, so a proxy can follow a Redis master that Sentinel moves.
Bounded: at most MAX_CONNS connections at once (more are reset), each read
at most 64 KB, every wait in a loop at most POLL seconds before the mode is
looked at again.  stop() closes everything and joins every thread."""

import select
import socket
import struct
import threading
import time

POLL = 0.02
MAX_CONNS = 256
MODES = ("forward", "drop", "delay", "blackhole")


def _reset(sock):
    """Closes with an RST (SO_LINGER 0), as a REJECT would."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class Proxy:
    def __init__(self, upstream, name="proxy"):
        self.upstream = upstream          # () -> (host, port)
        self.name = name
        self.mode = "forward"
        self.delay_ms = 0
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []                   # [(client sock, upstream sock)]
        self.threads = []
        self.stopping = False
        self.generation = 0               # bumped by drop: pumps of older ones end
        self.accepted = 0
        self.refused = 0
        self.bytes = 0
        t = threading.Thread(target=self._accept_loop, name=name + "-accept", daemon=True)
        t.start()
        self.threads.append(t)

    def addr(self):
        return "127.0.0.1:%d" % self.port

    def set_mode(self, mode, delay_ms=0):
        """Switches the mode; returns how many open connections it applies
        to (those a drop resets; those a blackhole or delay holds)."""
        if mode not in MODES:
            raise ValueError("proxy mode %r: one of %s" % (mode, ", ".join(MODES)))
        with self.lock:
            self.mode = mode
            self.delay_ms = delay_ms
            n = len(self.conns)
            if mode == "drop":
                self.generation += 1
                conns, self.conns = self.conns, []
            else:
                conns = []
        for c, u in conns:
            _reset(c)
            _reset(u)
        return n

    def _accept_loop(self):
        while not self.stopping:
            r, _, _ = select.select([self.lsock], [], [], POLL * 5)
            if not r or self.stopping:
                continue
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            with self.lock:
                mode, gen, n = self.mode, self.generation, len(self.conns)
            if mode == "drop" or n >= MAX_CONNS:
                self.refused += 1
                _reset(c)
                continue
            try:
                u = socket.create_connection(self.upstream(), timeout=2)
            except OSError:
                self.refused += 1
                _reset(c)
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.setblocking(True)
            self.accepted += 1
            with self.lock:
                self.conns.append((c, u))
            for a, b in ((c, u), (u, c)):
                t = threading.Thread(target=self._pump, args=(a, b, c, u, gen),
                                     name=self.name + "-pump", daemon=True)
                t.start()
                self.threads.append(t)
            # forget finished threads (bounded list)
            self.threads = [t for t in self.threads if t.is_alive()]

    def _pump(self, src, dst, c, u, gen):
        try:
            while not self.stopping and self.generation == gen:
                mode = self.mode
                if mode == "blackhole":
                    time.sleep(POLL)
                    continue
                r, _, _ = select.select([src], [], [], POLL)
                if not r:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if self.mode == "delay" and self.delay_ms:
                    time.sleep(self.delay_ms / 1000.0)
                while self.mode == "blackhole" and not self.stopping:
                    time.sleep(POLL)  # read before the hole opened: held, not lost
                dst.sendall(data)
                self.bytes += len(data)
        except (OSError, ValueError):  # ValueError: a socket closed by a drop
            pass
        # one end closed (or a drop): close both, once
        with self.lock:
            if (c, u) in self.conns:
                self.conns.remove((c, u))
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def stop(self):
        self.stopping = True
        with self.lock:
            conns, self.conns = self.conns, []
        for c, u in conns:
            _reset(c)
            _reset(u)
        for t in list(self.threads):
            t.join(5)
        try:
            self.lsock.close()
        except OSError:
            pass
        alive = [t for t in self.threads if t.is_alive()]
        return ["%s: %d thread(s) still running" % (self.name, len(alive))] if alive else []
