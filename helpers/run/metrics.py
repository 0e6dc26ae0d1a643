"""Record what GRPO logs at every step (metrics.jsonl) and plot the reward curves from it.

The reward curve is the only sign that RL is working, so every run writes one, headless or not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback

from helpers.run.trl_patches import latest_batch_logs

REWARD_PREFIX = "rewards/"


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsRecorder(TrainerCallback):
    """Append one JSON line per logging step to metrics.jsonl (step + everything the trainer logged)."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or state.global_step == 0 or "train_runtime" in logs:
            return  # the closing summary log is not a step
        if not getattr(state, "is_world_process_zero", True):
            return  # several processes (accelerate launch): the logs are already gathered; process 0 writes them
        row = {"step": state.global_step, **{k: _clean(v) for k, v in logs.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


class AdvantageStats(TrainerCallback):
    """Add the spread of the latest sampled batch's advantages to the logs of a step that sampled, before
    MetricsRecorder writes them: `advantages/abs_mean` (how hard the step pushes) and `advantages/nonzero` (the share
    of completions that push at all). TRL keeps the advantages (trainer._logs["advantages"], for its completion
    tables; read through helpers.run.trl_patches.latest_batch_logs) but logs no statistic of them. `trainer` is
    attached by helpers.run.pipeline.prepare_trainer."""

    def __init__(self):
        self.trainer = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or self.trainer is None:
            return  # only a step that sampled has fresh advantages
        batch = latest_batch_logs(self.trainer) or {}
        values = [float(a) for a in batch.get("advantages", ()) if math.isfinite(a)]
        if values:
            logs["advantages/abs_mean"] = sum(abs(a) for a in values) / len(values)
            logs["advantages/nonzero"] = sum(abs(a) > 1e-6 for a in values) / len(values)


def read_metrics(path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reward_series(rows: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """{'reward': (steps, values), 'correctness_reward': ...} from metrics rows: total and each reward's mean."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        for key, value in row.items():
            if value is None:
                continue
            if key == "reward":
                name = "total"
            elif key.startswith(REWARD_PREFIX) and key.endswith("/mean"):
                name = key[len(REWARD_PREFIX):-len("/mean")]
            else:
                continue
            steps, values = series.setdefault(name, ([], []))
            steps.append(row["step"])
            values.append(value)
    return series


def plot_rewards(rows: list[dict], path, title: str = "GRPO reward per step") -> Path:
    """Save a PNG with the total reward and each reward function's mean against the step."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    series = reward_series(rows)
    if not series:
        raise ValueError("no reward values in the metrics: was anything logged (logging_steps) during training?")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    steps, values = series.pop("total", ([], []))
    if steps:
        top.plot(steps, values, marker="o", color="black", label="total reward")
    top.set_ylabel("mean reward")
    if steps:
        top.legend(loc="lower right")
    top.set_title(title)
    for name, (s, v) in sorted(series.items()):
        bottom.plot(s, v, marker=".", label=name)
    bottom.set_xlabel("step")
    bottom.set_ylabel("mean reward per function")
    if series:  # a run stopped at its first step may have logged the total only
        bottom.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
