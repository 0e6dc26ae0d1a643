"""Flags from the kit's dataclasses, made by TRL's parser (TrlParser, on transformers' HfArgumentParser) as in TRL's
scripts: --field-name and --field_name, a switch's --no-field-name, `--config FILE`. The kit adds what they lack: the
presets' values in --help (a Preset flag not given is absent: the preset decides), TRL's names as aliases, and the
text typed by helpers.config_types, as a notebook's parameters are. For helpers.train and helpers.memory."""

from __future__ import annotations

import argparse
import copy
import functools
import shutil
import sys
import typing
from dataclasses import fields
from pathlib import Path

from helpers.config import PRESETS, Preset, typed_fields
from helpers.run.options import DASHBOARD_MODES

ALIASES = {"per_device_train_batch_size": ["--batch-size"], "rewards": ["--reward"],  # --reward M:F, repeated
           # TRL's and transformers' names: output_dir, save_total_limit, resume_from_checkpoint
           "run_dir": ["--output-dir"], "keep": ["--save-total-limit"], "resume": ["--resume-from-checkpoint"]}
ELSEWHERE = {  # what a refusal of these TRL flags adds: where the kit does what they ask
    "--push-to-hub": "uploading to the Hugging Face Hub is notebook 06's last cell (helpers.sharing.push_folder: "
                     "the adapter, private, with your token from Colab secrets or $HF_TOKEN), after the run",
    "--hub-model-id": "the Hub repository is named in notebook 06's upload cell (HUB_REPO), after the run",
    "--resume-from-checkpoint": "true or false, not a path: the kit resumes the run in --run-dir from its latest "
    "complete checkpoint. Fix: pass --run-dir <the run folder> (and --checkpoint-dir if its checkpoints are elsewhere)"}


@functools.cache
def _trl_parser():
    """TRL's TrlParser, its modules dropped from sys.modules again when this brought them in: on the GPU path Unsloth
    comes later, must come before TRL and looks for it there. It loads no trainer or torch (test_validation_early)."""
    fresh = "trl" not in sys.modules
    from trl.scripts.utils import TrlParser

    for name in [m for m in sys.modules if fresh and m.split(".")[0] == "trl"]:
        del sys.modules[name]
    return TrlParser


class _Added(argparse.Action):
    """--reward, repeated: each adds one; given at all, they replace the default (or a --config file's list)."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest)
        setattr(namespace, self.dest, (*(() if before is self.default else before), values))


FLAG_KWARGS = {"rewards": {"action": _Added, "metavar": "MODULE:NAME"}, "dashboard": {"choices": DASHBOARD_MODES}}


def _metavar(hint) -> str | None:
    """What --help shows after a field's flag; None for a switch (bool)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = tuple if typing.get_origin(hint) is tuple else args[0] if args else hint
    return None if base is bool else {int: "N", float: "X", Path: "DIR", tuple: "A,B"}.get(base, "TEXT")


def preset_values(name: str) -> str:
    """The cpu and t4 presets' value of a field, for --help: "(cpu: 40, t4: 250)", or "(cpu, t4: 1)" when equal."""
    values = (getattr(PRESETS["cpu"], name), getattr(PRESETS["t4"], name))
    shown = [",".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values]
    shown = [v if len(v) <= 40 else v[:37] + "..." for v in shown]
    return f"(cpu, t4: {shown[0]})" if shown[0] == shown[1] else f"(cpu: {shown[0]}, t4: {shown[1]})"


def add_fields(parser, title: str, cls, only=None, skip=("name",), description=None) -> None:
    """A flag per field of cls (or of those in `only`), made by TRL's parser from a copy of the field: a switch for a
    bool, text for the rest (given_fields types it). A Preset flag not given is absent: the preset decides."""
    group, hints = parser.add_argument_group(title, description), typing.get_type_hints(cls)
    for f in (f for f in fields(cls) if f.name not in skip and (only is None or f.name in only)):
        flag, metavar = copy.copy(f), _metavar(hints[f.name])
        default = argparse.SUPPRESS if cls is Preset else f.default
        flag.type, flag.default = (str, default) if metavar else (bool, True)  # True: TRL adds the --no- switch
        shown = f" {preset_values(f.name)}" if cls is Preset else f" (default: {f.default})" if f.default else ""
        aliases = {a for alias in ALIASES.get(f.name, []) for a in (alias, "--" + alias[2:].replace("-", "_"))}
        flag.metadata = {"help": f.metadata["help"] + shown, "aliases": list(aliases),
                         **({"metavar": metavar} if metavar else {}), **FLAG_KWARGS.get(f.name, {})}
        count = len(group._group_actions)
        parser._parse_dataclass_field(group, flag)
        actions = group._group_actions[count:]  # the flag, and a switch's --no- twin: one line in --help
        for action in actions:
            action.default = default
            action.option_strings.sort(key=lambda s: "_" in s[2:])  # dashed first: in usage and argparse's errors
        if len(actions) == 2:  # usage: [--x [BOOL]]
            actions[0].negated = [s for s in actions[1].option_strings if "_" not in s[2:]]
            actions[0].metavar, actions[1].help = "BOOL", argparse.SUPPRESS


def given_fields(args: argparse.Namespace, cls) -> dict:
    """The fields of cls given (flags, --config), typed as the fields are, or a PresetError with the field and fix."""
    return typed_fields(cls, {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


class _Help(argparse.HelpFormatter):
    """Each flag once, dashed (the underscore spelling works too), a switch with its --no- form."""

    def _format_action_invocation(self, action):
        shown = copy.copy(action)
        shown.option_strings = [s for s in action.option_strings if "_" not in s[2:]]
        if action.nargs == "?" and action.const is True:  # a switch: TRL's parser also takes `--x false`
            return ", ".join(shown.option_strings + getattr(action, "negated", []))
        return super()._format_action_invocation(shown)


def make_parser(dataclass_types=(), **kwargs):
    """TRL's parser with the kit's --help (at most 120 wide), and a TRL flag the kit does elsewhere pointed there."""

    class KitParser(_trl_parser()):
        def error(self, message):
            super().error("; ".join([message, *(f"{f}: {where}" for f, where in ELSEWHERE.items() if f in message)]))

    formatter = functools.partial(_Help, max_help_position=36, width=min(120, shutil.get_terminal_size().columns))
    return KitParser(list(dataclass_types), formatter_class=formatter, **kwargs)


def flag_of(name: str) -> str:
    """The command-line flag of a dataclass field."""
    return "--" + name.replace("_", "-")
