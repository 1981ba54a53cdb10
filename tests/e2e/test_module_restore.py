"""RESTORE of crafted DUMP payloads into a real redis-server with the sluice
module loaded (build/sluice.so): Redis hands a payload whose CRC is right
to the module's rdb_load, so every byte after the CRC check is the
module's to check.  A DUMP of a real sluice key is taken apart and
mutated -- its record count, each algorithm id, each string's length,
each opcode, every byte of every record, truncation at every offset,
random byte changes -- and the payload's trailer (RDB version, CRC-64
written here from its definition) recomputed, so that none is refused
for its checksum.  Each RESTORE must fail with "Bad data format" or make
a key that RL.ALLOW / RL.PEEK / DUMP / MEMORY USAGE handle sanely; Redis
must answer PING throughout and its log must show no crash (before the
module loaded with REDISMODULE_OPTIONS_HANDLE_IO_ERRORS, a changed count
made Redis panic: "Error loading data from RDB ... module 'sluice'").

Also: records at the module's bound on one key (max-memory / 64) still
load across DEBUG RELOAD and a restart, and a record over the bound is
refused by RESTORE and RL.RESTORE.

The servers are test_module.py's (its own folder, a free loopback port,
stopped by PID, the log scanned for sanitizer reports and crashes).
"""

# sluice-e2e: no-tsan
# The module runs inside redis-server on Redis's main thread only (see
# test_module.py): TSan has no second thread of ours to watch. ASan+UBSan run
# it.

import random

from harness import BASE, SANITIZED, RespError, encode
from test_module import ALGOS, ModuleCase

TRUST = ("trust-client-time", "yes", "max-client-skew", "7d")
ALGO_COUNT = len(ALGOS)  # SL_ALGO_COUNT
REC_SHARE = 64           # SL_STORE_REC_SHARE: a key may take max-memory / 64

# ---- the DUMP payload ---------------------------------------------------------
# A DUMP payload is an RDB object: the type byte (7: a module value, module
# API v2), the module type's id (a 64-bit length: 0x81 and 8 bytes big
# endian), then what the module saved -- each value an opcode (2: unsigned,
# 5: string) and the value -- and the EOF opcode 0; then the trailer: the
# RDB version (2 bytes little endian) and the CRC-64 of everything before
# it (8 bytes little endian).

RDB_TYPE_MODULE_2 = 7
OP_EOF, OP_UINT, OP_STRING = 0, 2, 5

# CRC-64/Jones as Redis computes it (crc64.c's "crc-64-jones"): polynomial
# 0xad93d23594c935a9, reflected in and out, initial value 0, no final xor;
# check value of "123456789": 0xe9c6d914c4b8d9ca.
_POLY_REFLECTED = int("{:064b}".format(0xad93d23594c935a9)[::-1], 2)
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY_REFLECTED if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc64(data):
    crc = 0
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xff] ^ (crc >> 8)
    return crc


def enc_len(n):
    """Redis's length encoding (rdbSaveLen)."""
    if n < 1 << 6:
        return bytes([n])
    if n < 1 << 14:
        return bytes([0x40 | n >> 8, n & 0xff])
    if n < 1 << 32:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def dec_len(b, pos):
    """(length, next pos) of Redis's length encoding at b[pos]."""
    first = b[pos]
    kind = first >> 6
    if kind == 0:
        return first & 0x3f, pos + 1
    if kind == 1:
        return (first & 0x3f) << 8 | b[pos + 1], pos + 2
    if first == 0x80:
        return int.from_bytes(b[pos + 1:pos + 5], "big"), pos + 5
    if first == 0x81:
        return int.from_bytes(b[pos + 1:pos + 9], "big"), pos + 9
    raise AssertionError("not a plain length at %d: %#x" % (pos, first))


def parse(payload):
    """(head, fields) of a sluice value's DUMP: head is the type byte and the
    module id as they are; fields the module's values in order, each
    ("u", int) or ("s", bytes).  Checks the trailer and the EOF opcode."""
    body, version, crc = payload[:-10], payload[-10:-8], payload[-8:]
    assert crc64(payload[:-8]).to_bytes(8, "little") == crc, "crc64 is not Redis's"
    assert body[0] == RDB_TYPE_MODULE_2, body[:1]
    _, pos = dec_len(body, 1)
    head, fields = body[:pos], []
    while True:
        op, pos = dec_len(body, pos)
        if op == OP_EOF:
            break
        if op == OP_UINT:
            v, pos = dec_len(body, pos)
            fields.append(("u", v))
        elif op == OP_STRING:
            n, pos = dec_len(body, pos)
            fields.append(("s", bytes(body[pos:pos + n])))
            pos += n
        else:
            raise AssertionError("opcode %d in a sluice value" % op)
    assert pos == len(body) and version == b"\x0a\x00", (pos, len(body), version)
    return head, fields


def build(head, fields, eof=True):
    """The body back from parse()'s parts (strings uncompressed)."""
    out = bytearray(head)
    for kind, v in fields:
        if kind == "u":
            out += enc_len(OP_UINT) + enc_len(v)
        else:
            out += enc_len(OP_STRING) + enc_len(len(v)) + v
    if eof:
        out += enc_len(OP_EOF)
    return bytes(out)


def seal(body):
    """A payload RESTORE accepts the checksum of: body, RDB version 10, CRC."""
    p = bytes(body) + b"\x0a\x00"
    return p + crc64(p).to_bytes(8, "little")


# ---- the mutations --------------------------------------------------------------

MUST_FAIL, EITHER = "must-fail", "either"


def mutations(payload, rnd, random_flips):
    """(what, expectation, body) for one real payload: structured changes
    (the count, each algorithm id, each string's length, each opcode,
    fields dropped, repeated or swapped), every byte of every record set
    to a few values, every header field of every record at its bounds,
    truncation at every offset, and `random_flips` bodies with 1 to 4
    random bytes changed (not the type byte: another Redis type is Redis's
    own parser, not the module's).  MUST_FAIL: no valid value can be read
    from it."""
    head, fields = parse(payload)
    n = fields[0][1]
    body = build(head, fields)
    out = []
    for c in sorted({0, n - 1, n + 1, n + 2, ALGO_COUNT, ALGO_COUNT + 1, 1 << 32,
                     (1 << 64) - 1} - {n}):
        out.append(("count %d" % c, MUST_FAIL, build(head, [("u", c)] + fields[1:])))
    for i, (kind, v) in enumerate(fields):
        if kind == "u" and i > 0:  # an algorithm id
            for a in sorted(set(range(ALGO_COUNT + 2)) | {1 << 31, (1 << 64) - 1} - {v}):
                f = list(fields)
                f[i] = ("u", a)
                out.append(("field %d algo %d" % (i, a),
                            MUST_FAIL if a >= ALGO_COUNT else EITHER, build(head, f)))
        # the field's opcode changed (its value kept)
        for op in (0, 1, 3, 4, 6, OP_UINT if kind == "s" else OP_STRING):
            f = bytearray(head)
            for j, (k2, v2) in enumerate(fields):
                code = op if j == i else (OP_UINT if k2 == "u" else OP_STRING)
                f += enc_len(code) + (enc_len(v2) if k2 == "u" else enc_len(len(v2)) + v2)
            out.append(("field %d opcode %d" % (i, op), MUST_FAIL, bytes(f) + b"\x00"))
        if kind == "s":
            # the string's length changed, its bytes kept.  Redis allocates
            # the length claimed before reading (its own ztrymalloc, before
            # the module): jemalloc refuses 2^62, but ASan's allocator, which
            # a sanitized run preloads into Redis, aborts past 1 TB and takes
            # a second for 4 GB, so a sanitized run claims at most 1 MB
            big = (1 << 20,) if SANITIZED else ((1 << 32) - 1, 1 << 62)
            for ln in sorted({0, len(v) - 1, len(v) + 1, len(v) + 8, 1 << 14, *big} - {len(v)}):
                f = bytearray(head)
                for j, (k2, v2) in enumerate(fields):
                    if k2 == "u":
                        f += enc_len(OP_UINT) + enc_len(v2)
                    else:
                        f += enc_len(OP_STRING) + enc_len(ln if j == i else len(v2)) + v2
                out.append(("field %d length %d" % (i, ln), EITHER, bytes(f) + b"\x00"))
            # every byte of the record
            for pos in range(len(v)):
                for nb in sorted({0x00, 0xff, v[pos] ^ 0x01, v[pos] ^ 0x80} - {v[pos]}):
                    r = bytearray(v)
                    r[pos] = nb
                    f = list(fields)
                    f[i] = ("s", bytes(r))
                    out.append(("field %d byte %d = %#x" % (i, pos, nb), EITHER, build(head, f)))
            # the record's header at its bounds: u16 flags, u16 reset code, i64 clock
            for off, size, vals in ((0, 2, (0xffff, 0x8000)), (2, 2, (0xffff, 0xf800, 2047)),
                                    (4, 8, ((1 << 62) - 1, 1 << 62, -(1 << 62) + 1, -(1 << 62),
                                            (1 << 63) - 1, -(1 << 63), 0))):
                for x in vals:
                    r = bytearray(v)
                    r[off:off + size] = x.to_bytes(size, "little", signed=x < 0)
                    f = list(fields)
                    f[i] = ("s", bytes(r))
                    out.append(("field %d header+%d = %d" % (i, off, x), EITHER, build(head, f)))
    for i in range(len(fields)):  # the count no longer matches, or a kind is out of place
        out.append(("field %d dropped" % i, MUST_FAIL, build(head, fields[:i] + fields[i + 1:])))
        out.append(("field %d twice" % i, MUST_FAIL, build(head, fields[:i + 1] + fields[i:])))
    if len(fields) >= 5:  # two records swapped: a valid value in another order
        out.append(("records swapped", EITHER,
                    build(head, [fields[0]] + fields[3:5] + fields[1:3] + fields[5:])))
    out.append(("no EOF opcode", MUST_FAIL, build(head, fields, eof=False)))
    for cut in range(1, len(body)):
        # Redis reads the value from the whole payload, trailer included: a
        # cut the trailer's 10 bytes could make up for may read as a value
        # (cut 2 short of the end: the version's 0x0a ends the last record,
        # its 0x00 is the EOF opcode); one missing more, never
        out.append(("cut at %d" % cut, MUST_FAIL if len(body) - cut > 10 else EITHER,
                    body[:cut]))
    for k in range(random_flips):
        b = bytearray(body)
        for _ in range(rnd.randint(1, 4)):
            b[rnd.randrange(1, len(b))] = rnd.randrange(256)
        out.append(("random %d" % k, EITHER, bytes(b)))
    return out


def make_keys(c):
    """Keys holding state under every algorithm, alone and together (the
    value's room and its records apart); returns their names.  Turns RDB
    compression off: DUMP then holds each record's bytes as they are."""
    assert c.cmd("CONFIG", "SET", "rdbcompression", "no") == b"OK"
    keys = []
    for a in ALGOS:
        for j in range(4):
            c.cmd("RL.ALLOW", "one:" + a, 5, "1h", "ALGO", a, "COST", 1 + j % 2,
                  "AT", BASE + 1000 * j)
        keys.append("one:" + a)
    for j, a in enumerate(ALGOS):
        c.cmd("RL.ALLOW", "all", 5, "1h", "ALGO", a, "AT", BASE + 100 * j)
    c.cmd("RL.ALLOW", "pair", 3, "1h", "ALGO", "gcra", "AT", BASE)
    c.cmd("RL.ALLOW", "pair", 3, "1h", "ALGO", "sliding-log", "AT", BASE)
    for a in ("token-bucket", "gcra"):  # units leased out: a record with its lease tail
        got = c.cmd("RL.LEASE", 4, "lease:" + a, 10, "1h", "ALGO", a, "AT", BASE)
        assert got[6] == 3, got
        keys.append("lease:" + a)
    return keys + ["all", "pair"]


def check_answer(test, reply, what):
    """An RL.ALLOW / RL.PEEK answer for limit 5, cost 1 (SPEC section 3), or an
    ERR: never anything else."""
    if isinstance(reply, RespError):
        test.assertTrue(reply.line.startswith("ERR "), (what, reply.line))
        return
    test.assertIsInstance(reply, list, what)
    test.assertEqual(len(reply), 6, (what, reply))
    allowed, limit, remaining, retry, reset, delay = reply
    test.assertIn(allowed, (0, 1), (what, reply))
    test.assertEqual(limit, 5, (what, reply))
    test.assertTrue(0 <= remaining <= 5, (what, reply))
    test.assertTrue(retry == 0 if allowed else retry >= 1, (what, reply))
    test.assertTrue(reset >= 0 and delay >= 0, (what, reply))


class TestRestoreMutated(ModuleCase):

    def test_mutated_dumps_fail_or_load_sanely(self):
        """Thousands of mutations of real DUMPs, each RESTOREd with its CRC
        recomputed: every one either fails with "Bad data format" (those that
        cannot hold a valid value always do) or makes a key RL.ALLOW,
        RL.PEEK, DUMP and MEMORY USAGE handle; Redis answers PING and never
        logs a crash."""
        r = self.redis(*TRUST)
        rnd = random.Random(23)
        with r.conn() as c:
            payloads = {k: c.cmd("DUMP", k) for k in make_keys(c)}
            cases = []
            for k, p in sorted(payloads.items()):
                cases += [(k + ": " + w, e, seal(b))
                          for w, e, b in mutations(p, rnd, 60 if SANITIZED else 250)]
            if SANITIZED:  # the same seed, a smaller share: a few seconds under ASan
                must = [x for x in cases if x[1] == MUST_FAIL]
                cases = rnd.sample(must, min(len(must), 700)) + \
                    rnd.sample([x for x in cases if x[1] != MUST_FAIL], 900)
            self.assertGreater(len(cases), 1500 if SANITIZED else 5000)
            accepted, refused, batch = [], 0, 200
            for start in range(0, len(cases), batch):
                part = cases[start:start + batch]
                c.send(b"".join(encode("RESTORE", "m:%d" % (start + i), 0, p, "REPLACE")
                                for i, (_, _, p) in enumerate(part)))
                for i, ((what, expect, _), rep) in enumerate(zip(part, c.read_replies(len(part)))):
                    if rep == b"OK":
                        self.assertNotEqual(expect, MUST_FAIL, what + " was accepted")
                        accepted.append(("m:%d" % (start + i), what))
                    else:
                        # never the checksum's error: the bytes reached the module
                        self.assertEqual(rep, RespError("ERR Bad data format"), what)
                        refused += 1
                self.assertEqual(c.cmd("PING"), b"PONG")
            # what was accepted is a sluice value every command handles
            for start in range(0, len(accepted), 50):
                part = accepted[start:start + 50]
                cmds = []
                for key, what in part:
                    cmds.append(("TYPE", key))
                    for a in ALGOS:
                        cmds.append(("RL.PEEK", key, 5, "1h", "ALGO", a, "AT", BASE + 5000))
                        cmds.append(("RL.ALLOW", key, 5, "1h", "ALGO", a, "AT", BASE + 5000))
                    cmds.append(("MEMORY", "USAGE", key))
                    cmds.append(("DUMP", key))
                c.send(b"".join(encode(*x) for x in cmds))
                replies = iter(c.read_replies(len(cmds)))
                again = []
                for key, what in part:
                    self.assertEqual(next(replies), b"sluice-rl", what)
                    for a in ALGOS:
                        check_answer(self, next(replies), "%s: RL.PEEK %s" % (what, a))
                        check_answer(self, next(replies), "%s: RL.ALLOW %s" % (what, a))
                    usage = next(replies)
                    self.assertTrue(isinstance(usage, int) and usage > 0, (what, usage))
                    dump = next(replies)
                    self.assertIsInstance(dump, bytes, what)
                    again.append(encode("RESTORE", key + ":again", 0, dump, "REPLACE"))
                # what the module saves of it loads again
                c.send(b"".join(again))
                for (key, what), rep in zip(part, c.read_replies(len(again))):
                    self.assertEqual(rep, b"OK", what + ": its own DUMP restored")
            self.assertEqual(c.cmd("PING"), b"PONG")
            c.cmd("FLUSHALL")
        self.assertGreater(refused, len(cases) // 2)
        self.assertGreater(len(accepted), 50)  # record bytes that are valid state still load
        self.assertTrue(r.proc.poll() is None, "redis-server exited")
        log = r.log()
        self.assertNotIn("Error loading data from RDB", log)
        self.assertNotIn("BUG REPORT", log)
        # the refusals are logged at verbose: thousands leave a notice-level log alone
        self.assertNotIn("value refused", log)

    def test_changed_count_is_refused(self):
        """The attacker's payload: a DUMP with its record count raised by one
        and the CRC recomputed.  RESTORE says "Bad data format", the key is
        not made, and Redis goes on (it used to panic)."""
        r = self.redis(*TRUST)
        with r.conn() as c:
            make_keys(c)
            head, fields = parse(c.cmd("DUMP", "all"))
            self.assertEqual(fields[0], ("u", ALGO_COUNT))
            bad = seal(build(head, [("u", ALGO_COUNT + 1)] + fields[1:]))
            self.assertEqual(c.cmd("RESTORE", "evil", 0, bad),
                             RespError("ERR Bad data format"))
            self.assertEqual(c.cmd("EXISTS", "evil"), 0)
            self.assertEqual(c.cmd("PING"), b"PONG")
            # the untouched payload, sealed by this test, restores
            self.assertEqual(c.cmd("RESTORE", "good", 0, seal(build(head, fields))), b"OK")
            self.assertEqual(c.cmd("DUMP", "good"), c.cmd("DUMP", "all"))


def sliding_log_at_bound(c, key, rec_max):
    """Makes key's sliding-log record as big as the module lets one key's
    state grow: the largest limit it accepts (a bigger one is refused with
    SL_ETOOBIG's message), every unit taken at a time of its own, with
    costs that make the log's entries long.  Returns the record's dump."""
    lo, hi = 1, 10 ** 6
    while lo < hi:  # the largest limit the bound accepts
        mid = (lo + hi + 1) // 2
        rep = c.cmd("RL.PEEK", key, mid, "1h", "ALGO", "sliding-log", "AT", BASE)
        if isinstance(rep, RespError):
            assert "1/64 of the memory bound" in rep.line, rep.line
            hi = mid - 1
        else:
            lo = mid
    limit, t, used, cmds = lo, BASE, 0, []
    step = max(1, 3000000 // limit)  # every entry inside the window
    while used < limit:
        cost = min(limit - used, 1 + len(cmds) % 2)
        t += 1 + (len(cmds) * 7919) % step
        cmds.append(encode("RL.ALLOW", key, limit, "1h", "ALGO", "sliding-log", "COST", cost,
                           "AT", t))
        used += cost
    c.send(b"".join(cmds))
    for rep in c.read_replies(len(cmds)):
        assert isinstance(rep, list) and rep[0] == 1, rep
    _, fields = parse(c.cmd("DUMP", key))
    return fields[2][1]


class TestBound(ModuleCase):

    def test_valid_state_at_the_bound_survives_reload_and_restart(self):
        """Keys under every algorithm, a sliding-log at the module's bound on
        one key and a sliding-buckets at its finest precision, with
        max-memory 1mb: DEBUG RELOAD and a restart from RDB give every key
        back byte for byte (the checks refuse nothing that was saved)."""
        mm = 1 << 20
        r = self.redis(*TRUST, "max-memory", "1mb", name="bound1")
        with r.conn() as c:
            keys = make_keys(c)
            rec = sliding_log_at_bound(c, "big-log", mm // REC_SHARE)
            self.assertLessEqual(len(rec), mm // REC_SHARE)
            keys.append("big-log")
            for p in (100, 1000, 10000, 60000):  # the finest precision the bound takes
                rep = c.cmd("RL.ALLOW", "big-buckets", 10 ** 9, "1h", "ALGO", "sliding-buckets",
                            "PRECISION", p, "AT", BASE)
                if isinstance(rep, RespError):
                    break
            keys.append("big-buckets")
            before = self.dumps(c, keys)
            self.assertTrue(all(isinstance(v, bytes) for v in before.values()), before)
            self.assertEqual(c.cmd("DEBUG", "RELOAD"), b"OK")
            self.assertEqual(self.dumps(c, keys), before)
            self.assertEqual(c.cmd("SAVE"), b"OK")
        r.assert_clean_stop()
        r2 = self.redis(*TRUST, "max-memory", "1mb", name="bound2")
        with r2.conn() as c:
            self.assertEqual(c.cmd("CONFIG", "SET", "rdbcompression", "no"), b"OK")
            self.assertEqual(self.dumps(c, keys), before)
            self.assertIsInstance(c.cmd("RL.ALLOW", "big-log", 5, "1h", "ALGO", "sliding-log",
                                        "AT", BASE + 7200000), list)

    def test_state_over_the_bound_is_refused(self):
        """A sliding-log made under max-memory 1mb is over the bound of a
        module loaded with max-memory 64kb (1 kB a key): its DUMP's RESTORE
        and its record's RL.RESTORE are refused, each with an error, and a
        record within the bound still restores."""
        big = self.redis(*TRUST, "max-memory", "1mb", name="big")
        with big.conn() as c:
            self.assertEqual(c.cmd("CONFIG", "SET", "rdbcompression", "no"), b"OK")
            rec = sliding_log_at_bound(c, "log", (1 << 20) // REC_SHARE)
            payload = c.cmd("DUMP", "log")
            c.cmd("RL.ALLOW", "small", 5, "1h", "ALGO", "sliding-log", "AT", BASE)
            small = c.cmd("DUMP", "small")
        self.assertGreater(len(rec), (64 << 10) // REC_SHARE)
        r = self.redis(*TRUST, "max-memory", "64kb", name="small")
        with r.conn() as c:
            self.assertEqual(c.cmd("RESTORE", "log", 0, payload), RespError("ERR Bad data format"))
            rep = c.cmd("RL.RESTORE", "log", "sliding-log", rec)
            self.assertIsInstance(rep, RespError)
            self.assertIn("over the module's bound on one key (max-memory / 64: 1024 bytes)",
                          rep.line)
            self.assertEqual(c.cmd("EXISTS", "log"), 0)
            self.assertEqual(c.cmd("RESTORE", "small", 0, small), b"OK")
            self.assertEqual(c.cmd("PING"), b"PONG")
