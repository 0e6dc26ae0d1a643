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
