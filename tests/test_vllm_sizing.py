"""Sizing vLLM (issue 44, items 2-3): the kit's arithmetic (helpers.memory.estimate.kv_cache_gb, vllm_utilization_for,
vllm_sizing) against the 2026-11-27 vLLM record, the t4 preset's reservation as that computation's answer, and lesson
05's sizing exercise refusing each usual mistake with its misconception. Fast: arithmetic and one JSON file."""

from __future__ import annotations

import math

import pytest

from helpers.config import get_preset
from helpers.memory import estimate, resolve_model
from helpers.memory.estimate import (
    VLLM_SIZING_MARGIN,
    VLLM_WORKSPACE_GB,
    kv_cache_gb,
    sized_utilization,
    vllm_sizing,
    vllm_utilization_for,
)
from helpers.memory.measured import vllm_record

T4 = get_preset("t4")
ARCH = resolve_model(T4.model_name)


def test_the_kv_cache_formula_gives_what_vllm_logged_for_the_records_tokens():
    """vLLM logged 2.74 GiB of KV cache for 102,608 tokens of the t4 model: 2 (K and V) x layers x KV heads x head
    size x 2 bytes (fp16) per token gives the same, to the log's two decimals."""
    rec = vllm_record()
    assert round(kv_cache_gb(ARCH, 1, rec.kv_cache_tokens), 2) == rec.kv_cache_gb
    assert kv_cache_gb(ARCH, 1, rec.kv_cache_tokens, dtype_bytes=4) == pytest.approx(2 * kv_cache_gb(ARCH, 1, rec.kv_cache_tokens))


def test_the_utilization_rule_gives_back_what_the_record_asked():
    """The record's weights + KV cache + the workspace (measured from the same record, so this checks the base, not the
    workspace), with no margin, as a fraction of the memory free at load, is the 0.3 it ran with; a fraction of the
    whole card would not be."""
    rec = vllm_record()
    util = vllm_utilization_for(rec.weights_gb, rec.kv_cache_gb, rec.free_gb, margin=0.0)
    assert util == pytest.approx(rec.utilization, abs=0.005)
    assert util * rec.free_gb == pytest.approx(rec.asked_gb, abs=0.05)
    assert vllm_utilization_for(rec.weights_gb, rec.kv_cache_gb, rec.total_gb, margin=0.0) < rec.utilization - 0.01


def test_the_t4_presets_reservation_is_the_sizing_rounded_up():
    """helpers/config.py writes the t4 preset's gpu_memory_utilization as a number; it must be the sizing's answer
    (weights + the KV cache of the completions sampled at once + workspace, + the stated margin, over the memory
    free at load), rounded up to the hundredth."""
    kv, util = vllm_sizing(T4)
    sequences, tokens = T4.per_device_train_batch_size * T4.gradient_accumulation_steps, T4.max_prompt_length + T4.max_completion_length
    assert kv == pytest.approx(kv_cache_gb(ARCH, sequences, tokens))
    assert T4.gpu_memory_utilization == sized_utilization(T4) == math.ceil(util * 100) / 100
    assert 0 <= T4.gpu_memory_utilization - util < 0.01


def test_the_margin_and_the_run_move_the_sizing():
    """More margin, more sequences or longer ones need more; the margin is a fraction of what vLLM needs."""
    base = vllm_sizing(T4, margin=0.0)[1]
    assert vllm_sizing(T4)[1] == pytest.approx(base * (1 + VLLM_SIZING_MARGIN))
    assert vllm_sizing(T4.with_overrides(per_device_train_batch_size=12))[1] > vllm_sizing(T4)[1]
    assert vllm_sizing(T4.with_overrides(max_completion_length=1024))[0] == pytest.approx(4 * vllm_sizing(T4)[0] * 1280 / 2048)


def test_the_t4_preset_is_predicted_within_4_gb_and_vllm_holds_its_sampled_sequences():
    """`python -m helpers.memory --preset t4` at the sized reservation: a peak of at most 4 GB (issue 44), and vLLM's
    KV cache in the model holds the completions sampled at once (the margin's part), well above one sequence."""
    est = estimate("t4", gpu="t4")
    assert est.peak_gb <= 4.0, est.table()
    assert est.vllm_starts and est.kv_cache >= vllm_sizing(T4)[0], est.table()
    assert est.kv_cache == pytest.approx(est.vllm_reservation - est.weights - VLLM_WORKSPACE_GB)


# ------------------------------------------------------------------ lesson 05's exercise: each mistake as a student writes it


def _student(kv_per_token, base=lambda card: card.free_gb, weights=True, workspace=True, margin=True):
    """A student's vllm_sizing with one part written their way (the rest right)."""
    def vllm_sizing(arch, sequences, tokens, weights_gb, card, m):
        kv_gb = sequences * tokens * kv_per_token(arch) / 2**30
        need = (weights_gb if weights else 0) + kv_gb + (VLLM_WORKSPACE_GB if workspace else 0)
        return kv_gb, need * ((1 + m) if margin else 1) / base(card)
    return vllm_sizing


RIGHT_PER_TOKEN = lambda a: 2 * a.num_layers * a.num_kv_heads * a.head_dim * 2  # noqa: E731

MISTAKES = [  # (what the student wrote, words the refusal must say: the misconception)
    (_student(lambda a: a.num_layers * a.num_kv_heads * a.head_dim * 2), ["K and V once", "2 x layers x KV heads"]),
    (_student(lambda a: 2 * a.num_layers * a.hidden_size * 2), ["hidden size (1536) instead of KV heads x head size",
                                                                "2 x 128 = 256", "grouped-query attention"]),
    (_student(lambda a: 2 * a.num_layers * a.num_kv_heads * a.head_dim * 4), ["4 bytes per value (fp32)", "fp16"]),
    (_student(lambda a: 2 * a.num_layers * a.num_kv_heads * a.head_dim * 0.5), ["half a byte", "4-bit weights",
                                                                                 "the cache is not"]),
    (_student(RIGHT_PER_TOKEN, weights=False), ["forgot the weights (1.11 GB)", "inside its reservation"]),
    (_student(RIGHT_PER_TOKEN, base=lambda card: card.total_gb), ["fraction of the whole card (14.56 GB)",
                                                                  "memory free at load (13.85 GB here"]),
    (_student(RIGHT_PER_TOKEN, workspace=False), ["left out vLLM's workspace"]),
    (_student(RIGHT_PER_TOKEN, margin=False), ["t4 preset", "left out the margin"]),
]


@pytest.mark.parametrize("answer,words", MISTAKES, ids=[", ".join(w[:1]) for _, w in MISTAKES])
def test_each_usual_mistake_is_refused_with_its_misconception(answer, words):
    from helpers.teaching.exercises import nb05 as ex

    result = ex.vllm_sizing.check(answer)
    assert not result.passed and result.case, result.message
    for word in words:
        assert word in result.message, f"{word!r} not in: {result.message}"


def test_the_right_sizing_passes_and_the_report_sets_it_beside_the_record():
    from helpers.teaching.exercises import nb05 as ex

    right = _student(RIGHT_PER_TOKEN)
    assert ex.vllm_sizing.check(right).passed
    assert ex.q1 is ex.vllm_sizing  # the lesson's first exercise, checked as ex.q1
    rec = vllm_record()
    text = ex.vllm_sizing.report(right, 0.25)
    assert f"{rec.kv_cache_tokens:,} tokens" in text and f"vLLM logged {rec.kv_cache_gb:.2f} GiB" in text
    assert f"predicted {rec.kv_cache_gb:.2f} GB" in text and "predicted 0.300" in text
    assert f"the preset reserves {T4.gpu_memory_utilization:g}" in text
    assert "until yours passes" in ex.vllm_sizing.report(None)
