"""test_wait.py -- waiting instead of failing (SPEC section 10, docs/commands-wait.md):
RL.WAIT and HTTP's ?wait=ms.

What a user notices: waiters on one key are served in the order they came
(each allowed), a waiter whose timeout passes gets RL.ALLOW's denial and is
charged nothing, a waiter whose client leaves is charged nothing and the
next moves up, the bounds answer an error at once, commands pipelined behind
a held RL.WAIT are answered in order, and ?wait=ms waits on /v1/allow and
/v1/check.  Windows are short (300-500 ms) so the module runs in seconds;
assertions are on order and counts, never on how long anything took: the
arrival of each waiter is confirmed through INFO (waiting_clients) before
the next is sent.
"""

import json
import os
import time

from harness import (RawConn, RedisServer, RespError, ServerTestCase, deadline, encode,
                     wait_window_room)


def wait_cmd(key, limit, window, timeout, *opts):
    return encode("RL.WAIT", key, limit, window, *opts, "TIMEOUT", timeout)


ARGS = ("--threads", "2", "--max-waiters-per-key", "4", "--max-waiters", "6")


class WaitCases:
    """The cases, run on the local backend (TestWait) and on Redis
    (TestWaitRedis): the waiting room asks through the same backend seam."""
    SERVER_ARGS = ARGS
    TRUST = False
    HTTP = True

    def setUp(self):
        self.served0 = self.srv.info_int("waiters_served")

    def waiting(self):
        return self.srv.info_int("waiting_clients")

    def until_waiting(self, n, what):
        self.srv.wait_info("waiting_clients", lambda v: int(v) == n, what=what)

    def conns(self, n):
        cs = [RawConn(self.srv.port) for _ in range(n)]
        for c in cs:
            self.addCleanup(c.close)
        return cs

    def test_waiters_are_served_in_arrival_order_each_allowed(self):
        """Waiter i is sent only once the server has it (INFO), between two
        readings of the server's clock: its arrival t0 is in [before,
        after], so it was served at t0 + delay_ms, within [before + delay,
        after + delay].  Those intervals must follow arrival order: one
        token every 300 ms, taken by the waiters first come first served."""
        r = self.srv.redis()
        # the key's one unit per 300 ms is taken: every waiter must wait
        self.assertEqual(r.execute_command("RL.ALLOW", "order", 1, 300)[0], 1)
        cs = self.conns(3)
        spans = []
        for i, c in enumerate(cs):
            before = self.srv.info_int("clock_ms", "server")
            c.send(wait_cmd("order", 1, 300, 20000))
            until = deadline(20)
            while True:  # in line, or already served (the first may be at once)
                info = self.srv.info("clients")
                if int(info["waiting_clients"]) + int(info["waiters_served"]) - self.served0 > i:
                    break
                self.assertLess(time.monotonic(), until, "waiter %d never arrived" % i)
                time.sleep(0.01)
            spans.append((before, self.srv.info_int("clock_ms", "server")))
        served = []
        for i, c in enumerate(cs):
            reply = c.read_reply(timeout=20)
            self.assertEqual(reply[:4], [1, 1, 0, 0], "waiter %d: %r" % (i, reply))
            served.append((spans[i][0] + reply[5], spans[i][1] + reply[5]))
        for i in range(len(served) - 1):
            self.assertLess(served[i][1], served[i + 1][0],
                            "waiter %d served before waiter %d: %r" % (i + 1, i, served))
        self.assertEqual(self.waiting(), 0)

    def test_timeout_gives_the_denial_and_charges_nothing(self):
        r = self.srv.redis()
        # 2 an hour in a fixed window of the server's clock: the whole case
        # (waits of 300, 400 ms) in one hour, or a fresh window allows
        wait_window_room(3600, 5)
        self.assertEqual(r.execute_command("RL.ALLOW", "tmo", 2, "1h", "ALGO", "fixed-window")[:3],
                         [1, 2, 1])
        self.assertEqual(r.execute_command("RL.ALLOW", "tmo", 2, "1h", "ALGO", "fixed-window")[:3],
                         [1, 2, 0])
        reply = r.execute_command("RL.WAIT", "tmo", 2, "1h", "ALGO", "fixed-window", "TIMEOUT",
                                  300)
        self.assertEqual(reply[:3], [0, 2, 0])
        self.assertGreater(reply[3], 0)  # retry_after_ms: RL.ALLOW's denial
        self.assertEqual(reply[5], 0)
        # nothing was charged: the count is still 2 of 2, a further RL.ALLOW
        # is denied the same way, and a waiter behind a waiter times out too
        peek = r.execute_command("RL.PEEK", "tmo", 2, "1h", "ALGO", "fixed-window")
        self.assertEqual(peek[:3], [0, 2, 0])
        a, b = self.conns(2)
        a.send(wait_cmd("tmo", 2, "1h", 400, "ALGO", "fixed-window"))
        self.until_waiting(1, "the first waiter in line")
        b.send(wait_cmd("tmo", 2, "1h", 200, "ALGO", "fixed-window"))
        self.assertEqual(b.read_reply()[:3], [0, 2, 0])
        self.assertEqual(a.read_reply()[:3], [0, 2, 0])
        self.assertEqual(self.srv.info_int("waiting_clients"), 0)
        # an unlimited key's waiter is answered at once with the six fields
        self.assertEqual(r.execute_command("RL.WAIT", "tmo2", 5, "1h", "TIMEOUT", 0)[:3],
                         [1, 5, 4])

    def test_a_closed_connection_is_charged_nothing_and_the_next_moves_up(self):
        """The witness of charges is INFO's count of allowed decisions: the
        RL.ALLOW and b's, and none for the client that left."""
        r = self.srv.redis()
        allowed0 = self.srv.info_int("allowed", "stats")
        dropped0 = self.srv.info_int("waiters_dropped")
        # one token per 800 ms: both waiters are in line before the next
        self.assertEqual(r.execute_command("RL.ALLOW", "gone", 1, 800)[0], 1)
        a, b = self.conns(2)
        a.send(wait_cmd("gone", 1, 800, 20000))
        self.until_waiting(1, "the first waiter in line")
        b.send(wait_cmd("gone", 1, 800, 20000))
        self.until_waiting(2, "the second waiter in line")
        a.close()  # the head leaves
        self.srv.wait_info("waiters_dropped", lambda v: v == dropped0 + 1, what="the head dropped")
        reply = b.read_reply(timeout=20)
        self.assertEqual(reply[:4], [1, 1, 0, 0])  # b moved up and was served
        self.assertEqual(self.srv.info_int("allowed", "stats"), allowed0 + 2)
        self.assertEqual(self.waiting(), 0)

    def test_pipelined_commands_behind_a_held_wait_answer_in_order(self):
        r = self.srv.redis()
        self.assertEqual(r.execute_command("RL.ALLOW", "pipe", 1, 400, "ALGO", "fixed-window")[0],
                         1)
        c = self.conns(1)[0]
        c.send(wait_cmd("pipe", 1, 400, 20000, "ALGO", "fixed-window") + encode("PING") +
               encode("ECHO", "after") + encode("RL.ALLOW", "pipe-other", 3, "1h"))
        replies = c.read_replies(4, timeout=20)
        self.assertEqual(replies[0][:3], [1, 1, 0])
        self.assertEqual(replies[1:3], [b"PONG", b"after"])
        self.assertEqual(replies[3][:3], [1, 3, 2])


class TestWait(WaitCases, ServerTestCase):
    """The cases above on the local backend, and what does not depend on
    the backend: arguments, bounds, EXEC, HTTP."""

    def test_bounds_answer_an_error_at_once(self):
        r = self.srv.redis()
        self.assertEqual(r.execute_command("RL.ALLOW", "full", 1, "1h")[0], 1)
        cs = self.conns(5)
        for i in range(4):
            cs[i].send(wait_cmd("full", 1, "1h", 20000))
            self.until_waiting(i + 1, "waiter %d" % i)
        cs[4].send(wait_cmd("full", 1, "1h", 20000))
        self.assertEqual(cs[4].read_reply(),
                         RespError("ERR too many waiters on this key: at most 4 wait in one line "
                                 "(max-waiters-per-key); retry later"))
        # the total: 6 (4 here, 2 on another key), then the 7th is refused
        other = self.conns(3)
        other[0].send(wait_cmd("full2", 1, "1h", 20000))
        self.until_waiting(4, "full2's head answered")  # an empty line's head is served at once
        self.assertEqual(other[0].read_reply()[0], 1)
        other[1].send(wait_cmd("full2", 1, "1h", 20000))
        self.until_waiting(5, "full2 waiter")
        other[2].send(wait_cmd("full2", 1, "1h", 20000))
        self.until_waiting(6, "full2 waiter 2")
        cs[4].send(wait_cmd("full3", 1, "1h", 20000))
        self.assertEqual(cs[4].read_reply(),
                         RespError("ERR too many waiters: the server holds at most 6 "
                                 "(max-waiters); retry later"))
        for c in cs[:4] + other[1:]:
            c.close()
        self.until_waiting(0, "closed waiters dropped")
        self.assertEqual(r.execute_command("RL.PEEK", "full", 1, "1h")[:3], [0, 1, 0])

    def test_bad_arguments(self):
        c = self.conns(1)[0]
        for args, msg in (
            (("k", 1, 100), "ERR wrong number of arguments for 'rl.wait' command"),
            (("k", 1, 100, "ALGO", "gcra"), "ERR RL.WAIT needs TIMEOUT ms after the other arguments"),
            (("k", 1, 100, "TIMEOUT", 5, "COST", 1), "ERR RL.WAIT takes nothing after TIMEOUT ms"),
            (("k", 1, 100, "TIMEOUT", "soon"),
             "ERR invalid TIMEOUT: expected milliseconds (or a duration: 500ms, 2s), got 'soon'"),
            (("k", 1, 100, "TIMEOUT", "2h"),
             "ERR TIMEOUT 7200000 ms is above the server's max-wait (300000 ms)"),
            (("k", 1, 100, "ALGO", "sliding-log", "LOGREJECTED", "TIMEOUT", 5),
             "ERR LOGREJECTED is refused with RL.WAIT: each denied try would be charged"),
        ):
            c.send(encode("RL.WAIT", *args))
            self.assertEqual(c.read_reply(), RespError(msg), args)

    def test_inside_exec_it_does_not_wait(self):
        r = self.srv.redis()
        self.assertEqual(r.execute_command("RL.ALLOW", "multi", 1, "1h")[0], 1)
        c = self.conns(1)[0]
        c.send(encode("MULTI") + wait_cmd("multi", 1, "1h", 20000) + encode("EXEC"))
        replies = c.read_replies(3, timeout=20)
        self.assertEqual(replies[0], b"OK")
        self.assertEqual(replies[1], b"QUEUED")
        self.assertEqual(replies[2][0][:3], [0, 1, 0])

    # ---- HTTP ----

    def get(self, path, conn=None):
        c = conn or self.srv.http_conn(timeout=30)
        c.request("GET", path)
        resp = c.getresponse()
        return resp.status, json.loads(resp.read())

    def test_http_allow_waits(self):
        status, body = self.get("/v1/allow?key=hw&limit=1&window=400&algo=fixed-window")
        self.assertEqual((status, body["allowed"]), (200, True))
        status, body = self.get("/v1/allow?key=hw&limit=1&window=400&algo=fixed-window&wait=20000")
        self.assertEqual((status, body["allowed"], body["remaining"]), (200, True, 0))
        self.assertGreater(body["delay_ms"], 0)  # it waited for the next window
        # a wait that ends first: the denial, 429, nothing charged (both
        # in one hour of hw2's fixed window)
        wait_window_room(3600, 3)
        status, body = self.get("/v1/allow?key=hw2&limit=1&window=1h&algo=fixed-window")
        self.assertEqual(status, 200)
        status, body = self.get("/v1/allow?key=hw2&limit=1&window=1h&algo=fixed-window&wait=100")
        self.assertEqual((status, body["allowed"], body["delay_ms"]), (429, False, 0))
        status, body = self.get("/v1/allow?key=hw2&limit=1&window=1h&algo=fixed-window&wait=x")
        self.assertEqual((status, body), (400, {
            "error": "invalid TIMEOUT: expected milliseconds (or a duration: 500ms, 2s), got 'x'"}))



class TestWaitRedis(WaitCases, ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis_srv = RedisServer().start()
        cls.SERVER_ARGS = ARGS + ("--backend", cls.redis_srv.url())
        try:
            super().setUpClass()
            until = deadline(20)
            while cls.srv.info("backend").get("backend_status") != "up":
                if time.monotonic() >= until:
                    raise AssertionError("the Redis backend never came up")
                time.sleep(0.02)
        except BaseException:
            cls.redis_srv.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.redis_srv.cleanup()


class TestWaitCheck(ServerTestCase):
    """?wait=ms on POST /v1/check: the whole all-or-none check waits."""
    HTTP = True
    TRUST = False
    RULES = ("domain: w\n"
             "descriptors:\n"
             "  - key: user\n"
             "    rate_limit: {unit: second, requests_per_unit: 1}\n")

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-wait-check-")
        path = os.path.join(d, "w.yaml")
        with open(path, "w") as f:
            f.write(cls.RULES)
        cls.SERVER_ARGS = ("--rules", path)
        super().setUpClass()

    def post(self, body, path):
        c = self.srv.http_conn(timeout=30)
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())

    def test_check_waits_for_the_whole_check(self):
        req = {"domain": "w", "descriptors": [[{"key": "user", "value": "ann"}]]}
        # 1 a second in windows of the wall clock's seconds: the two posts
        # start just after a second begins, and a second one allowed is
        # right only when a new second began between them (a busy machine
        # can take that long); then the pair is tried again, up to 5 times
        for attempt in range(5):
            time.sleep(1 - time.time() % 1 + 0.01)  # just into the next second
            t0 = time.time()
            status, body = self.post(req, "/v1/check")
            self.assertEqual((status, body["allowed"]), (200, True))
            status, body = self.post(req, "/v1/check")
            if int(time.time()) == int(t0):
                self.assertEqual((status, body["allowed"]), (429, False))
                break
            if (status, body["allowed"]) == (429, False):
                break
        else:
            self.fail("no two posts within one second in 5 tries")
        # the waited check is allowed as its second's one; a check without
        # waiting right after it is refused -- when it lands in that same
        # second, which a busy machine may miss: then the pair is tried
        # again (the key is over its limit at once after an allowed check)
        for attempt in range(5):
            status, body = self.post(req, "/v1/check?wait=5000")
            self.assertEqual((status, body["allowed"]), (200, True))
            self.assertEqual(body["statuses"][0]["code"], "OK")
            self.assertGreater(body["delay_ms"], 0)
            t1 = time.time()
            status, body = self.post(req, "/v1/check?wait=0")
            if (status, body["allowed"], body["statuses"][0]["code"]) == (429, False, "OVER_LIMIT"):
                break
            self.assertNotEqual(int(time.time()), int(t1),
                                "a second check within the waited check's second was not refused: "
                                "%d %r" % (status, body))
        else:
            self.fail("no check right after a waited one within one second in 5 tries")
        status, body = self.post(req, "/v1/check?colour=red")
        self.assertEqual(status, 400)
        self.assertEqual(body["error"], "POST /v1/check takes no query string but wait=ms: send "
                                        "the request as the JSON body")

