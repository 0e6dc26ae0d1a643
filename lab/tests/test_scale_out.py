"""Scale-out (lab/docs/scale-out.md): several processes with accelerate, DeepSpeed ZeRO configs, TRL's vLLM server mode.

On a CPU machine: a real two-process GRPO run (accelerate launch, gloo), the DeepSpeed / accelerate configs
through the libraries' own loaders, the TRL CLI and GRPOConfig fields the multi-GPU presets use, and the ZeRO
memory split. What needs GPUs (NCCL, vLLM, bf16, DeepSpeed engines) is not run here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lab import distributed
from helpers.memory import estimate
from lab.zero import per_gpu_with_zero, scale_out_settings, split_components, zero_divisors
from helpers.runtime import RuntimeProblem, fake_runtime
from helpers.config import PRESETS, PresetError, get_preset, grpo_config_kwargs, validate

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE_CONFIGS = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))
SCALE_OUT_PRESETS = [n for n, p in PRESETS.items() if p.backend == "trl-vllm"]


# ------------------------------------------------------------------------------------ two processes on CPU


@pytest.mark.slow
def test_two_processes_train_together_and_write_results_once(tmp_path):
    """accelerate launch -m lab.scale_out with 2 processes: both run the GRPO steps (same weights after each step: gradients were
    all-reduced), process 0 alone evaluates, writes metrics/summary and saves the adapter."""
    run, markers = tmp_path / "run", tmp_path / "markers"
    env = dict(os.environ, OMP_NUM_THREADS="1", GRPO_KIT_RANK_MARKERS=str(markers))
    env.pop("WORLD_SIZE", None), env.pop("RANK", None)
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch",
           "--config_file", str(ROOT / "configs/accelerate/cpu_2proc.yaml"),
           "-m", "lab.scale_out", "--preset", "cpu", "--max-steps", "2", "--num-generations", "4", "--batch-size", "4",
           "--max-completion-length", "16", "--num-iterations", "1", "--eval-size", "2", "--eval-max-new-tokens", "8", "--save-steps", "0",
           "--run-dir", str(run)]
    started = time.time()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    print(f"[scale-out] 2-process CPU run took {time.time() - started:.0f}s")

    rows = {}
    for rank in (0, 1):
        path = markers / f"rank{rank}.jsonl"
        assert path.is_file(), f"rank {rank} wrote no marker: it did not train"
        rows[rank] = [json.loads(x) for x in path.read_text().splitlines()]
        assert [x["step"] for x in rows[rank]] == [0, 1, 2]
        assert all(x["world_size"] == 2 and x["rank"] == rank and x["process_index"] == rank for x in rows[rank])
    for a, b in zip(rows[0], rows[1]):  # DDP: identical trainable weights on both ranks after every step
        assert a["trainable_params"] == b["trainable_params"] > 0
        assert a["trainable_abs_sum"] == pytest.approx(b["trainable_abs_sum"], rel=1e-6)
    assert rows[0][-1]["trainable_abs_sum"] != pytest.approx(rows[0][0]["trainable_abs_sum"], rel=1e-9)

    assert out.count("adapter written to") == 1, "the adapter must be saved by one process only"
    assert out.count("evaluating before training") == 1 and out.count("evaluating after training") == 1
    from safetensors.torch import load_file

    weights = load_file(run / "adapter" / "adapter_model.safetensors")
    assert sum(float(t.abs().sum()) for n, t in weights.items() if "lora_B" in n) > 0
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2], "one metrics row per step, not one per process"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["before"]["n"] == 2
    assert summary["time"]["steps"] == 2, "lab.scale_out plugs the step timer in too (lab.step_timing)"
    assert not any(p.name.startswith("runs") for p in tmp_path.iterdir())


def test_cli_names_the_process_count_before_loading_anything(tmp_path):
    """WORLD_SIZE as accelerate launch sets it: 4 x 3 = 12 completions cannot hold groups of 8."""
    env = dict(os.environ, WORLD_SIZE="3", RANK="0", LOCAL_RANK="0")
    r = subprocess.run([sys.executable, "-m", "lab.scale_out", "--preset", "cpu", "--batch-size", "4",
                        "--num-generations", "8", "--run-dir", str(tmp_path / "r")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "3 training processes" in r.stderr and "num_generations=8" in r.stderr
    assert "per_device_train_batch_size" in r.stderr and "gradient_accumulation_steps" in r.stderr
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------- validation, presets


def test_several_cpu_processes_refuse_reusing_a_sampled_batch_with_the_fix():
    with pytest.raises(PresetError, match="num_iterations.*--num-iterations 1"):
        validate(get_preset("cpu"), num_processes=2)  # the cpu preset trains on each sampled batch twice
    validate(get_preset("cpu", num_iterations=1), num_processes=2)
    validate(get_preset("cpu"), num_processes=1)


def test_generation_batch_counts_every_process():
    p = get_preset("cpu", per_device_train_batch_size=4, num_generations=8, num_iterations=1)
    with pytest.raises(PresetError, match="not divisible by num_generations"):
        validate(p)  # one process: 4 completions cannot hold a group of 8
    validate(p, num_processes=2)  # 4 x 2 = 8: one group spread over both processes, as TRL allows
    with pytest.raises(PresetError, match=r"4 x 3 x 1 = 12"):
        validate(p, num_processes=3)


@pytest.mark.parametrize("name", SCALE_OUT_PRESETS)
def test_scale_out_presets_are_valid_for_their_process_count(name):
    p = get_preset(name)
    assert p.backend == "trl-vllm" and p.model_name == "Qwen/Qwen2.5-7B-Instruct" and p.lora_rank > 0
    assert not p.load_in_4bit and not p.fast_inference  # no Unsloth: its vLLM path is single-GPU
    validate(p, fake_runtime("h100"), num_processes=p.num_processes)
    assert (ROOT / p.accelerate_config).is_file()
    with pytest.raises(RuntimeProblem, match="needs NVIDIA GPUs"):
        validate(p, fake_runtime("cpu"), num_processes=p.num_processes)


def test_scale_out_presets_cover_both_vllm_modes():
    assert {get_preset(n).vllm_mode for n in SCALE_OUT_PRESETS} == {"colocate", "server"}


def test_bad_vllm_mode_is_refused():
    p = get_preset("8xh100-qwen7b-lora", vllm_mode="remote")
    with pytest.raises(PresetError, match="vllm_mode"):
        validate(p, num_processes=6)
    q = get_preset("a100x2-qwen7b-lora", vllm_tensor_parallel_size=2)
    with pytest.raises(PresetError, match="vllm_tensor_parallel_size"):
        validate(q, num_processes=3)


def test_cpu_and_t4_config_kwargs_have_no_vllm_mode_keys():
    for name, rt in (("cpu", fake_runtime("cpu")), ("t4", fake_runtime("t4"))):
        kw = grpo_config_kwargs(get_preset(name), rt)
        assert not {k for k in kw if k.startswith("vllm_")}, name
        assert kw["gradient_checkpointing"] is False


@pytest.mark.parametrize("name", SCALE_OUT_PRESETS)
def test_grpo_config_accepts_the_scale_out_kwargs(name, tmp_path):
    """Field names exist in the pinned TRL, and GRPOConfig's own __post_init__ accepts the combination (built with
    use_cpu here: bf16 needs a GPU)."""
    import trl

    p = get_preset(name)
    kw = grpo_config_kwargs(p, fake_runtime("h100"), output_dir=str(tmp_path))
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig) if f.init}
    assert not set(kw) - fields, f"trl=={trl.__version__} GRPOConfig lacks {sorted(set(kw) - fields)}"
    assert kw["use_vllm"] is True and kw["vllm_mode"] == p.vllm_mode and kw["bf16"] is True
    if p.vllm_mode == "server":
        assert (kw["vllm_server_host"], kw["vllm_server_port"]) == (p.vllm_server_host, p.vllm_server_port)
        assert "vllm_gpu_memory_utilization" not in kw
    else:
        assert kw["vllm_gpu_memory_utilization"] == p.gpu_memory_utilization
    cfg = trl.GRPOConfig(**dict(kw, bf16=False, use_cpu=True))
    assert cfg.vllm_mode == p.vllm_mode and cfg.use_vllm
    assert cfg.generation_batch_size == p.per_device_train_batch_size * p.gradient_accumulation_steps  # 1 process


def test_trl_vllm_serve_cli_parses_the_documented_command():
    """The `trl vllm-serve` arguments lab/docs/scale-out.md uses exist in the pinned TRL, and what it forwards to vLLM."""
    from trl.cli.commands import get_commands
    from trl.scripts.vllm_serve import build_command, make_parser

    assert "vllm-serve" in {c.name for c in get_commands()}
    p = get_preset("8xh100-qwen7b-lora")
    args, extra = make_parser(prog="trl vllm-serve").parse_args_and_config(
        args=["--model", p.model_name, "--tensor-parallel-size", str(p.vllm_tensor_parallel_size),
              "--port", str(p.vllm_server_port), "--gpu-memory-utilization", "0.9",
              "--max-model-len", str(p.max_prompt_length + p.max_completion_length)],
        return_remaining_strings=True)
    assert extra == [] and args.tensor_parallel_size == 2 and args.port == p.vllm_server_port
    cmd = build_command(args, extra)
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    assert "--weight-transfer-config" in cmd  # the NCCL channel the trainer pushes weights through


def test_the_documented_install_is_the_tested_stack_plus_a_vllm_trl_supports():
    """The pip command lab/docs/scale-out.md gives: its vLLM is inside the range the pinned TRL accepts, and every other
    package is pinned to the version the CPU tests run (requirements-cpu.txt)."""
    import inspect

    from packaging.version import Version
    from trl import import_utils

    doc = (ROOT / "lab" / "docs" / "scale-out.md").read_text()
    command = re.search(r"^pip install (.*)$", doc.replace("\\\n", " "), re.M).group(1)  # continuation lines joined
    pins = dict(re.findall(r"([\w.-]+)==([\w.]+)", command))
    src = inspect.getsource(import_utils.is_vllm_available)
    low, high = re.search(r'Version\("([\d.]+)"\) <= _vllm_base_version <= Version\("([\d.]+)"\)', src).groups()
    assert Version(low) <= Version(pins.pop("vllm")) <= Version(high)
    tested = dict(re.findall(r"^([\w.-]+)==([\w.]+)", (ROOT / "requirements-cpu.txt").read_text(), re.M))
    assert pins and {name: tested.get(name) for name in pins} == pins


# --------------------------------------------------------------------------- DeepSpeed and accelerate configs


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_configs_load_in_transformers_and_deepspeed(stage, tmp_path):
    """HF fills the "auto" values from the GRPOConfig; DeepSpeed's own DeepSpeedConfig then accepts the result."""
    import trl
    from transformers.integrations import HfTrainerDeepSpeedConfig

    p = get_preset("a100x2-qwen7b-lora")
    args = trl.GRPOConfig(**dict(grpo_config_kwargs(p, fake_runtime("a100"), output_dir=str(tmp_path)),
                                 bf16=False, use_cpu=True))
    hf = HfTrainerDeepSpeedConfig(str(ROOT / f"configs/deepspeed/zero{stage}.json"))
    assert hf.is_zero3() == (stage == 3)
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, SimpleNamespace(config=SimpleNamespace(hidden_size=3584)), p.max_steps)
    cfg = hf.config
    assert cfg["train_micro_batch_size_per_gpu"] == p.per_device_train_batch_size
    assert cfg["gradient_accumulation_steps"] == p.gradient_accumulation_steps
    assert cfg["gradient_clipping"] == p.max_grad_norm
    raw = json.loads((ROOT / f"configs/deepspeed/zero{stage}.json").read_text())
    assert raw["bf16"]["enabled"] == "auto"  # precision follows GRPOConfig (bf16 on Ampere+)
    if stage == 3:  # Trainer.save_model gathers the sharded LoRA adapter only with this on
        assert cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    cfg = json.loads(json.dumps(cfg))
    cfg["bf16"]["enabled"] = True  # as on a GPU
    ds = deepspeed_config.DeepSpeedConfig(cfg)
    assert ds.zero_optimization_stage == stage and ds.bfloat16_config.enabled
    assert ds.train_micro_batch_size_per_gpu == p.per_device_train_batch_size


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_configs_load_with_accelerates_loader(path):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(path))
    assert cfg.num_machines == 1 and cfg.num_processes >= 2
    if cfg.distributed_type.value == "DEEPSPEED":
        ds_file = ROOT / cfg.deepspeed_config["deepspeed_config_file"]
        assert ds_file.is_file()
        assert cfg.mixed_precision is None  # with a config file accelerate refuses mixed_precision (it is in the json)


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_yaml_becomes_a_deepspeed_plugin(stage, monkeypatch):
    """What accelerate launch does with the YAML (its own launch code builds the environment), then the
    DeepSpeedPlugin each process builds from that environment: no conflicting settings, the right stage."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    pytest.importorskip("deepspeed")
    args = launch_command_parser().parse_args(
        ["--config_file", str(ROOT / f"configs/accelerate/multi_gpu_zero{stage}.yaml"), "--num_processes", "6",
         "-m", "lab.scale_out", "--preset", "8xh100-qwen7b-lora"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)  # as accelerate's launch_command does
    _, env = prepare_deepspeed_cmd_env(args)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    monkeypatch.chdir(ROOT)  # the YAML's config path is relative to the repository root
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == stage and plugin.hf_ds_config.is_zero3() == (stage == 3)
    if stage == 3:
        assert plugin.zero3_init_flag is False  # the model is loaded before the trainer (helpers/train.py)


def test_cpu_yaml_uses_the_launcher_that_starts_several_processes():
    """accelerate starts ONE process for use_cpu / MULTI_CPU without mpirun; the torch.distributed launcher
    (MULTI_GPU) starts num_processes, which then train on CPU because the cpu preset sets use_cpu."""
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(ROOT / "configs/accelerate/cpu_2proc.yaml"))
    assert cfg.distributed_type.value == "MULTI_GPU" and not cfg.use_cpu and cfg.num_processes == 2
    assert grpo_config_kwargs(get_preset("cpu"), fake_runtime("cpu"))["use_cpu"] is True


# ------------------------------------------------------------------------------------------------ lab.distributed


def test_process_info_reads_the_launcher_environment():
    assert distributed.process_info({}) == distributed.ProcessInfo(0, 1, 0)
    info = distributed.process_info({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"})
    assert info.rank == 3 and info.world_size == 8 and not info.is_main and info.distributed


def test_one_process_needs_no_process_group(tmp_path):
    assert distributed.on_main_then_share(lambda: tmp_path, distributed.ProcessInfo()) == tmp_path
    saved = []
    distributed.save_adapter_once(None, "model", "tok", tmp_path / "a", lambda m, t, p: saved.append(p),
                                  distributed.ProcessInfo())
    assert saved == [tmp_path / "a"]
    distributed.save_adapter_once(None, "model", "tok", tmp_path / "b", lambda m, t, p: saved.append(p),
                                  distributed.ProcessInfo(rank=1, world_size=1))
    assert saved == [tmp_path / "a"]  # not process 0: writes nothing


def test_metrics_are_written_by_process_zero_only(tmp_path):
    from helpers.run.metrics import MetricsRecorder

    rec = MetricsRecorder(tmp_path / "m.jsonl")
    rec.on_log(None, SimpleNamespace(global_step=1, is_world_process_zero=False), None, logs={"reward": 1.0})
    assert not (tmp_path / "m.jsonl").exists()
    rec.on_log(None, SimpleNamespace(global_step=1, is_world_process_zero=True), None, logs={"reward": 1.0})
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 1


def test_rank_marker_is_off_without_the_env_flag(monkeypatch):
    monkeypatch.delenv(distributed.RANK_MARKERS_ENV, raising=False)
    assert distributed.rank_marker_callbacks() == []


def test_trl_vllm_model_loader_kwargs():
    import torch

    from helpers.model import load, trl_vllm_load_kwargs

    kw = trl_vllm_load_kwargs(get_preset("a100x2-qwen7b-lora"), "cuda:1")
    assert kw["dtype"] == torch.bfloat16 and kw["device_map"] == {"": "cuda:1"}  # one whole copy per process
    with pytest.raises(RuntimeProblem, match="needs NVIDIA GPUs"):
        load(get_preset("a100x2-qwen7b-lora"), fake_runtime("cpu"))


# -------------------------------------------------------------------------------------------- ZeRO memory


def test_zero_divisors_follow_the_stages():
    assert zero_divisors(0, 4) == {"optimizer_states": 1, "gradients": 1, "weights": 1, "lora_params": 1,
                                   "reference_model": 1}
    assert zero_divisors(1, 4)["optimizer_states"] == 4 and zero_divisors(1, 4)["gradients"] == 1
    assert zero_divisors(2, 4)["gradients"] == 4 and zero_divisors(2, 4)["weights"] == 1
    assert all(v == 4 for v in zero_divisors(3, 4).values())
    with pytest.raises(ValueError, match="stage"):
        zero_divisors(4, 2)


def test_split_components_divides_model_states_only():
    parts = {"weights": 16.0, "optimizer_states": 8.0, "gradients": 4.0, "activations": 3.0, "kv_cache": 2.0}
    assert split_components(parts, 0, 8) == parts
    z2 = split_components(parts, 2, 8)
    assert (z2["optimizer_states"], z2["gradients"], z2["weights"], z2["activations"]) == (1.0, 0.5, 16.0, 3.0)
    z3 = per_gpu_with_zero(parts, 3, 8, gather_gb=0.5)
    assert z3["weights"] == 2.0 and z3["zero3_gather"] == 0.5 and z3["kv_cache"] == 2.0


def test_zero_on_the_7b_lora_recipe():
    """With LoRA, ZeRO-2 saves almost nothing (the adapter's states are tiny); ZeRO-3 shards the frozen 16-bit base,
    but the PEFT weight sync to vLLM gathers it back in full for a moment."""
    est = estimate(scale_out_settings("a100x2-qwen7b-lora"), gpu="a100-80", budget_gb=None)
    assert 14 < est.weights < 15  # Qwen2.5-7B: 7.6e9 parameters x 2 bytes = 14.2 GiB
    z0, z2, z3 = (per_gpu_with_zero(est, s, 2) for s in (0, 2, 3))
    assert z0.training_peak_gb == pytest.approx(est.training_peak_gb, rel=1e-9)  # stage 0 = the 1-GPU model
    assert 0 < z0.training_peak_gb - z2.training_peak_gb < 0.5  # half of (O + G) = half of 0.45 GB
    assert z3.training_peak_gb < z2.training_peak_gb - est.weights / 2 + 2  # half the base, plus the gather buffer
    # sync = the generation phase without the per-layer gather buffer, with the whole W + L gathered instead of 1/N
    expected = z3.generation_peak_gb - z3.generation["zero3_gather"] + (est.weights + est.lora_params) / 2
    assert z3.sync_peak_gb == pytest.approx(expected, rel=1e-9)
    server = estimate(scale_out_settings("8xh100-qwen7b-lora"), gpu="h100", budget_gb=None)
    s2 = per_gpu_with_zero(server, 2, 6, server_mode=True)
    assert s2.generation["kv_cache"] == 0 and s2.generation["vllm_reservation"] == 0


def test_zero_split_refuses_the_unsloth_shared_weights_estimate():
    with pytest.raises(ValueError, match="single-GPU"):
        per_gpu_with_zero(estimate("t4"), 2, 2)
