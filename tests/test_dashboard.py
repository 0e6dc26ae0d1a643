"""The dashboard's warnings on synthetic metric sequences, its lines and files, and where it reads completions."""

import inspect
import json
from collections import defaultdict, deque

import pytest

from helpers.run import dashboard as db

RULES = db.WarningRules(no_signal_steps=3, clipped_ratio=0.5, clipped_steps=3, collapse_window=3,
                        collapse_fraction=0.5, collapse_min_drop=0.2)


def rows(**series):
    n = len(next(iter(series.values())))
    return [{"step": i + 1, **{k.replace("__", "/"): v[i] for k, v in series.items()}} for i in range(n)]


# ------------------------------------------------------------------------------------------ no signal


def test_no_signal_after_n_consecutive_tied_steps():
    assert db.no_signal_warning(rows(frac_reward_zero_std=[1, 1]), RULES) is None
    w = db.no_signal_warning(rows(frac_reward_zero_std=[0.5, 1, 1, 1]), RULES)
    assert w.kind == "no_signal" and w.step == 4 and "last 3 steps" in w.message and "num_generations" in w.message


def test_no_signal_resets_when_one_group_differs():
    assert db.no_signal_warning(rows(frac_reward_zero_std=[1, 1, 1, 0.75]), RULES) is None
    assert db.no_signal_warning(rows(frac_reward_zero_std=[1, 1, 0.99, 1]), RULES) is None


def test_missing_or_nan_values_are_skipped():
    r = rows(frac_reward_zero_std=[1, None, 1, float("nan"), 1])
    assert db.no_signal_warning(r, RULES).step == 5
    assert db.training_warnings([]) == []


# ------------------------------------------------------------------------------------------ length cap


def test_length_cap_needs_n_high_steps_in_a_row():
    assert db.length_cap_warning(rows(completions__clipped_ratio=[0.9, 0.9, 0.2, 0.9, 0.9]), RULES) is None
    w = db.length_cap_warning(rows(completions__clipped_ratio=[0.1, 0.6, 0.5, 0.8]), RULES, max_completion_length=64)
    assert w.kind == "length_cap" and "80%" in w.message and "64 tokens" in w.message


# ------------------------------------------------------------------------------------------ collapse


def test_reward_collapse_when_smoothed_reward_falls_well_below_its_best():
    r = rows(reward=[0.2, 0.8, 0.9, 0.85, 0.3, 0.1, 0.05])
    w = db.reward_collapse_warning(r, RULES)
    assert w.kind == "reward_collapse" and w.step == 7 and "down from a best of 0.85" in w.message


def test_no_collapse_for_noise_small_drops_or_steady_climb():
    assert db.reward_collapse_warning(rows(reward=[0.1, 0.3, 0.5, 0.7, 0.9]), RULES) is None
    assert db.reward_collapse_warning(rows(reward=[1.0, 1.1, 1.0, 0.9, 0.95, 0.9]), RULES) is None  # < 50%
    assert db.reward_collapse_warning(rows(reward=[0.1, 0.2, 0.1, 0.0, 0.0, 0.0]), RULES) is None  # < 0.2 absolute
    assert db.reward_collapse_warning(rows(reward=[0.9, 0.0, 0.9, 0.9]), RULES) is None  # one bad step, smoothed
    assert db.reward_collapse_warning(rows(reward=[1.0, 0.0]), RULES) is None  # too short to tell


def test_training_warnings_combines_all():
    r = rows(reward=[0.9, 0.9, 0.9, 0.1, 0.0, 0.0], frac_reward_zero_std=[0, 0, 0, 1, 1, 1],
             completions__clipped_ratio=[1, 1, 1, 1, 1, 1])
    assert {w.kind for w in db.training_warnings(r, RULES)} == {"no_signal", "length_cap", "reward_collapse"}


# ------------------------------------------------------------------------------------------ lines, samples, files


def test_step_line_is_compact_and_handles_gpu_and_cpu_memory():
    row = {"step": 3, "reward": 0.5, "reward_std": 0.25, "frac_reward_zero_std": 0.0,
           "completions/mean_length": 40.0, "completions/clipped_ratio": 0.125, "memory/rss_gb": 1.5}
    line = db.step_line(row, max_steps=30)
    assert line == ("step 3/30 | reward 0.500 (spread 0.250) | zero-spread 0.00 | length 40.0 (clipped 0.12) | "
                    "RAM 1.50 GB")
    gpu = db.step_line({"step": 1, "kl": 0.01, "memory/allocated_gb": 3, "memory/reserved_gb": 4,
                        "memory/peak_gb": 5})
    assert "kl 0.0100" in gpu and "GPU 3.00/4.00 GB (peak 5.00)" in gpu and "reward -" in gpu
    reused = db.step_line({"step": 4, "loss": 0.1, "memory/rss_gb": 1.5}, max_steps=40)  # num_iterations=2
    assert reused == ("step 4/40 | trained again on the last sampled completions (num_iterations > 1): no new rewards"
                      " | RAM 1.50 GB")


def _trl_like_logs():
    logs = {"prompt": deque(maxlen=4), "completion": deque(maxlen=4),
            "rewards": defaultdict(lambda: deque(maxlen=4)), "advantages": deque(maxlen=4)}
    for i in range(6):  # the deque keeps the latest generation batch only
        logs["prompt"].append([{"role": "system", "content": "sys"}, {"role": "user", "content": f"q{i}"}])
        logs["completion"].append([{"role": "assistant", "content": f"<answer>{i}</answer>"}])
        logs["rewards"]["correctness_reward"].append(float(i % 2) * 2)
        logs["rewards"]["tag_count_reward"].append(0.25)
    return logs


def test_samples_from_trl_logs_reads_the_latest_batch():
    samples = db.samples_from_trl_logs(_trl_like_logs(), reward_weights=[1.0, 2.0], limit=3)
    assert [s["prompt"] for s in samples] == ["q2", "q3", "q4"]
    assert samples[1]["completion"] == "<answer>3</answer>" and samples[1]["total"] == pytest.approx(2.5)
    assert "q2" in db.samples_html(samples)


class _Trainer:
    def __init__(self):
        self._logs = _trl_like_logs()
        self.callbacks = []

    def add_callback(self, cb):
        self.callbacks.append(cb)


class _State:
    def __init__(self, step):
        self.global_step, self.max_steps, self.is_world_process_zero = step, 4, True


def test_headless_dashboard_prints_lines_warns_once_and_writes_files(tmp_path, capsys):
    dash = db.TrainingDashboard(tmp_path, mode="headless", png_every=2, rules=RULES)
    trainer = _Trainer()
    assert dash.attach(trainer) is dash and trainer.callbacks == [dash]
    for step in (1, 2, 3, 4):
        dash.on_log(None, _State(step), None, logs={"reward": 0.1, "reward_std": 0.0, "frac_reward_zero_std": 1.0,
                                                     "completions/mean_length": 16.0, "memory/rss_gb": 1.0})
    dash.on_log(None, _State(4), None, logs={"train_runtime": 1.0})  # the closing summary: not a step
    out = capsys.readouterr().out
    assert out.count("[grpo-kit] step ") == 4 and out.count("No learning signal") == 1  # new warnings only
    assert (tmp_path / "dashboard.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "dashboard_samples.json").read_text())
    assert saved["step"] == 4 and len(saved["samples"]) == 4 and saved["warnings"][0]["kind"] == "no_signal"


def test_history_from_a_resumed_run_is_kept_and_steps_are_not_duplicated(tmp_path):
    dash = db.TrainingDashboard(tmp_path, mode="headless", history=[{"step": 1, "reward": 0.1},
                                                                    {"step": 2, "reward": 0.2}])
    dash.update({"step": 2, "reward": 0.3})
    assert [r["step"] for r in dash.rows] == [1, 2] and dash.rows[-1]["reward"] == 0.3


def test_notebook_mode_updates_display_handles_in_place(monkeypatch):
    shown, updated = [], []

    class Handle:
        def update(self, obj):
            updated.append(obj)

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None: shown.append(obj) or Handle())
    dash = db.TrainingDashboard(mode="notebook")
    dash.attach(_Trainer())
    dash.update({"step": 1, "reward": 0.1, "memory/rss_gb": 1.0})
    dash.update({"step": 2, "reward": 0.2, "memory/rss_gb": 1.0})
    assert len(shown) == 3 and len(updated) == 3  # status, figure, samples: created once, then updated


def test_without_trl_logs_the_dashboard_says_so_once(capsys):
    dash = db.TrainingDashboard(mode="headless")
    dash.trainer = object()
    assert dash.latest_samples() == [] and dash.latest_samples() == []
    assert capsys.readouterr().out.count("does not expose") == 1


def test_plot_dashboard_with_kl_and_gpu_memory(tmp_path):
    r = rows(reward=[0.1, 0.2], kl=[0.0, 0.01], memory__peak_gb=[3.0, 3.5], reward_std=[0.1, 0.2])
    assert db.plot_dashboard(r, tmp_path / "d.png") is not None
    assert (tmp_path / "d.png").stat().st_size > 1000


def test_installed_trl_keeps_completions_where_the_dashboard_reads_them():
    """Contract with the pinned TRL (installed at the pin): GRPOTrainer fills self._logs with the prompts,
    completions and per-function rewards of the latest batch, unconditionally (not only with log_completions)."""
    from trl import GRPOTrainer

    init_src = inspect.getsource(GRPOTrainer.__init__)
    for key in ('"prompt": deque', '"completion": deque', '"rewards": defaultdict'):
        assert key in init_src, f"GRPOTrainer.__init__ no longer builds self._logs with {key}"
    score_src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    fill = score_src.index('self._logs["completion"].extend')
    assert 'self._logs["rewards"][name].extend' in score_src
    guard = score_src.rfind("if self.log_completions", 0, fill)
    assert guard == -1, "TRL now fills _logs only when log_completions=True: set it in grpo_config_kwargs"
    assert "reward_weights" in inspect.getsource(GRPOTrainer.__init__)


def test_advantage_stats_adds_the_latest_batchs_spread_to_a_sampling_steps_log():
    """AdvantageStats reads TRL's own store of the latest advantages (self._logs["advantages"]) and adds their mean
    |A| and nonzero share to the log of a step that sampled (one with "reward"), before MetricsRecorder writes it."""
    from types import SimpleNamespace

    from helpers.run.metrics import AdvantageStats

    cb = AdvantageStats()
    logs = {"reward": 1.0}
    cb.on_log(None, None, None, logs=logs)
    assert logs == {"reward": 1.0}, "no trainer attached yet: nothing added"
    cb.trainer = SimpleNamespace(_logs={"advantages": deque([1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])})
    cb.on_log(None, None, None, logs=logs)
    assert logs["advantages/abs_mean"] == pytest.approx(3.0 / 8) and logs["advantages/nonzero"] == 0.5
    repeat = {"loss": 0.1}  # the second optimizer step on the same batch (num_iterations=2) logs no reward
    cb.on_log(None, None, None, logs=repeat)
    assert repeat == {"loss": 0.1}


def test_installed_trl_keeps_the_advantages_where_advantage_stats_reads_them():
    from trl import GRPOTrainer

    assert '"advantages": deque' in inspect.getsource(GRPOTrainer.__init__)
    assert 'self._logs["advantages"].extend' in inspect.getsource(GRPOTrainer._generate_and_score_completions)


def test_plot_dashboard_draws_entropy_and_advantages(tmp_path):
    r = rows(reward=[0.1, 0.2], entropy=[1.6, 1.2], advantages__abs_mean=[0.7, 0.6], advantages__nonzero=[1.0, 0.5])
    fig = db.plot_dashboard(r)
    titles = {ax.get_title(): ax for ax in fig.axes}
    assert list(titles["policy entropy (nats per token)"].lines[0].get_ydata()) == [1.6, 1.2]
    assert [list(line.get_ydata()) for line in titles["advantages: the push per completion"].lines] == [[0.7, 0.6],
                                                                                                      [1.0, 0.5]]
