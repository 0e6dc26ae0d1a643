import json

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
    (run_dir / "summary.json").write_text(json.dumps({"preset": "t4", "model": "unsloth/Qwen2.5-1.5B-Instruct",
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
