import pytest
from trl import GRPOConfig

from helpers import config
from helpers.runtime import fake_runtime
from helpers.config import PresetError, get_preset, grpo_config_kwargs, validate


def test_presets_are_valid_for_their_runtimes():
    validate(get_preset("cpu"), fake_runtime("cpu"))
    validate(get_preset("t4"), fake_runtime("t4"))


def test_t4_preset_avoids_what_fails_on_a_t4():
    t4 = get_preset("t4")
    assert t4.load_in_4bit and t4.fast_inference and t4.model_name.endswith("Qwen2.5-1.5B-Instruct")
    assert t4.gpu_memory_utilization <= 0.5  # 0.9 ran out of memory in Unsloth's own T4 CI
    assert t4.max_seq_length <= 1024 and t4.lora_rank <= 16
    kw = grpo_config_kwargs(t4, fake_runtime("t4"))
    assert kw["fp16"] is True and kw["bf16"] is False  # a T4 has no bf16
    from helpers.runtime import UNSLOTH_ENV

    assert UNSLOTH_ENV["UNSLOTH_VLLM_STANDBY"] == "0"  # standby hit illegal memory access on sm_75


def test_precision_per_runtime():
    assert grpo_config_kwargs(get_preset("cpu"), fake_runtime("cpu"))["use_cpu"] is True
    assert grpo_config_kwargs(get_preset("t4"), fake_runtime("a100"))["bf16"] is True
    # The CPU demo stays on the CPU even on a GPU machine
    assert grpo_config_kwargs(get_preset("cpu"), fake_runtime("t4"))["use_cpu"] is True


def test_cpu_config_builds_a_real_grpo_config():
    cfg = config.build_grpo_config(get_preset("cpu"), fake_runtime("cpu"), output_dir="/tmp/x")
    assert isinstance(cfg, GRPOConfig)
    assert cfg.use_cpu and not cfg.bf16 and not cfg.fp16 and cfg.num_generations == 8 and cfg.beta == 0.0


@pytest.mark.parametrize("overrides,field,fix", [
    (dict(num_generations=3, per_device_train_batch_size=8), "per_device_train_batch_size", "multiple of 3"),
    (dict(max_completion_length=400, max_prompt_length=256, max_seq_length=512), "max_completion_length",
     "max_seq_length"),
    (dict(gpu_memory_utilization=1.2), "gpu_memory_utilization", "between 0 and 1"),
    (dict(gpu_memory_utilization=0.0), "gpu_memory_utilization", "between 0 and 1"),
    (dict(num_generations=1, per_device_train_batch_size=1), "num_generations", "at least 2"),
    (dict(learning_rate=0.0), "learning_rate", "positive"),
    (dict(max_steps=0), "max_steps", "positive integer"),
    (dict(temperature=0.0), "temperature", "positive"),
    (dict(dataset="mnist"), "dataset", "synthetic"),
])
def test_impossible_settings_name_the_field_and_the_fix(overrides, field, fix):
    with pytest.raises(PresetError) as err:
        validate(get_preset("cpu", **overrides))
    assert str(err.value).startswith(field + "=") and fix in str(err.value)


def test_gpu_preset_on_cpu_is_refused_before_loading():
    with pytest.raises(PresetError, match="Runtime > Change runtime type > T4 GPU"):
        validate(get_preset("t4"), fake_runtime("cpu"))


def test_8bit_optimizer_needs_a_gpu():
    with pytest.raises(PresetError, match="optim="):
        validate(get_preset("cpu", optim="adamw_8bit"), fake_runtime("cpu"))


def test_unknown_preset_and_field():
    with pytest.raises(PresetError, match="choose one of: cpu, t4"):
        get_preset("a100-giant")
    with pytest.raises(PresetError, match="unknown preset field"):
        get_preset("cpu", num_generation=4)


def test_prompts_per_step():
    assert get_preset("cpu").prompts_per_step == get_preset("cpu").per_device_train_batch_size // 8


def test_bf16_sampling_is_a_cpu_backend_setting():
    validate(get_preset("cpu", cpu_bf16_sampling=True), fake_runtime("cpu"))
    with pytest.raises(PresetError, match=r"cpu_bf16_sampling=True: applies to the cpu backend only.*vLLM.*Fix"):
        validate(get_preset("t4", cpu_bf16_sampling=True), fake_runtime("t4"))


def test_vllm_enforce_eager_applies_only_where_unsloth_starts_vllm():
    from helpers.model import unsloth_load_kwargs

    eager = get_preset("t4", vllm_enforce_eager=True)
    validate(eager, fake_runtime("t4"))
    assert unsloth_load_kwargs(eager)["enforce_eager"] is True
    with pytest.raises(PresetError, match=r"vllm_enforce_eager=True cannot apply: without fast_inference.*Fix"):
        validate(get_preset("t4", vllm_enforce_eager=True, fast_inference=False), fake_runtime("t4"))
    with pytest.raises(PresetError, match=r"vllm_enforce_eager=True cannot apply: TRL's GRPOConfig.*vllm-serve"):
        validate(get_preset("a100x2-qwen7b-lora", vllm_enforce_eager=True), num_processes=2)
    with pytest.raises(PresetError, match=r"vllm_enforce_eager=True cannot apply: .*vLLM needs a GPU"):
        validate(get_preset("cpu", vllm_enforce_eager=True))


def test_the_vllm_fields_of_the_other_backends_are_still_refused_and_allowed():
    """vllm_mode & co. configure TRL's own vLLM: refused on the unsloth backend, accepted on trl-vllm."""
    with pytest.raises(PresetError, match=r"vllm_mode='server' cannot apply: it configures TRL's own vLLM"):
        validate(get_preset("t4", vllm_mode="server"), fake_runtime("t4"))
    validate(get_preset("8xh100-qwen7b-lora"), num_processes=6)
