"""The main job: GRPO-train a preset, evaluate before and after, and write everything into a run folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

Writes metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after answers to the same
questions), adapter/ (the LoRA adapter), config.json and summary.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
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
    ap.add_argument("--save-steps", type=int,
                    help="write a resumable checkpoint every N steps (0: none; default: about 5 per run, at most every 25)")
    ap.add_argument("--keep", type=int, default=2, help="how many of the latest checkpoints to keep (default 2)")
    ap.add_argument("--resume", action=argparse.BooleanOptionalAction, default=None,
                    help="default (auto): an unfinished run in --run-dir is resumed from its latest complete checkpoint; "
                         "--resume insists on it, --no-resume refuses to continue one")
    ap.add_argument("--checkpoint-dir", type=Path, help="where checkpoint-N/ go (default: <run-dir>/trainer)")
    ap.add_argument("--drive", action="store_true", help="Colab: keep checkpoints on Google Drive (mounts it)")
    ap.add_argument("--dashboard", choices=("auto", "notebook", "headless", "off"), default="auto",
                    help="live curves + latest completions + warnings (headless: one line per step, dashboard.png)")
    ap.add_argument("--pass-k-samples", type=int, default=0,
                    help="also estimate sampled pass@k with N samples per question before/after (0: greedy only)")
    return ap.parse_args(argv)


def overrides_from(args) -> dict:
    names = ("max_steps", "eval_size", "learning_rate", "num_generations", "per_device_train_batch_size",
             "max_completion_length", "eval_max_new_tokens", "seed")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


# Settings that may change between a first start and its resume (they do not change what is trained).
RESUMABLE_CHANGES = ("max_steps", "eval_size", "eval_max_new_tokens")
RUN_FILES = ("summary.json", "metrics.jsonl", "adapter", "before.json", "config.json")


@dataclass
class RunPlan:
    run_dir: Path
    checkpoint_dir: Path
    resume_from: object = None  # helpers.checkpoints.Checkpoint, or None for a fresh start
    continuing: bool = False  # an unfinished run is being continued (from a checkpoint or from step 0)


def _config_differences(saved: dict, config: dict) -> list[str]:
    keys = sorted((set(saved) | set(config)) - set(RESUMABLE_CHANGES))
    return [f"{k}: {saved.get(k)!r} -> {config.get(k)!r}" for k in keys if saved.get(k) != config.get(k)]


def plan_run(run_dir: Path | None, preset_name: str, overwrite: bool, resume: bool | None = None,
             checkpoint_dir: Path | None = None, config: dict | None = None) -> RunPlan:
    """Decide between a fresh start, a resume, and a refusal; create the run folder.

    - a finished run (summary.json) is refused unless --overwrite;
    - an unfinished run (config.json but no summary.json) is resumed from its latest COMPLETE checkpoint
      (incomplete ones are named and moved aside), or restarted from step 0 when it has none; the settings
      must be the same as the first start's (except RESUMABLE_CHANGES);
    - --overwrite removes the earlier run's metrics and checkpoints, saying what it removes.
    """
    from helpers import checkpoints as ck

    if run_dir is None:
        run_dir = Path("runs") / f"{preset_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--run-dir {run_dir} is a file, not a folder. Fix: choose another path.")
    ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else run_dir / ck.TRAINER_SUBDIR
    ckpts = ck.list_checkpoints(ckpt_dir)
    earlier = [n for n in RUN_FILES if (run_dir / n).exists()] + ([f"{len(ckpts)} checkpoint(s)"] if ckpts else [])
    if overwrite:
        if earlier:
            ck._say(f"--overwrite: replacing the earlier run in {run_dir} ({', '.join(earlier)})")
        for name in ("metrics.jsonl", "before.json", "eval.json"):
            if (run_dir / name).exists():
                (run_dir / name).unlink()
        for c in ckpts:
            shutil.rmtree(c.path)
        run_dir.mkdir(parents=True, exist_ok=True)
        return RunPlan(run_dir, ckpt_dir)
    if (run_dir / "summary.json").exists():
        raise RunDirError(
            f"--run-dir {run_dir} already holds a finished run ({', '.join(earlier)}). Fix: choose a new --run-dir, "
            "or pass --overwrite to replace it."
        )
    if not earlier:
        if resume:
            raise RunDirError(f"--resume: {run_dir} holds no run to resume (no checkpoints in {ckpt_dir}).")
        run_dir.mkdir(parents=True, exist_ok=True)
        return RunPlan(run_dir, ckpt_dir)
    if resume is False:
        raise RunDirError(
            f"--run-dir {run_dir} holds an unfinished run ({', '.join(earlier)}) and --no-resume was given. Fix: "
            "leave out --no-resume to continue it, choose a new --run-dir, or pass --overwrite to start it over."
        )
    saved_path = next((p for p in (run_dir / "config.json", ckpt_dir / "config.json") if p.is_file()), None)
    if saved_path is None:
        raise RunDirError(
            f"--run-dir {run_dir} holds files ({', '.join(earlier)}) but no config.json from the kit, so it is not a "
            "run that can be continued. Fix: choose a new --run-dir, or pass --overwrite to replace them."
        )
    if config is not None:
        diff = _config_differences(json.loads(saved_path.read_text()), config)
        if diff:
            raise RunDirError(
                f"--run-dir {run_dir} holds an unfinished run with other settings ({'; '.join(diff)}); continuing it "
                "would mix two recipes. Fix: run the same command as the first time, choose a new --run-dir, or "
                "pass --overwrite to start over."
            )
    latest = ck.latest_complete(ckpt_dir)
    for c in ckpts:
        if not c.complete and (latest is None or c.step > latest.step):
            ck.set_aside(c)
    step = latest.step if latest is not None else 0
    if latest is not None:
        ck._say(f"resuming from step {step} ({latest.path})")
    else:
        ck._say("this run stopped before its first complete checkpoint: continuing it from step 0")
    ck.trim_metrics(run_dir / "metrics.jsonl", step)
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunPlan(run_dir, ckpt_dir, latest, continuing=True)


def prepare_run_dir(run_dir: Path | None, preset_name: str, overwrite: bool, **kwargs) -> Path:
    """Create the run folder (see plan_run); refuse to reuse one that holds a finished run unless told to."""
    return plan_run(run_dir, preset_name, overwrite, **kwargs).run_dir


def default_save_steps(preset) -> int:
    """About five checkpoints per run, at most 25 steps apart."""
    return max(1, min(25, preset.max_steps // 5))


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


def run(args) -> dict:
    rt.start_gpu_process(args.preset)  # GPU: allocator settings before CUDA, Unsloth before transformers/TRL
    from helpers.evaluation import evaluate, summary_of, write_samples
    from helpers.memory_monitor import MemoryMonitor
    from helpers.metrics import MetricsRecorder, plot_rewards, read_metrics
    from helpers.oom_doctor import oom_advice

    preset = get_preset(args.preset, **overrides_from(args))
    runtime = rt.detect()
    from helpers.distributed import process_info

    dist_info = process_info()  # accelerate launch: several processes (docs/scale-out.md); otherwise one
    validate(preset, runtime, num_processes=dist_info.world_size)  # before any model loads
    need_free_gb = None
    if preset.backend == "unsloth" and runtime.has_gpu:
        from helpers.memory import estimate

        need_free_gb = estimate(preset, gpu=runtime.total_gpu_gb, budget_gb=None).peak_gb
    rt.check(runtime, want_gpu=preset.backend == "unsloth", need_free_gb=need_free_gb)
    config = json.loads(json.dumps(preset.to_dict(), default=list))
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / f"{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    checkpoint_dir = args.checkpoint_dir
    if args.drive and checkpoint_dir is None:
        from helpers.checkpoints import checkpoint_root

        checkpoint_dir = checkpoint_root(use_drive=True, run_dir=run_dir)
    from helpers.distributed import on_main_then_share

    # several processes: process 0 plans (creates or refuses) the folder and every process uses its plan
    plan = on_main_then_share(lambda: plan_run(run_dir, preset.name, args.overwrite, resume=args.resume,
                                               checkpoint_dir=checkpoint_dir, config=config),
                              cpu=preset.backend == "cpu")
    run_dir = plan.run_dir
    save_steps = default_save_steps(preset) if args.save_steps is None else args.save_steps
    print(f"[grpo-kit] {runtime.describe()}")
    print(f"[grpo-kit] preset {preset.name}: {preset.description}")
    if dist_info.is_main:
        (run_dir / "config.json").write_text(json.dumps(preset.to_dict(), indent=2, default=list))
    if save_steps and dist_info.is_main:
        plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if run_dir.resolve() not in plan.checkpoint_dir.resolve().parents:  # e.g. on Drive: keep what resume needs
            shutil.copy2(run_dir / "config.json", plan.checkpoint_dir / "config.json")
        print(f"[grpo-kit] a checkpoint every {save_steps} steps in {plan.checkpoint_dir} (the last "
              f"{args.keep} kept); run the same command again to resume after an interruption")

    started = time.time()
    from helpers.model import load

    gpu = runtime.total_gpu_gb if runtime.has_gpu else "t4"  # the card we are on, or the one students use
    with oom_advice(preset, gpu=gpu):  # vLLM's KV-cache reservation can fail while loading
        model, tokenizer = load(preset, runtime)
    from helpers.rewards import DEFAULT_REWARDS  # after the model: Unsloth must be imported before TRL
    from helpers.training import build_grpo_config

    train, heldout, dropped = build_datasets(preset, tokenizer)
    print(f"[grpo-kit] {len(train)} training prompts ({dropped} dropped as longer than "
          f"{preset.max_prompt_length} tokens), {len(heldout)} held-out questions")

    from helpers.evaluation import load_before, save_before

    before = load_before([run_dir / "before.json", plan.checkpoint_dir / "before.json"], preset) \
        if plan.continuing else None
    if not dist_info.is_main:
        before = None  # several processes: process 0 evaluates and writes; the others go straight to training
    elif before is None:
        print("[grpo-kit] evaluating before training ...")
        before = evaluate(model, tokenizer, heldout, preset)
        save_before(run_dir / "before.json", before, preset)
        if save_steps and run_dir.resolve() not in plan.checkpoint_dir.resolve().parents:
            shutil.copy2(run_dir / "before.json", plan.checkpoint_dir / "before.json")
    else:
        print("[grpo-kit] before: reusing before.json from the first start (not re-evaluated with a partly trained "
              "adapter)")
    if before is not None:
        print(f"[grpo-kit] before: accuracy {before['accuracy']:.2f}, format {before['format_rate']:.2f}")

    from trl import GRPOTrainer

    from helpers.distributed import rank_marker_callbacks

    if preset.backend == "cpu":
        from helpers.cpu_compat import patch_trl_for_cpu

        patch_trl_for_cpu()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=DEFAULT_REWARDS,
        args=build_grpo_config(preset, runtime, output_dir=str(plan.checkpoint_dir), save_steps=save_steps),
        train_dataset=train,
        processing_class=tokenizer,
        # The monitor adds memory/* to the logs, so it must come before the recorder that writes them.
        callbacks=[MemoryMonitor(), MetricsRecorder(run_dir / "metrics.jsonl")] + rank_marker_callbacks(),
    )
    if save_steps and dist_info.is_main:  # Trainer saves checkpoints from process 0; it alone rotates them
        from helpers.checkpoints import KeepLastCheckpoints

        trainer.add_callback(KeepLastCheckpoints(plan.checkpoint_dir, args.keep))
    if args.dashboard != "off" and dist_info.is_main:
        from helpers.dashboard import TrainingDashboard

        TrainingDashboard(run_dir, mode=args.dashboard, history=read_metrics(run_dir / "metrics.jsonl"),
                          max_completion_length=preset.max_completion_length,
                          title=f"GRPO on {preset.model_name}").attach(trainer)
    train_started = time.time()
    resume_from = str(plan.resume_from.path) if plan.resume_from is not None else None
    with oom_advice(preset, gpu=gpu):  # an OOM prints the cheapest changes that fit, then re-raises
        trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.time() - train_started

    from helpers.distributed import save_adapter_once, zero3_active

    zero3 = dist_info.distributed and zero3_active()
    from helpers.sharing import save_adapter

    # The run folder's own output: plan_run already refused to touch a finished run without --overwrite.
    adapter = save_adapter_once(trainer, model, tokenizer, run_dir / "adapter",
                                lambda m, t, p: save_adapter(m, t, p, overwrite=True), dist_info)
    if not dist_info.is_main:
        return {}  # every process trained; process 0 evaluates and writes the results
    if zero3:  # the trained weights are sharded across the processes: evaluate a fresh copy with the saved adapter
        from helpers.model import load_trl_vllm

        model, _ = load_trl_vllm(preset, adapter_path=adapter)
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
    from helpers.evaluation import eval_report, pass_at_k_before_after, write_eval

    k_samples = args.pass_k_samples
    pass_k = None
    if k_samples:
        print(f"[grpo-kit] sampled pass@k with {k_samples} samples per question, before and after ...")
        pass_k = pass_at_k_before_after(model, tokenizer, heldout, preset, n=k_samples, adapter_path=adapter)
    write_eval(run_dir / "eval.json", eval_report(before, after, preset, pass_at_k=pass_k))
    if plan.resume_from is not None:
        summary["resumed_from_step"] = plan.resume_from.step
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[grpo-kit] results in {run_dir}/: summary.json, eval.json, metrics.jsonl, reward_curve.png, dashboard.png, "
          "samples.jsonl, adapter/")
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
