"""The main job's command line: GRPO-train a preset, evaluate before and after, and write everything into a run
folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

Every field of helpers.config.Preset is a flag (`--help` lists them with the field's own help text), and so is
every field of helpers.run.options.RunOptions. The run itself is helpers.run.pipeline's named steps, which notebook
05 calls cell by cell. Writes metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after
answers to the same questions), adapter/ (the LoRA adapter), config.json and summary.json.
"""

from __future__ import annotations

import argparse
import sys
import typing
from dataclasses import fields

from helpers import runtime as rt
from helpers.cli import add_dataclass_flags, add_field_flag, given_fields
from helpers.config import Preset, PresetError, get_preset
from helpers.run.options import DASHBOARD_MODES, RunOptions


def build_parser() -> argparse.ArgumentParser:
    """The CLI, generated from the Preset and RunOptions dataclasses: one flag per field."""
    ap = argparse.ArgumentParser(prog="python -m helpers.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu",
                    help="the recipe to start from: cpu (embedded model, any machine), t4 (Qwen2.5-1.5B on a GPU), "
                         "or a multi-GPU one; the flags below change its fields")
    recipe = ap.add_argument_group("preset fields (what to train; default: the preset's value)")
    add_dataclass_flags(recipe, Preset, default_is_preset=True, skip=("name",), prog=ap.prog)  # --preset names it
    running = ap.add_argument_group("run options (how to run)")
    hints = typing.get_type_hints(RunOptions)
    for f in fields(RunOptions):
        if f.name == "rewards":
            running.add_argument("--reward", dest="rewards", action="append", default=None, help=f.metadata["help"])
        elif f.name == "dashboard":
            running.add_argument("--dashboard", choices=DASHBOARD_MODES, default=f.default, help=f.metadata["help"])
        else:
            add_field_flag(running, f, hints[f.name], default_is_preset=False, prog=ap.prog)
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def overrides_from(args) -> dict:
    """The Preset fields given on the command line (the rest keep the preset's values)."""
    return given_fields(args, Preset, skip=("name",))


def options_from(args) -> RunOptions:
    """The RunOptions given on the command line."""
    values = {f.name: getattr(args, f.name) for f in fields(RunOptions) if hasattr(args, f.name)}
    values["rewards"] = tuple(values.get("rewards") or ())
    return RunOptions(**values)


def _refuse(err: Exception) -> int:
    print(f"error: {err}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        preset = get_preset(args.preset, **overrides_from(args))
    except PresetError as err:
        return _refuse(err)
    rt.start_gpu_process(preset.backend)  # GPU: allocator settings before CUDA, Unsloth before transformers/TRL
    from helpers.run.folder import RunDirError  # these import transformers and TRL: after Unsloth (the line above)
    from helpers.run.pipeline import run_all

    try:
        run_all(preset, options_from(args))
    except (PresetError, RunDirError, rt.RuntimeProblem) as err:
        return _refuse(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
