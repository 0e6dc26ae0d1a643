"""Lesson 08 one GRPO step: policy_loss, checked (value and gradient) against TRL's own GRPOTrainer._compute_loss
(helpers.teaching.grpo_math.trl_loss) on hidden batches and on the lesson's own batch; then grpo_train, the loop,
checked step by step against the kit's loop on tiny stand-in models (each known mistake named), then run for real
with the student's my_correctness_reward and my_advantages of 04: its first step's gradient against TRL's loss on the same group, its
final reward against a learning-rate-0 control by a margin the stored seeds measured."""

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


# Lesson 08 trains with the student's answers of 04 (my_correctness_reward, my_advantages): earlier() brings an earlier
# lesson's answer the way d2l's #@save does, the code as the lesson's solution cell wrote it (registry.json, one home),
# printed and defined here; the student pastes theirs over the line to train with their own.

EARLIER_SCOPE = "answer_from (helpers.rewards.answer_of, the kit's tested twin of 04's), answers_match, completion_text"


def earlier(name: str):
    """The answer `name` of an earlier lesson's exercise, as its solution cell wrote it: printed, then defined with
    EARLIER_SCOPE's names and math (what 04's cells had imported), and returned."""
    from helpers import rewards
    from helpers.teaching.exercises import registry

    entry = registry.find(name)
    print(f"Exercise {entry['number']}, {name}, as 04's solution cell wrote it (paste yours over this line to use "
          f"your own):\n{entry['solution']}\n")
    scope = {"answer_from": rewards.answer_of, "answers_match": rewards.answers_match,
             "completion_text": rewards.completion_text, "math": math}
    exec(compile(entry["solution"], f"<exercise {entry['number']}>", "exec"), scope)  # noqa: S102 - the kit's own cell
    return scope[name]


# The loop's truth is reference_train: the loop written once, with TRL's own loss (grpo_math.trl_loss), and each
# known mistake as a switch. A student's grpo_train is run beside it on tiny stand-in models (every gradient and every
# parameter after every step compared); where they part, the mistake whose trace the student's matches is named.

LOOP_MISTAKES = {
    "sign": "the update went the wrong way, the rewarded completions became LESS likely: minimise the policy loss "
            "(loss.backward(), then optimizer.step()) with advantages = advantages_fn(rewards), not their negative",
    "not normalized": "the advantages were not divided by the group's standard deviation (reward minus the mean only,"
                      " TRL's scale_rewards='none'): use advantages_fn(rewards), your my_advantages of 04",
    "raw rewards": "the rewards themselves were used as advantages: advantages = advantages_fn(rewards) (reward minus "
                   "the group's mean over its std), or a group where every completion scored 0.5 pushes them all up",
    "one reward": "only the first reward function was used: a completion's reward is the SUM of every function in "
                  "reward_funcs, each called on the whole group",
    "no zero_grad": "the gradients piled up from step to step: call optimizer.zero_grad() in every step before "
                    "loss.backward(), or each step re-applies every earlier step's gradient",
    "no clipping": "the gradient was not clipped: torch.nn.utils.clip_grad_norm_(params, max_grad_norm) between "
                   "loss.backward() and optimizer.step(), as GRPOTrainer does",
    "max_grad_norm fixed": "clip to the max_grad_norm passed in, not a fixed 1.0",
    "temperature ignored": "compute the log-probabilities at the temperature passed in, "
                           "grpo_math.completion_logps(model, batch, temperature=temperature): TRL divides the logits "
                           "by the sampling temperature",
}


def reference_train(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0, temperature=1.0,
                    mistake=None):
    """The loop as the kit writes it, TRL's loss on each step's group (or with one of LOOP_MISTAKES)."""
    import torch

    from helpers.teaching.grpo_math import completion_logps, total_rewards, trl_loss

    params = [q for q in model.parameters() if q.requires_grad]
    curve = []
    for step in range(steps):
        batch = sample(step)
        rewards = total_rewards(batch, reward_funcs[:1] if mistake == "one reward" else reward_funcs)
        adv = (rewards if mistake == "raw rewards" else group_advantages(rewards, scale="none")
               if mistake == "not normalized" else advantages_fn(rewards))
        advantages = torch.tensor(adv, dtype=torch.float32) * (-1.0 if mistake == "sign" else 1.0)
        logps = completion_logps(model, batch, temperature=1.0 if mistake == "temperature ignored" else temperature)
        loss = trl_loss(logps, logps.detach(), advantages, batch["completion_mask"])
        if mistake != "no zero_grad":
            optimizer.zero_grad()
        loss.backward()
        if mistake != "no clipping":
            torch.nn.utils.clip_grad_norm_(params, 1.0 if mistake == "max_grad_norm fixed" else max_grad_norm)
        optimizer.step()
        curve.append(sum(rewards) / len(rewards))
    return curve


def loop_run(seed: int, changes: dict | None = None) -> dict:
    """The engine of lesson 08's stored seeds and 05's rerun: the kit's loop (reference_train) from the base model
    and a fresh adapter on grpo_math.LOOP's settings with `changes`, the kit's rewards and advantages. The curve and
    the wall time."""
    import time

    import torch

    from helpers.teaching.grpo_math import LOOP, loop_model, loop_rewards

    s = {**LOOP, **(changes or {})}
    model, _tokenizer, sample = loop_model(s, seed)
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=s["learning_rate"],
                                  weight_decay=0.0)
    start = time.perf_counter()
    curve = reference_train(model, optimizer, sample, loop_rewards(), group_advantages, s["steps"],
                            max_grad_norm=s["max_grad_norm"], temperature=s["temperature"])
    return {"seed": seed, "changes": dict(changes or {}), "curve": curve, "wall_s": round(time.perf_counter() - start, 1)}


def _flat(tensors, like):
    import torch

    return torch.cat([(t if t is not None else torch.zeros_like(q)).detach().reshape(-1).clone()
                      for t, q in zip(tensors, like)])


class _Recorder:
    """Watches a loop through its optimizer and the model's parameters: at each optimizer.step(), the gradient the
    backward passes since the last step computed (before clipping), the gradient the step used, and the parameters
    after it. on_step(recorder, raw) runs before the step (the lesson's run compares step 1 with TRL there)."""

    def __init__(self, model, optimizer, on_step=None):
        self.params = [q for q in model.parameters() if q.requires_grad]
        self.raw, self.used, self.after = [], [], []
        self._pending = [None] * len(self.params)
        self._hooks = [q.register_hook(self._hook(i)) for i, q in enumerate(self.params)]
        real_step = optimizer.step

        def step(*args, **kwargs):
            raw = _flat(self._pending, self.params)
            if on_step is not None:
                on_step(self, raw)
            self._pending = [None] * len(self.params)
            self.raw.append(raw)
            self.used.append(_flat([q.grad for q in self.params], self.params))
            out = real_step(*args, **kwargs)
            self.after.append(_flat(self.params, self.params))
            return out

        optimizer.step = step

    def _hook(self, i):
        def hook(grad):
            self._pending[i] = grad.detach().clone() if self._pending[i] is None else self._pending[i] + grad
        return hook

    def remove(self):
        for h in self._hooks:
            h.remove()


def _tiny_lm(seed: int, vocab: int = 11, dim: int = 6):
    """A stand-in causal LM small enough to run a loop in milliseconds: each position's logits from its token and the
    running mean of the tokens before it (so a completion's log-probs depend on its prompt)."""
    import torch

    class TinyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab)
            with torch.no_grad():
                self.out.weight.mul_(4.0)  # gradients large enough that max_grad_norm clips on the hidden runs

        def forward(self, input_ids, attention_mask=None, **kwargs):
            from types import SimpleNamespace

            h = self.emb(input_ids)
            h = h + h.cumsum(1) / torch.arange(1, h.size(1) + 1).view(1, -1, 1)
            return SimpleNamespace(logits=self.out(torch.tanh(h)))

    with torch.random.fork_rng(devices=[]):  # the same stand-in on every check; the notebook's random state untouched
        torch.manual_seed(seed)
        return TinyLM()


def loop_cases():
    """The hidden runs of the loop exercise: (case, settings, one batch and its rewards per step)."""
    import torch

    def batches(seed, groups, completions, tokens, lengths):
        g = torch.Generator().manual_seed(seed)
        out = []
        for step in range(groups):
            mask = torch.zeros(completions, tokens, dtype=torch.long)
            for i, n in enumerate(lengths[step]):
                mask[i, :n] = 1
            out.append({"prompt_ids": torch.randint(0, 11, (1, 3), generator=g).repeat(completions, 1),
                        "prompt_mask": torch.ones(completions, 3, dtype=torch.long),
                        "completion_ids": torch.randint(0, 11, (completions, tokens), generator=g),
                        "completion_mask": mask})
        return out

    return [
        ("3 steps of a group of 4 on a tiny stand-in model (max_grad_norm 1.0, temperature 1.0, lr 0.05)",
         dict(seed=0, steps=3, max_grad_norm=1.0, temperature=1.0, lr=0.05),
         batches(10, 3, 4, 5, [[5, 2, 4, 1], [3, 5, 5, 2], [1, 4, 3, 5]]),
         [[1.0, 0.0, 0.5, 0.0], [0.25, 1.5, 0.0, 0.5], [2.0, 0.0, 0.0, 0.125]]),
        ("3 steps of a group of 3 on a tiny stand-in model (max_grad_norm 0.3, temperature 0.7, lr 0.05)",
         dict(seed=1, steps=3, max_grad_norm=0.3, temperature=0.7, lr=0.05),
         batches(11, 3, 3, 6, [[6, 2, 4], [3, 6, 1], [2, 5, 6]]),
         [[0.0, 1.0, 0.25], [0.5, 0.375, 3.0], [1.0, 0.0, 2.0]]),
    ]


NO_GRAPH = ("loss.backward() found no graph: the loss was computed under torch.no_grad() or from detached "
            "log-probs. The loss must keep the graph back to the log-probs (logps = grpo_math.completion_logps(model, "
            "batch, temperature) outside torch.no_grad(), no .detach(), .item() or float(...) on the way; only "
            "old_logps = logps.detach() is the constant)")


def _call_loop(case, fn, *args, **kwargs):
    """The student's loop through call(); a backward through a loss with no graph is named, not a bare error."""
    try:
        return call(case, fn, *args, **kwargs)
    except Fail as f:
        if "does not require grad" in f.message:
            raise Fail(case, f"on {case} your loop raised RuntimeError: {NO_GRAPH}.") from None
        raise


GOLD = "7"  # the stand-in runs' gold answer
NO_ANSWER = ("a reward function got answer=None: call each as GRPOTrainer does, f(prompts=batch['prompts'], "
             "completions=batch['completions'], answer=batch['answer']) (04's correctness reward compares with it)")


def stand_in_rewards(rewards):
    """Two reward functions for a stand-in run, called as GRPOTrainer calls them: the first pays the case's reward of
    each completion ("step k completion i"), the second 0.5 to every third completion; it needs the gold answer, as
    04's correctness reward does (a loop that drops a function shows in its gradients, one that drops the answer is told so)."""
    def index(text):
        step, i = (int(w) for w in text.split()[1::2])
        return step, i

    def case_reward(prompts=None, completions=None, answer=None, **kwargs):
        return [float(rewards[step % len(rewards)][i]) for step, i in map(index, completions)]

    def answer_reward(prompts=None, completions=None, answer=None, **kwargs):
        if answer is None:
            raise TypeError(NO_ANSWER)
        return [0.5 if gold == GOLD and (step + i) % 3 == 0 else 0.0
                for (step, i), gold in zip(map(index, completions), answer)]

    return [case_reward, answer_reward]


def _trace(fn, case, settings, groups, rewards, mistake=None):
    """Run a loop (the student's, or reference_train with `mistake`) on a fresh stand-in: what it did, step by step."""
    import torch

    model = _tiny_lm(settings["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"], weight_decay=0.0)
    recorder, sampled = _Recorder(model, optimizer), []

    def sample(step):
        sampled.append(step)
        batch = {k: v.clone() for k, v in groups[int(step) % len(groups)].items()}
        n = batch["completion_ids"].size(0)
        batch.update(prompts=[[{"role": "user", "content": "a stand-in question"}]] * n, answer=[GOLD] * n,
                     completions=[f"step {int(step)} completion {i}" for i in range(n)])
        return batch

    args = (model, optimizer, sample, stand_in_rewards(rewards), group_advantages, settings["steps"])
    kwargs = dict(max_grad_norm=settings["max_grad_norm"], temperature=settings["temperature"])
    if fn is reference_train:
        curve = reference_train(*args, mistake=mistake, **kwargs)
    else:
        curve = _call_loop(case, fn, *args, **kwargs)
    recorder.remove()
    return {"curve": curve, "sampled": sampled, "raw": recorder.raw, "used": recorder.used, "after": recorder.after}


def _parting(got, want):
    """(step, what) where two traces first differ, or None."""
    import torch

    for k in range(len(want["after"])):
        for what in ("raw", "used", "after"):
            a, b = got[what][k] if k < len(got[what]) else None, want[what][k]
            if a is None or a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-7):
                return k, what
    return None


_PARTED = {"raw": "the gradient of your loss is not TRL's _compute_loss's on the same group",
           "used": "the gradient the optimizer step used is not the clipped gradient of this step's loss",
           "after": "the parameters after optimizer.step() differ (use the optimizer passed in, one step per group)"}


def _judge_loop_case(fn, case, settings, groups, rewards):
    steps = settings["steps"]
    got = _trace(fn, case, settings, groups, rewards)
    if len(got["sampled"]) != steps:
        raise Fail(case, f"on {case} your loop called sample {len(got['sampled'])} times in {steps} steps: one new "
                         "group per step, batch = sample(step) for step in range(steps).")
    if len(got["after"]) != steps:
        raise Fail(case, f"on {case} optimizer.step() ran {len(got['after'])} times in {steps} steps: once per step, "
                         "after loss.backward() and the clipping (without it nothing learns).")
    want = _trace(reference_train, case, settings, groups, rewards)
    parted = _parting(got, want)
    if parted is not None:
        step, what = parted
        why = next((text for mistake, text in LOOP_MISTAKES.items()
                    if _parting(got, _trace(reference_train, case, settings, groups, rewards, mistake)) is None),
                   f"{_PARTED[what]}; each step: batch = sample(step), rewards = the sum of every reward function on "
                   "the group, advantages = advantages_fn(rewards), logps = grpo_math.completion_logps(model, batch, "
                   "temperature), the loss with old_logps = logps.detach(), optimizer.zero_grad(), loss.backward(), "
                   "clip_grad_norm_(params, max_grad_norm), optimizer.step()")
        raise Fail(case, f"on {case} your loop parts from the kit's (TRL's loss) at step {step + 1}: {why}.")
    curve = got["curve"]
    means = want["curve"]
    if not isinstance(curve, (list, tuple)) or len(curve) != steps or not all(
            math.isclose(float(a), b, abs_tol=1e-6) for a, b in zip(curve, means)):
        raise Fail(case, f"on {case} your loop trained right but returned {curve!r}: return the mean reward of each "
                         f"step's group, a list of {steps} numbers ({[round(m, 4) for m in means]} here).")


def _no_spread(rewards) -> bool:
    return max(rewards) - min(rewards) < 1e-9


def _run_for_real(fn, run: dict) -> dict:
    """The student's loop on the lesson's model, with the student's rewards and advantages: step 1's advantages
    compared with TRL's formula and its gradient with TRL's _compute_loss on the group it sampled (one extra forward
    and backward), then every step; then the curve against the lr-0 control (run["control"], same seed and settings):
    a final reward not above the control's by the margin the stored seeds give is refused, its likely cause named."""
    import time

    import torch

    from helpers.messages import say
    from helpers.teaching import grpo_math
    from helpers.teaching.grpo_math import LOOP, completion_logps, total_rewards, trl_loss

    from helpers.teaching.exercises import nb04

    model, settings = run["model"], {**LOOP, **run.get("settings", {})}
    funcs, advantages_fn = list(run["reward_funcs"]), run["advantages_fn"]
    four_five = nb04.my_advantages.check(advantages_fn)  # before minutes of training: 04's own check
    if not four_five.passed:
        raise Fail("the lesson's run", f"advantages_fn is not TRL's advantages; exercise {nb04.my_advantages.number}'s "
                                       f"check says: {four_five.message} Pass your my_advantages once it passes (the "
                                       "lesson passes grpo_math.group_advantages until then).")
    params = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings["learning_rate"], weight_decay=0.0)
    seen, first, flat = {}, {}, []

    def sample(step):
        seen["batch"] = run["sample"](step)
        seen["rewards"] = total_rewards(seen["batch"], funcs)
        flat.append(_no_spread(seen["rewards"]))
        say(f"your loop, group {len(flat)} of {settings['steps']}: mean reward "
            f"{sum(seen['rewards']) / len(seen['rewards']):.3f}")
        return seen["batch"]

    def on_step(_recorder, raw):
        if first or "rewards" not in seen:
            return
        want = group_advantages(seen["rewards"])
        logps = completion_logps(model, seen["batch"], temperature=settings["temperature"])
        truth = trl_loss(logps, logps.detach(), torch.tensor(want, dtype=torch.float32),
                         seen["batch"]["completion_mask"])
        trl = _flat(torch.autograd.grad(truth, params, allow_unused=True), params)
        first["difference"] = float((raw - trl).norm() / trl.norm().clamp(min=1e-12))

    recorder, start = _Recorder(model, optimizer, on_step), time.perf_counter()
    try:
        curve = _call_loop("the lesson's run", fn, model, optimizer, sample, funcs, advantages_fn, settings["steps"],
                           max_grad_norm=settings["max_grad_norm"], temperature=settings["temperature"])
    finally:
        recorder.remove()
    wall = time.perf_counter() - start
    if first.get("difference", 0.0) > 1e-3:
        raise Fail("the lesson's run", f"on the lesson's model, step 1's gradient differs from TRL's _compute_loss on "
                                       f"the same group by {first['difference']:.2%}: compute the loss on "
                                       "completion_logps(model, batch, temperature) of the batch sample(step) returned.")
    curve = [float(c) for c in curve]
    verdict = grpo_math.versus_control(curve, run["control"], grpo_math.rise_margin(len(curve)))
    if not verdict["rose"]:
        names = [getattr(f, "__name__", repr(f)) for f in funcs]
        why = (f"{sum(flat)} of its {len(flat)} groups had no reward spread (every completion scored the same, so "
               f"every advantage was 0 and the step taught nothing) with reward_funcs {names}: score with the format "
               "rewards too, REWARDS = [my_correctness_reward, *the kit's four format rewards], as the lesson does"
               if sum(flat) * 2 >= len(flat) else
               f"the loop is the kit's step for step, so look at what it was given: reward_funcs {names} (the lesson's "
               f"REWARDS), the settings {settings['steps']} steps at learning rate {settings['learning_rate']:g} "
               f"(grpo_math.LOOP's were measured to learn: {LOOP['steps']} steps at {LOOP['learning_rate']:g}); "
               "a run that rose by chance less than the margin passes on another SEED")
        raise Fail("the lesson's run", f"{verdict['text']} Your loop did not learn: {why}.")
    return {"curve": curve, "wall_s": wall, "first_step_difference": first.get("difference"), "versus": verdict}


def _judge_loop(fn, run=None, outcome=None):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: grpo_train, not grpo_train(model, ...)")
    for case, settings, groups, rewards in loop_cases():
        _judge_loop_case(fn, case, settings, groups, rewards)
    if run is not None:
        outcome.update(_run_for_real(fn, run))


class _LoopExercise(Exercise):
    """check(answer, run=dict(model=, sample=, reward_funcs=, advantages_fn=, control=, settings=)) also runs the
    loop on the lesson's model for real once the hidden cases pass: result.curve (the mean reward per step) and
    result.versus (how its final reward compares with the lr-0 control's)."""

    def check(self, answer=MISSING, run=None) -> CheckResult:
        outcome: dict = {}
        result = super().check(answer, run=run, outcome=outcome)
        result.curve, result.versus = outcome.get("curve"), outcome.get("versus")
        if result.passed and result.curve is not None:
            result.message += (f" Step 1's gradient equals TRL's _compute_loss's on the same group (relative "
                               f"difference {outcome['first_step_difference'] or 0:.1e}); {len(result.curve)} steps in "
                               f"{outcome['wall_s']:.0f} s. " + result.versus["text"])
        return result


grpo_train = _LoopExercise(
    LESSON, "grpo_train",
    hint=("One iteration of the for loop is section 2 to 5 of this lesson on a new group: batch = sample(step); "
          "rewards: for each completion the sum of f(prompts=batch['prompts'], completions=batch['completions'], "
          "answer=batch['answer']) over reward_funcs; advantages = advantages_fn(rewards) as a tensor; logps with "
          "grpo_math.completion_logps(model, batch, temperature=temperature); your policy_loss with "
          "old_logps = logps.detach() (the ratio is 1 on a fresh group).",
          "Then the update, in this order: optimizer.zero_grad(); loss.backward(); "
          "torch.nn.utils.clip_grad_norm_([q for q in model.parameters() if q.requires_grad], max_grad_norm); "
          "optimizer.step(); and curve.append(sum(rewards) / len(rewards))."),
    judge=_judge_loop,
    success="it takes the kit's steps, gradient for gradient, on every hidden run.")


__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
