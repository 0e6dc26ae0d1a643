"""The main job, end to end: real GRPO steps on CPU, and the errors that must come before any model loads."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.run.folder import RunDirError, plan_run_folder

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "helpers.train", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_impossible_setting_fails_fast_with_the_field_name(tmp_path):
    start = time.time()
    r = _cli("--preset", "cpu", "--num-generations", "3", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "per_device_train_batch_size=" in r.stderr and "multiple of 3" in r.stderr
    assert time.time() - start < 10 and not (tmp_path / "r").exists()  # refused before TRL loads, nothing created


def test_a_refused_command_leaves_nothing_so_the_corrected_one_is_not_other_settings(tmp_path):
    """Late failures used to write config.json first, and then refused the corrected command as "other settings"
    (issue 35): a refusal now comes before the run folder exists."""
    from helpers import train

    run = tmp_path / "r"
    for bad in (["--lr-scheduler-type", "bogus"], ["--keep", "0"], ["--seed", "-1"]):
        assert train.main(["--preset", "cpu", "--run-dir", str(run), *bad]) == 2
        assert not run.exists()


def test_gpu_preset_on_cpu_says_what_to_do(tmp_path):
    r = _cli("--preset", "t4", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "Runtime > Change runtime type > T4 GPU" in r.stderr


def test_existing_run_is_never_overwritten_silently(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"mine": 1}')
    r = _cli("--preset", "cpu", "--run-dir", str(run))
    assert r.returncode == 2 and "--overwrite" in r.stderr
    assert (run / "summary.json").read_text() == '{"mine": 1}'


def test_run_dir_that_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        plan_run_folder(f, "cpu", overwrite=False)


def test_run_dir_that_cannot_be_created_is_refused_with_the_fix_before_any_model_loads(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = _cli("--preset", "cpu", "--run-dir", str(blocker / "run"))  # a parent that is a file, on the command line
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"--run-dir {blocker / 'run'} cannot be created (Not a directory" in r.stderr
    assert "Fix: choose a folder" in r.stderr
    with pytest.raises(RunDirError, match=r"cannot be created \(No such file.*Fix: choose a folder"):
        plan_run_folder(Path("/proc/grpo-kit/run"), "cpu", overwrite=False)  # a parent that cannot be created


def test_run_dir_under_a_read_only_parent_is_refused(tmp_path, monkeypatch):
    def read_only(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)  # root ignores chmod, so the refusal is simulated
    with pytest.raises(RunDirError, match="is not writable. Fix: choose a folder you can write to"):
        plan_run_folder(tmp_path / "locked" / "run", "cpu", overwrite=False)


def test_checkpoint_dir_that_cannot_be_created_is_named(tmp_path):
    from helpers.run.folder import RunFolder, write_config

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    (tmp_path / "run").mkdir()
    with pytest.raises(RunDirError, match="--checkpoint-dir .* cannot be created"):
        write_config(RunFolder(tmp_path / "run", blocker / "ckpts"), {"preset": "cpu"}, save_steps=5)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny real main job shared by the tests below (a GRPO run costs a minute or more on 2 cores): run through
    lab/benchmark_cpu.py's run_once, which is `python -m helpers.train` with the benchmark's step timer, so the
    same run also tests the benchmark's plumbing."""
    from lab import benchmark_cpu

    run = tmp_path_factory.mktemp("tiny-main-job") / "run"
    result = benchmark_cpu.run_once(ROOT, steps=2, eval_size=3, extra=[
        "--num-generations", "4", "--batch-size", "8", "--max-completion-length", "32", "--eval-max-new-tokens", "24",
        "--reward", "helpers.rewards:DEFAULT_REWARDS", "--reward", "tests.student_reward:brevity_reward"], run_dir=run)
    return run, result


@pytest.mark.slow
def test_real_grpo_steps_change_the_adapter_and_write_every_artifact(tiny_run):
    run, result = tiny_run
    assert f"results in {run}" in result["stdout"]

    summary = json.loads((run / "summary.json").read_text())
    assert summary["preset"] == "cpu" and summary["steps"] == 2 and summary["wall_seconds"] > 0
    for when in ("before", "after"):
        assert summary[when]["n"] == 3
        assert 0 <= summary[when]["accuracy"] <= 1 and 0 <= summary[when]["format_rate"] <= 1

    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    # the preset trains on each sampled batch twice (num_iterations=2): TRL logs rewards on the step that samples
    sampled = [row for row in rows if "reward" in row]
    assert [row["step"] for row in sampled] == [1] and "loss" in rows[1]
    assert all("rewards/correctness_reward/mean" in row for row in sampled)
    assert all("rewards/brevity_reward/mean" in row for row in sampled)  # a reward from outside the kit trained
    assert json.loads((run / "config.json").read_text())["reward_funcs"][-1] == "brevity_reward"
    assert (run / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert len((run / "samples.jsonl").read_text().splitlines()) == 3

    # LoRA's B matrices start at zero; after real optimizer steps they no longer are.
    from safetensors.torch import load_file

    weights = load_file(run / "adapter" / "adapter_model.safetensors")
    b = [t for name, t in weights.items() if "lora_B" in name]
    assert b and sum(float(t.abs().sum()) for t in b) > 0


@pytest.mark.slow
def test_real_steps_get_every_phase_and_the_phases_add_up_to_the_step(tiny_run):
    """lab/step_timing.py on the same run: every phase timed, the phases summing to the step."""
    from lab.step_timing import PHASES, PREFIX

    _, run = tiny_run
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
    assert sampled[f"{PREFIX}generation_s"] > 0 and 0 < sampled[f"{PREFIX}generation_tokens"] <= 8 * 32
    assert reused[f"{PREFIX}generation_s"] == 0 and reused[f"{PREFIX}generation_tokens"] == 0
    t = run["time"]
    assert t["steps"] == 2 and t["seconds"]["step"] == pytest.approx(sum(r[f"{PREFIX}step_s"] for r in rows), abs=0.02)
    assert t["generation_tokens_per_s"] > 0 and sum(t["share"].values()) == pytest.approx(1, abs=0.02)
    assert t["seconds"]["step"] <= run["train_seconds"] + 0.1  # the rows cover training, not loading or evaluation
    assert 0 < run["busy_cores"] <= os.cpu_count() + 0.5
