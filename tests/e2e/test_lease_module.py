"""test_lease_module.py -- the sluice module's leases for token-bucket,
gcra and sliding-window (RL.LEASE, RL.LEASERETURN, RL.LEASEINFO: docs/module.md,
docs/fleet.md "Through the module"), in a real redis-server with
build/sluice.so, at client times (AT: nothing here depends on the clock).
What a user -- sluiced, or an operator -- would notice:

- RL.LEASEINFO names the algorithms the module leases (sluiced asks it);
- a bucket's lease: the exact reply; while its units are out, every
  decision on the key finds the refill stopped short of B by them (a
  strict bucket, tokens here plus tokens held never above B); a return
  puts back what the bucket can hold; too late (settled) nothing;
- the units out survive DEBUG RELOAD (RDB) and reach a replica (the same
  bytes);
- a sliding window's lease: in the window's count, back in that window
  only;
- a value saved by the module's previous encoding (version 0, no lease
  tails) still loads; a later version is refused.
"""

# sluice-e2e: no-tsan
# The module runs inside redis-server on Redis's main thread only (see
# test_module.py): TSan has no second thread of ours to watch. ASan+UBSan run
# it.

import tempfile
import time
import unittest

from harness import BASE, HOST, RespError, deadline
from test_module import ModuleCase
from test_module_restore import parse, build, seal

TRUST = ("trust-client-time", "yes", "max-client-skew", "7d")
EPOCH = 250


class TestBucketLeases(ModuleCase):

    def test_leaseinfo_names_the_leasing_algorithms(self):
        r = self.redis()
        with r.conn() as c:
            got = c.cmd("RL.LEASEINFO")
            self.assertIsInstance(got, list, got)
            names = sorted(x.decode() if isinstance(x, bytes) else x for x in got)
            self.assertEqual(names, ["fixed-window", "gcra", "sliding-buckets", "sliding-window",
                                     "token-bucket"])

    def check_bucket(self, algo):
        r = self.redis(*TRUST)
        key = "lb:" + algo
        req = [key, 10, 1000, "ALGO", algo]  # 1 token per 100 ms, B = 10
        t = BASE  # an epoch's start (BASE is a whole day)
        with r.conn() as c:
            got = c.cmd("RL.LEASE", 5, *req, "AT", t)
            # the request (cost 1) and 4 leased (at most half of the 9 left)
            self.assertEqual(got, [1, 10, 5, 0, 500, 0, 4, 500, t // EPOCH])
            tag = got[8]
            # 300 ms on, a bucket with nothing out would hold 8; with 4 out
            # its refill stops at 6 (RL.PEEK: cost 1, so 5 left after it)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 300), [1, 10, 5, 0, 500, 0])
            # 7 are more than it holds: denied, 6 left (retry_after counts
            # the refill, which units coming back may beat)
            self.assertEqual(c.cmd("RL.ALLOW", *req, "COST", 7, "AT", t + 300),
                             [0, 10, 6, 100, 400, 0])
            # the units survive a reload (RDB) and still hold the refill
            self.assertEqual(c.cmd("DEBUG", "RELOAD"), b"OK")
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 300), [1, 10, 5, 0, 500, 0])
            # 3 of the 4 come back (the whole lease leaves what is out)
            self.assertEqual(c.cmd("RL.LEASERETURN", 3, tag, *req, "AT", t + 300, "TAKEN", 4), 3)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 300), [1, 10, 8, 0, 200, 0])
            # a second lease, 4 of 8, handed back after its epoch settled:
            # nothing goes back, and the refill goes on from when it was taken
            got = c.cmd("RL.LEASE", 5, *req, "AT", t + 300)
            self.assertEqual(got, [1, 10, 4, 0, 600, 0, 4, 450, (t + 300) // EPOCH])
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 700)[2], 5)  # held at B - 4
            self.assertEqual(c.cmd("RL.LEASERETURN", 4, got[8], *req, "AT", t + 750, "TAKEN",
                                   4), 0)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 750)[2], 7)
            # a return without TAKEN (an older sluiced): TAKEN = back
            got = c.cmd("RL.LEASE", 9, *req, "AT", t + 750)
            self.assertEqual(got[6], 3)  # half of the 7 left
            self.assertEqual(c.cmd("RL.LEASERETURN", 3, got[8], *req, "AT", t + 750), 3)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 750)[2], 6)
            self.assertEqual(c.cmd("RL.LEASERETURN", 1, got[8], *req, "TAKEN", "x"),
                             RespError("ERR TAKEN must be an integer in 0..1000000000000"))

    def test_token_bucket(self):
        self.check_bucket("token-bucket")

    def test_gcra(self):
        self.check_bucket("gcra")

    def test_sliding_window(self):
        r = self.redis(*TRUST)
        req = ["lsw", 100, 1000, "ALGO", "sliding-window"]
        t = BASE + 200
        with r.conn() as c:
            got = c.cmd("RL.LEASE", 41, *req, "AT", t)
            self.assertEqual(got[:4] + got[5:], [1, 100, 59, 0, 0, 40, 800, t // 1000])
            self.assertEqual(c.cmd("RL.LEASERETURN", 30, got[8], *req, "AT", t + 100), 30)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 100)[2], 88)
            # the next window: nothing (its previous count stays)
            self.assertEqual(c.cmd("RL.LEASERETURN", 10, got[8], *req, "AT", t + 900), 0)

    def test_sliding_buckets(self):
        """A lease is charged to the current bucket (W / P ms), lasts until
        that bucket ends, and goes back into it while it is in the window
        -- past the lease's end too -- but not once it has slid out."""
        r = self.redis(*TRUST)
        req = ["lsb", 100, 1000, "ALGO", "sliding-buckets", "PRECISION", 10]  # 100 ms buckets
        t = BASE + 250
        with r.conn() as c:
            got = c.cmd("RL.LEASE", 41, *req, "AT", t)
            # the request and 40 leased (at most half of the 99 left), until
            # the bucket's end 50 ms on; the tag is the bucket's index
            self.assertEqual(got[:4] + got[5:], [1, 100, 59, 0, 0, 40, 50, t // 100])
            self.assertEqual(c.cmd("RL.LEASERETURN", 30, got[8], *req, "AT", t + 30), 30)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 30)[2], 88)  # a peek counts its own unit
            # past the lease's end, its bucket still in the window: back into it
            self.assertEqual(c.cmd("RL.LEASERETURN", 5, got[8], *req, "AT", t + 500), 5)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 500)[2], 93)
            # never more than the bucket holds (6 units are left in it)
            self.assertEqual(c.cmd("RL.LEASERETURN", 9, got[8], *req, "AT", t + 600), 6)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 600)[2], 99)
            # a second lease, returned once its bucket has slid out: nothing
            got = c.cmd("RL.LEASE", 11, *req, "AT", t + 700)
            self.assertEqual(got[6], 10)
            self.assertEqual(c.cmd("RL.LEASERETURN", 10, got[8], *req, "AT", t + 1700), 0)
            self.assertEqual(c.cmd("RL.PEEK", *req, "AT", t + 1700)[2], 99)

    def test_replica_has_the_units_out(self):
        """RL.LEASE and RL.LEASERETURN reach the replica as themselves at
        their time (AT t verbatim; without AT, with the master's `AT now`
        appended -- after TAKEN): its bucket is the master's, units out and
        all.  The first lease is at a client time two days ahead, so the
        calls after it, at Redis's clock, are decided at the key's clock
        (SPEC 4): the same answers however slow the machine."""
        plain = ["--rdbcompression", "no"]  # DUMP's strings as they are (parse)
        master = self.redis(*TRUST, name="master", folder=tempfile.mkdtemp(dir=self.dir),
                            extra=plain + ["--repl-diskless-sync-delay", "0"])
        replica = self.redis(*TRUST, name="replica", folder=tempfile.mkdtemp(dir=self.dir),
                             extra=plain + ["--replicaof", HOST, str(master.port)])
        with master.conn() as m, replica.conn() as rc:
            until = deadline(30)
            while b"master_link_status:up" not in rc.cmd("INFO", "replication"):
                self.assertLess(time.monotonic(), until, "the replica did not connect")
                time.sleep(0.05)
            keys = []
            for algo in ("token-bucket", "gcra"):
                req = ["rep:" + algo, 1000, "1h", "ALGO", algo]
                got = m.cmd("RL.LEASE", 100, *req, "AT", BASE)
                self.assertEqual(got[6], 99)
                got2 = m.cmd("RL.LEASE", 50, *req)
                self.assertEqual(got2[6], 49)
                self.assertEqual(m.cmd("RL.LEASERETURN", 60, got[8], *req, "TAKEN", 99), 60)
                keys.append(req[0])
            self.assertEqual(m.cmd("WAIT", 1, 10000), 1)
            for k in keys:
                d = m.cmd("DUMP", k)
                self.assertEqual(rc.cmd("DUMP", k), d)
                # the units still out (49) are in the saved value
                fields = parse(d)[1]
                self.assertEqual(len(fields[2][1]), 12 + 10 + 18, fields)


class TestEncoding(ModuleCase):

    def test_version_0_loads_and_a_later_one_is_refused(self):
        r = self.redis(*TRUST)
        req = ["enc", 10, 1000, "ALGO", "token-bucket"]
        with r.conn() as c:
            c.cmd("RL.ALLOW", *req, "COST", 3, "AT", BASE)
            head, fields = parse(c.cmd("DUMP", "enc"))
            mid = int.from_bytes(head[2:10], "big")  # 0x81, then the id
            self.assertEqual(head[1], 0x81)
            self.assertEqual(mid & 0x3ff, 1, "the module's encoding version")
            for ver, want in ((0, b"OK"), (2, None)):
                h = head[:2] + ((mid & ~0x3ff) | ver).to_bytes(8, "big")
                got = c.cmd("RESTORE", "enc:%d" % ver, 0, seal(build(h, fields)))
                if want is None:
                    self.assertIsInstance(got, RespError)
                    self.assertIn("Bad data format", str(got))
                    continue
                self.assertEqual(got, want)
                self.assertEqual(c.cmd("RL.PEEK", "enc:%d" % ver, *req[1:], "AT", BASE),
                                 c.cmd("RL.PEEK", *req, "AT", BASE))


if __name__ == "__main__":
    unittest.main()
