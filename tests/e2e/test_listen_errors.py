"""A port already taken stops sluiced's start with a message that names the
option that asked for it, for every kind of listener: `cannot listen on
127.0.0.1:8390 (--http-port): Address already in use` -- the README's
fleet example used to stop on the second node with the same address and
no hint of which of its three default ports (--port 6390, --http-port 8390,
--grpc-port 8391) was the one.  The start stops there: no "listening"
line."""

import os
import shutil
import socket
import subprocess
import tempfile
import unittest

from harness import HOST, SLUICED, SLOW, run_checked

CERTS = None


def setUpModule():
    global CERTS
    CERTS = tempfile.mkdtemp(prefix="sluice-listen-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    os.path.join(CERTS, "s.key"), "-out", os.path.join(CERTS, "s.crt"),
                    "-days", "3", "-subj", "/CN=localhost"],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=60)


def tearDownModule():
    shutil.rmtree(CERTS, True)


class ListenErrors(unittest.TestCase):

    def occupy(self):
        """A socket listening on a free loopback port: its port."""
        s = socket.socket()
        s.bind((HOST, 0))
        s.listen(1)
        self.addCleanup(s.close)
        return s.getsockname()[1]

    def start(self, *args):
        """sluiced with every listener on a free port or off, then args
        (with a certificate when they ask for a TLS listener)."""
        tls = []
        if {"--tls-port", "--https-port", "--grpc-tls-port"} & set(args):
            tls = ["--tls-cert-file", os.path.join(CERTS, "s.crt"),
                   "--tls-key-file", os.path.join(CERTS, "s.key"), "--tls-auth-clients", "no"]
        argv = [SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0"] + tls + \
            [str(a) for a in args]
        p = run_checked(argv, capture_output=True, timeout=30 * SLOW)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    def test_each_listener_names_its_option(self):
        for opt in ("--port", "--tls-port", "--http-port", "--https-port", "--grpc-port",
                    "--grpc-tls-port"):
            with self.subTest(opt=opt):
                taken = self.occupy()
                rc, out = self.start(opt, taken)
                self.assertEqual(rc, 1, out)
                want = ' level=error msg="cannot listen on %s:%d (%s): Address already in use"\n' % (
                    HOST, taken, opt)
                self.assertIn(want, out)
                self.assertNotIn('msg="listening', out)

    def test_the_readme_fleet_case(self):
        """Two nodes with the default HTTP port: the second is told which
        option to change (the port is given here as the default would be,
        on a port free for this test)."""
        taken = self.occupy()
        rc, out = self.start("--http-port", taken)
        self.assertEqual(rc, 1, out)
        self.assertIn('msg="cannot listen on 127.0.0.1:%d (--http-port): Address already in use"'
                      % taken, out)

    def test_ipv6_listener(self):
        s = socket.socket(socket.AF_INET6)
        try:
            s.bind(("::1", 0))
        except OSError as e:
            self.fail("no ::1 on this machine: %s" % e)
        s.listen(1)
        self.addCleanup(s.close)
        taken = s.getsockname()[1]
        rc, out = self.start("--bind", "::1", "--grpc-port", taken)
        self.assertEqual(rc, 1, out)
        self.assertIn(' level=error msg="cannot listen on [::1]:%d (--grpc-port): Address already '
                      'in use"\n' % taken, out)


if __name__ == "__main__":
    unittest.main()
