"""Lesson 05 train: make_config and make_trainer (read, not run: their GRPOConfig/GRPOTrainer call is recorded), zero-spread
groups, the four measured runs (learned or not), the clipped objective, the KL penalty and the beta prediction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

from helpers.config import get_preset
from helpers.teaching import reruns
from helpers.teaching.reruns import change_text
from helpers.teaching.exercises.core import Exercise, Fail, call, close, intercept, letter_of, numbered
from helpers.teaching.exercises.nb05_vllm import vllm_sizing  # noqa: F401 - the sizing exercise, ex.q1 (its own module)

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
            elif name == "save_strategy":
                why = ("save_steps None or 0 means no checkpoints: save_strategy='no'; TRL's default 'steps' would "
                       "still write one every 500 steps")
            elif name == "use_vllm":
                why = f"{why}. vLLM needs a GPU and the preset's fast_inference: on a CPU, TRL would fail to start it"
            elif name == "gradient_checkpointing" and mine:
                why = (f"{why}. On a CPU the preset decides (p.gradient_checkpointing); on the GPU it is False here "
                       "because it is already on, inside Unsloth: the memory is not lost")
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

# The budget exercise (budget_fix): a classmate's t4 settings that keep a group of 8 and 512-token answers, and do
# not fit a T4's 7 GB budget. The student decides which settings to change; helpers.memory.estimate judges the fit.
CLASSMATE = {"num_generations": 8, "per_device_train_batch_size": 16, "max_completion_length": 512,
             "gradient_checkpointing": False, "gpu_memory_utilization": 0.5}
BUDGET_GROUP, BUDGET_LENGTH, BUDGET_COMPLETIONS = 8, 512, 16  # what the fix must keep


def budget_estimate(settings: dict):
    """The memory model's prediction for the t4 preset with these settings, on a T4, against its 7 GB budget."""
    from helpers.memory import T4_BUDGET_GB, estimate

    return estimate(get_preset("t4").with_overrides(**settings), gpu="t4", budget_gb=T4_BUDGET_GB)


def t4_free_at_load_gb() -> float:
    """What gpu_memory_utilization is a fraction of on a T4 through Unsloth: the memory free at load
    (helpers.memory.estimate.utilization_base_gb, the one home of that rule)."""
    from helpers.memory.estimate import as_settings, gpu_total_gb, utilization_base_gb

    return utilization_base_gb(as_settings(get_preset("t4")), gpu_total_gb("t4"))


def _vllm_would_not_start(est) -> str:
    """Why vLLM refuses to start (the memory model's own note, helpers.memory.estimate.vllm_memory), then where the
    budget comes in."""
    note = next(n for n in est.notes if n.startswith("vLLM would not start"))
    return (f"{note} (the t4 preset reserves {get_preset('t4').gpu_memory_utilization:g}); only a run that starts is "
            f"measured against the budget (this one would peak at {est.peak_gb:.2f} GB of {est.budget_gb:g})")


def _over_budget_why(settings: dict, est) -> str:
    """The misconception behind a fix that does not fit: named from the estimate's largest part."""
    part, gb = max(est.components.items(), key=lambda kv: kv[1])
    if part == "activations" and not settings.get("gradient_checkpointing"):
        return (f"the largest part is the activations ({gb:.1f} GB): with gradient_checkpointing off every layer's "
                "activations of every completion are kept for the backward pass. A smaller batch only divides them; "
                "checkpointing keeps each layer's input and recomputes the rest (gradient_checkpointing=True)")
    if part == "vllm_reservation":
        return (f"the largest part is vLLM's reservation ({gb:.1f} GB): through Unsloth vLLM takes "
                f"gpu_memory_utilization x the memory free at load ({t4_free_at_load_gb():.2f} GB on a T4) up front, "
                f"used or not, at {settings.get('gpu_memory_utilization')}; a 1.5B model in 4 bits "
                f"and its KV cache need far less (the t4 preset reserves {get_preset('t4').gpu_memory_utilization:g})")
    return f"the largest part is {part} ({gb:.2f} GB)"


def _judge_budget(answer):
    from helpers.config import PresetError
    from helpers.memory.estimate import PRESET_FIELDS_READ

    if not isinstance(answer, dict):
        raise Fail("the answer", "answer with a dict of settings, e.g. {**classmate, 'some_setting': value}")
    unknown = sorted(set(answer) - set(PRESET_FIELDS_READ))
    if unknown:
        raise Fail(unknown[0], f"{unknown[0]!r} is not a setting the memory model reads; use the preset's field names "
                               f"({', '.join(PRESET_FIELDS_READ)}).")
    s = {**CLASSMATE, **answer}
    if s["num_generations"] != BUDGET_GROUP:
        raise Fail("num_generations", f"num_generations is {s['num_generations']}; the task keeps the group of "
                   f"{BUDGET_GROUP}: a smaller group has zero spread more often (exercise {zero_spread_chance.number}), "
                   "and a group with no spread teaches nothing. Memory has cheaper levers.")
    if s["max_completion_length"] < BUDGET_LENGTH:
        raise Fail("max_completion_length", f"max_completion_length is {s['max_completion_length']}; the task keeps "
                   f"{BUDGET_LENGTH}: a shorter cap cuts answers off before </answer>, and a cut answer scores 0 "
                   "(completions/clipped_ratio). That buys memory with the reward.")
    per_step = s["per_device_train_batch_size"] * s.get("gradient_accumulation_steps", 1)
    if per_step < BUDGET_COMPLETIONS:
        raise Fail("per_device_train_batch_size", f"{per_step} completions per optimizer step; the task keeps "
                   f"{BUDGET_COMPLETIONS} (2 questions x 8). To hold fewer at once, keep the step: "
                   "per_device_train_batch_size=8 with gradient_accumulation_steps=2.")
    try:
        est = budget_estimate(s)
    except (PresetError, ValueError) as err:
        raise Fail("the settings", f"these settings are refused before anything loads: {err}") from None
    if not est.vllm_starts:
        raise Fail("vLLM", f"{_vllm_would_not_start(est)}.")
    if not est.fits:
        raise Fail("the budget", f"predicted {est.peak_gb:.2f} GB, over the {est.budget_gb:g} GB budget: "
                                 f"{_over_budget_why(s, est)}.")
    print(est.table())  # the fix that fits, part by part: the check cell shows it beside the verdict


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


# The recipe exercise (recipe_choice): a learning rate and a beta for a 40-step cpu run, each justified by the
# kit's measured runs (helpers.teaching.measured_runs): a run where the choice learned and one where its
# alternative did not. What each measured run changed from the preset is read from its run.json (MeasuredRun.changed),
# never typed here: a run that changed two settings at once is evidence for neither.
RECIPE_SETTINGS = ("learning_rate", "beta")


def recipe_runs() -> dict:
    """{run name: {setting: value}}, every setting each shipped run changed from the cpu preset (its run.json)."""
    from helpers.teaching import measured_runs

    return {name: measured_runs.load(name).changed() for name in measured_runs.names()}


def recipe_tried() -> dict:
    """{setting: the values the measured runs tried}: the preset's and every run's that changed it."""
    runs = recipe_runs()
    return {setting: tuple(sorted({getattr(get_preset("cpu"), setting)}
                                  | {ch[setting] for ch in runs.values() if setting in ch}, reverse=True))
            for setting in RECIPE_SETTINGS}


def recipe_value(run_name: str, setting: str) -> float:
    return recipe_runs()[run_name].get(setting, getattr(get_preset("cpu"), setting))


def _recipe_evidence(name: str) -> str:
    from helpers.teaching import measured_runs

    run = measured_runs.load(name)
    return (f"{name} ({run.meta['what'][:60]}): accuracy {run.meta['before']['accuracy']:.2f} -> "
            f"{run.meta['after']['accuracy']:.2f}")


TWO_AT_ONCE = "that run changed two settings at once, so it cannot tell which one did it"


def _judge_recipe(answer):
    from helpers.teaching import measured_runs

    if not isinstance(answer, dict) or not {"learning_rate", "beta", "because"} <= set(answer):
        raise Fail("the answer", "answer with a dict: {'learning_rate': ..., 'beta': ..., 'because': [run names]}")
    cited = list(answer["because"]) if isinstance(answer["because"], (list, tuple)) else [answer["because"]]
    runs = recipe_runs()
    for name in cited:
        if name not in runs:
            raise Fail(f"run {name!r}", f"{name!r} is not a measured run: choose from {measured_runs.names()}.")
        changed = runs[name]
        if len(changed) > 1:
            raise Fail(f"run {name!r}", f"{name} changed {change_text(changed)} (its run.json): {TWO_AT_ONCE}, and it is "
                       f"evidence for none of them. Evidence for a setting comes from runs that differ in that setting "
                       "only.")
        if not set(changed) <= set(RECIPE_SETTINGS):
            raise Fail(f"run {name!r}", f"{name} changed another setting ({change_text(changed)}): it says nothing about "
                       "the learning rate or beta. Evidence for a setting comes from runs that differ in that setting "
                       "only.")
    tried = recipe_tried()
    for setting, values in tried.items():
        if not any(close(answer[setting], t, 1e-9) for t in values):
            raise Fail(setting, f"{setting}={answer[setting]!r} was not measured (tried: "
                                f"{', '.join(f'{t:g}' for t in values)}): a choice justified by the runs is one of those.")
    single = {n: ch for n, ch in runs.items() if len(ch) <= 1}  # the runs that can speak for one setting
    for setting in RECIPE_SETTINGS:
        value = answer[setting]
        if not any(close(recipe_value(n, setting), value, 1e-9) for n in single):
            only = [n for n in runs if close(recipe_value(n, setting), value, 1e-9)]
            raise Fail(setting, f"{setting}={value:g} was measured only by {', '.join(only)}, which changed "
                       f"{change_text(runs[only[0]])}: {TWO_AT_ONCE} ({_recipe_evidence(only[0])}). Choose a value a run "
                       "that changed that setting alone measured.")
    same = {n: learned(measured_runs.load(n)) for n in single
            if all(close(recipe_value(n, o), answer[o], 1e-9) for o in RECIPE_SETTINGS)}  # the runs of this recipe
    for name, ok in same.items():
        if not ok:
            setting = next(iter(runs[name]), RECIPE_SETTINGS[0])
            raise Fail(setting, f"{setting}={answer[setting]:g} did not learn: {_recipe_evidence(name)}. A larger "
                       "step or a stronger pull is not faster learning on 40 steps: read the run's entropy and its "
                       "most common answers.")
    for setting in RECIPE_SETTINGS:
        value = answer[setting]
        shows = [n for n in cited if n in same]
        against = [n for n in cited if not close(recipe_value(n, setting), value, 1e-9)]
        if not shows or not against:
            need = "no run where it learned" if not shows else "no run where another value did not"
            raise Fail(f"because ({setting})", f"`because` names {need} for {setting}={value:g}: a choice is "
                       "justified by a run that shows it working and one that shows the alternative failing.")


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
    hint=("each blank depends on where it runs (on_gpu, bf16_ok) or on save_steps; the check tries a CPU, a T4 and "
          "an A100.",
          "vLLM and Unsloth's own gradient checkpointing exist only on the GPU; a run with save_steps None saves "
          "nothing (save_strategy='no').",
          "precision follows the card: bf16=bf16_ok (an Ampere or newer GPU), fp16=on_gpu and not bf16_ok (a T4), "
          "use_cpu=not on_gpu; use_vllm=on_gpu and p.fast_inference; gradient_checkpointing=p.gradient_checkpointing "
          "and not on_gpu."),
    judge=_judge_config,
    success="it builds the config helpers.train builds, on a CPU, a T4 and an A100.")

budget_fix = Exercise(
    LESSON, "budget_fix",
    hint=("print(budget_estimate(classmate).table()): which part is the largest? Change the setting that decides "
          "it, not the group, the completion length or the completions per step.",
          "two settings: gradient checkpointing (activations kept per layer, the rest recomputed) and vLLM's "
          "up-front reservation (gpu_memory_utilization x the memory free at load, "
          f"{t4_free_at_load_gb():.2f} GB on a T4).",
          f"{{**classmate, 'gradient_checkpointing': True, 'gpu_memory_utilization': {get_preset('t4').gpu_memory_utilization:g}}}"),
    judge=_judge_budget,
    success="the group, the answers' room and the step are kept; the memory came from what the run did not need.")

zero_spread_chance = Exercise(
    LESSON, "zero_spread_chance",
    hint="a group ties when all G completions are right (p ** G) or all are wrong ((1 - p) ** G); the two cannot "
         "both happen (for G >= 1).",
    judge=_judge_zero_spread,
    success="groups tie most when the model is almost always right or almost always wrong: that is when more "
            "generations (or a finer reward) pay.")

make_trainer = Exercise(
    LESSON, "make_trainer",
    hint=("six keywords: model, processing_class, reward_funcs, args, train_dataset, callbacks; two of them are not "
          "named after what they take.",
          "GRPOTrainer(model=..., processing_class=<the tokenizer>, reward_funcs=..., args=<the config>, "
          "train_dataset=..., callbacks=...)."),
    judge=_judge_trainer,
    success="this is the call helpers.run.pipeline.build_trainer makes.")

# The rerun exercise (rerun_prediction): one setting of lesson 08's loop changed, a prediction about the final reward
# recorded, then the loop run for reruns.STEPS steps with the change; the check compares its final reward with the
# default settings' stored seeds (grpo_math.loop_record): beyond mean +- 2 sd of their final rewards is a real change,
# inside is "about the same". RERUN_MEASURED: the kit's own rerun, the comparison until the student's own has run
# (reruns.loop_reruns([{"learning_rate": 5e-5}]) on a loaded 2-core development machine, 2026-11-29: 310 s).
RERUN_RANGES = {"learning_rate": (0.0, 1e-2), "temperature": (0.0, 2.0)}  # open below, closed above
RERUN_MEASURED = {"setting": "learning_rate", "value": 5e-5,
                  "curve": [0.046875, 0.140625, 0.359375, 0.109375, 0.359375, 0.171875, 1.78125, 0.125, 0.919375,
                            0.4375, 1.296875, 0.015625]}
RERUN_CHOICES = {
    "a": "higher: beyond the default settings' seeds (above their mean + 2 sd), it learned faster",
    "b": "about the same: within the default settings' seeds (their mean +- 2 sd), the change did not show",
    "c": "lower: beyond the default settings' seeds (below their mean - 2 sd), it learned slower or not at all",
}
RERUN_WHY = {
    "learning_rate": "The learning rate sizes every step: the rewarded completions' probability moves by about that "
                     "much per group, so in a few steps a tenth of it has barely left the start, and too large a "
                     "one overshoots (a collapsed policy samples groups with no spread).",
    "temperature": "The temperature decides which completions are sampled (and divides the logits the loss uses): "
                   "lower keeps to the model's likeliest tokens, so a group's completions differ less and there is "
                   "less spread to learn from; higher samples more broken ones.",
}


def default_finals(steps: int) -> list[float]:
    """The final reward after `steps` steps of each stored seed of the default settings (08's loop_seeds)."""
    from helpers.teaching.grpo_math import final_reward, loop_record
    return [final_reward(s["curve"][:steps]) for s in loop_record()["loop_seeds"]]


def spread_band(finals) -> tuple[float, float, float]:
    """(mean, low, high): the seeds' mean final reward and mean -+ twice their sample standard deviation."""
    n = len(finals)
    mean = sum(finals) / n
    sd = math.sqrt(sum((f - mean) ** 2 for f in finals) / (n - 1)) if n > 1 else 0.0
    return mean, mean - 2 * sd, mean + 2 * sd


def too_short(steps: int) -> str | None:
    """Why `steps` steps are too few to tell a change from a seed (the default seeds' spread after that many steps
    holds a run that learns nothing: their lr-0 controls' mean final reward), or None."""
    from helpers.teaching.grpo_math import final_reward, loop_record
    _mean, low, high = spread_band(default_finals(steps))
    control = spread_band([final_reward(s["control"][:steps]) for s in loop_record()["loop_seeds"]])[0]
    if low > control:
        return None
    return (f"{steps} steps are too few to tell a change from a seed: the default seeds' spread after {steps} steps "
            f"({low:.3f} to {high:.3f}) holds a run that learns nothing (the lr-0 controls end at {control:.3f})")


_kits_own = lambda setting, value: (setting, value) == (RERUN_MEASURED["setting"], RERUN_MEASURED["value"])  # noqa: E731


@dataclass
class RerunOutcome:
    """08's loop with one setting changed: the prediction recorded before it ran, its reward curve, and the final
    rewards of the default settings' stored seeds after as many steps."""
    setting: str
    value: float
    prediction: str
    curve: list
    defaults: list

    def table(self) -> str:
        from helpers.teaching.grpo_math import final_reward, window
        mean, low, high = spread_band(self.defaults)
        k = window(len(self.curve))
        return (f"  mean reward of each group ({self.setting}={self.value:g}): {[round(c, 3) for c in self.curve]}\n"
                f"  final reward (last {k} groups): yours {final_reward(self.curve):.3f}; the default settings' seeds "
                f"{[round(f, 3) for f in self.defaults]}, mean {mean:.3f}, mean +- 2 sd {low:.3f} to {high:.3f}")


def rerun_truth(curve, defaults) -> tuple[str, str]:
    """(letter, evidence): did the changed run's final reward end above (a), inside (b) or below (c) the default
    settings' seeds' mean +- 2 sd?"""
    from helpers.teaching.grpo_math import final_reward, window
    final, (mean, low, high) = final_reward(curve), spread_band(defaults)
    letter = "a" if final > high else "c" if final < low else "b"
    return letter, (f"after {len(curve)} steps its final reward (the mean of its last {window(len(curve))} groups) is "
                    f"{final:.3f}, and the default settings' {len(defaults)} seeds end at "
                    f"{', '.join(f'{f:.3f}' for f in defaults)} (mean {mean:.3f}, mean +- 2 sd {low:.3f} to {high:.3f})")


def _value_problem(setting, value) -> str | None:
    from helpers.teaching.grpo_math import LOOP
    if setting not in RERUN_RANGES:
        return f"rerun_setting = {setting!r}: choose one of {', '.join(map(repr, RERUN_RANGES))}"
    low, high = RERUN_RANGES[setting]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
        return f"{setting} = {value!r}: choose a number above {low:g} and at most {high:g}"
    if value == LOOP[setting]:
        return f"{setting} = {value!r} is the default ({LOOP[setting]:g}): change it"
    return None


class _RerunExercise(Exercise):
    """The predict-change-rerun exercise: .rerun(setting, value, prediction) records the prediction, then runs."""

    def rerun(self, setting, value, prediction, reuse: bool = True, steps: int | None = None):
        """08's loop for `steps` steps (None: reruns.STEPS, LOOP's) with setting=value (minutes on 2 cores), or read
        back from an identical earlier rerun on this machine (reuse=False: run again). Returns the RerunOutcome the
        check compares with the default settings' stored seeds after as many steps."""
        try:
            choice = letter_of(prediction, RERUN_CHOICES)
        except Fail as f:
            print(f"Record your prediction first ({f.message}); nothing was run.")
            return None
        problem = _value_problem(setting, value)
        if problem:
            print(f"{problem}; nothing was run.")
            return None
        steps = int(steps or reruns.STEPS)
        print(f"Your prediction, recorded: {choice!r}. Running lesson 08's loop for {steps} steps with "
              f"{setting}={value:g} ...")
        (row,) = reruns.loop_reruns_here_or_apart([{setting: float(value)}], reuse=reuse, steps=steps)
        outcome = RerunOutcome(setting, float(value), choice, row["curve"], default_finals(len(row["curve"])))
        print(outcome.table())
        short = too_short(len(row["curve"]))
        if short:
            print(f"  {short}: " + ("the check grades the kit's own rerun of this change at "
                                    f"{len(RERUN_MEASURED['curve'])} steps." if _kits_own(setting, value) else
                                    f"run it again with steps={reruns.STEPS} (RERUN_STEPS = None)."))
        return outcome


def _judge_rerun(answer, outcome=None):
    choice = letter_of(answer, RERUN_CHOICES)
    if outcome is None:  # not rerun here yet: the kit's own rerun
        m = RERUN_MEASURED
        outcome = RerunOutcome(m["setting"], m["value"], choice, m["curve"], default_finals(len(m["curve"])))
    elif outcome.prediction != choice:
        raise Fail("your prediction", f"the rerun recorded {outcome.prediction!r} before it ran, and you now answer "
                   f"{choice!r}: a prediction made after the result is not one. Run ex.{rerun_prediction.qid}.rerun"
                   "(...) again with the new prediction.")
    short = too_short(len(outcome.curve))
    if short and not _kits_own(outcome.setting, outcome.value):
        raise Fail("your rerun", f"{short}. Run it again with steps={reruns.STEPS} (RERUN_STEPS = None in the "
                                 "parameters cell), the steps the seeds were stored with.")
    if short:  # a short run of the kit's own change (CI's sizes): its stored full-length rerun is the evidence
        m = RERUN_MEASURED
        outcome = RerunOutcome(m["setting"], m["value"], choice, m["curve"], default_finals(len(m["curve"])))
    truth, evidence = rerun_truth(outcome.curve, outcome.defaults)
    if choice != truth:
        raise Fail(f"choice {choice}", f"not {choice!r}: with {outcome.setting}={outcome.value:g} {evidence}: "
                                       f"{RERUN_CHOICES[truth]}. {RERUN_WHY[outcome.setting]}")


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

rerun_prediction = _RerunExercise(
    LESSON, "rerun_prediction",
    hint="the learning rate sizes each step, the temperature decides which completions a group holds; a change "
         "counts only when it moves the final reward beyond the default seeds' own spread (mean +- 2 sd).",
    judge=_judge_rerun,
    success="a prediction about learning, judged against the spread of seeds that differ only by chance: one run "
            "beside one other proves nothing, a run outside the seeds' spread does.")

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

recipe_choice = Exercise(
    LESSON, "recipe_choice",
    hint=("the runs' names say what each changed; run.label() and run.meta['what'] say more. Which learning rate and "
          "which beta learned on every run that used them?",
          "learning_rate 2.5e-4 (default-seed0/1/2 learned; lr-1e-3 collapsed; earlier-recipe-seed2 changed the "
          "learning rate and num_iterations at once, so it is evidence for neither), beta 0.0 (default-seed0 against "
          "beta-0.04)."),
    judge=_judge_recipe,
    success="each setting chosen from runs that differ in it alone, with the run that rules out the alternative.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
