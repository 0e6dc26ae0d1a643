"""Lesson 06 evaluate: my_pass_at_k, against helpers.evaluation.pass_at_k."""

from __future__ import annotations

import math

from helpers.evaluation import pass_at_k
from helpers.teaching.exercises.core import Exercise, Fail, call, close, numbered

LESSON = "06"


PASS_K_CASES = [(4, 0, 1), (4, 4, 2), (4, 1, 1), (4, 1, 2), (4, 1, 4), (10, 3, 5), (8, 2, 3)]


def _judge_pass_at_k(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: my_pass_at_k, not my_pass_at_k(4, 1, 2)")
    for n, c, k in PASS_K_CASES:
        case = f"n={n} samples, c={c} correct, k={k}"
        got = call(case, fn, n, c, k)
        truth = pass_at_k(n, c, k)
        if not close(got, truth, 1e-6):
            why = ""
            if close(got, 1 - (1 - c / n) ** k, 1e-6):
                why = (" - that is drawing k samples WITH replacement; pass@k picks k of the n samples without "
                       "replacement: 1 - C(n-c, k) / C(n, k)")
            elif close(got, c / n, 1e-6):
                why = " - c/n is pass@1 only; for k > 1 it is the chance that at least one of k picked samples is right"
            elif close(got, min(1.0, c * k / n), 1e-6):
                why = (" - chances of several samples do not add (k x c/n can pass 1): at least one right is 1 minus "
                       "the chance that all k are wrong")
            elif close(got, math.comb(c, k) / math.comb(n, k), 1e-6):
                why = " - that is the chance that ALL k picked samples are right; pass@k needs at least one"
            elif not isinstance(got, (int, float)) or not 0 <= got <= 1:
                why = " - a probability is between 0 and 1: 1 - C(n-c, k) / C(n, k)"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {truth:.4f}{why}.")


my_pass_at_k = Exercise(
    LESSON, "my_pass_at_k",
    hint="1 minus the chance that all k picked samples are wrong: math.comb(n - c, k) / math.comb(n, k) (comb gives 0 "
         "when k > n - c).",
    judge=_judge_pass_at_k,
    success="this is the unbiased estimator of the Codex paper, as helpers.evaluation.pass_at_k.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
