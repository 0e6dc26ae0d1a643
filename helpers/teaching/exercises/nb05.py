"""Lesson 05 train: make_config and make_trainer (read, not run: their GRPOConfig/GRPOTrainer call is recorded), zero-spread
groups, the four measured runs (learned or not), the clipped objective, the KL penalty and the beta prediction."""

from __future__ import annotations

import math
from types import SimpleNamespace

from helpers.config import get_preset
from helpers.teaching.exercises.core import Exercise, Fail, call, close, intercept, letter_of, numbered

LESSON = "05"


# (what the case is, preset, runtime): the config must follow the card, not be written for the one it runs on.
def config_cases():
    from helpers.runtime import fake_runtime

    return [("the cpu preset with beta=0.04 on a CPU", get_preset("cpu").with_overrides(beta=0.04), fake_runtime("cpu"),
             5),
            ("the t4 preset on a T4 (compute capability 7.5)", get_preset("t4"), fake_runtime("t4", on_colab=True), None),
            ("the t4 preset on an A100 (compute capability 8.0)", get_preset("t4"), fake_runtime("a100", on_colab=True),
             25)]


def _field_why(name: str) -> str:
    from helpers.teaching.course import CONFIG_WHY

    return CONFIG_WHY.get(name, "see helpers.config.grpo_config_kwargs")


def _judge_config(fn):
    import dataclasses

    from trl import GRPOConfig

    from helpers.config import grpo_config_kwargs

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: make_config, not make_config(...) or a GRPOConfig")
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for case, preset, runtime, save_steps in config_cases():
        with intercept(fn, "GRPOConfig", GRPOConfig) as rec:
            call(case, fn, preset, runtime, "runs/check", save_steps)
        if len(rec.calls) != 1:
            raise Fail(case, f"for {case} make_config called GRPOConfig {len(rec.calls)} times; call it once and "
                             "return what it gives")
        got, want = rec.calls[0], grpo_config_kwargs(preset, runtime, "runs/check", save_steps=save_steps)
        for name, value in want.items():
            mine = got.get(name, defaults.get(name))
            if name == "output_dir" or mine == value:
                continue
            why = _field_why(name)
            if name == "per_device_train_batch_size" and mine == value // preset.num_generations:
                why = "it counts completions, not prompts (TRL >= 0.18): prompts per step = this / num_generations"
            elif name in ("bf16", "fp16", "use_cpu"):
                why = (f"{why}. Precision follows the card: bf16 only from compute capability 8.0 (runtime."
                       "bf16_supported), fp16 on an older GPU, use_cpu with no GPU")
            left = "" if name in got else " (you left it out: GRPOConfig's default)"
            raise Fail(case, f"for {case}, {name} is {mine!r}{left}; it should be {value!r}: {why}.")


def _judge_trainer(fn):
    from trl import GRPOTrainer

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: make_trainer, not make_trainer(...)")
    names = ("model", "tokenizer", "reward_funcs", "config", "train_dataset", "callbacks")
    given = {n: SimpleNamespace(name=n) for n in names}  # stand-ins: each argument must reach its parameter
    where = {"model": "model", "processing_class": "tokenizer", "reward_funcs": "reward_funcs", "args": "config",
             "train_dataset": "train_dataset", "callbacks": "callbacks"}
    role = {"model": "the LoRA model (only the adapter trains)",
            "processing_class": "the tokenizer (it tokenizes prompts and decodes completions)",
            "reward_funcs": "the list of reward functions (summed into one reward per completion)",
            "args": "the GRPOConfig", "train_dataset": "the rows with 'prompt' and 'answer'",
            "callbacks": "the kit's callbacks (memory monitor, metrics.jsonl, checkpoints, dashboard)"}
    with intercept(fn, "GRPOTrainer", GRPOTrainer) as rec:
        call("the trainer", fn, *given.values())
    if len(rec.calls) != 1:
        raise Fail("the trainer", f"make_trainer called GRPOTrainer {len(rec.calls)} times; call it once")
    got = rec.calls[0]
    for param, arg in where.items():
        value = got.get(param)
        if value is not given[arg]:
            have = f"got {value.name}" if isinstance(value, SimpleNamespace) else f"got {value!r:.40}"
            raise Fail(param, f"GRPOTrainer's {param}= should be {role[param]} (make_trainer's {arg}); it {have}.")

ZERO_SPREAD_CASES = [(0.5, 2), (0.5, 4), (0.2, 8), (0.9, 8), (0.05, 16), (0.0, 4), (1.0, 6), (0.3, 1)]


def zero_spread_truth(p: float, group_size: int) -> float:
    """The chance that G completions, each right with probability p (independently), all score the same."""
    return p ** group_size + (1 - p) ** group_size


def _judge_zero_spread(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: zero_spread_chance, not zero_spread_chance(0.5, 4)")
    for p, g in ZERO_SPREAD_CASES:
        case = f"p={p}, G={g}"
        got = call(case, fn, p, g)
        want = zero_spread_truth(p, g)
        if not close(got, want, tol=1e-6):
            hint = ("a group ties when ALL its completions are right OR all are wrong" if close(got, p ** g, 1e-6)
                    or close(got, (1 - p) ** g, 1e-6) else "the completions are independent: multiply chances")
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:.6f} ({hint})")


def diagnose(rows, cap: int = 64) -> tuple[str, str]:
    """(kind, evidence) from helpers.run.dashboard's warning functions: the first warning that holds, else healthy."""
    from helpers.run.dashboard import training_warnings

    found = training_warnings(rows, max_completion_length=cap)
    if not found:
        return "healthy", "the dashboard raises no warning: reward rising, spread above zero, few answers cut off"
    return found[0].kind, found[0].message


# The measured-runs exercise (learned_or_not): four of the kit's measured CPU runs (helpers.teaching.measured_runs), by letter. Whether a run
# learned is read from its held-out accuracy, not from its training curves: that is the point of the exercise.
LEARNING_RUNS = {"A": "lr-1e-3", "B": "default-seed1", "C": "earlier-recipe-seed2", "D": "scale-none"}
LEARNED_MARGIN = 0.1  # accuracy on 50 held-out questions; one standard error is about 0.07
_LEARNED = {"learned": True, "yes": True, "true": True, "did not learn": False, "didn't learn": False, "no": False,
            "false": False, "not learned": False}


def measured(letter_to_name=None) -> dict:
    from helpers.teaching import measured_runs

    return {letter: measured_runs.load(name) for letter, name in (letter_to_name or LEARNING_RUNS).items()}


def learned(run) -> bool | None:
    """True when held-out accuracy rose by LEARNED_MARGIN or more, False when it did not rise, None in between."""
    change = run.meta["after"]["accuracy"] - run.meta["before"]["accuracy"]
    return True if change >= LEARNED_MARGIN - 1e-9 else False if change <= 0 else None


def curve_evidence(run) -> str:
    """What a run's training curves say, in words: the correctness reward, the entropy, the silent groups."""
    rows = run.sampled
    late = rows[len(rows) // 2:]
    correct = sum(r.get("rewards/correctness_reward/mean", 0.0) for r in late) / len(late)
    silent = sum(r.get("frac_reward_zero_std", 0.0) for r in rows) / len(rows)
    return (f"its total reward ended at {rows[-1]['reward']:.2f}, its correctness reward averaged {correct:.2f} (of "
            f"2.0) over the second half, the policy's entropy went {rows[0]['entropy']:.2f} -> {rows[-1]['entropy']:.2f}"
            f", and {silent:.0%} of its sampled groups had zero spread; the dashboard's verdict: {diagnose(run.rows)[0]}")


def plot_measured(runs=None):
    """One panel per run: total and correctness reward (left axis), entropy and zero-spread groups (right axis)."""
    import matplotlib.pyplot as plt

    runs = measured() if runs is None else runs
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.2), sharey=True)
    for ax, (letter, run) in zip(axes, runs.items()):
        rows = run.sampled
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r["reward"] for r in rows], "o-", color="black", markersize=3)
        ax.plot(steps, [r.get("rewards/correctness_reward/mean", 0.0) for r in rows], ".-", color="tab:green")
        ax.set_title(f"run {letter}")
        ax.set_xlabel("step")
        twin = ax.twinx()
        twin.plot(steps, [r["entropy"] for r in rows], ":", color="tab:cyan")
        twin.plot(steps, [r["frac_reward_zero_std"] for r in rows], "--", color="tab:red")
        twin.set_ylim(-0.05, 2.05)
    axes[0].set_ylabel("reward")
    fig.legend(["total reward", "correctness reward", "entropy (right axis)", "zero-spread groups (right axis)"],
               loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _judge_learned(answer):
    if not isinstance(answer, dict):
        raise Fail("the answer", "answer with a dict from run letter to 'learned' or 'did not learn', e.g. "
                                 "{'A': 'learned', ...}")
    runs = measured()
    missing = sorted(set(runs) - set(answer))
    if missing:
        raise Fail(f"run {missing[0]}", f"run {missing[0]} has no answer: give one for each of {sorted(runs)}.")
    for letter, run in runs.items():
        said = _LEARNED.get(str(answer[letter]).strip().lower())
        if said is None:
            raise Fail(f"run {letter}", f"run {letter}: answer 'learned' or 'did not learn', not {answer[letter]!r}.")
        truth = learned(run)
        if said != truth:
            b, a = run.meta["before"]["accuracy"], run.meta["after"]["accuracy"]
            raise Fail(f"run {letter}", f"run {letter}: you said {answer[letter]!r}, but accuracy on "
                                        f"{run.meta['after']['n']} held-out questions went {b:.2f} -> {a:.2f}. From the "
                                        f"curves: {curve_evidence(run)}.")


BETA_CHOICES = {
    "a": "the penalty did keep the sampling more varied (its entropy stayed higher), but that did not turn into "
         "right answers within 40 steps",
    "b": "",
    "c": "0.04 times the KL is small per token, but it is added at every token of every step: it was enough to "
         "change where the run went",
}


def beta_outcome() -> tuple[str, str]:
    """(letter, what happened) from the two measured runs that differ only in beta (default-seed0, beta-0.04)."""
    from helpers.teaching import measured_runs

    zero, penalty = measured_runs.load("default-seed0"), measured_runs.load("beta-0.04")
    a0, a1 = zero.meta["after"]["accuracy"], penalty.meta["after"]["accuracy"]
    letter = "c" if abs(a1 - a0) < LEARNED_MARGIN else "a" if a1 > a0 else "b"
    return letter, (f"on 50 held-out questions beta = 0 went {zero.meta['before']['accuracy']:.2f} -> {a0:.2f} and "
                    f"beta = 0.04 went {penalty.meta['before']['accuracy']:.2f} -> {a1:.2f}; entropy at the end "
                    f"{zero.sampled[-1]['entropy']:.2f} against {penalty.sampled[-1]['entropy']:.2f}")


def _judge_beta(answer):
    choice = letter_of(answer, BETA_CHOICES)
    truth, evidence = beta_outcome()
    if choice != truth:
        raise Fail(f"choice {choice}", f"not {choice!r}: {evidence}. {BETA_CHOICES[choice]}".rstrip(". ") + ".")


CLIP_CASES = [(1.0, 1.0, 0.2), (1.5, 1.0, 0.2), (0.5, 1.0, 0.2), (0.5, -1.0, 0.2), (1.5, -1.0, 0.2),
              (1.1, 2.0, 0.2), (1.5, 1.0, 0.1), (0.7, -0.5, 0.2)]


def clipped_objective_truth(ratio, advantage, epsilon=0.2):
    return min(ratio * advantage, max(1 - epsilon, min(ratio, 1 + epsilon)) * advantage)


def _judge_clipped(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: clipped_objective, not clipped_objective(1.5, 1.0)")
    for r, a, eps in CLIP_CASES:
        case = f"ratio={r}, advantage={a}, epsilon={eps}"
        got = call(case, fn, r, a, eps)
        want = clipped_objective_truth(r, a, eps)
        if not close(got, want, tol=1e-9):
            if close(got, r * a, 1e-9):
                why = "that is ratio x advantage without clipping: past 1 +/- epsilon the push must stop growing"
            elif close(got, max(1 - eps, min(r, 1 + eps)) * a, 1e-9):
                why = "that is the clipped term alone: take the min of the clipped and unclipped terms (pessimistic)"
            else:
                why = "min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A)"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:g} ({why})")


# (policy log-prob, reference log-prob) per token: equal, the policy more sure, less sure, far apart.
KL_CASES = [(-1.0, -1.0), (-0.5, -1.0), (-2.0, -1.0), (-0.1, -3.0), (-3.0, -0.1)]


def kl_penalty_truth(logp, ref_logp):
    """TRL's per-token KL estimate (Schulman's k3): exp(ref - logp) - (ref - logp) - 1, never negative."""
    d = ref_logp - logp
    return math.exp(d) - d - 1


def _judge_kl(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: kl_penalty, not kl_penalty(-1.0, -1.0)")
    for logp, ref in KL_CASES:
        case = f"logp={logp}, ref_logp={ref}"
        got = call(case, fn, logp, ref)
        want = kl_penalty_truth(logp, ref)
        if not close(got, want, tol=1e-9):
            if close(got, logp - ref, 1e-9) or close(got, ref - logp, 1e-9):
                why = "that is the plain log-ratio, which can be negative; TRL uses exp(d) - d - 1 with d = ref - logp"
            elif close(got, kl_penalty_truth(ref, logp), 1e-9):
                why = "the sign of d is swapped: d = ref_logp - logp"
            else:
                why = "exp(d) - d - 1 with d = ref_logp - logp"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:.6g} ({why})")


make_config = Exercise(
    LESSON, "make_config",
    hint=("each blank but the precision flags is the preset's field of the same name.",
          "num_generations=p.num_generations, per_device_train_batch_size=p.per_device_train_batch_size, and so on "
          "for max_completion_length, beta and learning_rate.",
          "precision follows the card: bf16=bf16_ok (an Ampere or newer GPU), fp16=on_gpu and not bf16_ok (a T4), "
          "use_cpu=not on_gpu."),
    judge=_judge_config,
    success="it builds the config helpers.train builds, on a CPU, a T4 and an A100.")

zero_spread_chance = Exercise(
    LESSON, "zero_spread_chance",
    hint="a group ties when all G completions are right (p ** G) or all are wrong ((1 - p) ** G); the two cannot "
         "both happen (for G >= 1).",
    judge=_judge_zero_spread,
    success="groups tie most when the model is almost always right or almost always wrong: that is when more "
            "generations (or a finer reward) pay.")

make_trainer = Exercise(
    LESSON, "make_trainer",
    hint="GRPOTrainer(model=..., processing_class=<the tokenizer>, reward_funcs=..., args=<the config>, "
         "train_dataset=..., callbacks=...).",
    judge=_judge_trainer,
    success="this is the call helpers.run.pipeline.build_trainer makes.")

class _MeasuredRunsExercise(Exercise):
    """The exercise on four of the kit's measured runs: .plot() draws their curves, .runs() gives their logs."""

    def plot(self, runs=None):
        return plot_measured(runs)

    def runs(self, letter_to_name=None) -> dict:
        return measured(letter_to_name)


learned_or_not = _MeasuredRunsExercise(
    LESSON, "learned_or_not",
    hint="the total reward mixes format and correctness: a run can collect all the format points and still get "
         "worse at the arithmetic. Look at the green correctness curve, and at the entropy: a policy whose entropy "
         "is near 0 writes the same answer every time.",
    judge=_judge_learned,
    success="the training reward alone could not tell these runs apart: evaluate on held-out questions.")

clipped_objective = Exercise(
    LESSON, "clipped_objective",
    hint="clip(ratio, lo, hi) is max(lo, min(ratio, hi)); the min of the two terms means: never reward a move "
         "beyond the clip range, but always count a move in the wrong direction in full.",
    judge=_judge_clipped,
    success="TRL's loss is minus this, averaged over tokens as loss_type says (helpers.teaching.grpo_math).")

kl_penalty = Exercise(
    LESSON, "kl_penalty",
    hint="it is 0 when the two log-probabilities are equal and grows on both sides, faster when the policy gives a "
         "token much LESS probability than the reference did; use math.exp.",
    judge=_judge_kl,
    success="beta trades reward for staying close to the starting model: 0 (TRL's default) lets the policy "
            "drift for reward; 0.04 pulls it back, and costs a reference forward pass every step.")

beta_prediction = Exercise(
    LESSON, "beta_prediction",
    hint="the KL term pulls every token back towards the starting model, whose answers were right 22% of the time.",
    judge=_judge_beta,
    success="the penalty kept the policy near the start (higher entropy, kl mostly 0.1-0.2), and on this small "
            "model 40 steps near the start were not enough to learn the arithmetic. TRL's default is "
            "beta = 0 for reasons like this one (and it saves the reference model's memory).")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
