import json
from pathlib import Path

import pytest

from helpers import evaluation
from helpers.run import metrics
from helpers.config import get_preset
from helpers.prompts import format_completion

ROWS = [{"question": f"q{i}", "answer": str(i)} for i in range(4)]


def test_score_counts_correct_and_formatted_answers():
    completions = [
        format_completion("r", "0"),          # correct, formatted
        format_completion("r", "5"),          # wrong, formatted
        "<answer>2</answer>",                 # correct, not in the strict format
        "I think 3",                          # no answer tag: wrong
    ]
    result = evaluation.score(completions, ROWS)
    assert result["accuracy"] == 0.5 and result["format_rate"] == 0.5 and result["n"] == 4
    assert [s["correct"] for s in result["samples"]] == [True, False, True, False]
    assert evaluation.summary_of(result) == {"accuracy": 0.5, "format_rate": 0.5, "n": 4}


def test_score_rejects_misaligned_or_empty_input():
    with pytest.raises(ValueError, match="align"):
        evaluation.score(["a"], ROWS)
    with pytest.raises(ValueError, match="no questions"):
        evaluation.score([], [])


def test_samples_file_pairs_before_and_after(tmp_path):
    before = evaluation.score(["x"] * 4, ROWS)
    after = evaluation.score([format_completion("r", str(i)) for i in range(4)], ROWS)
    evaluation.write_samples(tmp_path / "s.jsonl", before, after)
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and not lines[0]["before_correct"] and lines[0]["after_correct"]


class _State:
    def __init__(self, step):
        self.global_step = step


def test_recorder_writes_one_line_per_step_and_plot(tmp_path):
    rec = metrics.MetricsRecorder(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        rec.on_log(None, _State(step), None, logs={
            "reward": 0.1 * step, "rewards/correctness_reward/mean": 0.2 * step,
            "rewards/strict_format_reward/mean": 0.05, "loss": float("nan")})
    rec.on_log(None, _State(3), None, logs={"train_runtime": 5.0})  # closing summary: not a step
    rows = metrics.read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[0]["loss"] is None
    series = metrics.reward_series(rows)
    assert set(series) == {"total", "correctness_reward", "strict_format_reward"}
    assert series["total"][1] == pytest.approx([0.1, 0.2, 0.3])
    png = metrics.plot_rewards(rows, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_rewards_says_why(tmp_path):
    with pytest.raises(ValueError, match="no reward values"):
        metrics.plot_rewards([{"step": 1, "loss": 0.1}], tmp_path / "x.png")


class _PeftLike:
    """A CPU model holding its adapter: disable_adapter() switches it off for the `with` block."""

    def __init__(self):
        self.adapter_on = True

    def disable_adapter(self):
        import contextlib

        @contextlib.contextmanager
        def off():
            self.adapter_on = False
            yield
            self.adapter_on = True
        return off()


class _VllmLike:
    vllm_engine = object()  # what Unsloth sets when it really started vLLM (helpers.model.has_vllm_engine)


def test_before_after_switches_the_adapter_the_way_each_backend_needs(monkeypatch):
    calls = []

    def fake_evaluate(model, tokenizer, rows, settings, lora_path=None):
        calls.append((getattr(model, "adapter_on", None), lora_path))
        return {"accuracy": float(len(calls))}

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    cpu = evaluation.before_after(_PeftLike(), None, ROWS, None, adapter_path="adapter")
    assert calls == [(False, None), (True, None)] and cpu == {"before": {"accuracy": 1.0}, "after": {"accuracy": 2.0}}
    calls.clear()
    evaluation.before_after(_VllmLike(), None, ROWS, None, adapter_path="adapter")
    assert calls == [(None, None), (None, "adapter")]  # vLLM: the base model is the request without the adapter
    calls.clear()
    reused = evaluation.before_after(_PeftLike(), None, ROWS, None, before={"accuracy": 0.5})
    assert calls == [(True, None)] and reused["before"] == {"accuracy": 0.5}  # before.json reused, not re-evaluated


# ------------------------------------------------------------------------------- a run's results, from its files


def _finished_run(run_dir, with_eval: bool):
    """The files helpers.run.pipeline.finish leaves: summary.json, samples.jsonl, and eval.json."""
    before = evaluation.score([format_completion("r", "5"), "no tags 1"], ROWS[:2])
    after = evaluation.score([format_completion("r", "0"), format_completion("r", "1")], ROWS[:2])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({"preset": "t4", "model": get_preset("t4").model_name,
                                                      "steps": 250, "before": evaluation.summary_of(before),
                                                      "after": evaluation.summary_of(after)}))
    evaluation.write_samples(run_dir / "samples.jsonl", before, after)
    if with_eval:
        pass_k = {"before": {"n": 2, "pass@1": 0.25}, "after": {"n": 2, "pass@1": 0.75}}
        evaluation.write_eval(run_dir / "eval.json", evaluation.eval_report(before, after, pass_at_k=pass_k))
    return before, after


@pytest.mark.parametrize("with_eval", [True, False], ids=["eval.json", "samples.jsonl only"])
def test_read_run_gives_back_what_the_run_measured(tmp_path, with_eval):
    before, after = _finished_run(tmp_path / "run", with_eval)
    run = evaluation.read_run(tmp_path / "run")
    assert run["summary"]["steps"] == 250
    for when, original in (("before", before), ("after", after)):
        assert evaluation.summary_of(run[when]) == evaluation.summary_of(original)
        assert [(s["question"], s["completion"], s["predicted"], s["correct"]) for s in run[when]["samples"]] == [
            (s["question"], s["completion"], s["predicted"], s["correct"]) for s in original["samples"]]
    assert (run["pass_at_k"] is not None) == with_eval
    # the side-by-side view of the stored answers is the one of the original evaluation
    assert evaluation.side_by_side_text(run["before"], run["after"]) == evaluation.side_by_side_text(before, after)


def test_read_run_without_a_finished_run_is_none(tmp_path, capsys):
    assert evaluation.read_run(tmp_path / "absent") is None
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.json").write_text("{}")
    assert evaluation.read_run(tmp_path / "unfinished") is None  # training never reached finish()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{not json")
    assert evaluation.read_run(tmp_path / "broken") is None
    assert "not readable JSON" in capsys.readouterr().out


# ------------------------------------------------------------------------------- progress on the wait


def _counting_generate(calls):
    """generate() as helpers.model's: one call for all the prompts, the progress bar advanced step by step."""
    def fake_generate(model, tokenizer, prompts, settings, greedy=True, lora_path=None, progress=None):
        calls.append(len(prompts))
        if progress is not None:
            progress.update(evaluation.decoding_steps(model, len(prompts), settings))
        return [format_completion("r", p[1:]) for p in prompts]  # "p7" -> answer 7: all correct
    return fake_generate


def test_greedy_evaluation_shows_its_progress_in_one_generate_call(monkeypatch, capsys):
    rows = [{"question": f"q{i}", "answer": str(i), "prompt": f"p{i}"} for i in range(100)]
    settings = get_preset("cpu", eval_max_new_tokens=8)
    calls = []
    monkeypatch.setattr(evaluation, "generate", _counting_generate(calls))
    monkeypatch.setattr(evaluation, "SHOW_PROGRESS", True)
    result = evaluation.evaluate(None, None, rows, settings)
    assert calls == [100] and result["accuracy"] == 1.0  # the questions are batched as before: by generate()
    err = capsys.readouterr().err
    assert "[grpo-kit] evaluating 100 questions (greedy)" in err and "16/16" in err  # 2 batches of 64 x 8 steps

    monkeypatch.setattr(evaluation, "SHOW_PROGRESS", False)
    evaluation.evaluate(None, None, rows, settings)
    assert "[grpo-kit]" not in capsys.readouterr().err  # the switch tests use where a bar would flood


# ------------------------------------------------------------------------------- the base model's cached evaluation


class _CpuBase(_PeftLike):
    """A CPU peft model loaded from a folder (name_or_path), as load_cpu gives."""

    def __init__(self, folder):
        import torch

        super().__init__()
        self.device, self.name_or_path = torch.device("cpu"), str(folder)


@pytest.fixture
def base_cache(tmp_path, monkeypatch):
    """A model folder, an empty kit cache, and a stand-in greedy evaluation that counts its calls."""
    from helpers import speedups

    monkeypatch.setenv("GRPO_KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(speedups.ENV, raising=False)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    calls = []

    def fake_evaluate(model, tokenizer, rows, settings, lora_path=None):
        calls.append(model.adapter_on)  # False: the base model, whatever adapter the model holds
        return evaluation.score([format_completion("r", "0")] + ["no"] * (len(rows) - 1), rows)

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    rows = [{**r, "prompt": [{"role": "user", "content": r["question"]}]} for r in ROWS]
    return _CpuBase(folder), rows, calls


def test_the_base_evaluation_is_reused_with_the_same_key_and_says_so(base_cache, capsys):
    model, rows, calls = base_cache
    preset = get_preset("cpu")
    first = evaluation.evaluate_base(model, None, rows, preset)
    again = evaluation.evaluate_base(model, None, rows, preset)
    assert calls == [False] and again == first and first["accuracy"] == 0.25
    out = capsys.readouterr().out
    assert "[grpo-kit] reusing the before-training evaluation from " in out
    assert "(same model, questions and settings)" in out
    # through before_after too (helpers.evaluate, notebook 06): only the adapter's evaluation runs
    assert evaluation.before_after(model, None, rows, preset)["before"] == first and calls == [False, True]


def test_any_change_of_the_key_evaluates_again(base_cache, monkeypatch):
    import torch

    model, rows, calls = base_cache
    preset = get_preset("cpu")
    evaluation.evaluate_base(model, None, rows, preset)
    evaluation.evaluate_base(model, None, rows, get_preset("cpu", eval_max_new_tokens=32))  # a setting
    edited = [dict(rows[0], prompt=[{"role": "user", "content": "q0, reworded"}])] + rows[1:]
    evaluation.evaluate_base(model, None, edited, preset)  # a question's text
    (Path(model.name_or_path) / "model.safetensors").write_bytes(b"other weights")
    evaluation.evaluate_base(model, None, rows, preset)  # the model's files
    monkeypatch.setattr(torch, "__version__", "0.0-other")
    evaluation.evaluate_base(model, None, rows, preset)  # a library version
    assert len(calls) == 5
    evaluation.evaluate_base(model, None, rows, preset)  # and each new key is then reused
    assert len(calls) == 5


def test_a_corrupt_cached_evaluation_is_computed_again_and_replaced(base_cache, capsys):
    model, rows, calls = base_cache
    preset = get_preset("cpu")
    evaluation.evaluate_base(model, None, rows, preset)
    (cached,) = (Path(evaluation.cache_dir()) / "before-evaluations").glob("*.json")
    cached.write_text('{"key": ')
    evaluation.evaluate_base(model, None, rows, preset)
    assert len(calls) == 2 and "is not a usable cached evaluation: evaluating the base model again" in \
        capsys.readouterr().out
    evaluation.evaluate_base(model, None, rows, preset)
    assert len(calls) == 2  # rewritten whole


def test_the_cache_is_off_with_its_switch_and_off_the_cpu(base_cache, monkeypatch):
    import torch

    from helpers import speedups

    model, rows, calls = base_cache
    monkeypatch.setenv(speedups.ENV, "before_eval_cache")
    for _ in range(2):
        evaluation.evaluate_base(model, None, rows, get_preset("cpu"))
    monkeypatch.delenv(speedups.ENV)
    model.device = torch.device("meta")  # not a CPU model (a GPU one without vLLM, say): never cached
    for _ in range(2):
        evaluation.evaluate_base(model, None, rows, get_preset("cpu"))
    assert len(calls) == 4 and not (Path(evaluation.cache_dir()) / "before-evaluations").exists()
