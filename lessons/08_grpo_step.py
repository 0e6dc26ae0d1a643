# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/08_grpo_step.ipynb)
#
# # 08 · One GRPO step from scratch
#
# 05 let `GRPOTrainer` take the steps. Here you take one yourself, every part in plain sight: sample a group of
# completions of one question with `model.generate`, score them, turn the rewards into advantages, write the loss,
# take one optimizer step, and watch the probability of the rewarded completions go up and the others go down.
# The reward is yours (exercise {{exercise.my_correctness_reward}}'s correctness reward, with the kit's four format
# rewards) and so are the advantages (exercise {{exercise.my_advantages}}). Then you write the loop that repeats that step on new groups, and watch the reward rise above a
# control run that cannot learn (learning rate 0); the held-out questions say what it learned.
#
# It uses the embedded SmolLM2-135M with a LoRA adapter, on the CPU, on **any** runtime (a GPU one included), so
# every student can run it: the algorithm is the same on the T4, only bigger.
#
# ## Learning objectives
#
# - Sample one GRPO group with `model.generate` (`num_return_sequences`, `do_sample`, `temperature`).
# - Build the completion mask TRL builds: every token up to and including the first end-of-sequence token.
# - Write the token-level clipped policy loss yourself, checked against TRL's `GRPOTrainer._compute_loss`.
# - See one optimizer step move each completion's log-probability in the direction of its advantage.
# - Write the GRPO training loop yourself, with your reward and advantages of 04, and tell learning from luck: the
#   reward rises above a learning-rate-0 control by more than the control's own noise; held-out format and accuracy.
#
# **Expected time on a Colab CPU runtime:** the CPU-stack install (about a minute, estimate) plus about a minute
# with the embedded model for sections 1 to 6, and a few minutes for the loop of section 7 (estimate; see
# docs/instructor-guide.md for the measured time).
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "cpu" on any runtime - this lesson always uses the embedded SmolLM2-135M
LESSON = "08_grpo_step"       # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
USE_DRIVE = False             # Colab: keep the run folder on Google Drive (this lesson writes nothing there)
MAX_STEPS = None              # unused here: this lesson takes exactly one step
EVAL_SIZE = None              # held-out questions scored after the loop (None: grpo_math.LOOP's "heldout")
RUN_DIR = "runs/course"       # unused here: nothing is saved
NUM_GENERATIONS = None        # completions in the group (cpu preset: {{cpu.num_generations}})
BATCH_SIZE = None             # unused here: one group is the batch
MAX_COMPLETION_LENGTH = None  # tokens per completion (cpu preset: {{cpu.max_completion_length}})
EVAL_MAX_NEW_TOKENS = None    # tokens per held-out answer (cpu preset: {{cpu.eval_max_new_tokens}})
SEED = 0                      # the sampling seed: change it to see another group
LOOP_STEPS = None             # steps of section 7's loop (None: grpo_math.LOOP's, the number measured to learn)

# %%
# {{setup cell}}

# %% [markdown]
# ## The policy: the embedded model with a LoRA adapter
#
# The CPU branch of 02: transformers' `from_pretrained` and peft's `get_peft_model`, with the cpu preset's values
# (`helpers.model.load_cpu` makes those calls). The adapter starts at zero, so the policy is the base model; only the
# adapter's parameters will move.

# %%
import torch

from helpers.model import load_cpu

p = kit.preset
model, tokenizer = load_cpu(p)
model.print_trainable_parameters()

# %% [markdown]
# ## 1. Sample one group
#
# GRPO answers one question G times (`num_generations`) and compares the answers with each other. `model.generate`
# does it in one call: `num_return_sequences=G` copies of the prompt, `do_sample=True` at the preset's temperature
# (`top_k=0`, `top_p=1.0`: plain sampling from the softmax, as TRL's defaults), at most `max_completion_length` new
# tokens. A fixed seed makes the group the same on every run.
#
# The question comes from the training set of 03, the prompt is its chat messages (system prompt, worked example,
# question) with the chat template applied.

# %%
from helpers.data import training_questions

row = training_questions(p, limit=1)[0]
print(row["prompt"][-1]["content"], "\ngold answer:", row["answer"])
prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, return_tensors="pt", return_dict=True)
G = p.num_generations


def sample_group(seed):
    """G completions of the question: token ids after the prompt, padded after their end."""
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        out = model.generate(**prompt, do_sample=True, temperature=p.temperature, top_k=0, top_p=1.0,
                             max_new_tokens=p.max_completion_length, num_return_sequences=G,
                             pad_token_id=tokenizer.pad_token_id)
    return out[:, prompt["input_ids"].shape[1]:]

# %% [markdown]
# ## 2. Score the group with your reward, and resample a group with no spread
#
# The rewards are the five of 04, with **your** correctness reward (exercise {{exercise.my_correctness_reward}}) in the
# kit's place, and the advantages of section 3 are **your** `my_advantages` (exercise {{exercise.my_advantages}}).
# A notebook does not see another notebook's variables, so the next cell brings them here the way d2l does with the
# code its readers wrote: each as 04's solution cell wrote it, printed. Paste your own from your 04 over the line to train with yours; either way 04's
# checks run on them again, and the kit's twin stands in for one that does not pass.

# %%
from helpers import rewards as kit_rewards
from helpers.teaching import grpo_math
from helpers.teaching.exercises import nb04
from helpers.teaching.exercises import nb08 as ex

my_correctness_reward = ex.earlier("my_correctness_reward")
my_advantages = ex.earlier("my_advantages")

# %%
reward_check, advantages_check = nb04.my_correctness_reward.check(my_correctness_reward), nb04.my_advantages.check(my_advantages)
print(f"{nb04.my_correctness_reward.number}:", reward_check, f"\n{nb04.my_advantages.number}:", advantages_check)
REWARDS = [my_correctness_reward if reward_check.passed else kit_rewards.correctness_reward, *kit_rewards.DEFAULT_REWARDS[1:]]
ADVANTAGES = my_advantages if advantages_check.passed else grpo_math.group_advantages
print("scoring with:", [f.__name__ for f in REWARDS], "- advantages:", ADVANTAGES.__name__)

# %% [markdown]
# Each reward is called as `GRPOTrainer` calls it: `f(prompts=..., completions=..., answer=...)`, one float per
# completion; a completion's reward is their sum. If every completion scores the same, every advantage is 0 and the
# step would teach nothing (04's "zero-spread" group): the cell samples again, with the next seed, a bounded number of
# times. Your correctness reward alone would nearly always be such a group here: the small model rarely answers right
# at first (none of 48 completions of its first 6 training questions, measured on a 2-core development machine on
# 2026-11-29), so the format rewards give the first signal.

# %%
TRIES = 10
for attempt in range(TRIES):
    completion_ids = sample_group(SEED + attempt)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    scores = {f.__name__: f(prompts=[row["prompt"]] * G, completions=texts, answer=[row["answer"]] * G)
              for f in REWARDS}
    rewards = [sum(s[i] for s in scores.values()) for i in range(G)]
    if grpo_math.group_stats(rewards)["signal"]:
        break
    print(f"seed {SEED + attempt}: every completion scored {rewards[0]:g} - no spread, no signal; sampling again")
else:
    raise RuntimeError(f"{TRIES} groups in a row had no reward spread: set SEED to another value and run again")

print(f"{'#':>2} " + " ".join(f"{name.replace('_reward', ''):>12}" for name in scores) + f" {'total':>6}  completion")
for i, text in enumerate(texts):
    print(f"{i:>2} " + " ".join(f"{s[i]:>12.3f}" for s in scores.values()) + f" {rewards[i]:>6.3f}  "
          + text.strip().replace("\n", " ")[:60])

# %% [markdown]
# ## 3. Group advantages
#
# Your `my_advantages` of 04 (TRL's default `scale_rewards="group"`): the reward minus the group's mean, divided by
# the group's standard deviation. Above the mean: pushed up; below: pushed down.

# %%
advantages = torch.tensor(ADVANTAGES(rewards), dtype=torch.float32)
print("rewards:   ", [round(r, 3) for r in rewards])
print("advantages:", [round(float(a), 3) for a in advantages])

# %% [markdown]
# ## 4. The completion mask and the old log-probabilities
#
# `generate` pads a completion that ended early: after its end-of-sequence token come pad tokens, which the loss
# must not count. The mask keeps every token up to and including the first `eos_token_id` (what TRL's
# `_generate_and_score_completions` computes).
#
# Then the log-probability of every sampled token under the policy that sampled it, `logp_old`, without gradient:
# one forward pass over prompt + completion, the logits divided by the temperature, `log_softmax`, and the entry of
# the token that was sampled (`grpo_math.completion_logps`, the computation in TRL's `_get_per_token_logps_and_entropies`:
# logits only at the completion's positions, `logits_to_keep`; on a CPU the kit's helper also runs the group's shared
# prompt once, as the kit's GRPO runs do). A completion's log-probability is the sum over its tokens.

# %%
is_eos = completion_ids == tokenizer.eos_token_id
eos_at = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), completion_ids.size(1))
mask = (torch.arange(completion_ids.size(1)) <= eos_at.unsqueeze(1)).long()
batch = {"prompt_ids": prompt["input_ids"].repeat(G, 1), "prompt_mask": prompt["attention_mask"].repeat(G, 1),
         "completion_ids": completion_ids, "completion_mask": mask}
with torch.no_grad():
    logp_old = grpo_math.completion_logps(model, batch, temperature=p.temperature)
print("tokens per completion:", mask.sum(dim=1).tolist(), f"(at most {completion_ids.size(1)})")
print("log-probability of each completion:", [round(float(x), 2) for x in (logp_old * mask).sum(dim=1)])

# %% [markdown]
# ## Exercise with a self-check
#
# **Exercise 8.1.** Write the loss TRL minimises by default (`loss_type="dapo"` in TRL 1.15), for tensors of shape
# (completions B, tokens T):
#
# 1. `ratio = exp(logps - old_logps)` per token: how much likelier the token became since it was sampled;
# 2. per token `-min(ratio x A, clip(ratio, 1 - epsilon, 1 + epsilon) x A)`, where A is the token's completion's
#    advantage (`advantages` has shape (B,)): PPO's clipped surrogate, minus it because the optimizer minimises;
# 3. the masked per-token losses summed over ALL completion tokens of the batch, divided by their count.
#
# Return a 0-dim tensor that still has its gradient: the next cell steps the optimizer with it. The check compares
# your loss, value and gradient, with TRL's own `GRPOTrainer._compute_loss` on hidden batches (ratios away from 1,
# so the clipping matters; completions of different lengths) and on this lesson's batch.

# %% tags=["solution"]
# Exercise 8.1: write policy_loss(logps, old_logps, advantages, mask, epsilon=0.2), TRL's default GRPO loss
# SOLUTION
import torch

def policy_loss(logps, old_logps, advantages, mask, epsilon=0.2):
    """The masked token-level clipped policy loss, averaged over all completion tokens of the batch."""
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    A = advantages.unsqueeze(1)
    per_token = -torch.min(ratio * A, clipped * A)
    return (per_token * mask).sum() / mask.sum().clamp(min=1)


# %%
model.train()
logps = grpo_math.completion_logps(model, batch, temperature=p.temperature)  # the policy now, with gradient
result = ex.q1.check(policy_loss, this_batch=(logps, logp_old, advantages, mask))
result

# %% [markdown]
# ## 5. One optimizer step
#
# The loss on this batch (your `policy_loss` when its check passed; otherwise the kit's
# `grpo_math.policy_loss`, so the lesson still runs to the end), `backward()`, gradient clipping at the preset's
# `max_grad_norm`, and one step of AdamW with the preset's learning rate. In 05, `GRPOTrainer` on the cpu preset
# takes {{cpu.num_iterations}} such steps on each sampled group, not one: a step's batch is
# `per_device_train_batch_size={{cpu.per_device_train_batch_size}}` completions
# (`gradient_accumulation_steps={{cpu.gradient_accumulation_steps}}`, and TRL's `steps_per_generation` left at that),
# one group of `num_generations={{cpu.num_generations}}`, and `num_iterations={{cpu.num_iterations}}` trains on each sampled group
# that many times before sampling the next, so its `max_steps={{cpu.max_steps}}` optimizer steps sample
# `max_steps / num_iterations` groups. The step here is the first of them: right now `logps` equals `logp_old` (the
# ratio is exactly 1), so the loss's gradient is the advantage's push on every token: up for the rewarded
# completions, down for the others. The next step on the same group starts from the updated policy, where the ratio is
# no longer 1 and clipping can bite: section 6 computes that loss.

# %%
from trl import GRPOConfig


epsilon = GRPOConfig.epsilon  # TRL's default clip range, 0.2
if result.passed:
    loss_fn, whose = policy_loss, "your policy_loss"
else:
    loss_fn, whose = (lambda *a, **k: grpo_math.policy_loss(*a, **k)["loss"]), "grpo_math.policy_loss (8.1 not passed yet)"
params = [q for q in model.parameters() if q.requires_grad]  # the LoRA adapter
optimizer = torch.optim.AdamW(params, lr=p.learning_rate, weight_decay=p.weight_decay)
loss = loss_fn(logps, logp_old, advantages, mask, epsilon=epsilon)
loss.backward()
torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm)
optimizer.step()
optimizer.zero_grad()
print(f"loss ({whose}): {loss.item():+.6f}; TRL's _compute_loss on the same batch: "
      f"{float(grpo_math.trl_loss(logps.detach(), logp_old, advantages, mask)):+.6f}")

# %% [markdown]
# ## 6. What the step did
#
# The log-probability of each completion again, under the updated policy. A completion with a positive advantage
# should now be likelier (its log-probability rose), one with a negative advantage less likely. The loss on the
# new log-probabilities (the ratio is no longer 1, some tokens are clipped) is compared with TRL's once more.

# %%
model.eval()
with torch.no_grad():
    logp_new = grpo_math.completion_logps(model, batch, temperature=p.temperature)
before, after = (logp_old * mask).sum(dim=1), (logp_new * mask).sum(dim=1)
print(f"{'#':>2} {'reward':>7} {'advantage':>9} {'log-prob before':>15} {'after':>8} {'change':>8}  x likelier")
for i in range(G):
    change = float(after[i] - before[i])
    print(f"{i:>2} {rewards[i]:>7.3f} {float(advantages[i]):>+9.3f} {float(before[i]):>15.2f} {float(after[i]):>8.2f} "
          f"{change:>+8.2f}  {torch.exp(torch.tensor(change)).item():.3g}")
moved = [(float(a) > 0) == (float(n - b) > 0) for a, b, n in zip(advantages, before, after) if abs(float(a)) > 1e-6]
print(f"\nevery completion with a positive advantage rose and every one with a negative advantage fell: {all(moved)}")
ours = float(loss_fn(logp_new, logp_old, advantages, mask, epsilon=epsilon))
ratio = torch.exp(logp_new - logp_old)[mask.bool()]
print(f"loss after the step ({whose}): {ours:+.6f}; TRL's _compute_loss: "
      f"{float(grpo_math.trl_loss(logp_new, logp_old, advantages, mask)):+.6f} (ratios {float(ratio.min()):.3f} to "
      f"{float(ratio.max()):.3f}, {float(((ratio < 1 - epsilon) | (ratio > 1 + epsilon)).float().mean()):.0%} of tokens outside the clip range)")

# %% [markdown]
# ## 7. The loop: GRPO that learns, or not
#
# One step made the rewarded completions likelier. Training is that step again and again, each time on a new group
# of a new question: sample, score, advantages, loss, optimizer step. A rising reward is not proof by itself: one
# group's mean is noisy, and the questions differ in difficulty. So the loop runs beside a **control**: the same
# seed and settings at learning rate 0, where nothing is learned (AdamW at lr 0 changes no weight, so the control
# only samples and scores its groups: no backward). Your loop learned when its final reward (the mean of its last
# steps) is above the control's mean by more than a control strays by chance: the margin, measured on the stored seeds.
#
# The loop's settings are `grpo_math.LOOP` (printed below). `scripts/lesson08_trl_curve.py --seeds 0,1,2` ran the
# kit's own loop and its control with them on three seeds and stored both in `results/lesson08-trl-curve.json`
# (`loop_seeds`); the control of those seeds is read from there, another `SEED`'s is run here (sampling a group took
# about 6 s on a lightly loaded 2-core development machine, measured 2026-11-29). The model is loaded again, so the loop starts from the base model with a fresh adapter.
# `sample(step)` is sections 1 and 4 as one function: a group of question `step`, as a batch with its mask, the
# decoded completions (`batch["completions"]`), the prompts and the gold answers (`batch["prompts"]`, `batch["answer"]`).

# %%
loop = {**grpo_math.LOOP, "steps": LOOP_STEPS or grpo_math.LOOP["steps"]}
model, tokenizer = load_cpu(p)  # the base model and a fresh adapter
sample = grpo_math.loop_tools(model, tokenizer, training_questions(p, limit=loop["steps"]), seed=SEED)
control, where = grpo_math.control_curve(SEED, loop["steps"], sample)  # before the loop: the model is the base one
print("the loop's settings:", loop)
print(f"the lr-0 control ({where}):", [round(c, 3) for c in control])

# %% [markdown]
# **Exercise 8.2.** Write `grpo_train(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0,
# temperature=1.0)`: for each step in `range(steps)`,
#
# 1. `batch = sample(step)`; each completion's reward is the sum over `reward_funcs` of
#    `f(prompts=batch["prompts"], completions=batch["completions"], answer=batch["answer"])` (section 2);
# 2. the advantages, `advantages_fn(rewards)` as a tensor (section 3), and the log-probabilities of the batch with
#    their gradient (section 4, at `temperature`); the group is fresh, so the old log-probabilities are these,
#    detached (the ratio is 1);
# 3. the loss (`loss_fn`: your `policy_loss` of 8.1 when it passed), then the update of section 5:
#    `optimizer.zero_grad()`, `loss.backward()`, clip the gradient to `max_grad_norm`, `optimizer.step()`.
#
# Return the mean reward of each step's group, one number per step. The check first runs your loop on tiny stand-in
# models beside the kit's, comparing every gradient and every parameter after every step (a known mistake is named),
# then, once it is right, runs it on the model above with your `REWARDS` and `ADVANTAGES` for the loop's steps (a few
# minutes): step 1's gradient is compared with TRL's `_compute_loss` on the group you sampled, and your final reward
# with the control's. A loop that does not rise above the control by the margin is refused, with the likely cause.

# %% tags=["solution"]
# Exercise 8.2: write grpo_train(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0, temperature=1.0), the GRPO loop
# SOLUTION
import torch

from helpers.teaching import grpo_math


def grpo_train(model, optimizer, sample, reward_funcs, advantages_fn, steps, max_grad_norm=1.0, temperature=1.0):
    """GRPO for `steps` steps, a new group each; returns the mean reward of each step's group."""
    params = [q for q in model.parameters() if q.requires_grad]
    curve = []
    for step in range(steps):
        batch = sample(step)  # a new group of a new question
        scores = [f(prompts=batch["prompts"], completions=batch["completions"], answer=batch["answer"])
                  for f in reward_funcs]
        rewards = [sum(s) for s in zip(*scores)]  # one per completion: the sum of the reward functions
        advantages = torch.tensor(advantages_fn(rewards), dtype=torch.float32)
        model.train()
        logps = grpo_math.completion_logps(model, batch, temperature=temperature)
        loss = loss_fn(logps, logps.detach(), advantages, batch["completion_mask"], epsilon=epsilon)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        curve.append(sum(rewards) / len(rewards))
    return curve


# %%
result = ex.q2.check(grpo_train, run=dict(model=model, sample=sample, reward_funcs=REWARDS, advantages_fn=ADVANTAGES,
                                          control=control, settings=loop))
result

# %% [markdown]
# Your curve beside the control's (only the control's until your loop passes its check). The reward is one group's
# mean, so it is noisy from step to step; what counts is where the last steps end, against the control's level.

# %%
import matplotlib.pyplot as plt

grpo_math.plot_curves(result.curve, control)  # the check's message above gives the two numbers and the margin
plt.show()

# %% [markdown]
# ## 8. What it learned, on questions it never saw
#
# The reward is measured on the training questions. The held-out split (`helpers.data.heldout_questions`, questions
# that never appear in training) says what carried over: greedy answers, scored as 06 scores them
# (`helpers.evaluation.evaluate`: the strict format rate and the accuracy), with the adapter your loop trained and
# without it (`model.disable_adapter()`: the base model, which is also what the lr-0 control is).

# %%
from helpers.data import heldout_questions
from helpers.evaluation import evaluate

if not result.curve:  # 8.2 not passed yet: the adapter holds section 5's step only, nothing of a loop to score
    print("the held-out questions are scored once your grpo_train (8.2) passes its check")
else:
    heldout = heldout_questions(p, n=EVAL_SIZE or loop["heldout"])
    after = evaluate(model, tokenizer, heldout, p)
    with model.disable_adapter():
        before = evaluate(model, tokenizer, heldout, p)
    for name, r in (("base model (the control)", before), ("after your loop", after)):
        print(f"{name:<26} format {r['format_rate']:.0%}, accuracy {r['accuracy']:.0%} ({r['n']} held-out questions)")

# %% [markdown]
# ## Recap
#
# - One GRPO step is: sample G completions of a question, score them, advantages = reward minus the group's mean over its std, a masked clipped policy loss, one optimizer step.
# - The mask keeps each completion's tokens up to its end-of-sequence token; TRL's default loss (`dapo`) averages over all those tokens of the batch.
# - The loop is that step on a new group each time; it learned when its final reward beats a learning-rate-0 control by more than the control's own noise, not when the curve merely goes up.
# - The step raised the log-probability of the completions with a positive advantage and lowered the others: that is all "learning" means here. A group with no reward spread gives no step at all.
#
# ## Exercises
#
# 1. Change `SEED` and run again: does every positive-advantage completion still rise? Which changed most, and is it the longest one?
# 2. Take the step with `lr=10 * p.learning_rate`: how many tokens end up outside the clip range, and what does the clipping then do to the next step's gradient?
# 3. Compute the loss with `grpo_math.policy_loss(logps, logp_old, advantages, mask, loss_type="grpo")["loss"]` instead: how do the changes of short and long completions compare?
