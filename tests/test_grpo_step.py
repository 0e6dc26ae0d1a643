"""Lesson 08 (one GRPO step from scratch): its truth is TRL's own loss, and the policy_loss exercise's check passes a right
answer and names each known mistake; the slow test runs the notebook on CPU."""

from __future__ import annotations

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


@pytest.mark.slow
def test_the_lesson_runs_on_cpu_and_the_rewarded_completion_rises(tmp_path):
    """notebooks/08_grpo_step.ipynb top to bottom at CI's settings: the solution passes its check, the loss equals
    TRL's on the lesson's own batch (before and after the step), and the step moved every completion's log-prob in the
    direction of its advantage."""
    from notebook_runner import execute, output_text

    nb = execute("08_grpo_step", tmp_path, {"PRESET": "cpu", "NUM_GENERATIONS": 4, "MAX_COMPLETION_LENGTH": 32,
                                            "RUN_DIR": str(tmp_path / "run")})
    text = output_text(nb)
    assert "Correct!" in text and "On this lesson's batch: yours" in text
    for when in (r"loss \(your policy_loss\): ", r"loss after the step \(your policy_loss\): "):
        match = re.search(when + r"([-+]\d+\.\d{6}); TRL's _compute_loss(?: on the same batch)?: ([-+]\d+\.\d{6})", text)
        assert match and match.group(1) == match.group(2), f"the loss differs from TRL's: {match and match.group(0)}"
    assert "positive advantage rose and every one with a negative advantage fell: True" in text
    rows = re.findall(r"^\s*\d+\s+[-\d.]+\s+([-+]\d+\.\d+)\s+[-\d.]+\s+[-\d.]+\s+([-+]\d+\.\d+)\s", text, re.M)
    assert len(rows) == 4 and any(float(a) > 0 and float(c) > 0 for a, c in rows), rows  # the rewarded one rose
