"""Lesson 08 (one GRPO step from scratch): its truth is TRL's own loss, and the policy_loss exercise's check passes a right
answer and names each known mistake; the slow test runs the notebook on CPU."""

from __future__ import annotations

import contextlib
import json
import re

import pytest
import torch

from helpers.teaching import exercises as E
from helpers.teaching import grpo_math
from helpers.teaching.grpo_math import trl_default, trl_loss

EX = E.nb08.policy_loss


def right(logps, old_logps, advantages, mask, epsilon=0.2):
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    a = advantages.unsqueeze(1)
    return (-torch.min(ratio * a, clipped * a) * mask).sum() / mask.sum()


def _per_token(logps, old, adv, eps, ratio=None, clip=True):
    ratio = torch.exp(logps - old) if ratio is None else ratio
    a = adv.unsqueeze(1)
    return -torch.min(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a) if clip else -(ratio * a)


WRONG = {
    "mask ignored": (lambda lp, old, adv, mask, epsilon=0.2: _per_token(lp, old, adv, epsilon).mean(),
                     "padding after each completion's end was counted"),
    "sign flipped": (lambda lp, old, adv, mask, epsilon=0.2: -right(lp, old, adv, mask, epsilon),
                     "the sign is flipped"),
    "no clipping": (lambda lp, old, adv, mask, epsilon=0.2: (_per_token(lp, old, adv, epsilon, clip=False) * mask).sum()
                    / mask.sum(), "there is no clipping"),
    "per-sequence mean": (lambda lp, old, adv, mask, epsilon=0.2: ((_per_token(lp, old, adv, epsilon) * mask).sum(-1)
                                                                   / mask.sum(-1)).mean(), "loss_type 'grpo'"),
    "ratio of log-probs": (lambda lp, old, adv, mask, epsilon=0.2: (_per_token(lp, old, adv, epsilon, ratio=lp / old)
                                                                    * mask).sum() / mask.sum(), "not logp / old_logp"),
    "advantages not broadcast": (lambda lp, old, adv, mask, epsilon=0.2: (-torch.min(
        torch.exp(lp - old) * adv, torch.clamp(torch.exp(lp - old), 1 - epsilon, 1 + epsilon) * adv) * mask).sum()
        / mask.sum(), "advantages.unsqueeze(1)"),
    ".item()": (lambda lp, old, adv, mask, epsilon=0.2: right(lp, old, adv, mask, epsilon).item(),
                "not a tensor"),
    "detached": (lambda lp, old, adv, mask, epsilon=0.2: right(lp.detach(), old, adv, mask, epsilon),
                 "no gradient"),
    "epsilon fixed": (lambda lp, old, adv, mask, epsilon=0.2: right(lp, old, adv, mask, 0.2), "epsilon was not used"),
    "per-token losses": (lambda lp, old, adv, mask, epsilon=0.2: _per_token(lp, old, adv, epsilon) * mask,
                         "return ONE number"),
    "half detached": (lambda lp, old, adv, mask, epsilon=0.2: right(lp, old, adv, mask, epsilon) * 0.5
                      + right(lp.detach(), old, adv, mask, epsilon) * 0.5, "not its gradient"),
}


def test_trl_loss_is_trls_default_and_matches_grpo_math():
    assert trl_default("loss_type") == "dapo" and trl_default("epsilon") == 0.2  # the defaults the lesson teaches
    for _, logps, old, adv, mask, eps in E.nb08.loss_cases():
        theirs = trl_loss(logps, old, adv, mask, epsilon=eps)
        ours = grpo_math.policy_loss(logps, old, adv, mask, loss_type="dapo", epsilon=eps)
        assert float(theirs) == pytest.approx(float(ours["loss"]), rel=1e-6)
        assert bool(ours["clipped"][mask.bool()].any()), "every hidden batch exercises the clipping"


def test_every_known_mistake_gives_a_different_loss_on_some_hidden_batch():
    """Each diagnosis is reachable: on at least one hidden batch its wrong loss differs from the right one."""
    seen: dict[str, bool] = {}
    for _, logps, old, adv, mask, eps in E.nb08.loss_cases():
        want = float(trl_loss(logps, old, adv, mask, epsilon=eps))
        for why, value in E.nb08.loss_mistakes(logps, old, adv, mask, eps):
            seen[why] = seen.get(why, False) or abs(value - want) > 1e-3
    assert all(seen.values()), [w for w, ok in seen.items() if not ok]


def test_right_answer_passes_and_the_printed_solution_too(capsys):
    assert EX.check(right).passed
    EX.solution()
    scope: dict = {}
    exec(compile(EX.entry["solution"], "<solution policy_loss>", "exec"), scope)  # noqa: S102 - the lesson's solution
    assert EX.check(scope["policy_loss"]).passed
    assert EX.check(lambda *a, **k: grpo_math.policy_loss(*a, **k)["loss"]).passed  # the lesson's fallback


@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_wrong_answer_fails_with_its_reason(name):
    fn, words = WRONG[name]
    result = EX.check(fn)
    assert not result.passed and result.case, name
    assert words in result.message, f"{name}: {result.message}"
    assert repr(result).startswith("Not yet.")


def test_the_lessons_batch_is_checked_too():
    logps = -torch.rand(3, 5) - 0.1
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    adv = torch.tensor([1.0, -0.5, -0.5])
    result = EX.check(right, this_batch=(logps, logps.clone(), adv, mask))
    assert result.passed and re.search(r"On this lesson's batch: yours [-+]\d\.\d{6}, TRL's _compute_loss [-+]\d", result.message)

    def only_hidden_cases(lp, old, a, m, epsilon=0.2):  # right on the hidden batches, wrong on a 3 x 5 one
        return right(lp, old, a, m, epsilon) * (2.0 if lp.shape == (3, 5) else 1.0)

    failed = EX.check(only_hidden_cases, this_batch=(logps, logps.clone(), adv, mask))
    assert not failed.passed and failed.case == "this lesson's batch (the group sampled above)"


def test_unanswered_and_not_a_function():
    def placeholder(logps, old_logps, advantages, mask, epsilon=0.2):
        raise NotImplementedError("Student exercise: ...")

    for answer in (None, Ellipsis, placeholder):
        assert "not answered yet" in EX.check(answer).message
    assert "pass the function itself" in EX.check(0.5).message


def test_advantages_spread_along_the_tokens_of_a_square_batch_is_named():
    def row_advantages(lp, old, adv, mask, epsilon=0.2):  # adv as a row: silent only when completions == tokens
        a = adv.unsqueeze(0) if lp.size(0) == lp.size(1) else adv.unsqueeze(1)
        ratio = torch.exp(lp - old)
        return (-torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a) * mask).sum() / mask.sum()

    result = EX.check(row_advantages)
    assert not result.passed and "spread along the tokens" in result.message


CI_LOOP_STEPS = 6  # half the lesson's loop: the rise shows by step 6 on seeds 0, 1, 2 (loop_seeds); 12 is checked there


@pytest.mark.slow
def test_the_lesson_runs_on_cpu_and_the_rewarded_completion_rises(tmp_path):
    """notebooks/08_grpo_step.ipynb top to bottom at CI's settings: the solution passes its check, the loss equals
    TRL's on the lesson's own batch (before and after the step), and the step moved every completion's log-prob in the
    direction of its advantage; then the loop (grpo_math.LOOP's group, length and learning rate, CI_LOOP_STEPS steps
    instead of the lesson's 12, which the stored seeds cover) passes its check and the format reward rises."""
    from notebook_runner import execute, has_image, output_text

    nb = execute("08_grpo_step", tmp_path, {"PRESET": "cpu", "NUM_GENERATIONS": 4, "MAX_COMPLETION_LENGTH": 32,
                                            "RUN_DIR": str(tmp_path / "run"), "LOOP_STEPS": CI_LOOP_STEPS})
    text = output_text(nb)
    assert "Correct!" in text and "On this lesson's batch: yours" in text
    for when in (r"loss \(your policy_loss\): ", r"loss after the step \(your policy_loss\): "):
        match = re.search(when + r"([-+]\d+\.\d{6}); TRL's _compute_loss(?: on the same batch)?: ([-+]\d+\.\d{6})", text)
        assert match and match.group(1) == match.group(2), f"the loss differs from TRL's: {match and match.group(0)}"
    assert "positive advantage rose and every one with a negative advantage fell: True" in text
    rows = re.findall(r"^\s*\d+\s+[-\d.]+\s+([-+]\d+\.\d+)\s+[-\d.]+\s+[-\d.]+\s+([-+]\d+\.\d+)\s", text, re.M)
    assert len(rows) == 4 and any(float(a) > 0 and float(c) > 0 for a, c in rows), rows  # the rewarded one rose
    # section 7: the solution's loop passed its check, step 1 equals TRL's on the same group, and over the lesson's
    # steps the format reward rose, as it did in TRL's stored run on the same settings
    assert text.count("Correct!") == 2, text
    assert "Step 1's gradient equals TRL's _compute_loss's on the same group" in text
    assert f"{CI_LOOP_STEPS} steps in " in text and ": both rose;" in text, text
    assert has_image(nb), "the reward curves were not plotted"


# ------------------------------------------------------------------------------------- Exercise 8.2: the GRPO loop

LOOP = E.nb08.grpo_train


def right_loop(model, optimizer, sample, score, steps, max_grad_norm=1.0, temperature=1.0, mistake=None):
    """A student's loop written out (not the kit's reference_train), with the mistakes students make as switches."""
    params = [q for q in model.parameters() if q.requires_grad]
    curve = []
    for step in range(steps):
        batch = sample(step)
        rewards = score(batch)
        r = torch.tensor(rewards, dtype=torch.float32)
        advantages = {"raw rewards": r, "not normalized": r - r.mean()}.get(mistake, (r - r.mean()) / (r.std() + 1e-4))
        with torch.no_grad() if mistake == "no_grad" else contextlib.nullcontext():
            logps = grpo_math.completion_logps(model, batch, temperature=1.0 if mistake == "temperature" else temperature)
        if mistake == "detached":
            logps = logps.detach()
        loss = right(logps, logps.detach(), advantages, batch["completion_mask"])
        if mistake == "sign":
            loss = -loss
        if mistake != "no zero_grad":
            optimizer.zero_grad()
        loss.backward()
        if mistake != "no clipping":
            torch.nn.utils.clip_grad_norm_(params, 1.0 if mistake == "fixed norm" else max_grad_norm)
        if mistake != "no step":
            optimizer.step()
        if mistake == "two groups":
            sample(step)
        curve.append(sum(rewards) / len(rewards))
    return curve[-1] if mistake == "last only" else curve


def _with(mistake):
    return lambda *a, **k: right_loop(*a, **k, mistake=mistake)


LOOP_WRONG = {
    "sign flipped": ("sign", "LESS likely"),
    "advantages not normalized": ("not normalized", "not divided by the group's standard deviation"),
    "rewards as advantages": ("raw rewards", "rewards themselves were used as advantages"),
    "zero_grad missing": ("no zero_grad", "optimizer.zero_grad()"),
    "no gradient clipping": ("no clipping", "the gradient was not clipped"),
    "clipping at a fixed 1.0": ("fixed norm", "not a fixed 1.0"),
    "temperature ignored": ("temperature", "temperature passed in"),
    "no optimizer step": ("no step", "optimizer.step() ran 0 times"),
    "two groups a step": ("two groups", "called sample 6 times in 3 steps"),
    "curve not returned": ("last only", "return the mean reward of each step's group"),
    "log-probs under torch.no_grad()": ("no_grad", "the loss was computed under torch.no_grad()"),
    "log-probs detached": ("detached", "no .detach(), .item() or float(...) on the way"),
}


def test_right_loop_passes_and_the_printed_solution_too():
    assert LOOP.check(right_loop).passed
    scope = {"loss_fn": lambda *a, **k: grpo_math.policy_loss(*a, **k)["loss"], "epsilon": 0.2}  # section 5's names
    exec(compile(LOOP.entry["solution"], "<solution grpo_train>", "exec"), scope)  # noqa: S102 - the lesson's solution
    assert LOOP.check(scope["grpo_train"]).passed


@pytest.mark.parametrize("name", sorted(LOOP_WRONG))
def test_each_broken_loop_fails_with_its_misconception(name):
    mistake, words = LOOP_WRONG[name]
    result = LOOP.check(_with(mistake))
    assert not result.passed and result.case, name
    assert words in result.message, f"{name}: {result.message}"


def test_every_known_loop_mistake_is_caught_on_some_hidden_run():
    """Each named mistake parts from the right loop on at least one hidden run, and no two are confused there."""
    nb08 = E.nb08
    for mistake in nb08.LOOP_MISTAKES:
        parted = [nb08._parting(nb08._trace(nb08.reference_train, *c, mistake=mistake), nb08._trace(nb08.reference_train, *c))
                  for c in nb08.loop_cases()]
        assert any(p is not None for p in parted), mistake


def test_loop_unanswered_and_not_a_function():
    def placeholder(model, optimizer, sample, score, steps, max_grad_norm=1.0, temperature=1.0):
        raise NotImplementedError("Student exercise: ...")

    for answer in (None, placeholder):
        assert "not answered yet" in LOOP.check(answer).message
    assert "pass the function itself" in LOOP.check(3).message


def _stand_in_run(steps=4):
    case, settings, groups, rewards = E.nb08.loop_cases()[0]
    model = E.nb08._tiny_lm(settings["seed"])
    state = {}

    def sample(step):
        state["step"] = step
        return groups[step % len(groups)]

    def score(batch):
        return rewards[state["step"] % len(rewards)]

    return dict(model=model, sample=sample, score=score,
                settings={"steps": steps, "learning_rate": settings["lr"], "max_grad_norm": 1.0, "temperature": 1.0})


def test_the_lessons_run_compares_step_one_with_trl_and_the_curve_with_trls(monkeypatch):
    trl = {"curve": [0.1, 0.2, 0.3, 0.45, 0.5]}
    monkeypatch.setattr(grpo_math, "trl_curve", lambda: trl)
    result = LOOP.check(right_loop, run=_stand_in_run())
    assert result.passed, result.message
    assert len(result.curve) == 4 and result.trl_curve == trl["curve"]
    assert re.search(r"Step 1's gradient equals TRL's _compute_loss's on the same group \(relative difference "
                     r"\d\.\de[-+]\d+\); 4 steps in \d+ s\. Mean reward", result.message), result.message

    def right_on_stand_ins_only(model, optimizer, sample, score, steps, **kw):  # the real run's loss is off by 2x
        if steps == 4:
            kw["temperature"] = 0.5
        return right_loop(model, optimizer, sample, score, steps, **kw)

    failed = LOOP.check(right_on_stand_ins_only, run=_stand_in_run())
    assert not failed.passed and "step 1's gradient differs from TRL's _compute_loss" in failed.message
    assert failed.curve is None and failed.trl_curve == trl["curve"]  # the lesson still plots TRL's


def test_compare_curves_says_whether_both_rose():
    both = grpo_math.compare_curves([0.0, 0.1, 0.1, 0.4, 0.5, 0.5], [0.1, 0.1, 0.2, 0.5, 0.5, 0.5])
    assert both["rise"] == pytest.approx(0.4, abs=1e-9) and "both rose" in both["text"]
    assert "yours rose, TRL's did not" in grpo_math.compare_curves([0, 0, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0])["text"]


def test_trl_curve_refuses_a_missing_or_stale_file_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="scripts/lesson08_trl_curve.py"):
        grpo_math.trl_curve(tmp_path / "none.json")
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"settings": {**grpo_math.LOOP, "steps": 1}, "curve": [0.0]}))
    with pytest.raises(ValueError, match="Fix: run `python scripts/lesson08_trl_curve.py` again"):
        grpo_math.trl_curve(stale)


def test_the_stored_trl_curve_matches_the_loops_settings_and_rose():
    """results/lesson08-trl-curve.json: made by scripts/lesson08_trl_curve.py with grpo_math.LOOP, one reward per
    step, and TRL's own run rose (the comparison the lesson states would be empty otherwise)."""
    data = grpo_math.trl_curve()
    assert len(data["curve"]) == grpo_math.LOOP["steps"]
    assert grpo_math.compare_curves(data["curve"], data["curve"])["rise"] > 0
    assert "--reward helpers.rewards:" + grpo_math.LOOP["reward"] in data["command"]


def test_the_loops_steps_were_picked_from_seeds_on_which_it_rose():
    """LOOP["steps"] is the N at which the lesson's loop (the kit's solution) rose on every seed tried
    (scripts/lesson08_trl_curve.py --seeds, stored beside TRL's curve), so a correct student loop sees it rise."""
    seeds = grpo_math.trl_curve()["loop_seeds"]
    assert sorted(s["seed"] for s in seeds) == [0, 1, 2]
    trl = grpo_math.trl_curve()["curve"]
    for run in seeds:
        assert len(run["curve"]) == grpo_math.LOOP["steps"], run["seed"]
        assert grpo_math.compare_curves(run["curve"], trl)["rise"] > 0.2, run["seed"]
        assert grpo_math.compare_curves(run["curve"][:CI_LOOP_STEPS], trl)["rise"] > 0.05, run["seed"]  # CI's run


def test_lesson_08_says_how_many_optimizer_steps_grpotrainer_takes_on_a_group():
    """Section 5's one step is not what GRPOTrainer does with a group on the cpu preset: it takes num_iterations steps
    on each sampled group, a number the lesson renders from the preset."""
    from pathlib import Path

    from helpers.config import PRESETS
    from scripts.make_notebooks import fill_placeholders

    text = (Path(__file__).resolve().parents[1] / "lessons" / "08_grpo_step.py").read_text()
    section = text[text.index("## 5. One optimizer step"):text.index("## 6. What the step did")]
    assert "what `GRPOTrainer` does with this group" not in section
    assert "{{cpu.num_iterations}} such steps on each sampled group" in section
    cpu = PRESETS["cpu"]
    rendered = fill_placeholders(section, "08")
    assert f"takes {cpu.num_iterations} such steps on each sampled group" in rendered
    assert f"`num_iterations={cpu.num_iterations}`" in rendered and f"`max_steps={cpu.max_steps}`" in rendered
