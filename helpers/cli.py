"""Command-line flags from the kit's dataclasses, made by TRL's own parser (trl.scripts.utils.TrlParser, on
transformers' HfArgumentParser): each field is --field-name and --field_name with its help text, a switch also
--no-field-name, and `--config FILE` reads YAML that flags override, as in TRL's scripts. The kit adds only what they
lack: the presets' values in --help (a Preset flag not given keeps the chosen preset's value), its aliases, comma
lists, `~` in paths, and a file's values typed as the fields are (helpers.config_types). Shared by
`python -m helpers.train` and `python -m helpers.memory`."""

from __future__ import annotations

import argparse
import copy
import enum
import functools
import shutil
import sys
import typing
from dataclasses import fields
from pathlib import Path

from helpers.config import PRESETS, Preset, PresetError, typed_fields
from helpers.run.options import DASHBOARD_MODES, RunOptions

ALIASES = {"per_device_train_batch_size": ["--batch-size"], "run_dir": ["--output-dir"],  # TRL's output_dir
           "keep": ["--save-total-limit"], "rewards": ["--reward"]}  # transformers' save_total_limit; --reward M:F
ELSEWHERE = {  # TRL flags the kit does elsewhere: "unrecognized arguments" says where
    "--push-to-hub": "uploading to the Hugging Face Hub is notebook 06's last cell (helpers.sharing.push_folder: "
                     "the adapter, private, with your token from Colab secrets or $HF_TOKEN), after the run",
    "--hub-model-id": "the Hub repository is named in notebook 06's upload cell (HUB_REPO), after the run"}


@functools.cache
def _trl_parser():
    """TRL's TrlParser, its modules then dropped from sys.modules (the class lives on): the GPU path imports Unsloth
    later, which must come before TRL and looks for it there. The import loads no trainer, transformers or torch."""
    before = set(sys.modules)
    from trl.scripts.utils import TrlParser

    for name in set(sys.modules) - before:
        if name.split(".")[0] == "trl":
            del sys.modules[name]
    return TrlParser


def _path(text: str) -> Path:
    if not text.strip():  # Path("") is the current folder: `--run-dir "$RUN"` with RUN unset
        raise argparse.ArgumentTypeError("an empty path (an unset shell variable?). Fix: give a folder, e.g. runs/demo")
    return Path(text).expanduser()  # `--run-dir=~/x`: no shell expands a ~ after =


def _comma_list(kind):
    def parse(text):
        return tuple(kind(x.strip()) for x in text.split(",") if x.strip())

    parse.__name__ = f"comma-separated {kind.__name__}"
    return parse


def _text_or_none(text: str) -> str | None:
    return None if text.strip().lower() == "none" else text


class _Added(argparse.Action):
    """--reward, repeated: each adds; given at all, they replace the default (or a --config file's list)."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest)
        setattr(namespace, self.dest, (*(() if before is self.default else before), *values))


def _flag_type(hint):
    """(text -> value, metavar) of a field's flag where TRL's (int, float, str, bool, X | None) is not the kit's."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return _comma_list(args[0]), "A,B"
    if Path in (hint, *args):
        return _path, "DIR"
    if bool in (hint, *args):
        return bool, None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):  # Preset.backend: its name, made a member by Preset
        return str, "TEXT"
    base = next((a for a in args if a is not type(None)), hint)
    return (_text_or_none if hint == str | None else hint), {int: "N", float: "X", str: "TEXT"}[base]


def preset_values(name: str) -> str:
    """The cpu and t4 presets' value of a field, for --help: "(cpu: 40, t4: 250)", or "(cpu, t4: 1)" when equal."""
    values = (getattr(PRESETS["cpu"], name), getattr(PRESETS["t4"], name))
    shown = [",".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values]
    shown = [v if len(v) <= 40 else v[:37] + "..." for v in shown]
    return f"(cpu, t4: {shown[0]})" if shown[0] == shown[1] else f"(cpu: {shown[0]}, t4: {shown[1]})"


def add_fields(parser, title: str, cls, only=None, skip=("name",), description=None) -> None:
    """A flag per field of cls (those in `only`, when given), made by TRL's parser from a copy of the field with the
    kit's type, aliases and help. A Preset flag not given is left out of the result (the preset decides); a RunOptions
    flag defaults to the field's own default."""
    group, hints = parser.add_argument_group(title, description), typing.get_type_hints(cls)
    for f in (f for f in fields(cls) if f.name not in skip and (only is None or f.name in only)):
        flag, (kind, metavar) = copy.copy(f), _flag_type(hints[f.name])
        default = argparse.SUPPRESS if cls is Preset else f.default
        flag.type, flag.default = kind, True if kind is bool else default  # True: TRL adds the --no- switch too
        shown = f" {preset_values(f.name)}" if cls is Preset else (f" (default: {f.default})" if f.default else "")
        aliases = [a for alias in ALIASES.get(f.name, []) for a in {alias, "--" + alias[2:].replace("-", "_")}]
        flag.metadata = {"help": f.metadata["help"] + shown, "aliases": sorted(aliases, key=lambda a: "_" in a),
                         **({"metavar": metavar} if metavar else {})}
        flag.metadata.update({"rewards": {"action": _Added, "metavar": "MODULE:NAME"},
                              "dashboard": {"choices": DASHBOARD_MODES}}.get(f.name, {}))
        count = len(group._group_actions)
        parser._parse_dataclass_field(group, flag)
        actions = group._group_actions[count:]  # the flag, and a switch's --no- twin: one line in --help
        for action in actions:
            action.default = default
            action.option_strings.sort(key=lambda s: "_" in s[2:])  # dashed first: in usage and argparse's errors
        if len(actions) == 2:
            actions[0].negated = [s for s in actions[1].option_strings if "_" not in s[2:]]
            actions[1].help = argparse.SUPPRESS


class _Help(argparse.HelpFormatter):
    """Each flag once, dashed (the underscore spelling works too), a switch with its --no- form; at most 120 wide."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=36, width=min(120, shutil.get_terminal_size().columns))

    def _format_action_invocation(self, action):
        shown = copy.copy(action)
        shown.option_strings = [s for s in action.option_strings if "_" not in s[2:]]
        if action.nargs == "?" and action.const is True:  # a switch: TRL's parser also takes `--x false`
            return ", ".join(shown.option_strings + getattr(action, "negated", []))
        return super()._format_action_invocation(shown)


def make_parser(dataclass_types=(), **kwargs):
    """TRL's parser with the kit's --help, a TRL flag the kit does elsewhere pointed there, and a --config file's
    values typed as the fields are (a refusal names the key and the fix) and its unknown keys refused."""

    class KitParser(_trl_parser()):
        def error(self, message):
            given = {word.split("=")[0] for word in message.split()}
            found = [f"{flag}: {where}" for flag, where in ELSEWHERE.items() if flag in given]
            super().error("; ".join([message, *found]))

        def set_defaults_with_config(self, **values):
            for cls in (Preset, RunOptions):
                names = {f.name for f in fields(cls)} - {"name"}
                values.update(typed_fields(cls, {k: v for k, v in values.items() if k in names}))
            if unknown := super().set_defaults_with_config(**values)[::2]:
                known = sorted({a.dest for a in self._actions} - {"help", "config", "print_config"})
                raise PresetError(f"--config: unknown key(s) {', '.join(k[2:] for k in unknown)}. Fix: use field "
                                  f"names: {', '.join(known)}")
            return []

    return KitParser(list(dataclass_types), formatter_class=_Help, **kwargs)


def given_fields(args: argparse.Namespace, cls) -> dict:
    """The fields of cls the command line (or its --config file) gave."""
    return {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}


def flag_of(name: str) -> str:
    """The command-line flag of a dataclass field."""
    return "--" + name.replace("_", "-")
