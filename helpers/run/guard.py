"""The one check before any model loads, shared by the notebooks' setup cell, the pipeline's first step and
`python -m helpers.train` (before it imports TRL): validate the preset and the run options on this runtime, predict
the GPU memory it needs, refuse with the fix, and import Unsloth first on the GPU path (its patches must be in place
before transformers/TRL are imported)."""

from __future__ import annotations

import math
from pathlib import Path

from helpers import data
from helpers import runtime as rt
from helpers.config import PRESETS, Preset, PresetError, check_types, validate
from helpers.memory import T4_BUDGET_GB, MemoryModelError, estimate
from helpers.run.options import DASHBOARD_MODES, RunOptions


def need_free_gb(preset: Preset, runtime: rt.Runtime) -> float:
    """Free GPU memory to ask for before loading: the predicted peak (helpers.memory).

    A model the memory table does not know (e.g. the cpu preset's embedded one, or your own) has no prediction:
    then the t4 preset's 7 GB budget. Any other error is a bug and is raised."""
    try:
        return float(estimate(preset, gpu=runtime.total_gpu_gb, budget_gb=None).peak_gb)
    except MemoryModelError:
        return T4_BUDGET_GB


def _refuse(given: str, problem: str, fix: str):
    raise PresetError(f"{given}: {problem}. Fix: {fix}.")


def validate_options(options: RunOptions, runtime: rt.Runtime) -> None:
    """Raise PresetError naming the flag and the fix for run options that cannot work (RunOptions' one check)."""
    check_types(options)
    if options.dashboard not in DASHBOARD_MODES:
        _refuse(f"--dashboard {options.dashboard!r}", "is not a dashboard mode",
                f"use one of {', '.join(DASHBOARD_MODES)}")
    if options.save_steps is not None and options.save_steps < 0:
        _refuse(f"--save-steps {options.save_steps}", "cannot be negative",
                "use 0 (no checkpoints) or a number of steps")
    if options.keep < 1 and options.save_steps != 0:
        _refuse(f"--keep {options.keep}", "checkpoints are written, so at least the latest must be kept to resume from",
                "use --keep 1 or more, or --save-steps 0 to write no checkpoints")
    if options.pass_k_samples < 0:
        _refuse(f"--pass-k-samples {options.pass_k_samples}", "cannot be negative",
                "use 0 (greedy only) or a number of samples per question, e.g. 4")
    if options.pass_k_samples and not options.evaluate:
        _refuse(f"--pass-k-samples {options.pass_k_samples} with --no-evaluate", "pass@k is part of the evaluation",
                "drop --no-evaluate, or use --pass-k-samples 0")
    if not math.isfinite(options.reward_timeout) or options.reward_timeout < 0:
        _refuse(f"--reward-timeout {options.reward_timeout}", "is not a number of seconds >= 0",
                "use a number of seconds, e.g. 300, or 0 for no limit")
    for flag, folder in (("--run-dir", options.run_dir), ("--checkpoint-dir", options.checkpoint_dir)):
        if folder is not None and _holds_the_kit(folder):
            _refuse(f"{flag} {folder}", f"is the kit's own folder {KIT_ROOT} or a folder above it: the run's files "
                    "would land beside (or around) the kit's own, and --overwrite would remove them there",
                    f"give the run a folder of its own, e.g. {flag} runs/demo (an unset shell variable in "
                    f'{flag} "$RUN" gives an empty path, the current folder)')
    if options.drive and not runtime.on_colab:
        _refuse("--drive", "Google Drive is mounted only on Colab, and this is not Colab",
                "leave --drive off: checkpoints go to <run-dir>/trainer on this disk (or --checkpoint-dir FOLDER)")


KIT_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or the installed copy) holding helpers/


def _holds_the_kit(folder) -> bool:
    """The folder is the kit's checkout or one above it (the current folder, when `--run-dir ''` reaches us)."""
    where = Path(folder).expanduser().resolve()
    return where == KIT_ROOT or where in KIT_ROOT.parents


def check_before_loading(preset: Preset, runtime: rt.Runtime | None = None, num_processes: int = 1,
                         options: RunOptions | None = None) -> list[str]:
    """Raise PresetError / RuntimeProblem with the fix when this preset (and these run options) cannot run here;
    return soft warnings. runtime: the machine (None: detected now)."""
    runtime = runtime if runtime is not None else rt.detect()
    validate(preset, runtime, num_processes=num_processes)
    if options is not None:
        validate_options(options, runtime)
    if options is None or options.evaluate:
        usual = PRESETS.get(preset.name)  # a preset's own eval_size is known to be there: no count
        if found := data.eval_size_problem(preset, known_good=usual.eval_size if usual else 0):
            _refuse(f"--eval-size {preset.eval_size}", *found)
    want_gpu = preset.backend.uses_unsloth  # rt.check then also asks for Unsloth and vLLM
    warnings = rt.check(runtime, want_gpu=want_gpu, need_free_gb=need_free_gb(preset, runtime) if want_gpu else None)
    rt.start_gpu_process(preset.backend)  # Unsloth before TRL (which a reward module may import)
    if want_gpu and preset.fast_inference and (reason := rt.vllm_disabled_reason()):
        raise rt.RuntimeProblem(rt.vllm_disabled_message(reason))  # importing Unsloth just disabled vLLM
    return warnings
