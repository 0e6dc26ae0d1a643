"""The main job's command line: GRPO-train a preset, evaluate before and after, and write everything into a run
folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

Every field of helpers.config.Preset is a flag (`--help` lists them with the field's own help text), and so is
every field of helpers.run.options.RunOptions. The run itself is helpers.run.pipeline's named steps, which notebook
05 calls cell by cell. Writes metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after
answers to the same questions), adapter/ (the LoRA adapter), config.json and summary.json.

Every value is checked, the reward functions imported and tried on a sample group, and the run folder claimed (one
process at a time; fresh, resumed or refused) before TRL is imported: a refusal comes in a second or two, not after
the TRL import (seconds) or the model load. Ctrl-C, SIGTERM and SIGHUP (a scheduler, `timeout`, a closed terminal,
Colab) stop the run alike: the resume line, the folder released, exit 130, 143 or 129.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import typing
from dataclasses import fields
from pathlib import Path

import yaml

from helpers import runtime as rt
from helpers.cli import KitArgumentParser, add_dataclass_flags, add_field_flag, given_fields
from helpers.config import Preset, PresetError, get_preset, typed_fields
from helpers.run import guard
from helpers.run.folder import RunDirError, plan_folder
from helpers.run.options import DASHBOARD_MODES, RunOptions
from helpers.run.reward_specs import resolve_rewards, try_rewards

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
    """(preset, options, reward functions, runtime, run folder), every value checked, the rewards tried and the
    folder claimed, or an exit code: nothing here imports TRL or transformers (tests/test_validation_early.py)."""
    try:
        args = parse_args(argv)
        preset = get_preset(args.preset, **overrides_from(args))
        options = options_from(args)
        if args.print_config:
            print(json.dumps(resolved_config(preset, options), indent=2))
            return 0
        # several processes under accelerate launch: the batch is checked against their count (WORLD_SIZE, as
        # helpers.run.distributed.process_info reads it; that module imports transformers)
        world_size = int(os.environ.get("WORLD_SIZE", 1))
        if preset.num_processes > 1 and world_size == 1:
            raise PresetError(
                f"num_processes={preset.num_processes}, but this is one process: the recipe is launched by accelerate, "
                f"which starts the {preset.num_processes}. Fix: accelerate launch --num_processes "
                f"{preset.num_processes} -m helpers.train ... (docs/scale-out.md), or --num-processes 1")
        runtime = rt.detect()  # once: run_all gets it too
        guard.check_before_loading(preset, runtime, num_processes=world_size,
                                   options=options)  # on the GPU path this imports Unsloth, before TRL
        reward_funcs = resolve_rewards(options.rewards)
        try_rewards(reward_funcs, preset, options.reward_timeout)
        # one process: the folder is claimed here; several: process 0 plans it for all of them in start()
        folder = plan_folder(preset, options, reward_funcs) if world_size == 1 else None
        return preset, options, reward_funcs, runtime, folder
    except (PresetError, RunDirError, rt.RuntimeProblem) as err:
        return _refuse(err)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, so it stops as Ctrl-C does (the resume line, the folder
    released by the normal way out)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


def main(argv=None) -> int:
    main_thread = threading.current_thread() is threading.main_thread()  # handlers can be set only there
    answered = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
    try:
        checked = _checked(argv)
        if isinstance(checked, int):
            return checked
        preset, options, reward_funcs, runtime, folder = checked
        from helpers.run.pipeline import run_all  # imports transformers and TRL: after the checks above

        try:
            summary = run_all(preset, options, reward_funcs=reward_funcs, runtime=runtime, folder=folder)
        except (PresetError, RunDirError, rt.RuntimeProblem) as err:
            return _refuse(err)
        return 0 if summary.get("status", "finished") == "finished" else 1  # stopped (NaN, bad rewards): exit 1
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", signal.SIGINT)
        how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"\n[grpo-kit] stopped by {how}; run the same command again to continue this run", file=sys.stderr)
        return 128 + int(signum)
    finally:
        for s, handler in answered.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
