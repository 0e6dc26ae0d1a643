"""The GPU runs the lab recorded (results/gpu/*.json, written by `python lab/benchmark_memory.py kit`), read beside
what the memory model predicts for the same settings now: lesson 07's predicted-against-measured plot, docs/memory.md's
table (lab/benchmark_memory.py table) and its tests read them here. The course reads the records; it never runs the lab.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from helpers.config import get_preset
from helpers.memory.estimate import CUDA_CONTEXT_GB, estimate, settings_from_preset


def prediction_now(record: dict):
    """helpers.memory's estimate, with the model as it is now, for the settings a record measured."""
    preset = get_preset(record["preset"], **record.get("overrides", {}))
    preset = preset.with_overrides(fast_inference=record["fast_inference"])
    em = record.get("emulation")
    gpu = em["total_gib"] if em else record["gpu_total_gib"]
    settings = replace(settings_from_preset(preset), standby=record.get("standby", False))
    return estimate(settings, gpu=gpu, budget_gb=None)


def comparison_rows(record: dict) -> list[dict]:
    """Predicted (the model as it is now) vs measured, for one record.

    Phases (load, generation, training) compare what tensors need: the model's parts without the CUDA context and
    allocator slack vs PyTorch's peak allocated. The peak compares the model's peak without the CUDA context vs
    PyTorch's peak reserved (allocator slack included). The CUDA context is the device's used memory minus
    PyTorch's reserved, and a big card's context is not a T4's, so it is reported, not compared.
    """
    est = prediction_now(record)
    meas = record.get("measured", {})
    rows = []

    def add(what, predicted_gib, measured_gib):
        rows.append({"what": what, "predicted_gib": round(predicted_gib, 3), "measured_gib": measured_gib,
                     "error": round((predicted_gib - measured_gib) / measured_gib, 3) if measured_gib else None})

    if "load" in meas and record.get("fast_inference"):  # vLLM's engine starts inside the load
        add("load: weights + LoRA + vLLM engine",
            est.weights + est.lora_params + est.phases["generation"]["vllm_reservation"],
            meas["load"]["allocated_peak_gib"])
    elif "load" in meas:
        add("load: weights + LoRA", est.weights + est.lora_params, meas["load"]["allocated_peak_gib"])
    engine_log = (record.get("vllm_engine") or {}).get("log") or {}
    if engine_log.get("kv_cache_gib"):
        add("vLLM KV cache", est.kv_cache, engine_log["kv_cache_gib"])
    for phase in ("generation", "training"):
        if phase in meas:
            parts = est.phases[phase]
            add(f"{phase} (allocated)", sum(v for k, v in parts.items() if k != "cuda_context_and_allocator"),
                meas[phase]["allocated_peak_gib"])
    if record.get("measured_peak"):
        add("peak (reserved)", est.peak_gb - CUDA_CONTEXT_GB, record["measured_peak"]["reserved_peak_gib"])
    return rows


def describe(record: dict) -> str:
    em = record.get("emulation")
    gpu = record["gpu"] + (f" as {em['gpu']} ({em['dtype']}, {em['total_gib']} GiB)" if em else "")
    what = record["preset"] + "".join(f", {k}={v}" for k, v in record.get("overrides", {}).items())
    what += ", vLLM" if record.get("fast_inference") else ", no vLLM"
    what += ", standby" if record.get("standby") else ""
    what += ", random weights" if record.get("random_weights") else ""
    return f"{gpu}: {what}"


def load_records(paths) -> list[dict]:
    out = []
    for p in paths:
        data = json.loads(Path(p).read_text())
        out += data if isinstance(data, list) else [data]
    return out
