"""Accuracy and format compliance on held-out questions, the same way before and after training.

Greedy decoding, so two evaluations of the same model give the same numbers; the scorer is the reward module's
answers_match, so "what counts as correct" is defined once for training and evaluation alike.

Every evaluation shows its progress (a tqdm bar of decoding steps, in a terminal and in a notebook; vLLM's own bar
too). SHOW_PROGRESS = False (or TQDM_DISABLE=1) silences it.
"""

from __future__ import annotations

import hashlib
import html
import json
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from tqdm.std import tqdm

from helpers import runtime as rt
from helpers import reuse, speedups
from helpers.messages import PREFIX, say
from helpers.model import cache_dir, decoding_steps, generate, has_vllm_engine, load, load_cpu
from helpers.prompts import extract_answer
from helpers.rewards import answers_match, strict_format_reward


def score(completions: list[str], rows: list[dict]) -> dict:
    """{"accuracy", "format_rate", "n", "samples"} for completions aligned with rows."""
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions for {len(rows)} questions: they must align one to one")
    if not rows:
        raise ValueError("no questions to evaluate: pass at least one row")
    formatted = strict_format_reward(None, completions)
    samples = []
    for completion, row, fmt in zip(completions, rows, formatted):
        predicted = extract_answer(completion)
        samples.append({
            "question": row["question"],
            "gold": row["answer"],
            "completion": completion,
            "predicted": predicted,
            "correct": bool(predicted is not None and answers_match(predicted, row["answer"])),
            "formatted": fmt > 0,
        })
    n = len(samples)
    return {
        "accuracy": sum(s["correct"] for s in samples) / n,
        "format_rate": sum(s["formatted"] for s in samples) / n,
        "n": n,
        "samples": samples,
    }


SHOW_PROGRESS = True  # the progress bars of evaluate and pass@k; False where they would flood (tests)


def progress(total: int, what: str):
    """A tqdm bar for a wait over a few seconds (stderr; redrawn in place in a terminal, Jupyter and Colab), counted
    in decoding steps: helpers.model.generate advances it without changing how the questions are batched."""
    return tqdm(total=total, desc=f"{PREFIX}{what}", unit="step", disable=not SHOW_PROGRESS, dynamic_ncols=True,
                mininterval=1.0)


def evaluate(model, tokenizer, rows: list[dict], settings, lora_path=None) -> dict:
    """Greedy completions for rows, scored. lora_path selects a saved adapter on the GPU path."""
    prompts = [r["prompt"] for r in rows]
    with progress(decoding_steps(model, len(prompts), settings), f"evaluating {len(rows)} questions (greedy)") as bar:
        completions = generate(model, tokenizer, prompts, settings, greedy=True, lora_path=lora_path, progress=bar)
    return score(completions, rows)


def load_for_eval(preset, adapter_path, runtime=None):
    """(model, tokenizer) that can answer without and with the trained adapter (what before_after needs).

    CPU: the embedded model wrapped in the saved peft adapter (disable_adapter() gives the base model).
    GPU: Unsloth's model with vLLM; the adapter is passed per request (lora_path).
    """
    if preset.backend.is_cpu:
        return load_cpu(preset, adapter_path=adapter_path)
    return load(preset, runtime or rt.detect())


def before_after(model, tokenizer, rows: list[dict], settings, adapter_path=None, before: dict | None = None) -> dict:
    """{"before": ..., "after": ...} greedy accuracy on the same rows without and with the trained adapter.

    Switched as pass_at_k_before_after does: a peft model (CPU) with model.disable_adapter(); Unsloth + vLLM (GPU)
    by passing the saved adapter folder per request. before: a result to reuse (before.json) instead of evaluating.
    """
    on_vllm = has_vllm_engine(model)
    if before is None and on_vllm:
        before = evaluate(model, tokenizer, rows, settings, lora_path=None)
    elif before is None:
        before = evaluate_base(model, tokenizer, rows, settings)
    return {"before": before, "after": evaluate(model, tokenizer, rows, settings,
                                                lora_path=adapter_path if on_vllm else None)}


def summary_of(result: dict) -> dict:
    """The headline numbers without the samples (what summary.json stores)."""
    return {k: result[k] for k in ("accuracy", "format_rate", "n")}


def write_samples(path: Path, before: dict, after: dict) -> None:
    """Side-by-side answers before and after training for the same questions, as JSON lines."""
    with open(path, "w") as f:
        for b, a in zip(before["samples"], after["samples"]):
            f.write(json.dumps({
                "question": b["question"], "gold": b["gold"],
                "before": b["completion"], "before_correct": b["correct"],
                "after": a["completion"], "after_correct": a["correct"],
            }) + "\n")


# --------------------------------------------------------------------------------------------- before.json


def eval_settings(settings) -> dict:
    """What decides the held-out questions and how they are answered: a saved evaluation is reusable only if
    these match."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in (
        ("model_name", settings.model_name), ("dataset", settings.dataset), ("eval_size", settings.eval_size),
        ("eval_max_new_tokens", settings.eval_max_new_tokens), ("seed", settings.seed),
        ("synthetic_levels", settings.synthetic_levels), ("worked_example", settings.worked_example))}


def save_before(path, result: dict, settings) -> Path:
    """The evaluation before training, with every sample, so a resumed run reuses it instead of re-evaluating
    (by then the model already holds a partly trained adapter)."""
    path = Path(path)
    path.write_text(json.dumps({"settings": eval_settings(settings), **result}, indent=2))
    return path


def load_before(paths, settings) -> dict | None:
    """The first saved before-evaluation among paths that matches settings; None (with the reason) otherwise."""
    for path in [Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]:
        if not path.is_file():
            continue
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            say(f"{path} is not readable JSON: evaluating before training again")
            continue
        if saved.get("settings") != eval_settings(settings):
            say(f"{path} was made with other evaluation settings: evaluating before training again")
            continue
        return {k: v for k, v in saved.items() if k != "settings"}
    return None


# --------------------------------------------------------------------------------------------- the base model's


def evaluate_base(model, tokenizer, rows: list[dict], settings) -> dict:
    """Greedy evaluation of the base model: the adapter switched off (model.disable_adapter()); with vLLM, the
    requests without an adapter.

    CPU (speed-up before_eval_cache): every run, helpers.evaluate and notebook 06 evaluate the same unchanged base
    model on the same questions, so its answers are kept beside the embedded model (helpers.model.cache_dir()) and
    reused when the key matches: the evaluation settings, the model folder's files (size, modification time),
    torch and transformers versions and the questions' text (base_eval_key). The answers are scored again on reuse.
    On a GPU the answers are always computed."""
    path, on_vllm = None, has_vllm_engine(model)
    if (getattr(getattr(settings, "backend", None), "is_cpu", False) and not on_vllm
            and getattr(getattr(model, "device", None), "type", None) == "cpu"
            and speedups.enabled("before_eval_cache")):
        key = base_eval_key(model, rows, settings)
        path = key and cache_dir() / "before-evaluations" / f"{reuse.digest(key)}.json"
        completions = path and _cached_completions(path, key, len(rows))
        if completions:
            say(f"reusing the before-training evaluation from {path} (same model, questions and settings)")
            return score(completions, rows)
    with model.disable_adapter() if hasattr(model, "disable_adapter") and not on_vllm else nullcontext():
        result = evaluate(model, tokenizer, rows, settings)
    if path:
        reuse.write(path, key, [s["completion"] for s in result["samples"]])
    return result


def base_eval_key(model, rows: list[dict], settings) -> dict | None:
    """What decides the base model's greedy answers; None when the model's folder is unknown (no cache then)."""
    import torch
    import transformers

    folder = Path(getattr(model, "name_or_path", "") or "")
    if not folder.is_dir():
        return None
    questions = json.dumps([[r["prompt"], r["answer"]] for r in rows], sort_keys=True)
    return {"settings": eval_settings(settings), "model_folder": str(folder.resolve()),
            "model_files": reuse.model_files(folder), "torch": torch.__version__, "transformers": transformers.__version__,
            "questions": hashlib.sha256(questions.encode()).hexdigest()}


def _cached_completions(path: Path, key: dict, n: int) -> list[str] | None:
    """The answers saved under this key, or None (missing, unreadable or another key: evaluated again)."""
    if not path.is_file():
        return None
    completions = reuse.read(path, key)
    if isinstance(completions, list) and len(completions) == n and all(isinstance(c, str) for c in completions):
        return completions
    say(f"{path} is not a usable cached evaluation: evaluating the base model again")
    return None


# --------------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

    The chance that at least one of k samples drawn without replacement from the n is correct.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError("n, c and k must be whole numbers")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n (got n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"k={k}: k must be between 1 and the number of samples n={n}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k)/C(n, k) as a stable product
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def pass_at_k_summary(correct_counts: list[int], n: int, ks=None) -> dict:
    """{"pass@k": mean over questions} for each k (k <= n)."""
    if not correct_counts:
        raise ValueError("no questions: pass at least one count of correct samples")
    ks = default_ks(n) if ks is None else list(ks)
    return {f"pass@{k}": sum(pass_at_k(n, c, k) for c in correct_counts) / len(correct_counts) for k in ks}


PASS_AT_K_BATCH = 128  # at most this many sampled rows per generate call on the CPU path (pass_at_k_one_call)


def sample_answers(model, tokenizer, rows: list[dict], settings, n: int, lora_path=None) -> list[list[str]]:
    """n sampled (temperature) completions per question.

    transformers generate (the CPU path; speed-up pass_at_k_one_call): each prompt repeated n times, all drawn in
    one generate call per batch of at most PASS_AT_K_BATCH rows, the batches of equal size (200 rows: two of 100; a
    100-row KV cache of SmolLM2 is about 1.7 GB at these lengths); measured in lab/docs/performance.md. The same
    distribution, other random numbers than rounds.
    vLLM, or the speed-up off: one generate() round per sample, each with its own seed (vLLM seeds every request
    with settings.seed, so repeating a prompt in one round would repeat it)."""
    prompts = [r["prompt"] for r in rows]
    if not has_vllm_engine(model) and speedups.enabled("pass_at_k_one_call"):
        repeated = [p for p in prompts for _ in range(n)]
        batch = -(-len(repeated) // -(-len(repeated) // PASS_AT_K_BATCH))  # as many calls as needed, equal sizes
        with progress(decoding_steps(model, len(repeated), settings, batch),
                      f"sampling {n} answers to each of {len(rows)} questions for pass@k") as bar:
            flat = generate(model, tokenizer, repeated, settings, greedy=False, lora_path=lora_path,
                            batch_size=batch, progress=bar)
        return [flat[i * n:(i + 1) * n] for i in range(len(rows))]
    rounds = []
    with progress(n * decoding_steps(model, len(prompts), settings),
                  f"sampling {n} answers to each of {len(rows)} questions for pass@k") as bar:
        for j in range(n):
            s = replace(settings, seed=settings.seed + 1000 + j)
            rounds.append(generate(model, tokenizer, prompts, s, greedy=False, lora_path=lora_path, progress=bar))
    return [[rounds[j][i] for j in range(n)] for i in range(len(rows))]


def score_samples(samples_per_row: list[list[str]], rows: list[dict]) -> list[int]:
    """How many of each question's samples are correct."""
    if len(samples_per_row) != len(rows):
        raise ValueError(f"{len(samples_per_row)} sample lists for {len(rows)} questions: they must align")
    counts = []
    for samples, row in zip(samples_per_row, rows):
        counts.append(sum(1 for c in samples
                          if (p := extract_answer(c)) is not None and answers_match(p, row["answer"])))
    return counts


def evaluate_pass_at_k(model, tokenizer, rows: list[dict], settings, n: int = 4, ks=None, lora_path=None) -> dict:
    """Sampled pass@k (k <= n) with n samples per question, plus greedy-free numbers for the report."""
    if n < 1:
        raise ValueError(f"n={n}: need at least one sample per question")
    counts = score_samples(sample_answers(model, tokenizer, rows, settings, n, lora_path=lora_path), rows)
    return {"n": n, "temperature": settings.temperature, "questions": len(rows),
            **pass_at_k_summary(counts, n, ks), "correct_counts": counts}


def pass_at_k_before_after(model, tokenizer, rows, settings, n: int = 4, ks=None, adapter_path=None) -> dict:
    """{"before": ..., "after": ...} sampled pass@k without and with the trained adapter.

    CPU (a peft model): the adapter is switched off with model.disable_adapter(); GPU (Unsloth + vLLM): the saved
    adapter folder is passed per request (adapter_path), the base model is the request without it.
    """
    if has_vllm_engine(model):
        return {"before": evaluate_pass_at_k(model, tokenizer, rows, settings, n, ks, lora_path=None),
                "after": evaluate_pass_at_k(model, tokenizer, rows, settings, n, ks, lora_path=adapter_path)}
    with model.disable_adapter():
        before = evaluate_pass_at_k(model, tokenizer, rows, settings, n, ks)
    return {"before": before, "after": evaluate_pass_at_k(model, tokenizer, rows, settings, n, ks)}


# --------------------------------------------------------------------------------------------- side by side


def side_by_side(before: dict, after: dict, limit: int | None = None) -> list[dict]:
    """The same questions answered before and after, one dict per question."""
    pairs = []
    for b, a in list(zip(before["samples"], after["samples"]))[:limit]:
        if b["question"] != a["question"]:
            raise ValueError("before and after answer different questions: evaluate both on the same rows")
        pairs.append({"question": b["question"], "gold": b["gold"],
                      "before": b["completion"], "before_answer": b["predicted"], "before_correct": b["correct"],
                      "after": a["completion"], "after_answer": a["predicted"], "after_correct": a["correct"]})
    return pairs


def _mark(ok: bool) -> str:
    return "right" if ok else "wrong"


def side_by_side_text(before: dict, after: dict, limit: int | None = 5, width: int = 300) -> str:
    """A plain-text version of the side-by-side view (terminals, logs)."""
    b, a = summary_of(before), summary_of(after)
    lines = [f"{'':<8}{'accuracy':>10}{'format':>10}{'n':>6}",
             f"{'before':<8}{b['accuracy']:>10.2f}{b['format_rate']:>10.2f}{b['n']:>6}",
             f"{'after':<8}{a['accuracy']:>10.2f}{a['format_rate']:>10.2f}{a['n']:>6}"]
    for p in side_by_side(before, after, limit):
        lines += ["", f"Q: {p['question'].strip()}  (gold {p['gold']})",
                  f"  before [{_mark(p['before_correct'])}, answer {p['before_answer']}]: "
                  f"{p['before'].strip()[:width]!r}",
                  f"  after  [{_mark(p['after_correct'])}, answer {p['after_answer']}]: "
                  f"{p['after'].strip()[:width]!r}"]
    return "\n".join(lines)


def side_by_side_html(before: dict, after: dict, limit: int | None = 5) -> str:
    """An HTML table: question, gold answer, the answer before and after (green right, red wrong)."""
    def cell(text, ok):
        color = "#e6f4e6" if ok else "#fbe9e9"
        return (f"<td style='background:{color};text-align:left;white-space:pre-wrap;vertical-align:top'>"
                f"<b>{_mark(ok)}</b><br>{html.escape(text.strip())}</td>")

    b, a = summary_of(before), summary_of(after)
    rows = "".join(
        f"<tr><td style='text-align:left;vertical-align:top'>{html.escape(p['question'].strip())}</td>"
        f"<td style='vertical-align:top'>{html.escape(str(p['gold']))}</td>"
        f"{cell(p['before'], p['before_correct'])}{cell(p['after'], p['after_correct'])}</tr>"
        for p in side_by_side(before, after, limit))
    return (f"<p>accuracy {b['accuracy']:.2f} &rarr; {a['accuracy']:.2f}, format {b['format_rate']:.2f} &rarr; "
            f"{a['format_rate']:.2f} (n = {a['n']})</p><table><tr><th>question</th><th>gold</th>"
            f"<th>before training</th><th>after training</th></tr>{rows}</table>")


def show_side_by_side(before: dict, after: dict, limit: int | None = 5) -> None:
    """In a notebook: the HTML table; elsewhere: the plain-text version."""
    if rt.in_notebook():
        try:
            from IPython.display import HTML, display

            display(HTML(side_by_side_html(before, after, limit)))
            return
        except ImportError:
            pass
    print(side_by_side_text(before, after, limit))


# --------------------------------------------------------------------------------------------- eval.json


def eval_report(before: dict, after: dict, settings=None, pass_at_k: dict | None = None) -> dict:
    """What eval.json holds: greedy accuracy/format before and after, pass@k if measured, every sample pair."""
    report = {"greedy": {"before": summary_of(before), "after": summary_of(after)},
              "before": summary_of(before), "after": summary_of(after),  # greedy again: eval.json's first layout
              "pass_at_k": pass_at_k,
              "samples": side_by_side(before, after)}
    if settings is not None:
        report["settings"] = eval_settings(settings)
    return report


def write_eval(path, report: dict) -> Path:
    """eval.json, written beside and renamed: a kill or a full disk never leaves half of one."""
    path = Path(path)
    reuse.write_atomically(path, json.dumps(report, indent=2))
    return path


# --------------------------------------------------------------------------------------------- a run's own results


def _result_from_pairs(numbers: dict, pairs: list[dict], when: str) -> dict:
    """A before or after result in score()'s layout, rebuilt from saved side-by-side pairs (eval.json's samples, or
    samples.jsonl, which has no parsed answers) and the run's own headline numbers."""
    samples = [{"question": p["question"], "gold": p["gold"], "completion": p[when],
                "predicted": p[f"{when}_answer"] if f"{when}_answer" in p else extract_answer(p[when]),
                "correct": bool(p[f"{when}_correct"])} for p in pairs]
    return {**summary_of(numbers), "samples": samples}


def read_run(run_dir) -> dict | None:
    """A finished run's own measured results, read from its files, no model loaded: summary.json (preset, model,
    steps, greedy accuracy and format rate before and after), eval.json (sampled pass@k, if it was measured, and
    every answer before and after; samples.jsonl when eval.json is missing). None when run_dir holds no
    summary.json (no finished run).

    Returns {"run_dir", "summary", "before", "after", "pass_at_k"}; before/after are in score()'s layout, so
    show_side_by_side(run["before"], run["after"]) shows them.
    """
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        say(f"{run_dir / 'summary.json'} is not readable JSON: the run's results cannot be shown")
        return None
    if not isinstance(summary.get("before"), dict) or not isinstance(summary.get("after"), dict):
        why = ("the run was trained without it (--no-evaluate): evaluate its adapter with `python -m "
               "helpers.evaluate`" if summary.get("status") == "finished" else "not a finished run")
        say(f"{run_dir / 'summary.json'} has no before/after evaluation: {why}")
        return None
    pairs, pass_k = [], None
    if (run_dir / "eval.json").is_file():
        report = json.loads((run_dir / "eval.json").read_text())
        pairs, pass_k = report.get("samples") or [], report.get("pass_at_k")
    elif (run_dir / "samples.jsonl").is_file():
        pairs = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    return {"run_dir": run_dir, "summary": summary, "pass_at_k": pass_k,
            "before": _result_from_pairs(summary["before"], pairs, "before"),
            "after": _result_from_pairs(summary["after"], pairs, "after")}
