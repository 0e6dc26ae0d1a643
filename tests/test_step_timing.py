"""helpers/run/step_timing.py on a real tiny GRPO run (through scripts/benchmark_cpu.py), and its sums."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.run.step_timing import PHASES, PREFIX, StepTimer, summarize_step_times

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--num-generations", "4", "--batch-size", "8", "--max-completion-length", "16", "--eval-max-new-tokens", "8"]


def _bench():
    from scripts import benchmark_cpu

    return benchmark_cpu


@pytest.mark.slow
def test_real_steps_get_every_phase_and_the_phases_add_up_to_the_step():
    run = _bench().run_once(ROOT, steps=2, eval_size=1, extra=TINY)
    rows = run["rows"]
    assert [r["step"] for r in rows] == [1, 2]
    sampled, reused = rows  # the cpu preset trains on each sampled batch twice (num_iterations=2)
    for row in rows:
        for phase in PHASES:
            assert row[f"{PREFIX}{phase}_s"] >= 0, (phase, row)
        step = row[f"{PREFIX}step_s"]
        # the real work of a GRPO step: the loss's forward pass, its backward pass, the optimizer
        for phase in ("policy_forward", "backward", "optimizer"):
            assert row[f"{PREFIX}{phase}_s"] > 0, (phase, row)
        # the old log-probabilities come from the first loss pass, not from a no-grad pass of their own
        assert row[f"{PREFIX}logps_nograd_s"] == 0, row
        assert sum(row[f"{PREFIX}{p}_s"] for p in PHASES) == pytest.approx(step, rel=0.02, abs=0.01)
        # TRL's own step clock (training_step only) sits inside ours
        assert row["step_time"] <= step + 0.01
    assert sampled[f"{PREFIX}generation_s"] > 0 and 0 < sampled[f"{PREFIX}generation_tokens"] <= 8 * 16
    assert reused[f"{PREFIX}generation_s"] == 0 and reused[f"{PREFIX}generation_tokens"] == 0
    t = run["time"]
    assert t["steps"] == 2 and t["seconds"]["step"] == pytest.approx(sum(r[f"{PREFIX}step_s"] for r in rows), abs=0.02)
    assert t["generation_tokens_per_s"] > 0 and sum(t["share"].values()) == pytest.approx(1, abs=0.02)
    assert t["seconds"]["step"] <= run["train_seconds"] + 0.1  # the rows cover training, not loading or evaluation
    assert 0 < run["busy_cores"] <= os.cpu_count() + 0.5


def test_summary_sums_the_rows_and_ignores_rows_without_times():
    rows = [{"step": 1, "time/step_s": 4.0, "time/generation_s": 3.0, "time/backward_s": 1.0,
             "time/generation_tokens": 60},
            {"step": 2, "time/step_s": 2.0, "time/generation_s": 1.0, "time/other_s": 1.0,
             "time/generation_tokens": 20},
            {"step": 3, "reward": 1.0}]
    s = summarize_step_times(rows)
    assert s["steps"] == 2 and s["seconds"]["step"] == 6.0 and s["seconds"]["generation"] == 4.0
    assert s["share"]["generation"] == pytest.approx(4 / 6, abs=1e-3)
    assert s["generation_tokens_per_s"] == 20.0 and s["seconds_per_step"] == 3.0
    assert summarize_step_times([{"step": 1, "reward": 0.5}]) == {}


def test_attaching_twice_or_to_an_unknown_trainer_says_what_is_wrong():
    class NotATrainer:
        pass

    with pytest.raises(AttributeError, match="_generate"):
        StepTimer().attach(NotATrainer())
    already = NotATrainer()
    already._step_timer = object()
    with pytest.raises(ValueError, match="already has a StepTimer"):
        StepTimer().attach(already)


def test_benchmark_refuses_a_ref_git_does_not_know_before_running_anything(capsys):
    bench = _bench()
    with pytest.raises(SystemExit, match="--compare no-such-ref-i15: git worktree add failed"):
        bench.main(["--compare", "no-such-ref-i15"])
    with pytest.raises(SystemExit, match="pick one"):
        bench.main(["--compare", "main", "--variant", "pass"])
