"""One pipeline, two front doors: every Preset field set through the command line and through the notebook path
reaches the trainer's GRPOConfig / the model loader / the run's config.json, or is refused naming the field."""

import json
import subprocess
import sys
import types
from dataclasses import fields
from pathlib import Path

import pytest

from helpers import notebook_setup, train
from helpers.run import pipeline
from helpers.cli import flag_of
from helpers.model import peft_lora_kwargs
from helpers.config import (CPU_FIELDS, DATA_FIELDS, GRPO_CONFIG_FIELDS, LAUNCH_FIELDS, MODEL_FIELDS,
                            RECORD_FIELDS, VLLM_FIELDS, Preset, PresetError, get_preset)

ROOT = Path(__file__).resolve().parents[1]

# A changed value for every field of the cpu preset, and whether the cpu backend must refuse it.
CHANGES = {
    "description": ("my recipe", None),
    "model_name": ("Qwen/Qwen2.5-0.5B-Instruct", "model_name"),
    "backend": ("unsloth", "needs an NVIDIA GPU"),
    "max_seq_length": (600, None),
    "load_in_4bit": (True, "load_in_4bit"),
    "fast_inference": (True, "fast_inference"),
    "gpu_memory_utilization": (0.4, "gpu_memory_utilization"),
    "vllm_enforce_eager": (True, "vllm_enforce_eager"),
    "vllm_mode": ("server", "vllm_mode"),
    "vllm_server_host": ("10.0.0.1", "vllm_server_host"),
    "vllm_server_port": (8001, "vllm_server_port"),
    "vllm_server_timeout": (60.0, "vllm_server_timeout"),
    "vllm_tensor_parallel_size": (2, "vllm_tensor_parallel_size"),
    "lora_rank": (32, None),
    "lora_alpha": (16, None),
    "lora_target_modules": (("q_proj", "v_proj"), None),
    "dataset": ("gsm8k", None),
    "train_size": (100, None),
    "eval_size": (5, None),
    "synthetic_levels": ((1, 2), None),
    "worked_example": (False, None),
    "max_prompt_length": (200, None),
    "num_generations": (4, None),
    "per_device_train_batch_size": (16, None),
    "gradient_accumulation_steps": (2, None),
    "max_completion_length": (32, None),
    "temperature": (0.5, None),
    "scale_rewards": ("none", None),
    "beta": (0.04, None),
    "learning_rate": (1e-4, None),
    "weight_decay": (0.1, None),
    "warmup_steps": (2, None),
    "lr_scheduler_type": ("cosine", None),
    "max_grad_norm": (0.5, None),
    "optim": ("adamw_8bit", "8-bit optimizers"),
    "gradient_checkpointing": (True, None),
    "max_steps": (3, None),
    "num_iterations": (2, None),
    "logging_steps": (2, None),
    "seed": (7, None),
    "cpu_bf16_sampling": (True, None),
    "cpu_bf16_loss": (True, None),
    "cpu_speedups_off": (("plain_sampler",), None),
    "eval_max_new_tokens": (20, None),
    "accelerate_config": ("configs/accelerate/cpu_2proc.yaml", None),
    "num_processes": (2, None),
    "train_gpus": ("0,1", None),
    "vllm_server_gpus": ("6,7", "only a trl-vllm preset in server mode"),
}


def _cli_args(name, value) -> list[str]:
    flag = flag_of(name)
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, tuple):
        return [flag, ",".join(map(str, value))]
    return [flag, str(value)]


def _check_reached(run, name, value):
    saved = json.loads((run.run_dir / "config.json").read_text())
    as_json = json.loads(json.dumps(value, default=list))
    assert saved[name] == as_json, f"{name} is not in config.json"
    assert getattr(run.preset, name) == value
    if name in GRPO_CONFIG_FIELDS or name == "gradient_checkpointing":
        assert getattr(pipeline.grpo_config(run), name) == value, f"{name} did not reach GRPOConfig"
    if name in ("lora_rank", "lora_alpha", "lora_target_modules"):
        key = {"lora_rank": "r", "lora_target_modules": "target_modules"}.get(name, name)
        got = peft_lora_kwargs(run.preset)[key]
        assert (tuple(got) if isinstance(got, list) else got) == value, f"{name} did not reach the LoRA config"


def test_every_field_is_classified_and_has_a_flag_with_help():
    names = {f.name for f in fields(Preset)}
    classified = set(GRPO_CONFIG_FIELDS) | set(MODEL_FIELDS) | set(DATA_FIELDS) | set(VLLM_FIELDS) | set(LAUNCH_FIELDS)
    classified |= set(CPU_FIELDS)
    classified |= set(RECORD_FIELDS)
    assert names == classified, f"fields with no stated destination: {names ^ classified}"
    assert names - {"name"} == set(CHANGES), "give a new field a changed value in CHANGES"
    help_text = train.build_parser().format_help()
    for f in fields(Preset):
        assert f.metadata.get("help"), f"{f.name} has no help text"
        if f.name != "name":
            assert flag_of(f.name) in help_text


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_field_through_the_command_line(name, tmp_path):
    value, refusal = CHANGES[name]
    args = train.parse_args(["--preset", "cpu", *_cli_args(name, value), "--run-dir", str(tmp_path / "r")])
    assert train.overrides_from(args) == {name: value}
    preset = get_preset(args.preset, **train.overrides_from(args))
    if refusal:
        with pytest.raises(Exception, match=refusal) as err:
            pipeline.start(preset, train.options_from(args))
        assert "Fix" in str(err.value) and not (tmp_path / "r").exists()  # refused before anything was written
        return
    _check_reached(pipeline.start(preset, train.options_from(args)), name, value)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_each_field_through_the_notebook_path(name, tmp_path):
    value, refusal = CHANGES[name]
    if refusal:
        with pytest.raises(Exception, match=refusal):
            notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True, **{name: value})
        return
    kit = notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True, **{name: value})
    _check_reached(pipeline.start(kit.preset, pipeline.RunOptions(run_dir=kit.run_dir)), name, value)


def test_the_issue_overrides_now_train_or_are_refused(tmp_path):
    # Before: beta, temperature, lora_rank and gpu_memory_utilization were printed, then silently dropped.
    kit = notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True, beta=0.04, temperature=0.5,
                                 lora_rank=32)
    config = pipeline.grpo_config(pipeline.start(kit.preset, pipeline.RunOptions(run_dir=tmp_path)))
    assert (config.beta, config.temperature) == (0.04, 0.5) and peft_lora_kwargs(kit.preset)["r"] == 32
    with pytest.raises(PresetError, match=r"gpu_memory_utilization=0.4 cannot apply.*Fix: leave it None"):
        notebook_setup.prepare("cpu", run_dir=tmp_path, root=ROOT, quiet=True, gpu_memory_utilization=0.4)


def test_refusal_on_the_command_line_names_the_field_and_the_fix(tmp_path):
    r = subprocess.run([sys.executable, "-m", "helpers.train", "--preset", "cpu", "--gpu-memory-utilization", "0.4",
                        "--run-dir", str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "gpu_memory_utilization=0.4 cannot apply" in r.stderr and "Fix:" in r.stderr
    assert not (tmp_path / "r").exists()


def test_a_hand_written_config_that_drifts_from_the_preset_is_refused(tmp_path):
    from trl import GRPOConfig

    from helpers.config import grpo_config_kwargs

    run = pipeline.start(get_preset("cpu", max_steps=2), pipeline.RunOptions(run_dir=tmp_path))
    kwargs = grpo_config_kwargs(run.preset, run.runtime, output_dir=str(run.folder.checkpoint_dir),
                                save_steps=run.save_steps)
    pipeline.check_config(run, GRPOConfig(**kwargs))  # the same settings: accepted
    with pytest.raises(PresetError, match="beta: config has 0.1, the preset gives 0.0"):
        pipeline.check_config(run, GRPOConfig(**{**kwargs, "beta": 0.1}))


def test_reward_functions_come_from_the_caller_or_the_command_line(tmp_path, monkeypatch):
    from helpers.rewards import DEFAULT_REWARDS, correctness_reward

    def brevity_reward(prompts=None, completions=None, **kwargs):
        return [0.0 for _ in completions]

    run = pipeline.start(get_preset("cpu"), pipeline.RunOptions(run_dir=tmp_path / "a"),
                        reward_funcs=[correctness_reward, brevity_reward])
    assert run.reward_funcs == [correctness_reward, brevity_reward]
    assert json.loads((tmp_path / "a" / "config.json").read_text())["reward_funcs"] == ["correctness_reward",
                                                                                      "brevity_reward"]
    args = train.parse_args(["--reward", "helpers.rewards:correctness_reward", "--reward",
                             "helpers.rewards:DEFAULT_REWARDS"])
    assert pipeline.resolve_rewards(train.options_from(args).rewards) == [correctness_reward, *DEFAULT_REWARDS]
    assert pipeline.resolve_rewards(()) == list(DEFAULT_REWARDS)
    with pytest.raises(PresetError, match="expected module:name"):
        pipeline.resolve_rewards(["brevity"])
    with pytest.raises(PresetError, match="no attribute"):
        pipeline.resolve_rewards(["helpers.rewards:no_such_reward"])
    with pytest.raises(PresetError, match="non-empty list of functions"):
        pipeline.start(get_preset("cpu"), pipeline.RunOptions(run_dir=tmp_path / "b"), reward_funcs=[])


def test_the_command_line_runs_the_same_steps_as_the_notebook(monkeypatch, tmp_path):
    order = []
    for step in ("start", "load_model", "load_data", "evaluate_before", "build_trainer", "train", "finish"):
        monkeypatch.setattr(pipeline, step, lambda *a, _s=step, **k: order.append(_s) or (
            types.SimpleNamespace() if _s == "start" else {"status": "finished"} if _s == "finish" else (None, None)))
    assert train.main(["--run-dir", str(tmp_path)]) == 0
    assert order == ["start", "load_model", "load_data", "evaluate_before", "build_trainer", "train", "finish"]


def test_a_run_without_evaluation_skips_both_and_says_so(tmp_path, monkeypatch, capsys):
    """RunOptions.evaluate=False (--no-evaluate): no greedy evaluation before (nor after, in finish), and a reader of
    the run's files says why it has no before/after instead of calling it unfinished."""
    from helpers import evaluation

    monkeypatch.setattr(pipeline, "evaluate_base", lambda *a, **k: pytest.fail("evaluated with evaluate=False"))
    state = types.SimpleNamespace(options=pipeline.RunOptions(evaluate=False))
    assert pipeline.evaluate_before(state, heldout=[{"prompt": "p", "answer": "1"}]) is None
    (tmp_path / "summary.json").write_text(json.dumps({"status": "finished", "before": None, "after": None}))
    assert evaluation.read_run(tmp_path) is None
    assert "--no-evaluate" in capsys.readouterr().out
    assert train.main(["--run-dir", str(tmp_path / "r"), "--no-evaluate", "--pass-k-samples", "2"]) == 2
    assert "--pass-k-samples 2 with --no-evaluate: pass@k is part of the evaluation" in capsys.readouterr().err


def test_training_refuses_a_trainer_that_does_not_sample_with_the_models_engine(monkeypatch):
    """05 builds its own GRPOTrainer: pipeline.training checks it before anything trains (what build_trainer does for
    python -m helpers.train), so a trainer without the model's vLLM engine stops with the fix; the CPU model (no
    engine) passes through."""
    from helpers.model import ModelSetupError

    prepared = []
    monkeypatch.setattr(pipeline, "prepare_trainer", lambda trainer, *a: prepared.append(trainer))
    state = types.SimpleNamespace(model=types.SimpleNamespace(vllm_engine=object()), preset=get_preset("cpu"),
                                  options=pipeline.RunOptions(), folder=types.SimpleNamespace(training_done=False),
                                  gpu=None)
    trainer = types.SimpleNamespace(vllm_generation=None)
    with pytest.raises(ModelSetupError, match="has no vLLM engine"):
        with pipeline.training(state, trainer):
            pytest.fail("trained with a trainer that does not sample with the model's engine")
    assert prepared == []
    state.model = types.SimpleNamespace()  # the cpu backend's model: no engine, nothing to check
    ran = []
    with pipeline.training(state, trainer):
        ran.append(True)
    assert ran == [True] and prepared == [trainer]


@pytest.mark.parametrize("kernel", [True, False])
def test_finish_hands_the_run_off_in_a_notebook_on_colab_without_drive(kernel, monkeypatch, tmp_path, capsys):
    """05's finish on Colab with the run on the runtime's disk: the run's zip for 06 (sharing.hand_off_run) is written
    and its download offered; under python -m helpers.train (no kernel to download through) nothing is."""
    from helpers import runtime as rt

    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    monkeypatch.setattr(rt, "in_notebook", lambda: kernel)
    monkeypatch.setattr(pipeline, "_finish", lambda *a: {"status": "finished"})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text("{}")
    state = types.SimpleNamespace(run_dir=run_dir, dist=types.SimpleNamespace(is_main=True))
    assert pipeline.finish(state, None, [], None) == {"status": "finished"}
    assert (tmp_path / "run-run.zip").is_file() is kernel
    assert ("run-run.zip" in capsys.readouterr().out) is kernel
