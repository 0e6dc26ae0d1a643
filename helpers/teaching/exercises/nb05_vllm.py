"""Lesson 05's sizing exercise (vllm_sizing): from the model's shape and the run's settings, the KV cache the run needs
and the gpu_memory_utilization that holds it. The truth is the kit's own arithmetic (helpers.memory.estimate:
kv_cache_gb, vllm_utilization_for: what sizes the t4 preset), checked first on the 2026-11-27 vLLM record; each usual
mistake is recognised by the number it gives and refused with its misconception. nb05 imports it, so it is `ex.qN`."""

from __future__ import annotations

from dataclasses import dataclass

from helpers.config import get_preset
from helpers.teaching.exercises.core import MISSING, Exercise, Fail, call, close

LESSON = "05"


@dataclass(frozen=True)
class Card:
    """A GPU as the sizing sees it: what it shows PyTorch (total_gb) and what is free when Unsloth loads (free_gb)."""

    name: str
    total_gb: float
    free_gb: float


def card(gpu="t4") -> Card:
    """A card of helpers.memory's table, free memory as the memory model takes it (utilization_base_gb)."""
    from helpers.memory.estimate import as_settings, gpu_total_gb, utilization_base_gb

    total = gpu_total_gb(gpu)
    return Card(f"a {gpu.upper()}", total, utilization_base_gb(as_settings(get_preset("t4")), total))


@dataclass(frozen=True)
class SizingCase:
    label: str
    arch: object
    sequences: int
    tokens: int
    weights_gb: float
    card: Card
    margin: float

    def args(self) -> tuple:
        return self.arch, self.sequences, self.tokens, self.weights_gb, self.card, self.margin


def t4_case(margin: float | None = None) -> SizingCase:
    """The t4 preset: the completions it samples at once, prompt + completion tokens, its 4-bit weights, a T4."""
    from helpers.memory.estimate import VLLM_SIZING_MARGIN, as_settings, resolve_model, weight_bytes
    from helpers.runtime import GIB

    p = get_preset("t4")
    s = as_settings(p)
    arch = resolve_model(s.model)
    m = VLLM_SIZING_MARGIN if margin is None else margin
    seqs, tokens = s.per_device_train_batch_size * s.gradient_accumulation_steps, s.max_prompt_length + s.max_completion_length
    return SizingCase(f"the t4 preset ({seqs} completions sampled at once of {s.max_prompt_length} + "
                      f"{s.max_completion_length} tokens, {arch.name} in 4 bits, a T4, margin {m:g})",
                      arch, seqs, tokens, weight_bytes(arch, s.load_dtype) / GIB, card("t4"), m)


def record_case() -> SizingCase:
    """The 2026-11-27 record's engine: the tokens vLLM's cache held, its weights, the memory free at load, margin 0."""
    from helpers.memory import resolve_model
    from helpers.memory.measured import vllm_record

    r, arch = vllm_record(), resolve_model(get_preset("t4").model_name)
    return SizingCase(f"the {r.date} record (vLLM logged {r.kv_cache_gb} GiB of KV cache for {r.kv_cache_tokens:,} "
                      f"tokens of {arch.name} and {r.weights_gb} GiB of weights; {r.free_gb} of {r.total_gb} GiB free "
                      f"at load; margin 0)", arch, 1, r.kv_cache_tokens, r.weights_gb,
                      Card("the record's H100 as a T4", r.total_gb, r.free_gb), 0.0)


def sizing_cases() -> list[SizingCase]:
    from helpers.memory import MODELS

    return [record_case(), t4_case(),
            SizingCase("Llama-3.2-1B (16 sequences of 1024 tokens, 1.2 GB of weights, an L4, margin 0.5)",
                       MODELS["llama-3.2-1b"], 16, 1024, 1.2, card("l4"), 0.5)]


def truth(c: SizingCase) -> tuple[float, float]:
    """The kit's answer: what sizes the t4 preset (helpers.memory.estimate)."""
    from helpers.memory.estimate import kv_cache_gb, vllm_utilization_for

    kv = kv_cache_gb(c.arch, c.sequences, c.tokens)
    return kv, vllm_utilization_for(c.weights_gb, kv, c.card.free_gb, margin=c.margin)


def kv_mistakes(c: SizingCase) -> list[tuple[float, str]]:
    """(the KV cache a mistake gives, the misconception)."""
    from helpers.runtime import GIB

    a, right = c.arch, truth(c)[0]
    per = c.sequences * c.tokens * a.num_layers / GIB
    return [
        (per * a.kv_dim * 2, "you counted K and V once: every layer caches a key AND a value per KV head for each "
                             "token, so the cache is 2 x layers x KV heads x head size x bytes per token"),
        (per * 2 * a.hidden_size * 2, f"you used the hidden size ({a.hidden_size}) instead of KV heads x head size "
                                      f"({a.num_kv_heads} x {a.head_dim} = {a.kv_dim}): with grouped-query attention "
                                      f"{a.num_heads} query heads share {a.num_kv_heads} KV heads, and only those are "
                                      "cached (arch.num_kv_heads x arch.head_dim)"),
        (per * a.kv_dim * 2 * 4, "you took 4 bytes per value (fp32): vLLM caches K and V in the dtype it computes in, "
                                 "fp16 on a T4: 2 bytes"),
        (per * a.kv_dim * 2 * 0.5, "you took half a byte per value, as the 4-bit weights: the weights are quantized, "
                                   "the cache is not; vLLM caches K and V in fp16 on a T4: 2 bytes"),
        (per * a.kv_dim * 2 * 1, "you took 1 byte per value: vLLM caches K and V in fp16 on a T4: 2 bytes"),
        (right * GIB / 1e9, "you divided by 1e9: GB here are GiB (2**30 bytes), as vLLM and PyTorch report them"),
        (right * GIB, "you returned bytes: divide by 2**30 for GB"),
    ]


def utilization_mistakes(c: SizingCase) -> list[tuple[float, str]]:
    """(the utilization a mistake gives, the misconception), the KV cache being right."""
    from helpers.memory.estimate import VLLM_WORKSPACE_GB

    kv, right = truth(c)
    w, ws, m, free = c.weights_gb, VLLM_WORKSPACE_GB, c.margin, c.card.free_gb
    need = w + kv + ws
    out = [
        ((kv + ws) * (1 + m) / free, f"you forgot the weights ({w:.2f} GB): with fast_inference vLLM holds the model's "
                                     "weights inside its reservation (shared with training), so the utilization must "
                                     "hold weights + KV cache + workspace"),
        (need * (1 + m) / c.card.total_gb, f"you took the fraction of the whole card ({c.card.total_gb:.2f} GB): "
                                           "Unsloth multiplies gpu_memory_utilization by the memory free at load "
                                           f"({free:.2f} GB here, card.free_gb), so divide by that"),
        ((w + kv) * (1 + m) / free, f"you left out vLLM's workspace (VLLM_WORKSPACE_GB, {ws:g} GB): the profiling "
                                    "run's activations, the sampler and the LoRA slots sit in the reservation too"),
        ((need + m) / free, "you added the margin as GB: it is a fraction of what vLLM needs, (need) x (1 + margin)"),
        (need * (1 + m), "you returned GB: the utilization is a fraction, GB needed / the memory free at load"),
        (right * 100, "you returned a percentage: gpu_memory_utilization is a fraction between 0 and 1"),
    ]
    if m:
        out.append((need / free, f"you left out the margin: multiply what vLLM needs by (1 + margin), here {1 + m:g}"))
    return out


def _pair(case: str, got) -> tuple[float, float]:
    try:
        kv, util = got
        return float(kv), float(util)
    except (TypeError, ValueError):
        raise Fail(case, f"for {case} you returned {got!r:.80}; return a pair: (kv_cache_gb, "
                         "gpu_memory_utilization)") from None


def _judge_sizing(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: vllm_sizing, not vllm_sizing(...)")
    for c in sizing_cases():
        kv, util = _pair(c.label, call(c.label, fn, *c.args()))
        want_kv, want_util = truth(c)
        if not close(kv, want_kv, tol=1e-5):
            why = next((w for value, w in kv_mistakes(c) if close(kv, value, tol=1e-5)),
                       "per token the cache is 2 (K and V) x layers x KV heads x head size x bytes per value (fp16: 2),"
                       " times the sequences sampled at once x their tokens")
            raise Fail(c.label, f"for {c.label} your KV cache is {kv:.4g} GB; it should be {want_kv:.4g} GB: {why}.")
        if not close(util, want_util, tol=1e-6):
            why = next((w for value, w in utilization_mistakes(c) if close(util, value, tol=1e-6)),
                       "(weights + KV cache + workspace) x (1 + margin) / the memory free at load")
            raise Fail(c.label, f"for {c.label} your gpu_memory_utilization is {util:.4g}; it should be "
                                f"{want_util:.4g}: {why}.")


def report(fn=None, margin: float | None = None) -> str:
    """Your function (the kit's while yours does not pass) beside the record, then on the t4 preset at your margin."""
    from helpers.memory.estimate import VLLM_SIZING_MARGIN, sized_utilization
    from helpers.memory.estimate import vllm_sizing as vllm_sizing_of
    from helpers.memory.measured import VLLM_RECORD, vllm_record

    whose = "your vllm_sizing" if fn is not None else "the kit's sizing (helpers.memory.estimate), until yours passes"
    fn = fn or (lambda *args: truth(SizingCase("", *args)))
    r, rc = vllm_record(), record_case()
    kv, util = fn(*rc.args())
    m = VLLM_SIZING_MARGIN if margin is None else margin
    t4 = t4_case(m)
    t4_kv, t4_util = fn(*t4.args())
    return "\n".join([
        f"Sizing vLLM with {whose}.",
        f"Beside the {r.date} record (H100 as a T4, {VLLM_RECORD.name}):",
        f"  KV cache of {r.kv_cache_tokens:,} tokens      predicted {kv:.2f} GB    vLLM logged {r.kv_cache_gb:.2f} GiB",
        f"  utilization, margin 0         predicted {util:.3f}      it ran at {r.utilization:g}: {r.asked_gb:.2f} GiB of "
        f"{r.free_gb} free at load ({r.weights_gb} weights + {r.kv_cache_gb} KV cache + the workspace)",
        f"  that cache held {r.kv_cache_tokens // r.max_model_len} sequences of {r.max_model_len} tokens; the t4 preset "
        f"samples {t4.sequences} at once.",
        f"The t4 preset ({t4.sequences} x {t4.tokens} tokens, {t4.weights_gb:.2f} GB of 4-bit weights, "
        f"{t4.card.free_gb:.2f} GB free at load):",
        f"  KV cache {t4_kv:.3f} GB; utilization at margin {m:g}: {t4_util:.3f}",
        f"  the preset reserves {get_preset('t4').gpu_memory_utilization:g}: the kit's sizing ({vllm_sizing_of('t4')[1]:.3f} "
        f"at its margin {VLLM_SIZING_MARGIN:g}) rounded up, sized_utilization('t4') = {sized_utilization('t4'):g}.",
    ])


class _SizingExercise(Exercise):
    """The sizing exercise: .t4_case() is the t4 preset's case (its arch, sequences, tokens, weights, card), .report()
    sets your function beside the record and on the t4 preset; .check(fn, margin=...) prints that report after its
    verdict, so the lesson's check cell shows both."""

    def check(self, answer=MISSING, margin: float | None = None, **context):
        result = super().check(answer, **context)
        print(report(answer if result.passed else None, margin))
        return result

    def t4_case(self, margin: float | None = None) -> SizingCase:
        return t4_case(margin)

    def report(self, fn=None, margin: float | None = None) -> str:
        return report(fn, margin)


vllm_sizing = _SizingExercise(
    LESSON, "vllm_sizing",
    hint=("per token, every layer caches a key and a value for each KV head (not each query head), head size numbers "
          "each, in the dtype vLLM computes in (fp16 on a T4). The reservation holds the weights too.",
          "KV cache = sequences x tokens x 2 x arch.num_layers x arch.num_kv_heads x arch.head_dim x 2 bytes / 2**30; "
          "utilization = (weights_gb + KV cache + VLLM_WORKSPACE_GB) x (1 + margin) / card.free_gb: Unsloth takes "
          "the fraction of the memory free at load."),
    judge=_judge_sizing,
    success="this is how the t4 preset's reservation is sized (helpers.memory.estimate.vllm_sizing, rounded up).")
