"""helpers.run.health: training that goes bad (NaN/inf in loss, grad_norm or rewards; unusable reward outputs) stops
at that step with the cause, keeps the last good checkpoint, and says so in summary.json and the dashboard."""

import json
import math
import subprocess
import sys
import types
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState

from helpers.config import get_preset
from helpers.run import pipeline, trl_patches
from helpers.run.dashboard import TrainingDashboard, training_warnings
from helpers.run.health import FP16_SKIPS, TrainingHealth, bad_values, reward_problem, training_status
from tests.test_cpu_compat import tiny_grpo_trainer

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ pure checks


def test_reward_outputs_that_give_no_signal_or_crash_trl_are_named():
    assert reward_problem("mine", [1.0, None, 0.5, float("nan")], 4) is None  # None for some: "not applicable"
    assert "returned None for every one of the 4 completions" in reward_problem("mine", [None] * 4, 4)
    assert "NaN for every one" in reward_problem("mine", [float("nan")] * 4, 4)
    assert "returned 3 values for 4 completions" in reward_problem("mine", [1.0] * 3, 4)
    assert "'1.0' (str), not a number" in reward_problem("mine", [1.0, "1.0", 0.0, 0.0], 4)
    assert "infinite" in reward_problem("mine", [1.0, math.inf, 0.0, 0.0], 4)
    assert "returned float, not a list" in reward_problem("mine", 1.0, 4)
    assert reward_problem("mine", (1, 0, True, 0.5), 4) is None  # ints, bools and tuples are numbers TRL takes


def test_bad_values_reads_live_logs_and_metrics_jsonl_rows():
    assert bad_values({"loss": 0.1, "grad_norm": float("nan"), "reward": 1.0, "kl": float("nan")}) == \
        ["grad_norm is nan"]  # kl is not watched: NaN there has other causes (beta 0 logs none)
    assert bad_values({"rewards/mine/mean": None, "rewards/mine/std": None}) == \
        ["rewards/mine/mean is NaN (stored as null)"]  # metrics.jsonl writes NaN as null
    assert bad_values({"loss": -math.inf}) == ["loss is -inf"]
    assert bad_values({"loss": 0.0, "grad_norm": 0.3, "reward": 0.5, "rewards/a/mean": 0.5}) == []


def _log(health, step, logs, fp16=False):
    state, control = TrainerState(global_step=step), TrainerControl()
    control.should_save = True  # DefaultFlowCallback asked for a checkpoint at this step
    health.on_log(types.SimpleNamespace(fp16=fp16, world_size=1), state, control, logs=logs)
    return control


def test_a_nan_grad_norm_stops_at_that_step_without_a_checkpoint():
    said = []
    health = TrainingHealth("runs/x/trainer", say=said.append)
    control = _log(health, 2, {"loss": 0.1, "grad_norm": 0.5, "reward": 1.0})
    assert not control.should_training_stop and control.should_save and health.status() == "finished"
    control = _log(health, 3, {"loss": 0.1, "grad_norm": float("nan"), "reward": 1.0})
    assert control.should_training_stop and not control.should_save
    assert health.status().startswith("stopped: grad_norm is nan at step 3. Fix: lower the learning rate")
    assert len(said) == 1 and "TRAINING STOPPED at step 3: grad_norm is nan" in said[0]
    assert "last good one in runs/x/trainer is kept" in said[0]


def test_fp16_overflow_now_and_then_is_the_scalers_job_a_run_of_them_stops():
    said = []
    health = TrainingHealth(say=said.append)
    for step in range(1, FP16_SKIPS):
        assert not _log(health, step, {"loss": 0.1, "grad_norm": math.inf}, fp16=True).should_training_stop
    assert "loss scaler skipped this step" in said[0]
    assert not _log(health, FP16_SKIPS, {"loss": 0.1, "grad_norm": 0.2}, fp16=True).should_training_stop  # reset
    for step in range(FP16_SKIPS + 1, 2 * FP16_SKIPS):
        _log(health, step, {"loss": 0.1, "grad_norm": math.inf}, fp16=True)
    assert _log(health, 2 * FP16_SKIPS, {"loss": 0.1, "grad_norm": math.inf}, fp16=True).should_training_stop
    assert _log(TrainingHealth(say=said.append), 1, {"loss": math.nan, "grad_norm": math.inf},
                fp16=True).should_training_stop  # a NaN loss is never the scaler's


def test_the_dashboard_shows_the_bad_step_as_a_warning():
    rows = [{"step": 1, "reward": 0.5, "loss": 0.0}, {"step": 2, "reward": None, "rewards/mine/mean": None}]
    warning = next(w for w in training_warnings(rows) if w.kind == "bad_values")
    assert warning.step == 2 and "reward is NaN" in warning.message and "last good checkpoint" in warning.message
    assert not [w for w in training_warnings(rows[:1]) if w.kind == "bad_values"]


def test_an_fp16_overflow_the_loss_scaler_skipped_is_no_dashboard_warning():
    """On a T4 (fp16) an infinite grad_norm now and then is a skipped step, and training goes on
    (helpers.run.health decides): the dashboard must not say the run stops, then or at a later step."""
    rows = [{"step": 1, "grad_norm": math.inf, "loss": 0.1, "reward": 0.5}, {"step": 2, "grad_norm": 0.3, "reward": 0.6}]
    assert not [w for w in training_warnings(rows[:1]) if w.kind == "bad_values"]
    assert not [w for w in training_warnings(rows) if w.kind == "bad_values"]


# ------------------------------------------------------------------------------------------ a real (tiny) trainer


def _trainer(tmp_path, reward, **config):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, reward, **{
        "max_steps": 4, "num_iterations": 2, "save_strategy": "steps", "save_steps": 1, **config})
    health = TrainingHealth(tmp_path)  # its lines go through helpers.messages, onto stdout
    trainer.add_callback(health)
    trl_patches.install_trainer_patches(trainer)
    return trainer


def test_weights_gone_to_nan_stop_the_run_and_the_last_good_checkpoint_stays(tmp_path, capsys):
    trainer = _trainer(tmp_path, lambda completions, **kw: [float(len(c)) for c in completions],
                       learning_rate=1e30)  # step 1's update overflows the weights: step 2's gradients are NaN
    trainer.train()
    assert trainer.state.global_step == 2  # of max_steps=4
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1"]
    assert training_status(trainer).startswith("stopped: grad_norm is nan at step 2")
    assert "[grpo-kit] TRAINING STOPPED at step 2: grad_norm is nan" in capsys.readouterr().out


@pytest.mark.parametrize("output, cause", [
    (lambda n: [None] * n, "returned None for every one of the 4 completions"),
    (lambda n: [0.0] * (n - 1), "returned 3 values for 4 completions"),
    (lambda n: ["high"] * n, "returned 'high' (str), not a number"),
])
def test_a_reward_function_with_unusable_output_is_named_at_the_first_step(tmp_path, capsys, output, cause):
    def my_reward(completions, **kwargs):
        return output(len(completions))

    trainer = _trainer(tmp_path, my_reward)
    trainer.train()  # TRL would raise on a wrong length or a string; the kit stops cleanly and names the function
    assert trainer.state.global_step == 1 and not list(tmp_path.glob("checkpoint-*"))
    status = training_status(trainer)
    assert status.startswith(f"stopped: reward function my_reward {cause}") and "at step 1" in status
    assert "Fix: make every reward function return one finite float per completion" in status
    assert f"TRAINING STOPPED at step 1: reward function my_reward {cause}" in capsys.readouterr().out


def test_a_finished_run_is_finished(tmp_path):
    trainer = _trainer(tmp_path, lambda completions, **kw: [float(len(c)) for c in completions], max_steps=1)
    trainer.train()
    assert trainer.state.global_step == 1 and training_status(trainer) == "finished"


# ------------------------------------------------------------------------------------------ one line per step


@pytest.mark.parametrize("verbose", [False, True])
def test_a_logged_step_prints_one_line_not_the_dict_unless_verbose(tmp_path, capsys, verbose):
    trainer = tiny_grpo_trainer(tmp_path, ["Say a number."] * 2, lambda completions, **kw: [0.0, 1.0] * 2)
    trainer.add_callback(TrainingDashboard(None, mode="headless", verbose=verbose))
    trl_patches.install_trainer_patches(trainer)
    trainer.train()
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("[grpo-kit] step 1/1 | reward 0.500") == 1
    assert ("'grad_norm':" in text) is verbose  # transformers' dict of every metric
    assert ("'train_runtime':" in text) is verbose


# ------------------------------------------------------------------------------------------ finish: summary.json


def test_finish_of_a_stopped_run_writes_the_status_and_no_adapter(tmp_path, capsys):
    health = TrainingHealth(say=lambda m: None)
    _log(health, 3, {"loss": float("nan"), "grad_norm": 1.0})
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5, "loss": 0.0}) + "\n"
                                            + json.dumps({"step": 3, "loss": None}) + "\n")
    released = []
    state = types.SimpleNamespace(
        preset=get_preset("cpu"), run_dir=tmp_path, started=0.0, reward_funcs=[lambda: 0], options=None,
        dist=types.SimpleNamespace(is_main=True), folder=types.SimpleNamespace(release=lambda: released.append(1)),
        runtime=types.SimpleNamespace(describe=lambda: "a CPU"))
    trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=[health]),
                                    state=types.SimpleNamespace(global_step=3, log_history=[]))
    before = {"accuracy": 0.2, "format_rate": 0.1, "n": 2, "samples": []}
    summary = pipeline.finish(state, trainer, heldout=[], before=before)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == summary and saved["status"].startswith("stopped: loss is nan at step 3")
    assert saved["after"] is None and saved["before"]["accuracy"] == 0.2 and saved["steps"] == 3
    assert not (tmp_path / "adapter").exists() and released == [1]
    assert (tmp_path / "reward_curve.png").is_file()
    assert "the run stopped: loss is nan at step 3" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ the real command


@pytest.mark.slow
def test_a_reward_returning_none_stops_the_real_run_at_step_1_with_a_summary(tmp_path):
    """The issue's case: `--reward my_rewards:none_reward` (None for every completion) trained two steps with no
    signal, then crashed in the reward plot with a wrong hint and wrote no summary.json."""
    (tmp_path / "my_rewards.py").write_text("def none_reward(prompts, completions, **kw):\n"
                                            "    return [None] * len(completions)\n")
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--max-steps", "2", "--eval-size",
                        "2", "--num-generations", "4", "--batch-size", "8", "--max-completion-length", "16",
                        "--eval-max-new-tokens", "8", "--reward", "my_rewards:none_reward", "--run-dir", str(run)],
                       cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{tmp_path}"},
                       capture_output=True, text=True, timeout=900)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 1  # a stopped run is not a success for a script or CI that runs the command
    assert "[grpo-kit] TRAINING STOPPED at step 1: reward function none_reward returned None for every one" in r.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"].startswith("stopped: reward function none_reward returned None") and summary["steps"] == 1
    assert summary["after"] is None and not (run / "adapter").exists()
    assert not list((run / "trainer").glob("checkpoint-*"))  # nothing of the bad step was saved
    assert "'grad_norm':" not in r.stdout + r.stderr  # one line per step: no dict of TRL's metrics
