"""Accuracy and format compliance on held-out questions, the same way before and after training.

Greedy decoding, so two evaluations of the same model give the same numbers; the scorer is the reward module's
answers_match, so "what counts as correct" is defined once for training and evaluation alike.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.model import generate
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


def evaluate(model, tokenizer, rows: list[dict], settings, lora_path=None) -> dict:
    """Greedy completions for rows, scored. lora_path selects a saved adapter on the GPU path."""
    completions = generate(model, tokenizer, [r["prompt"] for r in rows], settings, greedy=True, lora_path=lora_path)
    return score(completions, rows)


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
