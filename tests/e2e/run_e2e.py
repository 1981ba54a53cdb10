"""run_e2e.py -- runs the end-to-end suite (every tests/e2e/test_*.py)
against $SLUICE_BUILD/sluiced.

    python3 tests/e2e/run_e2e.py [-v] [-k PATTERN] [test module or id ...]

Exits 0 if every test passed.  Server logs are written to a fresh folder
($SLUICE_E2E_LOGS if set); it is removed when everything passed, kept (and
the end of each failed test's server logs printed) otherwise.  Any sluiced
still running when the runner ends is stopped by its PID (SIGTERM, then
SIGKILL after a deadline).

Prints one line per test, `CASE PASS|FAIL|SKIP <id> <seconds> [why]`, which
tests/run.sh counts (see Result).  Exits 1 if anything failed or no test ran.
"""

import atexit
import os
import re
import shutil
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class Lines:
    """A stream that knows whether it is at the start of a line, so that a
    CASE line always starts one (unittest's dots do not end theirs)."""

    def __init__(self, stream):
        self.stream = stream
        self.at_start = True

    def write(self, text):
        if text:
            self.at_start = text.endswith("\n")
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def case_id(test):
    """A test's id without spaces: module.Class.method, or for an error of a
    class or module fixture module.Class.tearDownClass and the like."""
    if isinstance(test, unittest.TestCase):
        return test.id()
    desc = getattr(test, "description", str(test))  # unittest's _ErrorHolder
    m = re.match(r"^(\w+) \((.*)\)$", desc)
    return "%s.%s" % (m.group(2), m.group(1)) if m else re.sub(r"\s+", "_", desc)


class Result(unittest.TextTestResult):
    """Prints the tail of the logs of every server a failed test started
    (and of its class's shared server), and one machine-readable line per
    test for tests/run.sh:

        CASE PASS|FAIL|SKIP <id> <seconds> [why]

    After each test it checks the servers the test started (Server.check:
    sanitizer reports, crash signals, forced kills; any still running is
    stopped with SIGTERM first), likewise every redis-server it created
    (RedisServer.cleanup: sanitizer and Redis crash reports in its log),
    and the new reports of its class's shared server: a problem fails that
    test.  A class or module fixture that fails
    (setUpClass, tearDownClass -- where a shared server is stopped and
    checked) is a case of its own."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.dots = False  # the CASE lines say it, one a line

    def startTest(self, test):
        self._first_server = len(harness.STARTED)
        self._first_redis = len(harness.REDIS_STARTED)
        self._t0 = time.monotonic()
        self._outcome = "PASS"
        self._why = ""
        super().startTest(test)

    def _servers(self, test):
        servers = harness.STARTED[self._first_server:]
        shared = getattr(type(test), "srv", None)
        if isinstance(shared, harness.Server) and shared not in servers:
            servers = [shared] + servers
        return servers

    def _show_logs(self, test):
        for s in self._servers(test):
            if s.log_path is None:
                continue
            tail = s.log()[-3000:]
            self.stream.write("\n--- %s (pid %s) log %s, last lines:\n%s\n"
                              % (s.name, s.proc.pid if s.proc else "?", s.log_path, tail))

    def _case(self, status, test, secs, why=""):
        why = " ".join(str(why).split())[:200]
        if not self.stream.stream.at_start:  # _WritelnDecorator(Lines)
            self.stream.write("\n")
        self.stream.write("CASE %s %s %.2f%s\n" % (status, case_id(test), secs,
                                                     " " + why if why else ""))
        self.stream.flush()

    def _fixture(self, test):
        """An error of a class or module fixture: no startTest/stopTest."""
        return not isinstance(test, unittest.TestCase)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._failed(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._failed(test, err)

    def _failed(self, test, err):
        why = "%s: %s" % (err[0].__name__, err[1])
        if self._fixture(test):
            self._case("FAIL", test, 0, why)
            return
        if self._outcome != "FAIL":
            self._outcome, self._why = "FAIL", why
        self._show_logs(test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._failed(test, err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if self._fixture(test):
            self._case("SKIP", test, 0, reason)
        elif self._outcome == "PASS":
            self._outcome, self._why = "SKIP", reason

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._outcome, self._why = "FAIL", "unexpected success"

    def stopTest(self, test):
        problems = []
        for s in self._servers(test):
            try:
                if s is getattr(type(test), "srv", None):
                    found = s.check()  # shared: tearDownClass stops it
                else:
                    s.cleanup()  # stops any the test left running
                    found = []
            except AssertionError as e:
                found = [str(e)]
            problems += ["%s (pid %s): %s" % (s.name, s.proc.pid if s.proc else "?", p)
                         for p in found]
        for r in harness.REDIS_STARTED[self._first_redis:]:
            try:
                r.cleanup()  # stops any the test left running; scans its log
            except AssertionError as e:
                problems.append(str(e))
        if problems:
            try:
                raise AssertionError("server problems after the test:\n" + "\n".join(problems))
            except AssertionError:
                self.addFailure(test, sys.exc_info())
        secs = time.monotonic() - self._t0
        super().stopTest(test)
        if self.showAll:
            self.stream.write("      (%.1fs)\n" % secs)
        self._case(self._outcome, test, secs, self._why)


def stop_leftovers():
    """Stops (SIGTERM, then SIGKILL after the deadline) every server still
    running; returns the problems found, one string each."""
    problems = []
    for s in harness.STARTED:
        if s.running():
            try:
                s.cleanup()
                problems.append("%s (pid %s) was still running at the end" % (s.name, s.pid))
            except AssertionError as e:
                problems.append(str(e).split("\n")[0])
    for r in harness.REDIS_STARTED:
        running = r.running()
        try:
            r.cleanup()
            if running:
                problems.append("redis-server (pid %s) was still running at the end" % r.proc.pid)
        except AssertionError as e:
            problems.append(str(e).split("\n")[0])
    return problems


def stop_leftovers_at_exit():
    for s in harness.STARTED:
        if s.running():
            s.stop(timeout=5)
    for r in harness.REDIS_STARTED:  # the Redis backend's tests' redis-servers
        try:
            r.cleanup()
        except AssertionError as e:
            print("redis-server left at exit: %s" % str(e).split("\n")[0])


MARKERS = ("plain-only", "no-asan", "no-tsan")


def markers(path):
    """The markers of the test module at path: its lines "# sluice-e2e:
    plain-only" (a heavy fleet or fault test -- a Redis Cluster, a ring, a
    fleet of sluiced -- run once, against the plain build), "# sluice-e2e:
    no-tsan" or "no-asan" (not run against that sanitizer's build; the
    next line says why).  docs/testing.md, "What runs under which build,
    and why", lists them.  A module left out of a build is not run there,
    not skipped: its cases count in the other builds' e2e alone.  An
    unknown marker is an error, not a module run everywhere by mistake."""
    found = set()
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^# sluice-e2e:\s*(\S+)\s*$", line)
        if not m:
            continue
        if m.group(1) not in MARKERS:
            raise ValueError("%s:%d: unknown marker '# sluice-e2e: %s' (known: %s)"
                             % (path, i + 1, m.group(1), ", ".join(MARKERS)))
        why = lines[i + 1] if i + 1 < len(lines) else ""
        if m.group(1).startswith("no-") and not re.match(r"^# \S", why):
            raise ValueError("%s:%d: '# sluice-e2e: %s' without its reason on the next line"
                             % (path, i + 1, m.group(1)))
        found.add(m.group(1))
    return found


def runs_under(path, kind):
    """Whether the module at path runs against a build of this kind
    (harness.KIND: plain, asan or tsan)."""
    m = markers(path)
    if kind == "plain":
        return True
    return "plain-only" not in m and "no-" + kind not in m


def main():
    args = sys.argv[1:]
    verbosity = 2 if "-v" in args else 1
    args = [a for a in args if a != "-v"]
    pattern = None
    if "-k" in args:
        i = args.index("-k")
        pattern = args[i + 1]
        del args[i:i + 2]

    if not os.access(harness.SLUICED, os.X_OK):
        print("no %s: build it first (make all)" % harness.SLUICED)
        return 1
    atexit.register(stop_leftovers_at_exit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    here = os.path.dirname(os.path.abspath(__file__))
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = ["*%s*" % pattern]
    if args:
        suite = loader.loadTestsFromNames(args)
    else:
        names = sorted(f[:-3] for f in os.listdir(here)
                       if f.startswith("test_") and f.endswith(".py"))
        try:
            left = [n for n in names
                    if not runs_under(os.path.join(here, n + ".py"), harness.KIND)]
        except ValueError as e:
            print("CASE FAIL run_e2e.markers 0.00 %s" % e)
            return 1
        names = [n for n in names if n not in left]
        if left:
            print("not run against the %s build (their sluice-e2e markers): %s"
                  % (harness.KIND, " ".join(left)))
        suite = loader.loadTestsFromNames(names)

    print("sluiced: %s (deadlines x%g), logs: %s" % (harness.SLUICED, harness.SLOW, harness.LOG_DIR))
    t0 = time.monotonic()
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=Result,
                                     stream=Lines(sys.stdout))
    result = runner.run(suite)
    leftovers = stop_leftovers()
    for p in leftovers:
        print("CASE FAIL run_e2e.leftover_servers 0.00 %s" % p)
    print("e2e: %d tests, %d failures, %d errors, %d skipped in %.1fs"
          % (result.testsRun, len(result.failures), len(result.errors), len(result.skipped),
             time.monotonic() - t0))
    if result.testsRun == 0:
        print("e2e: no test ran (a pattern or name that matches nothing?)")
        return 1
    if result.wasSuccessful() and not leftovers:
        if not os.environ.get("SLUICE_E2E_LOGS"):
            shutil.rmtree(harness.LOG_DIR, ignore_errors=True)
        return 0
    print("server logs kept in %s" % harness.LOG_DIR)
    return 1


if __name__ == "__main__":
    sys.exit(main())
