"""A setting's value as its annotated type: text (a notebook parameter from papermill -p, a YAML string, a CLI flag)
parsed, lists made tuples, paths expanded, a name made its enum member (helpers.backend.Backend), and anything else
refused with the field and the fix. Used for Preset (helpers.config) and RunOptions (helpers.run.options) alike;
the names stay importable from helpers.config."""

from __future__ import annotations

import enum
import typing
from pathlib import Path


class PresetError(ValueError):
    """A preset setting that cannot work; the message names the field and the fix."""


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _is_choice(kind) -> bool:
    """An enum field (Preset.backend): one of a fixed set of names."""
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def _parsed(kind, value):
    """value as `kind` (bool, int, float, str, Path, an enum), text parsed; raise ValueError when it is not one."""
    text = value.strip() if isinstance(value, str) else None
    if _is_choice(kind):
        return kind(value if text is None else text)  # a member, or its name as text
    if kind is bool and text is not None and text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    if kind is Path:  # not "": Path("") is the current folder (an unset variable, not a choice)
        if isinstance(value, (str, Path)) and str(value).strip():
            return Path(value).expanduser()
        raise ValueError(value)
    if kind in (int, float) and text is not None:
        return kind(text)
    if not isinstance(value, {bool: bool, int: int, float: (int, float), str: str}[kind]) or \
            (kind is not bool and isinstance(value, bool)):
        raise ValueError(value)
    return value


def _example_of(cls, name: str):
    """The "e.g." of a refusal: cls.field_example(name) where the class has one (Preset: a preset's own value)."""
    return getattr(cls, "field_example", lambda name: None)(name)


def typed_value(name: str, value, hint, example=None):
    """A field's value as its annotated type: text (a notebook parameter from papermill -p, a YAML string) parsed,
    lists made tuples, paths expanded; anything else raises PresetError naming the field and the fix (with
    `example` as its "e.g.", when given)."""
    args = typing.get_args(hint)
    if type(None) in args and (value is None or isinstance(value, str) and value.strip().lower() == "none"):
        return None  # a flag's or a notebook parameter's text 'none' too
    if type(None) in args:
        hint = next(a for a in args if a is not type(None))
    try:
        if typing.get_origin(hint) is tuple:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)):
                raise ValueError(value)
            kind = typing.get_args(hint)[0]
            return tuple(_parsed(kind, x.strip() if isinstance(x, str) else x) for x in items
                         if not (isinstance(x, str) and not x.strip()))
        return _parsed(hint, value)
    except ValueError:
        raise _type_error(name, value, hint, example) from None


def _type_error(name: str, value, hint, example=None) -> PresetError:
    """The refusal of a value of the wrong type, or of a name an enum field does not have (listing the valid ones);
    `.field` and `.example` let the notebook's setup cell add the parameter a student typed (notebook_setup.prepare)."""
    if _is_choice(hint):
        names, example = [repr(member.value) for member in hint], getattr(example, "value", example)
        count = {2: "two", 3: "three", 4: "four"}.get(len(names), len(names))
        err = PresetError(f"{name}={value!r}: must be {', '.join(names[:-1])} or {names[-1]}. Fix: pick one of the "
                          f"{count}.")
    else:
        kinds = {bool: "True or False", int: "a whole number", float: "a number", str: "text", Path: "a folder path"}
        kind = typing.get_origin(hint) is tuple and f"comma-separated {typing.get_args(hint)[0].__name__}s" or \
            kinds.get(hint, hint)
        given = f"the text {value!r}" if isinstance(value, str) else f"a {type(value).__name__}"
        example = "runs/demo" if hint is Path and example is None else example
        blank = " (an empty path is the current folder: an unset shell variable?)" if str(value).strip() == "" else ""
        err = PresetError(f"{name}={value!r}: is {given}, not {kind}. Fix: give {kind}" +
                          (f", e.g. {name}={example!r}" if example is not None else "") + blank + ".")
    err.field, err.example = name, example
    return err


def typed_fields(cls, values: dict) -> dict:
    """typed_value for each of `values`, a dict of `cls`'s fields (Preset, RunOptions)."""
    hints = typing.get_type_hints(cls)
    return {name: typed_value(name, value, hints[name], _example_of(cls, name)) for name, value in values.items()}


def check_types(obj) -> None:
    """Each field of a dataclass (Preset, RunOptions) holds its annotated type: one built by hand with text in it
    (a notebook parameter from papermill -p) would otherwise fail deep inside TRL, after the model loaded."""
    for name, hint in typing.get_type_hints(type(obj)).items():
        value = getattr(obj, name)
        example = _example_of(type(obj), name)
        typed = typed_value(name, value, hint, example)
        if isinstance(value, str) and typed is not value and not isinstance(typed, (Path, enum.Enum)):  # text to parse
            raise _type_error(name, value, hint, example)
