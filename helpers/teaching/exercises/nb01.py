"""Lesson 01 setup: right_wrong_advantages, the advantages of a right and a wrong answer in a group of 0/1 rewards."""

from __future__ import annotations

import math

from helpers.teaching.exercises.core import Exercise, Fail, call, close, numbered
from helpers.teaching.grpo_math import group_advantages

LESSON = "01"


# (right answers, group size): hard questions (1 right), easy ones (all but 1 right), even ones, and groups with no
# spread (every completion right, or every one wrong) - those last so a division by zero is named plainly.
RIGHT_WRONG_CASES = [(1, 4), (3, 4), (2, 4), (1, 8), (7, 8), (4, 8), (1, 2), (2, 6), (0, 4), (4, 4), (0, 8), (8, 8)]


def right_wrong_truth(n_right: int, group_size: int) -> tuple[float, float]:
    """(advantage of a right answer, of a wrong one) in a group of group_size completions of which n_right scored 1
    and the rest 0, by helpers.teaching.grpo_math.group_advantages (TRL's default scale_rewards='group')."""
    adv = group_advantages([1.0] * n_right + [0.0] * (group_size - n_right))
    return (adv[0] if n_right else 0.0), (adv[-1] if n_right < group_size else 0.0)


def _judge_right_wrong(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: right_wrong_advantages, not right_wrong_advantages(1, 4)")
    for k, g in RIGHT_WRONG_CASES:
        case = (f"{k} right of {g}" + (" (every completion right)" if k == g else " (every completion wrong)"
                                       if k == 0 else ""))
        want = right_wrong_truth(k, g)
        try:
            got = call(case, fn, k, g)
        except Fail as f:
            if k in (0, g):
                f.message += (" - when every completion scored the same there is nothing to compare: std 0, every "
                              "advantage 0, return (0.0, 0.0)")
            raise
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            raise Fail(case, f"for {case} you returned {got!r}; return a pair: (advantage of a right answer, "
                             "advantage of a wrong answer).")
        if close(got[0], want[0], 2e-3) and close(got[1], want[1], 2e-3):
            continue
        mean = k / g
        pop = math.sqrt(mean * (1 - mean))
        why = "reward minus the group's mean, divided by the group's sample std (n - 1) + 1e-4"
        if k in (0, g):
            why = "every completion scored the same: std 0, nothing to compare, every advantage is 0"
        elif pop > 0 and close(got[0], (1 - mean) / pop, 2e-3) and close(got[1], -mean / pop, 2e-3):
            why = "you divided by the population std (n); TRL uses the sample std (n - 1, trl.trainer.utils.nanstd)"
        elif close(got[0], 1 - mean, 2e-3) and close(got[1], -mean, 2e-3):
            why = "you subtracted the mean (the baseline) but did not divide by the group's std (+ 1e-4)"
        elif close(got[0], want[1], 2e-3) and close(got[1], want[0], 2e-3):
            why = "the pair is swapped: the right answer's advantage comes first"
        elif close(got[0], 1.0, 2e-3) and close(got[1], 0.0, 2e-3):
            why = "that is the raw reward: GRPO subtracts the group's mean, the baseline a value model would predict"
        elif not close(k * float(got[0]) + (g - k) * float(got[1]), 0.0, 1e-2):
            why = (f"a group's advantages sum to 0 (each is reward minus the group's mean); yours sum to "
                   f"{k * float(got[0]) + (g - k) * float(got[1]):.4f}: {why}")
        raise Fail(case, f"for {case} you returned ({float(got[0]):.4f}, {float(got[1]):.4f}); it should be "
                         f"({want[0]:.4f}, {want[1]:.4f}): {why}.")


right_wrong_advantages = Exercise(
    LESSON, "right_wrong_advantages",
    hint="the group's mean is n_right / group_size (the baseline, what a value model would have to predict); the sample "
         "std divides the sum of squared deviations by group_size - 1; add 1e-4 to it before dividing. All equal: (0, 0).",
    judge=_judge_right_wrong,
    success="the same reward of 1 is a big push on a hard question and a small one on an easy question - "
            "the group did the value model's job (helpers.teaching.grpo_math.group_advantages agrees).")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
