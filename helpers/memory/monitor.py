"""Watch memory while GRPO trains: adds memory/* keys to every log, so they land in metrics.jsonl.

    callbacks=[MemoryMonitor(), MetricsRecorder(run_dir / "metrics.jsonl")]   # the monitor FIRST

Callbacks run in list order on the same `logs` dict, and MetricsRecorder writes `logs` in its own on_log, so the
monitor must come before the recorder. (Trainer's state.log_history is copied before callbacks run and does not
get these keys; metrics.jsonl and the progress bar do.)

GPU: memory/allocated_gb, memory/reserved_gb (PyTorch's caching allocator; vLLM's reservation is included when
it allocates through PyTorch) and memory/peak_gb (max reserved since the start or the last reset). CPU:
memory/rss_gb (this process's resident memory). GB = GiB, as helpers.memory uses.
"""

from __future__ import annotations

import os
import sys

from helpers.runtime import GIB


def process_rss_gb() -> float:
    """This process's resident memory in GiB (psutil, else /proc on Linux): the CPU path's memory figure."""
    return _rss_bytes() / GIB


def _rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process(os.getpid()).memory_info().rss
    except ImportError:  # Linux fallback: resident pages from /proc
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_snapshot(device=None) -> dict[str, float]:
    """The memory/* keys now: torch.cuda figures when CUDA is in use, else the process RSS."""
    torch = sys.modules.get("torch")
    if torch is None:
        import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        dev = torch.cuda.current_device() if device is None else device
        return {
            "memory/allocated_gb": round(torch.cuda.memory_allocated(dev) / GIB, 3),
            "memory/reserved_gb": round(torch.cuda.memory_reserved(dev) / GIB, 3),
            "memory/peak_gb": round(torch.cuda.max_memory_reserved(dev) / GIB, 3),
        }
    return {"memory/rss_gb": round(_rss_bytes() / GIB, 3)}


class _MemoryMonitorLogic:
    """Add memory/* figures to each log (see the module docstring); keeps the largest value seen in `peak_gb`."""

    def __init__(self, device=None):
        self.device = device
        self.peak_gb = 0.0
        self.last: dict[str, float] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        snap = memory_snapshot(self.device)
        self.last = snap
        self.peak_gb = max(self.peak_gb, snap.get("memory/peak_gb", snap.get("memory/rss_gb", 0.0)))
        logs.update(snap)


def __getattr__(name):
    """MemoryMonitor is built on first use: importing this module must not import transformers, because on the
    GPU path Unsloth has to be imported before transformers (python -m helpers.train imports this module early)."""
    if name == "MemoryMonitor":
        from transformers import TrainerCallback

        cls = type("MemoryMonitor", (_MemoryMonitorLogic, TrainerCallback),
                   {"__doc__": _MemoryMonitorLogic.__doc__, "__module__": __name__})
        globals()["MemoryMonitor"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
