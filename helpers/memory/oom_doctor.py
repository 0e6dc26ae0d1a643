"""Turn a CUDA out-of-memory error into a short, ordered list of settings to change.

    from helpers.memory.oom_doctor import oom_advice
    with oom_advice(preset, gpu="t4"):
        trainer.train()          # on an OOM: prints the original error line and the fixes, then re-raises

`cheapest_fixes(preset, budget_gb)` walks the levers from the one that costs the run least (an 8-bit optimizer)
to the one that costs most (fewer generations per prompt), and for each takes the smallest change that makes the
memory model (helpers.memory) predict a fit; if one lever is not enough it takes that lever as far as is sensible
and moves on. Savings are the model's predictions, not measurements.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field, replace

from helpers.memory.architectures import gpu_total_gb, resolve_model
from helpers.memory.estimate import (
    utilization_base_gb,
    MemoryEstimate,
    MemorySettings,
    as_settings,
    estimate,
    kv_cache_gb,
    vllm_utilization_for,
    weight_bytes,
)
from helpers.runtime import GIB

# Levers, cheapest first, with what each costs the run (shown to the student).
LEVERS = (
    ("optim", "8-bit AdamW states: 1/4 of the optimizer memory, same training in practice"),
    ("gradient_checkpointing", "recomputes each layer in backward: ~20-30% slower steps"),
    ("beta", "drops the KL penalty (TRL's default since 0.19)"),
    ("gpu_memory_utilization", "smaller vLLM KV cache: generation may batch less and run slower"),
    ("per_device_train_batch_size", "fewer completions per backward pass; gradient_accumulation_steps rises so each "
                                    "step still sees the same groups: slower, same learning signal"),
    ("lora_rank", "a smaller adapter: less capacity to change the model"),
    ("max_completion_length", "answers are cut shorter: long reasoning is truncated and scores worse"),
    ("num_generations", "fewer completions per prompt: noisier advantages, more groups with zero reward spread"),
)
COST_RANK = {name: i for i, (name, _) in enumerate(LEVERS)}

OOM_PATTERNS = (
    "cuda out of memory",
    "outofmemoryerror",
    "no available memory for the cache blocks",
    "insufficient memory",
    "less than desired gpu memory utilization",
    "cublas_status_alloc_failed",
    "cuda error: out of memory",
    "hip out of memory",
)


@dataclass(frozen=True)
class Fix:
    """One change: setting current -> suggested, and what the memory model predicts it saves."""

    setting: str
    current: object
    suggested: object
    saving_gb: float
    peak_after_gb: float
    cost: str
    also: dict = field(default_factory=dict)  # companion changes, e.g. gradient_accumulation_steps

    def __str__(self) -> str:
        extra = "".join(f", {k} {v[0]} -> {v[1]}" for k, v in self.also.items())
        return (f"{self.setting}: {self.current} -> {self.suggested}{extra}  (saves ~{self.saving_gb:.2f} GB, "
                f"predicted peak {self.peak_after_gb:.2f} GB; cost: {self.cost})")


def _peak(s: MemorySettings, gpu, budget) -> MemoryEstimate:
    return estimate(s, gpu=gpu, budget_gb=budget)


def _min_utilization(s: MemorySettings, gpu) -> float:
    """The smallest utilization (rounded up to 0.05) that leaves vLLM KV cache for one full sequence: lesson 05's
    sizing (helpers.memory.estimate.vllm_utilization_for) for one sequence, with no margin."""
    arch = resolve_model(s.model)
    kv = kv_cache_gb(arch, 1, s.max_prompt_length + s.max_completion_length)
    least = vllm_utilization_for(weight_bytes(arch, s.load_dtype) / GIB, kv,
                                 utilization_base_gb(s, gpu_total_gb(gpu)), margin=0.0)
    return min(0.95, max(0.05, round(-(-least // 0.05) * 0.05, 2)))


def _candidates(name: str, s: MemorySettings, gpu) -> list[tuple[object, dict]]:
    """Values to try for one lever, mildest first: [(new value, {other field: new value})]."""
    if name == "optim":
        return [] if s.optim.endswith("8bit") or s.optim == "sgd" else [("adamw_8bit", {})]
    if name == "gradient_checkpointing":
        return [] if s.gradient_checkpointing else [(True, {})]
    if name == "beta":
        return [(0.0, {})] if s.beta > 0 else []
    if name == "gpu_memory_utilization":
        if s.engine != "vllm" or s.standby:
            return []
        lo, u, out = _min_utilization(s, gpu), s.gpu_memory_utilization, []
        v = round(u - 0.05, 2)
        while v >= lo - 1e-9:
            out.append((v, {}))
            v = round(v - 0.05, 2)
        return out
    if name == "per_device_train_batch_size":
        total = s.per_device_train_batch_size * s.gradient_accumulation_steps
        return [(d, {"gradient_accumulation_steps": total // d})
                for d in range(s.per_device_train_batch_size - 1, 0, -1) if total % d == 0]
    if name == "lora_rank":
        out, r = [], s.lora_rank // 2
        while s.lora_rank and r >= 4:
            out.append((r, {}))
            r //= 2
        return out
    if name == "max_completion_length":
        out, c = [], s.max_completion_length
        for f in (0.75, 0.5, 0.375, 0.25):
            v = max(64, int(c * f) // 32 * 32)
            if v < c and v not in [o[0] for o in out]:
                out.append((v, {}))
        return out
    if name == "num_generations":
        out = []
        for g in range(s.num_generations - 1, 1, -1):
            b = s.per_device_train_batch_size * g
            if b % s.num_generations == 0:  # keep prompts per micro-batch: the batch shrinks with the group
                out.append((g, {"per_device_train_batch_size": b // s.num_generations}))
        return out
    raise ValueError(name)


def cheapest_fixes(preset, budget_gb: float, gpu="t4") -> list[Fix]:
    """Ordered changes (cheapest first) that the memory model predicts make `preset` fit `budget_gb` on `gpu`.

    Greedy: for each lever in LEVERS order, stop if the config already fits; else take the mildest value of that
    lever that fits, or its strongest value if none does (when it saves anything). Returns [] if it already fits;
    if every lever together is not enough the list still ends over budget (check fixes[-1].peak_after_gb).
    """
    s = as_settings(preset)
    current = _peak(s, gpu, budget_gb)
    fixes: list[Fix] = []
    for name, cost in LEVERS:
        if current.fits:
            break
        best = None
        for value, also in _candidates(name, s, gpu):
            trial = replace(s, **{name: value}, **also)
            try:
                est = _peak(trial, gpu, budget_gb)
            except ValueError:
                continue
            best = (value, also, trial, est)
            if est.fits:
                break
        if best is None:
            continue
        value, also, trial, est = best
        saving = current.peak_gb - est.peak_gb
        if saving <= 0.005 and not (est.vllm_starts and not current.vllm_starts):
            continue
        fixes.append(Fix(name, getattr(s, name), value, round(saving, 3), round(est.peak_gb, 3), cost,
                         {k: (getattr(s, k), v) for k, v in also.items()}))
        s, current = trial, est
    return fixes


def _chain(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_oom_error(exc: BaseException) -> bool:
    """True for torch.OutOfMemoryError, 'CUDA out of memory' RuntimeErrors and vLLM's cache-block / insufficient
    memory errors, anywhere in the exception's cause chain. CPU RAM errors are not GPU OOMs."""
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    for e in _chain(exc):
        if oom_type is not None and isinstance(e, oom_type):
            return True
        text = f"{type(e).__name__}: {e}".lower()
        if any(p in text for p in OOM_PATTERNS):
            return True
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def explain_oom(exc: BaseException, preset, gpu="t4", budget_gb: float | None = None) -> str:
    """The original error line, what the memory model predicts, then the ordered fixes."""
    s = as_settings(preset)
    total = gpu_total_gb(gpu)
    est = estimate(s, gpu=gpu, budget_gb=total)
    lines = [_first_line(exc), "",
             f"Memory model: this configuration peaks at ~{est.peak_gb:.2f} GB ({est.peak_phase} phase) on a "
             f"{gpu} with {total:.2f} GB."]
    big = sorted(est.components.items(), key=lambda kv: -kv[1])[:3]
    lines.append("Largest parts: " + ", ".join(f"{k} {v:.2f} GB" for k, v in big) + ".")
    target = budget_gb
    if target is None:
        # 10% headroom under the card: the model is an estimate, and a fix that lands exactly on the limit fails.
        target = round(0.9 * total, 2) if not est.fits else round(min(0.9 * total, est.peak_gb * 0.8), 2)
        if est.fits:
            lines.append(f"The model predicted it would fit, so the real run used more than predicted; the fixes "
                         f"below aim 20% under the prediction ({target:.2f} GB).")
    fixes = cheapest_fixes(s, target, gpu)
    if not fixes:
        lines.append(f"No setting change is predicted to help within {target:.2f} GB: restart the session to free "
                     "memory held by an earlier model (Runtime > Restart session), then run again.")
        return "\n".join(lines)
    lines.append(f"Cheapest changes first (each predicted with the ones above it), aiming for {target:.2f} GB:")
    lines += [f"  {i}. {f}" for i, f in enumerate(fixes, 1)]
    if fixes[-1].peak_after_gb > target:
        lines.append(f"Even all of these leave ~{fixes[-1].peak_after_gb:.2f} GB: use a smaller model or a larger GPU.")
    lines.append("Then restart the session (the failed run's memory is not returned) and run again.")
    return "\n".join(lines)


@contextlib.contextmanager
def oom_advice(preset, gpu="t4", budget_gb: float | None = None, file=None):
    """On a GPU out-of-memory error inside the block, print explain_oom(...) and re-raise the original error."""
    try:
        yield
    except BaseException as exc:
        if is_oom_error(exc):
            try:
                advice = explain_oom(exc, preset, gpu, budget_gb)
            except Exception as inner:  # noqa: BLE001 - the advice must never hide the real error
                advice = f"{_first_line(exc)}\n(oom_doctor could not analyse this configuration: {inner})"
            print(advice, file=file or sys.stderr)
        raise
