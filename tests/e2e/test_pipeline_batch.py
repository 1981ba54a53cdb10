"""A pipelined run of RL.ALLOW is decided as one batch (docs/sluiced.md,
"How it serves"), over a real socket: the same seeded random stream --
RL.ALLOW on a few keys (repeats within a run), bad ones, RL.PEEK,
RL.RESET, MULTI ... EXEC, unknown commands, PING -- sent in one write to
one sluiced and one command per round trip to a fresh one answers the
same, in RESP2 and after HELLO 3; and the first one did batch.  Every
decision is at a client time (AT), so the two servers' clocks do not
matter.  (tests/test_pipeline.c checks the same without a network, byte
for byte, with users, the journal's recorder and the deny window.)"""

import random

from harness import BASE, ServerTestCase, encode

KEYS = ["a", "b", "c", "user:1", "user:2", "k"]
ALGOS = ["token-bucket", "gcra", "fixed-window", "sliding-log", "sliding-window"]


def stream(seed, n):
    """n commands (each a list of arguments), at client times from BASE."""
    rnd = random.Random(seed)
    out, t = [], BASE
    while len(out) < n:
        t += rnd.randrange(0, 400)
        r = rnd.randrange(100)
        if r < 75:
            c = ["RL.ALLOW", rnd.choice(KEYS), rnd.randrange(1, 5), rnd.choice(["1s", "10s"])]
            if rnd.randrange(4) == 0:
                c += ["ALGO", rnd.choice(ALGOS)]
            if rnd.randrange(4) == 0:
                c += ["COST", rnd.randrange(3)]
            out.append(c + ["AT", t])
        elif r < 83:
            out.append(rnd.choice([["RL.ALLOW", "a", 5],
                                   ["RL.ALLOW", "a", "x5", "10s", "AT", t],
                                   ["RL.ALLOW", "b", 5, "0", "AT", t],
                                   ["RL.ALLOW", "c", 5, "10s", "ALGO", "nope"],
                                   ["RL.ALLOW", "k", 5, "10s", "COST", -1, "AT", t]]))
        elif r < 87:
            out.append(["RL.PEEK", rnd.choice(KEYS), 3, "10s", "AT", t])
        elif r < 90:
            out.append(["RL.RESET", rnd.choice(KEYS)])
        elif r < 93:
            out += [["MULTI"], ["RL.ALLOW", rnd.choice(KEYS), 2, "10s", "AT", t], ["EXEC"]]
        elif r < 96:
            out.append(["NOSUCHCOMMAND", "x"])
        else:
            out.append(["PING"])
    return out


class TestPipelineBatch(ServerTestCase):

    def test_batched_equals_one_at_a_time(self):
        alone = self.new_server(trust_client_time=True)
        for proto, seed in ((2, 30), (3, 31)):
            cmds = stream(seed, 600)
            with self.srv.raw() as piped, alone.raw() as single:
                if proto == 3:  # not compared: HELLO's map names the connection's id
                    piped.cmd("HELLO", 3)
                    single.cmd("HELLO", 3)
                before = self.srv.info_int("decisions_batched")
                piped.send(b"".join(encode(*c) for c in cmds))
                got = piped.read_replies(len(cmds), timeout=60)
                want = [single.cmd(*c) for c in cmds]
                for i, (g, w) in enumerate(zip(got, want)):
                    if g != w:
                        self.fail("RESP%d, command %d %r: batched %r, one at a time %r"
                                  % (proto, i, cmds[i], g, w))
                self.assertGreater(self.srv.info_int("decisions_batched"), before,
                                   "the pipelined stream was never batched")
        for f in ("decisions", "allowed", "denied", "error_replies"):
            self.assertEqual(self.srv.info_int(f), alone.info_int(f), f)
        self.assertEqual(alone.info_int("decisions_batched"), 0)
