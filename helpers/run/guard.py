"""The one check before any model loads, shared by the notebooks' setup cell and the pipeline's first step:
validate the preset on this runtime, predict the GPU memory it needs, refuse with the fix, and import Unsloth first
on the GPU path (its patches must be in place before transformers/TRL are imported)."""

from __future__ import annotations

from helpers import runtime as rt
from helpers.config import Preset, validate
from helpers.memory import T4_BUDGET_GB, MemoryModelError, estimate


def need_free_gb(preset: Preset, runtime: rt.Runtime) -> float:
    """Free GPU memory to ask for before loading: the predicted peak (helpers.memory).

    A model the memory table does not know (e.g. the cpu preset's embedded one, or your own) has no prediction:
    then the t4 preset's 7 GB budget. Any other error is a bug and is raised."""
    try:
        return float(estimate(preset, gpu=runtime.total_gpu_gb, budget_gb=None).peak_gb)
    except MemoryModelError:
        return T4_BUDGET_GB


def check_before_loading(preset: Preset, runtime: rt.Runtime | None = None, num_processes: int = 1) -> list[str]:
    """Raise PresetError / RuntimeProblem with the fix when this preset cannot run here; return soft warnings.
    runtime: the machine (None: detected now)."""
    runtime = runtime if runtime is not None else rt.detect()
    validate(preset, runtime, num_processes=num_processes)
    want_gpu = preset.backend == "unsloth"
    warnings = rt.check(runtime, want_gpu=want_gpu, need_free_gb=need_free_gb(preset, runtime) if want_gpu else None)
    rt.start_gpu_process(preset.backend)  # Unsloth before TRL (which a reward module may import)
    if want_gpu and preset.fast_inference and (reason := rt.vllm_disabled_reason()):
        raise rt.RuntimeProblem(rt.vllm_disabled_message(reason))  # importing Unsloth just disabled vLLM
    return warnings
