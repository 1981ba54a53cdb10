"""The wire under load and under attack: 10,000 pipelined commands in one
write, 200 connections at once, and hostile bytes (negative and huge
lengths, unterminated frames, binary keys, 1-byte writes, oversize
commands, inline commands, garbage).  After every hostile case a separate
client must still get exact answers."""

import random
import socket
import threading
import time

from harness import (BASE, RawConn, RespError, ServerTestCase, encode)

FW = ["ALGO", "fixed-window"]


class TestPipelining(ServerTestCase):

    def test_10000_in_one_write(self):
        """limit 5000 on one key: the first 5000 allowed with remaining
        counting down, the other 5000 denied with the exact retry."""
        t = BASE + 1000  # 59 s left of its minute
        data = encode("RL.ALLOW", "pipe", 5000, 60000, *FW, "AT", t) * 10000
        with self.srv.raw() as c:
            c.send(data)
            got = c.read_replies(10000, timeout=60)
        want = [[1, 5000, 4999 - i, 0, 59000, 0] for i in range(5000)]
        want += [[0, 5000, 0, 59000, 59000, 0]] * 5000
        for i in range(10000):
            if got[i] != want[i]:
                self.fail("reply %d: got %r, want %r" % (i, got[i], want[i]))

    def test_10000_mixed_commands_keep_order(self):
        cmds, want = [], []
        for i in range(10000):
            k = i % 4
            if k == 0:
                cmds.append(encode("PING"))
                want.append(b"PONG")
            elif k == 1:
                cmds.append(encode("ECHO", "m%d" % i))
                want.append(b"m%d" % i)
            elif k == 2:
                cmds.append(encode("RL.ALLOW", "mixed", 10 ** 6, "1h", *FW, "AT", BASE))
                want.append([1, 10 ** 6, 10 ** 6 - 1 - i // 4, 0, 3600000, 0])
            else:
                cmds.append(encode("RL.ALLOW", "mixed", 0, "1h"))
                want.append(RespError("ERR limit must be an integer between 1 and 1000000000000"))
        with self.srv.raw() as c:
            c.send(b"".join(cmds))
            got = c.read_replies(10000, timeout=60)
        self.assertEqual(got, want)

    def test_redis_py_pipeline(self):
        """A client library's pipeline of 10,000: a token bucket of 5000
        refilled at 5000 per hour (one token per 720 ms)."""
        r = self.srv.redis()
        p = r.pipeline(transaction=False)
        for _ in range(10000):
            p.execute_command("RL.ALLOW", "pyp", 5000, "1h", "AT", BASE)
        got = p.execute()
        r.close()
        want = [[1, 5000, 4999 - i, 0, 720 * (i + 1), 0] for i in range(5000)]
        want += [[0, 5000, 0, 720, 3600000, 0]] * 5000
        self.assertEqual(got, want)


class TestConcurrency(ServerTestCase):

    def test_200_connections_share_one_limit(self):
        """200 connections open at once, 20 requests each on one key with
        limit 1000: exactly 1000 allowed, and the allowed ones saw every
        remaining value 999..0 exactly once."""
        n_conns, per_conn, limit = 200, 20, 1000
        conns = [RawConn(self.srv.port) for _ in range(n_conns)]
        try:
            for c in conns:
                self.assertEqual(c.cmd("PING"), b"PONG")
            self.srv.wait_info("connected_clients", lambda v: v == n_conns + 1, "clients",
                               what="(want %d: ours and the INFO one)" % (n_conns + 1))
            results = [None] * n_conns
            errors = []
            barrier = threading.Barrier(n_conns, timeout=60)

            def work(i):
                try:
                    barrier.wait()
                    out = []
                    for _ in range(per_conn):
                        out.append(conns[i].cmd("RL.ALLOW", "shared", limit, "1h", *FW, "AT", BASE))
                    results[i] = out
                except Exception as e:  # reported below
                    errors.append(repr(e))

            threads = [threading.Thread(target=work, args=(i,)) for i in range(n_conns)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(120)
            self.assertEqual(errors, [])
            replies = [r for out in results for r in out]
            self.assertEqual(len(replies), n_conns * per_conn)
            allowed = [r for r in replies if r[0] == 1]
            denied = [r for r in replies if r[0] == 0]
            self.assertEqual(len(allowed), limit)
            self.assertEqual(sorted(r[2] for r in allowed), list(range(limit)))
            for r in allowed:
                self.assertEqual(r, [1, limit, r[2], 0, 3600000, 0])
            for r in denied:
                self.assertEqual(r, [0, limit, 0, 3600000, 3600000, 0])
        finally:
            for c in conns:
                c.close()
        self.srv.wait_info("connected_clients", lambda v: v == 1, "clients",
                           what="after closing them all")

    def test_redis_py_pool_threads(self):
        """32 threads on one redis-py connection pool, 50 requests each,
        each thread on its own key (limit 30) and all on one (limit 1000)."""
        r = self.srv.redis(max_connections=32)
        errors, out = [], {}

        def work(i):
            try:
                mine = [r.execute_command("RL.ALLOW", "pool:%d" % i, 30, "1h", *FW, "AT", BASE)[0]
                        for _ in range(50)]
                shared = [r.execute_command("RL.ALLOW", "pool", 1000, "1h", *FW, "AT", BASE)[0]
                          for _ in range(50)]
                out[i] = (mine, shared)
            except Exception as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        r.close()
        self.assertEqual(errors, [])
        for i in range(32):
            self.assertEqual(out[i][0], [1] * 30 + [0] * 20, i)
        self.assertEqual(sum(sum(v[1]) for v in out.values()), 1000)


class TestHostileInput(ServerTestCase):
    """Each case on a connection of its own; a witness connection checks the
    server afterwards with an exact decision."""

    SERVER_ARGS = ("--max-command", "64kb")

    def check_witness(self):
        """A fresh client still gets exact answers: PING, and on a counter
        key an RL.ALLOW that decides exactly what RL.PEEK predicted, with
        one less remaining than the previous check left."""
        with self.srv.raw() as w:
            self.assertEqual(w.cmd("PING"), b"PONG")
            args = ("witness", 10 ** 6, "1h", *FW, "AT", BASE)
            peek = w.cmd("RL.PEEK", *args)
            self.assertEqual(peek[:2], [1, 10 ** 6])
            self.assertEqual(w.cmd("RL.ALLOW", *args), peek)
            last = getattr(type(self), "witness_left", None)
            if last is not None:
                self.assertEqual(peek[2], last - 1)
            type(self).witness_left = peek[2]

    def protocol_errors(self):
        return self.srv.info_int("protocol_errors", "stats")

    def expect_closed_with(self, data, err_substring, replies_before=()):
        """Sends data; expects the replies_before, then one
        `-ERR Protocol error...` naming err_substring, then the close."""
        before = self.protocol_errors()
        with self.srv.raw() as c:
            c.send(data)
            got = c.read_until_eof()
        self.assertEqual(got[:-1], list(replies_before), data[:60])
        self.assertTrue(got and isinstance(got[-1], RespError), "%r -> %r" % (data[:60], got))
        self.assertTrue(got[-1].line.startswith("ERR Protocol error"), got[-1])
        self.assertIn(err_substring, got[-1].line)
        self.assertEqual(self.protocol_errors(), before + 1)
        self.check_witness()

    def test_negative_bulk_length(self):
        self.expect_closed_with(b"*1\r\n$-1\r\n", "invalid bulk length")
        self.expect_closed_with(b"*2\r\n$4\r\nECHO\r\n$-5\r\nhello\r\n", "invalid bulk length")

    def test_negative_and_zero_multibulk_are_skipped_like_redis(self):
        """redis-server skips `*-1` and `*0` (an empty command); so does sluiced."""
        with self.srv.raw() as c:
            c.send(b"*-1\r\n*0\r\n*-100\r\n*1\r\n$4\r\nPING\r\n")
            self.assertEqual(c.read_reply(), b"PONG")
            self.assertEqual(c.cmd("ECHO", "still here"), b"still here")
        self.check_witness()

    def test_huge_lengths(self):
        self.expect_closed_with(b"*1\r\n$99999999999\r\n", "argument longer than the server accepts")
        self.expect_closed_with(b"*1\r\n$9223372036854775808\r\n", "invalid bulk length")
        self.expect_closed_with(b"*1\r\n$1048577\r\n", "argument longer")
        self.expect_closed_with(b"*1000000\r\n", "too many arguments")
        self.expect_closed_with(b"*99999999999999999999999\r\n", "invalid multibulk length")
        self.expect_closed_with(b"*" + b"1" * 40, "invalid multibulk length")
        self.expect_closed_with(b"*1\r\n$" + b"9" * 40, "invalid bulk length")

    def test_malformed_frames(self):
        self.expect_closed_with(b"*1x\r\n$4\r\nPING\r\n", "invalid multibulk length")
        self.expect_closed_with(b"*1\r\n:4\r\nPING\r\n", "expected '$'")
        self.expect_closed_with(b"*1\r\n$4\r\nPINGxx\r\n", "not followed by CRLF")
        self.expect_closed_with(b"*1\r\n$4\rPING\r\n", "invalid bulk length")
        # replies to the commands before the bad frame are still delivered
        self.expect_closed_with(b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nok\r\n*1\r\n$x\r\n",
                                "invalid bulk length", [b"PONG", b"ok"])

    def test_unterminated_frame_blocks_nobody(self):
        """A half-sent command waits for its rest while others are served;
        completed later, it is answered; cut off by EOF, it is dropped."""
        with self.srv.raw() as c:
            c.send(b"*2\r\n$4\r\nECHO\r\n$11\r\nhello")
            for _ in range(3):
                self.check_witness()
            c.send(b" world\r\n")
            self.assertEqual(c.read_reply(), b"hello world")
        with self.srv.raw() as c:
            c.send(b"*3\r\n$8\r\nRL.ALLOW\r\n$4\r\nhalf\r\n$1\r\n5\r")
            c.sock.shutdown(socket.SHUT_WR)
            self.assertEqual(c.read_until_eof(), [], "no reply to a command that never ended")
        self.check_witness()

    def test_command_larger_than_max_command(self):
        """--max-command 64kb: an argument over it is refused as soon as its
        length is read; an unfinished command over it once buffered."""
        self.expect_closed_with(encode("ECHO", b"x" * (65 * 1024)), "argument longer")
        before = self.protocol_errors()
        with self.srv.raw() as c:
            # 1,000 arguments of 100 bytes: 106 KB, no argument over the
            # limit, and never finished
            c.send(b"*1000\r\n" + (b"$100\r\n" + b"a" * 100 + b"\r\n") * 999)
            got = c.read_until_eof()
        self.assertEqual(len(got), 1, got)
        self.assertTrue(got[0].line.startswith("ERR Protocol error"), got)
        self.assertIn("max-command", got[0].line)
        self.assertEqual(self.protocol_errors(), before + 1)
        self.check_witness()

    def test_complete_command_over_max_command_in_one_write(self):
        """The limit does not depend on how TCP cuts the bytes: a whole
        command over --max-command sent in one write is refused too."""
        data = b"*700\r\n" + (b"$100\r\n" + b"a" * 100 + b"\r\n") * 700  # 74 KB
        self.expect_closed_with(data, "max-command")

    def test_binary_keys(self):
        key = b"bin\x00key\r\n*1\r\n$4\r\nPING\r\n\xff"
        t = BASE
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", key, 2, 1000, *FW, "AT", t), [1, 2, 1, 0, 1000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", key, 2, 1000, *FW, "AT", t), [1, 2, 0, 0, 1000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", key, 2, 1000, *FW, "AT", t), [0, 2, 0, 1000, 1000, 0])
            # the prefixes before the NUL and the CRLF are other keys
            for other in (b"bin", b"bin\x00key", b"bin\x00key\r\n"):
                self.assertEqual(c.cmd("RL.ALLOW", other, 2, 1000, *FW, "AT", t)[0:3], [1, 2, 1])
            self.assertEqual(c.cmd("RL.PEEK", key, 2, 1000, *FW, "AT", t)[0], 0)
            self.assertEqual(c.cmd("RL.RESET", key), 1)
            self.assertEqual(c.cmd("RL.ALLOW", key, 2, 1000, *FW, "AT", t), [1, 2, 1, 0, 1000, 0])
            every_byte = bytes(range(256)) + bytes(range(255, -1, -1))
            self.assertEqual(c.cmd("RL.ALLOW", every_byte, 1, 1000, "AT", t)[0], 1)
            self.assertEqual(c.cmd("RL.ALLOW", every_byte, 1, 1000, "AT", t)[0], 0)
            self.assertEqual(c.cmd("RL.ALLOW", every_byte + b"x", 1, 1000, "AT", t),
                             RespError("ERR key must be 1 to 512 bytes"))
        self.check_witness()

    def test_one_byte_at_a_time(self):
        """A pipeline of 40 commands sent one byte per write: every reply
        exact and in order."""
        data = b"".join(encode("RL.ALLOW", "trickle", 30, "1h", *FW, "AT", BASE) for _ in range(40))
        data += b"PING\r\n" + encode("ECHO", "done")
        with self.srv.raw() as c:
            for i in range(len(data)):
                c.send(data[i:i + 1])
                if i % 16 == 0:
                    time.sleep(0.0005)  # let the server read partial frames
            got = c.read_replies(42)
        want = [[1, 30, 29 - i, 0, 3600000, 0] for i in range(30)]
        want += [[0, 30, 0, 3600000, 3600000, 0]] * 10 + [b"PONG", b"done"]
        self.assertEqual(got, want)
        self.check_witness()

    def test_inline_commands_and_empty_lines(self):
        with self.srv.raw() as c:
            c.send(b"\r\n\r\n\n   \r\nPING\r\n\tping  hello \r\necho lf-only\n"
                   b"RL.ALLOW inline 2 1000 ALGO fixed-window AT %d\r\n"
                   b"rl.allow inline 2 1000 algo fixed-window at %d\r\n"
                   b"RL.ALLOW inline 2 1000 ALGO fixed-window AT %d\r\n" % (BASE, BASE, BASE))
            self.assertEqual(c.read_replies(6), [
                b"PONG", b"hello", b"lf-only", [1, 2, 1, 0, 1000, 0], [1, 2, 0, 0, 1000, 0],
                [0, 2, 0, 1000, 1000, 0]])
            c.send(b"NOSUCH a b\r\n")
            self.assertEqual(c.read_reply(), RespError("ERR unknown command 'NOSUCH'"))
            c.send(b"QUIT\r\n")
            self.assertEqual(c.read_until_eof(), [b"OK"])
        self.expect_closed_with(b"PING " + b"x" * (70 * 1024), "too big inline request")
        self.check_witness()

    def test_garbage(self):
        """200 random byte strings (fixed seed), each on its own connection,
        then EOF: every reply is well-formed RESP (errors start with ERR),
        the server stays up, and the witness's answers stay exact."""
        rnd = random.Random(20240601)
        alphabet = b"*$:+-\r\n0123456789-PINGECHO RL.ALLOW\x00\xff"
        for i in range(200):
            n = rnd.randint(1, 300)
            if i % 2:
                data = bytes(rnd.randrange(256) for _ in range(n))
            else:
                data = bytes(rnd.choice(alphabet) for _ in range(n))
            with self.srv.raw() as c:
                c.send(data)
                c.sock.shutdown(socket.SHUT_WR)
                try:
                    got = c.read_until_eof()
                except ValueError as e:  # a partial reply: malformed output
                    self.fail("case %d %r: %s" % (i, data, e))
            for g in got:
                if isinstance(g, RespError):
                    self.assertTrue(g.line.startswith("ERR "), "case %d %r: %r" % (i, data, g))
            if i % 50 == 0:
                self.check_witness()
        self.check_witness()


class TestHostileNoReader(ServerTestCase):
    """A client that connects and never sends, or sends and vanishes."""

    def test_abrupt_disconnects(self):
        """Connections reset mid-command or mid-reply cost nothing: every
        one of them is closed (connected_clients back where it was), and the
        key holds exactly the decisions the server counted -- each reset
        connection's commands were run whole or not at all."""
        limit = 10 ** 6
        # This class's server is its own, with no client but INFO's own
        # connection once the start-up probe's close is processed (under ASan
        # that can lag: reading the count once raced it).
        base_clients = 1
        self.srv.wait_info("connected_clients", lambda v: v == base_clients, "clients",
                           what="(want %d before the test: only INFO's own)" % base_clients)
        dec0 = self.srv.info_int("decisions", "stats")
        for i in range(50):
            s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=10)
            s.sendall(encode("RL.ALLOW", "abrupt", limit, "1h", *FW, "AT", BASE) * 500
                      + b"*3\r\n$4\r\nECHO")
            # RST instead of FIN: SO_LINGER 0
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        # every reset connection closed by the server (bounded; fails otherwise)
        self.srv.wait_info("connected_clients", lambda v: v == base_clients, "clients",
                           what="(want %d: the 50 reset connections still open)" % base_clients)
        decided = self.srv.info_int("decisions", "stats") - dec0
        self.assertTrue(0 <= decided <= 50 * 500, decided)
        with self.srv.raw() as c:
            left = c.cmd("RL.PEEK", "abrupt", limit, "1h", *FW, "AT", BASE)
            self.assertEqual(left[:3], [1, limit, limit - decided - 1],
                             "the key holds the %d decisions INFO counted (PEEK answers as the next ALLOW would)" % decided)
            self.assertEqual(c.cmd("PING"), b"PONG")
        self.assertEqual(self.srv.info_int("decisions", "stats") - dec0, decided,
                         "nothing was decided after the connections closed")
