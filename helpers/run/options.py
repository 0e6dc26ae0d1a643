"""How to run, as opposed to what to train (helpers.config.Preset): the run folder, checkpoints, resume, the
dashboard. Kept apart from the pipeline so that `python -m helpers.train` can build its flags from these fields
before anything imports transformers or TRL (on the GPU path Unsloth must be imported first)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class RunOptions:
    """How to run (the Preset says what to train). Each field is also a flag of `python -m helpers.train`."""

    run_dir: Path | None = _opt(None, "folder for results (default: runs/<preset>-<time>)")
    overwrite: bool = _opt(False, "allow writing into a run folder that already has results")
    save_steps: int | None = _opt(
        None, "write a resumable checkpoint every N steps (0: none; default: about 5 per run, at most every 25)")
    keep: int = _opt(2, "how many of the latest checkpoints to keep")
    resume: bool | None = _opt(
        None, "default (auto): an unfinished run in --run-dir is resumed from its latest complete checkpoint; "
              "--resume insists on it, --no-resume refuses to continue one")
    checkpoint_dir: Path | None = _opt(None, "where checkpoint-N/ go (default: <run-dir>/trainer)")
    drive: bool = _opt(False, "Colab: keep checkpoints on Google Drive (mounts it)")
    dashboard: str = _opt("auto", "live curves + latest completions + warnings: auto, notebook, headless (one line "
                                  "per step, dashboard.png) or off")
    evaluate: bool = _opt(True, "greedy accuracy on the held-out questions before and after training "
                                "(--no-evaluate: neither, for a run whose adapter is evaluated elsewhere; summary.json's "
                                "before/after are then null, and no eval.json or samples.jsonl is written)")
    pass_k_samples: int = _opt(0, "also estimate sampled pass@k with N samples per question before/after "
                                  "(0: greedy only)")
    rewards: tuple[str, ...] = _opt(
        (), "reward functions as module:name (a function or a list of them), e.g. my_rewards:brevity_reward; "
            "repeat the flag for several (default: helpers.rewards:DEFAULT_REWARDS)")
    reward_timeout: float = _opt(
        300.0, "seconds one call of a reward function may run before the run is stopped with the fix (0: no limit); "
               "a call running 30 s or more is reported every 30 s")
    verbose: bool = _opt(False, "also print TRL's full dict of metrics at every step (default: the kit's one line "
                                "per step; metrics.jsonl keeps every metric either way)")


DASHBOARD_MODES = ("auto", "notebook", "headless", "off")


def resolved_config(preset, options: RunOptions) -> dict:
    """A run's every setting as JSON's `field: value`: the preset by name and its fields, then these options. What
    `python -m helpers.train --print-config` prints and its --config reads back."""
    config = {"preset": preset.name, **{k: v for k, v in preset.to_dict().items() if k != "name"}}
    config.update({f.name: getattr(options, f.name) for f in fields(RunOptions)})
    return json.loads(json.dumps(config, default=lambda v: str(v) if isinstance(v, Path) else list(v)))
