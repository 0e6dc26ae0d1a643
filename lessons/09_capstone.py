# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/09_capstone.ipynb)
#
# # 09 · Capstone: your own `train_grpo.py`
#
# 01-06 showed every call a GRPO project is made of; 05 ran them inside the kit's pipeline. Now write them yourself, in one script of about 60 lines, from a blank file to a saved LoRA adapter, without `helpers.train`, and check it the way an instructor would: the checker runs your script for 2 GRPO steps and says "Passed" or what to fix.
#
# ## Learning objectives
#
# - Write a whole GRPO run: dataset -> model + LoRA -> rewards -> `GRPOConfig` -> `GRPOTrainer` -> `train()` -> saved adapter.
# - Write reward functions with TRL's contract, with partial credit so a group's scores differ.
# - Know what "it learned" means, measured from outside your script: the adapter you saved moves the completions your run sampled the way their advantages say (above the group's mean: more likely; below: less), and your rewards score a right answer above the same completion with a wrong one.
# - Check a script from a notebook cell (`capstone.check`) or a terminal (`python -m helpers.capstone`).
#
# **Expected time on a Colab CPU runtime** (this lesson needs no GPU): 30-60 min of writing (estimate); the check is 2 GRPO steps of the embedded model (one sampled group of 8, trained on twice), then the checker's own measurement of the saved adapter: {{time.capstone_check}} measured on an idle 2-core machine (the script {{time.capstone_check_script}}, the measurement about {{time.capstone_check_measurement}}; `time python -m helpers.capstone capstone/solution/train_grpo.py`, 2026-11-29), longer on a busy one.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "09_capstone"        # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
USE_DRIVE = False             # Colab: keep the whole run folder (adapter included) on Google Drive
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder (this lesson writes no run there)
CAPSTONE_DIR = "runs/capstone"  # relative to the kit's folder: where the next cells write and check train_grpo.py
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating

# %%
# {{setup cell}}

# %% [markdown]
# ## The task
#
# One script, `train_grpo.py`, that a terminal runs as `python train_grpo.py --max-steps N --output-dir DIR`:
#
# 1. **the dataset**: a `prompt` column (chat messages) and the columns your rewards read (`answer`): 03's mapping,
#    your `gsm8k_to_row`, over `helpers.data.synthetic_problems(2000, "train")` on a CPU or
#    `helpers.data.gsm8k_records("train")` on a GPU, into `datasets.Dataset.from_list(...)`;
# 2. **the model and its LoRA adapter**: on a CPU `helpers.model.prepare_embedded_model()` is the SmolLM2-135M folder
#    for `AutoModelForCausalLM.from_pretrained`, then peft's `get_peft_model(model, LoraConfig(...))`; on a GPU
#    `FastLanguageModel.from_pretrained(..., fast_inference=True)` (vLLM samples from the weights you train) and
#    `FastLanguageModel.get_peft_model(...)` (02);
# 3. **the rewards**, your own functions with TRL's contract `f(prompts, completions, answer, **kwargs) -> list[float]`
#    (04): a correctness reward that compares answers as numbers (`1,000` is `1000`), and a format reward with partial
#    credit. A chat dataset's completion is a list of messages: its text is `completion[0]["content"]`;
# 4. **`GRPOConfig(...)`** (05): `max_steps=args.max_steps`, `logging_steps=1`, the cpu preset's stable recipe on a
#    CPU (8 completions per question, learning rate 2.5e-4, `num_iterations=2`: 05's measured runs show the earlier
#    5e-4 with one step per batch collapsing) with `use_cpu=True, bf16=False`; on a T4 the t4 preset's, `fp16=True`;
# 5. **`GRPOTrainer(model=..., processing_class=..., reward_funcs=[...], args=..., train_dataset=...)`** and
#    `trainer.train()`; on a CPU call `helpers.run.trl_patches.patch_trl_for_cpu()` first (TRL's log-prob kernel needs
#    Triton, which CPU PyTorch lacks);
# 6. **the adapter**: `model.save_pretrained(f"{args.output_dir}/adapter")`.
#
# From the kit you may import only the data (`helpers.data`, `helpers.prompts`), the model's folder (`helpers.model`)
# and the CPU patch (`helpers.run.trl_patches`, `helpers.cpu_compat`); the checker refuses the rest of `helpers/`
# (the pipeline, the kit's rewards) however it is reached (an import, `importlib`, `runpy`, `exec`, a subprocess
# running `python -m helpers.train`), naming it and what to write instead.
#
# **Where the file lives.** The exercise cell below *is* the file's source: running it writes `train_grpo.py` into
# `CAPSTONE_DIR` (`runs/capstone/` in the kit's folder, a folder of its own), replacing what was there. Edit the cell,
# not the file, or the next run of the cell overwrites your edits. The next cell says if a file is already there.

# %%
from pathlib import Path

from helpers import capstone

SCRIPT = Path(ROOT) / CAPSTONE_DIR / "train_grpo.py"
SCRIPT.parent.mkdir(parents=True, exist_ok=True)
print(f"the exercise cell writes {SCRIPT}" + (" (a file is there now: the cell replaces it)" if SCRIPT.exists() else ""))

# %% tags=["solution"]
# %%writefile {SCRIPT}
# Exercise 9.1: write train_grpo.py: dataset -> model + LoRA -> your rewards -> GRPOConfig -> GRPOTrainer -> train -> save the adapter
# SOLUTION
# {{include capstone/solution/train_grpo.py}}

# %%
# The check: runs the script for 2 GRPO steps in a temporary folder, measures the adapter it saved ({{time.capstone_check}} on an idle 2-core CPU) and says "Passed" or what to fix
capstone.check(SCRIPT)

# %% [markdown]
# ## What the check checks
#
# `capstone.check` reads the script first (fast: no model loads): it refuses a skeleton with its TODOs left, a syntax
# error, an import of the kit's pipeline, a script that never uses `GRPOTrainer`. Then it runs it as
# `python train_grpo.py --max-steps 2 --output-dir <a temporary folder>` under a small bootstrap. The bootstrap lives
# in your script's process: it stops the kit's pipeline however it is reached, counts the steps of your
# `trainer.train()`, checks that the rewards are defined in your files, and notes the completions TRL sampled and
# their rewards. Your script could write those notes itself, so they are a trip-wire, not the verdict. The verdict is
# what the checker measures in its own process once your script has ended. It passes only if:
#
# - **the adapter you saved learned**: it loads on the base model, its LoRA B matrices are no longer all zero (peft
#   starts them there), and with it the completions your run sampled move the way their advantages say: the checker
#   recomputes each group's advantages from the rewards (04's formula) and each completion's log-probability with and
#   without the adapter (08's `completion_logps`). The sum of advantage x change must be more than 10 times what the
#   same adapter gets with its LoRA B entries shuffled (a change of the same size in no direction), and completions
#   carrying at least 75% of the advantage must move its way (above their group's mean: gain; below: lose);
# - **your rewards read the answer**: the checker calls them on 04's right completions, each beside a twin whose
#   answer is changed to a wrong number. The same completion must score the same twice (random numbers are refused),
#   and the right ones must score more than their twins (a format-only reward is refused);
# - **no training question is held out**: none is from the synthetic held-out split the kit evaluates on
#   (`helpers.data.split_of`).
#
# Each refusal names the mistake and the fix: TRL's missing-Triton error becomes "call `patch_trl_for_cpu()`", a
# reward that reads a chat completion as a string gets 04's hint.
#
# The same check from a terminal in the kit's folder, or a Colab cell (the `!` runs a shell command), exits 0 when
# it passes:
#
# ```bash
# python -m helpers.capstone runs/capstone/train_grpo.py
# ```
#
# Train for real with the script's defaults (40 steps on a CPU: about 7 minutes on 2 cores), then evaluate the
# adapter with `python -m helpers.evaluate` (06):
#
# ```bash
# python runs/capstone/train_grpo.py --output-dir runs/my-grpo
# ```

# %% [markdown]
# ## Recap
#
# - A GRPO run is six pieces: dataset, model + LoRA, rewards, `GRPOConfig`, `GRPOTrainer` + `train()`, the adapter.
# - A reward that gives every completion of a group the same score teaches nothing: partial credit gives the group a spread.
# - "It learned" is measurable from outside the run: with the saved adapter, the completions that scored above their group's mean became more likely and the others less; rewards are checked on right and wrong answers of the same layout.
#
# ## Exercises
#
# 1. Add a third reward (e.g. brevity, as in 04's exercise) and check again: its name appears in the "Passed" line.
# 2. Train 40 steps with the script's defaults and compare the `reward` TRL prints on each step that samples with 05's curve.
