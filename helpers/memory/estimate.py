"""The memory model itself: its constants, the settings it reads, one formula per component, and `estimate`, which
adds them up into the two phases of a GRPO step (generation, training) and returns a `MemoryEstimate`.

Every formula is in the docstring of the function that computes it and in docs/memory.md. Units: "GB" is what
PyTorch reports, i.e. GiB (2**30 bytes). Constants marked ASSUMPTION are not measured in this kit; FITTED ones were
fitted to the GPU runs in results/gpu/ (lab/benchmark_memory.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from helpers.config import (
    LORA_TARGETS,
    PresetError,
    fraction_problem,
    get_preset,
    group_problem,
    whole_number_problem,
)
from helpers.memory.architectures import MemoryModelError, ModelArch, gpu_total_gb, resolve_model
from helpers.runtime import GIB

# --------------------------------------------------------------------------------------------- constants

# The GPU memory the t4 preset is sized for on a free Colab T4 (14.56 GiB card): the default budget everywhere.
T4_BUDGET_GB = 7.0
# bitsandbytes NF4 with double quantization (what Unsloth's -bnb-4bit checkpoints use): 4 bits per weight, one
# 8-bit absmax per 64-weight block, one fp32 absmax per 256 such blocks.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
# ASSUMPTION: the CUDA context (kernels, cuBLAS workspaces) takes 0.3-0.5 GB that PyTorch's allocator never sees.
CUDA_CONTEXT_GB = 0.4
# ASSUMPTION: PyTorch's caching allocator reserves ~10% more than the short-lived tensors need (fragmentation).
ALLOCATOR_SLACK = 0.10
# MEASURED (results/gpu/2026-11-27-h100-as-t4-vllm.json: t4 preset, vLLM 0.25.1 under the Colab pin's rules): of its
# 4.16 GiB reservation vLLM kept 0.31 GiB beside the weights (1.11) and the KV cache (2.74): the profiling run's
# activations, sampler, LoRA slots. The rest of the reservation becomes KV cache.
VLLM_WORKSPACE_GB = 0.3
# MEASURED (same record): capturing the CUDA graphs (FULL_AND_PIECEWISE, with LoRA) took 0.17 GiB, outside
# gpu_memory_utilization under vLLM 0.19.1's rules (the Colab pin; 0.21+ counts them inside). None when eager.
VLLM_CUDA_GRAPHS_GB = 0.17
# STATED (not measured): how much the t4 preset's vLLM reservation adds above what the run needs (weights + its KV
# cache + the workspace): the vLLM terms rest on one record (its KV cache point +5%), whose FP4 weights are not the
# pinned checkpoint's NF4 with its 16-bit skip list, and a T4's free memory at load was never measured.
VLLM_SIZING_MARGIN = 0.25
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
# How the base weights are loaded, and the bytes of one unquantized parameter in that dtype.
LOAD_DTYPES = ("4bit", "16bit", "32bit")
PARAMETER_BYTES = {"16bit": 2, "32bit": 4}
# Optimizers whose states follow the parameter's dtype (torch.optim's AdamW allocates exp_avg and exp_avg_sq with
# torch.zeros_like(param); transformers' Adafactor with .to(grad)): how many parameter-shaped states each keeps.
STATES_LIKE_THE_PARAMETER = {"adamw_torch": 2, "adamw_torch_fused": 2, "adamw_hf": 2, "adamw": 2, "adam": 2,
                             "adafactor": 1, "sgd": 0}
# bitsandbytes optimizers keep their own state dtype whatever the parameter's (uint8 at 8 bits, fp32 at 32 bits:
# bitsandbytes/optim/optimizer.py, Optimizer2State.init_state): bytes per parameter.
BITSANDBYTES_STATE_BYTES = {"adamw_8bit": 2, "adamw_bnb_8bit": 2, "paged_adamw_8bit": 2, "adam8bit": 2,
                            "paged_adamw_32bit": 8, "lion_32bit": 4, "lion_8bit": 1, "paged_lion_8bit": 1}
OPTIMIZERS = (*STATES_LIKE_THE_PARAMETER, *BITSANDBYTES_STATE_BYTES)

COMPONENTS = ("weights", "lora_params", "optimizer_states", "gradients", "activations", "logits",
              "vllm_reservation", "kv_cache", "reference_model", "cuda_context_and_allocator")

# --------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class MemorySettings:
    """What decides GRPO's memory. Field names match helpers.config.Preset where both have one."""

    model: object = "qwen2.5-1.5b"  # table key, hub id, config.json path, or ModelArch
    # How the base weights are loaded: "4bit" (bitsandbytes NF4), "16bit" (bf16/fp16) or "32bit" (fp32, the cpu
    # backend). Full fine-tuning keeps weights, gradients and optimizer states in this dtype (docs/memory.md).
    load_dtype: str = "4bit"
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
    vllm_cuda_graphs: bool = True  # vLLM captures CUDA graphs (off with vllm_enforce_eager)
    chunked_logits: bool = True  # Unsloth's memory-efficient GRPO loss
    offload_checkpoints: bool = False  # Unsloth's checkpointing ("unsloth") keeps each layer's input on the CPU
    compute_dtype_bytes: int = 2  # fp16/bf16 activations (autocast too); 4 for the CPU demo's fp32

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
        if self.load_dtype not in LOAD_DTYPES:
            bad(f"load_dtype={self.load_dtype!r}. Fix: use one of {', '.join(LOAD_DTYPES)}.")
        if self.load_dtype == "4bit" and self.lora_rank == 0:
            bad("a 4-bit model cannot be fully fine-tuned. Fix: set lora_rank (e.g. 16) or load_dtype='16bit'.")
        if self.engine not in ("vllm", "hf"):
            bad(f"engine={self.engine!r}. Fix: use 'vllm' or 'hf'.")
        for name in ("gpu_memory_utilization", "standby_utilization"):
            refuse(fraction_problem(name, getattr(self, name)))
        if self.engine == "vllm" and self.gpu_memory_utilization is None:
            bad("engine='vllm' needs gpu_memory_utilization. Fix: set it, e.g. 0.3 on a T4.")
        if self.beta < 0:
            bad(f"beta={self.beta} cannot be negative. Fix: 0.0 (no reference model) or a small positive value.")
        if self.optim not in OPTIMIZERS:
            bad(f"optim={self.optim!r} is not modelled. Fix: use one of {', '.join(OPTIMIZERS)}.")
        resolve_model(self.model)


# The helpers.config.Preset fields settings_from_preset reads: `python -m helpers.memory` has a flag for each,
# generated as `python -m helpers.train` generates it (helpers/cli.py).
PRESET_FIELDS_READ = ("model_name", "backend", "load_in_4bit", "fast_inference", "gpu_memory_utilization", "lora_rank",
                      "lora_target_modules", "num_generations", "per_device_train_batch_size",
                      "gradient_accumulation_steps", "max_prompt_length", "max_completion_length", "beta", "optim",
                      "gradient_checkpointing", "vllm_enforce_eager")


def preset_load_dtype(preset) -> str:
    """What the kit loads for a preset (helpers/model.py): the cpu backend fp32 (load_cpu, dtype=torch.float32);
    load_in_4bit NF4; otherwise 16 bits (Unsloth's dtype=None picks bf16, or fp16 on a T4; trl-vllm asks for bf16)."""
    if preset.load_in_4bit:
        return "4bit"
    return "32bit" if preset.backend.is_cpu else "16bit"


def settings_from_preset(preset) -> MemorySettings:
    """Map a helpers.config.Preset onto MemorySettings (it reads PRESET_FIELDS_READ).

    model_name -> table key, the load dtype from preset_load_dtype, fast_inference -> engine 'vllm' (+ its
    utilization), backend 'unsloth' -> Unsloth's chunked GRPO loss; the CPU backend trains in fp32 with TRL's own
    loss. Standby is off: the kit always turns it off (helpers.runtime.UNSLOTH_ENV); `standby=True` asks what it would
    change.
    """
    cpu = preset.backend.is_cpu
    return MemorySettings(
        model=preset.model_name,
        load_dtype=preset_load_dtype(preset),
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
        vllm_cuda_graphs=not preset.vllm_enforce_eager,
        chunked_logits=preset.backend.uses_unsloth,
        offload_checkpoints=preset.backend.uses_unsloth and preset.gradient_checkpointing,
        compute_dtype_bytes=4 if cpu else 2,
    )


def as_settings(preset_or_settings, **overrides) -> MemorySettings:
    """MemorySettings from MemorySettings, a Preset or a preset name, with MemorySettings fields overridden."""
    if isinstance(preset_or_settings, MemorySettings):
        s = preset_or_settings
    elif hasattr(preset_or_settings, "model_name") and hasattr(preset_or_settings, "backend"):
        s = settings_from_preset(preset_or_settings)
    elif isinstance(preset_or_settings, str):
        try:
            s = settings_from_preset(get_preset(preset_or_settings))
        except PresetError as err:
            raise MemoryModelError(str(err)) from None
    else:
        raise MemoryModelError(f"cannot estimate {preset_or_settings!r}. Fix: pass a Preset, a preset name or MemorySettings.")
    return replace(s, **overrides) if overrides else s


# --------------------------------------------------------------------------------------------- formulas


def weight_bytes(arch: ModelArch, load_dtype: str) -> float:
    """16-bit: params x 2 bytes. 4-bit: projection weights x NF4_BYTES_PER_PARAM (~0.516 B) + the rest
    (embeddings, lm_head, norms) x 2 bytes. 32-bit: params x 4 bytes."""
    if load_dtype == "4bit":
        return arch.linear_params * NF4_BYTES_PER_PARAM + arch.other_params * 2
    return arch.total_params * PARAMETER_BYTES[load_dtype]


def trainable_params(arch: ModelArch, s: MemorySettings) -> int:
    """LoRA: layers x sum over targets of r x (in + out). Full fine-tuning (rank 0): every parameter."""
    return arch.total_params if s.lora_rank == 0 else arch.lora_params(s.lora_rank, s.lora_target_modules)


def trainable_param_bytes(s: MemorySettings) -> int:
    """Bytes of one trainable parameter, and of its gradient: LoRA adapters are fp32 (PEFT upcasts them,
    autocast_adapter_dtype=True); full fine-tuning trains the loaded parameters in their own dtype."""
    return 4 if s.lora_rank else PARAMETER_BYTES[s.load_dtype]


def optimizer_bytes_per_param(optim: str, param_bytes: int) -> int:
    """bitsandbytes optimizers: their fixed state bytes; torch's: states x the parameter's bytes (AdamW on bf16
    parameters keeps bf16 exp_avg and exp_avg_sq: 4 bytes, not 8)."""
    if optim in BITSANDBYTES_STATE_BYTES:
        return BITSANDBYTES_STATE_BYTES[optim]
    return STATES_LIKE_THE_PARAMETER[optim] * param_bytes


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
    fp32 model's logits are 4 bytes, so 8). TRL issue 3678 measured ~5.6 bytes per logit element at the peak of the
    log-prob forward alone.

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


def kv_cache_gb(arch: ModelArch, sequences: int, tokens: int, dtype_bytes: int = 2) -> float:
    """The KV cache (GB) of `sequences` sequences of `tokens` tokens each: sequences x tokens x kv_bytes_per_token.
    vLLM keeps K and V in the compute dtype (fp16 on a T4: 2 bytes), whatever the weights' 4 bits."""
    return sequences * tokens * kv_bytes_per_token(arch, dtype_bytes) / GIB


def vllm_utilization_for(weights_gb: float, kv_gb: float, free_gb: float, margin: float = VLLM_SIZING_MARGIN,
                         workspace_gb: float = VLLM_WORKSPACE_GB) -> float:
    """The gpu_memory_utilization that holds the weights, that KV cache and vLLM's workspace, times (1 + margin), as
    a fraction of the memory free at load (what Unsloth multiplies it by: utilization_base_gb)."""
    return (weights_gb + kv_gb + workspace_gb) * (1 + margin) / free_gb


def vllm_sizing(preset_or_settings, gpu="t4", margin: float = VLLM_SIZING_MARGIN) -> tuple[float, float]:
    """(KV cache GB, gpu_memory_utilization) a run needs from vLLM: the sequences it samples at once (its batch of
    completions, x gradient accumulation) of prompt + completion tokens, with the load dtype's weights, on `gpu`.
    The t4 preset's reservation is sized_utilization of this (helpers/config.py; tests/test_vllm_sizing.py)."""
    s = as_settings(preset_or_settings)
    arch = resolve_model(s.model)
    kv = kv_cache_gb(arch, s.per_device_train_batch_size * s.gradient_accumulation_steps,
                     s.max_prompt_length + s.max_completion_length, s.compute_dtype_bytes)
    free = utilization_base_gb(s, gpu_total_gb(gpu))
    return kv, vllm_utilization_for(weight_bytes(arch, s.load_dtype) / GIB, kv, free, margin)


def sized_utilization(preset_or_settings, gpu="t4", margin: float = VLLM_SIZING_MARGIN) -> float:
    """vllm_sizing's utilization rounded up to the hundredth: rounding up only adds room (at most 0.01 x the memory
    free at load, 0.14 GB on a T4), and a preset is written with two decimals."""
    return math.ceil(round(vllm_sizing(preset_or_settings, gpu, margin)[1] * 100, 6)) / 100


def context_and_allocator_gb(dynamic_gb: float) -> float:
    """The CUDA context plus the allocator's slack on a phase's short-lived tensors."""
    return CUDA_CONTEXT_GB + ALLOCATOR_SLACK * dynamic_gb


# --------------------------------------------------------------------------------------------- the steps of estimate


@dataclass(frozen=True)
class ModelStates:
    """What training holds through the whole run (GB): the weights, the LoRA adapter, its gradients and optimizer
    states, and the reference model."""

    weights: float
    lora_params: float
    gradients: float
    optimizer_states: float
    reference_model: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineMemory:
    """The generation engine (GB): vLLM's reservation (weights inside it when shared, and its KV cache) and its CUDA
    graphs beside it, or transformers generate's KV cache and prefill workspace (reservation 0)."""

    reservation: float
    kv_cache: float
    weights_inside: bool
    starts: bool
    notes: tuple[str, ...] = ()
    cuda_graphs: float = 0.0
    workspace: float = 0.0  # inside the reservation, cached by PyTorch's allocator but free after vLLM's profiling


def full_finetuning_note(s: MemorySettings) -> str:
    """What full fine-tuning keeps, by load dtype and optimizer (the evidence is in docs/memory.md)."""
    if s.optim in BITSANDBYTES_STATE_BYTES:
        kept, optimizer = "weights and gradients", (f"; {s.optim} (bitsandbytes) keeps "
                                                    f"{BITSANDBYTES_STATE_BYTES[s.optim]} bytes of state per parameter "
                                                    "whatever the parameter's dtype")
    else:
        kept, optimizer = f"weights, gradients and {s.optim} states", ""
    if s.load_dtype == "32bit":
        return (f"full fine-tuning from an fp32 load: {kept} in fp32 (the weights are the master copy; bf16/fp16 "
                f"autocast only computes in 16 bits){optimizer}")
    return (f"full fine-tuning from a 16-bit load (bf16=True): {kept} stay 16-bit, no fp32 master copy{optimizer}. "
            "fp16 parameters with fp16=True stop at GradScaler ('Attempting to unscale FP16 gradients'): without "
            "bf16 (a T4) load in fp32, load_dtype='32bit'")


def model_states(arch: ModelArch, s: MemorySettings) -> ModelStates:
    """weights = weight_bytes(load dtype); trainable x trainable_param_bytes for the adapter (LoRA) and for the
    gradients; trainable x optimizer_bytes_per_param for the optimizer; a reference copy of the weights only for
    full fine-tuning with beta > 0 (with LoRA TRL disables the adapter instead)."""
    n_train = trainable_params(arch, s)
    param_bytes = trainable_param_bytes(s)
    full_ft = s.lora_rank == 0
    weights = weight_bytes(arch, s.load_dtype) / GIB
    notes = [full_finetuning_note(s)] if full_ft else []
    reference = 0.0
    if s.beta > 0 and full_ft:
        reference = weights
        notes.append(f"beta={s.beta} > 0 with full fine-tuning: TRL loads a second (reference) copy of the model, "
                     "here in the load dtype (TRL loads it with model_init_kwargs, whose dtype defaults to fp32)")
    elif s.beta > 0:
        notes.append(f"beta={s.beta} > 0 with LoRA: the reference is the base model with the adapter disabled, "
                     "no second copy (its log-prob pass runs before the policy's, under no_grad)")
    return ModelStates(
        weights=weights,
        lora_params=0.0 if full_ft else n_train * param_bytes / GIB,
        gradients=n_train * param_bytes / GIB,
        optimizer_states=n_train * optimizer_bytes_per_param(s.optim, param_bytes) / GIB,
        reference_model=reference,
        notes=tuple(notes),
    )


def utilization_base_gb(s: MemorySettings, total_gb: float) -> float:
    """The memory gpu_memory_utilization is a fraction of: through Unsloth (weights shared, no standby) the memory free
    at load, since unsloth_zoo's approximate_vllm_memory_usage multiplies the utilization by it ("actual GPU
    utilization = 28.54%" for 0.3 in the H100-as-T4 record); a standalone vLLM takes the fraction of the card."""
    return total_gb - CUDA_CONTEXT_GB if s.vllm_shares_weights and not s.standby else total_gb


def vllm_memory(arch: ModelArch, s: MemorySettings, total_gb: float) -> EngineMemory:
    """reservation = utilization x card (standby: its own fraction), and through Unsloth utilization x the memory
    free at load; KV cache = reservation - weights - VLLM_WORKSPACE_GB; CUDA graphs beside the reservation; vLLM does
    not start without KV cache for one full sequence."""
    notes = []
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
    base = utilization_base_gb(s, total_gb)  # the memory free at load through Unsloth, else the card
    reservation = util * base
    weights = weight_bytes(arch, s.load_dtype) / GIB  # shared or its own copy: the same bytes inside the reservation
    kv = reservation - weights - VLLM_WORKSPACE_GB
    need = (s.max_prompt_length + s.max_completion_length) * kv_bytes_per_token(arch) / GIB
    if kv < need:
        of = "the memory free at load" if base != total_gb else "the card"
        notes.append(
            f"vLLM would not start: its reservation, gpu_memory_utilization x {of} = {util:g} x {base:.2f} GB = "
            f"{reservation:.2f} GB, cannot hold the weights ({weights:.2f} GB), its workspace ({VLLM_WORKSPACE_GB:g} "
            f"GB) and the KV cache of one full sequence ({need:.3f} GB): it stops with 'No available memory for the "
            "cache blocks' before any step. Fix: raise gpu_memory_utilization"
        )
    return EngineMemory(reservation=reservation, kv_cache=max(kv, 0.0), weights_inside=s.vllm_shares_weights,
                        starts=kv >= need, notes=tuple(notes),
                        cuda_graphs=VLLM_CUDA_GRAPHS_GB if s.vllm_cuda_graphs else 0.0,
                        workspace=min(VLLM_WORKSPACE_GB, max(reservation - weights, 0.0)))


def hf_generate_memory(arch: ModelArch, s: MemorySettings) -> EngineMemory:
    """generation batch x (prompt + completion) x kv_bytes_per_token, plus generate's prefill workspace; alive
    during generation only."""
    gen_batch = s.per_device_train_batch_size * s.gradient_accumulation_steps
    kv = gen_batch * (s.max_prompt_length + s.max_completion_length) * kv_bytes_per_token(arch, s.compute_dtype_bytes)
    return EngineMemory(reservation=0.0, kv_cache=(kv + generate_workspace_bytes(arch, s)) / GIB,
                        weights_inside=False, starts=True)


def phase_components(states: ModelStates, engine: EngineMemory, activations: float, logits: float) -> dict:
    """{"generation": parts, "training": parts}, each part in GB and additive (they sum to the phase's peak).

    generation = context + weights + LoRA + optimizer states + reference + (vLLM reservation | HF generate's cache)
    training   = context + weights + LoRA + optimizer states + gradients + activations + logits + reference
                 + vLLM's reservation (it stays allocated while training)
    With vLLM sharing the weights they are listed under weights and the reservation's remainder (KV cache) with the
    CUDA graphs under vllm_reservation, so they are counted once. vLLM's workspace is reserved but not allocated
    after its profiling run: it is counted under cuda_context_and_allocator.
    """
    vllm_rest = max(engine.reservation - (states.weights if engine.weights_inside else 0.0) - engine.workspace, 0.0)
    vllm_rest += engine.cuda_graphs if engine.reservation else 0.0
    persistent = dict(weights=states.weights, lora_params=states.lora_params,
                      optimizer_states=states.optimizer_states, reference_model=states.reference_model)
    hf_cache = 0.0 if engine.reservation else engine.kv_cache
    gen = dict(persistent, gradients=0.0, activations=0.0, logits=0.0, vllm_reservation=vllm_rest, kv_cache=hf_cache)
    gen["cuda_context_and_allocator"] = context_and_allocator_gb(hf_cache) + engine.workspace
    train = dict(persistent, gradients=states.gradients, activations=activations, logits=logits,
                 vllm_reservation=vllm_rest, kv_cache=0.0)
    train["cuda_context_and_allocator"] = context_and_allocator_gb(activations + logits) + engine.workspace
    return {name: {k: parts[k] for k in COMPONENTS} for name, parts in (("generation", gen), ("training", train))}


# --------------------------------------------------------------------------------------------- estimate


@dataclass
class MemoryEstimate:
    """Where the memory goes (GB = GiB as PyTorch reports), the peak and whether it fits `budget_gb`.

    The component fields hold each thing's full size. vllm_reservation is gpu_memory_utilization x the memory free at
    load through Unsloth (x the card otherwise: helpers.memory.estimate.utilization_base_gb) and already contains the weights when vLLM shares them (weights_inside_vllm) and its KV cache (kv_cache).
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
    vllm_workspace: float = 0.0  # inside vllm_reservation, counted under cuda_context_and_allocator (phase_components)
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

    The peak is the larger of the two phases (phase_components); the parts come from model_states, vllm_memory or
    hf_generate_memory, activation_bytes and logits_bytes. budget_gb=None uses the whole card.
    """
    s = as_settings(preset_or_settings, **overrides)
    s.validate()
    arch = resolve_model(s.model)
    total = gpu_total_gb(gpu)
    states = model_states(arch, s)
    engine = vllm_memory(arch, s, total) if s.engine == "vllm" else hf_generate_memory(arch, s)
    acts, logits = activation_bytes(arch, s) / GIB, logits_bytes(arch, s) / GIB
    phases = phase_components(states, engine, acts, logits)
    gen_total, train_total = sum(phases["generation"].values()), sum(phases["training"].values())
    peak_phase = "training" if train_total >= gen_total else "generation"
    notes = [*states.notes, *engine.notes]
    if logits > acts and not s.chunked_logits:
        notes.append("logits are the largest activation: batch x completion x vocab; chunking (Unsloth's GRPO loss, "
                     "Liger) removes the batch factor")
    return MemoryEstimate(
        model=arch.name, gpu=str(gpu), gpu_total_gb=total, budget_gb=total if budget_gb is None else float(budget_gb),
        weights=states.weights, lora_params=states.lora_params, optimizer_states=states.optimizer_states,
        gradients=states.gradients, activations=acts, logits=logits, vllm_reservation=engine.reservation,
        kv_cache=engine.kv_cache, reference_model=states.reference_model,
        cuda_context_and_allocator=phases[peak_phase]["cuda_context_and_allocator"],
        weights_inside_vllm=engine.weights_inside, vllm_starts=engine.starts,
        generation_peak_gb=gen_total, training_peak_gb=train_total, peak_phase=peak_phase,
        components=dict(phases[peak_phase]), vllm_workspace=engine.workspace, phases=phases, notes=tuple(notes), settings=s,
    )
