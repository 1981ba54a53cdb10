"""A real proxy: Debian's nginx running examples/nginx/nginx.conf (ports
changed to free ones) in front of its own small upstream, asking sluiced's
forward-auth (/v1/auth/edge, --auth-deny-status 403) before every request.

One client address sends a fixed sequence of requests; exactly the
remote_address limit's worth pass, the rest get 429 from nginx with
sluiced's headers passed through.  Then `sluicectl replay --rules` over
nginx's own access log of that run gives the same decisions, line by
line: forward-auth's descriptors are the ones replay reads from the log.

nginx is a test dependency (scripts/deps.sh): without it this test fails,
it does not skip."""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from harness import BUILD, HOST, ROOT, SLOW, ServerTestCase, deadline, free_port, wait_window_room
from sf_list import parse_list

NGINX = "/usr/sbin/nginx"
EXAMPLE = os.path.join(ROOT, "examples", "nginx")

# The example's rules, plus one on a path with bytes nginx's log escapes.
EXTRA_RULE = r"""
  - key: path
    value: '/caf\xC3\xA9'
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

# (target, the status the client must get, X-RateLimit-Limit on a 429)
SEQUENCE = [
    (b"/login?try=1", 200, None),
    (b"/login?try=2", 200, None),
    (b"/login?try=3", 200, None),
    (b"/login?try=4", 429, "3"),     # /login: 3 a minute
    (b"/caf\xc3\xa9", 200, None),
    (b"/caf\xc3\xa9?again", 429, "1"),  # its own rule, 1 a minute
    (b"/home", 200, None),           # the 5th pass for this address
    (b"/home", 429, "5"),            # remote_address: 5 a minute
    (b"/home?x=1", 429, "5"),
]


def raw_get(port, target, timeout):
    """GET target (bytes, sent as is) over a fresh connection; returns
    (status, {header: value}).  Headers repeated are joined with ", "."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: shop.example\r\n"
                  b"User-Agent: sluice-test\r\nConnection: close\r\n\r\n")
        data = b""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ")[1])
    headers = {}
    for line in head[1:]:
        k, _, v = line.partition(":")
        k, v = k.strip(), v.strip()
        headers[k] = headers[k] + ", " + v if k in headers else v
    return status, headers


class TestNginxInFront(ServerTestCase):
    HTTP = False

    def setUp(self):
        if not os.access(NGINX, os.X_OK):
            self.fail("%s is missing: install Debian's nginx (scripts/deps.sh lists it)" % NGINX)
        self.dir = tempfile.mkdtemp(prefix="sluice-nginx-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        os.chmod(self.dir, 0o755)  # nginx's workers may run as another user
        os.mkdir(os.path.join(self.dir, "logs"))
        self.rules = os.path.join(self.dir, "edge.yaml")
        with open(os.path.join(EXAMPLE, "edge.yaml")) as f:
            rules = f.read()
        with open(self.rules, "w") as f:
            f.write(rules + EXTRA_RULE)

    def start_nginx(self, sluiced_port):
        self.front, app = free_port(), free_port()
        with open(os.path.join(EXAMPLE, "nginx.conf")) as f:
            conf = f.read()
        for old, new in (("127.0.0.1:8390", "127.0.0.1:%d" % sluiced_port),
                         ("127.0.0.1:8080", "127.0.0.1:%d" % self.front),
                         ("127.0.0.1:8081", "127.0.0.1:%d" % app)):
            self.assertIn(old, conf)  # the example still has what is replaced
            conf = conf.replace(old, new)
        path = os.path.join(self.dir, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        log = open(os.path.join(self.dir, "nginx.out"), "wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", path, "-e",
                                 os.path.join(self.dir, "logs", "error.log"), "-g", "daemon off;"],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(self.stop_nginx, proc)
        until = deadline(15)
        while time.monotonic() < until:
            if proc.poll() is not None:
                self.fail("nginx exited with status %s:\n%s" % (proc.returncode, self.nginx_log()))
            try:
                socket.create_connection((HOST, self.front), timeout=1).close()
                return proc
            except OSError:
                time.sleep(0.02)
        self.fail("nginx did not listen on %d:\n%s" % (self.front, self.nginx_log()))

    def stop_nginx(self, proc):
        if proc.poll() is None:
            proc.terminate()  # by PID: nginx's fast shutdown
            try:
                proc.wait(timeout=15 * SLOW)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def nginx_log(self):
        text = ""
        for name in ("nginx.out", os.path.join("logs", "error.log")):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text += f.read()
            except OSError:
                pass
        return text

    def test_limit_passes_rest_429_and_replay_agrees(self):
        srv = self.new_server("--rules", self.rules, "--trusted-proxies", "127.0.0.1",
                              "--auth-deny-status", "403", http=True)
        proc = self.start_nginx(srv.http_port)
        # The rules count per minute, nginx logs whole seconds: start the
        # run well inside one minute, so sluiced's clock and the log's agree
        # on the window of every request.
        wait_window_room(60, 5)
        answers = [raw_get(self.front, target, 10 * SLOW) for target, _, _ in SEQUENCE]
        self.stop_nginx(proc)  # the access log is whole

        self.assertEqual([a[0] for a in answers], [want for _, want, _ in SEQUENCE],
                         self.nginx_log())
        self.assertEqual(sum(1 for a in answers if a[0] == 200), 5)  # remote_address: 5
        for (target, status, limit), (_, h) in zip(SEQUENCE, answers):
            names = [n for n, _ in parse_list(h["RateLimit-Policy"])]
            self.assertEqual(names[0], "edge.remote_address", target)
            self.assertEqual(len(parse_list(h["RateLimit"])), len(names), target)
            if status == 429:
                self.assertEqual(h["X-RateLimit-Limit"], limit, target)
                self.assertEqual(h["X-RateLimit-Remaining"], "0", target)
                self.assertTrue(1 <= int(h["Retry-After"]) <= 60, (target, h))
            else:
                self.assertNotIn("Retry-After", h, target)

        with open(os.path.join(self.dir, "logs", "access.log"), "rb") as f:
            log = f.read()
        lines = log.decode("latin-1").splitlines()
        self.assertEqual(len(lines), len(SEQUENCE), log)
        # nginx's log escapes the bytes as replay reads them (docs/replay.md)
        self.assertIn('"GET /caf\\xC3\\xA9 HTTP/1.1"', lines[4])
        out = subprocess.run([os.path.join(BUILD, "sluicectl"), "replay", "--rules", self.rules,
                              "--domain", "edge", "--log-format", "combined",
                              os.path.join(self.dir, "logs", "access.log")],
                             capture_output=True, timeout=60 * SLOW)
        self.assertEqual(out.returncode, 0, out.stderr)
        replayed = out.stdout.decode().splitlines()
        self.assertEqual(len(replayed), len(SEQUENCE), out.stdout)
        for i, (line, logline, (status, h)) in enumerate(zip(replayed, lines, answers)):
            f = line.split(" ")
            logged = int(re.search(r'" (\d{3}) ', logline).group(1))
            self.assertEqual(logged, status, logline)
            self.assertEqual(f[0], "1" if status == 200 else "0", (i, line, logline))
            self.assertEqual((f[1], f[2]), (h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"]),
                             (i, line, h))
            # the rules each descriptor met: replay's CODE:RULE against the
            # policies sluiced named (the ones that count for the client)
            rules = [c.partition(":")[2] for c in f[6:] if not c.startswith("NO_RULE")]
            names = [n for n, _ in parse_list(h["RateLimit-Policy"])]
            self.assertEqual(rules, names, (i, line, h))
