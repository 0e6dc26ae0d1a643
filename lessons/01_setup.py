# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/01_setup.ipynb)
#
# # 01 · What GRPO is, and the setup
#
# This course teaches a language model to reason through a math word problem with reinforcement learning: GRPO, the algorithm behind DeepSeek-R1. This first notebook says what RL for reasoning is, what GRPO changes from PPO and what we will build; then it checks the machine: every later notebook starts with the same setup cell, so what you learn here applies everywhere.
#
# ## Learning objectives
#
# - Say what RL with verifiable rewards does, and what GRPO changes from PPO: no value model, group-relative advantages.
# - Know the DeepSeek-R1 recipe this course scales down, and the course's own recipe (from the presets).
# - Know the three places the kit runs: Colab (installs the pinned stack), a local GPU, a CPU (embedded model).
# - Read the runtime report: GPU, compute capability, free memory, precision, backend.
# - See the guards that stop a run *before* it fails: no GPU on Colab, bf16 on a T4, too little free memory.
# - Know which preset you get automatically and how to pick another.
#
# **Expected time on a Colab CPU runtime** (this lesson needs no GPU): the one-time install of the CPU stack plus a few minutes of reading and running (estimate, not yet measured). On a CPU with the embedded model: under a minute.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "01_setup"           # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
USE_DRIVE = False             # Colab: keep the whole run folder (adapter included) on Google Drive
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating

# %%
# {{setup cell}}

# %% [markdown]
# ## RL for reasoning, in one page
#
# **The setting.** A model reads a question and writes an answer. A program checks the answer: the number after
# `<answer>` equals the known one, the answer follows the requested format. That check is the **reward**, and it is
# *verifiable*: no human grades the reasoning and no learned reward model can be fooled, only the final answer is
# checked. Reinforcement learning then makes the answers that scored well more likely. Nobody shows the model how
# to reason; it is only told, after the fact, whether it got there.
#
# **PPO**, the algorithm of RLHF, samples one answer per question and needs a *baseline* to tell a good answer from
# a lucky one: a **value model** (a second network about as large as the policy) learns to predict the expected
# reward, and the advantage of an answer is its reward minus that prediction. Policy, value model, reward model and
# a frozen reference model: four networks in memory.
#
# **GRPO** (Group Relative Policy Optimization, from DeepSeekMath, 2024) drops the value model. It samples a
# **group** of answers to the same question and uses the group itself as the baseline: an answer's advantage is
# its reward minus the group's mean, divided by the group's standard deviation. Better than its siblings: pushed
# up; worse: pushed down; all equal: nothing to learn. It keeps PPO's clipped probability ratio (a step cannot move
# a token's probability too far) and, optionally, a KL penalty that holds the policy near a reference model
# (`beta`; TRL's default is 0, no reference model at all). With a rule-based reward, GRPO needs one trainable
# network.
#
# **DeepSeek-R1** (2025) made the recipe famous. R1-Zero ran GRPO directly on a base model with two rule-based
# rewards, answer accuracy and a format that puts the thinking between tags, and the model's reasoning grew longer
# and started to check itself without being shown how. R1 itself added a small supervised "cold start", then the
# same reasoning RL, then more supervised data sampled from the RL model and a final RL stage.
#
# **What we build** is that loop at the size of a free GPU: a small instruct model, grade-school math questions, the
# `<reasoning>...</reasoning><answer>...</answer>` format, five verifiable rewards, GRPO with LoRA. 02 loads the
# model, 03 the data, 04 writes the rewards and the advantages, 05 configures and runs TRL's `GRPOTrainer` and
# takes one policy update apart, 06 measures before and after and saves the adapter; the capstone
# (`capstone/README.md`) is your own `train_grpo.py`. The recipes, straight from the presets:

# %%
from helpers.config import PRESETS

for name in ("cpu", "t4"):
    p = PRESETS[name]
    print(f"{name:>4}: {p.model_name}\n      {p.dataset} questions, groups of {p.num_generations} completions of up to "
          f"{p.max_completion_length} tokens, {p.max_steps} GRPO steps, LoRA rank {p.lora_rank}, beta {p.beta}")

# %% [markdown]
# ## What the setup cell did
#
# 1. **Found the kit.** On Colab it cloned the repository into `/content/grpo-course-kit`; elsewhere it used the
#    checkout this notebook lives in. Then it made `helpers` importable.
# 2. **Installed (Colab only).** `helpers.notebook_setup.install_if_colab` installs `requirements.txt` once. That
#    replaces Colab's torch, so the session restarts; the second run skips the install. Locally nothing is installed.
# 3. **Guarded the runtime.** `helpers.notebook_setup.prepare` detected the machine (`helpers.runtime.detect`),
#    picked the preset (`t4` with a GPU, `cpu` without), validated it and ran `helpers.runtime.check`.
#
# Here is what is installed and what the preset needs:

# %%
from helpers.teaching import course
report = course.environment_report(kit)

# %% [markdown]
# ## The guards
#
# `helpers.runtime.check` turns the usual first-hour failures into a sentence with the fix. Below it is run on
# machines we are *not* on (`helpers.runtime.fake_runtime`), so you can read every message whatever you run on.
# A T4 has compute capability 7.5: no bf16, so training uses fp16 (`helpers.config.precision_flags`).

# %%
course.show_guards()

# %% [markdown]
# ## The preset
#
# A preset holds every number a run depends on. `PRESET = None` picked one for this machine; set `PRESET = "cpu"`
# to run the CPU demo anywhere (it is also what CI runs).

# %%
course.print_preset(kit.preset)

# %% [markdown]
# ## Exercises with self-checks
#
# Each exercise has a cell for your answer and a check cell: `ex.qN.check(...)` runs hidden test cases and tells
# you which case failed and why. Stuck? `ex.qN.hint()`; still stuck, `ex.qN.solution()`.

# %%
from helpers.teaching.exercises import nb01 as ex


# %% [markdown]
# **Exercise 1.1.** The group does the value model's job. Take the simplest reward: 1 for a right answer, 0 for a
# wrong one. In a group of `group_size` completions of one question, `n_right` are right. Write
# `right_wrong_advantages(n_right, group_size)` returning the pair (advantage of a right answer, advantage of a wrong
# answer): reward minus the group's mean, divided by the group's standard deviation. TRL uses the *sample* standard
# deviation (divide the squared deviations by `group_size - 1`) and adds `1e-4` to it; when every completion scored
# the same, every advantage is 0. The check compares your pairs with the kit's `helpers.teaching.grpo_math.group_advantages`
# (the computation in TRL's `GRPOTrainer`), then prints them for this preset's group size.

# %% tags=["solution"]
# Exercise 1.1: write right_wrong_advantages(n_right, group_size): the advantages of a right and of a wrong answer
# SOLUTION
import math

def right_wrong_advantages(n_right, group_size):
    if n_right in (0, group_size):
        return 0.0, 0.0  # all equal: nothing to compare, nothing to learn
    mean = n_right / group_size
    squares = n_right * (1 - mean) ** 2 + (group_size - n_right) * mean ** 2
    std = math.sqrt(squares / (group_size - 1))
    return (1 - mean) / (std + 1e-4), (0 - mean) / (std + 1e-4)


# %%
result = ex.q1.check(right_wrong_advantages)
if result.passed:
    G = kit.preset.num_generations
    print(f"groups of {G} (this preset's num_generations), reward 1 = right, 0 = wrong:")
    for n_right in range(G + 1):
        right, wrong = right_wrong_advantages(n_right, G)
        print(f"  {n_right} of {G} right (the group's mean, GRPO's baseline: {n_right / G:.2f}): "
              f"a right answer {right:+.2f}, a wrong one {wrong:+.2f}")
result

# %% [markdown]
# Read the table as a value model would. A question the model rarely solves (1 right of G) has a low baseline, so
# its one right answer gets the biggest push up; on a question it nearly always solves, the rare wrong answer gets
# the biggest push down. PPO needs a second network to learn that baseline for every question; GRPO reads it off
# the group's own mean, at the price of sampling G answers per question. And when all G answers agree (first and
# last rows), there is nothing to compare: that group teaches nothing (05 measures how often that happens).

# %% [markdown]
# ## Recap
#
# - GRPO's baseline is the group's own mean: a right answer to a hard question is pushed up hard, a wrong answer to an easy one pushed down hard, and a group whose answers all agree teaches nothing - no value model needed.
# - One setup cell, three places: Colab installs the pinned stack once (then restarts), a local GPU or CPU uses the checkout as is.
# - The guards run before anything loads; a missing GPU, bf16 on a T4 or too little free memory are reported with the fix.
# - The preset (`cpu` or `t4`) is chosen automatically and validated; every notebook uses the same one.
#
# ## Exercises
#
# 1. Set `PRESET = "t4"` on a machine without a GPU and run the setup cell again. Which guard stops you, and what does it tell you to do?
# 2. In `course.show_guards()` output, find the free memory the T4 guard asks for. Where does that number come from (hint: `helpers.run.guard.need_free_gb`)?
# 3. Change `MAX_STEPS = 5` and rerun the setup cell: where does the override show up?
