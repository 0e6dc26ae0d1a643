"""Command-line flags generated from dataclass fields: one flag per field, its type read from the annotation and its
help from the field's metadata. `python -m helpers.train` and `python -m helpers.memory` share it, so a Preset
field has the same flag everywhere (e.g. `--per-device-train-batch-size`, alias `--batch-size`)."""

from __future__ import annotations

import argparse
import typing
from dataclasses import MISSING, Field, fields
from pathlib import Path

FLAG_ALIASES = {"per_device_train_batch_size": ["--batch-size"]}  # short names kept from earlier versions


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
        help_text += " (default: the preset's)"
    elif f.default not in (MISSING, None, (), False):
        help_text += f" (default: {f.default})"
    flags = [flag_of(f.name), *FLAG_ALIASES.get(f.name, [])]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional and origin is not tuple else hint
    default = None if default_is_preset else f.default
    if base is bool:
        ap.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text)
    elif typing.get_origin(base) is tuple:
        ap.add_argument(*flags, dest=f.name, type=_tuple_of(typing.get_args(base)[0]), default=default,
                        help=help_text)
    elif base is Path:
        ap.add_argument(*flags, dest=f.name, type=Path, default=default, help=help_text)
    elif base in (int, float, str):
        kind = _none_or(base) if optional else base
        ap.add_argument(*flags, dest=f.name, type=kind, default=default,
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
