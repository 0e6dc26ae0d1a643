import re

import pytest
from trl import GRPOConfig

from helpers import config
from helpers.runtime import fake_runtime
from helpers.config import PresetError, get_preset, grpo_config_kwargs, validate
from helpers.memory.architectures import MODELS, model_key


def test_presets_are_valid_for_their_runtimes():
    validate(get_preset("cpu"), fake_runtime("cpu"))
    validate(get_preset("t4"), fake_runtime("t4"))


def test_t4_preset_avoids_what_fails_on_a_t4():
    t4 = get_preset("t4")
    assert t4.load_in_4bit and t4.fast_inference
    assert model_key(t4.model_name) in MODELS, "helpers.memory sizes the t4 model from its architecture table"
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
    from helpers.runtime import RuntimeProblem  # the runtime's one no-GPU refusal (helpers.runtime.no_gpu)

    with pytest.raises(RuntimeProblem, match="Runtime > Change runtime type > T4 GPU"):
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


@pytest.mark.parametrize("name", ["beta", "temperature", "learning_rate", "weight_decay", "max_grad_norm",
                                  "vllm_server_timeout"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused_in_every_number_field(name, bad):
    """`--beta nan` trained an adapter of NaNs with exit 0; `--temperature inf` sampled random tokens."""
    with pytest.raises(PresetError, match=rf"^{name}=.*not a finite number.*Fix: give a finite number"):
        validate(get_preset("cpu", **{name: bad}), fake_runtime("cpu"))


def test_nan_gpu_memory_utilization_is_refused_with_a_real_example():
    example = re.escape(f"e.g. gpu_memory_utilization={get_preset('t4').gpu_memory_utilization}")  # the preset's own
    with pytest.raises(PresetError, match=rf"gpu_memory_utilization=nan: .*{example}"):
        validate(get_preset("t4", gpu_memory_utilization=float("nan")), fake_runtime("t4"))


@pytest.mark.parametrize("overrides,field,fix", [
    (dict(seed=-1), "seed", "0, 1 or 2"),
    (dict(seed=2**32), "seed", "0, 1 or 2"),
    (dict(warmup_steps=-1), "warmup_steps", "no warm-up"),
    (dict(weight_decay=-0.1), "weight_decay", "0.0"),
    (dict(max_grad_norm=0.0), "max_grad_norm", "1.0"),
    (dict(temperature=-1.0), "temperature", "0.7-1.0"),
    (dict(synthetic_levels=(99,)), "synthetic_levels", "levels 1, 2, 3"),
    (dict(synthetic_levels=()), "synthetic_levels", "levels 1, 2, 3"),
    (dict(lr_scheduler_type="bogus"), "lr_scheduler_type", "cosine"),
    (dict(lr_scheduler_type="reduce_lr_on_plateau"), "lr_scheduler_type", "constant_with_warmup"),
    (dict(optim="adamw_tourch"), "optim", "adamw_torch"),
    (dict(lora_target_modules=("nope_proj",)), "lora_target_modules", "q_proj, k_proj, v_proj"),
    (dict(lora_target_modules=("q_proj", "c_attn")), "lora_target_modules", "q_proj, k_proj, v_proj"),
    (dict(lora_target_modules=()), "lora_target_modules", "q_proj"),
    (dict(logging_steps=5, max_steps=2), "logging_steps", "<= 2"),
    (dict(eval_size=0), "eval_size", "positive integer"),
])
def test_ranges_names_and_combinations_are_refused_before_loading(overrides, field, fix):
    """Each of these failed only after the model loaded and the first evaluation ran (issue 35)."""
    with pytest.raises(PresetError) as err:
        validate(get_preset("cpu", **overrides), fake_runtime("cpu"))
    assert str(err.value).startswith(field + "=") and fix in str(err.value) and "Fix:" in str(err.value)


def test_every_lr_scheduler_and_optimizer_the_kit_accepts_is_one_transformers_has():
    """Contract with the pinned transformers: the tuples in helpers.config (no transformers import to validate) are
    its enums' values, and what they leave out is exactly what the comment there says cannot run."""
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    schedulers = {s.value for s in SchedulerType}
    assert set(config.LR_SCHEDULERS) <= schedulers
    assert schedulers - set(config.LR_SCHEDULERS) == {"reduce_lr_on_plateau", "greedy", "cosine_with_min_lr",
                                                      "cosine_warmup_with_min_lr", "warmup_stable_decay"}
    optimizers = {o.value for o in OptimizerNames}
    assert set(config.OPTIMIZERS) <= optimizers and len(set(config.OPTIMIZERS)) == len(config.OPTIMIZERS)
    left_out = optimizers - set(config.OPTIMIZERS)
    assert all(any(k in name for k in ("galore", "apollo", "lomo", "torch_4bit", "torch_8bit", "schedule_free",
                                       "grokadamw", "stable_adamw", "anyprecision", "xla", "npu"))
               for name in left_out), left_out


def test_each_kept_scheduler_builds_without_extra_arguments():
    """The schedules kept need no lr_scheduler_kwargs and no evaluation metric: transformers builds each one."""
    import torch
    from transformers.optimization import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for name in config.LR_SCHEDULERS:
        get_scheduler(name, optimizer, num_warmup_steps=1, num_training_steps=10)


def test_lora_targets_are_the_layers_of_the_presets_architectures():
    """The cpu preset's SmolLM2 is a Llama; Qwen2 names its layers the same: every LORA_TARGETS name is a module."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tiny = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, vocab_size=32)
    for model in (LlamaForCausalLM(LlamaConfig(**tiny)), Qwen2ForCausalLM(Qwen2Config(**tiny))):
        names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        assert set(config.LORA_TARGETS) <= names


def test_text_from_a_notebook_parameter_is_parsed_or_refused_with_the_parameter_name():
    """papermill -p EVAL_SIZE ten gives the string 'ten': refused naming the field and the fix (the setup cell adds
    the notebook parameter: tests/test_guard.py); '10' (papermill -r) is parsed; a YAML list becomes a tuple."""
    with pytest.raises(PresetError, match=r"eval_size='ten': is the text 'ten', not a whole number\. Fix: give a "
                                          r"whole number, e\.g\. eval_size=50"):
        get_preset("cpu", eval_size="ten")
    with pytest.raises(PresetError, match=r"per_device_train_batch_size=2\.5: is a float.*e\.g\. "
                                          r"per_device_train_batch_size=8"):
        get_preset("cpu", per_device_train_batch_size=2.5)
    with pytest.raises(PresetError, match=r"worked_example='maybe': .*True or False"):
        get_preset("cpu", worked_example="maybe")
    p = get_preset("cpu", eval_size="10", beta="0.04", worked_example="false", lora_target_modules=["q_proj"],
                   synthetic_levels="1,2")
    assert (p.eval_size, p.beta, p.worked_example, p.lora_target_modules, p.synthetic_levels) == \
        (10, 0.04, False, ("q_proj",), (1, 2))
    validate(p, fake_runtime("cpu"))


def test_a_preset_built_by_hand_with_text_in_a_number_field_is_refused():
    from dataclasses import replace

    with pytest.raises(PresetError, match=r"^max_steps='2': is the text '2', not a whole number"):
        validate(replace(get_preset("cpu"), max_steps="2"))
    with pytest.raises(PresetError, match=r"^max_steps='2': .*Fix: give a whole number, e\.g\. max_steps=") as err:
        config.check_types(replace(get_preset("cpu"), max_steps="2"))
    assert err.value.field == "max_steps" and err.value.example == get_preset("cpu").max_steps


def test_value_typing_lives_in_config_types_and_stays_importable_from_config():
    """helpers.config_types is the one home of the typing; the CLI and the guard import it from helpers.config. A
    RunOptions field has no preset to take an example from: the fix gives none."""
    from helpers import config_types
    from helpers.run.options import RunOptions

    for name in ("PresetError", "typed_fields", "typed_value", "check_types"):
        assert getattr(config, name) is getattr(config_types, name)
    assert config_types.typed_fields(RunOptions, {"keep": "3", "resume": "no"}) == {"keep": 3, "resume": False}
    with pytest.raises(PresetError, match=r"^keep='all': is the text 'all', not a whole number\. Fix: give a whole "
                                          r"number\.$"):
        config_types.typed_fields(RunOptions, {"keep": "all"})


# ---------------------------------------------------------------------------------------------- the backend

# What each preset's backend needs, as the callers ask it (helpers.backend.Backend's properties).
BACKEND_NEEDS = {  # preset: (backend, is_cpu, needs_gpu, uses_unsloth, uses_trl_vllm)
    "cpu": ("cpu", True, False, False, False),
    "t4": ("unsloth", False, True, True, False),
    "a100x2-qwen7b-lora": ("trl-vllm", False, True, False, True),
    "8xh100-qwen7b-lora": ("trl-vllm", False, True, False, True),
}


def test_every_preset_holds_a_backend_whose_properties_say_what_it_needs():
    from helpers.backend import Backend

    assert set(BACKEND_NEEDS) == set(config.PRESETS)
    for name, (value, *needs) in BACKEND_NEEDS.items():
        b = config.PRESETS[name].backend
        assert type(b) is Backend and b.value == value and b == value  # still equal to its name
        assert [b.is_cpu, b.needs_gpu, b.uses_unsloth, b.uses_trl_vllm] == needs, name
    assert fake_runtime("cpu").backend is Backend.CPU and fake_runtime("t4").backend is Backend.UNSLOTH


def test_a_backend_given_as_text_becomes_its_member_however_it_is_given(tmp_path):
    """A keyword (a notebook parameter), a hand-built Preset, the command line and a YAML --config all give the name
    as text; the Preset holds the member, so `preset.backend.needs_gpu` works whichever way it came."""
    from dataclasses import replace

    from helpers.backend import Backend
    from helpers.train import overrides_from, parse_args

    assert get_preset("cpu", backend=" unsloth ").backend is Backend.UNSLOTH
    assert replace(get_preset("cpu"), backend="trl-vllm").backend is Backend.TRL_VLLM
    assert config.Preset(**{**get_preset("t4").to_dict(), "backend": "unsloth"}) == get_preset("t4")
    assert get_preset("cpu", backend=Backend.UNSLOTH).backend is Backend.UNSLOTH
    assert get_preset("cpu", **overrides_from(parse_args(["--backend", "unsloth"]))).backend is Backend.UNSLOTH
    (tmp_path / "c.yaml").write_text("preset: cpu\nbackend: trl-vllm\n")
    args = parse_args(["--config", str(tmp_path / "c.yaml")])
    assert get_preset(args.preset, **overrides_from(args)).backend is Backend.TRL_VLLM


@pytest.mark.parametrize("given", ["keyword", "by hand", "a number"])
def test_an_unknown_backend_is_refused_with_the_valid_names(given):
    from dataclasses import replace

    with pytest.raises(PresetError, match=r"^backend=('gpu'|1): must be 'cpu', 'unsloth' or 'trl-vllm'\. Fix: pick "
                                          r"one of the three\.$") as err:
        if given == "keyword":
            get_preset("cpu", backend="gpu")
        elif given == "by hand":
            replace(get_preset("cpu"), backend="gpu")
        else:
            get_preset("cpu", backend=1)
    assert err.value.field == "backend" and err.value.example == "cpu"  # the notebook's setup cell shows 'cpu'


def test_the_command_line_refuses_an_unknown_backend_and_shows_plain_names(capsys):
    from helpers import train

    assert train.main(["--backend", "CPU"]) == 2
    assert capsys.readouterr().err == ("error: backend='CPU': must be 'cpu', 'unsloth' or 'trl-vllm'. Fix: pick one "
                                       "of the three.\n")
    assert train.main(["--preset", "t4", "--print-config"]) == 0
    assert '"backend": "unsloth",' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        train.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--backend TEXT" in help_text and "(cpu: cpu, t4: unsloth)" in help_text and "Backend." not in help_text


def test_the_backend_is_its_plain_name_in_json_and_messages_and_comes_back_the_same():
    import json

    from helpers.backend import Backend

    for name, p in config.PRESETS.items():
        text = json.dumps(p.to_dict(), default=list)
        assert f'"backend": "{p.backend.value}"' in text
        saved = json.loads(text)
        assert type(saved["backend"]) is str
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k != "name"}
        assert get_preset(name, **fields) == p, name  # what config.json holds gives the same preset back
    b = Backend.TRL_VLLM
    assert (str(b), f"{b}", f"{b:>9}", "%s" % b) == ("trl-vllm", "trl-vllm", " trl-vllm", "trl-vllm")
    assert fake_runtime("cpu").describe().endswith("(backend=cpu)")
    with pytest.raises(PresetError, match=r"applies to the cpu backend only \(backend='unsloth' samples with vLLM\)"):
        validate(get_preset("t4", cpu_bf16_sampling=True))
