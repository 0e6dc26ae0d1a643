"""The GPU runs the lab recorded (results/gpu/*.json, written by `python lab/benchmark_memory.py kit`), read beside
what the memory model predicts for the same settings now: lesson 07's predicted-against-measured plot, docs/memory.md's
table (lab/benchmark_memory.py table) and its tests read them here. The course reads the records; it never runs the lab.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from helpers.config import get_preset
from helpers.memory.estimate import CUDA_CONTEXT_GB, estimate, settings_from_preset

# The first run of the shared vLLM path (t4 preset, H100 emulating a T4): lesson 05's sizing exercise and
# docs/memory.md compare with what vLLM logged there.
VLLM_RECORD = Path(__file__).resolve().parents[2] / "results" / "gpu" / "2026-11-27-h100-as-t4-vllm.json"


@dataclass(frozen=True)
class VllmRecord:
    """What a vLLM record says about sizing (GiB): the card and its memory free at load, the utilization the run
    asked, what Unsloth asked vLLM for, and vLLM's own accounting (weights, KV cache in GiB and tokens)."""

    date: str
    total_gb: float
    free_gb: float
    utilization: float
    asked_gb: float
    weights_gb: float
    kv_cache_gb: float
    kv_cache_tokens: int
    max_model_len: int
    max_num_seqs: int


def vllm_record(path=VLLM_RECORD) -> VllmRecord:
    """The sizing facts of a vLLM record (read from the file, never typed): the memory free at load is the kit's own
    log line ('13.85 of 14.56 GiB free')."""
    (rec,) = load_records([path])
    free = next(float(m.group(1)) for line in rec["log_lines"] if (m := re.search(r"([\d.]+) of [\d.]+ GiB free", line)))
    em, engine = rec["emulation"], rec["vllm_engine"]
    return VllmRecord(date=rec["date"][:10], total_gb=em["total_gib"], free_gb=free,
                      utilization=rec["predicted"]["settings"]["gpu_memory_utilization"],
                      asked_gb=em["gpu_memory_utilization_from_unsloth"] * em["total_gib"],
                      weights_gb=engine["log"]["weights_gib"], kv_cache_gb=engine["log"]["kv_cache_gib"],
                      kv_cache_tokens=engine["log"]["kv_cache_tokens"],
                      max_model_len=engine["settings"]["max_model_len"],
                      max_num_seqs=engine["settings"]["max_num_seqs"])


def prediction_now(record: dict):
    """helpers.memory's estimate, with the model as it is now, for the settings a record measured: its preset and
    overrides, and the vLLM reservation it ran with (the t4 preset's has been sized since: 0.3 -> lesson 05's)."""
    preset = get_preset(record["preset"], **record.get("overrides", {}))
    preset = preset.with_overrides(fast_inference=record["fast_inference"])
    ran = (record.get("predicted") or {}).get("settings") or {}
    if record["fast_inference"] and ran.get("gpu_memory_utilization") is not None:
        preset = preset.with_overrides(gpu_memory_utilization=ran["gpu_memory_utilization"])
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
