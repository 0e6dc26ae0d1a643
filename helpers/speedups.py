"""The CPU path's speed-ups, by name: one place that lists them, switches each off, and says which a run used.

Each speed-up computes what the plain transformers/TRL code computes (the same tokens, or the same mathematics in
another summation order), only faster on a CPU; lab/docs/performance.md measures each one. A run records the names it
used in summary.json ("cpu_speedups"), and any of them can be turned off to compare or to rule it out of a bug:

    python -m helpers.train --preset cpu --cpu-speedups-off gqa_attention,plain_sampler
    GRPO_KIT_SPEEDUPS_OFF=all python -m helpers.train --preset cpu      # the environment works everywhere too

bf16 sampling and the bf16 loss are not listed here: they change the numbers, so each is a setting of its own
(cpu_bf16_sampling, cpu_bf16_loss). Choosing the thread count per phase was measured and not adopted
(lab/docs/performance.md, issue 33's entry).
"""

from __future__ import annotations

import os

ENV = "GRPO_KIT_SPEEDUPS_OFF"

# name -> what it does (one line each; lab/docs/performance.md has the measurements)
SPEEDUPS: dict[str, str] = {
    "shared_prefix": "generation pre-fills the prompt prefix every row shares once and copies its keys/values",
    "merged_lora": "generation runs with the LoRA adapter merged into the weights (one matmul per projection)",
    "shared_prompt_loss": "the loss runs each group's shared prompt through the model once, not once per completion",
    "old_logps_first_pass": "with num_iterations > 1, the old log-probabilities come from the first loss pass",
    "gqa_attention": "attention reads grouped key/value heads in place, also with a padding mask (no copies)",
    "plain_sampler": "GRPO samples from a plain copy of the policy (no peft wrappers), the step's LoRA merged in",
    "decode_loop": "decoding runs the model's layers in a loop of the kit's own, the key/value cache allocated once",
    "finished_rows_leave": "rows that reached their end of text stop being decoded",
    "pass_at_k_one_call": "pass@k draws all its samples in one generate call per batch, not one call per round",
    "before_eval_cache": "the evaluation of the unchanged base model is reused from an earlier identical one",
}


class SpeedupNameError(ValueError):
    pass


def parse_off(value) -> frozenset[str]:
    """Names from 'a,b', a list, 'all' or ''/None; an unknown name is an error that lists the known ones."""
    if value is None:
        return frozenset()
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value) if n and n.strip()]
    if "all" in names:
        return frozenset(SPEEDUPS)
    unknown = [n for n in names if n not in SPEEDUPS]
    if unknown:
        raise SpeedupNameError(
            f"unknown CPU speed-up name(s) {unknown}. Fix: use 'all' or any of {', '.join(SPEEDUPS)}")
    return frozenset(names)


_configured_off: frozenset[str] | None = None  # set by configure(); None: read the environment


def configure(off=None) -> None:
    """Turn off these speed-ups for this process (a run's cpu_speedups_off), on top of $GRPO_KIT_SPEEDUPS_OFF."""
    global _configured_off
    _configured_off = parse_off(off)


def turned_off() -> frozenset[str]:
    return parse_off(os.environ.get(ENV)) | (_configured_off or frozenset())


def enabled(name: str) -> bool:
    if name not in SPEEDUPS:
        raise SpeedupNameError(f"{name!r} is not a CPU speed-up the kit knows. Fix: add it to helpers.speedups.SPEEDUPS")
    return name not in turned_off()


def active() -> list[str]:
    """The speed-ups on now, in SPEEDUPS order (what summary.json records)."""
    off = turned_off()
    return [name for name in SPEEDUPS if name not in off]
