"""Predict how much GPU memory a GRPO run needs, before any model is loaded.

    python -m helpers.memory --preset t4
    python -m helpers.memory --model qwen3-4b --quant 4bit --num-generations 4 --batch-size 4 \
        --max-completion-length 1536 --gpu-memory-utilization 0.9 --json

`estimate(preset_or_settings, gpu="t4")` returns a `MemoryEstimate`: every component in GB, the peak, and whether
it fits a budget. Every formula is in the docstring of the function that computes it and in docs/memory.md.

Units: "GB" here is what PyTorch reports, i.e. GiB (2**30 bytes); a T4 shows 14.56 of them (field notes §7).

What this is and is not: an analytic model built from the architecture and the training settings, checked
against published figures (docs/memory.md). Constants marked ASSUMPTION are not measured in this kit;
scripts/benchmark_memory.py measures the model against real runs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.runtime import GIB
from helpers.config import LORA_TARGETS, fraction_problem, group_problem, whole_number_problem

# --------------------------------------------------------------------------------------------- constants

# The GPU memory the t4 preset is sized for on a free Colab T4 (14.56 GiB card): the default budget everywhere.
T4_BUDGET_GB = 7.0
# bitsandbytes NF4 with double quantization (what Unsloth's -bnb-4bit checkpoints use): 4 bits per weight, one
# 8-bit absmax per 64-weight block, one fp32 absmax per 256 such blocks.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
# Logits for the policy loss: the 16-bit logits tensor (2 bytes) plus its fp32 log-softmax (4 bytes).
# TRL issue 3678 measured ~5.6 bytes per logit element at the peak of the log-prob forward alone.
LOGITS_BYTES_PER_ELEMENT = 2 + 4
# ASSUMPTION: the CUDA context (kernels, cuBLAS workspaces) takes 0.3-0.5 GB that PyTorch's allocator never sees.
CUDA_CONTEXT_GB = 0.4
# ASSUMPTION: PyTorch's caching allocator reserves ~10% more than the short-lived tensors need (fragmentation).
ALLOCATOR_SLACK = 0.10
# ASSUMPTION: inside its reservation vLLM needs ~0.5 GB beside weights and KV cache (profiled activations,
# sampler, CUDA graphs, LoRA slots); the rest of the reservation becomes KV cache.
VLLM_WORKSPACE_GB = 0.5
# ASSUMPTION (fitted): with UNSLOTH_VLLM_STANDBY=1 Unsloth replaces the requested gpu_memory_utilization with
# its own target. Unsloth's T4 CI peaks (Qwen3-4B at a requested 0.5: 13.4-13.8 GB; Qwen3-0.6B at 0.95:
# 11.3-11.8 GB) are both matched within ~10% by a reservation of ~0.76 x card. Two points, one GPU: a fit.
STANDBY_UTILIZATION_FIT = 0.76
# FITTED (results/gpu/, H100 as a T4): transformers generate through Unsloth holds, at the prompt's prefill, about
# 1.6 x one layer's activations per prompt token beside the KV cache (fit over 5 runs: Qwen2.5-1.5B fp16 with 6 or
# 8 completions, 256 or 512 completion tokens; SmolLM2-135M fp32; each within 5%).
GENERATE_WORKSPACE_LAYERS = 1.6
# FITTED: Unsloth's GRPO loss computes logits in chunks it sizes at run time (unsloth_logit_chunk_multiplier and a
# mini-batch tuned to free memory); measured, the logits part did not grow from 256 to 512 completion tokens, so
# at most this many completion positions of one row are modelled as alive at once.
CHUNKED_LOGIT_TOKENS = 256
# Bytes of optimizer state per trainable parameter.
OPTIMIZER_BYTES = {
    "adamw_torch": 8, "adamw_torch_fused": 8, "adamw_hf": 8, "adamw": 8, "adam": 8, "paged_adamw_32bit": 8,
    "adamw_8bit": 2, "adamw_bnb_8bit": 2, "paged_adamw_8bit": 2, "adam8bit": 2,
    "lion_32bit": 4, "lion_8bit": 1, "paged_lion_8bit": 1, "sgd": 0, "adafactor": 4,
}

# --------------------------------------------------------------------------------------------- models


class MemoryModelError(ValueError):
    """Settings the memory model cannot estimate; the message names the fix."""


@dataclass(frozen=True)
class ModelArch:
    """The numbers of a decoder-only transformer that decide its memory (from its config.json)."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of the seven projections in one decoder layer."""
        h, q, kv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def linear_params(self) -> int:
        """Weights of all projection layers (what 4-bit quantizes): layers x sum(in x out)."""
        return self.num_layers * sum(a * b for a, b in self.linear_shapes().values())

    @property
    def other_params(self) -> int:
        """Embeddings, lm_head (unless tied), norms and biases: kept in 16 bits even in a 4-bit model."""
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        norms = (2 * self.num_layers + 1) * self.hidden_size
        bias = self.num_layers * (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        return emb + head + norms + bias

    @property
    def total_params(self) -> int:
        return self.linear_params + self.other_params

    def lora_params(self, rank: int, targets=LORA_TARGETS) -> int:
        """LoRA adds A (r x in) and B (out x r) to each targeted projection: layers x sum r x (in + out)."""
        shapes = self.linear_shapes()
        unknown = sorted(set(targets) - set(shapes))
        if unknown:
            raise MemoryModelError(f"unknown LoRA target module(s) {unknown}. Fix: use names from {list(shapes)}.")
        return self.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)


def _arch(name, h, layers, heads, kv, inter, vocab, tied, head_dim=None, bias=False) -> ModelArch:
    return ModelArch(name, h, layers, heads, kv, head_dim or h // heads, inter, vocab, tied, bias)


# From each model's public config.json (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
# head_dim, intermediate_size, vocab_size, tie_word_embeddings; Qwen2.5 has q/k/v biases).
MODELS: dict[str, ModelArch] = {
    "qwen2.5-0.5b": _arch("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, True, bias=True),
    "qwen2.5-1.5b": _arch("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, True, bias=True),
    "qwen2.5-3b": _arch("Qwen2.5-3B", 2048, 36, 16, 2, 11008, 151936, True, bias=True),
    "qwen2.5-7b": _arch("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, False, bias=True),
    "qwen3-0.6b": _arch("Qwen3-0.6B", 1024, 28, 16, 8, 3072, 151936, True, head_dim=128),
    "qwen3-1.7b": _arch("Qwen3-1.7B", 2048, 28, 16, 8, 6144, 151936, True, head_dim=128),
    "qwen3-4b": _arch("Qwen3-4B", 2560, 36, 32, 8, 9728, 151936, True, head_dim=128),
    "qwen3-8b": _arch("Qwen3-8B", 4096, 36, 32, 8, 12288, 151936, False, head_dim=128),
    "llama-3.2-1b": _arch("Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, True, head_dim=64),
    "llama-3.2-3b": _arch("Llama-3.2-3B", 3072, 28, 24, 8, 8192, 128256, True, head_dim=128),
    "llama-3.1-8b": _arch("Llama-3.1-8B", 4096, 32, 32, 8, 14336, 128256, False, head_dim=128),
    "gemma-3-1b": _arch("Gemma-3-1B", 1152, 26, 4, 1, 6912, 262144, True, head_dim=256),
    "smollm2-135m": _arch("SmolLM2-135M", 576, 30, 9, 3, 1536, 49152, True),
}

# GPU memory as PyTorch reports it (GiB). T4: measured by Unsloth's CI (field notes §7); the others are the
# card's nvidia-smi size less the same ~0.45 GiB the T4 loses (ASSUMPTION, not measured here).
GPUS: dict[str, float] = {"t4": 14.56, "l4": 22.0, "a10g": 22.0, "a100-40": 39.4, "a100-80": 79.1, "h100": 79.1}
GPU_ALIASES = {"a100": "a100-40", "a100-40gb": "a100-40", "a100-80gb": "a100-80", "h100-80": "h100"}


def _normalize(name: str) -> str:
    n = name.strip().split(" (")[0].rstrip("/").split("/")[-1].lower()
    for suffix in ("-unsloth-bnb-4bit", "-bnb-4bit", "-instruct", "-it", "-base", "-pt"):
        if n.endswith(suffix):
            n = n[: -len(suffix)]
    return n


def arch_from_config(path) -> ModelArch:
    """A ModelArch from a Hugging Face config.json (a file, or a folder holding one; text_config is followed)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    cfg = json.loads(path.read_text())
    cfg = cfg.get("text_config", cfg)
    try:
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        return ModelArch(
            name=path.parent.name or path.stem,
            hidden_size=h,
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or h // heads,
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        )
    except KeyError as err:
        raise MemoryModelError(f"{path} lacks {err} . Fix: pass a decoder-only model's config.json.") from None


def resolve_model(model) -> ModelArch:
    """A ModelArch from a table key ('qwen2.5-1.5b'), a hub id ('unsloth/Qwen2.5-1.5B-Instruct'), a
    config.json path, or a ModelArch."""
    if isinstance(model, ModelArch):
        return model
    if str(model).endswith(".json") or Path(str(model)).is_dir() and (Path(str(model)) / "config.json").is_file():
        if not Path(str(model)).exists():
            raise MemoryModelError(f"config file {model} does not exist. Fix: give the path to a config.json.")
        return arch_from_config(model)
    key = _normalize(str(model))
    if key in MODELS:
        return MODELS[key]
    raise MemoryModelError(
        f"unknown model {model!r}. Fix: use one of {', '.join(MODELS)}, or pass the path to the model's config.json."
    )


def gpu_total_gb(gpu) -> float:
    """Total memory (GiB, as PyTorch reports it) of a GPU name from GPUS, or a number of GB."""
    if isinstance(gpu, (int, float)):
        return float(gpu)
    key = str(gpu).lower().replace(" ", "")
    key = GPU_ALIASES.get(key, key)
    if key not in GPUS:
        raise MemoryModelError(f"unknown GPU {gpu!r}. Fix: use one of {', '.join(GPUS)} (or a number of GB).")
    return GPUS[key]


# --------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class MemorySettings:
    """What decides GRPO's memory. Field names match helpers.config.Preset where both have one."""

    model: object = "qwen2.5-1.5b"  # table key, hub id, config.json path, or ModelArch
    quant: str = "4bit"  # "4bit" (bitsandbytes NF4), "16bit", or "32bit" (the CPU demo's fp32)
    lora_rank: int = 16  # 0 = full fine-tuning
    lora_target_modules: tuple[str, ...] = LORA_TARGETS
    num_generations: int = 6
    per_device_train_batch_size: int = 6  # completions, not prompts
    gradient_accumulation_steps: int = 1
    max_prompt_length: int = 256
    max_completion_length: int = 256
    beta: float = 0.0
    gradient_checkpointing: bool = True
    optim: str = "adamw_8bit"
    engine: str = "vllm"  # "vllm" (colocated, Unsloth fast_inference) or "hf" (transformers generate)
    gpu_memory_utilization: float | None = 0.3
    standby: bool = False
    standby_utilization: float | None = None  # the fraction standby really reserves, if known
    vllm_shares_weights: bool = True  # Unsloth fast_inference: one copy of the weights for vLLM and training
    chunked_logits: bool = True  # Unsloth's memory-efficient GRPO loss
    offload_checkpoints: bool = False  # Unsloth's checkpointing ("unsloth") keeps each layer's input on the CPU
    compute_dtype_bytes: int = 2  # fp16/bf16 activations; 4 for the CPU demo's fp32

    def validate(self) -> None:
        """The rules a preset has too come from helpers.config (one home); the rest are the memory model's."""
        def bad(msg):
            raise MemoryModelError(msg)

        def refuse(found):
            if found:
                name, problem, fix = found
                bad(f"{name}={getattr(self, name)!r}: {problem}. Fix: {fix}.")

        for name in ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
                     "max_prompt_length", "max_completion_length"):
            refuse(whole_number_problem(name, getattr(self, name)))
        refuse(group_problem(self.num_generations, self.per_device_train_batch_size, self.gradient_accumulation_steps))
        if not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            bad(f"lora_rank={self.lora_rank!r}. Fix: a positive integer (0 means full fine-tuning).")
        if self.quant not in ("4bit", "16bit", "32bit"):
            bad(f"quant={self.quant!r}. Fix: use '4bit' or '16bit'.")
        if self.quant == "4bit" and self.lora_rank == 0:
            bad("a 4-bit model cannot be fully fine-tuned. Fix: set lora_rank (e.g. 16) or quant='16bit'.")
        if self.engine not in ("vllm", "hf"):
            bad(f"engine={self.engine!r}. Fix: use 'vllm' or 'hf'.")
        for name in ("gpu_memory_utilization", "standby_utilization"):
            refuse(fraction_problem(name, getattr(self, name)))
        if self.engine == "vllm" and self.gpu_memory_utilization is None:
            bad("engine='vllm' needs gpu_memory_utilization. Fix: set it, e.g. 0.3 on a T4.")
        if self.beta < 0:
            bad(f"beta={self.beta} cannot be negative. Fix: 0.0 (no reference model) or a small positive value.")
        if self.optim not in OPTIMIZER_BYTES:
            bad(f"optim={self.optim!r} is not modelled. Fix: use one of {', '.join(OPTIMIZER_BYTES)}.")
        resolve_model(self.model)


def settings_from_preset(preset) -> MemorySettings:
    """Map a helpers.config.Preset onto MemorySettings.

    model_name -> table key, load_in_4bit -> quant, fast_inference -> engine 'vllm' (+ its utilization),
    backend 'unsloth' -> Unsloth's chunked GRPO loss; the CPU backend trains in fp32 with TRL's own loss.
    Standby is off: the kit always turns it off (helpers.model.UNSLOTH_ENV); `--standby` asks what it would change.
    """
    cpu = preset.backend == "cpu"
    return MemorySettings(
        model=preset.model_name,
        quant="4bit" if preset.load_in_4bit else ("32bit" if cpu else "16bit"),
        lora_rank=preset.lora_rank,
        lora_target_modules=tuple(preset.lora_target_modules),
        num_generations=preset.num_generations,
        per_device_train_batch_size=preset.per_device_train_batch_size,
        gradient_accumulation_steps=preset.gradient_accumulation_steps,
        max_prompt_length=preset.max_prompt_length,
        max_completion_length=preset.max_completion_length,
        beta=preset.beta,
        gradient_checkpointing=preset.gradient_checkpointing,
        optim=preset.optim,
        engine="vllm" if preset.fast_inference else "hf",
        gpu_memory_utilization=preset.gpu_memory_utilization,
        standby=False,
        chunked_logits=preset.backend == "unsloth",
        offload_checkpoints=preset.backend == "unsloth" and preset.gradient_checkpointing,
        compute_dtype_bytes=4 if cpu else 2,
    )


def as_settings(preset_or_settings, **overrides) -> MemorySettings:
    if isinstance(preset_or_settings, MemorySettings):
        s = preset_or_settings
    elif hasattr(preset_or_settings, "model_name") and hasattr(preset_or_settings, "backend"):
        s = settings_from_preset(preset_or_settings)
    elif isinstance(preset_or_settings, str):
        from helpers.config import PresetError, get_preset

        try:
            s = settings_from_preset(get_preset(preset_or_settings))
        except PresetError as err:
            raise MemoryModelError(str(err)) from None
    else:
        raise MemoryModelError(f"cannot estimate {preset_or_settings!r}. Fix: pass a Preset, a preset name or MemorySettings.")
    return replace(s, **overrides) if overrides else s


# --------------------------------------------------------------------------------------------- formulas


def weight_bytes(arch: ModelArch, quant: str) -> float:
    """16-bit: params x 2 bytes. 4-bit: projection weights x NF4_BYTES_PER_PARAM (~0.516 B) + the rest
    (embeddings, lm_head, norms) x 2 bytes. 32-bit: params x 4 bytes."""
    if quant == "4bit":
        return arch.linear_params * NF4_BYTES_PER_PARAM + arch.other_params * 2
    return arch.total_params * (4 if quant == "32bit" else 2)


def trainable_params(arch: ModelArch, s: MemorySettings) -> int:
    """LoRA: layers x sum over targets of r x (in + out). Full fine-tuning (rank 0): every parameter."""
    return arch.total_params if s.lora_rank == 0 else arch.lora_params(s.lora_rank, s.lora_target_modules)


def activation_bytes_per_token_layer(arch: ModelArch, dtype_bytes: int) -> int:
    """Tensors one decoder layer keeps for backward, per token: dtype x (4h + 2q + 2kv + 4I).

    4h: the two RMSNorm inputs and outputs; 2q: the rotated queries and the attention output (o_proj input);
    2kv: keys and values; 4I: gate, up, silu(gate) and their product (down_proj input). With FlashAttention/SDPA
    no seq x seq score matrix is stored. LoRA reads the same inputs, so it adds only r-wide tensors (ignored).
    """
    h, q, kv, i = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.intermediate_size
    return dtype_bytes * (4 * h + 2 * q + 2 * kv + 4 * i)


def activation_bytes(arch: ModelArch, s: MemorySettings) -> float:
    """tokens = per_device_train_batch_size x (prompt + completion).

    Without checkpointing: tokens x layers x per-layer bytes. With it: each layer's input (tokens x layers x h x
    dtype) is kept and one layer is recomputed at a time (+ tokens x per-layer bytes); Unsloth's checkpointing
    (offload_checkpoints) keeps those layer inputs on the CPU, so only the recomputed layer is on the GPU
    (measured: results/gpu/, docs/memory.md). Both add the final hidden states (tokens x h x dtype x 2).
    """
    tokens = s.per_device_train_batch_size * (s.max_prompt_length + s.max_completion_length)
    per_layer = activation_bytes_per_token_layer(arch, s.compute_dtype_bytes)
    final = tokens * arch.hidden_size * s.compute_dtype_bytes * 2
    if s.gradient_checkpointing:
        kept_inputs = 0 if s.offload_checkpoints else arch.num_layers * arch.hidden_size * s.compute_dtype_bytes
        return tokens * (kept_inputs + per_layer) + final
    return tokens * arch.num_layers * per_layer + final


def logits_bytes(arch: ModelArch, s: MemorySettings) -> float:
    """batch x completion_len x vocab x bytes per element (16-bit logits + their fp32 log-softmax = 6 bytes; an
    fp32 model's logits are 4 bytes, so 8).

    TRL keeps only the completion positions (logits_to_keep). Unsloth's memory-efficient GRPO loss computes
    logits in chunks (chunked_logits=True): one row of at most CHUNKED_LOGIT_TOKENS positions (fitted).
    """
    per_element = s.compute_dtype_bytes + 4
    if s.chunked_logits:
        return min(s.max_completion_length, CHUNKED_LOGIT_TOKENS) * arch.vocab_size * per_element
    return s.per_device_train_batch_size * s.max_completion_length * arch.vocab_size * per_element


def generate_workspace_bytes(arch: ModelArch, s: MemorySettings) -> float:
    """transformers generate's prefill: generation batch x prompt tokens x GENERATE_WORKSPACE_LAYERS x one layer's
    activations per token (fitted, see the constant)."""
    gen_batch = s.per_device_train_batch_size * s.gradient_accumulation_steps
    return gen_batch * s.max_prompt_length * GENERATE_WORKSPACE_LAYERS * activation_bytes_per_token_layer(
        arch, s.compute_dtype_bytes)


def kv_bytes_per_token(arch: ModelArch, dtype_bytes: int = 2) -> int:
    """K and V for every layer: 2 x layers x kv_heads x head_dim x dtype."""
    return 2 * arch.num_layers * arch.kv_dim * dtype_bytes


# --------------------------------------------------------------------------------------------- estimate

COMPONENTS = ("weights", "lora_params", "optimizer_states", "gradients", "activations", "logits",
              "vllm_reservation", "kv_cache", "reference_model", "cuda_context_and_allocator")


@dataclass
class MemoryEstimate:
    """Where the memory goes (GB = GiB as PyTorch reports), the peak and whether it fits `budget_gb`.

    The component fields hold each thing's full size. vllm_reservation is gpu_memory_utilization x card and
    already contains the weights when vLLM shares them (weights_inside_vllm) and its KV cache (kv_cache).
    For the HF engine kv_cache is transformers generate's cache plus its prefill workspace, alive during generation only.
    `components` gives the parts of the peak phase, which add up to peak_gb.
    """

    model: str
    gpu: str
    gpu_total_gb: float
    budget_gb: float
    weights: float
    lora_params: float
    optimizer_states: float
    gradients: float
    activations: float
    logits: float
    vllm_reservation: float
    kv_cache: float
    reference_model: float
    cuda_context_and_allocator: float
    weights_inside_vllm: bool
    vllm_starts: bool
    generation_peak_gb: float
    training_peak_gb: float
    peak_phase: str
    components: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # {"generation": parts, "training": parts}, each like components
    notes: tuple = ()
    settings: MemorySettings | None = None

    @property
    def peak_gb(self) -> float:
        return max(self.generation_peak_gb, self.training_peak_gb)

    @property
    def fits(self) -> bool:
        """The peak is within the budget and vLLM has room for at least one full sequence of KV cache."""
        return self.peak_gb <= self.budget_gb and self.vllm_starts

    @property
    def margin_gb(self) -> float:
        """budget - peak (negative: over budget)."""
        return self.budget_gb - self.peak_gb

    def to_json(self) -> dict:
        return {"peak_gb": round(self.peak_gb, 3), "fits": self.fits, "budget_gb": self.budget_gb,
                "components": {k: round(v, 3) for k, v in self.components.items()}}

    def table(self) -> str:
        rows = [f"GRPO memory estimate: {self.model} on {self.gpu} ({self.gpu_total_gb:.2f} GB), budget {self.budget_gb:.2f} GB"]
        for name in COMPONENTS:
            value = getattr(self, name)
            extra = ""
            if name == "weights" and self.weights_inside_vllm:
                extra = "  (inside vllm_reservation, shared)"
            if name == "kv_cache" and self.vllm_reservation:
                extra = "  (inside vllm_reservation)"
            rows.append(f"  {name:<28}{value:8.2f} GB{extra}")
        rows.append(f"  {'generation phase':<28}{self.generation_peak_gb:8.2f} GB")
        rows.append(f"  {'training phase':<28}{self.training_peak_gb:8.2f} GB")
        verdict = "fits" if self.fits else "does NOT fit"
        rows.append(f"  {'PEAK (' + self.peak_phase + ')':<28}{self.peak_gb:8.2f} GB  -> {verdict} "
                    f"(margin {self.margin_gb:+.2f} GB)")
        rows += [f"  note: {n}" for n in self.notes]
        return "\n".join(rows)


def estimate(preset_or_settings, gpu="t4", budget_gb: float | None = T4_BUDGET_GB, **overrides) -> MemoryEstimate:
    """Predict GRPO's GPU memory for a Preset (or preset name, or MemorySettings) on `gpu`.

    Two phases; the peak is the larger:
      generation = context + weights + LoRA + optimizer states + reference model + engine memory
                   (vLLM: its whole reservation; HF: the generate KV cache)
      training   = context + weights + LoRA + optimizer states + gradients + activations + logits
                   + reference model + vLLM's reservation (it stays allocated while training)
    With vLLM sharing the weights (Unsloth fast_inference) they are counted once, inside the reservation.
    budget_gb=None uses the whole card.
    """
    s = as_settings(preset_or_settings, **overrides)
    s.validate()
    arch = resolve_model(s.model)
    total = gpu_total_gb(gpu)
    budget = total if budget_gb is None else float(budget_gb)
    notes = []

    w = weight_bytes(arch, s.quant) / GIB
    n_train = trainable_params(arch, s)
    full_ft = s.lora_rank == 0
    master_bytes = 4  # LoRA adapters are fp32 (PEFT autocasts them); full FT keeps fp32 master weights
    lora = 0.0 if full_ft else n_train * master_bytes / GIB
    if full_ft:
        w = arch.total_params * 4 / GIB  # fp32 master weights, 16-bit compute under autocast
        notes.append("full fine-tuning: fp32 master weights + fp32 gradients + optimizer states on every parameter")
    grads = n_train * 4 / GIB
    opt = n_train * OPTIMIZER_BYTES[s.optim] / GIB
    acts = activation_bytes(arch, s) / GIB
    logits = logits_bytes(arch, s) / GIB
    ref = 0.0
    if s.beta > 0:
        if full_ft:
            ref = w
            notes.append(f"beta={s.beta} > 0 with full fine-tuning: TRL loads a second (reference) copy of the model")
        else:
            notes.append(f"beta={s.beta} > 0 with LoRA: the reference is the base model with the adapter disabled, "
                         "no second copy (its log-prob pass runs before the policy's, under no_grad)")

    reservation = kv = 0.0
    inside = False
    vllm_starts = True
    if s.engine == "vllm":
        util = s.gpu_memory_utilization
        if s.standby:
            util = s.standby_utilization if s.standby_utilization is not None else STANDBY_UTILIZATION_FIT
            notes.append(
                f"standby: reservation modelled as {util:.2f} x card whatever was requested (Unsloth's standby replaces "
                "gpu_memory_utilization with its own target; the KV-cache reservation stays during training, field "
                "notes §7). "
                + ("Given by standby_utilization." if s.standby_utilization is not None else
                   "0.76 is a fit to two Unsloth T4 CI peaks, not a documented constant (docs/memory.md).")
            )
        reservation = util * total
        vllm_weights = w if s.vllm_shares_weights else weight_bytes(arch, s.quant) / GIB
        inside = s.vllm_shares_weights
        kv = reservation - vllm_weights - VLLM_WORKSPACE_GB
        need = (s.max_prompt_length + s.max_completion_length) * kv_bytes_per_token(arch) / GIB
        if kv < need:
            vllm_starts = False
            notes.append(
                f"vLLM would not start: {util:.2f} x {total:.2f} GB = {reservation:.2f} GB leaves {kv:.2f} GB for KV cache "
                f"after {vllm_weights:.2f} GB weights, less than one sequence needs ({need:.3f} GB) -> 'No available "
                "memory for the cache blocks'. Fix: raise gpu_memory_utilization"
            )
        kv = max(kv, 0.0)
    else:
        gen_batch = s.per_device_train_batch_size * s.gradient_accumulation_steps
        kv = gen_batch * (s.max_prompt_length + s.max_completion_length) * kv_bytes_per_token(arch, s.compute_dtype_bytes) / GIB
        kv += generate_workspace_bytes(arch, s) / GIB

    # Additive parts: when vLLM shares the weights they are listed under weights and the reservation's
    # remainder (KV cache + workspace) under vllm_reservation, so the parts still add up to the peak.
    vllm_rest = max(reservation - (w if inside else 0.0), 0.0)
    persistent = dict(weights=w, lora_params=lora, optimizer_states=opt, reference_model=ref)

    def ctx(dynamic):
        return CUDA_CONTEXT_GB + ALLOCATOR_SLACK * dynamic

    gen = dict(persistent, gradients=0.0, activations=0.0, logits=0.0, vllm_reservation=vllm_rest,
               kv_cache=kv if s.engine == "hf" else 0.0)
    gen["cuda_context_and_allocator"] = ctx(gen["kv_cache"])
    train = dict(persistent, gradients=grads, activations=acts, logits=logits, vllm_reservation=vllm_rest, kv_cache=0.0)
    train["cuda_context_and_allocator"] = ctx(acts + logits)
    gen_total, train_total = sum(gen.values()), sum(train.values())
    phase, parts = ("training", train) if train_total >= gen_total else ("generation", gen)
    parts = {k: parts[k] for k in COMPONENTS}
    if logits > acts and not s.chunked_logits:
        notes.append("logits are the largest activation: batch x completion x vocab; chunking (Unsloth's GRPO loss, "
                     "Liger) removes the batch factor")
    return MemoryEstimate(
        model=arch.name, gpu=str(gpu), gpu_total_gb=total, budget_gb=budget,
        weights=w, lora_params=lora, optimizer_states=opt, gradients=grads, activations=acts, logits=logits,
        vllm_reservation=reservation, kv_cache=kv, reference_model=ref,
        cuda_context_and_allocator=parts["cuda_context_and_allocator"],
        weights_inside_vllm=inside and s.engine == "vllm", vllm_starts=vllm_starts,
        generation_peak_gb=gen_total, training_peak_gb=train_total, peak_phase=phase,
        components=parts, phases={"generation": gen, "training": train}, notes=tuple(notes), settings=s,
    )


# --------------------------------------------------------------------------------------------- plot

_COLORS = {"weights": "#4c72b0", "lora_params": "#55a868", "optimizer_states": "#8172b2", "gradients": "#64b5cd",
           "activations": "#dd8452", "logits": "#c44e52", "vllm_reservation": "#937860", "kv_cache": "#da8bc3",
           "reference_model": "#8c8c8c", "cuda_context_and_allocator": "#ccb974"}


def plot_breakdown(estimates_or_one, budget_gb: float = T4_BUDGET_GB, gpu_total_gb: float = 14.56, ax=None, labels=None):
    """Stacked bars of each estimate's peak-phase components, with lines at the budget and the card; returns the figure."""
    import matplotlib.pyplot as plt

    ests = [estimates_or_one] if isinstance(estimates_or_one, MemoryEstimate) else list(estimates_or_one)
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(ests) + 3), 4.5))
    else:
        fig = ax.figure
    labels = labels or [f"{e.model}\n{e.peak_gb:.1f} GB" for e in ests]
    bottoms = [0.0] * len(ests)
    for name in COMPONENTS:
        values = [e.components.get(name, 0.0) for e in ests]
        if not any(v > 0.005 for v in values):
            continue
        label = "vllm_reservation (beyond the weights)" if name == "vllm_reservation" else name
        ax.bar(range(len(ests)), values, bottom=bottoms, color=_COLORS[name], label=label, width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.axhline(budget_gb, color="green", linestyle="--", label=f"budget {budget_gb:g} GB")
    ax.axhline(gpu_total_gb, color="red", linestyle=":", label=f"T4 as PyTorch sees it {gpu_total_gb:g} GB")
    ax.set_xticks(range(len(ests)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("predicted GPU memory (GB)")
    ax.set_title("Where GRPO's GPU memory goes (peak phase)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m helpers.memory",
                                 description="Predict GRPO's GPU memory before training (GB = GiB, as PyTorch reports).")
    ap.add_argument("--preset", help="start from a preset of helpers.config (cpu, t4); flags below override it")
    ap.add_argument("--model", help=f"one of {', '.join(MODELS)}, a hub id, or a config.json path")
    ap.add_argument("--quant", choices=("4bit", "16bit"))
    ap.add_argument("--lora-rank", type=int, help="0 = full fine-tuning")
    ap.add_argument("--num-generations", type=int)
    ap.add_argument("--batch-size", type=int, help="per_device_train_batch_size (counts completions)")
    ap.add_argument("--grad-accum", type=int, help="gradient_accumulation_steps")
    ap.add_argument("--max-prompt-length", type=int)
    ap.add_argument("--max-completion-length", type=int)
    ap.add_argument("--beta", type=float)
    ap.add_argument("--optim", help=f"one of {', '.join(OPTIMIZER_BYTES)}")
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--chunked-logits", action=argparse.BooleanOptionalAction, default=None,
                    help="Unsloth's memory-efficient GRPO loss")
    ap.add_argument("--engine", choices=("vllm", "hf"))
    ap.add_argument("--gpu-memory-utilization", type=float)
    ap.add_argument("--standby", action="store_true", default=None)
    ap.add_argument("--gpu", default="t4", help=f"one of {', '.join(GPUS)}")
    ap.add_argument("--budget-gb", type=float, default=T4_BUDGET_GB)
    ap.add_argument("--json", action="store_true", help='print {"peak_gb", "fits", "budget_gb", "components"}')
    return ap


_FLAG_FIELDS = {"model": "model", "quant": "quant", "lora_rank": "lora_rank", "num_generations": "num_generations",
                "batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
                "max_prompt_length": "max_prompt_length", "max_completion_length": "max_completion_length",
                "beta": "beta", "optim": "optim", "gradient_checkpointing": "gradient_checkpointing",
                "chunked_logits": "chunked_logits", "engine": "engine",
                "gpu_memory_utilization": "gpu_memory_utilization", "standby": "standby"}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        base = as_settings(args.preset) if args.preset else MemorySettings()
        overrides = {f: getattr(args, a) for a, f in _FLAG_FIELDS.items() if getattr(args, a) is not None}
        if overrides.get("engine") == "hf" and "gpu_memory_utilization" not in overrides:
            overrides["gpu_memory_utilization"] = None
        est = estimate(replace(base, **overrides), gpu=args.gpu, budget_gb=args.budget_gb)
    except MemoryModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(est.to_json()) if args.json else est.table())
    return 0

