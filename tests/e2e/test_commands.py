"""Every command of SPEC section 7 with a client library (redis-py) and
raw RESP: exact decisions (the spec's vectors replayed through RL.ALLOW ...
AT t), RL.PEEK, RL.RESET, PING, ECHO, QUIT, INFO and its sections, COMMAND,
HELLO, MULTI / EXEC / DISCARD (on the local and the Redis backend), and the
error replies of section 5."""

import os

import redis

from harness import (BASE, Map, RawConn, RedisServer, RespError, Server, ServerTestCase, encode,
                     load_vectors, parse_info)

ALGOS = ["fixed-window", "sliding-log", "sliding-window", "sliding-buckets", "token-bucket",
         "gcra", "leaky-bucket"]

LIMIT_ERR = "limit must be an integer between 1 and 1000000000000"


class TestDecisions(ServerTestCase):
    """RL.ALLOW / RL.PEEK / RL.RESET through redis-py."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.r = cls.srv.redis()

    @classmethod
    def tearDownClass(cls):
        cls.r.close()
        super().tearDownClass()

    def allow(self, key, limit, window, *opts):
        return self.r.execute_command("RL.ALLOW", key, limit, window, *opts)

    def peek(self, key, limit, window, *opts):
        return self.r.execute_command("RL.PEEK", key, limit, window, *opts)

    def test_spec_vectors(self):
        """Every file of the spec's vectors/, replayed request by request
        through RL.ALLOW ... AT t, gives exactly the expected six fields."""
        vectors = load_vectors()
        self.assertGreaterEqual(len(vectors), 7)
        algos_seen = set()
        for name, (limit, window, opts), rows in vectors:
            if "ALGO" in opts:
                algos_seen.add(opts[opts.index("ALGO") + 1])
            for i, (t, key, cost, want) in enumerate(rows):
                args = ["vec:%s:%s" % (name, key), limit, window] + opts
                if cost is not None:
                    args += ["COST", cost]
                args += ["AT", BASE + t]
                got = self.r.execute_command("RL.ALLOW", *args)
                self.assertEqual(got, want, "%s line %d: RL.ALLOW %s" % (name, i + 1, args))
        self.assertEqual(algos_seen, set(ALGOS), "the vectors cover all seven algorithms")

    def test_client_time_behind_server_clock_keeps_state(self):
        """With --trust-client-time, a key decided at client times two hours
        behind the server's clock keeps its state between requests: the
        server's background expiry must not judge it by the wall clock."""
        import time as _time
        t = (int(_time.time() * 1000) // 3600000 - 2) * 3600000  # an hour, 2 h ago
        opts = ["ALGO", "fixed-window"]
        self.assertEqual(self.allow("behind", 2, "1h", *opts, "AT", t), [1, 2, 1, 0, 3600000, 0])
        expired0 = int(self.srv.info("stats")["expired_keys"])
        # Give the expiry sweep (every 100 ms) time to run: a witness server
        # without --trust-client-time must expire two keys one after the
        # other (so at least one whole sweep period passed, which this
        # server would have used, had its sweep been on).
        witness = self.new_server(name="expiry-witness")
        with witness.raw() as w:
            for i in range(2):
                e0 = witness.info_int("expired_keys", "stats")
                self.assertEqual(w.cmd("RL.ALLOW", "w%d" % i, 1, "1ms")[:3], [1, 1, 0])
                witness.wait_info("expired_keys", lambda v: v > e0, "stats",
                                  what="(the witness's expiry sweep never ran)")
        self.assertEqual(int(self.srv.info("stats")["expired_keys"]), expired0,
                         "no key expired on the server's clock under --trust-client-time")
        self.assertEqual(self.allow("behind", 2, "1h", *opts, "AT", t + 1),
                         [1, 2, 0, 0, 3599999, 0], "the first request is still counted")
        self.assertEqual(self.allow("behind", 2, "1h", *opts, "AT", t + 2)[0], 0)

    def test_default_algorithm_is_token_bucket(self):
        t = BASE + 5000
        self.assertEqual(self.allow("dflt", 5, "10s", "AT", t), [1, 5, 4, 0, 2000, 0])
        self.assertEqual(self.allow("dflt", 5, "10s", "ALGO", "token-bucket", "AT", t),
                         [1, 5, 3, 0, 4000, 0])

    def test_every_algorithm_allows_then_denies(self):
        """L = 3 per 1 s at one instant: 3 allowed, the 4th denied, per
        algorithm (leaky-bucket delays the queued ones)."""
        t = BASE + 100000
        for algo in ALGOS:
            key = "every:" + algo
            got = [self.allow(key, 3, 1000, "ALGO", algo, "AT", t) for _ in range(4)]
            self.assertEqual([g[0] for g in got], [1, 1, 1, 0], algo)
            self.assertEqual([g[1] for g in got], [3, 3, 3, 3], algo)
            self.assertEqual([g[2] for g in got], [2, 1, 0, 0], algo)
            self.assertEqual([g[3] for g in got[:3]], [0, 0, 0], algo)
            self.assertGreaterEqual(got[3][3], 1, algo)
            delays = [g[5] for g in got]
            self.assertEqual(delays, [0, 334, 667, 0] if algo == "leaky-bucket" else [0] * 4, algo)

    def test_peek_consumes_nothing(self):
        t = BASE + 200000
        for algo in ALGOS:
            key = "peek:" + algo
            first = self.peek(key, 2, 1000, "ALGO", algo, "AT", t)
            self.assertEqual(self.peek(key, 2, 1000, "ALGO", algo, "AT", t), first, algo)
            self.assertEqual(self.allow(key, 2, 1000, "ALGO", algo, "AT", t), first,
                             "%s: PEEK answers what ALLOW then decides" % algo)
            self.allow(key, 2, 1000, "ALGO", algo, "AT", t)
            denied = self.peek(key, 2, 1000, "ALGO", algo, "AT", t)
            self.assertEqual(denied[0], 0, algo)
            for _ in range(3):
                self.assertEqual(self.peek(key, 2, 1000, "ALGO", algo, "AT", t), denied, algo)
            self.assertEqual(self.allow(key, 2, 1000, "ALGO", algo, "AT", t), denied, algo)

    def test_peek_does_not_log_rejected(self):
        """With LOGREJECTED, a denied ALLOW is logged but a PEEK is not."""
        t = BASE + 300000
        key = "peek-logrej"
        opts = ["ALGO", "sliding-log", "LOGREJECTED"]
        self.assertEqual(self.allow(key, 1, 1000, *opts, "AT", t), [1, 1, 0, 0, 1000, 0])
        for _ in range(5):
            self.assertEqual(self.peek(key, 1, 1000, *opts, "AT", t + 500)[0], 0)
        # only the allowed request is logged: free again at t + 1000
        self.assertEqual(self.allow(key, 1, 1000, *opts, "AT", t + 1000), [1, 1, 0, 0, 1000, 0])

    def test_reset(self):
        t = BASE + 400000
        self.assertEqual(self.r.execute_command("RL.RESET", "rst"), 0)
        self.allow("rst", 2, 1000, "ALGO", "fixed-window", "AT", t)
        self.allow("rst", 2, 1000, "ALGO", "fixed-window", "AT", t)
        self.allow("rst", 2, 1000, "ALGO", "gcra", "AT", t)
        self.assertEqual(self.allow("rst", 2, 1000, "ALGO", "fixed-window", "AT", t)[0], 0)
        # with ALGO: only that algorithm's state
        self.assertEqual(self.r.execute_command("RL.RESET", "rst", "ALGO", "sliding-log"), 0)
        self.assertEqual(self.r.execute_command("RL.RESET", "rst", "ALGO", "fixed-window"), 1)
        self.assertEqual(self.r.execute_command("RL.RESET", "rst", "ALGO", "fixed-window"), 0)
        self.assertEqual(self.allow("rst", 2, 1000, "ALGO", "fixed-window", "AT", t),
                         [1, 2, 1, 0, 1000, 0])
        self.assertEqual(self.peek("rst", 2, 1000, "ALGO", "gcra", "AT", t)[2], 0,
                         "gcra state untouched by RL.RESET ... ALGO fixed-window")
        # without ALGO: every algorithm
        self.assertEqual(self.r.execute_command("RL.RESET", "rst"), 1)
        self.assertEqual(self.peek("rst", 2, 1000, "ALGO", "gcra", "AT", t), [1, 2, 1, 0, 500, 0])
        self.assertEqual(self.peek("rst", 2, 1000, "ALGO", "fixed-window", "AT", t),
                         [1, 2, 1, 0, 1000, 0])
        self.assertEqual(self.r.execute_command("RL.RESET", "rst"), 0)
        # ALGO name is case-insensitive, and a bad one is an error
        self.assertEqual(self.r.execute_command("rl.reset", "rst", "algo", "GCRA"), 0)
        with self.assertRaisesRegex(redis.ResponseError, "unknown algorithm 'gcr'"):
            self.r.execute_command("RL.RESET", "rst", "ALGO", "gcr")

    def test_state_is_per_key_and_algorithm(self):
        t = BASE + 500000
        for algo in ALGOS:
            self.assertEqual(self.allow("ident", 1, 1000, "ALGO", algo, "AT", t)[0], 1, algo)
        for algo in ALGOS:
            self.assertEqual(self.allow("ident", 1, 1000, "ALGO", algo, "AT", t)[0], 0, algo)
        self.assertEqual(self.allow("ident2", 1, 1000, "ALGO", "fixed-window", "AT", t)[0], 1)

    def test_parameter_change_carries_over(self):
        t = BASE + 7200000  # the start of an hour
        fw = ["ALGO", "fixed-window", "AT", t]
        self.assertEqual(self.allow("chg", 5, "1h", "COST", 3, *fw), [1, 5, 2, 0, 3600000, 0])
        # a higher limit keeps the count: 3 used of 10
        self.assertEqual(self.allow("chg", 10, "1h", *fw), [1, 10, 6, 0, 3600000, 0])
        # a lower one keeps it too: 4 used > 2, denied until the window ends
        self.assertEqual(self.allow("chg", 2, "1h", *fw), [0, 2, 0, 3600000, 3600000, 0])
        # token bucket: its tokens are kept when the burst grows (no fresh
        # burst: the 2 tokens left refill towards 20 at 10/s) ...
        tb = ["ALGO", "token-bucket", "AT", t]
        self.assertEqual(self.allow("chg-tb", 10, 1000, "BURST", 10, "COST", 8, *tb),
                         [1, 10, 2, 0, 800, 0])
        self.assertEqual(self.allow("chg-tb", 10, 1000, "BURST", 20, "COST", 0, *tb),
                         [1, 20, 2, 0, 1800, 0])
        # ... and clamped when it shrinks
        self.assertEqual(self.allow("chg-tb", 10, 1000, "BURST", 1, "COST", 0, *tb),
                         [1, 1, 1, 0, 0, 0])

    def test_window_units(self):
        t = BASE + 700000
        for w, ms in (("250ms", 250), ("10s", 10000), ("5m", 300000), ("1h", 3600000),
                      ("1d", 86400000), ("1500", 1500)):
            self.assertEqual(self.allow("unit:" + w, 2, w, "ALGO", "fixed-window", "AT", t),
                             [1, 2, 1, 0, ms - t % ms, 0], w)
            self.assertEqual(self.allow("unit-tb:" + w, 2, w, "AT", t), [1, 2, 1, 0, ms // 2, 0], w)

    def test_cost_and_burst(self):
        t = BASE + 800000
        self.assertEqual(self.allow("cost", 10, 1000, "COST", 4, "AT", t), [1, 10, 6, 0, 400, 0])
        self.assertEqual(self.allow("cost", 10, 1000, "COST", 11, "AT", t), [0, 10, 6, -1, 400, 0])
        self.assertEqual(self.allow("cost", 10, 1000, "COST", 0, "AT", t), [1, 10, 6, 0, 400, 0])
        self.assertEqual(self.allow("burst", 1, 1000, "BURST", 3, "AT", t), [1, 3, 2, 0, 1000, 0])
        self.assertEqual(self.allow("prec", 4, 1000, "ALGO", "sliding-buckets", "PRECISION", 4,
                                    "AT", t), [1, 4, 3, 0, 1000, 0])

    def test_options_case_insensitive_any_order(self):
        t = BASE + 900000
        self.assertEqual(self.r.execute_command("rl.allow", "ci", 3, "1s", "at", t, "algo",
                                                "Fixed-Window", "cost", 2),
                         [1, 3, 1, 0, 1000, 0])

    def test_errors_name_the_problem_and_change_nothing(self):
        t = BASE + 1000000
        key = "err-key"
        base = self.allow(key, 5, 1000, "ALGO", "fixed-window", "AT", t)
        self.assertEqual(base, [1, 5, 4, 0, 1000, 0])
        fw = ["ALGO", "fixed-window"]
        bad = [
            (["ALGO", "tokenbucket"], "unknown algorithm 'tokenbucket'"),
            (fw + ["ALGO", "gcra"], "option ALGO given twice"),
            (fw + ["LIMIT"], "unknown option 'LIMIT'"),
            (fw + ["COST", "-1"], "cost must be an integer between 0 and 1000000000000, got '-1'"),
            (fw + ["COST", "x"], "cost must be"),
            (fw + ["COST", 10 ** 12 + 1], "cost must be"),
            (fw + ["COST"], "option COST needs a value"),
            (fw + ["COST", 1, "COST", 2], "option COST given twice"),
            (fw + ["BURST", 3], "burst must be"),
            (fw + ["PRECISION", 3], "precision must be"),
            (fw + ["LOGREJECTED"], "log-rejected applies only to sliding-log"),
            (fw + ["AT", "soon"], "time must be"),
            (fw + ["AT", 2 ** 62], "time must be"),
        ]
        for opts, msg in bad:
            with self.assertRaises(redis.ResponseError, msg=str(opts)) as cm:
                self.allow(key, 5, 1000, *([] if "AT" in opts else ["AT", t]), *opts)
            self.assertIn(msg, str(cm.exception), opts)
        for limit, window, msg in ((0, 1000, LIMIT_ERR), (-1, 1000, LIMIT_ERR),
                                   ("5x", 1000, LIMIT_ERR), (10 ** 12 + 1, 1000, LIMIT_ERR),
                                   (5, 0, "window must be"), (5, "10x", "window must be"),
                                   (5, "-5s", "window must be"), (5, "11y", "window must be")):
            with self.assertRaises(redis.ResponseError) as cm:
                self.allow(key, limit, window, "ALGO", "fixed-window", "AT", t)
            self.assertIn(msg, str(cm.exception), (limit, window))
        with self.assertRaisesRegex(redis.ResponseError, "precision must be .* divides the window"):
            self.allow("p", 5, 1000, "ALGO", "sliding-buckets", "PRECISION", 3, "AT", t)
        with self.assertRaisesRegex(redis.ResponseError, "key must be 1 to 512 bytes"):
            self.allow("", 5, 1000)
        with self.assertRaisesRegex(redis.ResponseError, "key must be 1 to 512 bytes"):
            self.allow("k" * 513, 5, 1000)
        with self.assertRaisesRegex(redis.ResponseError, "wrong number of arguments for 'rl.allow'"):
            self.r.execute_command("RL.ALLOW", key, 5)
        with self.assertRaisesRegex(redis.ResponseError, "wrong number of arguments for 'rl.peek'"):
            self.r.execute_command("RL.PEEK", key)
        with self.assertRaisesRegex(redis.ResponseError, "wrong number of arguments for 'rl.reset'"):
            self.r.execute_command("RL.RESET")
        with self.assertRaisesRegex(redis.ResponseError, "unknown command 'RL.ALOW'"):
            self.r.execute_command("RL.ALOW", key, 5, 1000)
        # nothing above changed the key's state: one of 5 used, so a peek
        # answers what the second request would get
        self.assertEqual(self.peek(key, 5, 1000, "ALGO", "fixed-window", "AT", t),
                         [1, 5, 3, 0, 1000, 0])
        # the longest key is fine
        self.assertEqual(self.allow("k" * 512, 5, 1000, "AT", t)[0], 1)


class TestRawReplies(ServerTestCase):
    """Replies byte for byte: what every Redis client parses."""

    def test_error_lines_start_with_err(self):
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "k", 5, 1000, "ALGO", "tokenbucket"),
                             RespError("ERR unknown algorithm 'tokenbucket'"))
            self.assertEqual(c.cmd("RL.ALLOW", "k", 0, 1000),
                             RespError("ERR " + LIMIT_ERR))
            self.assertEqual(c.cmd("NOSUCH"), RespError("ERR unknown command 'NOSUCH'"))
            got = c.cmd("RL.ALLOW", "k", 5, "1x")
            self.assertTrue(got.line.startswith("ERR window must be"), got)
            self.assertIn("'1x'", got.line)
            # binary junk is quoted printably, on one line
            got = c.cmd(b"\x00\r\nX")
            self.assertEqual(got, RespError("ERR unknown command '???X'"))
            self.assertEqual(c.cmd("PING"), b"PONG")

    def test_ping_echo(self):
        with self.srv.raw() as c:
            c.send(b"*1\r\n$4\r\nPING\r\n")
            self.assertEqual(c.read_reply(), b"PONG")
            self.assertEqual(c.cmd("ping", "hello world"), b"hello world")
            self.assertEqual(c.cmd("ECHO", b"bin\x00\r\nary"), b"bin\x00\r\nary")
            self.assertEqual(c.cmd("ECHO", ""), b"")
            self.assertEqual(c.cmd("ECHO"), RespError("ERR wrong number of arguments for 'echo' command"))
            self.assertEqual(c.cmd("PING", "a", "b"), RespError("ERR wrong number of arguments for 'ping' command"))
        # exact bytes on the wire
        with self.srv.raw() as c:
            c.send(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"
                   b"*6\r\n$8\r\nRL.ALLOW\r\n$3\r\nwir\r\n$1\r\n5\r\n$3\r\n10s\r\n$2\r\nAT\r\n")
            # the last command is incomplete: only two replies now
            self.assertEqual(c.read_replies(2), [b"PONG", b"hi"])
            c.send(b"$%d\r\n%d\r\n" % (len(str(BASE)), BASE))
            self.assertEqual(c.read_reply(), [1, 5, 4, 0, 2000, 0])

    def test_allow_reply_bytes(self):
        with self.srv.raw() as c:
            c.send(b"*6\r\n$8\r\nRL.ALLOW\r\n$5\r\nbytes\r\n$1\r\n5\r\n$3\r\n10s\r\n$2\r\nAT\r\n")
            c.send(("$%d\r\n%d\r\n" % (len(str(BASE)), BASE)).encode())
            c.sock.settimeout(10)
            want = b"*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:2000\r\n:0\r\n"
            got = b""
            while len(got) < len(want):
                chunk = c.sock.recv(4096)
                self.assertTrue(chunk, "closed after %r" % got)
                got += chunk
            self.assertEqual(got, want)

    def test_quit(self):
        with self.srv.raw() as c:
            c.send(b"PING\r\n*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n")
            self.assertEqual(c.read_until_eof(), [b"PONG", b"OK"],
                             "QUIT answers +OK, then closes; nothing after it runs")
        r = self.srv.redis()
        self.assertTrue(r.execute_command("QUIT"), "redis-py sees +OK")
        r.close()

    def test_command(self):
        with self.srv.raw() as c:
            table = c.cmd("COMMAND")
            count = c.cmd("COMMAND", "COUNT")
            self.assertEqual(count, len(table))
            names = {e[0] for e in table}
            for n in (b"rl.allow", b"rl.peek", b"rl.reset", b"ping", b"echo", b"quit", b"info",
                      b"command", b"hello"):
                self.assertIn(n, names)
            for e in table:
                self.assertEqual(len(e), 6, e)
                self.assertIsInstance(e[1], int)
            allow = [e for e in table if e[0] == b"rl.allow"][0]
            self.assertEqual(allow[1], -4)
            self.assertEqual(allow[3:], [1, 1, 1], "first key, last key, step")
            self.assertEqual(c.cmd("COMMAND", "INFO", "rl.peek", "nosuch"),
                             [[e for e in table if e[0] == b"rl.peek"][0], None])
            self.assertEqual(c.cmd("COMMAND", "DOCS"), [])

    def test_hello(self):
        with self.srv.raw() as c:
            h = c.cmd("HELLO", "2")
            self.assertIsInstance(h, list)
            m = dict(zip(h[::2], h[1::2]))
            self.assertEqual(m[b"proto"], 2)
            self.assertEqual(m[b"server"], b"sluiced")
            self.assertIn(b"version", m)
            # HELLO 3: the same pairs as a RESP3 map, and RESP3 from then on
            h3 = c.cmd("HELLO", "3")
            self.assertIsInstance(h3, Map)
            self.assertEqual(h3, {**m, b"proto": 3})
            self.assertEqual(list(h3), h[::2], "the same keys in the same order")
            self.assertEqual(c.cmd("HELLO"), h3)
            self.assertEqual(c.cmd("HELLO", "4"), RespError("NOPROTO unsupported protocol version"))
            self.assertEqual(c.cmd("HELLO", "three"),
                             RespError("ERR Protocol version is not an integer or out of range"))
            self.assertIsInstance(c.cmd("CONFIG", "GET", "save"), Map, "still RESP3")
            # HELLO 2 goes back to RESP2
            self.assertEqual(c.cmd("HELLO", "2"), h)
            self.assertEqual(c.cmd("CONFIG", "GET", "save"), [b"save", b""])


class TestInfo(ServerTestCase):
    """INFO and its sections; the stats section's counts exact after a known
    sequence (a server of this class's own, so no other traffic)."""

    def test_sections(self):
        info = self.srv.info()
        for k in ("sluice_version", "redis_version", "process_id", "tcp_port", "uptime_in_seconds",
                  "connected_clients", "maxclients", "total_connections_received",
                  "total_commands_processed", "decisions", "allowed", "denied", "used_memory",
                  "maxmemory", "keys", "snapshots_written", "keys_loaded_at_start"):
            self.assertIn(k, info)
        self.assertEqual(int(info["process_id"]), self.srv.pid)
        self.assertEqual(int(info["tcp_port"]), self.srv.port)
        self.assertEqual(info["trust_client_time"], "yes")
        sections = {
            "server": ("sluice_version", "tcp_port"),
            "clients": ("connected_clients", "maxclients"),
            "stats": ("total_commands_processed", "algo_gcra"),
            "memory": ("used_memory", "maxmemory"),
            "persistence": ("snapshots_written",),
        }
        for sec, keys in sections.items():
            for name in (sec, sec.upper()):
                raw = self.srv.info(name)
                for k in keys:
                    self.assertIn(k, raw, "INFO %s" % name)
                for other, okeys in sections.items():
                    if other != sec:
                        self.assertNotIn(okeys[0], raw, "INFO %s shows only its section" % name)
        with self.srv.raw() as c:
            text = c.cmd("INFO", "server")
            self.assertTrue(text.startswith(b"# Server\r\n"), text[:40])
            self.assertEqual(c.cmd("INFO", "nosuchsection"), b"")
            both = parse_info(c.cmd("INFO", "clients", "memory"))
            self.assertIn("maxclients", both)
            self.assertIn("used_memory", both)
        self.assertGreaterEqual(int(self.srv.info("clients")["connected_clients"]), 1)
        self.assertEqual(self.srv.info("memory")["maxmemory"], str(1024 ** 3))

    def test_stats_counts_exact(self):
        """Algorithm i gets 2i+3 requests at limit i+1 (one instant): i+1
        allowed, i+2 denied.  Peeks and errors are not decisions."""
        srv = self.new_server(trust_client_time=True)
        before = srv.info("stats")
        t = BASE
        with srv.raw() as c:
            for i, algo in enumerate(ALGOS):
                for _ in range(2 * i + 3):
                    c.cmd("RL.ALLOW", "st", i + 1, "1h", "ALGO", algo, "AT", t)
                c.cmd("RL.PEEK", "st", i + 1, "1h", "ALGO", algo, "AT", t)
            for _ in range(4):
                self.assertIsInstance(c.cmd("RL.ALLOW", "st", 0, "1h"), RespError)
            self.assertIsInstance(c.cmd("NOSUCH"), RespError)
            after = parse_info(c.cmd("INFO", "stats"))
        total_dec = sum(2 * i + 3 for i in range(len(ALGOS)))
        total_ok = sum(i + 1 for i in range(len(ALGOS)))
        for i, algo in enumerate(ALGOS):
            self.assertEqual(after["algo_" + algo],
                             "decisions=%d,allowed=%d,denied=%d" % (2 * i + 3, i + 1, i + 2), algo)
        self.assertEqual(int(after["decisions"]), total_dec)
        self.assertEqual(int(after["allowed"]), total_ok)
        self.assertEqual(int(after["denied"]), total_dec - total_ok)
        self.assertEqual(int(after["error_replies"]) - int(before["error_replies"]), 5)
        # every command counts, the INFO that reports included
        self.assertEqual(int(after["total_commands_processed"])
                         - int(before["total_commands_processed"]),
                         total_dec + len(ALGOS) + 5 + 1)
        self.assertEqual(int(srv.info("memory")["keys"]), len(ALGOS))


class TestTrustClientTime(ServerTestCase):
    """Without --trust-client-time, AT is an error and the clock is the server's."""

    TRUST = False

    def test_at_refused(self):
        with self.srv.raw() as c:
            got = c.cmd("RL.ALLOW", "k", 5, "10s", "AT", BASE)
            self.assertIsInstance(got, RespError)
            self.assertTrue(got.line.startswith("ERR AT is refused"), got)
            self.assertIn("--trust-client-time", got.line)
            # refused, so nothing was consumed
            self.assertEqual(c.cmd("RL.ALLOW", "k", 5, "1h"), [1, 5, 4, 0, 720000, 0])
            self.assertEqual(self.srv.info("server")["trust_client_time"], "no")

    def test_server_clock_decides(self):
        """A fixed window of 1 h at the server's clock: the reset is what is
        left of the current hour (between 1 ms and 1 h)."""
        with self.srv.raw() as c:
            got = c.cmd("RL.ALLOW", "clock", 2, "1h", "ALGO", "fixed-window")
            self.assertEqual(got[:4], [1, 2, 1, 0])
            self.assertTrue(1 <= got[4] <= 3600000, got)


# ---- MULTI / EXEC / DISCARD ---------------------------------------------------

EXECABORT = RespError("EXECABORT Transaction discarded because of previous errors.")
WATCH_ERR = RespError("ERR WATCH is not supported: sluiced runs MULTI ... EXEC in order but does "
                      "not watch keys (send MULTI without WATCH)")


def fw(key, limit=2, at=BASE):
    """RL.ALLOW of a fixed-window limit per 10 s at `at` (every backend has it)."""
    return encode("RL.ALLOW", key, limit, "10s", "ALGO", "fixed-window", "AT", at)


def fw_reply(allowed, remaining, retry=0, limit=2):
    return b"*6\r\n:%d\r\n:%d\r\n:%d\r\n:%d\r\n:10000\r\n:0\r\n" % (allowed, limit, remaining, retry)


def read_exact(c, n):
    """Exactly n bytes from RawConn c (its reading deadline applies)."""
    got = bytes(c.buf[c.pos:])
    c.pos = len(c.buf)
    while len(got) < n:
        chunk = c.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("closed after %r" % got)
        got += chunk
    return got


class TransactionChecks:
    """What MULTI / EXEC must do on any backend (self.srv)."""

    def test_exec_reply_bytes(self):
        """MULTI, queued commands and EXEC in one write, as redis-py and
        node-redis send them: +OK, +QUEUED each, then EXEC's array of their
        replies in order, byte for byte, in RESP2 and in RESP3."""
        for proto in (2, 3):
            with self.srv.raw() as c:
                k = "tx-bytes-%d-%s" % (proto, self.tag)
                if proto == 3:
                    self.assertIsInstance(c.cmd("HELLO", "3"), Map)
                c.send(encode("MULTI") + fw(k) + fw(k) + fw(k) + encode("PING") +
                       encode("RL.PEEK", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE) +
                       encode("ECHO", "x") + encode("EXEC") + encode("PING", "after"))
                want = (b"+OK\r\n" + b"+QUEUED\r\n" * 6 + b"*6\r\n" + fw_reply(1, 1) +
                        fw_reply(1, 0) + fw_reply(0, 0, 10000) + b"+PONG\r\n" +
                        fw_reply(0, 0, 10000) + b"$1\r\nx\r\n" + b"$5\r\nafter\r\n")
                self.assertEqual(read_exact(c, len(want)), want, "RESP%d" % proto)

    def test_errors_as_redis(self):
        """Redis's errors word for word; a command that cannot be queued
        makes EXEC answer EXECABORT and nothing runs; an error while running
        is an element and the others run; DISCARD drops the queue."""
        k = "tx-err-" + self.tag
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("EXEC"), RespError("ERR EXEC without MULTI"))
            self.assertEqual(c.cmd("DISCARD"), RespError("ERR DISCARD without MULTI"))
            self.assertEqual(c.cmd("MULTI"), b"OK")
            self.assertEqual(c.cmd("MULTI"), RespError("ERR MULTI calls can not be nested"))
            c.send(fw(k))
            self.assertEqual(c.read_reply(), b"QUEUED")
            self.assertEqual(c.cmd("NOSUCH", "x"), RespError("ERR unknown command 'NOSUCH'"))
            self.assertEqual(c.cmd("RL.ALLOW", k),
                             RespError("ERR wrong number of arguments for 'rl.allow' command"))
            self.assertEqual(c.cmd("EXEC"), EXECABORT)
            self.assertEqual(c.cmd("EXEC"), RespError("ERR EXEC without MULTI"))
            # nothing ran: the key's first decision is still to come
            c.send(fw(k))
            self.assertEqual(c.read_reply(), [1, 2, 1, 0, 10000, 0])
            # an error while running: one element, the others run
            self.assertEqual(c.cmd("MULTI"), b"OK")
            for args in (("RL.ALLOW", k, 0, "10s"), ("RL.ALLOW", k, 2, "10s", "ALGO", "nope")):
                self.assertEqual(c.cmd(*args), b"QUEUED")
            c.send(fw(k))
            self.assertEqual(c.read_reply(), b"QUEUED")
            self.assertEqual(c.cmd("EXEC"), [RespError("ERR " + LIMIT_ERR),
                                             RespError("ERR unknown algorithm 'nope'"),
                                             [1, 2, 0, 0, 10000, 0]])
            # DISCARD
            self.assertEqual(c.cmd("MULTI"), b"OK")
            c.send(fw(k))
            self.assertEqual(c.read_reply(), b"QUEUED")
            self.assertEqual(c.cmd("DISCARD"), b"OK")
            self.assertEqual(c.cmd("DISCARD"), RespError("ERR DISCARD without MULTI"))
            self.assertEqual(c.cmd("RL.PEEK", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE),
                             [0, 2, 0, 10000, 10000, 0], "the discarded RL.ALLOW never ran")
            # WATCH refused (also inside MULTI, where it dooms nothing); UNWATCH +OK
            self.assertEqual(c.cmd("WATCH", k), WATCH_ERR)
            self.assertEqual(c.cmd("UNWATCH"), b"OK")
            self.assertEqual(c.cmd("MULTI"), b"OK")
            self.assertEqual(c.cmd("WATCH", k), WATCH_ERR)
            self.assertEqual(c.cmd("UNWATCH"), b"QUEUED")
            self.assertEqual(c.cmd("EXEC"), [b"OK"])

    def test_redis_py_pipeline(self):
        """redis-py's default pipeline() (MULTI ... EXEC) returns each
        decision exactly; an error inside is its element (raise_on_error
        False) or raised; pipeline(transaction=False) is unchanged."""
        k = "tx-py-" + self.tag
        r = self.srv.redis()
        self.addCleanup(r.close)
        with r.pipeline() as p:
            for _ in range(3):
                p.execute_command("RL.ALLOW", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE)
            self.assertEqual(p.execute(), [[1, 2, 1, 0, 10000, 0], [1, 2, 0, 0, 10000, 0],
                                           [0, 2, 0, 10000, 10000, 0]])
        with r.pipeline() as p:
            p.execute_command("RL.ALLOW", k, 0, "10s")
            p.execute_command("RL.PEEK", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE + 10000)
            got = p.execute(raise_on_error=False)
            self.assertIsInstance(got[0], redis.exceptions.ResponseError)
            self.assertEqual(str(got[0]), LIMIT_ERR)
            self.assertEqual(got[1], [1, 2, 1, 0, 10000, 0])
        with r.pipeline() as p:
            p.execute_command("RL.ALLOW", k, 0, "10s")
            with self.assertRaises(redis.exceptions.ResponseError) as e:
                p.execute()
            self.assertIn(LIMIT_ERR, str(e.exception))
        # a command that cannot be queued: redis-py raises the queueing error
        with r.pipeline() as p:
            p.execute_command("NOSUCH")
            p.execute_command("RL.ALLOW", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE)
            with self.assertRaises(redis.exceptions.ResponseError) as e:
                p.execute()
            self.assertIn("unknown command 'NOSUCH'", str(e.exception))
        with r.pipeline(transaction=False) as p:
            p.execute_command("RL.ALLOW", k, 2, "10s", "ALGO", "fixed-window", "AT", BASE + 10000)
            p.execute_command("PING")
            self.assertEqual(p.execute(), [[1, 2, 1, 0, 10000, 0], True])
        # the connection is back to normal: a plain command answers at once
        self.assertEqual(r.execute_command("RL.ALLOW", k, 2, "10s", "ALGO", "fixed-window", "AT",
                                           BASE + 10000), [1, 2, 0, 0, 10000, 0])


class TestTransactions(TransactionChecks, ServerTestCase):
    """MULTI / EXEC / DISCARD on the local backend; the bounds."""

    tag = "local"

    def test_bounds(self):
        """At most 1024 commands queued, and max-command bytes in all: one
        more answers an error naming the bound, and EXEC then EXECABORT."""
        with self.srv.raw() as c:
            c.send(encode("MULTI") + encode("PING") * 1024 + encode("PING") + encode("PING") +
                   encode("EXEC"))
            got = c.read_replies(1028)
            self.assertEqual(got[:1025], [b"OK"] + [b"QUEUED"] * 1024)
            self.assertEqual(got[1025:], [
                RespError("ERR transaction too long: at most 1024 commands between MULTI and "
                          "EXEC (transaction discarded)"),
                b"QUEUED", EXECABORT])
            c.send(encode("MULTI") + encode("PING") * 1024 + encode("EXEC"))
            got = c.read_replies(1026)
            self.assertEqual(got[-1], [b"PONG"] * 1024, "exactly the bound runs")
        s = self.new_server("--max-command", "1kb")
        with s.raw() as c:
            big = encode("ECHO", "x" * 600)
            c.send(encode("MULTI") + big + big + encode("EXEC") + encode("MULTI") + big +
                   encode("EXEC"))
            self.assertEqual(c.read_replies(7), [
                b"OK", b"QUEUED",
                RespError("ERR transaction too large: the commands between MULTI and EXEC may "
                          "hold at most max-command (1024 bytes) together (transaction "
                          "discarded)"),
                EXECABORT, b"OK", b"QUEUED", [b"x" * 600]])

    def test_permissions(self):
        """A command the user may not run is refused when queued (NOPERM,
        the transaction doomed, as in Redis); a queued AUTH acts only when
        EXEC runs it, and each command is checked again then."""
        d = self.class_dir("sluice-tx-users-")
        users = os.path.join(d, "users")
        with open(users, "w") as f:
            f.write("user reader >r-pw +reading\nuser decider >d-pw +deciding\n")
        os.chmod(users, 0o600)
        s = self.new_server("--users-file", users, trust_client_time=True)
        nope = RespError("NOPERM this user has no permissions to run the 'rl.allow' command")
        with s.raw() as c:
            self.assertEqual(c.cmd("MULTI"), RespError("NOAUTH Authentication required."))
            self.assertEqual(c.cmd("AUTH", "reader", "r-pw"), b"OK")
            self.assertEqual(c.cmd("MULTI"), b"OK")
            self.assertEqual(c.cmd("PING"), b"QUEUED")
            c.send(fw("tx-perm"))
            self.assertEqual(c.read_reply(), nope)
            self.assertEqual(c.cmd("EXEC"), EXECABORT)
            # AUTH queued: RL.ALLOW is still the reader's to queue, so refused
            c.send(encode("MULTI") + encode("AUTH", "decider", "d-pw") + fw("tx-perm") +
                   encode("EXEC"))
            self.assertEqual(c.read_replies(4), [b"OK", b"QUEUED", nope, EXECABORT])
            # AUTH queued, then a reading command that the decider may not run
            c.send(encode("MULTI") + encode("AUTH", "decider", "d-pw") +
                   encode("RL.PEEK", "tx-perm", 2, "10s") + encode("EXEC") + fw("tx-perm"))
            self.assertEqual(c.read_replies(5), [
                b"OK", b"QUEUED", b"QUEUED",
                [b"OK", RespError("NOPERM this user has no permissions to run the 'rl.peek' "
                                  "command")],
                [1, 2, 1, 0, 10000, 0]])

    def test_close_mid_transaction(self):
        """A connection that closes with a transaction queued frees it (the
        ASan build's leak check at the server's stop); others go on."""
        for _ in range(3):
            c = RawConn(self.srv.port)
            c.send(encode("MULTI") + fw("tx-closed") * 50)
            self.assertEqual(c.read_replies(51), [b"OK"] + [b"QUEUED"] * 50)
            c.close()
        with self.srv.raw() as c:
            c.send(fw("tx-closed"))
            self.assertEqual(c.read_reply(), [1, 2, 1, 0, 10000, 0], "none of them ran")


class TestTransactionsRedisBackend(TransactionChecks, ServerTestCase):
    """The same on the Redis backend, whose replies come later: EXEC's
    array still holds every reply, in order."""

    tag = "redis"

    @classmethod
    def setUpClass(cls):
        cls.redis_srv = RedisServer().start()
        try:
            cls.SERVER_ARGS = ("--backend", cls.redis_srv.url())
            super().setUpClass()
        except BaseException:
            cls.redis_srv.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.redis_srv.cleanup()

    def test_runs_in_redis(self):
        """The decisions were made in Redis: the counter is there."""
        with self.srv.raw() as c:
            c.send(encode("MULTI") + fw("tx-in-redis") + fw("tx-in-redis") + encode("EXEC"))
            self.assertEqual(c.read_replies(4)[3], [[1, 2, 1, 0, 10000, 0], [1, 2, 0, 0, 10000, 0]])
        # the fixed-window counter's "clock count" (docs/redis-scripts.md)
        self.assertEqual(int(self.redis_srv.cmd("GET", "sl:00:{tx-in-redis}").split()[1]), 2)
