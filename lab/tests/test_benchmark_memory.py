"""lab/benchmark_memory.py and the GPU results it recorded (results/gpu/*.json).

The measuring itself needs a CUDA GPU; what is checked here on CPU: the recorded results hold what an instructor
needs to trust them, the memory model stays within 15% of every calibrated measurement, the generated tables in
lab/docs/gpu-memory.md matches the records, and the emulation arithmetic and prompt padding are right.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lab import benchmark_memory as bm

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "results" / "gpu").glob("*.json"))

# (preset, row) pairs measured but outside the model's calibrated range, each explained in lab/docs/gpu-memory.md.
UNCALIBRATED = {("cpu", "peak (reserved)")}


def _records():
    return bm.load_records(RESULTS)


def test_results_exist_and_say_where_when_how_and_with_what():
    records = _records()
    assert len(records) >= 5, "results/gpu/ should hold the measured runs"
    for r in records:
        assert r["status"] == "ok"
        assert r["gpu"] and r["date"] and r["command"].startswith(("python lab/benchmark_memory.py kit",  # before the lab: scripts/
                                                                    "python scripts/benchmark_memory.py kit"))
        for lib in ("torch", "transformers", "trl", "peft"):
            assert r["versions"][lib], f"{lib} version missing"
        for phase in ("load", "generation", "training"):
            m = r["measured"][phase]
            assert 0 < m["allocated_peak_gib"] <= m["reserved_peak_gib"] <= m["device_used_peak_gib"]
        assert r["predicted"]["peak_gib"] > 0
        if r["preset"] == "t4":
            assert r["versions"]["unsloth"] and r["versions"]["bitsandbytes"]
            em = r["emulation"]
            assert em["total_gib"] == 14.56 and em["dtype"] == "fp16"
            assert em["memory_fraction"] == pytest.approx(14.56 / r["gpu_total_gib"], rel=1e-3)


def test_memory_model_is_within_15_percent_of_every_calibrated_measurement():
    checked = 0
    for r in _records():
        for row in bm.comparison_rows(r):
            if (r["preset"], row["what"]) in UNCALIBRATED:
                continue
            assert abs(row["error"]) <= 0.15, f"{bm.describe(r)}: {row}"
            checked += 1
    assert checked >= 25


def test_uncalibrated_points_are_still_outside_15_percent():
    for preset, what in UNCALIBRATED:
        rows = [row for r in _records() if r["preset"] == preset for row in bm.comparison_rows(r) if row["what"] == what]
        assert rows, f"no measured {what} for {preset}"
        assert all(abs(row["error"]) > 0.15 for row in rows), "now calibrated: drop it from UNCALIBRATED"


@pytest.mark.parametrize("doc", ["lab/docs/gpu-memory.md"])
def test_generated_tables_match_the_records(doc):
    text = (ROOT / doc).read_text()
    inside = text.split(bm.TABLE_BEGIN, 1)[1].split(bm.TABLE_END, 1)[0].strip()
    assert inside == bm.format_table(_records()), (
        f"{doc} is stale: run `python lab/benchmark_memory.py table`")


def test_write_table_replaces_only_between_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{bm.TABLE_BEGIN}\nold\n{bm.TABLE_END}\nafter\n")
    bm.write_table(RESULTS, [doc])
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "| run (GPU, preset, settings) |" in text
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("nothing here")
    with pytest.raises(SystemExit, match="markers"):
        bm.write_table(RESULTS, [no_markers])


def test_prompts_are_padded_to_the_worst_case_length():
    from transformers import AutoTokenizer

    from helpers import data
    from helpers.model import prepare_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    rows = data.synthetic_problems(4, "train", worked_example=False)
    padded = bm.pad_prompts(rows, tokenizer, 200)
    lengths = [data.prompt_token_length(tokenizer, r["prompt"]) for r in padded]
    assert all(190 <= n <= 200 for n in lengths), lengths
    assert [r["answer"] for r in padded] == [r["answer"] for r in rows]
    assert padded[0]["prompt"][-1]["content"].startswith(rows[0]["prompt"][-1]["content"])


def test_kit_mode_without_a_gpu_still_writes_a_record_that_names_the_refusal(tmp_path):
    """The lease's exact command on this CPU machine: refused before loading, and the --json list still gets the
    record (appended), with the refusal, the VLLM_*/UNSLOTH_* variables and the emulation's vLLM rules."""
    out = tmp_path / "f.json"
    out.write_text('[{"earlier": "record"}]')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "UNSLOTH_"))}
    done = subprocess.run([sys.executable, "lab/benchmark_memory.py", "kit", "--preset", "t4", "--emulate-gpu", "t4",
                           "--random-weights", "--steps", "3", "--json", str(out)],
                          cwd=ROOT, env={**env, "UNSLOTH_VLLM_STANDBY": "0", "VLLM_USE_V2_MODEL_RUNNER": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    earlier, record = json.loads(out.read_text())
    assert earlier == {"earlier": "record"}
    assert record["status"].startswith("refused in setup (before loading): SystemExit: benchmark_memory.py kit needs a "
                                       "CUDA GPU"), record["status"]
    assert record["preset"] == "t4" and record["versions"]["torch"] and record["gpu"] is None
    assert record["environment"] == {"UNSLOTH_VLLM_STANDBY": "0", "VLLM_USE_V2_MODEL_RUNNER": "1",
                                     "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    assert record["colab_vllm_rules"] == {
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": {"value": "0", "set_by": "emulation"},
        "VLLM_USE_V2_MODEL_RUNNER": {"value": "1", "set_by": "user"}}, "the user's own setting is kept and said so"
    assert any("needs a CUDA GPU" in line for line in record["log_lines"])
    assert "[grpo-kit] refused in setup" in done.stdout  # the kit's logger (helpers.messages)


def test_the_trl_method_split_into_phases_exists_in_the_pinned_trl():
    from trl import GRPOTrainer

    from lab.step_timing import GENERATE_AND_SCORE_METHOD

    assert callable(getattr(GRPOTrainer, GENERATE_AND_SCORE_METHOD, None))


def test_table_subcommand_prints(capsys):
    assert bm.main(["table", "--print", *map(str, RESULTS)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") >= len(_records()) + 2 and "as Tesla T4" in out


# --------------------------------------------------------------------------------------------- vLLM's accounting


def _log(message, *args, name="vllm.v1.worker.gpu_worker"):
    import logging

    return logging.LogRecord(name, logging.INFO, __file__, 1, message, args, None)


def test_engine_log_keeps_the_accounting_lines_and_reads_their_numbers():
    log = bm.EngineLog()
    for record in (_log("Using %s attention backend out of potential backends: %s.", "TRITON_ATTN", "['TRITON_ATTN']"),
                   _log("Using %s backend for MXFP8 GEMM", "CUTLASS"),
                   _log("Model loading took %s GiB memory and %.6f seconds", "1.12", 3.5),
                   _log("Available KV cache memory: %s GiB", "2.34"),
                   _log("GPU KV cache size: %s tokens", "87,040"),
                   _log("Maximum concurrency for %s tokens per request: %.2fx", "1,024", 85.0),
                   _log("Graph capturing finished in %.0f secs, took %.2f GiB", 12, 0.31),
                   _log("init engine (profile, create kv cache, warmup model) took %.2f seconds", 41.5),
                   _log("Some other line %s", "1.0")):
        log.emit(record)
    assert len(log.lines) == 7, log.lines
    assert log.fields() == {"attention_backend": "TRITON_ATTN", "weights_gib": 1.12, "kv_cache_gib": 2.34,
                            "kv_cache_tokens": 87040, "max_concurrency": 85.0, "cuda_graph_gib": 0.31,
                            "cuda_graph_seconds": 12, "engine_init_seconds": 41.5}


def test_engine_accounting_reads_the_engine_settings_after_start():
    from types import SimpleNamespace as NS

    config = NS(cache_config=NS(num_gpu_blocks=5440, block_size=16, gpu_memory_utilization=0.055),
                scheduler_config=NS(max_num_seqs=16, max_num_batched_tokens=2048),
                model_config=NS(max_model_len=1024, dtype="torch.float16", enforce_eager=False,
                                enable_sleep_mode=False),
                compilation_config=NS(cudagraph_mode=NS(__str__=None)))
    config.compilation_config.cudagraph_mode = "FULL_AND_PIECEWISE"
    model = NS(vllm_engine=NS(llm_engine=NS(vllm_config=config)))
    log = bm.EngineLog()
    log.emit(_log("Available KV cache memory: %s GiB", "2.34"))
    out = bm.engine_accounting(model, log)
    assert out["settings"]["num_gpu_blocks"] == 5440 and out["settings"]["max_num_seqs"] == 16
    assert out["kv_cache_tokens_from_blocks"] == 5440 * 16
    assert out["log"] == {"kv_cache_gib": 2.34} and out["log_lines"] == ["Available KV cache memory: 2.34 GiB"]
    assert bm.engine_accounting(NS(), log) == {}, "no engine (fast_inference off): nothing to read"


def test_generation_speed_counts_completion_tokens_per_second():
    import torch

    assert bm.completion_tokens({"completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])}) == 3
    assert bm.completion_tokens(None) == 0
    speed = bm.generation_speed({"seconds": [10.0, 2.0, 2.0], "tokens": [100, 100, 100]})
    assert speed["tokens_per_second"] == pytest.approx(300 / 14, abs=0.05)
    assert speed["tokens_per_second_after_first"] == 50.0 and speed["calls"] == 3


class _PhaseLog:
    """Stands in for PhaseMeter (which reads CUDA memory): which phases were closed, in order."""

    reader = "stand-in"

    def __init__(self):
        self.closed: list[str] = []
        self.phases: dict = {}
        self.engine_starts = 0

    def start(self):
        pass

    def stop(self, name):
        self.closed.append(name)
        self.phases[name] = {"allocated_peak_gib": 1.0, "reserved_peak_gib": 1.5, "device_used_peak_gib": 2.0}

    def engine_start(self):
        import contextlib

        self.engine_starts += 1
        return contextlib.nullcontext()

    def close(self):
        pass


@pytest.mark.slow
def test_kit_mode_measures_the_kits_own_steps(monkeypatch, tmp_path):
    """One real GRPO step of the cpu preset (a group of 4, 32 tokens) on CPU through measure_run: it goes through helpers.run.pipeline's steps
    (not a copy of them), and the record gets the timings and tokens the GPU run will report."""
    import tempfile

    from helpers.run import pipeline

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    called = []
    for step in ("start", "load_model", "build_trainer", "train"):
        original = getattr(pipeline, step)
        monkeypatch.setattr(pipeline, step,
                            lambda *a, _f=original, _n=step, **kw: (called.append(_n), _f(*a, **kw))[1])
    small = '{"num_generations": 4, "per_device_train_batch_size": 4, "max_completion_length": 32}'  # the path, not the size
    args = bm.parse_args(["kit", "--preset", "cpu", "--steps", "1", "--override", small])
    preset, _ = bm.benchmark_preset(args)
    record, meter = {}, _PhaseLog()
    bm.measure_run(args, preset, None, 0.0, meter, record, bm.Progress(None))
    assert called == ["start", "load_model", "build_trainer", "train"]
    assert meter.engine_starts == 1, "the meter's thread is told when the model (with vLLM: the engine) loads"
    assert meter.closed[0] == "load" and "generation" in meter.closed and meter.closed[-1] == "training"
    assert len(record["step_seconds"]) == 1 and record["generation"]["calls"] == 1
    assert record["generation"]["tokens"][0] > 0 and record["generation"]["tokens_per_second"] > 0
    assert record["step_timing"]["steps"] == 1 and record["step_timing"]["generation_tokens_per_s"] > 0
    assert record["prompt_tokens"]["max"] <= preset.max_prompt_length
    assert "vllm_engine" not in record, "no vLLM on the cpu preset"
    assert not list(tmp_path.glob("grpo-bench-*")), "the run's temporary folder is removed after the measurement"


# --------------------------------------------------------------------------------------------- a record whatever happens


class _Trainer:
    """Stands in for TRL's GRPOTrainer where the benchmark attaches its meter."""

    def _generate_and_score_completions(self, *a, **kw):
        return {}

    def add_callback(self, callback):
        pass


def gpu_stand_ins(mp, load_model=None, train=None):
    """The GPU machine as far as lab/benchmark_memory.py kit reaches it, on CPU: a CUDA card of 79 GiB, a stand-in
    meter, vLLM as a module whose "vllm" logger writes to stdout as vLLM's does, and the kit's steps, of which
    load_model and train may be replaced (to fail). mp: pytest's monkeypatch (everything is put back after)."""
    import logging
    import types
    from types import SimpleNamespace as NS

    import torch

    from helpers import runtime as rt
    from helpers.run import pipeline

    vllm = types.ModuleType("vllm")
    vllm.LLM = type("LLM", (), {"__init__": lambda self, **kw: None})
    mp.setitem(sys.modules, "vllm", vllm)
    logger = logging.getLogger("vllm")  # vLLM's own handler (set up when it is imported) writes to stdout
    mp.setattr(logger, "handlers", [logging.StreamHandler(_Stdout())])
    mp.setattr(logger, "propagate", False)
    mp.setattr(logger, "level", logging.INFO)
    setattr = mp.setattr
    setattr(rt, "start_gpu_process", lambda backend: None)
    setattr(rt, "detect", lambda: rt.fake_runtime("h100"))
    setattr(torch.cuda, "is_available", lambda: True)
    setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3 (stand-in)")
    setattr(torch.cuda, "get_device_properties", lambda i=0: NS(total_memory=int(79.18 * bm.GIB)))
    setattr(bm, "cap_memory", lambda emulated, card_gib: emulated.total_gib / card_gib)
    setattr(bm, "PhaseMeter", _PhaseLog)
    setattr(bm, "benchmark_data", lambda preset, args, tokenizer, record: ([], []))
    setattr(pipeline, "start", lambda preset, options, runtime=None: NS(run_dir=options.run_dir, preset=preset))
    setattr(pipeline, "load_model", load_model or (lambda state: (NS(), NS())))
    setattr(pipeline, "build_trainer", lambda state, rows: _Trainer())
    setattr(pipeline, "train", train or (lambda state, trainer: None))


class _Stdout:
    """sys.stdout as it is at each write (vLLM's handler holds the stream that was sys.stdout at its import)."""

    def write(self, text):
        return sys.stdout.write(text)

    def flush(self):
        sys.stdout.flush()


def _engine_start_fails(state):
    import logging

    logging.getLogger("vllm").info("Available KV cache memory: %s GiB", "2.34")
    raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")


def _memory_retry_fails(state):
    print("Unsloth: Retrying vLLM to process 12 sequences and 3072 tokens in tandem.\nError:\nCUDA out of memory")
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB\nmore")


def _oom_in_training(state, trainer):
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 7.00 GiB.")


@pytest.mark.parametrize("load_model, train, status, retries", [
    (_engine_start_fails, None, "failed in load_model: RuntimeError: Engine core initialization failed.", 0),
    (_memory_retry_fails, None, "OOM in load_model: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB.", 1),
    (None, _oom_in_training, "OOM in train: OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB.", 0),
], ids=["engine-start-failed", "unsloth-memory-retry-failed", "oom-in-training"])
def test_a_failed_run_still_writes_its_record(monkeypatch, tmp_path, capsys, load_model, train, status, retries):
    """Each way a GPU run fails, simulated at the stage it happens in: the record is written, its status names the
    outcome, the stage and the error's type and first line, and it keeps what was learned before (log lines, what
    reached vLLM, the phases measured)."""
    gpu_stand_ins(monkeypatch, load_model, train)
    out = tmp_path / "f.json"
    assert bm.main(["kit", "--preset", "t4", "--emulate-gpu", "t4", "--steps", "1", "--json", str(out)]) == 1
    (record,) = json.loads(out.read_text())
    assert record["status"].startswith(status), record["status"]
    assert record["unsloth_memory_retries"] == retries
    assert any(f'{record["error"]["type"].rsplit(".", 1)[1]}: ' in line for line in record["error"]["traceback"])
    assert record["gpu"].startswith("NVIDIA H100") and record["emulation"]["gpu"] == "Tesla T4"
    assert record["environment"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    if load_model is _engine_start_fails:
        assert record["vllm_engine"]["log"] == {"kv_cache_gib": 2.34}, "vLLM's accounting logged before it failed"
        assert "Available KV cache memory: 2.34 GiB" in record["log_lines"]
    if load_model is _memory_retry_fails:
        assert any(line.startswith("Unsloth: Retrying vLLM") for line in record["log_lines"])
    if train is not None:
        assert record["measured"]["load"]["reserved_peak_gib"] == 1.5 and record["load_seconds"] is not None
    assert f"[grpo-kit] {record['status']}" in capsys.readouterr().out  # the kit's logger (helpers.messages)


SIGNALLED = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
import test_benchmark_memory as t
from lab import benchmark_memory as bm

def load_model(state):
    import logging
    logging.getLogger("vllm").info("Model loading took %s GiB memory and %.6f seconds", "1.12", 3.5)
    print("ready", flush=True)
    time.sleep(120)

t.gpu_stand_ins(t.pytest.MonkeyPatch(), load_model)
sys.exit(bm.main(["kit", "--preset", "t4", "--emulate-gpu", "t4", "--steps", "1", "--json", {json!r}]))
"""


def _signal_when_ready(template: str, out, signum) -> tuple[int, str]:
    """Run a stand-in benchmark (template: a script that prints "ready" where it then waits) in its own process,
    writing its record to out; send signum once it is ready. Returns its exit code and stderr."""
    script = template.format(root=str(ROOT), tests=str(ROOT / "lab" / "tests"), json=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=out.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(out.parent)})  # a killed run's temporary folder stays here
    try:
        deadline = time.time() + 240
        while (line := proc.stdout.readline()) and line.strip() != "ready":
            assert time.time() < deadline, "the stand-in run never got ready"
        assert line.strip() == "ready", proc.stderr.read()
        proc.send_signal(signum)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    return rc, proc.stderr.read()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_time_limits_signal_still_writes_the_record(tmp_path, signum):
    """`timeout -s INT` (or a SIGTERM) during the engine start: a real signal to a real process, whose record then
    says it was interrupted there, with the log lines seen before."""
    out = tmp_path / "f.json"
    rc, stderr = _signal_when_ready(SIGNALLED, out, signum)
    assert rc == 1, stderr
    (record,) = json.loads(out.read_text())
    name = signal.Signals(signum).name
    assert record["status"].startswith(f"interrupted in load_model: Stopped: {name} received"), record["status"]
    assert "Model loading took 1.12 GiB memory and 3.500000 seconds" in record["log_lines"]
    assert record["vllm_engine"]["log"] == {"weights_gib": 1.12}


KILLED = """
import sys, time
sys.path[:0] = [{root!r}, {tests!r}]
import test_benchmark_memory as t
from lab import benchmark_memory as bm

def train(state, trainer):
    print("ready", flush=True)
    time.sleep(120)

t.gpu_stand_ins(t.pytest.MonkeyPatch(), train=train)
sys.exit(bm.main(["kit", "--preset", "t4", "--emulate-gpu", "t4", "--steps", "1", "--json", {json!r}]))
"""


def test_a_run_killed_outright_leaves_its_record_so_far_and_a_finished_one_leaves_none(tmp_path):
    """SIGKILL (what `timeout -k` sends when the time limit's SIGINT is not answered in time) runs no handler: the
    record rewritten at each stage into F.partial is what is left, with the stage and the load phase measured."""
    out = tmp_path / "f.json"
    _signal_when_ready(KILLED, out, signal.SIGKILL)
    assert not out.exists(), "no final record: the process was killed"
    partial = json.loads((tmp_path / "f.json.partial").read_text())
    assert partial["stage"] == "train" and partial["status"].startswith("unfinished in train")
    assert partial["measured"]["load"]["reserved_peak_gib"] == 1.5, "what was measured before the kill is kept"
    assert partial["gpu"].startswith("NVIDIA H100") and partial["emulation"]["gpu"] == "Tesla T4"


def test_a_finished_run_removes_its_partial_record(monkeypatch, tmp_path):
    gpu_stand_ins(monkeypatch, None, _oom_in_training)
    out = tmp_path / "f.json"
    bm.main(["kit", "--preset", "t4", "--emulate-gpu", "t4", "--steps", "1", "--json", str(out)])
    assert json.loads(out.read_text())[0]["stage"] == "train"
    assert not (tmp_path / "f.json.partial").exists()


def test_the_output_tail_keeps_the_first_and_last_lines_and_counts_unsloths_retries():
    tail = bm.OutputTail(head=2, tail=3, width=20)
    with tail.capturing():
        print("one\ntwo")
        print("x" * 50)
        sys.stderr.write("progress 10%\rprogress 100%\n")
        print("Unsloth: Retrying vLLM to process 6 sequences")
        print("last, unterminated", end="")
    assert tail.lines() == ["one", "two", "[... 1 lines left out ...]", "progress 100%", "Unsloth: Retrying vL",
                            "last, unterminated"]
    assert tail.counts == {"unsloth_memory_retries": 1} and tail.seen == 6


def test_the_record_file_is_appended_to_and_an_unreadable_one_is_kept_aside(tmp_path, capsys):
    out = tmp_path / "f.json"
    bm.write_record({"status": "ok", "log_lines": ["a"]}, out)
    bm.write_record({"status": "failed"}, out)
    assert [r["status"] for r in json.loads(out.read_text())] == ["ok", "failed"]
    assert '"log_lines"' not in capsys.readouterr().out, "the log lines were printed already"
    out.write_text('[{"status": "ok"}, {"sta')  # a file cut short
    bm.write_record({"status": "refused"}, out)
    assert json.loads(out.read_text()) == [{"status": "refused"}]
    assert (tmp_path / "f.json.unreadable").read_text().endswith('{"sta')


# --------------------------------------------------------------------------------------------- the memory sampler


class _Cuda:
    """Stands in for torch.cuda: which threads called cudaMemGetInfo, and a device UUID for NVML."""

    def __init__(self, used_gib=10.0):
        self.callers: list[int] = []
        self.used = int(used_gib * bm.GIB)

    def mem_get_info(self):
        self.callers.append(threading.get_ident())
        return int(80 * bm.GIB) - self.used, int(80 * bm.GIB)

    def get_device_properties(self, i):
        from types import SimpleNamespace as NS

        return NS(uuid="1234-abcd")

    def current_device(self):
        return 0

    def synchronize(self):
        pass

    def reset_peak_memory_stats(self):
        pass

    def max_memory_allocated(self):
        return int(5 * bm.GIB)

    def max_memory_reserved(self):
        return int(6 * bm.GIB)


def _fake_nvml(monkeypatch, used: list):
    import types
    from types import SimpleNamespace as NS

    nvml = types.ModuleType("pynvml")
    nvml.callers, nvml.uuids = [], []
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: nvml.uuids.append(uuid) or "handle"
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: nvml.callers.append(threading.get_ident()) or NS(used=used[0])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_with_nvml_the_sampler_thread_makes_no_cuda_call(monkeypatch):
    """The sampler thread reads NVML (no CUDA call while vLLM captures graphs); the main thread's cudaMemGetInfo at
    the phase's start anchors it, so a peak between start and stop is on the same scale as the earlier records."""
    used = [int(9.5 * bm.GIB)]  # NVML's figure: 0.5 GiB under cudaMemGetInfo's 10 GiB
    nvml = _fake_nvml(monkeypatch, used)
    cuda = _Cuda(used_gib=10.0)
    meter = bm.PhaseMeter(interval_s=0.001, cuda=cuda)
    try:
        assert meter.reader == "nvml" and nvml.uuids == ["GPU-1234-abcd"]
        meter.start()
        with meter.engine_start():
            used[0] = int(13.5 * bm.GIB)  # the engine's profiling run, gone again before the phase ends
            _wait_for(lambda: len(nvml.callers) > 5)
            used[0] = int(9.5 * bm.GIB)
        meter.stop("load")
    finally:
        meter.close()
    assert meter.phases["load"]["device_used_peak_gib"] == pytest.approx(14.0, abs=1e-3)
    main = threading.main_thread().ident
    assert set(cuda.callers) == {main}, "cudaMemGetInfo only in the main thread"
    assert any(c != main for c in nvml.callers), "NVML read by the sampler thread"


def test_without_nvml_the_sampler_pauses_while_the_engine_starts(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    cuda = _Cuda()
    meter = bm.PhaseMeter(interval_s=0.001, cuda=cuda)
    main = threading.main_thread().ident
    try:
        assert "paused while an engine starts" in meter.reader
        _wait_for(lambda: any(c != main for c in cuda.callers))
        with meter.engine_start():
            cuda.callers.clear()
            time.sleep(0.05)
            during = list(cuda.callers)
        _wait_for(lambda: any(c != main for c in cuda.callers))
    finally:
        meter.close()
    assert during == [], "no CUDA call from the sampler thread while the engine starts"


def _wait_for(condition, timeout=5.0):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "the sampler thread did not sample"
        time.sleep(0.002)


def test_importing_the_gpu_scripts_loads_no_library_unsloth_must_patch_first():
    """Unsloth must be imported before transformers, peft, TRL and accelerate, or its patches miss them; these
    scripts are imported before it (the lesson runner's kernel, the benchmark's start)."""
    code = ("import sys; sys.path.insert(0, '.'); import lab.benchmark_memory, lab.run_lesson_on_gpu, "
            "lab.gpu_emulation; print([m for m in ('transformers', 'peft', 'trl', 'accelerate') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
