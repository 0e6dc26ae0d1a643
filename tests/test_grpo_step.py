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


CI_LOOP_STEPS = 5  # of the lesson's 12: every stored seed rose above its control by then (checked below)
CI_HELDOUT = {"EVAL_SIZE": 4, "EVAL_MAX_NEW_TOKENS": 32}  # section 8's held-out questions, at the class plans' CPU sizes


@pytest.mark.slow
def test_the_lesson_runs_on_cpu_and_the_rewarded_completion_rises(tmp_path):
    """notebooks/08_grpo_step.ipynb top to bottom at CI's settings: 04's answers (4.1, 4.5) are brought and pass 04's
    checks, the solution passes its check, the loss equals TRL's on the lesson's own batch (before and after the
    step), and the step moved every completion's log-prob in the direction of its advantage; then the loop
    (grpo_math.LOOP's group, length and learning rate, CI_LOOP_STEPS steps instead of the lesson's 12) passes its
    check, which requires its final reward above the stored lr-0 control's by the margin; the held-out questions are
    scored with and without the adapter."""
    from notebook_runner import execute, has_image, output_text

    nb = execute("08_grpo_step", tmp_path, {"PRESET": "cpu", "NUM_GENERATIONS": 4, "MAX_COMPLETION_LENGTH": 32,
                                            "RUN_DIR": str(tmp_path / "run"), "LOOP_STEPS": CI_LOOP_STEPS, **CI_HELDOUT})
    text = output_text(nb)
    assert "4.1: Correct!" in text and "4.5: Correct!" in text and "def my_correctness_reward" in text
    assert "scoring with: ['my_correctness_reward', 'integer_answer_reward'" in text and "advantages: my_advantages" in text
    assert "On this lesson's batch: yours" in text
    for when in (r"loss \(your policy_loss\): ", r"loss after the step \(your policy_loss\): "):
        match = re.search(when + r"([-+]\d+\.\d{6}); TRL's _compute_loss(?: on the same batch)?: ([-+]\d+\.\d{6})", text)
        assert match and match.group(1) == match.group(2), f"the loss differs from TRL's: {match and match.group(0)}"
    assert "positive advantage rose and every one with a negative advantage fell: True" in text
    rows = re.findall(r"^\s*\d+\s+[-\d.]+\s+([-+]\d+\.\d+)\s+[-\d.]+\s+[-\d.]+\s+([-+]\d+\.\d+)\s", text, re.M)
    assert len(rows) == 4 and any(float(a) > 0 and float(c) > 0 for a, c in rows), rows  # the rewarded one rose
    # section 7: the control read back (seed 0 is stored), the solution's loop passed its check: step 1 equals TRL's
    # on the same group and the final reward is above the control's by the margin
    assert "the lr-0 control (stored in results/lesson08-trl-curve.json (seed 0))" in text, text
    assert text.count("Correct! it takes the kit's steps") == 1, text
    assert "Step 1's gradient equals TRL's _compute_loss's on the same group" in text
    assert f"{CI_LOOP_STEPS} steps in " in text and ", above the margin" in text, text
    assert has_image(nb), "the reward curves were not plotted"
    for who in ("base model (the control)", "after your loop"):
        assert re.search(re.escape(who) + r"\s+format \d+%, accuracy \d+% \(4 held-out questions\)", text), who


# ------------------------------------------------------------------------------------- Exercise 8.2: the GRPO loop

LOOP = E.nb08.grpo_train


def right_loop(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0, temperature=1.0,
               mistake=None):
    """A student's loop written out (not the kit's reference_train), with the mistakes students make as switches."""
    params = [q for q in model.parameters() if q.requires_grad]
    curve = []
    for step in range(steps):
        batch = sample(step)
        funcs = reward_funcs[:1] if mistake == "one reward" else reward_funcs
        answer = None if mistake == "no answer" else batch["answer"]
        scores = [f(prompts=batch["prompts"], completions=batch["completions"], answer=answer) for f in funcs]
        rewards = [sum(s) for s in zip(*scores)]
        r = torch.tensor(rewards, dtype=torch.float32)
        advantages = {"raw rewards": r, "not normalized": r - r.mean()}.get(
            mistake, torch.tensor(advantages_fn(rewards), dtype=torch.float32))
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
    "only the first reward function": ("one reward", "only the first reward function was used"),
    "gold answer not passed": ("no answer", "answer=batch['answer']"),
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
        named = [m for m in nb08.LOOP_MISTAKES if all(
            nb08._parting(nb08._trace(nb08.reference_train, *c, mistake=mistake),
                          nb08._trace(nb08.reference_train, *c, mistake=m)) is None for c in nb08.loop_cases())]
        assert named == [mistake], (mistake, named)


def test_loop_unanswered_and_not_a_function():
    def placeholder(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0, temperature=1.0):
        raise NotImplementedError("Student exercise: ...")

    for answer in (None, placeholder):
        assert "not answered yet" in LOOP.check(answer).message
    assert "pass the function itself" in LOOP.check(3).message


def test_earlier_brings_04s_answers_printed_and_they_pass_04s_checks(capsys):
    """08 trains with the student's 4.1 and 4.5: ex.earlier defines them from 04's solution cells and prints them."""
    reward, advantages = E.nb08.earlier("my_correctness_reward"), E.nb08.earlier("my_advantages")
    out = capsys.readouterr().out
    assert "Exercise 4.1, my_correctness_reward" in out and "def my_advantages(rewards):" in out
    assert E.nb04.my_correctness_reward.check(reward).passed and E.nb04.my_advantages.check(advantages).passed
    assert reward(completions=["<answer>12</answer>", "<answer>7</answer>"], answer=["12", "12"]) == [2.0, 0.0]


def _stand_in_run(steps=4, control=0.0, reward_funcs=None):
    """The lesson's run on a stand-in model: the hidden run's groups, its two reward functions, a flat control."""
    case, settings, groups, rewards = E.nb08.loop_cases()[0]

    def sample(step):
        batch = dict(groups[step % len(groups)])
        n = batch["completion_ids"].size(0)
        return {**batch, "prompts": [None] * n, "answer": [E.nb08.GOLD] * n,
                "completions": [f"step {step} completion {i}" for i in range(n)]}

    return dict(model=E.nb08._tiny_lm(settings["seed"]), sample=sample,
                reward_funcs=reward_funcs or E.nb08.stand_in_rewards(rewards), advantages_fn=grpo_math.group_advantages,
                control=[control] * steps,
                settings={"steps": steps, "learning_rate": settings["lr"], "max_grad_norm": 1.0, "temperature": 1.0})


def test_the_lessons_run_compares_step_one_with_trl_and_the_reward_with_the_control(monkeypatch):
    monkeypatch.setattr(grpo_math, "rise_margin", lambda steps, record=None: 0.1)
    result = LOOP.check(right_loop, run=_stand_in_run())  # the stand-in's last 3 groups average 0.6 against 0.0
    assert result.passed, result.message
    assert len(result.curve) == 4 and result.versus["rose"] and result.versus["margin"] == 0.1
    assert re.search(r"Step 1's gradient equals TRL's _compute_loss's on the same group \(relative difference "
                     r"\d\.\de[-+]\d+\); 4 steps in \d+ s\. Your loop's final reward", result.message), result.message

    def right_on_stand_ins_only(model, optimizer, sample, reward_funcs, advantages_fn, steps, **kw):  # 2x off for real
        if steps == 4:
            kw["temperature"] = 0.5
        return right_loop(model, optimizer, sample, reward_funcs, advantages_fn, steps, **kw)

    failed = LOOP.check(right_on_stand_ins_only, run=_stand_in_run())
    assert not failed.passed and "step 1's gradient differs from TRL's _compute_loss" in failed.message
    assert failed.curve is None


def test_a_loop_that_does_not_rise_above_the_control_is_refused_with_the_likely_cause(monkeypatch):
    monkeypatch.setattr(grpo_math, "rise_margin", lambda steps, record=None: 0.1)
    below = LOOP.check(right_loop, run=_stand_in_run(control=0.6))  # the same final reward as the control's
    assert not below.passed and "not above the margin 0.100" in below.message and "did not learn" in below.message
    assert "REWARDS" in below.message, below.message

    def correctness_only(prompts=None, completions=None, answer=None, **kwargs):  # nobody right yet: no spread
        return [0.0] * len(completions)

    flat = LOOP.check(right_loop, run=_stand_in_run(control=0.0, reward_funcs=[correctness_only]))
    assert not flat.passed and "4 of its 4 groups had no reward spread" in flat.message, flat.message
    assert "score with the format rewards too" in flat.message

    wrong_advantages = LOOP.check(right_loop, run={**_stand_in_run(), "advantages_fn": lambda r: [x - sum(r) / len(r)
                                                                                                  for x in r]})
    assert not wrong_advantages.passed and "advantages_fn is not TRL's advantages" in wrong_advantages.message
    assert "divide by the group's std" in wrong_advantages.message or "std" in wrong_advantages.message


def test_the_margin_is_twice_a_controls_noise_and_the_verdict_says_so():
    record = {"loop_seeds": [{"control": [0.0, 0.2, 0.0, 0.2, 0.0, 0.2]}, {"control": [0.1] * 6}]}
    margin = grpo_math.rise_margin(6, record)  # windows of 3: means 0.0667 or 0.1333 around 0.1 -> strays +-0.0333
    assert margin == pytest.approx(2 * (0.5 * (1 / 30) ** 2) ** 0.5, rel=1e-6)
    verdict = grpo_math.versus_control([0.0, 0.1, 0.2, 0.5, 0.5, 0.5], [0.1] * 6, margin)
    assert verdict["rose"] and verdict["gain"] == pytest.approx(0.4) and "above the margin" in verdict["text"]
    assert not grpo_math.versus_control([0.1] * 6, [0.1] * 6, margin)["rose"]


def test_the_record_refuses_a_missing_or_stale_file_with_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="scripts/lesson08_trl_curve.py --seeds"):
        grpo_math.loop_record(tmp_path / "none.json")
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"settings": {**grpo_math.LOOP, "steps": 1}, "loop_seeds": []}))
    with pytest.raises(ValueError, match="Fix: run `python scripts/lesson08_trl_curve.py"):
        grpo_math.loop_record(stale)


def test_the_loop_learned_above_its_control_on_every_stored_seed_at_the_lessons_and_cis_steps():
    """results/lesson08-trl-curve.json: the kit's loop (grpo_math.loop_run) and its lr-0 control on LOOP's settings, on
    three seeds; each rose above its control by the margin the controls give, over the lesson's steps and over CI's
    (the notebook test's LOOP_STEPS), so a correct student loop is refused only by bad luck."""
    seeds = grpo_math.loop_record()["loop_seeds"]
    assert sorted(s["seed"] for s in seeds) == [0, 1, 2]
    for run in seeds:
        assert len(run["curve"]) == len(run["control"]) == grpo_math.LOOP["steps"], run["seed"]
        for steps in (grpo_math.LOOP["steps"], CI_LOOP_STEPS):
            verdict = grpo_math.versus_control(run["curve"][:steps], run["control"], grpo_math.rise_margin(steps))
            assert verdict["rose"], (run["seed"], steps, verdict["text"])


def test_the_stored_control_is_the_controls_own_rerun(monkeypatch):
    """control_curve reads a recorded seed's control back (fully determined by the seed and LOOP) and runs any other
    seed's with the sample it is given, scoring with the kit's rewards, no backward."""
    stored = grpo_math.loop_record()["loop_seeds"][0]
    curve, where = grpo_math.control_curve(stored["seed"], 3)
    assert curve == stored["control"][:3] and "stored" in where
    calls = []

    def sample(step):
        calls.append(step)
        return {"prompts": [None] * 2, "completions": ["<answer>7</answer>", "no tags"], "answer": ["7", "7"]}

    curve, where = grpo_math.control_curve(99, 2, sample)
    assert calls == [0, 1] and "run here" in where and curve[0] == pytest.approx(sum(
        sum(f(prompts=None, completions=["<answer>7</answer>", "no tags"], answer=["7", "7"])) for f in
        grpo_math.loop_rewards()) / 2)


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
