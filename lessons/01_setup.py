# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/01_setup.ipynb)
#
# # 01 · Setup and runtime check
#
# Before any model is loaded we find out what machine this is and whether it can run the course. Every later notebook starts with the same setup cell, so what you learn here applies everywhere.
#
# ## Learning objectives
#
# - Know the three places the kit runs: Colab (installs the pinned stack), a local GPU, a CPU (embedded model).
# - Read the runtime report: GPU, compute capability, free memory, precision, backend.
# - See the guards that stop a run *before* it fails: no GPU on Colab, bf16 on a T4, too little free memory.
# - Know which preset you get automatically and how to pick another.
#
# **Expected time on a free Colab T4:** about 5-8 min (most of it the one-time install) (estimate, not yet measured). On a CPU with the embedded model: under a minute.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating

# %%
# Setup - the same cell in every notebook. Colab: clone the kit and install its pinned stack once (if the session
# must restart, it says so: then run the notebook again from the top). Local GPU or CPU: this checkout, no installs.
import os, subprocess, sys
from pathlib import Path
if any(k.startswith("COLAB_") for k in os.environ) and not Path("/content/grpo-course-kit").exists():
    subprocess.run(["git", "clone", "-q", "https://github.com/grpo-course-kit/grpo-course-kit", "/content/grpo-course-kit"], check=True)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents, Path("/content/grpo-course-kit")] if (p / "helpers" / "__init__.py").exists())
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from helpers import notebook_setup as setup
setup.install_if_colab(ROOT)
kit = setup.prepare(PRESET, run_dir=RUN_DIR, max_steps=MAX_STEPS, eval_size=EVAL_SIZE, num_generations=NUM_GENERATIONS,
                    per_device_train_batch_size=BATCH_SIZE, max_completion_length=MAX_COMPLETION_LENGTH,
                    eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)

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
from helpers import course
report = course.environment_report(kit)

# %% [markdown]
# ## The guards
#
# `helpers.runtime.check` turns the usual first-hour failures into a sentence with the fix. Below it is run on
# machines we are *not* on (`helpers.runtime.fake_runtime`), so you can read every message whatever you run on.
# A T4 has compute capability 7.5: no bf16, so training uses fp16 (`helpers.training.precision_flags`).

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
from helpers.exercises import nb01 as ex


# %% [markdown]
# **Exercise 1.1.** The guard above refused bf16 on a T4. Write `precision_for(compute_capability)` that returns
# `"bf16"` or `"fp16"` for a GPU's compute capability given as `(major, minor)`, e.g. `(7, 5)` for a T4.

# %% tags=["solution"]
# Exercise 1.1: write precision_for(compute_capability) returning 'bf16' or 'fp16' for a GPU
# SOLUTION
def precision_for(compute_capability):
    return "bf16" if tuple(compute_capability) >= (8, 0) else "fp16"


# %%
result = ex.q1.check(precision_for)
if result.passed:
    print("T4:", precision_for((7, 5)), "| A100:", precision_for((8, 0)))
result

# %% [markdown]
# ## Recap
#
# - One setup cell, three places: Colab installs the pinned stack once (then restarts), a local GPU or CPU uses the checkout as is.
# - The guards run before anything loads; a missing GPU, bf16 on a T4 or too little free memory are reported with the fix.
# - The preset (`cpu` or `t4`) is chosen automatically and validated; every notebook uses the same one.
#
# ## Exercises
#
# 1. Set `PRESET = "t4"` on a machine without a GPU and run the setup cell again. Which guard stops you, and what does it tell you to do?
# 2. In `course.show_guards()` output, find the free memory the T4 guard asks for. Where does that number come from (hint: `helpers.notebook_setup.need_free_gb`)?
# 3. Change `MAX_STEPS = 5` and rerun the setup cell: where does the override show up?
