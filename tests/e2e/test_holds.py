"""Concurrency leases and reservations (SPEC section 10, issue 29) over RESP
(redis-py, RESP2 and RESP3) and HTTP, against what the spec says:

- RL.ACQUIRE key max [TTL ms] [AT t] -> the six fields + the lease id;
  denied: retry_after_ms = until the oldest lease expires, the id a null;
- RL.RELEASE key id -> 1 if held, 0 if unknown or expired;
- RL.RESERVE key limit window COST estimate [options] -> six fields + id,
  counted at the estimate; RL.SETTLE key id actual -> the six fields after
  charging or refunding actual - estimate, even past the limit; settling
  twice or an unknown id is an error.

Times are given with AT (client time trusted), so every number is exact;
RELEASE and SETTLE, which take no AT, are decided at the key's latest
time (SPEC 4), the AT of the call before.
"""

import json
import unittest

import redis

import harness
from harness import BASE, HOST, ServerTestCase

T = BASE + 123  # inside a second, not at a window's edge


class HoldsResp(ServerTestCase):
    HTTP = True

    def r(self):
        return redis.Redis(host=HOST, port=self.srv.port, socket_timeout=10 * harness.SLOW)

    def test_acquire_release(self):
        r = self.r()
        a = r.execute_command("RL.ACQUIRE", "db:1", 2, "TTL", 1000, "AT", T)
        self.assertEqual(a[:6], [1, 2, 1, 0, 1000, 0])
        b = r.execute_command("RL.ACQUIRE", "db:1", 2, "TTL", 5000, "AT", T + 10)
        self.assertEqual(b[:6], [1, 2, 0, 0, 5000, 0])
        self.assertNotEqual(a[6], b[6])
        # full: until the oldest lease expires (T + 1000), and no id
        self.assertEqual(r.execute_command("RL.ACQUIRE", "db:1", 2, "AT", T + 20),
                         [0, 2, 0, 980, 4990, 0, None])
        self.assertEqual(r.execute_command("RL.RELEASE", "db:1", a[6]), 1)
        self.assertEqual(r.execute_command("RL.RELEASE", "db:1", a[6]), 0)
        self.assertEqual(r.execute_command("RL.RELEASE", "db:1", "not-an-id"), 0)
        c = r.execute_command("RL.ACQUIRE", "db:1", 2, "AT", T + 30)
        self.assertEqual(c[:6], [1, 2, 0, 0, 60000, 0])  # default TTL 60 s
        # at T + 5010 lease b has expired: releasing it says 0
        d = r.execute_command("RL.ACQUIRE", "db:1", 2, "AT", T + 5010)
        self.assertEqual(d[:3], [1, 2, 0])
        self.assertEqual(r.execute_command("RL.RELEASE", "db:1", b[6]), 0)

    def test_resp3_null_id(self):
        # RESP3's null is "_\r\n" (RESP2's "$-1\r\n"): read as sent
        with harness.RawConn(self.srv.port) as c:
            c.cmd("HELLO", "3")
            c.cmd("RL.ACQUIRE", "db:3", "1", "AT", str(T))
            c.send(harness.encode("RL.ACQUIRE", "db:3", "1", "AT", str(T + 1)))
            raw = b""
            for _ in range(50):
                raw += c.sock.recv(4096)
                if raw.endswith(b"_\r\n"):
                    break
            self.assertEqual(raw, b"*7\r\n:0\r\n:1\r\n:0\r\n:59999\r\n:59999\r\n:0\r\n_\r\n")

    def test_acquire_errors(self):
        r = self.r()
        cases = [
            (("db", 0), "ERR max must be an integer between 1 and 100000, got '0'"),
            (("db", "x"), "ERR max must be an integer between 1 and 100000, got 'x'"),
            (("db", 1, "TTL", 0), "ERR TTL must be a duration between 1 ms and 86400000 ms (1d), got '0'"),
            (("db", 1, "TTL", "2d"), "ERR TTL must be a duration between 1 ms and 86400000 ms (1d), got '2d'"),
            (("db", 1, "LEASE", 5), "ERR unknown option 'LEASE' (RL.ACQUIRE key max [TTL ms] [AT t])"),
            (("db", 1, "TTL"), "ERR option TTL needs a value"),
        ]
        for args, msg in cases:
            with self.assertRaises(redis.ResponseError) as cm:
                r.execute_command("RL.ACQUIRE", *args)
            self.assertEqual("ERR " + str(cm.exception), msg)

    def test_reserve_settle_fixed_window(self):
        r = self.r()
        k = "tpm:1"
        res = r.execute_command("RL.RESERVE", k, 100, "1m", "COST", 30, "ALGO", "fixed-window",
                                "AT", T)
        to_end = 60000 - T % 60000
        self.assertEqual(res[:6], [1, 100, 70, 0, to_end, 0])
        # refund: 30 estimated, 10 used
        self.assertEqual(r.execute_command("RL.SETTLE", k, res[6], 10),
                         [1, 100, 90, 0, to_end, 0])
        with self.assertRaises(redis.ResponseError) as cm:
            r.execute_command("RL.SETTLE", k, res[6], 10)
        self.assertIn("unknown reservation id", str(cm.exception))
        # charged past the limit: 5 estimated, 200 used -> 210 of 100 counted
        res = r.execute_command("RL.RESERVE", k, 100, "1m", "COST", 5, "ALGO", "fixed-window",
                                "AT", T)
        self.assertEqual(r.execute_command("RL.SETTLE", k, res[6], 200),
                         [0, 100, 0, to_end, to_end, 0])
        # the next request waits for the next window
        self.assertEqual(r.execute_command("RL.ALLOW", k, 100, "1m", "ALGO", "fixed-window",
                                           "AT", T + 1),
                         [0, 100, 0, to_end - 1, to_end - 1, 0])

    def test_reserve_errors(self):
        r = self.r()
        with self.assertRaises(redis.ResponseError) as cm:
            r.execute_command("RL.SETTLE", "nobody", 424242, 1)
        self.assertEqual(str(cm.exception),
                         "unknown reservation id: never given for this key, settled already, "
                         "or its window ended (then it settled at its estimate)")
        with self.assertRaises(redis.ResponseError) as cm:
            r.execute_command("RL.RESERVE", "k", 10, "1m", "ALGO", "gcra")
        self.assertIn("RL.RESERVE needs COST estimate", str(cm.exception))
        with self.assertRaises(redis.ResponseError) as cm:
            r.execute_command("RL.RESERVE", "k", 10, "1m", "COST", 1, "ALGO", "sliding-log")
        self.assertIn("does not take sliding-log", str(cm.exception))
        res = r.execute_command("RL.RESERVE", "k2", 10, "1m", "COST", 1, "AT", T)
        with self.assertRaises(redis.ResponseError) as cm:
            r.execute_command("RL.SETTLE", "k2", res[6], -1)
        self.assertIn("cost", str(cm.exception))
        # a denied reservation: no id, nothing charged
        self.assertEqual(r.execute_command("RL.RESERVE", "k3", 10, "1m", "COST", 11, "AT", T),
                         [0, 10, 10, -1, 0, 0, None])

    def post(self, path, body):
        c = self.srv.http_conn()
        try:
            c.request("POST", path, body=json.dumps(body),
                      headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            return resp.status, json.loads(resp.read()), dict(resp.getheaders())
        finally:
            c.close()

    def test_http(self):
        st, b, _ = self.post("/v1/acquire", {"key": "h:1", "max": 1, "ttl_ms": 2000, "at": T})
        self.assertEqual(st, 200)
        lease = b.pop("id")
        self.assertEqual(b, {"allowed": True, "limit": 1, "remaining": 0, "retry_after_ms": 0,
                             "reset_after_ms": 2000, "delay_ms": 0})
        st, b, h = self.post("/v1/acquire", {"key": "h:1", "max": 1, "at": T + 500})
        self.assertEqual((st, b["id"], b["retry_after_ms"], h["Retry-After"]), (429, None, 1500, "2"))
        self.assertEqual(self.post("/v1/release", {"key": "h:1", "id": lease})[:2],
                         (200, {"released": True}))
        self.assertEqual(self.post("/v1/release", {"key": "h:1", "id": lease})[:2],
                         (200, {"released": False}))
        st, b, _ = self.post("/v1/reserve", {"key": "h:2", "limit": 10, "window": "10s",
                                             "estimate": 4, "algo": "fixed-window", "at": T})
        self.assertEqual((st, b["remaining"]), (200, 6))
        st, b, _ = self.post("/v1/settle", {"key": "h:2", "id": b["id"], "actual": 1})
        self.assertEqual((st, b["remaining"], b["allowed"]), (200, 9, True))
        self.assertEqual(self.post("/v1/acquire", {"key": "h:1", "max": 0})[:2],
                         (400, {"error": "max must be an integer between 1 and 100000, got '0'"}))
        self.assertEqual(self.post("/v1/acquire", {"key": "h:1", "mx": 1})[:2],
                         (400, {"error": "unknown field 'mx' (expected key, max, ttl_ms, at)"}))


if __name__ == "__main__":
    unittest.main()
