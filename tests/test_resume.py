"""Kill a real CPU training run with SIGKILL mid-training, start the same command again, and check it resumes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.run.checkpoints import checkpoint_problems, list_checkpoints

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "cpu", "--max-steps", "3", "--eval-size", "2", "--num-generations", "4", "--batch-size", "4",
        "--max-completion-length", "16", "--eval-max-new-tokens", "8", "--save-steps", "1", "--keep", "5",
        "--dashboard", "headless",
        "--num-iterations", "1"]  # a batch sampled every step, so every step logs rewards (the preset samples every other)


def _steps(path):
    return [json.loads(line)["step"] for line in Path(path).read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_sigkill_then_same_command_resumes_from_the_latest_complete_checkpoint(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "helpers.train", *TINY, "--run-dir", str(run)]
    first_log = tmp_path / "first.log"
    with open(first_log, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ckpt1 = run / "trainer" / "checkpoint-1"
        deadline = time.time() + 600
        try:
            while time.time() < deadline and proc.poll() is None:
                if ckpt1.is_dir() and not checkpoint_problems(ckpt1):
                    break
                time.sleep(0.2)
            assert proc.poll() is None, "the first run ended before it could be killed:\n" + first_log.read_text()[-3000:]
            assert not checkpoint_problems(ckpt1), first_log.read_text()[-3000:]
            os.killpg(proc.pid, signal.SIGKILL)  # mid-training: step 2 is being generated
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "summary.json").exists() and (run / "before.json").exists()
    killed_at = max(c.step for c in list_checkpoints(run / "trainer") if c.complete)

    # What a kill during a save leaves behind: a newer checkpoint folder without trainer_state.json and with a
    # truncated optimizer. It must be named, never loaded, and not deleted.
    partial = run / "trainer" / f"checkpoint-{killed_at + 1}"
    if not partial.exists():
        partial.mkdir()
        (partial / "optimizer.pt").write_bytes(b"PK\x03\x04 truncated")
    # A metrics line for a step that was logged but never checkpointed: it must not appear twice.
    steps_before = _steps(run / "metrics.jsonl")
    if killed_at + 1 not in steps_before:
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": killed_at + 1, "reward": 0.0}) + "\n")
    before_json = (run / "before.json").read_text()

    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-4000:]
    assert f"resuming from step {killed_at}" in out
    assert f"skipping checkpoint-{killed_at + 1}" in out and "moved the incomplete" in out
    assert "reusing before.json" in out and (run / "before.json").read_text() == before_json
    # Training continued at the next step instead of starting over.
    assert f"step {killed_at + 1}/3" in out and f"step {killed_at}/3 |" not in out

    assert _steps(run / "metrics.jsonl") == [1, 2, 3]  # no duplicate, nothing missing
    assert (run / "metrics.redone.jsonl").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["resumed_from_step"] == killed_at
    ckpts = list_checkpoints(run / "trainer")
    assert [c.step for c in ckpts] == list(range(1, 4)) and all(c.complete for c in ckpts)
    state = json.loads((run / "trainer" / "checkpoint-3" / "trainer_state.json").read_text())
    logged = [h["step"] for h in state["log_history"] if "reward" in h]
    assert state["global_step"] == 3 and logged == [1, 2, 3]
    assert any(p.name.startswith(f"incomplete-checkpoint-{killed_at + 1}") for p in (run / "trainer").iterdir())
    report = json.loads((run / "eval.json").read_text())
    assert report["greedy"]["before"]["n"] == 2 and len(report["samples"]) == 2
    assert (run / "dashboard.png").read_bytes()[:4] == b"\x89PNG"

    # A finished run is refused without --overwrite, and nothing in it changes.
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert json.loads((run / "summary.json").read_text()) == summary

    # The same command with a larger --max-steps continues the finished run from its last checkpoint.
    longer = [a if a != "3" or cmd[i - 1] != "--max-steps" else "4" for i, a in enumerate(cmd)]
    more = subprocess.run(longer, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert more.returncode == 0, more.stderr[-3000:]
    assert "took 3 steps and max_steps is now 4" in more.stdout and "resuming from step 3" in more.stdout
    assert "learning rate: the constant schedule does not depend on max_steps, so step 4 goes on at" in more.stdout
    extended = json.loads((run / "summary.json").read_text())
    assert extended["steps"] == 4 and extended["resumed_from_step"] == 3
    assert json.loads((run / "summary-step-3.json").read_text()) == summary
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4]

    # The saved adapter can be evaluated on its own, with sampled pass@k.
    ev = subprocess.run([sys.executable, "-m", "helpers.evaluate", "--run-dir", str(run), "--samples", "2"],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    report = json.loads((run / "eval.json").read_text())
    assert set(report["pass_at_k"]["after"]) >= {"pass@1", "pass@2", "correct_counts"}


# Dies like a kill -9 during the final evaluation: after the last checkpoint and adapter/, before summary.json.
KILLED_IN_FINAL_EVALUATION = (
    "import os, signal, sys\n"
    "from helpers.run import pipeline\n"
    "pipeline._evaluate_after = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
    "from helpers.train import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.slow
def test_a_kill_during_the_final_evaluation_resumes_into_the_evaluation_only(tmp_path):
    """The documented recovery (the same command) used to train a step 3 of a 2-step run. The preset's
    num_iterations=2: step 2 ends a sampled batch, and checkpoint-2 is the last."""
    from safetensors.torch import load_file

    run = tmp_path / "run"
    args = ["--preset", "cpu", "--run-dir", str(run), "--max-steps", "2", "--save-steps", "1", "--eval-size", "2",
            "--num-generations", "4", "--batch-size", "4", "--max-completion-length", "16",
            "--eval-max-new-tokens", "8", "--dashboard", "headless"]
    first = subprocess.run([sys.executable, "-c", KILLED_IN_FINAL_EVALUATION, *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert not (run / "summary.json").exists() and (run / "adapter").is_dir()
    assert [c.step for c in list_checkpoints(run / "trainer") if c.complete] == [1, 2]

    again = subprocess.run([sys.executable, "-m", "helpers.train", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=900)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert "cleared a stale lock" in out  # the killed process's lock info, found and cleared
    assert "checkpoint-2 already reached max_steps=2" in out and "going straight to the final evaluation" in out
    assert "step 3/" not in out and "resuming from step" not in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["resumed_from_step"] == 2
    assert _steps(run / "metrics.jsonl") == [1, 2]
    assert max(c.step for c in list_checkpoints(run / "trainer")) == 2
    # the evaluated and saved adapter is the one step 2 trained, not a fresh or a further-trained one
    saved, at_step_2 = (load_file(p / "adapter_model.safetensors") for p in (run / "adapter",
                                                                          run / "trainer" / "checkpoint-2"))
    assert saved.keys() == at_step_2.keys() and all((saved[k] == at_step_2[k]).all() for k in saved)
    assert not (run / ".grpo-kit.lock.json").exists()  # released at the end of finish()
