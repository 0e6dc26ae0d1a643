"""A student's reward functions, loaded in one place for both callers: the CLI's `--reward module:name` (loaded
before TRL is imported, so that a mistake in the student's file is refused at once and never after the model
loaded) and 05's RUN_DIR/my_rewards.py (helpers.teaching.course.load_rewards). A broken file is refused with the
file, the line and the fix; a missing name or a value that is not a function is named with the fix.

Then each function is tried once on a sample group before the model loads (try_rewards), and every call during
training is watched (watch_rewards): a heartbeat while one runs long, a stop at --reward-timeout."""

from __future__ import annotations

import asyncio
import copy
import ctypes
import functools
import importlib
import importlib.util
import inspect
import signal
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

from helpers import data
from helpers.config import PresetError
from helpers.messages import say
from helpers.prompts import format_completion
from helpers.rewards import DEFAULT_REWARDS

REWARD_SUFFIX = "_reward"  # a file's reward functions, when it is loaded whole (05's my_rewards.py)


def _import_reward_module(source: str | Path, label: str, again: str):
    """The module (a module name importable from the current folder, or a .py file's path), or PresetError naming
    what went wrong in it and the fix; `label` says how the caller named it, `again` what to do once it is fixed."""
    try:
        if isinstance(source, Path):
            spec = importlib.util.spec_from_file_location(source.stem, source)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(source)
    except SyntaxError as err:  # IndentationError too: the student's file does not parse
        where = f"{err.filename}, line {err.lineno}" if err.filename else f"line {err.lineno}"
        if "Non-UTF-8" in str(err.msg) or "'utf-8' codec" in str(err.msg):  # an editor saved Latin-1, say
            raise PresetError(f"{label}: {where} holds a byte that is not UTF-8 (Python reads source as UTF-8). Fix: "
                              f"save the file as UTF-8 (your editor's encoding setting) and {again}") from None
        raise PresetError(f"{label}: {where} is not valid Python ({err.msg}). Fix: correct that line "
                          f"(`python -m py_compile {err.filename or source}` checks the file) and {again}") from None
    except ImportError as err:
        fix = (f"correct that import in {source} and {again}" if isinstance(source, Path) else
               "check the module is importable from the current folder and defines that name")
        raise PresetError(f"{label}: {err}. Fix: {fix}") from None


def _named(module, attr: str, label: str) -> list:
    """The function (or list of functions) `attr` names in the module, each checked callable."""
    try:
        value = getattr(module, attr)
    except AttributeError as err:
        raise PresetError(f"{label}: {err}. Fix: check the module is importable from the current "
                          "folder and defines that name") from None
    funcs = list(value) if isinstance(value, (list, tuple)) else [value]
    for func in funcs:
        if not callable(func):
            raise PresetError(f"{label}: {attr} holds {func!r} ({type(func).__name__}), not a function. Fix: name a "
                              "reward function f(prompts, completions, **kwargs) -> list[float], or a list of them")
    return funcs


def load_reward_functions(source: str | Path, attr: str | None = None, *, label: str | None = None,
                          again: str = "run the command again") -> list:
    """The reward functions of a student's module: the one `attr` names (a function, or a list of functions), or,
    with attr=None, every function the module itself defines whose name ends in `_reward` (not the helpers it
    imports). `source`: a module name or a .py file's Path."""
    label = label or str(source)
    module = _import_reward_module(source, label, again)
    if attr is not None:
        return _named(module, attr, label)
    return [v for k, v in vars(module).items() if k.endswith(REWARD_SUFFIX) and callable(v)
            and getattr(v, "__module__", None) == module.__name__]


def resolve_rewards(specs) -> list:
    """Reward functions from 'module:name' strings (a function, or a list of functions); () -> the kit's defaults."""
    if not specs:
        return list(DEFAULT_REWARDS)
    funcs = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise PresetError(f"--reward {spec!r}: expected module:name. Fix: e.g. --reward my_rewards:brevity_reward "
                              "(my_rewards.py importable from the current folder)")
        funcs.extend(load_reward_functions(module_name, attr, label=f"--reward {spec!r}"))
    return funcs


# ------------------------------------------------------------------ tried before the model loads, watched after

REWARD_HEARTBEAT_S = 30.0  # a reward call running longer than this is reported, and again every as many seconds


class RewardError(PresetError):
    """A reward function that cannot train: it raised, returned the wrong thing, changed its arguments, or hung."""


def _name(func) -> str:
    return getattr(func, "__name__", type(func).__name__)


def _where(func) -> str:
    code = getattr(func, "__code__", None)
    return f" ({code.co_filename}, line {code.co_firstlineno})" if code is not None else ""


def _is_reward_model(func) -> bool:
    """A reward model (an nn.Module): TRL runs it itself, the kit neither tries nor watches it."""
    return type(func).__module__.startswith("torch") or hasattr(func, "forward")


def sample_group(preset) -> tuple[list, list, dict]:
    """(prompts, completions, columns) as GRPOTrainer passes them, for one group on the preset's first training
    question: a right answer, a wrong one, an untagged one and an empty one, repeated to num_generations."""
    if preset.dataset == "gsm8k":
        row = data.gsm8k_rows(data.gsm8k_sample("train")[:1], worked_example=preset.worked_example)[0]
    else:
        row = data.synthetic_problems(1, "train", seed=preset.seed, levels=preset.synthetic_levels,
                                      worked_example=preset.worked_example)[0]
    answer = str(row["answer"])
    texts = [format_completion("Working it out step by step.", answer),
             format_completion("A guess.", "1" if answer.strip() == "0" else "0"), f"The answer is {answer}.", ""]
    n = max(2, preset.num_generations)
    completions = [[{"role": "assistant", "content": texts[i % len(texts)]}] for i in range(n)]
    columns = {k: [v] * n for k, v in row.items() if k != "prompt"}
    return [row["prompt"]] * n, completions, columns


def _trl_extras(n: int) -> dict:
    """What TRL passes beside the dataset's columns (completion_ids, trainer_state, log_extra, log_metric)."""
    return {"completion_ids": [[0] * 8 for _ in range(n)], "trainer_state": SimpleNamespace(global_step=0),
            "log_extra": lambda *a, **k: None, "log_metric": lambda *a, **k: None}


def _refuse(func, problem: str, fix: str):
    raise RewardError(f"reward function {_name(func)}{_where(func)} {problem}, when the kit tried it on one sample "
                      f"group before loading the model. Fix: {fix}")


def try_rewards(reward_funcs, preset, limit_s: float = 0) -> None:
    """Call each reward function once on a sample group, as GRPOTrainer will: a raise, a result that is not one
    number per completion, or a changed argument is refused in seconds, before the model loads, naming the function
    and the fix (TRL would say it minutes later, and blames the wrong count for an emptied list)."""
    for func in reward_funcs:
        if _is_reward_model(func):
            continue
        prompts, completions, columns = sample_group(preset)
        before = copy.deepcopy((prompts, completions, columns))
        n = len(completions)
        try:
            with watched(func, limit_s):
                result = func(prompts=prompts, completions=completions, **columns, **_trl_extras(n))
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
        except RewardError:
            raise
        except Exception as err:  # noqa: BLE001 - the student's code: any error is named with its line
            frame = traceback.extract_tb(err.__traceback__)[-1]
            _refuse(func, f"raised {type(err).__name__}: {err} ({frame.filename}, line {frame.lineno})",
                    "correct that line (04's playground calls a reward on completions you write), then run this again")
        for what, now, was in (("prompts", prompts, before[0]), ("completions", completions, before[1]),
                               ("the dataset's columns", columns, before[2])):
            if now != was:
                _refuse(func, f"changed its argument {what} (GRPOTrainer passes the same lists to every reward "
                              "function: the next one would score what this one left)",
                        "read the arguments without changing them; work on a copy, e.g. texts = [c[0]['content'] "
                        "for c in completions]")
        if isinstance(result, (str, bytes, dict)) or not hasattr(result, "__len__"):
            _refuse(func, f"returned {type(result).__name__} {result!r:.60}, not a list of numbers",
                    "return a list with one float per completion: [score(c) for c in completions]")
        if len(result) != n:
            _refuse(func, f"returned {len(result)} rewards for {n} completions",
                    "return exactly one reward per completion, in order (None where it does not apply)")
        odd = next((r for r in result if r is not None and (isinstance(r, str) or not hasattr(r, "__float__"))),
                   None)
        if odd is not None:
            _refuse(func, f"returned {odd!r:.60} ({type(odd).__name__}) among its rewards, not a number",
                    "return a float (or None where the reward does not apply) for every completion")


class _TooLong(BaseException):
    """Raised inside a reward call that ran past its limit (not an Exception: the student's `except Exception`
    must not swallow it)."""


def _raise_too_long(signum, frame):
    raise _TooLong


class watched:
    """Around one reward call: every REWARD_HEARTBEAT_S seconds the kit says it is still running; past limit_s
    (when > 0) the call is stopped with a RewardError naming the function and the fix. The stop is SIGUSR1 to the
    main thread, whose handler raises there (a signal also wakes a sleep or a network wait; SIGINT may be ignored
    in a background job), or, in another thread, an exception raised asynchronously there."""

    def __init__(self, func, limit_s: float = 0, step=None):
        self.func, self.limit_s, self.step = func, float(limit_s or 0), step
        self.fired = False

    def __enter__(self):
        self._done = threading.Event()
        self._target = threading.current_thread()
        self._handler = None
        if self.limit_s and self._target is threading.main_thread():
            self._handler = signal.signal(signal.SIGUSR1, _raise_too_long)
        self._started = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="grpo-kit-reward-watch")
        self._watcher.start()
        return self

    def _watch(self):
        while True:
            ran = time.monotonic() - self._started
            beat = REWARD_HEARTBEAT_S - ran % REWARD_HEARTBEAT_S
            if self._done.wait(min(beat, self.limit_s - ran) if self.limit_s else beat):
                return
            ran = time.monotonic() - self._started
            if self.limit_s and ran >= self.limit_s:
                self.fired = True
                self._stop_the_call()
                return
            at = f" at step {self.step()}" if self.step is not None else ""
            limit = f"; stopped at {self.limit_s:g} s (--reward-timeout)" if self.limit_s else ""
            say(f"reward function {_name(self.func)} has been running for {ran:.0f} s on one group{at}{limit}")

    def _stop_the_call(self):
        if self._handler is not None:
            signal.pthread_kill(self._target.ident, signal.SIGUSR1)
        else:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._target.ident),
                                                       ctypes.py_object(_TooLong))

    def __exit__(self, kind, err, tb):
        self._done.set()
        self._watcher.join()  # no stop can arrive after this point
        if self._handler is not None:
            signal.signal(signal.SIGUSR1, self._handler)
        if self.fired and (kind is None or issubclass(kind, _TooLong)):
            raise RewardError(
                f"reward function {_name(self.func)}{_where(self.func)} ran for more than {self.limit_s:g} s on one "
                "group and was stopped: it hangs (a loop that never ends, input(), a network call without a "
                "timeout) or is too slow to train with. Fix: make it return within the limit (time it on a group in "
                "04's playground), or raise the limit with --reward-timeout SECONDS (0: no limit)") from None
        return False


def watch_rewards(trainer, limit_s: float) -> None:
    """Every reward call of this trainer watched (heartbeat, limit): trainer.reward_funcs wrapped in place, under
    their own names (TRL logs rewards/<name>/mean with the names it took at construction)."""

    def wrapped(func):
        if getattr(func, "_grpo_kit_watched", False) or _is_reward_model(func) or inspect.iscoroutinefunction(
                func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
            return func

        @functools.wraps(func)
        def call(*args, **kwargs):
            with watched(func, limit_s, step=lambda: trainer.state.global_step):
                return func(*args, **kwargs)

        call._grpo_kit_watched = True
        return call

    trainer.reward_funcs = [wrapped(f) for f in trainer.reward_funcs]
