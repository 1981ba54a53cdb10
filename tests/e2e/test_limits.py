"""Limits a user relies on: a client that never reads its replies is held
or cut off with memory bounded, --max-clients, --idle-timeout, and
--max-memory with far more keys than fit."""

import errno
import socket
import time

from harness import BASE, RawConn, RespError, ServerTestCase, deadline, encode, parse_info

FW = ["ALGO", "fixed-window"]
RSS_BOUND_KB = 200 * 1024


def flood_until_blocked(sock, chunk, max_bytes, stall_seconds, stop=None):
    """Writes chunk over and over on a non-blocking socket without reading,
    until the server stops taking bytes for stall_seconds, the connection
    breaks, stop() says so, or max_bytes were written.  Returns (bytes
    written, how it ended)."""
    sock.setblocking(False)
    sent = 0
    stalled_since = None
    last_check = 0.0
    hard_stop = deadline(60)
    view = memoryview(chunk)
    off = 0
    while sent < max_bytes and time.monotonic() < hard_stop:
        try:
            n = sock.send(view[off:])
            sent += n
            off = (off + n) % len(chunk)
            stalled_since = None
            continue
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET):
                return sent, "closed"
            raise
        now = time.monotonic()
        if stalled_since is None:
            stalled_since = now
        if now - stalled_since >= stall_seconds:
            return sent, "stalled"
        if stop is not None and now - last_check > 0.2:
            last_check = now
            if stop():
                return sent, "stopped"
        time.sleep(0.01)
    return sent, "limit"


class TestSlowReaders(ServerTestCase):

    SERVER_ARGS = ("--send-timeout", "1s", "--max-output", "1mb")

    def test_client_that_never_reads_is_cut(self):
        """It pipelines RL.ALLOW and never reads: the server stops reading it
        (its replies are bounded), then cuts it after --send-timeout;
        clients_cut_output counts it and the server's memory stays bounded."""
        cut0 = self.srv.info_int("clients_cut_output", "stats")
        rss0 = self.srv.rss_kb()
        cmd = encode("RL.ALLOW", "flood", 10 ** 9, "1h", *FW, "AT", BASE)
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            sent, how = flood_until_blocked(
                s, cmd * 1000, 2 << 30, stall_seconds=60,
                stop=lambda: self.srv.info_int("clients_cut_output", "stats") > cut0)
        finally:
            s.close()
        self.assertIn(how, ("closed", "stopped"), "after %d bytes: %s" % (sent, how))
        self.assertEqual(self.srv.wait_info("clients_cut_output", lambda v: v > cut0, "stats"),
                         cut0 + 1)
        rss = self.srv.rss_kb()
        self.assertLess(rss, RSS_BOUND_KB, "VmRSS %d kB (was %d kB) after %d bytes"
                        % (rss, rss0, sent))
        self.assertGreater(sent, 0)
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")

    def test_big_replies_over_max_output_are_cut(self):
        """INFO pipelined without reading: replies over --max-output (1 MB)
        pile up in one turn and the client is cut at once."""
        cut0 = self.srv.info_int("clients_cut_output", "stats")
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
        try:
            sent, how = flood_until_blocked(
                s, encode("INFO") * 4096, 512 << 20, stall_seconds=60,
                stop=lambda: self.srv.info_int("clients_cut_output", "stats") > cut0)
        finally:
            s.close()
        self.assertIn(how, ("closed", "stopped"), how)
        self.assertEqual(self.srv.wait_info("clients_cut_output", lambda v: v > cut0, "stats"),
                         cut0 + 1)
        self.assertLess(self.srv.rss_kb(), RSS_BOUND_KB)


class TestBackpressure(ServerTestCase):
    """--send-timeout 0: a client that stops reading is held by TCP flow
    control, not cut; when it reads again it gets every reply, exact."""

    SERVER_ARGS = ("--send-timeout", "0")

    def test_held_then_served_in_full(self):
        limit = 10 ** 9
        cmd = encode("RL.ALLOW", "held", limit, "1h", *FW, "AT", BASE)
        with self.srv.raw() as c:
            sent, how = flood_until_blocked(c.sock, cmd * 1000, 64 << 20, stall_seconds=1.5)
            self.assertEqual(how, "stalled", "the server stopped reading this client")
            self.assertLess(self.srv.rss_kb(), RSS_BOUND_KB)
            with self.srv.raw() as w:  # others are served meanwhile
                self.assertEqual(w.cmd("PING"), b"PONG")
            c.sock.setblocking(True)
            c.sock.settimeout(30)
            # every whole command is answered; then finish the cut one
            n = sent // len(cmd)
            got = c.read_replies(n, timeout=120)
            if sent % len(cmd):
                c.send(cmd[sent % len(cmd):])
                got.append(c.read_reply())
                n += 1
        for i, g in enumerate(got):
            if g != [1, limit, limit - 1 - i, 0, 3600000, 0]:
                self.fail("reply %d of %d: %r" % (i, n, g))
        self.assertEqual(self.srv.info_int("clients_cut_output", "stats"), 0)


class TestMaxClients(ServerTestCase):
    SERVER_ARGS = ("--max-clients", "5")

    def test_one_too_many(self):
        first = self.srv.sole_client()  # so none of the first five is refused
        conns = [first]
        try:
            rej0 = int(parse_info(first.cmd("INFO", "stats"))["rejected_connections"])
            conns += [RawConn(self.srv.port) for _ in range(3)]
            for c in conns:
                self.assertEqual(c.cmd("PING"), b"PONG")
            with self.srv.raw() as fifth:  # the 5th of 5
                self.assertEqual(fifth.cmd("PING"), b"PONG")
                with self.srv.raw() as sixth:
                    self.assertEqual(sixth.read_until_eof(),
                                     [RespError("ERR max number of clients reached")])
                info = parse_info(fifth.cmd("INFO"))
                self.assertEqual(int(info["rejected_connections"]), rej0 + 1)
                self.assertEqual(int(info["connected_clients"]), 5)
            # the 5th left: room for one again (once the server saw it go)
            until = deadline(20)
            while time.monotonic() < until:
                with self.srv.raw() as again:
                    try:
                        if again.cmd("PING") == b"PONG":
                            break
                    except EOFError:
                        pass
                time.sleep(0.05)
            else:
                self.fail("no room after a client left")
            for c in conns:  # the first four were never disturbed
                self.assertEqual(c.cmd("ECHO", "still"), b"still")
        finally:
            for c in conns:
                c.close()


class TestIdleTimeout(ServerTestCase):
    SERVER_ARGS = ("--idle-timeout", "1s")

    def test_idle_client_is_closed(self):
        idle0 = self.srv.info_int("clients_cut_idle", "stats")
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
            self.assertEqual(c.read_until_eof(timeout=20), [], "closed with no reply")
        self.assertEqual(self.srv.wait_info("clients_cut_idle", lambda v: v > idle0, "stats"),
                         idle0 + 1)

    def test_busy_client_is_not_closed(self):
        """A request every 50 ms for 1.5 idle-timeouts: never cut.  A server
        of its own with a 2 s idle timeout: 40 times the gap between two
        requests, a margin a loaded machine keeps (the class's 1 s is for
        the test above, which waits for it)."""
        srv = self.new_server("--idle-timeout", "2s", trust_client_time=True)
        with srv.raw() as c:
            end = time.monotonic() + 3.0
            n = 0
            while time.monotonic() < end:
                got = c.cmd("RL.ALLOW", "busy", 10 ** 6, "1h", *FW, "AT", BASE)
                self.assertEqual(got[2], 10 ** 6 - 1 - n)
                n += 1
                time.sleep(0.05)
            self.assertEqual(parse_info(c.cmd("INFO", "stats"))["clients_cut_idle"], "0")


class TestMaxMemory(ServerTestCase):
    # evict: this test is about a store that keeps taking new keys (the
    # default, deny-new, refuses them once every key holds a limit:
    # test_store_full.py)
    SERVER_ARGS = ("--max-memory", "2mb", "--on-store-full", "evict")

    def test_100k_keys_in_2mb(self):
        """100,000 distinct keys into a 2 MB store: every request is still
        answered exactly (a fresh key is allowed), used_memory stays within
        maxmemory, and keys were evicted."""
        n, batch = 100000, 10000
        with self.srv.raw() as c:
            for b in range(0, n, batch):
                c.send(b"".join(encode("RL.ALLOW", "mem:%06d" % i, 5, "1h", *FW, "AT", BASE)
                                for i in range(b, b + batch)))
                got = c.read_replies(batch, timeout=60)
                for i, g in enumerate(got):
                    if g != [1, 5, 4, 0, 3600000, 0]:
                        self.fail("key mem:%06d: %r" % (b + i, g))
            mem = parse_info(c.cmd("INFO", "memory"))
            stats = parse_info(c.cmd("INFO", "stats"))
            self.assertEqual(int(mem["maxmemory"]), 2 * 1024 * 1024)
            self.assertLessEqual(int(mem["used_memory"]), int(mem["maxmemory"]))
            self.assertLess(int(mem["keys"]), n)
            self.assertGreater(int(stats["evicted_keys"]) + int(stats["expired_keys"]), 0)
            # still answering, and the newest key is remembered
            self.assertEqual(c.cmd("PING"), b"PONG")
            self.assertEqual(c.cmd("RL.ALLOW", "mem:%06d" % (n - 1), 5, "1h", *FW, "AT", BASE),
                             [1, 5, 3, 0, 3600000, 0])
