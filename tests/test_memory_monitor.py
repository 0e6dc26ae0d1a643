"""MemoryMonitor adds memory figures to each log so MetricsRecorder writes them into metrics.jsonl."""

from __future__ import annotations

import json
from types import SimpleNamespace

from helpers.memory.monitor import MemoryMonitor


def test_on_cpu_adds_rss_to_logs():
    logs = {"loss": 0.1}
    MemoryMonitor().on_log(None, SimpleNamespace(global_step=1), None, logs=logs)
    assert logs["memory/rss_gb"] > 0
    assert logs["loss"] == 0.1


def test_keys_reach_metrics_jsonl_when_monitor_comes_first(tmp_path):
    from helpers.run.metrics import MetricsRecorder, read_metrics

    path = tmp_path / "metrics.jsonl"
    callbacks = [MemoryMonitor(), MetricsRecorder(path)]
    logs = {"reward": 1.0}
    for cb in callbacks:
        cb.on_log(None, SimpleNamespace(global_step=3), None, logs=logs)
    row = read_metrics(path)[0]
    assert row["step"] == 3 and row["memory/rss_gb"] > 0
    json.dumps(row)


def test_none_logs_is_ignored():
    MemoryMonitor().on_log(None, SimpleNamespace(global_step=1), None, logs=None)
