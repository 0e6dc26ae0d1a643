"""Training that goes bad says so: NaN or infinity in the loss, the gradient norm or a reward stops the run at that
step, with the cause, the step and the fix, before a checkpoint of the bad weights is written.

    health = TrainingHealth()                 # one of helpers.run.pipeline.kit_callbacks
    health.watch_rewards(trainer)             # helpers.run.trl_patches.install_trainer_patches does this
    trainer.train()
    health.status()                           # "finished" or "stopped: grad_norm is nan at step 3 ... Fix: ..."

Two checks. What TRL logs (`loss`, `grad_norm`, `reward`, `rewards/<name>/mean`) is read at every log; a value that is
NaN or infinite (metrics.jsonl stores it as null) stops the run. And each reward function's output is checked as it
is computed, before TRL turns it into a tensor: a value that is not a number, an infinity, a list of the wrong
length, or None/NaN for every completion (TRL reads None as "not applicable", so such a reward gives no signal at
all) names the function and stops the run at the end of that step. A bad output is handed to TRL as "not
applicable" so the step itself does not crash.

Stopping sets control.should_training_stop and clears control.should_save in the same step, so Trainer never saves
a checkpoint of the bad state: the last good checkpoint stays the latest. helpers.run.pipeline.finish then writes
summary.json with this status instead of an adapter and an evaluation of broken weights.
"""

from __future__ import annotations

import functools
import inspect
import math

from transformers import TrainerCallback

from helpers.messages import warn

WATCHED = ("loss", "grad_norm", "reward")
FP16_SKIPS = 5  # fp16: this many overflowing gradients in a row stop the run (one now and then is the scaler's job)
FINISHED = "finished"

FIX_TRAINING = ("Fix: lower the learning rate (--learning-rate, e.g. by 10x), keep beta and temperature finite and "
                "positive, and on a T4 (fp16) try max_grad_norm 0.1; then run again with --overwrite or a new --run-dir")
FIX_REWARD = ("Fix: make every reward function return one finite float per completion (0.0 rather than None or "
              "NaN when it cannot score one), try it on a few completions by hand (notebook 04), then run again with "
              "--overwrite or a new --run-dir")


def watched(key: str) -> bool:
    """The logged values whose NaN or infinity means training went bad."""
    return key in WATCHED or (key.startswith("rewards/") and key.endswith("/mean"))


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def bad_values(logs: dict) -> list[str]:
    """'grad_norm is nan', ... for each watched value that is not finite (None: metrics.jsonl's stored NaN)."""
    found = []
    for key, value in logs.items():
        if watched(key) and not _finite(value):
            found.append(f"{key} is {'NaN (stored as null)' if value is None else value}")
    return found


def _not_a_number(value) -> bool:
    return isinstance(value, (str, bytes)) or (value is not None and not _is_float(value))


def _is_float(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def reward_problem(name: str, values, n: int) -> str | None:
    """What is wrong with a reward function's output for n completions (None: nothing)."""
    try:
        values = list(values)
    except TypeError:
        return f"reward function {name} returned {type(values).__name__}, not a list with one value per completion"
    if len(values) != n:
        return f"reward function {name} returned {len(values)} values for {n} completions"
    odd = next((v for v in values if _not_a_number(v)), None)
    if odd is not None:
        return f"reward function {name} returned {odd!r} ({type(odd).__name__}), not a number"
    if any(v is not None and math.isinf(float(v)) for v in values):
        return f"reward function {name} returned an infinite reward"
    if n and all(v is None or math.isnan(float(v)) for v in values):
        kinds = " or ".join(sorted({"None" if v is None else "NaN" for v in values}))
        return (f"reward function {name} returned {kinds} for every one of the {n} completions (TRL reads that as "
                "'not applicable': no learning signal)")
    return None


class TrainingHealth(TrainerCallback):
    """Stop the run at the first step that logs NaN/inf or whose reward functions returned unusable values; see
    the module docstring. say: where its lines go (helpers.messages.warn). checkpoint_dir: named in the message."""

    def __init__(self, checkpoint_dir=None, say=None):
        self.checkpoint_dir = checkpoint_dir
        self.problem: str | None = None  # the status once stopped: "grad_norm is nan at step 3. ... Fix: ..."
        self.pending: list[str] = []  # reward problems seen during the step in progress
        self.fp16_skips = 0  # consecutive logs whose only bad value is grad_norm, under fp16
        self.say = say or warn

    def status(self) -> str:
        return FINISHED if self.problem is None else f"stopped: {self.problem}"

    # -- reward outputs, checked as TRL computes them
    def install_patches(self, trainer) -> None:
        """This callback's part of helpers.run.trl_patches.install_trainer_patches: check the reward outputs."""
        self.watch_rewards(trainer)

    def watch_rewards(self, trainer) -> None:
        """Wrap each plain reward function on this trainer (not reward models, not async ones) once."""
        funcs = getattr(trainer, "reward_funcs", None)
        if not isinstance(funcs, list):
            return
        for i, func in enumerate(funcs):
            if callable(func) and not getattr(func, "_kit_checked", False) and not inspect.iscoroutinefunction(func) \
                    and not hasattr(func, "forward"):
                funcs[i] = self._checked(func)

    def _checked(self, func):
        name = getattr(func, "__name__", type(func).__name__)

        @functools.wraps(func)
        def checked(*args, **kwargs):  # TRL passes prompts=, completions=, ... by keyword; a person may not
            values = func(*args, **kwargs)
            completions = kwargs.get("completions", args[1] if len(args) > 1 else None)
            n = len(completions) if completions is not None else len(kwargs.get("prompts", args[0] if args else ()))
            problem = reward_problem(name, values, n)
            if problem is None:
                return values
            if problem not in self.pending:
                self.pending.append(problem)
            return [None] * n  # "not applicable" for TRL: the step finishes, then the run stops

        checked._kit_checked = True
        return checked

    # -- callback hooks
    def _stop(self, state, control, causes: list[str], fix: str) -> None:
        if self.problem is not None:
            return
        self.problem = f"{'; '.join(causes)} at step {state.global_step}. {fix}"
        control.should_training_stop = True
        control.should_save = False  # Trainer saves after the log: never a checkpoint of these weights
        where = f" in {self.checkpoint_dir}" if self.checkpoint_dir else ""
        self.say(f"TRAINING STOPPED at step {state.global_step}: {'; '.join(causes)}. No checkpoint of this step is "
                 f"written (the last good one{where} is kept). {fix}")

    def on_step_end(self, args, state, control, **kwargs):
        if self.pending and getattr(args, "world_size", 1) == 1:
            # several processes each check their own share of the batch: stopping one alone would hang the others,
            # so there the gathered NaN reward in on_log stops them all, and this names the function meanwhile
            self._stop(state, control, self.pending, FIX_REWARD)
        elif self.pending and self.problem is None:
            self.say(f"step {state.global_step}: {'; '.join(self.pending)}")
            self.pending = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        causes = bad_values(logs)
        if causes and getattr(args, "fp16", False) and all(c.startswith("grad_norm") for c in causes):
            # fp16's loss scaler: an overflowing gradient skips the step and halves the scale. Normal now and then;
            # only a run of them means the training itself is broken.
            self.fp16_skips += 1
            if self.fp16_skips < FP16_SKIPS:
                self.say(f"step {state.global_step}: {causes[0]}: fp16's loss scaler skipped this step (normal "
                         f"now and then; {FP16_SKIPS} in a row stop the run)")
                return
        elif not causes:
            self.fp16_skips = 0
        if causes:
            reward_only = all(c.startswith(("reward", "rewards/")) for c in causes)
            self._stop(state, control, causes, FIX_REWARD if reward_only else FIX_TRAINING)


def training_status(trainer) -> str:
    """"finished", or "stopped: <cause> at step N. Fix: ..." from the trainer's TrainingHealth callback (if any)."""
    health = find_health(trainer)
    return health.status() if health is not None else FINISHED


def find_health(trainer) -> TrainingHealth | None:
    handler = getattr(trainer, "callback_handler", None)
    return next((c for c in getattr(handler, "callbacks", ()) if isinstance(c, TrainingHealth)), None)
