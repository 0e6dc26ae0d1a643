"""Exercises that check themselves (in the spirit of Kaggle's learntools), one module per lesson.

    from helpers.teaching.exercises import nb04 as ex
    ex.q1.hint()                       # a nudge
    ex.q1.check(my_correctness_reward) # runs hidden test cases; says which case failed and why
    ex.q1.solution()                   # prints the lesson's solution

check() returns a CheckResult (passed, message, case); in a notebook its text is shown as the cell's output.
A failing check names the case ("your reward gave 0.5 to a 300-word answer; it should be 0.0 ...") and never
raises, so the rest of the notebook keeps running. Student code that raises is reported the same way.

core.py holds the machinery, nbNN.py each lesson's judges and hints, registry.json (written by
scripts/make_notebooks.py from the lessons' solution cells) each exercise's number, task and solution: `ex.q3` is
the lesson's third solution cell. The truth is never a copy of the answer: the judges ask the kit's own helpers
(helpers.teaching.grpo_math for advantages, Preset.prompts_per_step for the questions a run draws,
helpers.memory.estimate for memory, helpers.run.dashboard's warnings for training curves, helpers.evaluation.pass_at_k),
so a change of preset values or formulas moves the expected answers with them. tests/test_exercises.py runs every
judge against known-wrong and known-right answers. A lesson's module is imported when first asked for.
"""

from __future__ import annotations

import importlib

LESSONS = ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08")  # 09 is checked by helpers.capstone


def __getattr__(name: str):
    if name in LESSONS:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "ALL":
        return {lesson: __getattr__(lesson) for lesson in LESSONS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
