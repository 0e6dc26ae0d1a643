"""The kit's own measured CPU runs, shipped as data (results/cpu-runs/NAME/): lessons read real curves from them.

Each folder holds the run's metrics.jsonl as TRL logged it, samples.jsonl (each held-out question's answer before
and after training) and run.json (the command, the commit it started from, the machine, the date, the wall time,
accuracy before and after). scripts/ship_cpu_run.py writes them from a run folder of `python -m helpers.train`;
tests/test_measured_runs.py checks what the lessons say about them.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from helpers import train
from helpers.config import get_preset
from helpers.rewards import answer_of
from helpers.run.metrics import read_metrics

RUNS_DIR = Path(__file__).resolve().parents[2] / "results" / "cpu-runs"


@dataclass(frozen=True)
class MeasuredRun:
    name: str
    rows: list[dict]  # metrics.jsonl, one dict per logged step
    meta: dict        # run.json

    @property
    def sampled(self) -> list[dict]:
        """The steps that sampled a batch (with num_iterations=2 the others reuse it and log no reward)."""
        return [r for r in self.rows if "reward" in r]

    def samples(self) -> list[dict]:
        """samples.jsonl: each held-out question with the answer before and after training."""
        path = RUNS_DIR / self.name / "samples.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []

    def common_answers(self, n: int = 3) -> str:
        """The n most common final answers after training, with counts: '2' 50 times is a collapse, not learning."""
        counts = Counter(answer_of(s["after"]) for s in self.samples())
        return ", ".join(f"{a!r} x{c}" for a, c in counts.most_common(n)) or "(no samples shipped)"

    def changed(self) -> dict:
        """Every setting this run changed from its preset, {field: value}, read from run.json's command (a flag
        `--learning-rate 5e-4` is the field learning_rate); the seed, the run folder and the dashboard are not
        settings, and a flag that repeats the preset's value changed nothing."""
        return changed_settings(self.meta["command"])

    def changes(self) -> str:
        """changed() as text: 'learning_rate=0.0005, num_iterations=1', or 'nothing (the preset as shipped)'."""
        return settings_text(self.changed()) or "nothing (the preset as shipped)"

    def label(self) -> str:
        before, after = self.meta["before"]["accuracy"], self.meta["after"]["accuracy"]
        return f"{self.name}: {self.meta['what']} (accuracy {before:.2f} -> {after:.2f})"


NOT_SETTINGS = ("seed",)  # a Preset field that chooses no recipe setting: runs differing only there are seeds


def changed_settings(command: str) -> dict:
    """The settings a `python -m helpers.train --preset NAME --flag value ...` command changed from that preset,
    typed: read by helpers.train's own parser (aliases, types and all), less the seed and any flag that repeats the
    preset's value."""
    args = train.parse_args(shlex.split(command)[3:])  # after `python -m helpers.train`
    preset = get_preset(args.preset)
    return {k: v for k, v in train.overrides_from(args).items()
            if k not in NOT_SETTINGS and v != getattr(preset, k)}


def settings_text(changed: dict) -> str:
    """{field: value} as 'learning_rate=0.0005, num_iterations=1' ('' for none)."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in changed.items())


def names() -> list[str]:
    return sorted(p.name for p in RUNS_DIR.iterdir() if (p / "run.json").is_file()) if RUNS_DIR.is_dir() else []


def load(name: str) -> MeasuredRun:
    folder = RUNS_DIR / name
    if not (folder / "run.json").is_file():
        raise FileNotFoundError(f"no measured run {name!r} in {RUNS_DIR} (there are: {', '.join(names()) or 'none'}). "
                                "Fix: use one of those names, or ship a run with scripts/ship_cpu_run.py.")
    return MeasuredRun(name, read_metrics(folder / "metrics.jsonl"), json.loads((folder / "run.json").read_text()))
