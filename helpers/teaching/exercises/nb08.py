"""Lesson 08 one GRPO step: policy_loss, checked (value and gradient) against TRL's own GRPOTrainer._compute_loss
(helpers.teaching.grpo_math.trl_loss) on hidden batches and on the lesson's own batch."""

from __future__ import annotations

import math

from helpers.teaching.exercises.core import MISSING, CheckResult, Exercise, Fail, call, numbered
from helpers.teaching.grpo_math import group_advantages

LESSON = "08"


# Appended as a block: lesson 08's loss exercise. Its truth is TRL's own GRPOTrainer._compute_loss, run on the given
# log-probabilities (helpers.teaching.grpo_math.trl_loss), never a copy of the formula.


def _loss_batch(seed: int, completions: int, tokens: int, lengths, spread: float, rewards):
    """A hidden batch: log-probs that moved since sampling (ratios away from 1, so clipping matters), padding
    positions holding log-probs too (so counting them shows), one length per completion."""
    import torch

    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(completions, tokens, generator=g) * 3 - 0.05
    logps = old + torch.randn(completions, tokens, generator=g) * spread
    mask = torch.zeros(completions, tokens, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return logps, old, torch.tensor(group_advantages(rewards), dtype=torch.float32), mask


def loss_cases():
    """(case, logps, old_logps, advantages, mask, epsilon): the hidden batches of the policy_loss exercise."""
    return [
        ("a group of 4 completions of 6, 3, 5 and 1 tokens (epsilon 0.2)",
         *_loss_batch(0, 4, 6, [6, 3, 5, 1], 0.4, [3.5, 0.0, 1.5, 0.0]), 0.2),
        ("a group of 3 completions of 2, 7 and 4 tokens (epsilon 0.1)",
         *_loss_batch(1, 3, 7, [2, 7, 4], 0.3, [0.0, 2.5, 0.5]), 0.1),
        ("a group of 4 completions of 4 tokens each, 4, 2, 3 and 4 of them real (epsilon 0.2)",
         *_loss_batch(2, 4, 4, [4, 2, 3, 4], 0.4, [0.0, 1.0, 0.25, 2.0]), 0.2),
    ]


def _per_token(logps, old, adv, eps, ratio=None, clip=True):
    import torch

    ratio = torch.exp(logps - old) if ratio is None else ratio
    if not clip:
        return -(ratio * adv)
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


def loss_mistakes(logps, old, adv, mask, eps) -> list[tuple[str, float]]:
    """(what went wrong, the loss it gives) for each known mistake, on one batch."""
    a, m = adv.unsqueeze(1), mask.float()
    right = _per_token(logps, old, a, eps)
    dapo = lambda per_token: float((per_token * m).sum() / m.sum())  # noqa: E731
    out = [
        ("the padding after each completion's end was counted: multiply the per-token losses by the mask before "
         "summing (only completion tokens count)", float(right.mean())),
        ("the padding after each completion's end was counted: multiply the per-token losses by the mask before "
         "summing (only completion tokens count)", float(right.sum() / m.sum())),
        ("you divided by every position, padding included: divide by the number of completion tokens, mask.sum()",
         float((right * m).sum() / m.numel())),
        ("the sign is flipped: that loss would be minimised by making the rewarded tokens LESS likely (gradient "
         "ascent on the objective is descent on minus it); per token the loss is -min(ratio * A, clipped * A)",
         -dapo(right)),
        ("there is no clipping: clamp the ratio to [1 - epsilon, 1 + epsilon] and take -min(ratio * A, clipped * A),"
         " so a token that already moved far enough stops pulling (PPO's trust region)",
         dapo(_per_token(logps, old, a, eps, clip=False))),
        ("you averaged per completion, then over completions (loss_type 'grpo', where each completion weighs the same"
         " whatever its length); TRL's default 'dapo' sums over ALL completion tokens of the batch and divides by "
         "their count", float(((right * m).sum(-1) / m.sum(-1)).mean())),
        ("the ratio is exp(logp - old_logp) (a ratio of probabilities), not logp / old_logp (a ratio of "
         "log-probabilities)", dapo(_per_token(logps, old, a, eps, ratio=logps / old))),
        ("epsilon was not used: clip to [1 - epsilon, 1 + epsilon] with the epsilon passed in, not a fixed 0.2",
         dapo(_per_token(logps, old, a, 0.2))),
    ]
    if logps.size(0) == logps.size(1):  # square: advantages (B,) broadcast silently along the tokens
        out.append(("the advantages were spread along the tokens, not the completions: advantages has one value per "
                    "completion, shape (B,); advantages.unsqueeze(1) (shape (B, 1)) gives every token of a completion"
                    " its completion's advantage", dapo(_per_token(logps, old, adv.unsqueeze(0), eps))))
    return out


def _loss_and_grad(fn, case, logps, old, adv, mask, eps):
    """Run a loss function on a copy of the batch; (the loss value, d loss / d logps or None, what it returned)."""
    import torch

    leaf = logps.detach().clone().requires_grad_(True)
    got = call(case, fn, leaf, old.clone(), adv.clone(), mask.clone(), epsilon=eps)
    if not isinstance(got, torch.Tensor):
        return got, None
    if got.requires_grad and got.numel() == 1:
        got.backward()
    return got, leaf.grad


def _judge_policy_loss(fn, this_batch=None):
    import torch

    from helpers.teaching.grpo_math import trl_loss

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: policy_loss, not policy_loss(logps, ...)")
    cases = loss_cases()
    if this_batch is not None:
        logps, old, adv, mask = (t.detach() for t in this_batch)
        cases.append(("this lesson's batch (the group sampled above)", logps, old, adv, mask, 0.2))
    for case, logps, old, adv, mask, eps in cases:
        try:
            got, grad = _loss_and_grad(fn, case, logps, old, adv, mask, eps)
        except Fail as f:
            if "must match the size" in f.message:
                f.message += (" - advantages has one value per completion, shape (B,), the log-probs (B, T): "
                              "advantages.unsqueeze(1), shape (B, 1), gives every token its completion's advantage")
            raise
        leaf = logps.clone().requires_grad_(True)
        truth = trl_loss(leaf, old, adv, mask, epsilon=eps)
        truth.backward()
        want = float(truth.detach())
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            raise Fail(case, f"on {case} you returned the number {got!r}, not a tensor: the optimizer step needs the "
                             "loss tensor with its graph (no .item(), no float(...)); return the tensor itself.")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise Fail(case, f"on {case} you returned {shape}; return ONE number, a 0-dim tensor: the per-token "
                             "losses summed over the completion tokens and divided by their count.")
        value = float(got.detach())
        if not math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-6):
            why = next((w for w, v in loss_mistakes(logps, old, adv, mask, eps)
                        if math.isclose(value, v, rel_tol=1e-4, abs_tol=1e-6)),
                       "per token -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A) with ratio = "
                       "exp(logp - old_logp), summed over the completion tokens (mask) and divided by their count")
            raise Fail(case, f"on {case} your loss is {value:+.6f}; TRL's GRPOTrainer._compute_loss gives {want:+.6f}: "
                             f"{why}.")
        if grad is None:
            raise Fail(case, f"on {case} your loss has the right value ({value:+.6f}) but no gradient: it was detached "
                             "(.detach(), .item(), torch.no_grad() or a new torch.tensor(...)), so the optimizer step "
                             "would change nothing; compute it from logps with torch operations.")
        if not torch.allclose(grad, leaf.grad, rtol=1e-4, atol=1e-7):
            raise Fail(case, f"on {case} your loss has TRL's value but not its gradient with respect to logps: part of "
                             "it was detached (old_logps is the constant; logps must stay in the graph everywhere).")


class _LossExercise(Exercise):
    """check(answer, this_batch=(logps, old_logps, advantages, mask)) also judges the lesson's own batch and, when
    the answer passes, prints its loss on that batch beside TRL's."""

    def check(self, answer=MISSING, this_batch=None) -> CheckResult:
        result = super().check(answer, this_batch=this_batch)
        if result.passed and this_batch is not None:
            from helpers.teaching.grpo_math import trl_loss

            logps, old, adv, mask = (t.detach() for t in this_batch)
            ours, theirs = float(answer(logps, old, adv, mask, epsilon=0.2)), float(trl_loss(logps, old, adv, mask))
            result.message += f" On this lesson's batch: yours {ours:+.6f}, TRL's _compute_loss {theirs:+.6f}."
        return result


policy_loss = _LossExercise(
    LESSON, "policy_loss",
    hint="logps and old_logps are (B, T), advantages (B,), mask (B, T) with 1 on completion tokens: "
         "advantages.unsqueeze(1) broadcasts A over a completion's tokens; torch.exp, torch.clamp, torch.min; "
         "(per_token * mask).sum() / mask.sum().",
    judge=_judge_policy_loss,
    success="it equals TRL's GRPOTrainer._compute_loss, value and gradient, on every hidden batch.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
