"""Predict how much GPU memory a GRPO run needs, before any model is loaded (docs/memory.md).

    from helpers.memory import estimate
    print(estimate("t4", gpu="t4").table())       # or: python -m helpers.memory --preset t4

architectures.py holds the models and GPUs, estimate.py the formulas and `estimate`, plot.py the picture, cli.py the
command line; this file gathers the names the rest of the kit imports. Units: "GB" is GiB, as PyTorch reports.
"""

from helpers.memory.architectures import (
    GPUS,
    MODELS,
    MemoryModelError,
    ModelArch,
    gpu_total_gb,
    model_key,
    resolve_model,
)
from helpers.memory.estimate import (
    ALLOCATOR_SLACK,
    COMPONENTS,
    CUDA_CONTEXT_GB,
    T4_BUDGET_GB,
    VLLM_CUDA_GRAPHS_GB,
    VLLM_WORKSPACE_GB,
    MemoryEstimate,
    MemorySettings,
    as_settings,
    estimate,
    settings_from_preset,
)
from helpers.memory.plot import plot_breakdown

__all__ = [
    "ALLOCATOR_SLACK", "COMPONENTS", "CUDA_CONTEXT_GB", "GPUS", "MODELS", "T4_BUDGET_GB", "VLLM_CUDA_GRAPHS_GB", "VLLM_WORKSPACE_GB",
    "MemoryEstimate", "MemoryModelError", "MemorySettings", "ModelArch", "as_settings", "estimate", "gpu_total_gb",
    "model_key", "plot_breakdown", "resolve_model", "settings_from_preset",
]
