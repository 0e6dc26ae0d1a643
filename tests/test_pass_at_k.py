"""pass@k math on hand-computed cases and properties, sampled evaluation with fake completions, side-by-side view,
before.json reuse and eval.json."""

import json
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import evaluation
from helpers.prompts import format_completion
from helpers.config import get_preset

ROWS = [{"question": f"q{i}", "answer": str(i), "prompt": f"p{i}"} for i in range(3)]


@pytest.mark.parametrize("n, c, k, expected", [
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
    (2, 1, 1, 0.5),
    (2, 1, 2, 1.0),
    (4, 1, 2, 0.5),          # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 3, 0.9),          # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (10, 3, 1, 0.3),         # pass@1 is the fraction correct
    (10, 3, 5, 1 - comb(7, 5) / comb(10, 5)),  # = 1 - 21/252
    (8, 0, 8, 0.0),
    (8, 8, 1, 1.0),
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert evaluation.pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_impossible_inputs():
    with pytest.raises(ValueError, match="k must be between 1"):
        evaluation.pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="k must be between 1"):
        evaluation.pass_at_k(4, 1, 0)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        evaluation.pass_at_k(4, 5, 1)
    with pytest.raises(TypeError):
        evaluation.pass_at_k(4, 1.5, 1)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
@settings(max_examples=200, deadline=None)
def test_pass_at_k_is_monotone_in_k(nc):
    n, c = nc
    values = [evaluation.pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert values[0] == pytest.approx(c / n)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
@settings(max_examples=200, deadline=None)
def test_pass_at_k_is_monotone_in_correct_samples_and_matches_combinatorics(nk):
    n, k = nk
    values = [evaluation.pass_at_k(n, c, k) for c in range(n + 1)]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    for c, v in enumerate(values):
        assert v == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-9)


def test_summary_and_default_ks():
    assert evaluation.default_ks(4) == [1, 2, 4] and evaluation.default_ks(6) == [1, 2, 4, 6]
    assert evaluation.default_ks(1) == [1]
    s = evaluation.pass_at_k_summary([0, 2, 4], n=4)
    assert s["pass@1"] == pytest.approx(0.5) and s["pass@4"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        evaluation.pass_at_k_summary([], n=4)


@pytest.mark.parametrize("one_call", [True, False])
def test_sampled_evaluation_with_fake_completions(monkeypatch, one_call):
    """Counts per question feed pass@k. Speed-up pass_at_k_one_call: each prompt n times in one generate() call,
    the samples handed back to their own question; off (and on vLLM): one round per sample, each with its own seed."""
    from helpers import speedups

    seeds, calls = [], []
    answers = {0: ["0", "0", "x", "x"], 1: ["x", "x", "x", "x"], 2: ["2", "2", "2", "2"]}
    drawn = {i: 0 for i in answers}

    def fake_generate(model, tokenizer, prompts, settings, greedy=True, lora_path=None, batch_size=64, progress=None):
        assert greedy is False
        seeds.append(settings.seed)
        calls.append(list(prompts))
        out = []
        for prompt in prompts:  # the next unused sample of this prompt's question
            i = int(prompt[1:])
            out.append(format_completion("r", answers[i][drawn[i]]))
            drawn[i] += 1
        return out

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    speedups.configure(None if one_call else "pass_at_k_one_call")
    try:
        result = evaluation.evaluate_pass_at_k(None, None, ROWS, get_preset("cpu"), n=4, ks=[1, 2, 4])
    finally:
        speedups.configure(None)
    if one_call:
        assert calls == [[p for p in ("p0", "p1", "p2") for _ in range(4)]]
    else:
        assert len(calls) == 4 and len(set(seeds)) == 4  # different samples, not one repeated
    assert result["correct_counts"] == [2, 0, 4]
    assert result["pass@1"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert result["pass@2"] == pytest.approx((1 - comb(2, 2) / comb(4, 2) + 0 + 1) / 3)
    assert result["pass@4"] == pytest.approx(2 / 3)


def test_side_by_side_views_and_eval_report(tmp_path):
    before = evaluation.score(["no idea", format_completion("r", "5"), "x"], ROWS)
    after = evaluation.score([format_completion("r", "0"), format_completion("r", "1"), "x"], ROWS)
    pairs = evaluation.side_by_side(before, after)
    assert [(p["before_correct"], p["after_correct"]) for p in pairs] == [(False, True), (False, True), (False, False)]
    text = evaluation.side_by_side_text(before, after, limit=2)
    assert "before" in text and "Q: q0" in text and "Q: q2" not in text and "[right, answer 0]" in text
    html = evaluation.side_by_side_html(before, after)
    assert "<table>" in html and "after training" in html and "0.00 &rarr; 0.67" in html
    swapped = evaluation.score(["a", "b", "c"], list(reversed(ROWS)))
    with pytest.raises(ValueError, match="different questions"):
        evaluation.side_by_side(before, swapped)
    report = evaluation.eval_report(before, after, get_preset("cpu"), pass_at_k={"after": {"pass@1": 0.5}})
    path = evaluation.write_eval(tmp_path / "eval.json", report)
    saved = json.loads(path.read_text())
    assert saved["greedy"]["after"]["accuracy"] == pytest.approx(2 / 3) and saved["before"]["n"] == 3
    assert saved["pass_at_k"]["after"]["pass@1"] == 0.5 and len(saved["samples"]) == 3


def test_show_side_by_side_prints_text_outside_a_notebook(capsys):
    before = evaluation.score(["x"] * 3, ROWS)
    evaluation.show_side_by_side(before, before, limit=1)
    assert "Q: q0" in capsys.readouterr().out


def test_before_json_is_reused_only_with_the_same_evaluation_settings(tmp_path, capsys):
    preset = get_preset("cpu", eval_size=3)
    before = evaluation.score(["x"] * 3, ROWS)
    evaluation.save_before(tmp_path / "before.json", before, preset)
    assert evaluation.load_before(tmp_path / "before.json", preset) == json.loads(json.dumps(before))
    assert evaluation.load_before(tmp_path / "before.json", get_preset("cpu", eval_size=4)) is None
    assert "other evaluation settings" in capsys.readouterr().out
    assert evaluation.load_before(tmp_path / "missing.json", preset) is None
    (tmp_path / "bad.json").write_text("{")
    assert evaluation.load_before([tmp_path / "bad.json", tmp_path / "before.json"], preset) is not None


@pytest.mark.parametrize("questions, n, batch", [(50, 4, 100), (64, 2, 128), (65, 2, 65), (3, 4, 12)])
def test_pass_at_k_in_one_call_batches_evenly_under_the_cap(monkeypatch, questions, n, batch):
    """200 sampled rows go in two batches of 100, not 128 + 72: as few generate batches as the cap allows."""
    rows = [{"question": f"q{i}", "answer": str(i), "prompt": f"p{i}"} for i in range(questions)]
    seen = []

    def fake_generate(model, tokenizer, prompts, settings, greedy=True, lora_path=None, batch_size=64,
                      progress=None):
        seen.append((len(prompts), batch_size))
        return ["x"] * len(prompts)

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "SHOW_PROGRESS", False)
    evaluation.sample_answers(None, None, rows, get_preset("cpu"), n)
    assert seen == [(questions * n, batch)] and batch <= evaluation.PASS_AT_K_BATCH


def test_pass_at_k_sampling_shows_its_progress(monkeypatch, capsys):
    rows = [{"question": f"q{i}", "answer": str(i), "prompt": f"p{i}"} for i in range(20)]
    calls = []

    def fake_generate(model, tokenizer, prompts, settings, greedy=True, lora_path=None, batch_size=64,
                      progress=None):
        calls.append(len(prompts))
        progress.update(evaluation.decoding_steps(model, len(prompts), settings, batch_size))
        return [format_completion("r", p[1:]) for p in prompts]

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "SHOW_PROGRESS", True)
    result = evaluation.evaluate_pass_at_k(None, None, rows, get_preset("cpu"), n=2, ks=[1, 2])
    assert calls == [40] and result["correct_counts"] == [2] * 20  # both samples of every question in one call
    err = capsys.readouterr().err
    assert "[grpo-kit] sampling 2 answers to each of 20 questions for pass@k" in err and "64/64" in err
