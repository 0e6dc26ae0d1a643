"""Reward functions named on the command line ('module:name'), loaded before TRL is imported so that a mistake in
the student's file is refused at once, with the file, the line and the fix, and never after the model loaded."""

from __future__ import annotations

import importlib

from helpers.config import PresetError
from helpers.rewards import DEFAULT_REWARDS


def _import_reward_module(spec: str, module_name: str):
    """The module, or PresetError naming what went wrong in it and the fix."""
    try:
        return importlib.import_module(module_name)
    except SyntaxError as err:  # IndentationError too: the student's file does not parse
        where = f"{err.filename}, line {err.lineno}" if err.filename else f"line {err.lineno}"
        raise PresetError(f"--reward {spec!r}: {where} is not valid Python ({err.msg}). Fix: correct that line "
                          f"(`python -m py_compile {err.filename or module_name}` checks the file) and run the "
                          "command again") from None
    except ImportError as err:
        raise PresetError(f"--reward {spec!r}: {err}. Fix: check the module is importable from the current "
                          "folder and defines that name") from None


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
        module = _import_reward_module(spec, module_name)
        try:
            value = getattr(module, attr)
        except AttributeError as err:
            raise PresetError(f"--reward {spec!r}: {err}. Fix: check the module is importable from the current "
                              "folder and defines that name") from None
        funcs.extend(value if isinstance(value, (list, tuple)) else [value])
    return funcs
