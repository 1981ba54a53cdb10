"""The rules caps of docs/rules.md (src/rules/rules.h) through sluiced:
for SL_RULES_MAX_DEPTH, SL_RULES_MAX_LIMITS, SL_RULES_MAX_FILES,
SL_RULES_MAX_FILE and SL_RULES_MAX_RULES, a set exactly at the cap
serves; one over it is refused by RL.RULES RELOAD with the exact message
(the old set keeps serving) and refuses a start (exit status 1, the message
in the log).  Every file is generated in a temporary folder, deleted after."""

# sluice-e2e: no-tsan
# The caps are checked while a rules set is parsed, before it is swapped in;
# the swap under serving workers is test_rules_reload's, which runs under TSan.
# ASan+UBSan run it.

import re
import subprocess
import unittest

from harness import SLOW, SLUICED, RespError, Server, assert_clean_stop, run_checked
import harness

MAX_FILE = 4 << 20
MAX_FILES = 1024
MAX_DEPTH = 16
MAX_RULES = 100000
MAX_LIMITS = 8

LEVEL = "[{key: k, descriptors: "


def nested(levels):
    """Descriptors nested `levels` deep (the innermost without children),
    on line 2."""
    n = levels - 1
    return "domain: d\ndescriptors: " + LEVEL * n + "[{key: k}]" + "}]" * n + "\n"


def limits(n):
    return "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n" + "".join(
        "      - {window: %ds, requests_per_unit: 1}\n" % (i + 1) for i in range(n))


def descriptors(domain, n):
    return "domain: %s\ndescriptors:\n" % domain + "".join(
        "  - {key: k, value: v%d}\n" % i for i in range(n))


class TestRulesCaps(harness.ScratchDirCase):
    SCRATCH_PREFIX = "sl-caps-"  # short: paths are in the messages

    def start(self, path):
        s = Server("--rules", path, "--watch-rules=no", name=self.id().split(".")[-1])
        s.start(timeout=60)
        self.addCleanup(s.kill)
        return s

    def reload_refused(self, s, msg):
        """RL.RULES RELOAD answers the error with msg; version 1 serves on."""
        with s.raw() as c:
            e = c.cmd("RL.RULES", "RELOAD", timeout=60)
        self.assertIsInstance(e, RespError, e)
        self.assertEqual(e.line, "ERR rules not reloaded, version 1 keeps serving: " + msg)
        info = s.info("rules")
        self.assertEqual(info["rules_version"], "1")
        self.assertEqual(info["rules_last_error"], msg)

    def start_refused(self, path, msg):
        """sluiced --rules path exits 1 at once, naming the error."""
        p = run_checked([SLUICED, "--port", "0", "--rules", path], capture_output=True,
                        stdin=subprocess.DEVNULL, timeout=60 * SLOW)
        out = p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 1, out)
        self.assertIn('msg="cannot load the rules: refusing to start"', out)
        self.assertIn('err="%s"' % msg, out)
        self.assertIsNone(re.search(r'msg="?listening', out), "nothing listened")

    def test_max_depth(self):
        path = self.write("d.yaml", nested(MAX_DEPTH))
        s = self.start(path)
        self.assertEqual(s.info_int("rules_descriptors", "rules"), MAX_DEPTH)
        self.write("d.yaml", nested(MAX_DEPTH + 1))
        col = len("descriptors: ") + MAX_DEPTH * len(LEVEL) + 1  # the 17th level's "["
        msg = "%s:2:%d: descriptors nested deeper than 16 levels (SL_RULES_MAX_DEPTH)" % (path, col)
        self.reload_refused(s, msg)
        self.start_refused(path, msg)
        assert_clean_stop(s)

    def test_max_limits(self):
        path = self.write("api.yaml", limits(MAX_LIMITS))
        s = self.start(path)
        with s.raw() as c:
            r = c.cmd("RL.CHECK", "api", "DESCRIPTOR", "user", "u")
        self.assertEqual(r[0], 1, r)
        self.write("api.yaml", limits(MAX_LIMITS + 1))
        msg = "%s:5:7: more than 8 limits on one descriptor (SL_RULES_MAX_LIMITS)" % path
        self.reload_refused(s, msg)
        self.start_refused(path, msg)
        assert_clean_stop(s)

    def test_max_files(self):
        for i in range(MAX_FILES):
            self.write("d%04d.yaml" % i, "domain: d%04d\n" % i)
        s = self.start(self.dir)
        self.assertEqual(s.info_int("rules_domains", "rules"), MAX_FILES)
        self.write("d%04d.yaml" % MAX_FILES, "domain: d%04d\n" % MAX_FILES)
        msg = "%s: more than 1024 rules files (SL_RULES_MAX_FILES)" % self.dir
        self.reload_refused(s, msg)
        self.start_refused(self.dir, msg)
        assert_clean_stop(s)

    def test_max_file_size(self):
        head = ("domain: big\ndescriptors:\n  - key: k\n"
                "    rate_limit: {unit: second, requests_per_unit: 1}\n")
        line = "#" + "x" * 98 + "\n"
        body = head + line * ((MAX_FILE - len(head)) // len(line))
        body += "#" * (MAX_FILE - len(body) - 1) + "\n"
        self.assertEqual(len(body), MAX_FILE)
        path = self.write("big.yaml", body)
        s = self.start(path)
        self.assertEqual(s.info_int("rules_descriptors", "rules"), 1)
        with open(path, "a") as f:
            f.write("#")
        msg = ("%s:1:1: file too large: 4194305 bytes (the limit is 4194304 bytes, "
               "SL_RULES_MAX_FILE)" % path)
        self.reload_refused(s, msg)
        self.start_refused(path, msg)
        assert_clean_stop(s)

    def test_max_rules_across_files(self):
        """The descriptor cap is on the whole set: two files of 50,000
        serve, one more in the second is refused where it crosses."""
        half = MAX_RULES // 2
        self.write("a.yaml", descriptors("a", half))
        b = self.write("b.yaml", descriptors("b", half))
        s = self.start(self.dir)
        self.assertEqual(s.info_int("rules_descriptors", "rules"), MAX_RULES)
        self.write("b.yaml", descriptors("b", half + 1))
        # b's descriptor number half + 1 is on line half + 3, its map at column 5
        msg = "%s:%d:5: more than 100000 descriptors (SL_RULES_MAX_RULES)" % (b, half + 3)
        self.reload_refused(s, msg)
        self.start_refused(self.dir, msg)
        assert_clean_stop(s)


if __name__ == "__main__":
    unittest.main()
