"""`python -m helpers.train`: GRPO-train a preset, evaluate before and after, and write it all into a run folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

The flags are Preset's and RunOptions' fields, parsed by TRL's TrlParser as in TRL's scripts/grpo.py (helpers.cli).
Every refusal comes before TRL is imported, so in seconds; the run is then helpers.run.pipeline's steps, as in 05.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass, field, fields

import yaml

from helpers import runtime as rt
from helpers.cli import add_fields, given_fields, make_parser
from helpers.config import Preset, PresetError, get_preset
from helpers.run import extensions, guard
from helpers.run.folder import RunDirError, plan_folder
from helpers.run.options import RunOptions, resolved_config
from helpers.run.reward_specs import resolve_rewards, try_rewards


@dataclass
class Command:
    """The command's own flags, as TRL's scripts have ScriptArguments; --config FILE is TRL's parser's."""

    preset: str = field(default="cpu", metadata={"metavar": "NAME", "help": "the recipe to start from: cpu "
                        "(embedded model, any machine), t4 (a GPU), or a multi-GPU one; the flags below change it"})
    print_config: bool = field(default=False, metadata={"help": "print every value as JSON (a --config file) and exit"})


def build_parser():
    ap = make_parser([Command], prog="python -m helpers.train", description=__doc__.split("\n\n")[0],
                     usage="%(prog)s [--preset NAME] [--config FILE] [--print-config] [--FIELD VALUE ...]",
                     epilog="Every flag also takes its underscore spelling (--max_steps).")
    ap.add_argument("--config", metavar="FILE", help="YAML file of field names and values (preset, any flag below; "
                    "`env:` sets environment variables, as in TRL's scripts); flags given override it")
    add_fields(ap, "preset fields (what to train; in brackets: the cpu and t4 presets' values)", Preset)
    add_fields(ap, "run options (how to run)", RunOptions)
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    """The flags over a --config file's values (TRL's parse_args_and_config), typed as the fields are, one namespace."""
    argv = [part for arg in (sys.argv[1:] if argv is None else argv)
            for part in (["--config", os.path.expanduser(arg[9:])] if arg.startswith("--config=") else [arg])]
    parser, path = build_parser(), argv[argv.index("--config") + 1] if "--config" in argv[:-1] else ""
    try:
        command, given, in_file, unknown = parser.parse_args_and_config(
            argv, return_remaining_strings=True, separate_remaining_strings=True)
    except (OSError, yaml.YAMLError, ValueError) as err:  # a file TRL's parser could not read as `key: value` lines
        what = f"cannot be read ({err.strerror})" if isinstance(err, OSError) else \
            f"is not YAML of `field: value` lines ({str(err).splitlines()[0]})"
        raise PresetError(f"--config {path}: {what}. Fix: write one `field: value` per line (python -m helpers.train "
                          "--print-config prints them all)") from None
    if in_file:
        raise PresetError(f"--config {path}: unknown key(s) {', '.join(k[2:] for k in in_file[::2])}. Fix: use the "
                          f"flags' names: {', '.join(sorted({a.dest for a in parser._actions} - {'help', 'config'}))}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return argparse.Namespace(**vars(command), **given_fields(given, Preset), **given_fields(given, RunOptions))


def overrides_from(args) -> dict:
    """The Preset fields the command line (or its --config file) gave; the rest keep the preset's values."""
    return {f.name: getattr(args, f.name) for f in fields(Preset) if hasattr(args, f.name)}


def options_from(args) -> RunOptions:
    return RunOptions(**{f.name: getattr(args, f.name) for f in fields(RunOptions)})


def _checked(argv):
    """(preset, options, reward functions, runtime, run folder), every value checked, the rewards tried and the
    folder claimed, or None after --print-config: before TRL or transformers (tests/test_validation_early.py)."""
    args = parse_args(argv)
    preset, options = get_preset(args.preset, **overrides_from(args)), options_from(args)
    if args.print_config:
        print(json.dumps(resolved_config(preset, options), indent=2))
        return None
    world_size = extensions.world_size(preset)  # several only under the lab's wrapper (lab.scale_out)
    runtime = rt.detect()  # once: run_all gets it too; on the GPU path the guard imports Unsloth, before TRL
    guard.check_before_loading(preset, runtime, num_processes=world_size, options=options)
    reward_funcs = resolve_rewards(options.rewards)
    try_rewards(reward_funcs, preset, options.reward_timeout)
    # one process: the folder is claimed here; several: process 0 plans it for all of them in start()
    folder = plan_folder(preset, options, reward_funcs) if world_size == 1 else None
    return preset, options, reward_funcs, runtime, folder


def _stop(signum, frame):
    """SIGTERM or SIGHUP: stop as Ctrl-C does, where the program is (the resume line, the folder released)."""
    raise KeyboardInterrupt(signal.Signals(signum))


def main(argv=None) -> int:
    """Parse and check (every refusal before TRL is imported), then the run: helpers.run.pipeline's steps."""
    main_thread = threading.current_thread() is threading.main_thread()  # handlers can be set only there
    answered = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
    try:
        if (checked := _checked(argv)) is None:
            return 0
        from helpers.run.pipeline import run_all  # imports transformers and TRL: after the checks above

        summary = run_all(*checked)  # preset, options, reward functions, runtime, run folder
        return 0 if summary.get("status", "finished") == "finished" else 1  # stopped (NaN, bad rewards): exit 1
    except (PresetError, RunDirError, rt.RuntimeProblem) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        signum = next((a for a in err.args if isinstance(a, signal.Signals)), signal.SIGINT)
        how = "Ctrl-C" if signum == signal.SIGINT else signum.name  # stderr, as a command's refusals are
        print(f"\nstopped by {how}; run the same command again to continue this run", file=sys.stderr)
        return 128 + int(signum)
    finally:
        for s, handler in answered.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
