"""`python -m helpers.memory`: predict a preset's GPU memory from the command line.

    python -m helpers.memory --preset t4
    python -m helpers.memory --model-name qwen3-4b --num-generations 4 --batch-size 4 \
        --max-completion-length 1536 --max-seq-length 1792 --gpu-memory-utilization 0.9 --json

A setting that is a helpers.config.Preset field has the flag `python -m helpers.train` gives it, generated from the
same field (helpers/cli.py), so a command line moves between the two unchanged; the memory model's own settings
(--load-dtype, --gpu, --budget-gb, ...) are written out below.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from helpers.cli import add_fields, given_fields, make_parser
from helpers.config import PRESETS, Preset, PresetError, get_preset
from helpers.memory.architectures import GPUS, MODELS, MemoryModelError
from helpers.memory.estimate import (
    LOAD_DTYPES,
    PRESET_FIELDS_READ,
    T4_BUDGET_GB,
    MemorySettings,
    estimate,
    settings_from_preset,
)

# Flags this command once spelled its own way, and what replaced each: refused with the new spelling, not ignored.
RENAMED_FLAGS = {
    "--model": "--model-name (as in python -m helpers.train)",
    "--grad-accum": "--gradient-accumulation-steps (as in python -m helpers.train)",
    "--engine": "--no-fast-inference for transformers generate, --fast-inference for vLLM (as in python -m "
                "helpers.train)",
    "--quant": "--load-dtype 4bit|16bit|32bit (or --load-in-4bit / --no-load-in-4bit, as in python -m helpers.train)",
}
MEMORY_ONLY_FIELDS = ("load_dtype", "chunked_logits", "standby")  # MemorySettings fields with a flag of their own
# Preset fields the memory model does not read but checks, so that a command line it accepts helpers.train accepts:
# max_seq_length bounds prompt + completion (the model's context; Unsloth's max_seq_length).
CHECKED_PRESET_FIELDS = ("max_seq_length",)


def gpu_arg(text: str):
    """--gpu: a card's name from GPUS, or its memory as a number of GB ("24")."""
    try:
        gb = float(text)
    except ValueError:
        return text
    if not (math.isfinite(gb) and gb > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: a card's memory must be a positive number of GB. Fix: e.g. "
                                         "--gpu 24, or a name such as --gpu l4")
    return gb


def budget_arg(text: str) -> float:
    """--budget-gb: a positive, finite number of GB (-1, 0, nan and inf answered "does NOT fit, margin +nan")."""
    try:
        gb = float(text)
    except ValueError:
        gb = math.nan
    if not (math.isfinite(gb) and gb > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: the budget is the memory a run may use, a positive number of GB. "
                                         f"Fix: e.g. --budget-gb {T4_BUDGET_GB:g} (the t4 preset's), or the card's "
                                         "memory (--budget-gb 24)")
    return gb


class _RenamedFlag(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed: use {RENAMED_FLAGS[option_string]}")


def build_parser() -> argparse.ArgumentParser:
    ap = make_parser(prog="python -m helpers.memory",
                     description="Predict GRPO's GPU memory before training (GB = GiB, as PyTorch reports).")
    ap.add_argument("--preset", default="t4", help=f"the recipe to start from, one of {', '.join(PRESETS)} (default "
                                                   "t4); the flags below change its fields")
    add_fields(ap, "preset fields (the flags of python -m helpers.train; in brackets: the cpu and t4 presets' values)",
               Preset, only=PRESET_FIELDS_READ + CHECKED_PRESET_FIELDS, description=f"--model-name: a hub id, one of "
               f"{', '.join(MODELS)}, or a config.json path. --lora-rank 0: full fine-tuning (with --no-load-in-4bit).")
    own = ap.add_argument_group("the memory model's own settings")
    own.add_argument("--load-dtype", choices=LOAD_DTYPES,
                     help="how the base weights are loaded (default: the preset's: cpu 32bit, load_in_4bit 4bit, "
                          "else 16bit); full fine-tuning (--lora-rank 0) keeps weights, gradients and optimizer "
                          "states in it")
    own.add_argument("--chunked-logits", action=argparse.BooleanOptionalAction, default=None,
                     help="Unsloth's memory-efficient GRPO loss (default: on for the unsloth backend)")
    own.add_argument("--standby", action="store_true", default=None,
                     help="Unsloth's UNSLOTH_VLLM_STANDBY=1 (the kit turns it off): what it would change")
    own.add_argument("--gpu", default="t4", type=gpu_arg, metavar="NAME|GB",
                     help=f"the card: one of {', '.join(GPUS)}, or its memory in GB (e.g. 24)")
    own.add_argument("--budget-gb", type=budget_arg, default=T4_BUDGET_GB, metavar="GB",
                     help=f"the memory the run may use (default {T4_BUDGET_GB:g}, the t4 preset's)")
    own.add_argument("--json", action="store_true", help='print {"peak_gb", "fits", "budget_gb", "components"}')
    for old in RENAMED_FLAGS:
        ap.add_argument(old, action=_RenamedFlag, nargs="?", help=argparse.SUPPRESS)
    return ap


def settings_from_args(args: argparse.Namespace) -> MemorySettings:
    """The preset with the Preset fields given on the command line, then the memory model's own settings."""
    four_bit = getattr(args, "load_in_4bit", None)  # a Preset flag: absent when not given
    if args.load_dtype is not None and four_bit is not None and (args.load_dtype == "4bit") != four_bit:
        raise MemoryModelError(f"--load-dtype {args.load_dtype} contradicts --{'' if four_bit else 'no-'}"
                               "load-in-4bit. Fix: give one of the two.")
    try:
        preset = get_preset(args.preset).with_overrides(**given_fields(args, Preset))
    except PresetError as err:
        raise MemoryModelError(str(err)) from None
    check_context(preset)
    own = {name: getattr(args, name) for name in MEMORY_ONLY_FIELDS if getattr(args, name) is not None}
    return replace(settings_from_preset(preset), **own)


def check_context(preset: Preset) -> None:
    """Prompt plus completion within max_seq_length, as helpers.config's validation has it for helpers.train (which
    this command does not run whole: it estimates what helpers.train refuses, e.g. full fine-tuning). Without it
    --max-completion-length 1000000000 was estimated at 597959 GB instead of refused."""
    prompt, completion, context = preset.max_prompt_length, preset.max_completion_length, preset.max_seq_length
    if prompt + completion > context:
        room = context - prompt
        shorten = (f"shorten --max-completion-length to {room} or less" if room >= 1 else
                   f"shorten --max-prompt-length to less than {context}")
        raise MemoryModelError(
            f"max_completion_length={completion!r}: max_prompt_length ({prompt}) + max_completion_length "
            f"({completion}) is longer than max_seq_length ({context}), the model's context in this preset. Fix: "
            f"{shorten}, or pass --max-seq-length {prompt + completion} if the model's own context (max_position_"
            "embeddings in its config.json) holds that many tokens.")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        est = estimate(settings_from_args(args), gpu=args.gpu, budget_gb=args.budget_gb)
    except MemoryModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(est.to_json()) if args.json else est.table())
    return 0
