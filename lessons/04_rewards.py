# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/04_rewards.ipynb)
#
# # 04 · Rewards: scoring completions (and how they get gamed)
#
# GRPO samples a group of completions per question, scores each with reward functions, and pushes the model towards the ones that scored above their group's mean. The rewards are the whole specification of what "better" means - so we build them up one at a time, test them on completions we write by hand, play with them, and then try to cheat them.
#
# ## Learning objectives
#
# - Know the five rewards in `helpers.rewards`, what each pays for and its score range.
# - Test rewards on hand-written completions before trusting them in training.
# - Use the playground to see every reward react to an edit.
# - Recognise reward hacking, and the defences: correctness dominates, strict format, tag counts that punish repetition.
#
# **Expected time on a Colab CPU runtime** (this lesson needs no GPU): about 15 min (estimate, not yet measured). On a CPU with the embedded model: under a minute.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "04_rewards"         # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
USE_DRIVE = None              # None: Drive on Colab (04's reward reaches 05, 05's run reaches 06); local elsewhere
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating

# %%
# {{setup cell}}

# %%
from helpers import prompts, rewards
from helpers.teaching import reward_lab

reward_lab.print_reward_rules()

# %% [markdown]
# ## Step 1: find the answer
#
# A reward is an ordinary Python function. Every reward that cares about the answer reads the **last**
# `<answer>...</answer>` block; no block, no answer. Here it is, written out, and compared with the kit's tested
# version (`helpers.rewards.answer_of`) on a few tricky texts:

# %%
import re

def answer_from(text):
    """The stripped content of the last <answer>...</answer> block, or None."""
    blocks = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    return blocks[-1].strip() if blocks else None

for text in ["<answer>12</answer>", "<answer>7</answer> no wait <answer>12</answer>", "The answer is 12.", "<answer>12"]:
    print(f"{text!r:50} -> mine {answer_from(text)!r:6} kit {rewards.answer_of(text)!r}")

# %% [markdown]
# ## Step 2: is it correct? (2.0 points)
#
# Numbers are compared as numbers, not strings: `1,000` = `1000`, `$18` = `18`, `72.0` = `72`. An answer with two
# numbers is wrong even if one of them is right, so hedging never pays. That comparison is fiddly and is tested in
# the kit (`helpers.rewards.answers_match`, math-verify for expressions), so our reward uses it:

# %%
for pred, gold in [("12", "12"), ("1,000", "1000"), ("$18", "18"), ("72.0", "72"), ("12 apples", "12"), ("11 or 12", "12"), ("3/4", "0.75")]:
    print(f"answers_match({pred!r:12}, {gold!r:7}) -> {rewards.answers_match(pred, gold)}")

# %% [markdown]
# ## Step 3: write the rewards
#
# TRL calls every reward function the same way: `f(prompts=..., completions=..., **columns) -> list[float]`, one
# score per completion. The dataset's other columns arrive as keyword arguments, so the gold answers come in as
# `answer=[...]` (one per completion). A completion is a string, or a list of chat messages on chat datasets:
# `helpers.rewards.completion_text` gives the text either way.

# %%
from helpers.rewards import answers_match, completion_text
from helpers.teaching.exercises import nb04 as ex  # this lesson's self-checking exercises

TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
STRICT = re.compile(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", re.DOTALL)
SOFT = re.compile(r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>", re.DOTALL)


def my_integer_reward(prompts=None, completions=None, **kwargs):
    """0.5 when the answer is a plain integer: the model should not write units or words there."""
    answers = [answer_from(completion_text(c)) for c in completions]
    return [0.5 if a is not None and re.fullmatch(r"-?[0-9]+", a) else 0.0 for a in answers]


def my_soft_format_reward(prompts=None, completions=None, **kwargs):
    """0.5 when a reasoning block is followed by an answer block, whatever the layout."""
    return [0.5 if SOFT.search(completion_text(c)) else 0.0 for c in completions]


def my_tag_count_reward(prompts=None, completions=None, **kwargs):
    """0.125 per tag that appears exactly once, minus 0.001 per character after the last </answer> (at most 0.5)."""
    scores = []
    for text in map(completion_text, completions):
        score = sum(0.125 for tag in TAGS if text.count(tag) == 1)
        if "</answer>" in text:
            score -= min(0.5, 0.001 * len(text[text.rfind("</answer>") + len("</answer>"):].strip()))
        scores.append(score)
    return scores

# %% [markdown]
# Three of the five are written above. The two that matter most are yours to write.
#
# **Exercise 4.1.** The correctness reward: **2.0** when the completion's last `<answer>` block equals the gold answer
# as a number (`answer_from` above, then `answers_match`), else **0.0**. Each exercise has a check cell after it:
# it runs your function on hidden cases and says which case failed and why, here as a table of the completions where
# your reward and the kit's `helpers.rewards.correctness_reward` differ (commas, `$`, `18.0`, hedges, several answer
# blocks, chat-format completions, empty and `None` ones). Stuck? `ex.q1.hint()`; still stuck, `ex.q1.solution()`.

# %% tags=["solution"]
# Exercise 4.1: write my_correctness_reward(prompts, completions, answer, **kwargs): 2.0 when the answer is right
# SOLUTION
def my_correctness_reward(prompts=None, completions=None, answer=None, **kwargs):
    """2.0 when the last answer block equals the gold answer as a number."""
    scores = []
    for completion, gold in zip(completions, answer):  # TRL passes the dataset's answer column, one per completion
        pred = answer_from(completion_text(completion))  # blank: the text of the last <answer> block, or None
        score = 2.0 if pred is not None and answers_match(pred, gold) else 0.0  # blank: 2.0 if it matches, else 0.0
        scores.append(score)
    return scores


# %%
correctness_check = ex.q1.check(my_correctness_reward)
correctness_check

# %% [markdown]
# **Exercise 4.2.** The strict-format reward: **0.5** for exactly the worked example's layout, each tag once and each
# on its own line (`STRICT` above), surrounding whitespace ignored; else **0.0**. The check compares it with the
# kit's `helpers.rewards.strict_format_reward` the same way.

# %% tags=["solution"]
# Exercise 4.2: write my_strict_format_reward(prompts, completions, **kwargs): 0.5 for the exact layout
# SOLUTION
def my_strict_format_reward(prompts=None, completions=None, **kwargs):
    """0.5 for exactly the layout of the worked example, each tag once, each on its own line."""
    scores = []
    for completion in completions:
        text = completion_text(completion).strip()  # blank: the completion's text, surrounding whitespace removed
        each_once = all(text.count(tag) == 1 for tag in TAGS)  # blank: every tag of TAGS appears exactly once
        layout = STRICT.fullmatch(text) is not None  # blank: STRICT matches the whole text
        scores.append(0.5 if each_once and layout else 0.0)
    return scores


# %%
strict_check = ex.q2.check(my_strict_format_reward)
# Yours where its check passed; the kit's in its place until then, so the tables below always run.
MY_REWARDS = [my_correctness_reward if correctness_check.passed else rewards.correctness_reward, my_integer_reward,
              my_strict_format_reward if strict_check.passed else rewards.strict_format_reward, my_soft_format_reward,
              my_tag_count_reward]
print("scored below with:", [f"{f.__name__} ({'yours' if f.__module__ != rewards.__name__ else 'the kit'})"
                             for f in MY_REWARDS])
strict_check

# %% [markdown]
# Try them on completions written by hand (gold answer 12), then check them against the kit's rewards, which are
# the tested reference (`tests/test_rewards.py`) and what training uses unless you say otherwise:

# %%
labels, texts = list(reward_lab.HAND_WRITTEN), list(reward_lab.HAND_WRITTEN.values())
for fn in MY_REWARDS:
    scores = fn(prompts=None, completions=texts, answer=[reward_lab.GOLD] * len(texts))
    print(f"{fn.__name__}:  " + ", ".join(f"{label}={score:g}" for label, score in zip(labels, scores)))

# %%
from helpers.teaching import course

tricky = {**reward_lab.HAND_WRITTEN, **reward_lab.HACKS}
differences = course.compare_rewards(zip(MY_REWARDS, rewards.DEFAULT_REWARDS), tricky, answer=reward_lab.GOLD)

# %% [markdown]
# ## Step 4: all five together
#
# This is the table GRPO effectively sees for a group of completions: the total is the reward; the differences
# between rows are the learning signal.

# %%
for label, text in reward_lab.HAND_WRITTEN.items():
    print(f"--- {label} ---\n{text[:160]}")

# %%
scores = reward_lab.score_table(reward_lab.HAND_WRITTEN)
reward_lab.print_table(scores)

# %% [markdown]
# ## Playground
#
# Edit the completion (or the gold answer) and watch every reward update. Try: remove the newline after
# `<reasoning>`; write `12.0`; add text after `</answer>`; duplicate the `<answer>` block.
# (The widget needs a live kernel; in a saved copy of the notebook you only see its first state.)

# %%
pg = reward_lab.playground(prompts.format_completion("3 bags times 4 apples is 3 * 4 = 12.", "12"), answer="12")
pg

# %%
print(pg.scores)  # the latest scores, updated on every edit

# %% [markdown]
# ## Reward hacking
#
# A policy optimised against a reward finds the cheapest way to score, not the way you meant. Below, four
# completions try to cheat (junk inside perfect tags, repeated tags, a hedged answer, a dump of numbers), next to two
# honest ones. First scored by two **naive** rewards of the kind people write first (the gold number appears
# anywhere -> 2.0; 0.125 per tag occurrence), then by the kit's five.

# %%
demo = reward_lab.hacking_demo()
print("NAIVE rewards (substring match + uncapped tag count):")
reward_lab.print_table(demo["naive"])
print("\nThe kit's rewards:")
reward_lab.print_table(demo["kit"])

# %% [markdown]
# What to read in the tables (the cell below prints the numbers it rests on):
#
# - Under the naive rewards **repeated tags score highest**, above an honest answer, and the hedge and the number
#   dump tie with the honest answer: GRPO would teach the model to spam tags and list numbers.
# - Under the kit's rewards every honest formatted answer beats every hack. The defences: **correctness dominates**
#   (2.0, more than the three format rewards' 1.5 together; the integer reward's 0.5 is not a format reward, and
#   with it the rest reach 2.0, a tie), so junk in perfect tags (at most 2.0) loses to any correct formatted answer;
#   **one number only**, so hedges and dumps are wrong; the **strict format** wants each tag exactly once in one
#   layout; the **tag count** pays only for tags that appear once, and text after `</answer>` costs points.
# - Not every hack is gone: junk in perfect tags still beats a correct answer *without* tags. In a group where
#   nobody is correct, format points are the only signal, which is how the model learns the format at all - and
#   why correctness has to outweigh them. Watch `rewards/correctness_reward/mean` in 05, not just the total.

# %%
naive_scores, kit_scores = demo["naive"], demo["kit"]
print(f"naive: repeated tags {naive_scores['repeated tags']['total']:g} vs honest, formatted "
      f"{naive_scores['honest, formatted']['total']:g}; hedge {naive_scores['hedged answer']['total']:g}, "
      f"number dump {naive_scores['number dump']['total']:g}")
perfect = rewards.score_completion(reward_lab.HAND_WRITTEN["perfect"], "12")
format_points = sum(perfect[k] for k in ("strict_format_reward", "soft_format_reward", "tag_count_reward"))
print(f"kit: correctness pays {rewards.CORRECT_SCORE:g}, the three format rewards together {format_points:g}")
best_hack = max(kit_scores[k]["total"] for k in reward_lab.HACKS)
print(f"best hack under the kit's rewards: {best_hack}, honest formatted: {kit_scores['honest, formatted']['total']}, "
      f"honest without tags: {kit_scores['honest, no format']['total']:g}")
assert kit_scores["honest, formatted"]["total"] > best_hack

# %% [markdown]
# ## What the rewards do not check: the reasoning
#
# The five rewards read the answer and the layout. Nothing reads the reasoning: `<answer>12</answer>` alone scores
# 2.75 of 4, and junk inside perfect tags with the right answer scores the full 4.0. GRPO teaches what the rewards
# pay for, so nothing here keeps the reasoning block from turning into filler; correctness pays for reasoning only
# indirectly (a model that works the sum out is right more often). One piece of reasoning can be checked:
# `helpers.rewards.shown_work_reward` pays 0.5 when the reasoning holds a calculation that is right and ends at the
# answer (`3 * 4 = 12`). It narrows the gap; it does not close it (`0 + 12 = 12` passes). It is not among the five
# defaults (the kit's measured runs train without it); to train with it, add it to `reward_funcs` in 05.

# %%
no_reasoning = {"answer tag only": reward_lab.HAND_WRITTEN["answer tag only"],
                "junk in perfect tags": "<reasoning>\nblah blah\n</reasoning>\n<answer>\n12\n</answer>",
                "perfect": reward_lab.HAND_WRITTEN["perfect"],
                "a gamed calculation": "<reasoning>\n0 + 12 = 12\n</reasoning>\n<answer>\n12\n</answer>"}
with_fix = reward_lab.score_table(no_reasoning, rewards=[*rewards.DEFAULT_REWARDS, rewards.shown_work_reward])
reward_lab.print_table(with_fix)
print(f"\nthe five rewards: answer tag only {with_fix['answer tag only']['total'] - with_fix['answer tag only']['shown_work_reward']:g}"
      f" of 4, junk in perfect tags {with_fix['junk in perfect tags']['total'] - with_fix['junk in perfect tags']['shown_work_reward']:g} of 4")

# %% [markdown]
# ## GRPO in plain words: from rewards to advantages
#
# GRPO never asks "is this answer good?" in absolute terms. For each question it samples a **group** of
# completions (`num_generations`), scores each with the rewards above, and asks "was this answer better or worse
# than its siblings?":
#
# 1. **Rewards**: the total of the five rewards for each completion of the group.
# 2. **Advantage** of completion *i*: `(reward_i - group mean) / (group std + 0.0001)`, with the *sample* standard
#    deviation (n - 1), exactly as TRL 1.15 computes it (`scale_rewards="group"`, its default;
#    `helpers.teaching.grpo_math.group_advantages`).
# 3. **Update**: every token of completion *i* gets advantage *i*. Positive: the model makes those tokens more
#    likely next time; negative: less likely; zero: no change.
#
# So if all completions score the same, every advantage is 0 and the step teaches nothing - the "zero-spread"
# groups you will watch in 05. And because the advantages of a group add up to zero, the loss TRL prints starts
# near 0 (see `helpers.teaching.grpo_math.first_step_loss` and the instructor guide): the signal is in the gradient, not in
# the loss value.
#
# A worked example: four completions of the apples question (gold answer 12), scored in the cell by the kit's
# rewards (`helpers.teaching.grpo_math.example_group`).

# %%
from helpers.teaching import grpo_math

group = grpo_math.example_group()  # {completion: total reward from the kit's five rewards}
rows = grpo_math.explain_group(list(group), list(group.values()))
print(grpo_math.format_table(rows))
stats = grpo_math.group_stats(list(group.values()))
print(f"\ngroup mean {stats['mean']:.2f}, sample std {stats['std']:.3f}; advantages sum to {sum(r['advantage'] for r in rows):+.4f}")
for row in rows:
    side = "above" if row["reward"] > stats["mean"] else "below" if row["reward"] < stats["mean"] else "at"
    print(f"{row['completion'][-20:]:>20}: reward {row['reward']:g} is {side} the group mean -> tokens {row['tokens']}")
lengths = [12, 9, 12, 7]  # tokens per completion (made up for the example)
print(f"loss value at the first step (TRL's default loss_type 'dapo'): {grpo_math.first_step_loss([r['advantage'] for r in rows], lengths):+.4f}")

# %% [markdown]
# Read the table: the only correct, formatted answer is pushed up hardest; the wrong but formatted answer is
# still *above* the group mean (the lines under the table say so), so it is pushed up a little - the format is being
# learned - while the two untagged answers are pushed down. Neither tagged answer gets the strict-format points:
# they are written on one line. Now move the sliders (one per completion) and watch the advantages:
# make all four rewards equal; make one answer much better than the rest; raise every reward by the same amount
# (nothing changes: only differences count).

# %%
widget = grpo_math.advantage_widget()
widget

# %%
# The same computation without the widget (what the sliders call): all equal -> no signal.
print(grpo_math.format_table(widget.set_rewards([2.0, 2.0, 2.0, 2.0])))
print(grpo_math.format_table(widget.set_rewards([4.0, 0.0, 2.0, 0.0])))

# %% [markdown]
# **Exercise 4.3 (predict, then run).** Take the group above, rewards `[4.0, 0.0, 2.0, 0.0]`, and add 1 to every
# reward. What happens to the advantages, and so to the update? Answer with one letter, then run the cell after it:
#
# - **a**: every advantage rises by 1: every completion is pushed up a little more
# - **b**: every advantage rises by 1 / (the group's std): the same, scaled
# - **c**: nothing changes
# - **d**: the advantages shrink, because the mean grew

# %% tags=["solution"]
# Exercise 4.3: predict what adding 1 to every reward of a group does to its advantages: "a", "b", "c" or "d"
# SOLUTION
prediction = "c"

# %%
result = ex.q3.check(prediction)
before, after = grpo_math.group_advantages([4.0, 0.0, 2.0, 0.0]), grpo_math.group_advantages([5.0, 1.0, 3.0, 1.0])
print("advantages of [4, 0, 2, 0]:", [round(a, 3) for a in before])
print("advantages of [5, 1, 3, 1]:", [round(a, 3) for a in after])
result

# %% [markdown]
# ## More exercises with self-checks
#
# **Exercise 4.4.** Long rambling answers cost generation time and memory. Write a reward
# `brevity_reward(prompts, completions, **kwargs)` with TRL's contract that gives **0.5** to a completion of at most
# **100 words** (split on whitespace) and **0.0** to a longer one. Completions may be plain strings or chat
# messages (`helpers.rewards.completion_text` handles both). Once it passes its check, the check cell saves it
# to `RUN_DIR/my_rewards.py`, and **05 trains with it** next to the kit's five rewards: look for
# `rewards/brevity_reward/mean` in 05's training logs. On Colab, 05 runs in another runtime (the T4 lab): with
# `USE_DRIVE = None` (the default here and in 05) and the same `RUN_DIR`, the file is on your Google Drive and 05
# finds it there. Without Drive (`USE_DRIVE = False`, or Drive blocked) the check cell downloads `my_rewards.py` to
# your computer, and 05 asks you to choose it.

# %% tags=["solution"]
# Exercise 4.4: write brevity_reward(prompts, completions, **kwargs): 0.5 for at most 100 words, 0.0 above
# SOLUTION
from helpers.rewards import completion_text

def brevity_reward(prompts=None, completions=None, **kwargs):
    return [0.5 if len(completion_text(c).split()) <= 100 else 0.0 for c in completions]


# %%
result = ex.q4.check(brevity_reward)
print(result)
if result.passed:  # train with it: 05 adds the rewards saved in RUN_DIR/my_rewards.py to the kit's five
    reward_lab.print_table(reward_lab.score_table(reward_lab.HAND_WRITTEN, rewards=[brevity_reward]))
    course.save_rewards([brevity_reward], kit.run_dir)

# %% [markdown]
# **Exercise 4.5.** Without `helpers.teaching.grpo_math`: write `my_advantages(rewards)` for one group, as TRL computes it.

# %% tags=["solution"]
# Exercise 4.5: write my_advantages(rewards) returning GRPO's advantage for each completion of one group
# SOLUTION
import math

def my_advantages(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


# %%
result = ex.q5.check(my_advantages)
if result.passed:
    print([round(a, 3) for a in my_advantages([4.0, 0.0, 2.0, 0.0])])
result

# %% [markdown]
# ## Recap
#
# - A reward is a function from completions to floats; test it on completions you write by hand before training with it.
# - Correctness (2.0) outweighs the three format rewards together (strict 0.5 + soft 0.5 + tag count at most 0.5 = 1.5), but only ties them once the integer reward (0.5, paid for any integer, right or wrong) is added: 2.0. So in the strict layout, where both get the full 1.5, a wrong answer never beats a right one: the right one leads by at least 1.5.
# - Naive rewards are gamed quickly (tag spam, hedging, number dumps); exact rules and caps are the defence.
#
# ## Exercises
#
# 1. In the playground, find the highest-scoring completion whose answer is wrong. Which rewards pay for it?
# 2. Write a reward `length_penalty(prompts, completions, **kw)` that subtracts 0.001 per character over 300 and score `reward_lab.HAND_WRITTEN` with it via `reward_lab.score_table(..., rewards=[length_penalty])`.
# 3. Invent a new hack against the kit's rewards and add it to the table with `reward_lab.score_table({...})`. Does it beat `honest, formatted`?
