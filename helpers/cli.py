"""Command-line flags generated from dataclass fields: one flag per field, its type read from the annotation and its
help from the field's metadata. `python -m helpers.train` and `python -m helpers.memory` share it, so a Preset
field has the same flag everywhere (e.g. `--per-device-train-batch-size`, alias `--batch-size`). Every flag also
takes its underscore spelling (`--max_steps`, as TRL's and transformers' scripts write them)."""

from __future__ import annotations

import argparse
import enum
import re
import shutil
import sys
import typing
from dataclasses import MISSING, Field, fields
from pathlib import Path

from helpers.config import PRESETS

FLAG_ALIASES = {
    "per_device_train_batch_size": ["--batch-size"],  # short names kept from earlier versions
    "run_dir": ["--output-dir"],  # TRL/transformers' output_dir: where the run's files go
    "keep": ["--save-total-limit"],  # transformers' save_total_limit: how many checkpoints are kept
}
PRESET_COLUMNS = ("cpu", "t4")  # the presets whose values --help shows for each preset field


METAVARS = {int: "N", float: "X", str: "TEXT"}  # short placeholders keep --help's lines short
# TRL/transformers flags the kit does elsewhere: an "unrecognized arguments" error says where.
ELSEWHERE = {
    "--push-to-hub": "uploading to the Hugging Face Hub is notebook 06's last cell (helpers.sharing.push_folder: "
                     "the adapter, private, with your token from Colab secrets or $HF_TOKEN), after the run",
    "--hub-model-id": "the Hub repository is named in notebook 06's upload cell (HUB_REPO), after the run",
}


class KitArgumentParser(argparse.ArgumentParser):
    """argparse that also takes each flag's underscore spelling: `--max_steps 2` as `--max-steps 2`; --help
    lines up to 120 columns wide."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", lambda prog: argparse.HelpFormatter(
            prog, max_help_position=36, width=min(120, shutil.get_terminal_size().columns)))
        super().__init__(*args, **kwargs)

    def error(self, message):
        """argparse's refusal (exit 2), plus where the kit does what an unrecognized TRL flag asked for."""
        pointers = [f"{flag}: {where}" for flag, where in ELSEWHERE.items()
                    if "unrecognized arguments" in message and re.search(rf"{flag}(=|\s|$)", message)]
        super().error("; ".join([message, *pointers]))

    def parse_known_args(self, args=None, namespace=None):
        return super().parse_known_args([self._dashed(a) for a in (sys.argv[1:] if args is None else args)],
                                        namespace)

    def _dashed(self, arg: str) -> str:
        if not arg.startswith("--") or "_" not in arg:
            return arg
        flag, eq, value = arg.partition("=")
        dashed = flag.replace("_", "-")
        return dashed + eq + value if dashed in self._option_string_actions else arg


def _path(text: str) -> Path:
    if not text.strip():  # Path("") is the current folder: `--run-dir "$RUN"` with RUN unset
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?). Fix: give a folder, e.g. "
                                         "runs/demo")
    return Path(text).expanduser()  # `--run-dir ~/x` is a folder in your home, not one named "~"


def preset_values(name: str) -> str:
    """The cpu and t4 presets' value of a field, for --help: "(cpu: 40, t4: 250)", or "(cpu, t4: 1)" when equal."""
    values = [getattr(PRESETS[p], name) for p in PRESET_COLUMNS]
    shown = [",".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values]
    shown = [v if len(v) <= 40 else v[:37] + "..." for v in shown]
    if len(set(shown)) == 1:
        return f"({', '.join(PRESET_COLUMNS)}: {shown[0]})"
    return "(" + ", ".join(f"{p}: {v}" for p, v in zip(PRESET_COLUMNS, shown)) + ")"


def flag_of(name: str) -> str:
    """The command-line flag of a dataclass field."""
    return "--" + name.replace("_", "-")


def _none_or(kind):
    def parse(text):
        return None if text.strip().lower() == "none" else kind(text)

    parse.__name__ = kind.__name__
    return parse


def _tuple_of(kind):
    def parse(text):
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())

    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def add_field_flag(ap, f: Field, hint, default_is_preset: bool, prog: str = "the command line") -> None:
    """One flag for one dataclass field. default_is_preset: the flag's default is None, meaning "the preset's value"
    (the caller fills in only the flags given); otherwise the field's own default."""
    help_text = f.metadata.get("help", "")
    if default_is_preset:
        help_text += " " + preset_values(f.name)
    elif f.default not in (MISSING, None, (), False):
        help_text += f" (default: {f.default})"
    flags = [flag_of(f.name), *FLAG_ALIASES.get(f.name, [])]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional and origin is not tuple else hint
    if isinstance(base, type) and issubclass(base, enum.Enum) and issubclass(base, str):
        base = str  # a name (Preset.backend: --backend cpu), made its member by the dataclass (helpers.config_types)
    default = None if default_is_preset else f.default
    if base is bool:
        ap.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text)
    elif typing.get_origin(base) is tuple:
        ap.add_argument(*flags, dest=f.name, type=_tuple_of(typing.get_args(base)[0]), default=default,
                        metavar="A,B", help=help_text)
    elif base is Path:
        ap.add_argument(*flags, dest=f.name, type=_path, default=default, metavar="DIR", help=help_text)
    elif base in (int, float, str):
        kind = _none_or(base) if optional else base
        ap.add_argument(*flags, dest=f.name, type=kind, default=default, metavar=METAVARS[base],
                        help=help_text + (" ('none' to unset)" if optional else ""))
    else:  # a new field type: say so here rather than drop the field from the command line
        raise TypeError(f"{prog} cannot make a flag for {f.name}: {hint}")


def add_dataclass_flags(ap, cls, default_is_preset: bool, skip=(), only=None, prog: str = "the command line") -> None:
    """A flag for each field of `cls` (all of them, or those in `only`), except those in `skip`."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        add_field_flag(ap, f, hints[f.name], default_is_preset=default_is_preset, prog=prog)


def given_fields(args: argparse.Namespace, cls, skip=()) -> dict:
    """The fields of `cls` given on the command line (flags made with default_is_preset=True that are not None)."""
    return {f.name: getattr(args, f.name) for f in fields(cls)
            if f.name not in skip and getattr(args, f.name, None) is not None}
