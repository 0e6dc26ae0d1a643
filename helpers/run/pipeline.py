"""The run as named steps: `python -m helpers.train` calls run_all, notebook 05 calls the same steps cell by cell,
so the two cannot drift:

    state = start(preset, RunOptions(...), reward_funcs)   # the guard, the run folder planned, config.json written
    model, tokenizer = load_model(state)                    # Unsloth + vLLM on GPU, embedded model + peft on CPU
    train_dataset, heldout = load_data(state)               # filtered to max_prompt_length
    before = evaluate_before(state, heldout)                # (reused from before.json when resuming)
    trainer = GRPOTrainer(model=..., reward_funcs=state.reward_funcs, args=grpo_config(state),
                          train_dataset=..., processing_class=..., callbacks=kit_callbacks(state))   # build_trainer
    train(state, trainer)                                   # resumes from the latest complete checkpoint
    summary = finish(state, trainer, heldout, before)       # adapter/, evaluation after, plots, summary.json

`run` does every step and returns the state (the trained model with it); `run_all` returns just the summary.

Names: `RunState` is what the steps hand each other; `state.run_dir` is the run folder on disk (helpers.run.folder
plans it); the package helpers.run is the run's wing as a whole. A run is one process (`state.dist`); what the lab
adds (each step's phases, several processes under accelerate launch) comes in through helpers.run.extensions.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from helpers import data
from helpers import runtime as rt
from helpers import speedups
from helpers.config import Preset, PresetError, build_grpo_config
from helpers.evaluation import (eval_report, evaluate, evaluate_base, load_before, pass_at_k_before_after, save_before,
                                summary_of, write_eval, write_samples)
from helpers.memory.monitor import MemoryMonitor
from helpers.messages import say
from helpers.memory.oom_doctor import oom_advice
from helpers.model import check_trainer_uses_model_engine, load
from helpers.run import checkpoints as ck
from helpers.run.dashboard import TrainingDashboard
from helpers.run.health import FINISHED, TrainingHealth, training_status
from helpers.run.folder import (RunDirError, RunFolder, checkpoints_inside, plan_folder, reward_names, run_config,
                                write_config)
from helpers.run import extensions, guard
from helpers.run.options import RunOptions
from helpers.run.reward_specs import RewardError, resolve_rewards, try_rewards, watch_rewards
from helpers.run.metrics import AdvantageStats, MetricsRecorder, plot_rewards, read_metrics
from helpers.run.trl_patches import install_trainer_patches
from helpers.reuse import write_atomically
from helpers.sharing import hand_off_run, save_adapter
from transformers import TrainerCallback


def default_save_steps(preset) -> int:
    """About five checkpoints per run, at most 25 steps apart, each at the end of a sampled batch: TRL does not
    checkpoint the batch it is still reusing (num_iterations > 1), so a resumed run samples afresh there."""
    every = preset.num_iterations
    return max(every, min(25, preset.max_steps // 5) // every * every)


def build_datasets(preset, tokenizer):
    """(train Dataset, eval rows, number of prompts dropped for length)."""
    train, heldout = data.training_questions(preset), data.heldout_questions(preset)
    train, dropped = data.filter_long_prompts(train, tokenizer, preset.max_prompt_length)
    if len(train) < preset.prompts_per_step:
        raise PresetError(
            f"only {len(train)} training prompts fit max_prompt_length={preset.max_prompt_length}. "
            "Fix: raise max_prompt_length (and max_seq_length) in the preset."
        )
    return train, heldout, dropped


@dataclass
class RunState:
    """What the steps hand each other: the recipe, the options, and what is known about this run so far."""

    preset: Preset
    options: RunOptions
    reward_funcs: list
    runtime: rt.Runtime
    dist: extensions.OneProcess  # the run's processes: one, or the lab's (helpers.run.extensions)
    folder: RunFolder | None
    save_steps: int
    gpu: object  # the card we are on (GB), or "t4": what the OOM doctor sizes for
    started: float = field(default_factory=time.time)
    model: object = None
    tokenizer: object = None
    summary: dict | None = None  # what finish returned (run() sets it)

    @property
    def run_dir(self) -> Path:
        return self.folder.run_dir

    def config(self) -> dict:
        """What config.json holds (helpers.run.folder.run_config)."""
        return run_config(self.preset, self.reward_funcs)


def _checked_rewards(reward_funcs, options: RunOptions) -> list:
    reward_funcs = list(resolve_rewards(options.rewards) if reward_funcs is None else reward_funcs)
    if not reward_funcs or not all(callable(f) for f in reward_funcs):
        raise PresetError("reward_funcs must be a non-empty list of functions f(prompts, completions, **columns) -> "
                          "list[float]. Fix: pass e.g. [correctness_reward, my_reward]")
    return reward_funcs


def start(preset: Preset, options: RunOptions | None = None, reward_funcs=None, runtime=None,
          folder: RunFolder | None = None) -> RunState:
    """Step 1: refuse impossible settings before any model loads (helpers.run.guard), plan the run folder (fresh,
    resume or refuse: helpers.run.folder), write config.json. reward_funcs: the functions to train with (TRL's
    reward contract); None = the kit's. runtime: the machine, when the caller has detected it already. folder: the
    run folder, when the caller planned it already (python -m helpers.train does, before importing TRL)."""
    options = options or RunOptions()
    runtime = runtime if runtime is not None else rt.detect()
    dist = extensions.processes()  # one; several only through the lab's wrapper (lab.scale_out)
    guard.check_before_loading(preset, runtime, num_processes=dist.world_size, options=options)
    speedups.configure(preset.cpu_speedups_off)  # this run's switches (on top of $GRPO_KIT_SPEEDUPS_OFF)
    reward_funcs = _checked_rewards(reward_funcs, options)
    try_rewards(reward_funcs, preset, options.reward_timeout)  # a broken reward refused before the model loads
    state = RunState(preset=preset, options=options, reward_funcs=reward_funcs, runtime=runtime, dist=dist,
                     folder=None, save_steps=default_save_steps(preset) if options.save_steps is None
                     else options.save_steps, gpu=runtime.total_gpu_gb if runtime.has_gpu else "t4")
    config = state.config()
    # several processes: process 0 plans (creates or refuses) the folder and every process uses its plan
    state.folder = folder if folder is not None else dist.share(
        lambda: plan_folder(preset, options, reward_funcs), cpu=preset.backend.is_cpu)
    say(runtime.describe())
    say(f"preset {preset.name}: {preset.description}")
    say(f"rewards: {', '.join(config['reward_funcs'])}")
    if dist.is_main:
        write_config(state.folder, config, state.save_steps)
    if state.save_steps and dist.is_main:
        say(f"a checkpoint every {state.save_steps} steps in {state.folder.checkpoint_dir} (the last "
            f"{options.keep} kept); run the same command again to resume after an interruption")
    return state


def load_model(state: RunState):
    """Step 2: (model, tokenizer) with a fresh LoRA adapter (helpers.model.load; notebook 02 shows the calls)."""
    with oom_advice(state.preset, gpu=state.gpu):  # vLLM's KV-cache reservation can fail while loading
        state.model, state.tokenizer = load(state.preset, state.runtime)
    return state.model, state.tokenizer


def load_data(state: RunState):
    """Step 3: (training Dataset, held-out rows); prompts longer than max_prompt_length are dropped."""
    train_dataset, heldout, dropped = build_datasets(state.preset, state.tokenizer)
    say(f"{len(train_dataset)} training prompts ({dropped} dropped as longer than "
        f"{state.preset.max_prompt_length} tokens), {len(heldout)} held-out questions")
    return train_dataset, heldout


def evaluate_before(state: RunState, heldout) -> dict | None:
    """Step 4: greedy accuracy before training (a resumed run reuses before.json: its model is partly trained)."""
    if not state.options.evaluate:
        say("no evaluation before or after training (evaluate=False, --no-evaluate)")
        return None
    folder = state.folder
    before = load_before([state.run_dir / "before.json", folder.checkpoint_dir / "before.json"], state.preset) \
        if folder.continuing else None
    if not state.dist.is_main:
        return None  # several processes: process 0 evaluates and writes; the others go straight to training
    if before is None:
        say("evaluating before training ...")
        before = evaluate_base(state.model, state.tokenizer, heldout, state.preset)  # the adapter is still fresh
        save_before(state.run_dir / "before.json", before, state.preset)
        if state.save_steps and not checkpoints_inside(folder):
            shutil.copy2(state.run_dir / "before.json", folder.checkpoint_dir / "before.json")
    else:
        say("before: reusing before.json from the first start (not re-evaluated with a partly trained "
            "adapter)")
    say(f"before: accuracy {before['accuracy']:.2f}, format {before['format_rate']:.2f}")
    return before


def grpo_config(state: RunState):
    """The trl.GRPOConfig of this preset on this runtime (helpers.config.grpo_config_kwargs, contract-tested)."""
    return build_grpo_config(state.preset, state.runtime, output_dir=str(state.folder.checkpoint_dir),
                             save_steps=state.save_steps)


def check_config(state: RunState, config) -> None:
    """Raise PresetError where a GRPOConfig written by hand (notebook 05) differs from the preset's."""
    want = grpo_config(state)  # compared as GRPOConfig holds them (it normalises e.g. report_to="none" to [])
    diff = [f"{k}: config has {getattr(config, k, None)!r}, the preset gives {getattr(want, k)!r}"
            for k in sorted(want.to_dict()) if getattr(config, k, None) != getattr(want, k)]
    if diff:
        raise PresetError("the GRPOConfig differs from the preset (" + "; ".join(diff) + "). Fix: change the preset "
                          "(setup.prepare(..., field=value)) rather than the config, so config.json says what ran")


class KeepLastCheckpoints(TrainerCallback):
    """After each save, helpers.run.checkpoints.rotate: the newest `keep` complete checkpoints stay."""

    def __init__(self, root, keep: int):
        self.root, self.keep = Path(root), keep

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            ck.rotate(self.root, self.keep)


def kit_callbacks(state: RunState) -> list:
    """The kit's extras as TRL callbacks: memory monitor, metrics.jsonl, checkpoint rotation, live dashboard, and
    the health check that stops a run at its first NaN/inf (helpers.run.health)."""
    # The monitor and AdvantageStats add memory/* and advantages/* to the logs: before the recorder that writes them.
    callbacks = [MemoryMonitor(), AdvantageStats(), MetricsRecorder(state.run_dir / "metrics.jsonl")]
    callbacks += [callback for hook in extensions.hooks("callbacks") for callback in hook(state)]  # the lab's
    if state.save_steps and state.dist.is_main:  # Trainer saves checkpoints from process 0; it alone rotates them
        callbacks.append(KeepLastCheckpoints(state.folder.checkpoint_dir, state.options.keep))
    if state.options.dashboard != "off" and state.dist.is_main:
        callbacks.append(TrainingDashboard(state.run_dir, mode=state.options.dashboard,
                                           history=read_metrics(state.run_dir / "metrics.jsonl"),
                                           max_completion_length=state.preset.max_completion_length,
                                           title=f"GRPO on {state.preset.model_name}",
                                           verbose=state.options.verbose))
    # last: the step's own line comes first, then why the run stops (the bad step is in metrics.jsonl too)
    callbacks.append(TrainingHealth(state.folder.checkpoint_dir if state.save_steps else None))
    return callbacks


def build_trainer(state: RunState, train_dataset):
    """Step 5: the GRPOTrainer, exactly as notebook 05 writes it out; on the GPU, checked to sample with the model's
    own vLLM engine and its LoRA adapter (helpers.model.check_trainer_uses_model_engine)."""
    from trl import GRPOTrainer  # after Unsloth on the GPU path (helpers.run.guard imported it first)

    trainer = GRPOTrainer(
        model=state.model,
        processing_class=state.tokenizer,
        reward_funcs=state.reward_funcs,
        args=grpo_config(state),
        train_dataset=train_dataset,
        callbacks=kit_callbacks(state),
    )
    check_trainer_uses_model_engine(trainer, state.model)
    return trainer


def prepare_trainer(trainer, preset: Preset | None = None, reward_timeout: float = 0) -> None:
    """Before trainer.train(): the dashboard and AdvantageStats (TRL callbacks) get the trainer, so they can read the latest sampled
    completions; the kit's patches go in (helpers.run.trl_patches: the CPU speed-ups, the step timer); every reward
    call is watched (helpers.run.reward_specs.watch_rewards: a heartbeat, a stop at reward_timeout seconds)."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, (TrainingDashboard, AdvantageStats)) and callback.trainer is None:
            callback.trainer = trainer
    install_trainer_patches(trainer, preset)
    watch_rewards(trainer, reward_timeout)


def resume_checkpoint(state: RunState) -> str | None:
    """The checkpoint trainer.train(resume_from_checkpoint=...) continues from (None: a fresh start)."""
    return str(state.folder.resume_from.path) if state.folder.resume_from is not None else None


def _disk_full_error(state: RunState, what: str, step: int, err: BaseException) -> RunDirError:
    """A full disk while the run writes `what`: the free space, what is kept, and the fix."""
    return RunDirError(
        f"the disk is full: writing {what} failed at step {step} ({ck.free_gb(state.run_dir):.1f} GB free; "
        f"{type(err).__name__}: {str(err)[:120]}). Nothing trained is lost: the checkpoints in "
        f"{state.folder.checkpoint_dir} are kept. Fix: free some space (old runs, exports; a lower --keep keeps fewer "
        f"checkpoints), then run {ck.same_command()} again: it "
        f"{ck.resume_point(state.folder.checkpoint_dir, state.save_steps)}.")


@contextmanager
def training(state: RunState, trainer):
    """Around trainer.train(), in train() below and in notebook 05's own cell: the dashboard, the kit's patches and the
    reward watch go in (prepare_trainer); a checkpoint that already reached max_steps (a kill during the final
    evaluation) is restored, and the body skips training (state.folder.training_done); an OOM prints the cheapest
    fixes; Ctrl-C (and SIGTERM or SIGHUP under python -m helpers.train) says how to resume; a full disk becomes a
    RunDirError with the free space and the fix. First, a trainer the notebook built itself gets build_trainer's
    check: on the GPU it samples with the model's own vLLM engine and its adapter (a no-op without an engine)."""
    check_trainer_uses_model_engine(trainer, state.model)
    prepare_trainer(trainer, state.preset, state.options.reward_timeout)
    for hook in extensions.hooks("prepare_trainer"):  # the lab's (lab.step_timing's timer), after the kit's patches
        hook(state, trainer)
    if state.folder.training_done:
        try:
            ck.restore_trained(trainer, state.folder.resume_from.path)
        except ValueError as err:  # the checkpoint holds no usable adapter: the kit's error line, not a traceback
            raise RunDirError(str(err)) from None
    again = f"run {ck.same_command()} again: it {{}}"
    try:
        with oom_advice(state.preset, gpu=state.gpu):
            yield
    except KeyboardInterrupt:
        say(f"interrupted at step {trainer.state.global_step}. To resume, "
            + again.format(ck.resume_point(state.folder.checkpoint_dir, state.save_steps)))
        raise
    except RewardError as err:
        raise RewardError(f"{err}. Then " + again.format(ck.resume_point(state.folder.checkpoint_dir,
                                                                          state.save_steps))) from None
    except Exception as err:  # noqa: BLE001 - only a full disk is turned into the kit's message; the rest re-raised
        if not ck.disk_full(err):
            raise
        raise _disk_full_error(state, getattr(err, "filename", None) or state.folder.checkpoint_dir,
                               trainer.state.global_step, err) from err


def train(state: RunState, trainer) -> None:
    """Step 6: trainer.train(), resuming from the latest complete checkpoint (see training() for what surrounds it)."""
    with training(state, trainer):
        if not state.folder.training_done:
            trainer.train(resume_from_checkpoint=resume_checkpoint(state))


def _train_seconds(trainer) -> float:
    """trainer.train()'s own train_runtime (the last log entry), 0.0 when it logged none."""
    ends = [e["train_runtime"] for e in trainer.state.log_history if "train_runtime" in e]
    return float(ends[-1]) if ends else 0.0


def _evaluate_after(state: RunState, model, heldout, adapter: Path) -> dict:
    model = state.dist.model_to_evaluate(state.preset, model, adapter)
    say("evaluating after training ...")
    after = evaluate(model, state.tokenizer, heldout, state.preset,
                     lora_path=adapter if state.preset.backend.uses_unsloth else None)
    say(f"after: accuracy {after['accuracy']:.2f}, format {after['format_rate']:.2f}")
    return after


def _speedups_used(preset: Preset) -> dict:
    """summary.json's "cpu_speedups": the CPU path's speed-ups this run used (helpers.speedups); none elsewhere."""
    return {"cpu_speedups": speedups.active()} if preset.backend.is_cpu else {}


def _extension_summary(state: RunState, rows: list[dict]) -> dict:
    """What the lab's extensions add to summary.json (lab.step_timing: "time"), from the run's metrics rows."""
    return {key: value for hook in extensions.hooks("summary") for key, value in hook(state, rows).items()}


def _finish_stopped(state: RunState, trainer, before, status: str) -> dict:
    """A run that helpers.run.health stopped (NaN/inf, unusable rewards): no adapter and no evaluation of the bad
    weights; summary.json says what happened and the fix, the reward curve shows the steps that ran."""
    if not state.dist.is_main:
        return {}
    rows = read_metrics(state.run_dir / "metrics.jsonl")
    try:
        plot_rewards(rows, state.run_dir / "reward_curve.png", title=f"GRPO on {state.preset.model_name}")
    except ValueError:
        pass  # no step logged a finite reward: nothing to plot
    summary = {"preset": state.preset.name, "model": state.preset.model_name, "backend": state.preset.backend.value,
               "status": status, "steps": trainer.state.global_step,
               "wall_seconds": round(time.time() - state.started, 1),
               "train_seconds": round(_train_seconds(trainer), 1), "before": summary_of(before) if before else None,
               "after": None, "reward_funcs": reward_names(state.reward_funcs), "runtime": state.runtime.describe(),
               **_speedups_used(state.preset), **_extension_summary(state, rows)}
    write_atomically(state.run_dir / "summary.json", json.dumps(summary, indent=2))
    state.folder.release()
    say(f"the run {status} (summary.json in {state.run_dir}/ says so; no adapter was saved and no "
        "evaluation after training was run)")
    return summary


def _save_adapter_beside(model, tokenizer, path: Path) -> Path:
    """adapter/ written as adapter.partial/ and moved into place: a full disk or a kill mid-save leaves the earlier
    adapter/ (if any) whole, and no half-written one under its name."""
    partial = path.with_name(path.name + ".partial")
    try:
        save_adapter(model, tokenizer, partial, overwrite=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if path.exists():
        shutil.rmtree(path)
    partial.replace(path)
    return path


def finish(state: RunState, trainer, heldout, before) -> dict:
    """Step 7: save adapter/, evaluate after, write samples, plots, eval.json and summary.json. A full disk on the
    way is the kit's message (the free space, the checkpoints kept, the fix), not a library's traceback. Then, in a
    notebook on Colab without Drive, the run goes to the student's computer as one zip for 06 (sharing.hand_off_run;
    nothing elsewhere, nor under python -m helpers.train, whose process cannot start a browser download)."""
    try:
        summary = _finish(state, trainer, heldout, before)
    except Exception as err:  # noqa: BLE001 - only a full disk is turned into the kit's message; the rest re-raised
        if not ck.disk_full(err):
            raise
        raise _disk_full_error(state, getattr(err, "filename", None) or f"the results in {state.run_dir}",
                               trainer.state.global_step, err) from err
    if state.dist.is_main and rt.in_notebook():
        hand_off_run(state.run_dir)
    return summary


def _finish(state: RunState, trainer, heldout, before) -> dict:
    preset, run_dir = state.preset, state.run_dir
    status = training_status(trainer)  # "finished", or "stopped: ..." (helpers.run.health)
    if status != FINISHED:
        return _finish_stopped(state, trainer, before, status)
    # The run folder's own output: plan_run_folder already refused to touch a finished run without --overwrite.
    adapter = state.dist.save_adapter(trainer, state.model, state.tokenizer, run_dir / "adapter", _save_adapter_beside)
    if not state.dist.is_main:
        return {}  # every process trained; process 0 evaluates and writes the results
    evaluated = state.options.evaluate
    after = _evaluate_after(state, state.model, heldout, adapter) if evaluated else None
    if evaluated:
        write_samples(run_dir / "samples.jsonl", before, after)
    rows = read_metrics(run_dir / "metrics.jsonl")
    plot_rewards(rows, run_dir / "reward_curve.png", title=f"GRPO on {preset.model_name}")
    summary = {
        "preset": preset.name,
        "model": preset.model_name,
        "backend": preset.backend.value,
        "status": status,
        "steps": trainer.state.global_step,
        "wall_seconds": round(time.time() - state.started, 1),
        "train_seconds": round(_train_seconds(trainer), 1),
        "before": summary_of(before) if evaluated else None,
        "after": summary_of(after) if evaluated else None,
        "reward_funcs": reward_names(state.reward_funcs),
        "runtime": state.runtime.describe(),
        **_speedups_used(preset),
        **_extension_summary(state, rows),
    }
    pass_k = None
    if state.options.pass_k_samples:
        k = state.options.pass_k_samples
        say(f"sampled pass@k with {k} samples per question, before and after ...")
        pass_k = pass_at_k_before_after(state.model, state.tokenizer, heldout, preset, n=k, adapter_path=adapter)
    if evaluated:
        write_eval(run_dir / "eval.json", eval_report(before, after, preset, pass_at_k=pass_k))
    if state.folder.resume_from is not None:
        summary["resumed_from_step"] = state.folder.resume_from.step
    write_atomically(run_dir / "summary.json", json.dumps(summary, indent=2))  # never half a "finished run"
    state.folder.release()  # the run is over: the folder may be used by another process
    say(f"results in {run_dir}/: summary.json, " + ("eval.json, " if evaluated else "") + "metrics.jsonl, "
        "reward_curve.png, dashboard.png, " + ("samples.jsonl, " if evaluated else "") + "adapter/")
    return summary


def run(preset: Preset, options: RunOptions | None = None, reward_funcs=None, runtime=None,
        folder: RunFolder | None = None) -> RunState:
    """Every step in order; returns the run's state: state.summary, and state.model / state.tokenizer, the trained
    model. On a GPU that model holds this process's vLLM engine, the only one that fits: evaluate with it rather than
    loading the model again (helpers.model refuses a second engine)."""
    state = start(preset, options, reward_funcs, runtime=runtime, folder=folder)  # the CLI's runtime and folder
    load_model(state)
    train_dataset, heldout = load_data(state)
    before = evaluate_before(state, heldout)
    trainer = build_trainer(state, train_dataset)
    train(state, trainer)
    state.summary = finish(state, trainer, heldout, before)
    return state


def run_all(preset: Preset, options: RunOptions | None = None, reward_funcs=None, runtime=None,
            folder: RunFolder | None = None) -> dict:
    """Every step in order, returning the summary: what `python -m helpers.train` does, and what notebook 05 does
    cell by cell."""
    return run(preset, options, reward_funcs, runtime, folder).summary
