"""GPU memory per GPU when N training processes share the work with DeepSpeed ZeRO (lab/docs/scale-out.md).

    from helpers.memory import estimate
    from lab.zero import per_gpu_with_zero, scale_out_settings
    est = estimate(scale_out_settings("a100x2-qwen7b-lora"), gpu="a100-80", budget_gb=None)
    print(per_gpu_with_zero(est, stage=3, num_gpus=2).table())

helpers.memory models ONE process on ONE GPU. Under data parallelism every process still holds its own
micro-batch, so activations, logits, KV cache and a colocated vLLM engine stay the same per GPU; what ZeRO
changes is who holds the model states. With N processes (the ZeRO paper, Rajbhandari et al. 2020, section 5):

    stage 0 (plain DDP)  per GPU = W + L + O     + G     + rest
    stage 1              per GPU = W + L + O / N + G     + rest      (optimizer states partitioned)
    stage 2              per GPU = W + L + O / N + G / N + rest      (+ gradients partitioned)
    stage 3              per GPU = (W + L + R) / N + O / N + G / N + gather + rest   (+ parameters partitioned)

W = the weights in their load dtype (bf16 for these presets; full fine-tuning trains them in it), L = LoRA adapter
weights, O = optimizer states, G = gradients, R = a reference model (beta > 0 with full fine-tuning), gather = the
full parameters ZeRO-3 materialises for the layers in flight (modelled as 2 decoder layers: the current one and the
prefetched one).

Two consequences worth teaching:
- With LoRA, O and G cover only the adapter (~0.1 GB for a 7B at r=16), so ZeRO-1/2 save almost nothing; only
  ZeRO-3 (which shards W, the frozen base) lowers memory per GPU, at the cost of an all-gather per layer.
- TRL pushes the weights into vLLM (colocated or server) after each optimizer step; with PEFT under ZeRO-3 it
  gathers the WHOLE model at once to merge the adapter (trl/generation/vllm_generation.py, _iter_named_params),
  so for that moment every GPU holds W in full again. `sync_peak_gb` reports that moment; it bounds how far
  ZeRO-3 can lower the peak when vLLM is used.

Every number this gives is an ESTIMATE (analytic, not measured on a multi-GPU machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from helpers.config import get_preset
from helpers.memory.architectures import MemoryModelError, resolve_model
from helpers.memory.estimate import COMPONENTS, MemoryEstimate, context_and_allocator_gb, settings_from_preset
from helpers.runtime import GIB

PARAMETER_PARTS = ("weights", "lora_params", "reference_model")  # partitioned by stage 3
FORMULAS = {
    0: "per GPU = W + L + O + G + rest (plain DDP: everything replicated)",
    1: "per GPU = W + L + O/N + G + rest (optimizer states partitioned)",
    2: "per GPU = W + L + O/N + G/N + rest (optimizer states and gradients partitioned)",
    3: "per GPU = (W + L + R)/N + O/N + G/N + gather + rest (parameters partitioned too)",
}


def zero_divisors(stage: int, num_gpus: int) -> dict[str, int]:
    """How many GPUs share each model-state component at a ZeRO stage (1 = every GPU holds all of it)."""
    if stage not in (0, 1, 2, 3):
        raise MemoryModelError(f"ZeRO stage {stage!r} does not exist. Fix: use 0 (plain DDP), 1, 2 or 3.")
    if not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 1:
        raise MemoryModelError(f"num_gpus={num_gpus!r} must be a whole number >= 1.")
    n = num_gpus
    return {
        "optimizer_states": n if stage >= 1 else 1,
        "gradients": n if stage >= 2 else 1,
        **{part: (n if stage == 3 else 1) for part in PARAMETER_PARTS},
    }


def split_components(components: dict, stage: int, num_gpus: int, gather_gb: float = 0.0) -> dict:
    """One phase's components (GB, as in MemoryEstimate.components) -> the same per GPU under ZeRO.

    Model states are divided per zero_divisors; everything else (activations, logits, KV cache, vLLM, CUDA
    context) is per process and unchanged. Stage 3 adds 'zero3_gather' = gather_gb.
    """
    div = zero_divisors(stage, num_gpus)
    out = {k: (v / div[k] if k in div else v) for k, v in components.items()}
    if stage == 3:
        out["zero3_gather"] = float(gather_gb)
    return out


def layer_weight_gb(arch, dtype_bytes: int = 2) -> float:
    """One decoder layer's weights (projections + norms + biases) in GB: what ZeRO-3 gathers per layer."""
    per_layer = sum(a * b for a, b in arch.linear_shapes().values()) + 2 * arch.hidden_size
    if arch.attention_bias:
        per_layer += arch.q_dim + 2 * arch.kv_dim
    return per_layer * dtype_bytes / GIB


@dataclass
class ZeroSplit:
    """Per-GPU memory under a ZeRO stage (GB). Phases as in helpers.memory.estimate, plus the vLLM weight sync."""

    stage: int
    num_gpus: int
    generation: dict
    training: dict
    sync_peak_gb: float | None  # ZeRO-3 + vLLM: the whole model gathered to push it into vLLM
    formula: str
    notes: tuple = field(default=())

    @property
    def generation_peak_gb(self) -> float:
        return sum(self.generation.values())

    @property
    def training_peak_gb(self) -> float:
        return sum(self.training.values())

    @property
    def peak_gb(self) -> float:
        return max(self.generation_peak_gb, self.training_peak_gb, self.sync_peak_gb or 0.0)

    @property
    def peak_phase(self) -> str:
        phases = {"generation": self.generation_peak_gb, "training": self.training_peak_gb,
                  "weight sync": self.sync_peak_gb or 0.0}
        return max(phases, key=phases.get)

    def table(self) -> str:
        rows = [f"ZeRO-{self.stage} on {self.num_gpus} GPU(s), per GPU (ESTIMATE): {self.formula}"]
        for name in list(COMPONENTS) + ["zero3_gather"]:
            if name in self.training:
                rows.append(f"  {name:<28}{self.training[name]:8.2f} GB")
        rows.append(f"  {'generation phase':<28}{self.generation_peak_gb:8.2f} GB")
        rows.append(f"  {'training phase':<28}{self.training_peak_gb:8.2f} GB")
        if self.sync_peak_gb is not None:
            rows.append(f"  {'weight sync to vLLM':<28}{self.sync_peak_gb:8.2f} GB")
        rows.append(f"  {'PEAK (' + self.peak_phase + ')':<28}{self.peak_gb:8.2f} GB")
        rows += [f"  note: {n}" for n in self.notes]
        return "\n".join(rows)


def _phases(est: MemoryEstimate, server_mode: bool) -> tuple[dict, dict]:
    """Both phases' additive components as helpers.memory.estimate summed them, without the CUDA context and
    allocator slack (recomputed per GPU); in server mode HF generate's cache is on the server's GPUs, not here."""
    gen, train = ({k: v for k, v in est.phases[name].items() if k != "cuda_context_and_allocator"}
                  for name in ("generation", "training"))
    if server_mode:
        gen["kv_cache"] = 0.0
    return gen, train


def _with_context(parts: dict, dynamic: float, vllm_workspace: float) -> dict:
    """The CUDA context and allocator slack of one GPU, with vLLM's workspace (reserved, free after its profiling)."""
    return {**parts, "cuda_context_and_allocator": context_and_allocator_gb(dynamic) + vllm_workspace}


def per_gpu_with_zero(estimate_or_components, stage: int, num_gpus: int, *, gather_gb: float | None = None,
                      server_mode: bool = False, vllm_sync_gathers: bool | None = None):
    """Memory per GPU with N data-parallel processes under ZeRO `stage` (0 = plain DDP).

    estimate_or_components:
      - a helpers.memory.MemoryEstimate (one process, one GPU): returns a ZeroSplit with both phases and, under
        ZeRO-3 with vLLM, the weight-sync moment. gather_gb defaults to 2 decoder layers in 16 bits.
        server_mode=True: generation runs on the vLLM server's own GPUs, so the trainer GPUs hold no KV cache.
      - a dict of components in GB (any of helpers.memory.COMPONENTS): returns the per-GPU dict (split_components);
        gather_gb defaults to 0.
    Formulas: see the module docstring (and FORMULAS[stage]).
    """
    if isinstance(estimate_or_components, dict):
        return split_components(estimate_or_components, stage, num_gpus, gather_gb or 0.0)
    if not isinstance(estimate_or_components, MemoryEstimate):
        raise MemoryModelError("pass a helpers.memory.MemoryEstimate or a dict of components in GB.")
    est = estimate_or_components
    if est.weights_inside_vllm:
        raise MemoryModelError(
            "this estimate has vLLM sharing the training weights (Unsloth fast_inference), a single-GPU path. "
            "Fix: estimate the multi-GPU recipe with scale_out_settings(preset) (TRL's own vLLM, separate copy)."
        )
    notes = []
    if gather_gb is None:
        gather_gb = 0.0
        if stage == 3 and est.settings is not None:
            gather_gb = 2 * layer_weight_gb(resolve_model(est.settings.model), 2)
            notes.append(f"zero3_gather: 2 decoder layers in 16 bits ({gather_gb:.2f} GB), current + prefetched")
    gen, train = _phases(est, server_mode)
    gen = _with_context(split_components(gen, stage, num_gpus, gather_gb), gen["kv_cache"], est.vllm_workspace)
    train = _with_context(split_components(train, stage, num_gpus, gather_gb), est.activations + est.logits,
                          est.vllm_workspace)
    uses_vllm = bool(est.vllm_reservation) or server_mode
    if vllm_sync_gathers is None:
        vllm_sync_gathers = uses_vllm and est.lora_params > 0
    sync = None
    if stage == 3 and vllm_sync_gathers:
        # every parameter of the model gathered at once (PEFT merge before the push), on top of the sharded states
        sync = sum(v for k, v in gen.items() if k != "zero3_gather") + est.weights + est.lora_params - (
            gen["weights"] + gen["lora_params"])
        notes.append("weight sync: TRL gathers the whole PEFT model under ZeRO-3 to merge the adapter before pushing "
                     "it into vLLM, so for that moment each GPU holds the full 16-bit weights")
    if server_mode:
        notes.append("server mode: generation (KV cache, vLLM's weights) lives on the server's GPUs")
    return ZeroSplit(stage=stage, num_gpus=num_gpus, generation=gen, training=train, sync_peak_gb=sync,
                     formula=FORMULAS[stage], notes=tuple(notes))


def scale_out_settings(preset_or_name):
    """helpers.memory.MemorySettings for a multi-GPU (backend 'trl-vllm') preset, one process on one GPU.

    Differs from settings_from_preset in what TRL's own vLLM does: colocated, it holds a SECOND 16-bit copy of the
    weights inside gpu_memory_utilization x card (vllm_shares_weights=False); in server mode no engine is on the
    trainer GPU (engine 'hf'; pass server_mode=True to per_gpu_with_zero so no KV cache is counted).
    """
    preset = get_preset(preset_or_name) if isinstance(preset_or_name, str) else preset_or_name
    s = settings_from_preset(preset)
    if not preset.backend.uses_trl_vllm:
        return s
    if preset.vllm_mode == "colocate":
        return replace(s, engine="vllm", gpu_memory_utilization=preset.gpu_memory_utilization,
                       vllm_shares_weights=False, chunked_logits=False)
    return replace(s, engine="hf", gpu_memory_utilization=None, vllm_shares_weights=False, chunked_logits=False)
