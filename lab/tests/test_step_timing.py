"""lab/step_timing.py: its sums, and its refusals. (On a real tiny GRPO run, through lab/benchmark_cpu.py:
tests/test_train.py, which shares that run with the main job's own checks.)"""

from __future__ import annotations

import pytest

from lab.step_timing import StepTimer, summarize_step_times


def _bench():
    from lab import benchmark_cpu

    return benchmark_cpu


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
