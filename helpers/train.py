"""The main job: GRPO-train a preset, evaluate before and after, and write everything into a run folder.

    python -m helpers.train --preset cpu --max-steps 30 --run-dir runs/demo

One pipeline, two front doors: this command and notebook 05 call the same named steps, in this order:

    run = prepare(preset, RunOptions(...), reward_funcs)   # validate, plan the run folder, write config.json
    model, tokenizer = load_model(run)                      # Unsloth + vLLM on GPU, embedded model + peft on CPU
    train_dataset, heldout = load_data(run)                 # filtered to max_prompt_length
    before = evaluate_before(run, heldout)                  # (reused from before.json when resuming)
    trainer = GRPOTrainer(model=..., reward_funcs=run.reward_funcs, args=grpo_config(run),
                          train_dataset=..., processing_class=..., callbacks=kit_callbacks(run))   # build_trainer
    train(run, trainer)                                     # resumes from the latest complete checkpoint
    summary = finish(run, trainer, heldout, before)         # adapter/, evaluation after, plots, summary.json

Every field of helpers.config.Preset is a flag (`--help` lists them with the field's own help text). Writes
metrics.jsonl (one line per step), reward_curve.png, samples.jsonl (before/after answers to the same questions),
adapter/ (the LoRA adapter), config.json and summary.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from helpers import runtime as rt
from helpers.cli import add_dataclass_flags, add_field_flag, given_fields
from helpers.config import Preset, PresetError, get_preset, validate


class RunDirError(ValueError):
    """The run folder would overwrite an earlier run."""


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class RunOptions:
    """How to run (the Preset says what to train). Each field is also a flag of `python -m helpers.train`."""

    run_dir: Path | None = _opt(None, "folder for results (default: runs/<preset>-<time>)")
    overwrite: bool = _opt(False, "allow writing into a run folder that already has results")
    save_steps: int | None = _opt(
        None, "write a resumable checkpoint every N steps (0: none; default: about 5 per run, at most every 25)")
    keep: int = _opt(2, "how many of the latest checkpoints to keep")
    resume: bool | None = _opt(
        None, "default (auto): an unfinished run in --run-dir is resumed from its latest complete checkpoint; "
              "--resume insists on it, --no-resume refuses to continue one")
    checkpoint_dir: Path | None = _opt(None, "where checkpoint-N/ go (default: <run-dir>/trainer)")
    drive: bool = _opt(False, "Colab: keep checkpoints on Google Drive (mounts it)")
    dashboard: str = _opt("auto", "live curves + latest completions + warnings: auto, notebook, headless (one line "
                                  "per step, dashboard.png) or off")
    pass_k_samples: int = _opt(0, "also estimate sampled pass@k with N samples per question before/after "
                                  "(0: greedy only)")
    rewards: tuple[str, ...] = _opt(
        (), "reward functions as module:name (a function or a list of them), e.g. my_rewards:brevity_reward; "
            "repeat the flag for several (default: helpers.rewards:DEFAULT_REWARDS)")


DASHBOARD_MODES = ("auto", "notebook", "headless", "off")


def build_parser() -> argparse.ArgumentParser:
    """The CLI, generated from the Preset and RunOptions dataclasses: one flag per field."""
    ap = argparse.ArgumentParser(prog="python -m helpers.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="cpu",
                    help="the recipe to start from: cpu (embedded model, any machine), t4 (Qwen2.5-1.5B on a GPU), "
                         "or a multi-GPU one; the flags below change its fields")
    recipe = ap.add_argument_group("preset fields (what to train; default: the preset's value)")
    add_dataclass_flags(recipe, Preset, default_is_preset=True, skip=("name",), prog=ap.prog)  # --preset chooses name
    running = ap.add_argument_group("run options (how to run)")
    hints = typing.get_type_hints(RunOptions)
    for f in fields(RunOptions):
        if f.name == "rewards":
            running.add_argument("--reward", dest="rewards", action="append", default=None, help=f.metadata["help"])
        elif f.name == "dashboard":
            running.add_argument("--dashboard", choices=DASHBOARD_MODES, default=f.default, help=f.metadata["help"])
        else:
            add_field_flag(running, f, hints[f.name], default_is_preset=False, prog=ap.prog)
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def overrides_from(args) -> dict:
    """The Preset fields given on the command line (the rest keep the preset's values)."""
    return given_fields(args, Preset, skip=("name",))


def options_from(args) -> RunOptions:
    """The RunOptions given on the command line."""
    values = {f.name: getattr(args, f.name) for f in fields(RunOptions) if hasattr(args, f.name)}
    values["rewards"] = tuple(values.get("rewards") or ())
    return RunOptions(**values)


def resolve_rewards(specs) -> list:
    """Reward functions from 'module:name' strings (a function, or a list of functions); () -> the kit's defaults."""
    if not specs:
        from helpers.rewards import DEFAULT_REWARDS

        return list(DEFAULT_REWARDS)
    funcs = []
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise PresetError(f"--reward {spec!r}: expected module:name. Fix: e.g. --reward my_rewards:brevity_reward "
                              "(my_rewards.py importable from the current folder)")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise PresetError(f"--reward {spec!r}: {err}. Fix: check the module is importable from the current "
                              "folder and defines that name") from None
        funcs.extend(value if isinstance(value, (list, tuple)) else [value])
    return funcs


def reward_names(reward_funcs) -> list[str]:
    """The names TRL logs the rewards under (rewards/<name>/mean)."""
    return [getattr(f, "__name__", type(f).__name__) for f in reward_funcs]


# Settings that may change between a first start and its resume (they do not change what is trained).
RESUMABLE_CHANGES = ("max_steps", "eval_size", "eval_max_new_tokens")
RUN_FILES = ("summary.json", "metrics.jsonl", "adapter", "before.json", "config.json")


@dataclass
class RunPlan:
    run_dir: Path
    checkpoint_dir: Path
    resume_from: object = None  # helpers.run.checkpoints.Checkpoint, or None for a fresh start
    continuing: bool = False  # an unfinished run is being continued (from a checkpoint or from step 0)


def _config_differences(saved: dict, config: dict) -> list[str]:
    """The settings that differ from the first start's. A setting only one side has (the kit gained or dropped a
    preset field in between, e.g. Preset.extra became typed fields) is unchanged when it holds its default or is
    empty: a run started before a kit update still resumes."""
    defaults = json.loads(json.dumps({f.name: f.default for f in fields(Preset) if f.default is not MISSING},
                                     default=list))

    def differs(k):
        if k in saved and k in config:
            return saved[k] != config[k]
        present = saved.get(k, config.get(k))
        return present != defaults.get(k) and present not in ({}, [], None)

    keys = sorted((set(saved) | set(config)) - set(RESUMABLE_CHANGES))
    return [f"{k}: {saved.get(k)!r} -> {config.get(k)!r}" for k in keys if differs(k)]


def plan_run(run_dir: Path | None, preset_name: str, overwrite: bool, resume: bool | None = None,
             checkpoint_dir: Path | None = None, config: dict | None = None) -> RunPlan:
    """Decide between a fresh start, a resume, and a refusal; create the run folder.

    - a finished run (summary.json) is refused unless --overwrite;
    - an unfinished run (config.json but no summary.json) is resumed from its latest COMPLETE checkpoint
      (incomplete ones are named and moved aside), or restarted from step 0 when it has none; the settings
      must be the same as the first start's (except RESUMABLE_CHANGES);
    - --overwrite removes the earlier run's metrics and checkpoints, saying what it removes.
    """
    from helpers.run import checkpoints as ck

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
            ck.say(f"--overwrite: replacing the earlier run in {run_dir} ({', '.join(earlier)})")
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
        ck.say(f"resuming from step {step} ({latest.path})")
    else:
        ck.say("this run stopped before its first complete checkpoint: continuing it from step 0")
    ck.trim_metrics(run_dir / "metrics.jsonl", step)
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunPlan(run_dir, ckpt_dir, latest, continuing=True)


def default_save_steps(preset) -> int:
    """About five checkpoints per run, at most 25 steps apart, each at the end of a sampled batch: TRL does not
    checkpoint the batch it is still reusing (num_iterations > 1), so a resumed run samples afresh there."""
    every = preset.num_iterations
    return max(every, min(25, preset.max_steps // 5) // every * every)


def build_datasets(preset, tokenizer):
    """(train Dataset, eval rows, number of prompts dropped for length)."""
    from helpers import data

    train, heldout = data.training_questions(preset), data.heldout_questions(preset)
    train, dropped = data.filter_long_prompts(train, tokenizer, preset.max_prompt_length)
    if len(train) < preset.prompts_per_step:
        raise PresetError(
            f"only {len(train)} training prompts fit max_prompt_length={preset.max_prompt_length}. "
            "Fix: raise max_prompt_length (and max_seq_length) in the preset."
        )
    return train, heldout, dropped


@dataclass
class Run:
    """What the steps hand each other: the recipe, the options, and what is known about this run so far."""

    preset: Preset
    options: RunOptions
    reward_funcs: list
    runtime: object  # helpers.runtime.Runtime
    dist: object  # helpers.run.distributed.ProcessInfo
    plan: RunPlan
    save_steps: int
    gpu: object  # the card we are on (GB), or "t4": what the OOM doctor sizes for
    started: float = field(default_factory=time.time)
    model: object = None
    tokenizer: object = None

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir

    def config(self) -> dict:
        """What config.json holds: every Preset field, and the reward functions by name."""
        config = json.loads(json.dumps(self.preset.to_dict(), default=list))
        config["reward_funcs"] = reward_names(self.reward_funcs)
        return config


def prepare(preset: Preset, options: RunOptions | None = None, reward_funcs=None) -> Run:
    """Step 1: refuse impossible settings before any model loads, plan the run folder (fresh, resume or refuse),
    write config.json. reward_funcs: the functions to train with (TRL's reward contract); None = the kit's."""
    options = options or RunOptions()
    if options.dashboard not in DASHBOARD_MODES:
        raise PresetError(f"dashboard={options.dashboard!r} is not a dashboard mode. Fix: use one of {DASHBOARD_MODES}")
    runtime = rt.detect()
    from helpers.run.distributed import on_main_then_share, process_info

    dist = process_info()  # accelerate launch: several processes (docs/scale-out.md); otherwise one
    validate(preset, runtime, num_processes=dist.world_size)  # before any model loads
    need_free_gb = None
    if preset.backend == "unsloth" and runtime.has_gpu:
        from helpers.memory import estimate

        need_free_gb = estimate(preset, gpu=runtime.total_gpu_gb, budget_gb=None).peak_gb
    rt.check(runtime, want_gpu=preset.backend == "unsloth", need_free_gb=need_free_gb)
    if preset.backend == "unsloth":
        from helpers.model import import_unsloth

        import_unsloth()  # before TRL (which a reward module may import): Unsloth patches it on import
    if reward_funcs is None:
        reward_funcs = resolve_rewards(options.rewards)
    reward_funcs = list(reward_funcs)
    if not reward_funcs or not all(callable(f) for f in reward_funcs):
        raise PresetError("reward_funcs must be a non-empty list of functions f(prompts, completions, **columns) -> "
                          "list[float]. Fix: pass e.g. [correctness_reward, my_reward]")
    run_dir = Path(options.run_dir) if options.run_dir else \
        Path("runs") / f"{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    checkpoint_dir = options.checkpoint_dir
    if options.drive and checkpoint_dir is None:
        from helpers.run.checkpoints import checkpoint_root

        checkpoint_dir = checkpoint_root(use_drive=True, run_dir=run_dir)
    run = Run(preset=preset, options=options, reward_funcs=reward_funcs, runtime=runtime, dist=dist, plan=None,
              save_steps=default_save_steps(preset) if options.save_steps is None else options.save_steps,
              gpu=runtime.total_gpu_gb if runtime.has_gpu else "t4")
    config = run.config()
    # several processes: process 0 plans (creates or refuses) the folder and every process uses its plan
    run.plan = on_main_then_share(lambda: plan_run(run_dir, preset.name, options.overwrite, resume=options.resume,
                                                   checkpoint_dir=checkpoint_dir, config=config),
                                  cpu=preset.backend == "cpu")
    print(f"[grpo-kit] {runtime.describe()}")
    print(f"[grpo-kit] preset {preset.name}: {preset.description}")
    print(f"[grpo-kit] rewards: {', '.join(config['reward_funcs'])}")
    if dist.is_main:
        (run.run_dir / "config.json").write_text(json.dumps(config, indent=2))
    if run.save_steps and dist.is_main:
        run.plan.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if run.run_dir.resolve() not in run.plan.checkpoint_dir.resolve().parents:  # e.g. Drive: keep what resume needs
            shutil.copy2(run.run_dir / "config.json", run.plan.checkpoint_dir / "config.json")
        print(f"[grpo-kit] a checkpoint every {run.save_steps} steps in {run.plan.checkpoint_dir} (the last "
              f"{options.keep} kept); run the same command again to resume after an interruption")
    return run


def load_model(run: Run):
    """Step 2: (model, tokenizer) with a fresh LoRA adapter (helpers.model.load; notebook 02 shows the calls)."""
    from helpers.model import load
    from helpers.memory.oom_doctor import oom_advice

    with oom_advice(run.preset, gpu=run.gpu):  # vLLM's KV-cache reservation can fail while loading
        run.model, run.tokenizer = load(run.preset, run.runtime)
    return run.model, run.tokenizer


def load_data(run: Run):
    """Step 3: (training Dataset, held-out rows); prompts longer than max_prompt_length are dropped."""
    train_dataset, heldout, dropped = build_datasets(run.preset, run.tokenizer)
    print(f"[grpo-kit] {len(train_dataset)} training prompts ({dropped} dropped as longer than "
          f"{run.preset.max_prompt_length} tokens), {len(heldout)} held-out questions")
    return train_dataset, heldout


def evaluate_before(run: Run, heldout) -> dict | None:
    """Step 4: greedy accuracy before training (a resumed run reuses before.json: its model is partly trained)."""
    from helpers.evaluation import evaluate, load_before, save_before

    plan = run.plan
    before = load_before([run.run_dir / "before.json", plan.checkpoint_dir / "before.json"], run.preset) \
        if plan.continuing else None
    if not run.dist.is_main:
        return None  # several processes: process 0 evaluates and writes; the others go straight to training
    if before is None:
        print("[grpo-kit] evaluating before training ...")
        before = evaluate(run.model, run.tokenizer, heldout, run.preset)
        save_before(run.run_dir / "before.json", before, run.preset)
        if run.save_steps and run.run_dir.resolve() not in plan.checkpoint_dir.resolve().parents:
            shutil.copy2(run.run_dir / "before.json", plan.checkpoint_dir / "before.json")
    else:
        print("[grpo-kit] before: reusing before.json from the first start (not re-evaluated with a partly trained "
              "adapter)")
    print(f"[grpo-kit] before: accuracy {before['accuracy']:.2f}, format {before['format_rate']:.2f}")
    return before


def grpo_config(run: Run):
    """The trl.GRPOConfig of this preset on this runtime (helpers.config.grpo_config_kwargs, contract-tested)."""
    from helpers.config import build_grpo_config

    return build_grpo_config(run.preset, run.runtime, output_dir=str(run.plan.checkpoint_dir),
                             save_steps=run.save_steps)


def check_config(run: Run, config) -> None:
    """Raise PresetError where a GRPOConfig written by hand (notebook 05) differs from the preset's."""
    want = grpo_config(run)  # compared as GRPOConfig holds them (it normalises e.g. report_to="none" to [])
    diff = [f"{k}: config has {getattr(config, k, None)!r}, the preset gives {getattr(want, k)!r}"
            for k in sorted(want.to_dict()) if getattr(config, k, None) != getattr(want, k)]
    if diff:
        raise PresetError("the GRPOConfig differs from the preset (" + "; ".join(diff) + "). Fix: change the preset "
                          "(setup.prepare(..., field=value)) rather than the config, so config.json says what ran")


def kit_callbacks(run: Run) -> list:
    """The kit's extras as TRL callbacks: memory monitor, metrics.jsonl, checkpoint rotation, live dashboard."""
    from helpers.run.distributed import rank_marker_callbacks
    from helpers.memory.monitor import MemoryMonitor
    from helpers.run.metrics import MetricsRecorder, read_metrics

    # The monitor adds memory/* to the logs, so it must come before the recorder that writes them.
    callbacks = [MemoryMonitor(), MetricsRecorder(run.run_dir / "metrics.jsonl")] + rank_marker_callbacks()
    if run.save_steps and run.dist.is_main:  # Trainer saves checkpoints from process 0; it alone rotates them
        from helpers.run.checkpoints import KeepLastCheckpoints

        callbacks.append(KeepLastCheckpoints(run.plan.checkpoint_dir, run.options.keep))
    if run.options.dashboard != "off" and run.dist.is_main:
        from helpers.run.dashboard import TrainingDashboard

        callbacks.append(TrainingDashboard(run.run_dir, mode=run.options.dashboard,
                                           history=read_metrics(run.run_dir / "metrics.jsonl"),
                                           max_completion_length=run.preset.max_completion_length,
                                           title=f"GRPO on {run.preset.model_name}"))
    return callbacks


def patch_for_backend(run: Run) -> None:
    """CPU: TRL's log-prob kernel is Triton-only; swap in the plain-PyTorch one (helpers.cpu_compat)."""
    if run.preset.backend == "cpu":
        from helpers.cpu_compat import patch_trl_for_cpu

        patch_trl_for_cpu()


def build_trainer(run: Run, train_dataset):
    """Step 5: the GRPOTrainer, exactly as notebook 05 writes it out."""
    from trl import GRPOTrainer

    patch_for_backend(run)
    return GRPOTrainer(
        model=run.model,
        processing_class=run.tokenizer,
        reward_funcs=run.reward_funcs,
        args=grpo_config(run),
        train_dataset=train_dataset,
        callbacks=kit_callbacks(run),
    )


def connect(trainer, preset: Preset | None = None) -> None:
    """Give the kit's dashboard (a TRL callback) the trainer, so it can show the latest sampled completions; on CPU
    install the shared-prompt speed-ups (helpers.cpu_compat; bf16 sampling if the preset asks and the CPU has native
    bf16); time each step's phases into metrics.jsonl (helpers.step_timing: time/generation_s, ...)."""
    from helpers.run.dashboard import TrainingDashboard
    from helpers.step_timing import StepTimer

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TrainingDashboard) and callback.trainer is None:
            callback.trainer = trainer
    if trainer.args.use_cpu:  # each group's prompt once in generation and loss (docs/performance.md)
        from helpers.cpu_compat import cpu_has_native_bf16, speed_up_grpo_on_cpu

        bf16_sampling = bool(preset and preset.cpu_bf16_sampling)
        if bf16_sampling and not cpu_has_native_bf16():
            print("[grpo-kit] cpu_bf16_sampling: this CPU has no native bf16 (AVX512-BF16 or AMX), where bf16 is "
                  "slower than fp32; sampling in fp32 instead")
            bf16_sampling = False
        speed_up_grpo_on_cpu(trainer, bf16_sampling=bf16_sampling)
    if getattr(trainer, "_step_timer", None) is None:  # scripts/benchmark_cpu.py may have attached its own
        try:
            StepTimer().attach(trainer)
        except AttributeError as err:  # a trainer (e.g. Unsloth's generated one) without TRL's phase methods
            print(f"[grpo-kit] step timing is off for this trainer: {err}")


def resume_checkpoint(run: Run) -> str | None:
    """The checkpoint trainer.train(resume_from_checkpoint=...) continues from (None: a fresh start)."""
    return str(run.plan.resume_from.path) if run.plan.resume_from is not None else None


def train(run: Run, trainer) -> None:
    """Step 6: trainer.train(), resuming from the latest complete checkpoint; an OOM prints the cheapest fixes."""
    from helpers.memory.oom_doctor import oom_advice

    connect(trainer, run.preset)
    with oom_advice(run.preset, gpu=run.gpu):
        trainer.train(resume_from_checkpoint=resume_checkpoint(run))


def _train_seconds(trainer) -> float:
    """trainer.train()'s own train_runtime (the last log entry), 0.0 when it logged none."""
    ends = [e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e]
    return float(ends[-1]) if ends else 0.0


def finish(run: Run, trainer, heldout, before) -> dict:
    """Step 7: save adapter/, evaluate after, write samples, plots, eval.json and summary.json."""
    from helpers.run.distributed import save_adapter_once, zero3_active
    from helpers.evaluation import (eval_report, evaluate, pass_at_k_before_after, summary_of, write_eval,
                                    write_samples)
    from helpers.run.metrics import plot_rewards, read_metrics
    from helpers.sharing import save_adapter
    from helpers.step_timing import summarize_step_times

    preset, model, tokenizer, run_dir = run.preset, run.model, run.tokenizer, run.run_dir
    zero3 = run.dist.distributed and zero3_active()
    # The run folder's own output: plan_run already refused to touch a finished run without --overwrite.
    adapter = save_adapter_once(trainer, model, tokenizer, run_dir / "adapter",
                                lambda m, t, p: save_adapter(m, t, p, overwrite=True), run.dist)
    if not run.dist.is_main:
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
        "wall_seconds": round(time.time() - run.started, 1),
        "train_seconds": round(_train_seconds(trainer), 1),
        "before": summary_of(before),
        "after": summary_of(after),
        "reward_funcs": reward_names(run.reward_funcs),
        "runtime": run.runtime.describe(),
        "time": summarize_step_times(rows),  # where the training time went, per phase (helpers.step_timing)
    }
    pass_k = None
    if run.options.pass_k_samples:
        k = run.options.pass_k_samples
        print(f"[grpo-kit] sampled pass@k with {k} samples per question, before and after ...")
        pass_k = pass_at_k_before_after(model, tokenizer, heldout, preset, n=k, adapter_path=adapter)
    write_eval(run_dir / "eval.json", eval_report(before, after, preset, pass_at_k=pass_k))
    if run.plan.resume_from is not None:
        summary["resumed_from_step"] = run.plan.resume_from.step
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[grpo-kit] results in {run_dir}/: summary.json, eval.json, metrics.jsonl, reward_curve.png, dashboard.png, "
          "samples.jsonl, adapter/")
    return summary


def run_all(preset: Preset, options: RunOptions | None = None, reward_funcs=None) -> dict:
    """Every step in order: what `python -m helpers.train` does, and what notebook 05 does cell by cell."""
    run = prepare(preset, options, reward_funcs)
    load_model(run)
    train_dataset, heldout = load_data(run)
    before = evaluate_before(run, heldout)
    trainer = build_trainer(run, train_dataset)
    train(run, trainer)
    return finish(run, trainer, heldout, before)


def run(args) -> dict:
    """The command line's job from parsed arguments (parse_args)."""
    rt.start_gpu_process(args.preset)  # GPU: allocator settings before CUDA, Unsloth before transformers/TRL
    return run_all(get_preset(args.preset, **overrides_from(args)), options_from(args))


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
