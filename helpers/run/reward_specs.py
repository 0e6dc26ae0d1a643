"""A student's reward functions, loaded in one place for both callers: the CLI's `--reward module:name` (loaded
before TRL is imported, so that a mistake in the student's file is refused at once and never after the model
loaded) and 05's RUN_DIR/my_rewards.py (helpers.teaching.course.load_rewards). A broken file is refused with the
file, the line and the fix; a missing name or a value that is not a function is named with the fix."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from helpers.config import PresetError
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
