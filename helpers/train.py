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
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from helpers import runtime as rt
from helpers.cli import add_fields, given_fields, make_parser
from helpers.config import Preset, PresetError, get_preset
from helpers.run import guard
from helpers.run.folder import RunDirError, plan_folder
from helpers.run.options import RunOptions
from helpers.run.reward_specs import resolve_rewards, try_rewards


@dataclass
class Command:
    """The command's own flags (TRL's scripts have ScriptArguments); the Preset and RunOptions fields follow."""

    preset: str = field(default="cpu", metadata={"metavar": "NAME", "help": "the recipe to start from: cpu (embedded "
                        "model, any machine), t4 (Qwen2.5-1.5B on a GPU), or a multi-GPU one; the flags below change it"})
    print_config: bool = field(default=False, metadata={
        "help": "print the resolved preset and run options as JSON (a file --config reads) and exit"})


def _resume_value(text: str) -> bool:
    """--resume_from_checkpoint, TRL's name for --resume: true or false. A path is refused: the kit resumes the run
    folder's latest complete checkpoint."""
    if text.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return text.strip().lower() in ("true", "1", "yes")
    raise argparse.ArgumentTypeError(
        f"{text!r}: the kit resumes the run in --run-dir from its latest complete checkpoint, not from a path. "
        "Fix: pass --run-dir <the run folder> (and --checkpoint-dir <the folder holding checkpoint-N/> if elsewhere)")


def build_parser():
    """TRL's TrlParser over Command, Preset and RunOptions (helpers.cli)."""
    ap = make_parser([Command], prog="python -m helpers.train", description=__doc__.split("\n\n")[0],
                     usage="%(prog)s [--preset NAME] [--config FILE] [--print-config] [--FIELD VALUE ...]",
                     epilog="Every flag also takes its underscore spelling (--max_steps).")
    ap.add_argument("--config", metavar="FILE", help="YAML file of field names and values (preset, any flag below; "
                    "`env:` sets environment variables, as in TRL's scripts); flags given override it")
    add_fields(ap, "preset fields (what to train; in brackets: the cpu and t4 presets' values)", Preset)
    add_fields(ap, "run options (how to run)", RunOptions)
    ap._action_groups[-1].add_argument(
        "--resume-from-checkpoint", "--resume_from_checkpoint", dest="resume", nargs="?", const=True,
        type=_resume_value, help="TRL's name for --resume: alone or true = --resume, false = --no-resume")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    """The flags over a --config file's values (TRL's parse_args_and_config): the command's own, the Preset fields
    given, every run option."""
    argv = [part for arg in (sys.argv[1:] if argv is None else argv)
            for part in (arg.split("=", 1) if arg.startswith("--config=") else [arg])]
    parser = build_parser()
    try:
        command, *given, unknown = parser.parse_args_and_config(argv, return_remaining_strings=True)
    except PresetError:
        raise
    except (OSError, yaml.YAMLError, ValueError) as err:
        path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else ""
        what = f"cannot be read ({err.strerror})" if isinstance(err, OSError) else \
            f"is not YAML of `field: value` lines ({str(err).splitlines()[0]})"
        raise PresetError(f"--config {path}: {what}. Fix: write one `field: value` per line (python -m helpers.train "
                          "--print-config prints them all)") from None
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return argparse.Namespace(**vars(command), **(vars(given[0]) if given else {}))


def overrides_from(args) -> dict:
    """The Preset fields the command line (or its --config file) gave; the rest keep the preset's values."""
    return given_fields(args, Preset)


def options_from(args) -> RunOptions:
    return RunOptions(**given_fields(args, RunOptions))


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
