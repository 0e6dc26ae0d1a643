"""The main job: GRPO-train a preset, evaluate before and after, and write everything into a run folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

Writes metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after answers to the same
questions), adapter/ (the LoRA adapter), config.json and summary.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from helpers import runtime as rt
from helpers.training import PresetError, get_preset, validate


class RunDirError(ValueError):
    """The run folder would overwrite an earlier run."""


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m helpers.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu", help="cpu (embedded model, any machine) or t4 (Qwen2.5-1.5B on a GPU)")
    ap.add_argument("--max-steps", type=int, help="GRPO steps (default: the preset's)")
    ap.add_argument("--run-dir", type=Path, help="folder for results (default: runs/<preset>-<time>)")
    ap.add_argument("--eval-size", type=int, help="held-out questions for before/after evaluation")
    ap.add_argument("--learning-rate", type=float)
    ap.add_argument("--num-generations", type=int)
    ap.add_argument("--batch-size", type=int, dest="per_device_train_batch_size",
                    help="completions per step (a multiple of --num-generations)")
    ap.add_argument("--max-completion-length", type=int)
    ap.add_argument("--eval-max-new-tokens", type=int, help="tokens per answer when evaluating")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--overwrite", action="store_true", help="allow writing into a run folder that already has results")
    return ap.parse_args(argv)


def overrides_from(args) -> dict:
    names = ("max_steps", "eval_size", "learning_rate", "num_generations", "per_device_train_batch_size",
             "max_completion_length", "eval_max_new_tokens", "seed")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def prepare_run_dir(run_dir: Path | None, preset_name: str, overwrite: bool) -> Path:
    """Create the run folder; refuse to reuse one that holds an earlier run unless told to."""
    if run_dir is None:
        run_dir = Path("runs") / f"{preset_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a folder. Fix: choose another path.")
    earlier = [n for n in ("summary.json", "metrics.jsonl", "adapter") if (run_dir / n).exists()]
    if earlier and not overwrite:
        raise RunDirError(
            f"--run-dir {run_dir} already holds a run ({', '.join(earlier)}). Fix: choose a new --run-dir, "
            "or pass --overwrite to replace it."
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    if overwrite and (run_dir / "metrics.jsonl").exists():
        (run_dir / "metrics.jsonl").unlink()
    return run_dir


def build_datasets(preset, tokenizer):
    """(train Dataset, eval rows, number of prompts dropped for length)."""
    from datasets import Dataset

    from helpers import data

    if preset.dataset == "gsm8k":
        train = data.load_gsm8k("train", worked_example=preset.worked_example, limit=preset.train_size)
        heldout = list(data.load_gsm8k("test", worked_example=preset.worked_example, limit=preset.eval_size))
    else:
        kw = dict(seed=preset.seed, levels=preset.synthetic_levels, worked_example=preset.worked_example)
        train = Dataset.from_list(data.synthetic_problems(preset.train_size, "train", **kw))
        heldout = data.synthetic_problems(preset.eval_size, "heldout", **kw)
    train, dropped = data.filter_long_prompts(train, tokenizer, preset.max_prompt_length)
    if len(train) < preset.prompts_per_step:
        raise PresetError(
            f"only {len(train)} training prompts fit max_prompt_length={preset.max_prompt_length}. "
            "Fix: raise max_prompt_length (and max_seq_length) in the preset."
        )
    return train, heldout, dropped


def save_adapter(model, tokenizer, path: Path) -> Path:
    """The LoRA adapter only (megabytes, not the whole model)."""
    if hasattr(model, "save_lora"):  # Unsloth with fast_inference: the form vLLM's load_lora reads
        model.save_lora(str(path))
    else:
        model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def run(args) -> dict:
    from helpers.evaluation import evaluate, summary_of, write_samples
    from helpers.metrics import MetricsRecorder, plot_rewards, read_metrics

    preset = get_preset(args.preset, **overrides_from(args))
    runtime = rt.detect()
    validate(preset, runtime)  # before any model loads
    rt.check(runtime, want_gpu=preset.backend == "unsloth")
    run_dir = prepare_run_dir(args.run_dir, preset.name, args.overwrite)
    print(f"[grpo-kit] {runtime.describe()}")
    print(f"[grpo-kit] preset {preset.name}: {preset.description}")
    (run_dir / "config.json").write_text(json.dumps(preset.to_dict(), indent=2, default=list))

    started = time.time()
    from helpers.model import load

    model, tokenizer = load(preset, runtime)
    from helpers.rewards import DEFAULT_REWARDS  # after the model: Unsloth must be imported before TRL
    from helpers.training import build_grpo_config

    train, heldout, dropped = build_datasets(preset, tokenizer)
    print(f"[grpo-kit] {len(train)} training prompts ({dropped} dropped as longer than "
          f"{preset.max_prompt_length} tokens), {len(heldout)} held-out questions")

    print("[grpo-kit] evaluating before training ...")
    before = evaluate(model, tokenizer, heldout, preset)
    print(f"[grpo-kit] before: accuracy {before['accuracy']:.2f}, format {before['format_rate']:.2f}")

    from trl import GRPOTrainer

    if preset.backend == "cpu":
        from helpers.cpu_compat import patch_trl_for_cpu

        patch_trl_for_cpu()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=DEFAULT_REWARDS,
        args=build_grpo_config(preset, runtime, output_dir=str(run_dir / "trainer")),
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[MetricsRecorder(run_dir / "metrics.jsonl")],
    )
    train_started = time.time()
    trainer.train()
    train_seconds = time.time() - train_started

    adapter = save_adapter(model, tokenizer, run_dir / "adapter")
    print("[grpo-kit] evaluating after training ...")
    after = evaluate(model, tokenizer, heldout, preset, lora_path=adapter if preset.backend == "unsloth" else None)
    print(f"[grpo-kit] after: accuracy {after['accuracy']:.2f}, format {after['format_rate']:.2f}")

    write_samples(run_dir / "samples.jsonl", before, after)
    rows = read_metrics(run_dir / "metrics.jsonl")
    plot_rewards(rows, run_dir / "reward_curve.png", title=f"GRPO on {preset.model_name}")
    summary = {
        "preset": preset.name,
        "model": preset.model_name,
        "backend": preset.backend,
        "steps": trainer.state.global_step,
        "wall_seconds": round(time.time() - started, 1),
        "train_seconds": round(train_seconds, 1),
        "before": summary_of(before),
        "after": summary_of(after),
        "runtime": runtime.describe(),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[grpo-kit] results in {run_dir}/: summary.json, metrics.jsonl, reward_curve.png, samples.jsonl, adapter/")
    return summary


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (PresetError, RunDirError, rt.RuntimeProblem) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
