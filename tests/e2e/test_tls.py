"""TLS on the RESP port (issue 5, point 2): --tls-port with Redis's tls-*
options, `redis-cli --tls` and redis-py's ssl=True against it, pipelining
over TLS, client certificates (--tls-auth-clients), a plain-text client
or a client that never finishes its handshake closed without harm and
counted, bad certificate files refusing the start with the file named,
TLS only (--port off), and the output bounds of issue 5 point 1 holding
for TLS clients that do not read.

Certificates are made at test time with the `openssl` command into a
temporary folder (never committed): a CA, the server's certificate
(127.0.0.1) and key, a client's, and a second CA with a client of its own.
Loads are bounded in count and time and scaled down under sanitizers."""

# sluice-e2e: no-tsan
# A TLS connection's state stays on its worker; the state workers share that
# these cases reach (the output budget, sl__net_account, the stats and cut
# counters) is the plain path's, driven under TSan by test_hostile_output and
# test_limits, and OpenSSL/libevent are not instrumented. ASan+UBSan run it.

import os
import re
import select
import shutil
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import unittest

import harness
from harness import (BASE, HOST, LOG_DIR, SLOW, SLUICED, STARTED, RawConn, RespError, Server,
                     ServerTestCase, deadline, encode, free_port, nothing_listening, parse_info)

SAN = harness.SANITIZED
KB = 1024
MB = 1024 * KB
OUT_PAUSE = 64 * KB  # SL_NET_OUT_PAUSE (src/server/net.h)
FW = ["ALGO", "fixed-window"]
CERTS = None  # the folder of the test certificates (setUpModule)
TLS_LISTEN_RE = re.compile(rb'msg="?listening"? addr=127\.0\.0\.1:(\d+) threads=\d+ tls=yes')


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)


def make_cert(d, name, cn, ca=None, san=None):
    """An EC P-256 key and certificate d/name.{key,crt}: self-signed (a CA)
    or signed by the CA named `ca`."""
    key, crt = os.path.join(d, name + ".key"), os.path.join(d, name + ".crt")
    if ca is None:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", crt, "-days", "3", "-subj", "/CN=" + cn)
        return
    csr = os.path.join(d, name + ".csr")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
    args = ["x509", "-req", "-in", csr, "-CA", os.path.join(d, ca + ".crt"),
            "-CAkey", os.path.join(d, ca + ".key"), "-CAcreateserial", "-out", crt, "-days", "3"]
    if san:
        ext = os.path.join(d, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\n" % san)
        args += ["-extfile", ext]
    openssl(*args)


def setUpModule():
    global CERTS
    CERTS = tempfile.mkdtemp(prefix="sluice-tls-")
    os.chmod(CERTS, 0o755)  # the tests that run sluiced as nobody reach into it
    make_cert(CERTS, "ca", "sluice test CA")
    make_cert(CERTS, "server", "localhost", ca="ca", san="IP:127.0.0.1,DNS:localhost")
    make_cert(CERTS, "client", "sluice test client", ca="ca")
    make_cert(CERTS, "other-ca", "another CA")
    make_cert(CERTS, "stranger", "a client of another CA", ca="other-ca")
    for name in os.listdir(CERTS):
        os.chmod(os.path.join(CERTS, name), 0o644)


def tearDownModule():
    shutil.rmtree(CERTS, True)


def cert(name):
    return os.path.join(CERTS, name)


def tls_args(auth="no", ca=True):
    """The flags of a TLS listener beside the plain one."""
    args = ["--tls-port", "0", "--tls-cert-file", cert("server.crt"),
            "--tls-key-file", cert("server.key"), "--tls-auth-clients", auth]
    if ca:
        args += ["--tls-ca-cert-file", cert("ca.crt")]
    return args


def client_context(ca="ca.crt", client=None):
    """A client's TLS context trusting `ca`, showing `client`'s certificate
    if given.  Hostname checking is off (as redis-cli and redis-py); the
    chain is checked."""
    ctx = ssl.create_default_context(cafile=cert(ca))
    ctx.check_hostname = False
    if client:
        ctx.load_cert_chain(cert(client + ".crt"), cert(client + ".key"))
    return ctx


class TlsConn(RawConn):
    """A RawConn over TLS.  Reads also take what OpenSSL has already
    decrypted (pending), which select() on the socket cannot see."""

    def __init__(self, port, ctx=None, timeout=10):
        raw = socket.create_connection((HOST, port), timeout=timeout * SLOW)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock = (ctx or client_context()).wrap_socket(raw, server_hostname="localhost")
        except BaseException:
            raw.close()
            raise
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.reset = False

    def _fill(self, until):
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply within the deadline (have %d unparsed bytes)"
                               % (len(self.buf) - self.pos))
        if not self.sock.pending():
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return self._fill(until)
        try:
            data = self.sock.recv(1 << 20)
        except ssl.SSLWantReadError:
            return True
        except (ConnectionResetError, ssl.SSLEOFError):
            self.reset = True
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True


class TlsServer(Server):
    """A sluiced with a TLS listener; .tls_port is read from its log.  With
    --port off (no plain port) it is found, and checked to answer, over
    TLS."""

    def start(self, timeout=15):
        a = self.args
        tls_only = any(a[i] == "--port" and a[i + 1] == "off" for i in range(len(a) - 1))
        if not tls_only:
            Server.start(self, timeout)
            until = deadline(timeout)  # its line comes after the plain one's
            while time.monotonic() < until:
                m = TLS_LISTEN_RE.search(self.log_bytes())
                if m:
                    self.tls_port = int(m.group(1))
                    return self
                time.sleep(0.02)
            self._give_up("sluiced did not log its TLS address")
        # TLS only: the harness's start (plain PING) cannot find it
        n = len(STARTED)
        self.log_path = os.path.join(LOG_DIR, "%03d-%s.log" % (n, self.name))
        argv = [SLUICED, "--http-port", "0", "--grpc-port", "0"] + self.args  # HTTP: test_http.py
        with open(self.log_path, "wb") as log:
            log.write(("# " + " ".join(argv) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=LOG_DIR)
        STARTED.append(self)
        until = deadline(timeout)
        while time.monotonic() < until:
            m = TLS_LISTEN_RE.search(self.log_bytes())
            if m and b'msg="ready"' in self.log_bytes():
                self.tls_port = int(m.group(1))
                with TlsConn(self.tls_port) as c:
                    if c.cmd("PING") == b"PONG":
                        return self
            if self.proc.poll() is not None:
                raise AssertionError("sluiced exited with status %s at start:\n%s"
                                     % (self.proc.returncode, self.log()))
            time.sleep(0.05)
        self._give_up("sluiced did not answer PING over TLS")

    def tls(self, **kw):
        return TlsConn(self.tls_port, **kw)

    def tls_redis(self, **kw):
        import redis
        kw.setdefault("socket_timeout", 20 * SLOW)
        kw.setdefault("socket_connect_timeout", 10 * SLOW)
        return redis.Redis(host=HOST, port=self.tls_port, ssl=True,
                           ssl_ca_certs=cert("ca.crt"), ssl_cert_reqs="required", **kw)


def redis_cli(port, *args):
    """redis-cli --tls ... ARGS: (exit status, stdout, stderr)."""
    p = subprocess.run(["redis-cli", "--tls", "-h", HOST, "-p", str(port)] + [str(a) for a in args],
                       capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def refused_start(args, user=None):
    """Runs sluiced with args on a free port, expecting it to refuse to
    start: (exit status, its output).  Nothing may listen on the port, and
    no sanitizer may have spoken."""
    port = free_port()
    kw = {} if user is None else dict(user=user, group=user, extra_groups=[])
    p = harness.run_checked([SLUICED, "--port", str(port)] + list(args), capture_output=True,
                            timeout=30 * SLOW, stdin=subprocess.DEVNULL, **kw)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")  # scanned by run_checked
    assert nothing_listening(port), msg
    return p.returncode, msg


class TlsTestCase(ServerTestCase):
    """One shared server with a TLS listener (no client certificates).  It
    logs at debug, so that every failed handshake is in its log (at info,
    one a second per worker)."""

    AUTH = "no"

    @classmethod
    def setUpClass(cls):
        cls.srv = TlsServer(*tls_args(cls.AUTH), name=cls.__name__, trust_client_time=True,
                            log_level="debug")
        cls.srv.start()

    def tls_server(self, *args, **kw):
        s = TlsServer(*args, name=self.id().split(".")[-1], **kw)
        s.start()
        self.addCleanup(s.cleanup)
        return s


class TestTlsClients(TlsTestCase):

    def test_redis_cli_tls_exact_reply(self):
        """`redis-cli --tls --cacert CA -p TLSPORT RL.ALLOW ...`: the exact
        reply, each of the six integers on its line; the handshake is
        counted; INFO shows the TLS port beside the plain one."""
        before = self.srv.info_int("tls_handshakes", "stats")
        rc, out, err = redis_cli(self.srv.tls_port, "--cacert", cert("ca.crt"),
                                 "RL.ALLOW", "cli:1", 5, "10s", "AT", BASE)
        self.assertEqual((rc, out, err), (0, "1\n5\n4\n0\n2000\n0\n", ""))
        rc, out, err = redis_cli(self.srv.tls_port, "--cacert", cert("ca.crt"),
                                 "RL.ALLOW", "cli:1", 5, "10s", "AT", BASE + 1)
        self.assertEqual((rc, out), (0, "1\n5\n3\n0\n3999\n0\n"))
        info = self.srv.info("everything")
        self.assertEqual(int(info["tls_port"]), self.srv.tls_port)
        self.assertEqual(int(info["tcp_port"]), self.srv.port)
        self.assertNotEqual(self.srv.tls_port, self.srv.port)
        self.assertEqual(int(info["tls_handshakes"]), before + 2)

    def test_redis_py_ssl(self):
        """redis-py with ssl=True: decisions, PING, INFO, exact replies."""
        r = self.srv.tls_redis()
        try:
            self.assertTrue(r.ping())
            self.assertEqual(r.execute_command("RL.ALLOW", "py:1", 2, "1s", "AT", BASE),
                             [1, 2, 1, 0, 500, 0])
            self.assertEqual(r.execute_command("RL.ALLOW", "py:1", 2, "1s", "AT", BASE),
                             [1, 2, 0, 0, 1000, 0])
            self.assertEqual(r.execute_command("RL.ALLOW", "py:1", 2, "1s", "AT", BASE),
                             [0, 2, 0, 500, 1000, 0])
            self.assertEqual(r.info("server")["tls_port"], self.srv.tls_port)
        finally:
            r.close()

    def test_pipelining_over_tls(self):
        """5,000 RL.ALLOW sent in one go (about 300 KB: many TLS records,
        several turns of the server) and 200 through redis-py's pipeline:
        every reply, in order, exact."""
        n = 5000
        cmds = b"".join(encode("RL.ALLOW", "pipe:%d" % (i % 7), 10 ** 6, "1h", *FW, "AT", BASE)
                        for i in range(n))
        self.assertGreater(len(cmds), 256 * KB)
        with self.srv.tls() as c:
            c.send(cmds)
            got = c.read_replies(n, timeout=60)
            for i, v in enumerate(got):
                self.assertEqual(v, [1, 10 ** 6, 10 ** 6 - 1 - i // 7, 0, 3600000, 0], i)
            self.assertEqual(c.cmd("PING"), b"PONG")
        r = self.srv.tls_redis()
        try:
            p = r.pipeline(transaction=False)
            for i in range(200):
                p.execute_command("RL.ALLOW", "pyp", 100, "1h", *FW, "AT", BASE)
            got = p.execute()
            self.assertEqual(got, [[1 if i < 100 else 0, 100, max(0, 99 - i),
                                    0 if i < 100 else 3600000, 3600000, 0] for i in range(200)])
        finally:
            r.close()

    def test_auth_over_tls(self):
        """A server with a password, over TLS: `redis-cli --tls -a PASS` and
        redis-py's ssl=True with password= log in and decide; without the
        password, NOAUTH, as over TCP."""
        d = tempfile.mkdtemp(prefix="sluice-tls-auth-")
        self.addCleanup(shutil.rmtree, d, True)
        pw = os.path.join(d, "password")
        with open(pw, "w") as f:
            f.write("tls-s3cret\n")
        os.chmod(pw, 0o600)
        s = self.tls_server(*tls_args(), "--requirepass-file", pw, trust_client_time=True)
        rc, out, err = redis_cli(s.tls_port, "--cacert", cert("ca.crt"), "--no-auth-warning",
                                 "-a", "tls-s3cret", "RL.ALLOW", "authed", 2, "1h", *FW, "AT", BASE)
        self.assertEqual((rc, out), (0, "1\n2\n1\n0\n3600000\n0\n"))
        rc, out, err = redis_cli(s.tls_port, "--cacert", cert("ca.crt"), "RL.ALLOW", "authed", 2,
                                 "1h")
        self.assertEqual(out.strip(), "NOAUTH Authentication required.")
        r = s.tls_redis(password="tls-s3cret")
        try:
            self.assertEqual(r.execute_command("RL.ALLOW", "authed", 2, "1h", *FW, "AT", BASE),
                             [1, 2, 0, 0, 3600000, 0])
        finally:
            r.close()

    def test_quit_over_tls(self):
        """QUIT: +OK, then a clean TLS close (close_notify, then EOF)."""
        with self.srv.tls() as c:
            self.assertEqual(c.cmd("ECHO", "hi"), b"hi")
            c.send(encode("QUIT"))
            self.assertEqual(c.read_until_eof(), [b"OK"])
            self.assertFalse(c.reset, "closed cleanly, not reset")

    def test_plain_text_on_the_tls_port(self):
        """A client speaking RESP in clear to the TLS port is closed, gets
        no reply, and is counted and logged as a failed handshake; the
        server serves on, in clear and over TLS."""
        before = self.srv.info_int("tls_handshake_failures", "stats")
        with RawConn(self.srv.tls_port) as c:
            c.send(encode("PING"))
            try:
                data = c.read_until_eof()
            except ValueError as e:  # the TLS alert is not RESP
                data = str(e)
            self.assertNotIn(b"PONG", repr(data).encode())
        self.srv.wait_info("tls_handshake_failures", lambda v: v == before + 1, "stats")
        self.srv.wait_log(r'msg="TLS handshake failed" client=127\.0\.0\.1:\d+ '
                         r'worker=\d+ err="wrong version number"')
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        with self.srv.tls() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")

    def test_wrong_ca_fails_on_the_client(self):
        """A client that trusts another CA refuses the server's certificate:
        redis-cli exits non-zero saying so, Python's ssl raises a
        certificate error, nothing is decided; the server counts the
        failed handshakes and serves on."""
        before = self.srv.info(None)
        with self.assertRaises(ssl.SSLCertVerificationError):
            TlsConn(self.srv.tls_port, ctx=client_context("other-ca.crt")).close()
        fails = self.srv.wait_info("tls_handshake_failures",
                                   lambda v: v == int(before["tls_handshake_failures"]) + 1,
                                   "stats")
        self.srv.wait_log(r'msg="TLS handshake failed" client=127\.0\.0\.1:\d+ '
                         r'worker=\d+ err="tlsv1 alert unknown ca"')
        rc, out, err = redis_cli(self.srv.tls_port, "--cacert", cert("other-ca.crt"),
                                 "RL.ALLOW", "wrongca", 1, "1h")
        self.assertNotEqual(rc, 0)
        self.assertIn("SSL_connect failed: certificate verify failed", out + err)
        # (redis-cli may try twice)
        self.srv.wait_info("tls_handshake_failures", lambda v: v > fails, "stats")
        info = self.srv.info()
        self.assertEqual(info["decisions"], before["decisions"])
        with self.srv.tls() as c:
            # untouched: a fresh key's answer
            self.assertEqual(c.cmd("RL.PEEK", "wrongca", 1, "1h"), [1, 1, 0, 0, 3600000, 0])

    def test_tls_1_2_at_least(self):
        """A client offering TLS 1.1 only (openssl s_client, its security
        level lowered so that it may) is refused by the server: "protocol
        version" alert, logged as "unsupported protocol".  TLS 1.2 and 1.3
        both serve."""
        before = self.srv.info_int("tls_handshake_failures", "stats")
        p = subprocess.run(["openssl", "s_client", "-connect", "%s:%d" % (HOST, self.srv.tls_port),
                            "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"],
                           input=b"PING\r\n", capture_output=True, timeout=30 * SLOW)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        self.assertIn("alert protocol version", out)
        self.assertNotIn("PONG", out)
        self.srv.wait_info("tls_handshake_failures", lambda v: v == before + 1, "stats")
        self.srv.wait_log(r'msg="TLS handshake failed" client=127\.0\.0\.1:\d+ '
                         r'worker=\d+ err="unsupported protocol"')
        ctx = client_context()
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with TlsConn(self.srv.tls_port, ctx=ctx) as c:
            self.assertEqual(c.sock.version(), "TLSv1.2")
            self.assertEqual(c.cmd("PING"), b"PONG")
        with self.srv.tls() as c:
            self.assertEqual(c.sock.version(), "TLSv1.3")
            self.assertEqual(c.cmd("PING"), b"PONG")


class TestClientCertificates(TlsTestCase):
    """--tls-auth-clients yes (the default): a client must show a
    certificate signed by --tls-ca-cert-file's CA."""

    AUTH = "yes"

    def refused(self, ctx):
        """A TLS client the server refuses: the handshake fails, or (TLS
        1.3, where the client is done before the server has checked its
        certificate) the first read sees the server's alert and close."""
        try:
            c = TlsConn(self.srv.tls_port, ctx=ctx)
        except (ssl.SSLError, ConnectionError):
            return
        with c:
            try:
                got = c.cmd("PING")
            except (ssl.SSLError, ConnectionError, EOFError):
                return
            self.fail("refused client got a reply: %r" % (got,))

    def test_client_without_certificate_is_refused(self):
        before = self.srv.info_int("tls_handshake_failures", "stats")
        rc, out, err = redis_cli(self.srv.tls_port, "--cacert", cert("ca.crt"), "PING")
        self.assertNotIn("PONG", out)
        self.refused(client_context())
        self.srv.wait_info("tls_handshake_failures", lambda v: v == before + 2, "stats")
        self.srv.wait_log(r'msg="TLS handshake failed" client=127\.0\.0\.1:\d+ '
                         r'worker=\d+ err="peer did not return a certificate"')

    def test_client_of_another_ca_is_refused(self):
        before = self.srv.info_int("tls_handshake_failures", "stats")
        self.refused(client_context(client="stranger"))
        self.srv.wait_info("tls_handshake_failures", lambda v: v == before + 1, "stats")
        self.srv.wait_log(r'msg="TLS handshake failed" client=127\.0\.0\.1:\d+ '
                         r'worker=\d+ err=".*certificate verify failed.*client certificate: '
                         r'unable to get local issuer certificate"')

    def test_client_with_certificate_is_served(self):
        rc, out, err = redis_cli(self.srv.tls_port, "--cacert", cert("ca.crt"),
                                 "--cert", cert("client.crt"), "--key", cert("client.key"),
                                 "RL.ALLOW", "certified", 3, "1h", *FW, "AT", BASE)
        self.assertEqual((rc, out, err), (0, "1\n3\n2\n0\n3600000\n0\n", ""))
        with TlsConn(self.srv.tls_port, ctx=client_context(client="client")) as c:
            self.assertEqual(c.cmd("RL.ALLOW", "certified", 3, "1h", *FW, "AT", BASE),
                             [1, 3, 1, 0, 3600000, 0])

    def test_optional(self):
        """--tls-auth-clients optional: no certificate is fine, one of the
        CA's is fine, one of another CA is refused."""
        s = self.tls_server(*tls_args("optional"))
        with s.tls() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        with TlsConn(s.tls_port, ctx=client_context(client="client")) as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        srv, self.srv = self.srv, s
        try:
            self.refused(client_context(client="stranger"))
        finally:
            self.srv = srv


class TestTlsLimits(TlsTestCase):
    """The connection limits hold for TLS clients as for plain ones."""

    N = 20 if harness.KIND == "tsan" else 60 if SAN else 300

    def flood(self, srv, n):
        """n TLS connections, handshaken, each sending 64 KB of INFO\\r\\n
        and never reading.  Returns (sockets, pending: socket -> bytes not
        yet written)."""
        payload = memoryview(b"INFO\r\n" * (64 * KB // 6))
        socks = []
        ctx = client_context()
        try:
            for _ in range(n):
                socks.append(TlsConn(srv.tls_port, ctx=ctx).sock)
                socks[-1].setblocking(False)
        except BaseException:
            for s in socks:
                s.close()
            raise
        return socks, {s: payload for s in socks}

    @staticmethod
    def send_some(pending):
        for s in list(pending):
            try:
                n = s.send(pending[s])
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError:
                del pending[s]
                continue
            if n == len(pending[s]):
                del pending[s]
            else:
                pending[s] = pending[s][n:]

    def test_output_bound_holds_for_tls_clients_that_do_not_read(self):
        """N TLS clients flood INFO without reading: each is held at the
        pause bound (client_output_bytes at most OUT_PAUSE plus one INFO
        reply each, none cut), the RSS stays within N x 256 KB of where it
        started (measured: about 110 KB a client, OpenSSL's state and
        record buffers included), and a plain client's PING answers within a second
        throughout.  When they leave, the held output is 0 again."""
        from test_hostile_output import quarantine  # ASan's, kept small: RSS is the server's
        with quarantine():
            srv = self.tls_server(*tls_args(), "--send-timeout", "0")
        with srv.raw() as normal:
            self.assertEqual(normal.cmd("PING"), b"PONG")
            base = srv.rss_kb()
            socks, pending = self.flood(srv, self.N)
            try:
                peak, held = base, 0
                until = deadline(60)
                while time.monotonic() < until:
                    self.send_some(pending)
                    # answered all along (within RawConn's read deadline;
                    # how fast is for the machine's load to say)
                    self.assertEqual(normal.cmd("PING"), b"PONG")
                    peak = max(peak, srv.rss_kb())
                    held = int(parse_info(normal.cmd("INFO", "clients"))["client_output_bytes"])
                    if not pending and held > self.N * OUT_PAUSE:
                        break
                    time.sleep(0.02)
                else:
                    self.fail("not settled: %d clients still sending, client_output_bytes %d"
                              % (len(pending), held))
                peak = max(peak, srv.rss_kb())
                info = parse_info(normal.cmd("INFO"))
                self.assertEqual(int(info["connected_clients"]), self.N + 1)
                self.assertEqual(int(info["clients_cut_output"]), 0)
                self.assertEqual(int(info["clients_cut_output_total"]), 0)
                self.assertLessEqual(int(info["client_output_bytes"]),
                                     self.N * (OUT_PAUSE + 4 * KB))
                self.assertEqual(int(info["tls_handshakes"]), self.N)
                alloc = 32 * 1024 if SAN else 0
                self.assertLess(peak - base, self.N * 256 + 64 * 1024 + alloc,
                                "VmRSS %d kB at peak, %d kB before" % (peak, base))
            finally:
                for s in socks:
                    s.close()
        # (INFO's own connection is one)
        srv.wait_info("connected_clients", lambda v: v == 1, "clients", timeout=30)
        self.assertEqual(srv.info_int("client_output_bytes", "clients"), 0)

    def test_total_budget_cuts_tls_clients(self):
        """--max-output-total 1mb: TLS clients that do not read are cut,
        the ones holding the most first, until what is held is within the
        budget; each cut is counted."""
        srv = self.tls_server(*tls_args(), "--send-timeout", "0", "--max-output-total", "1mb")
        n = 40
        with srv.raw() as normal:
            socks, pending = self.flood(srv, n)
            try:
                until = deadline(60)
                while time.monotonic() < until:
                    self.send_some(pending)
                    self.assertEqual(normal.cmd("PING"), b"PONG")
                    info = parse_info(normal.cmd("INFO"))
                    cut = int(info["clients_cut_output_total"])
                    if (not pending and cut > 0 and int(info["connected_clients"]) == n + 1 - cut
                            and int(info["client_output_bytes"]) <= 1 * MB):
                        break
                    time.sleep(0.02)
                else:
                    self.fail("not settled: %d still sending, INFO %r"
                              % (len(pending), {k: info[k] for k in (
                                  "clients_cut_output_total", "client_output_bytes",
                                  "connected_clients")}))
                self.assertLessEqual(int(info["client_output_bytes"]), 1 * MB)
                self.assertLess(cut, n)
            finally:
                for s in socks:
                    s.close()

    def test_send_timeout_cuts_a_tls_client_that_does_not_read(self):
        """A TLS client that stops reading is cut after --send-timeout,
        counted in clients_cut_output."""
        srv = self.tls_server(*tls_args(), "--send-timeout", "1s")
        socks, pending = self.flood(srv, 1)
        try:
            until = deadline(20)
            while time.monotonic() < until and srv.info_int("clients_cut_output", "stats") == 0:
                self.send_some(pending)
                time.sleep(0.05)
            self.assertEqual(srv.info_int("clients_cut_output", "stats"), 1)
            srv.wait_info("connected_clients", lambda v: v == 1, "clients")  # INFO's own
        finally:
            socks[0].close()

    def test_handshake_and_commands_within_recv_timeout(self):
        """A connection to the TLS port that never completes its handshake
        (it sends a byte, then nothing) is closed after --recv-timeout and
        counted as a failed handshake; a TLS client whose command stops
        half-way is cut by --recv-timeout as a plain one."""
        srv = self.tls_server(*tls_args(), "--recv-timeout", "%dms" % int(1000 * SLOW))
        with RawConn(srv.tls_port) as c:
            c.send(b"\x16")  # the first byte of a TLS handshake record
            # closed (within read_until_eof's deadline); that it was
            # recv-timeout that closed it, the log line below says
            self.assertEqual(c.read_until_eof(timeout=10), [])
        srv.wait_info("tls_handshake_failures", lambda v: v == 1, "stats")
        srv.wait_log(r'err="no handshake within recv-timeout"')
        with srv.tls() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
            c.send(encode("ECHO", "x" * 40)[:20])
            self.assertEqual(c.read_until_eof(timeout=10), [])
        srv.wait_info("clients_cut_recv", lambda v: v == 1, "stats")

    def test_idle_timeout_closes_a_silent_tls_client(self):
        """--idle-timeout: a TLS client that has sent nothing for that long
        is closed (cleanly) and counted in clients_cut_idle; one that sends
        in time is not."""
        idle = int(1000 * SLOW)
        srv = self.tls_server(*tls_args(), "--idle-timeout", "%dms" % idle)
        with srv.tls() as quiet, srv.tls() as busy:
            self.assertEqual(quiet.cmd("PING"), b"PONG")
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.5 * idle / 1000:
                self.assertEqual(busy.cmd("PING"), b"PONG")
                time.sleep(idle / 10000)  # a tenth of the timeout: a margin load keeps
            self.assertEqual(quiet.read_until_eof(timeout=10), [])
            self.assertGreaterEqual(time.monotonic() - t0, idle / 1000 * 0.9)
            self.assertEqual(busy.cmd("PING"), b"PONG")
        srv.wait_info("clients_cut_idle", lambda v: v == 1, "stats")

    def test_stop_answers_what_tls_clients_sent(self):
        """SIGTERM right after a TLS client sent commands: every one of them
        is answered before its connection closes (cleanly), as a plain
        client's, and the server exits with status 0."""
        srv = self.tls_server(*tls_args())
        with srv.tls() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
            c.send(b"".join(encode("ECHO", "e%d" % i) for i in range(2000)))
            srv.proc.terminate()
            got = c.read_until_eof(timeout=30)
        self.assertEqual(got, [b"e%d" % i for i in range(2000)])
        self.assertEqual(srv.proc.wait(30 * SLOW), 0)


class TestTlsOnly(unittest.TestCase):

    def test_port_off_serves_tls_only(self):
        """--port off: no plain listener at all; TLS serves, INFO says
        tcp_port 0, and the log's hint is a redis-cli --tls line."""
        s = TlsServer("--port", "off", *tls_args(), name="tls-only")
        s.start()
        self.addCleanup(s.cleanup)
        from test_config import listening_ports
        self.assertEqual(listening_ports(s.pid), {s.tls_port})
        with s.tls() as c:
            info = parse_info(c.cmd("INFO", "server"))
        self.assertEqual(info["tcp_port"], "0")
        self.assertEqual(int(info["tls_port"]), s.tls_port)
        self.assertIn('hint="try: redis-cli --tls --cacert CA.crt -p %d' % s.tls_port, s.log())


class TestTlsConfig(unittest.TestCase):
    """Bad TLS settings refuse the start, naming the option, the file and
    the reason; nothing listens."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-tls-conf-")
        os.chmod(self.dir, 0o755)
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name, text=None, mode=0o644):
        p = os.path.join(self.dir, name)
        if text is not None:
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, mode)
        return p

    def assertRefused(self, args, status, *want, user=None):
        rc, msg = refused_start(args, user=user)
        self.assertEqual(rc, status, msg)
        for w in want:
            self.assertIn(w, msg)
        return msg

    def test_missing_cert_file_named(self):
        missing = self.path("nope.crt")
        self.assertRefused(["--tls-port", "0", "--tls-cert-file", missing, "--tls-key-file",
                            cert("server.key"), "--tls-auth-clients", "no"], 2,
                           "sluiced: --tls-cert-file '%s': cannot read it: No such file or "
                           "directory" % missing)

    def test_unreadable_key_file_named(self):
        """A key only root may read, sluiced run as nobody (root reads any
        file whatever its mode)."""
        key = self.path("server.key", open(cert("server.key")).read(), 0o600)
        self.assertRefused(["--tls-port", "0", "--tls-cert-file", cert("server.crt"),
                            "--tls-key-file", key, "--tls-auth-clients", "no"], 2,
                           "sluiced: --tls-key-file '%s': cannot read it: Permission denied" % key,
                           user=65534 if os.geteuid() == 0 else None)

    def test_bad_files_named_with_openssl_reason(self):
        garbage = self.path("garbage.crt", "not a certificate\n")
        other_key = os.path.join(CERTS, "client.key")
        fifo = self.path("fifo.crt")
        os.mkfifo(fifo)
        base = ["--tls-port", "0", "--tls-auth-clients", "no"]
        srv = ["--tls-cert-file", cert("server.crt"), "--tls-key-file", cert("server.key")]
        self.assertRefused(base + ["--tls-cert-file", garbage, "--tls-key-file",
                                   cert("server.key")], 2,
                           "--tls-cert-file '%s': no PEM certificate in it (OpenSSL: no start "
                           "line" % garbage)
        self.assertRefused(base + ["--tls-cert-file", cert("server.crt"), "--tls-key-file",
                                   other_key], 2,
                           "--tls-key-file '%s' does not match --tls-cert-file '%s' (OpenSSL: "
                           "key values mismatch)" % (other_key, cert("server.crt")))
        t0 = time.monotonic()
        self.assertRefused(base + ["--tls-cert-file", fifo, "--tls-key-file",
                                   cert("server.key")], 2,
                           "--tls-cert-file '%s': cannot read it: a FIFO, not a file" % fifo)
        self.assertLess(time.monotonic() - t0, 10 * SLOW, "a FIFO does not block the start")
        self.assertRefused(base + srv + ["--tls-ca-cert-file", self.dir], 2,
                           "--tls-ca-cert-file '%s': cannot read it: a directory, not a file"
                           % self.dir)
        self.assertRefused(base + srv + ["--tls-ca-cert-file", garbage], 2,
                           "--tls-ca-cert-file '%s': no PEM certificate in it" % garbage)
        enc = self.path("enc.key")
        openssl("pkey", "-in", cert("server.key"), "-out", enc, "-aes256", "-passout",
                "pass:secret")
        self.assertRefused(base + ["--tls-cert-file", cert("server.crt"), "--tls-key-file", enc],
                           2, "--tls-key-file '%s': the key is encrypted" % enc)

    def test_inconsistent_options(self):
        key, crt = cert("server.key"), cert("server.crt")
        self.assertRefused(["--tls-port", "0"], 2,
                           "sluiced: --tls-port needs --tls-cert-file and --tls-key-file")
        self.assertRefused(["--tls-cert-file", crt, "--tls-key-file", key], 2,
                           "sluiced: --tls-cert-file is given but --tls-port is not")
        self.assertRefused(["--tls-port", "0", "--tls-cert-file", crt, "--tls-key-file", key], 2,
                           "sluiced: --tls-auth-clients yes (the default, as Redis's) needs "
                           "--tls-ca-cert-file")
        self.assertRefused(["--tls-port", "0", "--tls-cert-file", crt, "--tls-key-file", key,
                            "--tls-auth-clients", "maybe"], 2,
                           "sluiced: invalid --tls-auth-clients 'maybe': expected yes, no or "
                           "optional")
        rc, msg = refused_start(["--port", "off"])  # the helper's --port comes first
        self.assertEqual(rc, 2, msg)
        self.assertIn("--port off leaves nothing to listen on", msg)
        p = free_port()
        self.assertRefused(["--tls-port", str(p), "--port", str(p), "--tls-cert-file", crt,
                            "--tls-key-file", key, "--tls-auth-clients", "no"], 2,
                           "--tls-port %d is also --port" % p)

    def test_config_file_twins(self):
        """Every TLS option in a config file means what its flag means."""
        conf = self.path("sluiced.conf",
                         "port off\ntls-port 0\ntls-cert-file %s\ntls-key-file \"%s\"\n"
                         "tls-ca-cert-file %s\ntls-auth-clients optional\n"
                         % (cert("server.crt"), cert("server.key"), cert("ca.crt")))
        s = TlsServer("--config", conf, name="tls-conf")
        s.args = ["--port", "off"] + s.args  # TlsServer's TLS-only start
        s.start()
        self.addCleanup(s.cleanup)
        with s.tls() as c:  # optional: no certificate needed
            self.assertEqual(c.cmd("PING"), b"PONG")
        self.assertIn("auth_clients=optional", s.log())


if __name__ == "__main__":
    unittest.main()
