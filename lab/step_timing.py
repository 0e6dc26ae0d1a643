"""Where a GRPO step's time goes, phase by phase, written into every metrics.jsonl row as time/* keys (the lab's).

    extensions.use(StepTiming())         # helpers.run.extensions: every run of this process is timed
    # or, on a trainer of your own:
    StepTimer().attach(trainer)          # before trainer.train()
    summary["time"] = summarize_step_times(read_metrics(run_dir / "metrics.jsonl"))

A course run records only TRL's own step_time; `python -m lab.scale_out` (helpers.train with the lab plugged in),
lab/benchmark_memory.py and lab/benchmark_cpu.py time every phase. Standard library only: benchmark_cpu loads this
file into the checkout it times, whatever that checkout's helpers hold.

This module is the one home for "which TRL methods are a step's phases" (TRL 1.15.0, transformers 5.17.0):

- generation      GRPOTrainer._generate (tokenize prompts, model.generate, decode)
- rewards         GRPOTrainer._calculate_rewards (the reward functions)
- logps_nograd    GRPOTrainer._get_per_token_logps_and_entropies called inside _generate_and_score_completions:
                  the old-policy and reference log-probabilities (no gradient). TRL only computes the old ones
                  when generation and optimization steps are misaligned or vLLM's correction is on, and the
                  reference ones only when beta > 0, so on the cpu preset this is normally 0.
- policy_forward  the same method called from the loss (with gradient)
- backward        Accelerator.backward
- optimizer       between the on_pre_optimizer_step and on_optimizer_step events (optimizer.step())
- callbacks       every callback event (dashboard, memory sampling, metrics writing, checkpoint rotation)
- checkpoint      Trainer._save_checkpoint
- other           the rest: batching, advantages, grad clipping, scheduler, TRL's bookkeeping

Each row covers the time since the previous row was logged (time/step_s), so the phases add up to it. Work done
after a row is logged (that step's checkpoint, the metrics writer itself) lands in the next row; what follows the
last row is kept in StepTimer.unlogged. Timing is by wall clock (time.perf_counter): on a CUDA device the
phases would need a synchronize to be exact, so on a GPU read them as rough shares.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import defaultdict

PHASES = ("generation", "rewards", "logps_nograd", "policy_forward", "backward", "optimizer", "callbacks",
          "checkpoint", "other")
PREFIX = "time/"

# The TRL / transformers methods whose calls are a phase (method name on the trainer -> phase).
TRAINER_PHASE_METHODS = {
    "_generate": "generation",
    "_calculate_rewards": "rewards",
    "_save_checkpoint": "checkpoint",
}
LOGPS_METHOD = "_get_per_token_logps_and_entropies"
GENERATE_AND_SCORE_METHOD = "_generate_and_score_completions"


def _count_completion_tokens(generate_output) -> int:
    """TRL's _generate returns (prompt_ids, completion_ids, ...): lists of token ids per completion."""
    try:
        return sum(len(ids) for ids in generate_output[1])
    except (TypeError, IndexError):
        return 0


class StepTimer:
    """Time each GRPO step's phases and add them to the logs (time/<phase>_s, time/step_s, time/generation_tokens).

    It wraps the trainer's methods on the instance (not the class) and its callback handler's call_event, so the
    time/* keys are in the logs dict before any callback sees it, whatever the callbacks' order (MetricsRecorder
    writes them to metrics.jsonl).
    """

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.pending: dict[str, float] = defaultdict(float)  # seconds per phase since the last logged row
        self.tokens = 0
        self.interval_start: float | None = None
        self._in_generate_and_score = 0
        self._optimizer_started: float | None = None
        self.unlogged: dict[str, float] = {}

    # ---- attaching
    def attach(self, trainer):
        """Wrap the trainer's phase methods; returns the trainer. Attaching a second timer is refused."""
        if getattr(trainer, "_step_timer", None) is not None:
            raise ValueError("this trainer already has a StepTimer attached: timing it twice would count twice.")
        trainer._step_timer = self
        for name, phase in TRAINER_PHASE_METHODS.items():
            self._wrap(trainer, name, self._timed(phase, count_tokens=phase == "generation"))
        self._wrap(trainer, LOGPS_METHOD, self._timed_logps)
        self._wrap(trainer, GENERATE_AND_SCORE_METHOD, self._inside_generate_and_score)
        self._wrap(trainer.accelerator, "backward", self._timed("backward"))
        self._wrap(trainer.callback_handler, "call_event", self._timed_event)
        return trainer

    @staticmethod
    def _wrap(obj, name, make_wrapper):
        original = getattr(obj, name, None)
        if original is None:
            raise AttributeError(
                f"{type(obj).__name__} has no method {name}: the installed TRL/transformers is not the version "
                "lab/step_timing.py was written for (trl 1.15.0, transformers 5.17.0). Fix: install the "
                "pinned versions from requirements-cpu.txt, or update TRAINER_PHASE_METHODS."
            )
        setattr(obj, name, functools.wraps(original)(make_wrapper(original)))

    # ---- wrappers
    def _timed(self, phase, count_tokens=False):
        def make(original):
            def wrapper(*args, **kwargs):
                t0 = self.clock()
                try:
                    out = original(*args, **kwargs)
                finally:
                    self.pending[phase] += self.clock() - t0
                if count_tokens:
                    self.tokens += _count_completion_tokens(out)
                return out

            return wrapper

        return make

    def _timed_logps(self, original):
        def wrapper(*args, **kwargs):
            phase = "logps_nograd" if self._in_generate_and_score else "policy_forward"
            t0 = self.clock()
            try:
                return original(*args, **kwargs)
            finally:
                self.pending[phase] += self.clock() - t0

        return wrapper

    def _inside_generate_and_score(self, original):
        def wrapper(*args, **kwargs):
            self._in_generate_and_score += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._in_generate_and_score -= 1

        return wrapper

    def _timed_event(self, original):
        def wrapper(event, args, state, control, **kwargs):
            now = self.clock()
            if event == "on_train_begin" or self.interval_start is None:
                self.interval_start = now
            if event == "on_optimizer_step" and self._optimizer_started is not None:
                self.pending["optimizer"] += now - self._optimizer_started
                self._optimizer_started = None
            if event == "on_log":
                self._add_to_logs(kwargs.get("logs"), now)
            t0 = self.clock()
            try:
                return original(event, args, state, control, **kwargs)
            finally:
                end = self.clock()
                self.pending["callbacks"] += end - t0
                if event == "on_pre_optimizer_step":
                    self._optimizer_started = end
                if event == "on_train_end":
                    self.unlogged = self._row(end)

        return wrapper

    def _row(self, now: float) -> dict[str, float]:
        step = now - (self.interval_start if self.interval_start is not None else now)
        row = {f"{PREFIX}{p}_s": round(self.pending.get(p, 0.0), 4) for p in PHASES if p != "other"}
        row[f"{PREFIX}other_s"] = round(max(0.0, step - sum(self.pending.get(p, 0.0) for p in PHASES)), 4)
        row[f"{PREFIX}step_s"] = round(step, 4)
        row[f"{PREFIX}generation_tokens"] = self.tokens
        return row

    def _add_to_logs(self, logs, now: float):
        """A training step's row gets the phases since the previous row; eval and the closing summary do not."""
        if logs is None or "train_runtime" in logs or any(k.startswith("eval_") for k in logs):
            return
        logs.update(self._row(now))
        self.pending.clear()
        self.tokens = 0
        self.interval_start = now


def summarize_step_times(rows: list[dict]) -> dict:
    """Sum a run's metrics.jsonl rows (helpers.run.metrics.read_metrics) into totals and shares for summary.json.

    {"steps": N, "seconds": {"generation": ..., ..., "step": total}, "share": {"generation": 0.41, ...},
     "generation_tokens_per_s": ..., "seconds_per_step": ...}; {} when the rows hold no time/* keys.
    """
    rows = [r for r in rows if f"{PREFIX}step_s" in r]
    if not rows:
        return {}
    seconds = {p: round(sum(r.get(f"{PREFIX}{p}_s") or 0.0 for r in rows), 2) for p in PHASES}
    total = sum(r[f"{PREFIX}step_s"] for r in rows)
    tokens = sum(r.get(f"{PREFIX}generation_tokens") or 0 for r in rows)
    gen_s = sum(r.get(f"{PREFIX}generation_s") or 0.0 for r in rows)
    return {
        "steps": len(rows),
        "seconds": {**seconds, "step": round(total, 2)},
        "share": {p: round(s / total, 3) if total else 0.0 for p, s in seconds.items()},
        "seconds_per_step": round(total / len(rows), 2),
        "generation_tokens": tokens,
        "generation_tokens_per_s": round(tokens / gen_s, 1) if gen_s else None,
    }


class StepTiming:
    """The extension (helpers.run.extensions) that times every run: a StepTimer on the trainer after the kit's
    patches (so it times the CPU versions), and summary.json's "time", the run's rows summed."""

    def prepare_trainer(self, state, trainer):
        if getattr(trainer, "_step_timer", None) is not None:  # lab/benchmark_cpu.py may have attached its own
            return
        try:
            StepTimer().attach(trainer)
        except AttributeError as err:  # a trainer (e.g. Unsloth's generated one) without TRL's phase methods
            logging.getLogger("grpo_kit").info(f"step timing is off for this trainer: {err}")  # helpers.messages' logger

    def summary(self, state, rows: list[dict]) -> dict:
        return {"time": summarize_step_times(rows)}
