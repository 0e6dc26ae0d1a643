"""The machinery every lesson's exercises share: Exercise (.check(answer), .hint(), .solution()), the CheckResult it
returns, the Fail a judge raises to name the case that failed, and small tools the judges have in common.

An Exercise holds only what the lesson cannot: the judge, the hints and the message on success. Its number, check
name (q1), task and solution come from the lesson's solution cell through registry.json (registry.py).
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass

from helpers.teaching.exercises import registry

MISSING = object()


@dataclass
class CheckResult:
    passed: bool
    message: str
    case: str | None = None  # the hidden case that failed (None when passed or not answered)

    def __repr__(self) -> str:
        mark = "Correct!" if self.passed else "Not yet."
        return f"{mark} {self.message}"

    __str__ = __repr__


class Fail(Exception):
    """Raised by a judge: the case that failed and what was wrong."""

    def __init__(self, case: str, message: str):
        super().__init__(message)
        self.case, self.message = case, message


class NotAnswered(Exception):
    """The student's function still raises NotImplementedError (the student copy's placeholder)."""


def call(case: str, fn, *args, **kwargs):
    """Run the student's function on a hidden case; an exception becomes feedback that names the case."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotAnswered() from None
    except Exception as err:  # noqa: BLE001 - any error in student code is feedback, not a crash
        raise Fail(case, f"on {case} your function raised {type(err).__name__}: {err}") from None


class Exercise:
    """One self-checked exercise of `lesson` ("04"), known by its answer's `name` (what the solution cell defines
    and the check cell passes); `judge(answer, **context)` raises Fail or NotAnswered, or returns when right."""

    def __init__(self, lesson: str, name: str, hint, judge, success: str = ""):
        self.lesson, self.name, self._hint, self._judge, self.success = lesson, name, hint, judge, success

    @property
    def entry(self) -> dict:
        """This exercise's line of registry.json: number, qid, name, task, solution."""
        return registry.find(self.name, self.lesson)

    qid = property(lambda self: self.entry["qid"])
    number = property(lambda self: self.entry["number"])
    task = property(lambda self: self.entry["task"])

    def check(self, answer=MISSING, **context) -> CheckResult:
        """context: what a judge needs from the notebook besides the answer (e.g. the real records it also tries)."""
        if answer is MISSING or answer is None or answer is Ellipsis:
            return self._not_answered()
        blanks = blanks_left(answer)
        if blanks:
            return self._not_answered(f"{blanks} blank{'s' if blanks > 1 else ''} (`...`) left in "
                                      f"{getattr(answer, '__name__', 'your answer')}. ")
        try:
            self._judge(answer, **context)
        except NotAnswered:
            return self._not_answered()
        except Fail as f:
            return CheckResult(False, f.message, f.case)
        return CheckResult(True, self.success or "every hidden case passed.")

    def _not_answered(self, detail: str = "") -> CheckResult:
        return CheckResult(False, f"not answered yet: {detail}write your answer in the cell above, run it, then run "
                                  f"this check again. The task: {self.task}")

    def hint(self, level: int = 1) -> None:
        """A nudge; where the exercise has several (a tuple), hint(2), hint(3) ... say more, the last nearly the
        answer (as Kaggle Learn's)."""
        hints = (self._hint,) if isinstance(self._hint, str) else tuple(self._hint)
        level = max(1, min(level, len(hints)))
        more = f" (more: ex.{self.qid}.hint({level + 1}))" if level < len(hints) else ""
        print(f"Hint ({self.qid}{f', {level} of {len(hints)}' if len(hints) > 1 else ''}): {hints[level - 1]}{more}")

    def solution(self) -> None:
        """The lesson's own solution cell (below its `# SOLUTION` line), as registry.json holds it."""
        print(f"Solution ({self.qid}):\n{self.entry['solution']}")

    def __repr__(self) -> str:
        return f"<exercise {self.number} ({self.name}): {self.task} - .check(answer), .hint(), .solution()>"


QID = re.compile(r"q\d+")


def numbered(namespace: dict):
    """A lesson module's __getattr__ and __dir__: `ex.q3` is the lesson's third exercise in the order of its
    solution cells (registry.json), so a module never types a number. namespace: the module's globals()."""
    def exercises() -> dict[str, Exercise]:
        mine = {e.name: e for e in namespace.values() if isinstance(e, Exercise)}
        return {entry["qid"]: mine[entry["name"]] for entry in registry.load()[namespace["LESSON"]]["exercises"]
                if entry["name"] in mine}

    def __getattr__(name: str):
        if QID.fullmatch(name) and name in exercises():
            return exercises()[name]
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def __dir__():
        return sorted([*namespace, *exercises()])

    return __getattr__, __dir__


def blanks_left(fn) -> int:
    """How many `...` of a partial scaffold (scripts/make_student_notebooks.py) are still in a function's code: a
    blank is not a wrong answer, and running it would only fail somewhere inside TRL."""
    if not callable(fn):
        return 0
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return 0
    return sum(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree))


class _Recorder:
    """Stands in for a class the student's function calls (GRPOConfig, GRPOTrainer): records the arguments."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __call__(self, *args, **kwargs):
        self.calls.append(inspect.signature(self.real).bind_partial(*args, **kwargs).arguments)
        return self.calls[-1]


@contextmanager
def intercept(fn, name: str, real):
    """While judging, every route from the student's function's module to `name` is a _Recorder: the name itself
    (`from trl import GRPOConfig`, under any alias) and a module attribute (`trl.GRPOConfig(...)`, `import trl as t`).
    The call is read, not run (a T4's fp16=True config cannot be built on a CPU, and a trainer would load the model)."""
    import types

    g = fn.__globals__
    names = [k for k, v in list(g.items()) if v is real]
    modules = [v for v in list(g.values()) if isinstance(v, types.ModuleType) and getattr(v, name, None) is real]
    if not names and not modules:
        raise Fail("the answer", f"{fn.__name__} should call {name}(...) from trl (`from trl import {name}`, or "
                                 f"`trl.{name}(...)` after `import trl`); {name} in its module is {g.get(name)!r}")
    recorder = _Recorder(real)
    for k in names:
        g[k] = recorder
    for module in modules:
        setattr(module, name, recorder)
    try:
        yield recorder
    finally:
        for k in names:
            g[k] = real
        for module in modules:
            setattr(module, name, real)


def close(a, b, tol=1e-3) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except (TypeError, ValueError):
        return False


def letter_of(answer, choices: dict) -> str:
    """The letter a predict-then-run answer picked, or Fail naming the choices."""
    choice = answer.strip().lower()[:1] if isinstance(answer, str) else None
    if choice not in choices:
        letters = ", ".join(f"'{c}'" for c in choices)
        raise Fail("the answer", f"answer with one letter: {letters} (you gave {answer!r})")
    return choice
