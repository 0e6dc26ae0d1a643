"""The OOM doctor: fixes that make a config fit per the memory model, their order, and OOM recognition."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers.memory import MemorySettings, estimate
from helpers.memory.oom_doctor import COST_RANK, cheapest_fixes, explain_oom, is_oom_error, oom_advice
from helpers.config import get_preset, validate

TOO_BIG = dict(gpu_memory_utilization=0.9, num_generations=8, per_device_train_batch_size=8,
               max_completion_length=1024, max_seq_length=1536, optim="adamw_torch", gradient_checkpointing=False)


def apply_fixes(preset, fixes):
    """The preset (or MemorySettings) with every fix and its companion changes applied, as the advice tells a user."""
    changes = {}
    for f in fixes:
        changes[f.setting] = f.suggested
        changes.update({k: v[1] for k, v in f.also.items()})
    return replace(preset, **changes) if isinstance(preset, MemorySettings) else preset.with_overrides(**changes)


def test_fixes_make_a_non_fitting_preset_fit():
    p = get_preset("t4", **TOO_BIG)
    assert not estimate(p, budget_gb=7.0).fits
    fixes = cheapest_fixes(p, 7.0)
    assert fixes
    fixed = apply_fixes(p, fixes)
    validate(fixed)  # still a valid preset (batch divisible by generations, ...)
    assert estimate(fixed, budget_gb=7.0).fits
    assert fixes[-1].peak_after_gb <= 7.0
    assert all(f.saving_gb > 0 for f in fixes)


def test_fixes_are_ordered_by_cost_and_predictions_chain():
    fixes = cheapest_fixes(get_preset("t4", **TOO_BIG), 5.0)
    ranks = [COST_RANK[f.setting] for f in fixes]
    assert ranks == sorted(ranks)
    assert fixes[0].setting == "optim" and fixes[0].suggested == "adamw_8bit"
    peaks = [f.peak_after_gb for f in fixes]
    assert peaks == sorted(peaks, reverse=True)


def test_fitting_config_needs_no_fix():
    assert cheapest_fixes(get_preset("t4"), 7.0) == []


def test_fewer_generations_keeps_batch_divisible():
    s = MemorySettings(model="qwen3-4b", load_dtype="16bit", engine="hf", gpu_memory_utilization=None, num_generations=8,
                       per_device_train_batch_size=16, max_completion_length=2048, optim="adamw_8bit")
    fixes = cheapest_fixes(s, 12.0, gpu="l4")
    fixed = apply_fixes(s, fixes)
    assert (fixed.per_device_train_batch_size * fixed.gradient_accumulation_steps) % fixed.num_generations == 0
    assert estimate(fixed, gpu="l4", budget_gb=12.0).fits


@pytest.mark.parametrize("exc", [
    RuntimeError("CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 14.56 GiB total capacity)"),
    ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
    RuntimeError("Engine core initialization failed: insufficient memory for KV cache"),
])
def test_is_oom_error_recognises_messages(exc):
    assert is_oom_error(exc)


def test_is_oom_error_recognises_torch_type_and_chains():
    import torch

    assert is_oom_error(torch.OutOfMemoryError("boom"))
    try:
        try:
            raise torch.OutOfMemoryError("inner")
        except Exception as inner:
            raise RuntimeError("trainer step failed") from inner
    except RuntimeError as outer:
        assert is_oom_error(outer)


@pytest.mark.parametrize("exc", [ValueError("bad value"), RuntimeError("shape mismatch"), KeyError("x")])
def test_is_oom_error_rejects_others(exc):
    assert not is_oom_error(exc)


def test_explain_oom_starts_with_the_original_error_and_lists_fixes():
    exc = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
    text = explain_oom(exc, get_preset("t4", **TOO_BIG), "t4")
    assert text.splitlines()[0] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "1. optim: adamw_torch -> adamw_8bit" in text
    assert "gradient_checkpointing" in text


def test_oom_advice_prints_and_reraises(capsys):
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        with oom_advice(get_preset("t4", **TOO_BIG), "t4"):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert "Cheapest changes first" in capsys.readouterr().err
    with pytest.raises(KeyError):
        with oom_advice(get_preset("t4"), "t4"):
            raise KeyError("not an oom")
    assert capsys.readouterr().err == ""
