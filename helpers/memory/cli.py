"""`python -m helpers.memory`: predict a preset's GPU memory from the command line.

    python -m helpers.memory --preset t4
    python -m helpers.memory --model qwen3-4b --load-dtype 4bit --num-generations 4 --batch-size 4 \
        --max-completion-length 1536 --gpu-memory-utilization 0.9 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from helpers.memory.architectures import GPUS, MODELS, MemoryModelError
from helpers.memory.estimate import LOAD_DTYPES, OPTIMIZERS, T4_BUDGET_GB, MemorySettings, as_settings, estimate


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m helpers.memory",
                                 description="Predict GRPO's GPU memory before training (GB = GiB, as PyTorch reports).")
    ap.add_argument("--preset", help="start from a preset of helpers.config (cpu, t4); flags below override it")
    ap.add_argument("--model", help=f"one of {', '.join(MODELS)}, a hub id, or a config.json path")
    ap.add_argument("--load-dtype", choices=LOAD_DTYPES,
                    help="how the base weights are loaded (default: the preset's: cpu 32bit, load_in_4bit 4bit, else "
                         "16bit); full fine-tuning (--lora-rank 0) keeps weights, gradients and optimizer states in it")
    ap.add_argument("--lora-rank", type=int, help="0 = full fine-tuning")
    ap.add_argument("--num-generations", type=int)
    ap.add_argument("--batch-size", type=int, help="per_device_train_batch_size (counts completions)")
    ap.add_argument("--grad-accum", type=int, help="gradient_accumulation_steps")
    ap.add_argument("--max-prompt-length", type=int)
    ap.add_argument("--max-completion-length", type=int)
    ap.add_argument("--beta", type=float)
    ap.add_argument("--optim", help=f"one of {', '.join(OPTIMIZERS)}")
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--chunked-logits", action=argparse.BooleanOptionalAction, default=None,
                    help="Unsloth's memory-efficient GRPO loss")
    ap.add_argument("--engine", choices=("vllm", "hf"))
    ap.add_argument("--gpu-memory-utilization", type=float)
    ap.add_argument("--standby", action="store_true", default=None)
    ap.add_argument("--gpu", default="t4", help=f"one of {', '.join(GPUS)}")
    ap.add_argument("--budget-gb", type=float, default=T4_BUDGET_GB)
    ap.add_argument("--json", action="store_true", help='print {"peak_gb", "fits", "budget_gb", "components"}')
    return ap


_FLAG_FIELDS = {"model": "model", "load_dtype": "load_dtype", "lora_rank": "lora_rank", "num_generations": "num_generations",
                "batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
                "max_prompt_length": "max_prompt_length", "max_completion_length": "max_completion_length",
                "beta": "beta", "optim": "optim", "gradient_checkpointing": "gradient_checkpointing",
                "chunked_logits": "chunked_logits", "engine": "engine",
                "gpu_memory_utilization": "gpu_memory_utilization", "standby": "standby"}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        base = as_settings(args.preset) if args.preset else MemorySettings()
        overrides = {f: getattr(args, a) for a, f in _FLAG_FIELDS.items() if getattr(args, a) is not None}
        if overrides.get("engine") == "hf" and "gpu_memory_utilization" not in overrides:
            overrides["gpu_memory_utilization"] = None
        est = estimate(replace(base, **overrides), gpu=args.gpu, budget_gb=args.budget_gb)
    except MemoryModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(est.to_json()) if args.json else est.table())
    return 0
