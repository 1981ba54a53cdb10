"""run_e2e.py -- runs the end-to-end suite (every tests/e2e/test_*.py)
against $SLUICE_BUILD/sluiced.

    python3 tests/e2e/run_e2e.py [-v] [-k PATTERN] [test module or id ...]

Exits 0 if every test passed.  Server logs are written to a fresh folder
($SLUICE_E2E_LOGS if set); it is removed when everything passed, kept (and
the end of each failed test's server logs printed) otherwise.  Any sluiced
still running when the runner ends is killed by its PID.
"""

import atexit
import os
import shutil
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class Result(unittest.TextTestResult):
    """Prints the tail of the logs of every server a failed test started
    (and of its class's shared server)."""

    def startTest(self, test):
        self._first_server = len(harness.STARTED)
        self._t0 = time.monotonic()
        super().startTest(test)

    def _show_logs(self, test):
        servers = harness.STARTED[self._first_server:]
        shared = getattr(type(test), "srv", None)
        if shared is not None and shared not in servers:
            servers = [shared] + servers
        for s in servers:
            if s.log_path is None:
                continue
            tail = s.log()[-3000:]
            self.stream.write("\n--- %s (pid %s) log %s, last lines:\n%s\n"
                              % (s.name, s.proc.pid if s.proc else "?", s.log_path, tail))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._show_logs(test)

    def addError(self, test, err):
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._show_logs(test)

    def stopTest(self, test):
        super().stopTest(test)
        if self.showAll:
            self.stream.write("      (%.1fs)\n" % (time.monotonic() - self._t0))


def kill_leftovers():
    for s in harness.STARTED:
        if s.proc is not None and s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(10)


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
    atexit.register(kill_leftovers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    here = os.path.dirname(os.path.abspath(__file__))
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = ["*%s*" % pattern]
    if args:
        suite = loader.loadTestsFromNames(args)
    else:
        suite = loader.discover(here, pattern="test_*.py", top_level_dir=here)

    print("sluiced: %s (deadlines x%g), logs: %s" % (harness.SLUICED, harness.SLOW, harness.LOG_DIR))
    t0 = time.monotonic()
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=Result, stream=sys.stdout)
    result = runner.run(suite)
    kill_leftovers()
    print("e2e: %d tests, %d failures, %d errors, %d skipped in %.1fs"
          % (result.testsRun, len(result.failures), len(result.errors), len(result.skipped),
             time.monotonic() - t0))
    if result.wasSuccessful():
        if not os.environ.get("SLUICE_E2E_LOGS"):
            shutil.rmtree(harness.LOG_DIR, ignore_errors=True)
        return 0
    print("server logs kept in %s" % harness.LOG_DIR)
    return 1


if __name__ == "__main__":
    sys.exit(main())
