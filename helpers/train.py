"""The main job's command line: GRPO-train a preset, evaluate before and after, and write everything into a run
folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

Every field of helpers.config.Preset is a flag (`--help` lists them with the field's own help text), and so is
every field of helpers.run.options.RunOptions. The run itself is helpers.run.pipeline's named steps, which notebook
05 calls cell by cell. Writes metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after
answers to the same questions), adapter/ (the LoRA adapter), config.json and summary.json.

Every value is checked, and the reward modules imported, before TRL is: a refusal comes in a second or two, not
after the TRL import (seconds) or the model load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import typing
from dataclasses import fields
from pathlib import Path

import yaml

from helpers import runtime as rt
from helpers.cli import KitArgumentParser, add_dataclass_flags, add_field_flag, given_fields
from helpers.config import Preset, PresetError, get_preset, typed_fields
from helpers.run import guard
from helpers.run.options import DASHBOARD_MODES, RunOptions
from helpers.run.reward_specs import resolve_rewards

EPILOG = ("Every flag also takes its underscore spelling (--max_steps). --config FILE reads a YAML file whose keys are "
          "the field names (flags given here override it); --print-config shows what a command resolves to, in a "
          "form --config reads back.")


def _resume_value(text: str) -> bool:
    """--resume_from_checkpoint's value: TRL scripts take true/false or a checkpoint path; the kit resumes from the
    latest complete checkpoint of the run folder, so only true/false map."""
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(
        f"{text!r}: the kit resumes the run in --run-dir from its latest complete checkpoint, not from a path. "
        "Fix: pass --run-dir <the run folder> (and --checkpoint-dir <the folder holding checkpoint-N/> if elsewhere)")


def build_parser() -> argparse.ArgumentParser:
    """The CLI, generated from the Preset and RunOptions dataclasses: one flag per field."""
    ap = KitArgumentParser(prog="python -m helpers.train", description=__doc__.split("\n\n")[0], epilog=EPILOG,
                           usage="%(prog)s [--preset NAME] [--config FILE] [--print-config] [--FIELD VALUE ...]")
    ap.add_argument("--preset", default="cpu", metavar="NAME",
                    help="the recipe to start from: cpu (embedded model, any machine), t4 (Qwen2.5-1.5B on a GPU), "
                         "or a multi-GPU one; the flags below change its fields")
    ap.add_argument("--config", type=Path, metavar="FILE",
                    help="YAML file of field names and values (preset, any flag below); flags given override it")
    ap.add_argument("--print-config", action="store_true",
                    help="print the resolved preset and run options as JSON (a file --config reads) and exit")
    recipe = ap.add_argument_group("preset fields (what to train; in brackets: the cpu and t4 presets' values)")
    add_dataclass_flags(recipe, Preset, default_is_preset=True, skip=("name",), prog=ap.prog)  # --preset names it
    running = ap.add_argument_group("run options (how to run)")
    hints = typing.get_type_hints(RunOptions)
    for f in fields(RunOptions):
        if f.name == "rewards":
            running.add_argument("--reward", dest="rewards", action="append", default=None, metavar="MODULE:NAME",
                                 help=f.metadata["help"])
        elif f.name == "dashboard":
            running.add_argument("--dashboard", choices=DASHBOARD_MODES, default=f.default, help=f.metadata["help"])
        else:
            add_field_flag(running, f, hints[f.name], default_is_preset=False, prog=ap.prog)
    running.add_argument("--resume-from-checkpoint", dest="resume", nargs="?", const=True, type=_resume_value,
                         metavar="true|false",
                         help="TRL's name for --resume: alone or true = --resume, false = --no-resume (a path is "
                              "refused: the kit resumes the run folder's latest complete checkpoint)")
    return ap


def config_file_values(path: Path) -> dict:
    """The fields a --config YAML file sets, typed; unknown keys and unreadable files raise PresetError."""
    try:
        values = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as err:
        raise PresetError(f"--config {path}: cannot be read ({err.strerror}). Fix: give the path of a YAML "
                          "file, e.g. one written by --print-config") from None
    except yaml.YAMLError as err:
        raise PresetError(f"--config {path}: not valid YAML ({str(err).splitlines()[0]}). Fix: write one "
                          "`field: value` per line (python -m helpers.train --print-config shows them all)") from None
    values = values or {}
    if not isinstance(values, dict):
        raise PresetError(f"--config {path}: holds a {type(values).__name__}, not field: value lines. Fix: write "
                          "one `field: value` per line")
    preset_fields = {f.name for f in fields(Preset)} - {"name"}
    option_fields = {f.name for f in fields(RunOptions)}
    unknown = sorted(set(values) - preset_fields - option_fields - {"preset"})
    if unknown:
        raise PresetError(f"--config {path}: unknown key(s) {', '.join(map(str, unknown))}. Fix: use field names: "
                          f"preset, {', '.join(sorted(preset_fields | option_fields))}")
    typed = typed_fields(Preset, {k: v for k, v in values.items() if k in preset_fields})
    typed.update(typed_fields(RunOptions, {k: v for k, v in values.items() if k in option_fields}))
    if "preset" in values:
        typed["preset"] = str(values["preset"])
    return typed


def parse_args(argv=None) -> argparse.Namespace:
    """The flags, over the --config file's values when one is given (flags override it)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.config is None:
        return args
    values = config_file_values(args.config)
    file_rewards = values.pop("rewards", None)
    ap.set_defaults(**values)
    args = ap.parse_args(argv)
    if args.rewards is None and file_rewards is not None:
        args.rewards = list(file_rewards)  # --reward on the command line replaces the file's list
    return args


def overrides_from(args) -> dict:
    """The Preset fields given on the command line (the rest keep the preset's values)."""
    return given_fields(args, Preset, skip=("name",))


def options_from(args) -> RunOptions:
    """The RunOptions given on the command line."""
    values = {f.name: getattr(args, f.name) for f in fields(RunOptions) if hasattr(args, f.name)}
    values["rewards"] = tuple(values.get("rewards") or ())
    return RunOptions(**values)


def resolved_config(preset: Preset, options: RunOptions) -> dict:
    """What --print-config prints: the preset by name and every field, then the run options (a --config file)."""
    config = {"preset": preset.name, **{k: v for k, v in preset.to_dict().items() if k != "name"}}
    config.update({f.name: getattr(options, f.name) for f in fields(RunOptions)})
    return json.loads(json.dumps(config, default=lambda v: str(v) if isinstance(v, Path) else list(v)))


def _refuse(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def _checked(argv):
    """(preset, options, reward functions), every value checked and the reward modules imported, or an exit code:
    nothing here imports TRL or transformers (tests/test_validation_early.py holds it to that)."""
    try:
        args = parse_args(argv)
        preset = get_preset(args.preset, **overrides_from(args))
        options = options_from(args)
        if args.print_config:
            print(json.dumps(resolved_config(preset, options), indent=2))
            return 0
        # several processes under accelerate launch: the batch is checked against their count (WORLD_SIZE, as
        # helpers.run.distributed.process_info reads it; that module imports transformers)
        runtime = rt.detect()  # once: run_all gets it too
        guard.check_before_loading(preset, runtime, num_processes=int(os.environ.get("WORLD_SIZE", 1)),
                                   options=options)  # on the GPU path this imports Unsloth, before TRL
        return preset, options, resolve_rewards(options.rewards), runtime
    except (PresetError, rt.RuntimeProblem) as err:
        return _refuse(err)


def main(argv=None) -> int:
    try:
        checked = _checked(argv)
        if isinstance(checked, int):
            return checked
        preset, options, reward_funcs, runtime = checked
        from helpers.run.folder import RunDirError  # these import transformers and TRL: after the checks above
        from helpers.run.pipeline import run_all

        try:
            summary = run_all(preset, options, reward_funcs=reward_funcs, runtime=runtime)
        except (PresetError, RunDirError, rt.RuntimeProblem) as err:
            return _refuse(err)
        return 0 if summary.get("status", "finished") == "finished" else 1  # stopped (NaN, bad rewards): exit 1
    except KeyboardInterrupt:
        print("\n[grpo-kit] stopped by Ctrl-C", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
