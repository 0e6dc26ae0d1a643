"""Lesson 07 memory lab: the largest max_completion_length that fits, by helpers.memory.estimate."""

from __future__ import annotations

from helpers.memory import T4_BUDGET_GB, estimate
from helpers.teaching.exercises.core import Exercise, Fail, numbered

LESSON = "07"


LAB_GENERATIONS = 8
LAB_BUDGET_GB = T4_BUDGET_GB
LAB_STEP = 64


def lab_fits(length: int):
    return estimate("t4", gpu="t4", budget_gb=LAB_BUDGET_GB, num_generations=LAB_GENERATIONS,
                    per_device_train_batch_size=LAB_GENERATIONS, max_completion_length=length)


def _judge_lab_length(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < LAB_STEP or answer % LAB_STEP:
        raise Fail("the answer", f"answer with a multiple of {LAB_STEP} tokens (64, 128, ...), not {answer!r}")
    est = lab_fits(answer)
    if not est.fits:
        raise Fail(f"max_completion_length={answer}", f"max_completion_length={answer} does not fit: predicted "
                   f"{est.peak_gb:.2f} GB, over {LAB_BUDGET_GB:g} GB with {LAB_GENERATIONS} generations: the activations "
                   "and logits grow with every token of every completion, and the budget is not the card's 14.56 GB "
                   "(vLLM's reservation and the CUDA context come out of it first).")
    nxt = lab_fits(answer + LAB_STEP)
    if nxt.fits:
        raise Fail(f"max_completion_length={answer}", f"max_completion_length={answer} fits ({est.peak_gb:.2f} GB) "
                   f"but {answer + LAB_STEP} fits too ({nxt.peak_gb:.2f} GB): find the largest (test every multiple of "
                   f"{LAB_STEP}, do not stop at a round number).")


largest_completion_length = Exercise(
    LESSON, "largest_completion_length",
    hint="loop over range(64, 8193, 64) and keep the lengths whose estimate(...).fits is True.",
    judge=_judge_lab_length,
    success="the logits and activations grow linearly with the completion length.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
