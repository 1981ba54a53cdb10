"""test_checker.py -- the checker's counts on synthetic histories: exact
numbers, window boundaries, uncertain decision times, slack, phases.
Run: /usr/bin/python3 -m unittest tests/faults/test_checker.py (from the
repository), or tests/test_faults.sh."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402
from checker import Answer  # noqa: E402


def at(t, key="k", algo="fixed", limit=2, window=1000, outcome="allowed", policy=False,
       phase="p", recv=None):
    return Answer(t, t if recv is None else recv, key, algo, limit, window, outcome, policy,
                  phase, 0)


def span(s, r, **kw):
    return at(s, recv=r, **kw)


class FixedWindows(unittest.TestCase):

    def counts(self, hist, slack=0.0):
        return checker.check(hist, slack)["*"]

    def test_within_the_limit_is_zero(self):
        c = self.counts([at(0), at(500), at(1000), at(1999)])
        self.assertEqual((c.requests, c.allowed, c.over_admitted, c.windows_over), (4, 4, 0, 0))

    def test_one_over_in_one_window(self):
        c = self.counts([at(0), at(500), at(999)])
        self.assertEqual((c.over_admitted, c.windows_over, c.keys_over), (1, 1, ["k"]))

    def test_boundary_belongs_to_the_next_window(self):
        # 999 is window 0, 1000 and 1001 window 1: L=2 each, nothing over
        self.assertEqual(self.counts([at(998), at(999), at(1000), at(1001)]).over_admitted, 0)
        c = self.counts([at(998), at(999), at(1000), at(1001), at(1002)])
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_over_in_two_windows(self):
        c = self.counts([at(t) for t in (0, 1, 2, 3, 1000, 1001, 1002)])
        self.assertEqual((c.over_admitted, c.windows_over), (3, 2))

    def test_windows_are_aligned_to_zero(self):
        # W = 300: windows [0,300) [300,600) ...; 299 and 300 are apart
        hist = [at(t, limit=1, window=300) for t in (299, 300, 599, 600)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_a_straddling_answer_goes_where_there_is_room(self):
        # L=1: [990,1010] may be window 0 or 1; with 500 in window 0 it fits in 1
        self.assertEqual(self.counts([at(500, limit=1), span(990, 1010, limit=1)]).over_admitted, 0)
        # two straddlers fill both windows; a third cannot fit
        hist = [span(990, 1010, limit=1), span(995, 1005, limit=1)]
        self.assertEqual(self.counts(hist).over_admitted, 0)
        c = self.counts(hist + [span(980, 1020, limit=1)])
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_a_straddler_with_both_windows_full(self):
        hist = [at(500, limit=1), at(1500, limit=1), span(990, 1010, limit=1)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_denied_errors_and_policy(self):
        hist = [at(0), at(1), at(2, outcome="denied"), at(3, outcome="error"),
                at(4, outcome="denied", policy=True)]
        c = self.counts(hist)
        self.assertEqual((c.requests, c.allowed, c.denied, c.errors, c.policy, c.unavailable,
                          c.over_admitted), (5, 2, 2, 1, 1, 2, 0))

    def test_an_allowed_policy_answer_counts_as_admitted(self):
        # --on-backend-error allow: admitted by the policy, over the limit
        hist = [at(0), at(1), at(2, policy=True)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.unavailable), (1, 1))

    def test_slack_widens_the_interval(self):
        hist = [at(998, limit=1), at(999, limit=1)]
        self.assertEqual(self.counts(hist).over_admitted, 1)
        # slack 1: 999 may be 1000 (window 1), 998 may not: both fit
        self.assertEqual(self.counts(hist, slack=1).over_admitted, 0)
        # 997 and 998 stay in window 0 even with 1 ms either side
        self.assertEqual(self.counts([at(997, limit=1), at(998, limit=1)], slack=1).over_admitted, 1)

    def test_keys_are_independent(self):
        hist = [at(0, key="a", limit=1), at(1, key="b", limit=1), at(2, key="a", limit=1)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.keys_over), (1, ["a"]))

    def test_same_key_different_rules_are_different_counters(self):
        hist = [at(0, limit=1), at(1, limit=1, window=500)]
        self.assertEqual(self.counts(hist).over_admitted, 0)


class SlidingWindows(unittest.TestCase):

    def counts(self, hist, slack=0.0):
        return checker.check(hist, slack)["*"]

    def s(self, t, **kw):
        kw.setdefault("algo", "sliding")
        return at(t, **kw)

    def test_three_within_w_is_one_over(self):
        c = self.counts([self.s(0), self.s(500), self.s(999)])
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_exactly_w_apart_is_not_over(self):
        # at 1000 the entry at 0 no longer counts: (t - W, t] is open at t - W
        self.assertEqual(self.counts([self.s(0), self.s(500), self.s(1000)]).over_admitted, 0)

    def test_sliding_is_not_fixed(self):
        # fixed windows would see 2 in [0,1000) and 2 in [1000,2000): fine;
        # as sliding, 900..1100 holds 4 within 200 ms
        hist = [self.s(t) for t in (900, 950, 1050, 1100)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.windows_over), (2, 1))
        fixed = [at(t) for t in (900, 950, 1050, 1100)]
        self.assertEqual(self.counts(fixed).over_admitted, 0)

    def test_over_answers_do_not_count_against_later_ones(self):
        # L=1, W=100: 0 kept, 50 over, 100 kept (0 left), 150 over, 200 kept
        c = self.counts([self.s(t, limit=1, window=100) for t in (0, 50, 100, 150, 200)])
        self.assertEqual((c.over_admitted, c.windows_over), (2, 2))

    def test_windows_over_cover_runs(self):
        # L=1, W=100: 0 kept; 10, 20, 99 over (one window from 10); 100 kept
        # (0 has left, the over ones never counted); 150 over: a second window
        c = self.counts([self.s(t, limit=1, window=100) for t in (0, 10, 20, 99, 100, 150)])
        self.assertEqual((c.over_admitted, c.windows_over), (4, 2))

    def test_uncertain_times_are_taken_in_the_server_s_favour(self):
        # L=1, W=1000: [0,10] and [995,1005] may be 1000 apart: not over
        hist = [span(0, 10, algo="sliding", limit=1), span(995, 1005, algo="sliding", limit=1)]
        self.assertEqual(self.counts(hist).over_admitted, 0)
        # [0,10] and [990,999]: at most 999 apart: over
        hist = [span(0, 10, algo="sliding", limit=1), span(990, 999, algo="sliding", limit=1)]
        self.assertEqual(self.counts(hist).over_admitted, 1)

    def test_an_interval_longer_than_w_is_never_certain(self):
        hist = [self.s(0, limit=1, window=100), span(10, 200, algo="sliding", limit=1, window=100)]
        self.assertEqual(self.counts(hist).over_admitted, 0)

    def test_slack(self):
        hist = [self.s(0, limit=1), self.s(998, limit=1)]
        self.assertEqual(self.counts(hist).over_admitted, 1)
        self.assertEqual(self.counts(hist, slack=1).over_admitted, 0)  # 1000 apart at most


class Phases(unittest.TestCase):

    def test_counts_per_phase_and_in_all(self):
        hist = [at(0, phase="a", limit=1), at(1, phase="a", limit=1),
                at(0, phase="b", key="x", limit=1), at(5, phase="b", key="x", outcome="error")]
        out = checker.check(hist)
        self.assertEqual(sorted(out), ["*", "a", "b"])
        self.assertEqual((out["a"].requests, out["a"].over_admitted), (2, 1))
        self.assertEqual((out["b"].requests, out["b"].over_admitted, out["b"].unavailable),
                         (2, 0, 1))
        self.assertEqual((out["*"].requests, out["*"].over_admitted, out["*"].unavailable),
                         (4, 1, 1))

    def test_same_key_in_two_phases_is_counted_apart(self):
        hist = [at(0, phase="a", limit=1), at(1, phase="b", limit=1)]
        self.assertEqual(checker.check(hist)["*"].over_admitted, 0)

    def test_empty_history(self):
        self.assertEqual(checker.check([])["*"].requests, 0)

    def test_unknown_algorithm_is_refused(self):
        with self.assertRaisesRegex(ValueError, "unknown algorithm 'leaky'"):
            checker.check([at(0, algo="leaky")])


def bk(t, recv=None, algo="bucket", limit=2, window=1000, **kw):
    return at(t, algo=algo, limit=limit, window=window, recv=recv, **kw)


class Buckets(unittest.TestCase):
    """B = L = 2 tokens, 2 per 1000 ms (one per 500 ms), full at the start:
    over [t0, t1] at most 2 + 2 * (t1 - t0) / 1000 admissions."""

    def counts(self, hist, slack=0.0):
        return checker.check(hist, slack)["*"]

    def test_the_burst_then_one_per_refill_is_exactly_the_bound(self):
        # 2 at 0, then one every 500 ms: over [0, 500k] exactly 2 + k
        hist = [bk(0), bk(0)] + [bk(500 * k) for k in range(1, 9)]
        c = self.counts(hist)
        self.assertEqual((c.allowed, c.over_admitted, c.windows_over), (10, 0, 0))

    def test_one_more_than_the_bound_is_one_over(self):
        # a third at 0: 3 in [0, 0] > 2
        c = self.counts([bk(0), bk(0), bk(0)])
        self.assertEqual((c.over_admitted, c.windows_over, c.keys_over), (1, 1, ["k"]))
        # 2 + 1 at 500 is the bound; a fourth by 500 is one over
        self.assertEqual(self.counts([bk(0), bk(0), bk(500)]).over_admitted, 0)
        self.assertEqual(self.counts([bk(0), bk(0), bk(499), bk(500)]).over_admitted, 1)

    def test_the_bound_counts_from_the_worst_start(self):
        # steady at the rate for 4 s (2 + 8 over [0, 4000]), then one extra
        # token at 4000: over [0, 4000] 11 > 10, though any 1 s around 4000
        # holds at most 2 + 2 (a lost bucket state refilled to B shows only
        # against the interval since the bucket was last full)
        hist = [bk(0), bk(0)] + [bk(500 * k) for k in range(1, 9)] + [bk(4000)]
        self.assertEqual(self.counts(hist).over_admitted, 1)

    def test_a_full_bucket_after_a_quiet_time_is_not_over(self):
        # 2 at 0; quiet 10 s (the bucket holds only B = 2 again); 2 at 10000
        hist = [bk(0), bk(0), bk(10000), bk(10000)]
        self.assertEqual(self.counts(hist).over_admitted, 0)
        self.assertEqual(self.counts(hist + [bk(10000)]).over_admitted, 1)

    def test_uncertain_times_are_taken_in_the_server_s_favour(self):
        # 3 answers whose intervals span 500 ms: they may be 500 apart, 3 <= 2 + 1
        hist = [bk(0, recv=500), bk(0, recv=500), bk(0, recv=500)]
        self.assertEqual(self.counts(hist).over_admitted, 0)
        # a fourth in the same span is over wherever they were
        self.assertEqual(self.counts(hist + [bk(0, recv=500)]).over_admitted, 1)

    def test_slack(self):
        # 3 at 0 with recv 0: over; slack 250 on each side makes the span 500
        hist = [bk(0), bk(0), bk(0)]
        self.assertEqual(self.counts(hist, slack=0.0).over_admitted, 1)
        self.assertEqual(self.counts(hist, slack=250.0).over_admitted, 0)

    def test_over_answers_do_not_count_against_later_ones(self):
        # 4 at 0 (2 over), then one at 500: the kept 2 + 1 is the bound
        hist = [bk(0)] * 4 + [bk(500)]
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.windows_over), (2, 1))

    def test_gcra_is_the_same_rule(self):
        hist = [bk(0, algo="gcra"), bk(0, algo="gcra"), bk(500, algo="gcra")]
        self.assertEqual(self.counts(hist).over_admitted, 0)
        self.assertEqual(self.counts(hist + [bk(500, algo="gcra")]).over_admitted, 1)

    def test_denied_answers_take_nothing(self):
        hist = [bk(0), bk(0), bk(1, outcome="denied"), bk(2, outcome="error")]
        c = self.counts(hist)
        self.assertEqual((c.requests, c.allowed, c.over_admitted), (4, 2, 0))

    def test_windows_over_cover_runs(self):
        # 3 at 0 and 3 at 5000 (after a refill to B): 2 over, 5000 apart
        hist = [bk(0)] * 3 + [bk(5000)] * 3
        c = self.counts(hist)
        self.assertEqual((c.over_admitted, c.windows_over), (2, 2))


def sw(t, recv=None, limit=4, window=1000, **kw):
    return at(t, algo="swindow", limit=limit, window=window, recv=recv, **kw)


class SlidingWindow(unittest.TestCase):
    """L = 4 per 1000 ms, SPEC's weighted counter: at t = i*W + e allowed
    iff n + floor(p * (W - e) / W) + 1 <= L."""

    def counts(self, hist, slack=0.0):
        return checker.check(hist, slack)["*"]

    def test_at_most_l_in_each_aligned_window(self):
        self.assertEqual(self.counts([sw(t) for t in (0, 1, 2, 999)]).over_admitted, 0)
        c = self.counts([sw(t) for t in (0, 1, 2, 3, 999)])
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_the_previous_window_weighs_exactly(self):
        # 4 in window 0; at e = 500 of window 1 p weighs floor(4 * 500 / 1000) = 2:
        # 2 more are the bound, a third is over
        prev = [sw(t) for t in (0, 1, 2, 3)]
        self.assertEqual(self.counts(prev + [sw(1500), sw(1500)]).over_admitted, 0)
        c = self.counts(prev + [sw(1500), sw(1500), sw(1500)])
        self.assertEqual((c.over_admitted, c.windows_over), (1, 1))

    def test_the_weight_is_floored(self):
        # at e = 250 p = 4 weighs floor(3.0) = 3: 1 more; at e = 251, floor(2.996) = 2: 2
        prev = [sw(t) for t in (0, 1, 2, 3)]
        self.assertEqual(self.counts(prev + [sw(1250), sw(1250)]).over_admitted, 1)
        self.assertEqual(self.counts(prev + [sw(1251), sw(1251)]).over_admitted, 0)

    def test_uncertain_times_are_taken_in_the_server_s_favour(self):
        # an answer in [1250, 1750] is judged at its latest offset (750: weight 1)
        prev = [sw(t) for t in (0, 1, 2, 3)]
        hist = prev + [sw(1250, recv=1750)] * 3
        self.assertEqual(self.counts(hist).over_admitted, 0)
        # an answer straddling two windows is judged by the aligned-window rule only
        self.assertEqual(self.counts(prev + [sw(990, recv=1010)]).over_admitted, 0)
        self.assertEqual(self.counts(prev + [sw(990, recv=1010)] * 5).over_admitted, 1)

    def test_a_previous_window_over_l_weighs_as_l(self):
        # 5 in window 0 (1 over there); window 1 is judged with p = L = 4
        prev = [sw(t) for t in (0, 1, 2, 3, 4)]
        c = self.counts(prev + [sw(1500), sw(1500)])
        self.assertEqual(c.over_admitted, 1)


if __name__ == "__main__":
    unittest.main()
