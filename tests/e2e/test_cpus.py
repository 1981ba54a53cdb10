"""test_cpus.py -- sluiced's default number of worker threads follows the
CPUs the process may run on (its affinity mask, as `nproc` counts them; the
cgroup quota is unit-tested in tests/test_util.c), not every CPU of the
machine."""

import os
import unittest

from harness import ServerTestCase


class TestDefaultThreads(ServerTestCase):

    def threads_of(self, srv):
        with srv.raw() as c:
            info = c.cmd("INFO", "server").decode()
        for line in info.split("\r\n"):
            if line.startswith("threads:"):
                return int(line.split(":")[1])
        self.fail("no threads: line in INFO server")

    def test_affinity_one_cpu_means_one_worker(self):
        mine = os.sched_getaffinity(0)
        cpu = min(mine)
        os.sched_setaffinity(0, {cpu})  # the child inherits it
        try:
            srv = self.new_server(name="one-cpu")
        finally:
            os.sched_setaffinity(0, mine)
        self.assertEqual(self.threads_of(srv), 1)

    def test_default_is_the_allowed_cpus(self):
        srv = self.new_server(name="all-cpus")
        self.assertEqual(self.threads_of(srv), len(os.sched_getaffinity(0)))

    def test_threads_flag_wins(self):
        srv = self.new_server(name="three", threads=3)
        self.assertEqual(self.threads_of(srv), 3)


if __name__ == "__main__":
    unittest.main()
