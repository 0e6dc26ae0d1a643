# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/07_memory_lab.ipynb)
#
# # 07 · Where GPU memory goes: predicted from the architecture, and the OOM doctor
#
# GRPO runs a generation engine and a trainer on the same card. Before you press *train* you can predict, from the
# model's architecture and a handful of settings, whether a run fits — and when it does not, which setting to change.
#
# **Learning objectives**
# - Name the parts of GRPO's memory: weights, LoRA, optimizer states, gradients, activations, logits, the vLLM
#   reservation (with its KV cache), the reference model, the CUDA context.
# - Predict how `num_generations`, `max_completion_length` and the LoRA rank move the peak, and why the vocabulary
#   size and `gpu_memory_utilization` matter more than the model's size on a T4.
# - Turn an out-of-memory error into an ordered list of fixes with the OOM doctor.
#
# **Expected time on a Colab CPU runtime** (this lesson needs no GPU): about 10 minutes (estimate, not yet measured). `RUN_BENCHMARK = True` adds a
# few. On a CPU: under a minute. Formulas, sources and the GPU measurements: `docs/memory.md`.

# %% tags=["parameters"]
# Parameters (papermill can override these). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "07_memory_lab"      # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
USE_DRIVE = False             # Colab: keep the whole run folder (adapter included) on Google Drive
RUN_DIR = "runs/course"       # relative to the kit's folder (this lab writes nothing there)
MAX_STEPS = None              # (read by the shared setup cell; this lab trains nothing)
EVAL_SIZE = None
NUM_GENERATIONS = None
BATCH_SIZE = None
MAX_COMPLETION_LENGTH = None
EVAL_MAX_NEW_TOKENS = None
GPU = "t4"                 # t4, l4, a10g, a100-40, a100-80, h100
BUDGET_GB = 7.0            # the kit's budget on a free Colab T4
GENERATIONS = [2, 4, 6, 8]
COMPLETION_LENGTHS = [128, 256, 512, 1024]
LORA_RANKS = [8, 16, 64]
RUN_BENCHMARK = False      # on a GPU: also measure the t4 recipe here (the lab's lab/benchmark_memory.py kit, a few minutes)

# %%
# {{setup cell}}

# %%
import matplotlib.pyplot as plt
from helpers.memory import GPUS, MemorySettings, estimate, plot_breakdown
from helpers.memory.oom_doctor import cheapest_fixes, explain_oom
from helpers.config import get_preset
T4_GB = GPUS["t4"]

# %% [markdown]
# ## 1. The kit's T4 preset, component by component
#
# `estimate()` takes a preset (or `MemorySettings`) and returns every part in GB (GiB, as PyTorch reports them; a
# T4 shows 14.56). With `fast_inference=True` vLLM reserves `gpu_memory_utilization` x the memory free at load up
# front (Unsloth multiplies the fraction by what is free, about 14.2 GB of a T4's 14.56) and the weights live *inside*
# that reservation, shared with the trainer.

# %%
t4 = get_preset("t4")
est = estimate(t4, gpu=GPU, budget_gb=BUDGET_GB)
print(est.table())

# %%
fig = plot_breakdown([est, estimate(t4, gpu=GPU, budget_gb=BUDGET_GB, gpu_memory_utilization=0.6),
                      estimate(t4, gpu=GPU, budget_gb=BUDGET_GB, chunked_logits=False, per_device_train_batch_size=12,
                               num_generations=12)],
                     budget_gb=BUDGET_GB, gpu_total_gb=T4_GB,
                     labels=["t4 preset", "utilization 0.6", "12 generations,\nunchunked logits"])
plt.show()

# %% [markdown]
# ## 2. Sweep: generations x completion length x LoRA rank
#
# Each panel is one LoRA rank; each line one `num_generations` (the batch holds one prompt's group, so the batch
# grows with it). Dashed green: the 7 GB budget; dotted red: the whole T4.

# %%
# SWEEP PLOT
sweep = {}
fig, axes = plt.subplots(1, len(LORA_RANKS), figsize=(4.2 * len(LORA_RANKS), 3.8), sharey=True)
for ax, rank in zip(axes, LORA_RANKS):
    for g in GENERATIONS:
        peaks = []
        for c in COMPLETION_LENGTHS:
            e = estimate(t4, gpu=GPU, budget_gb=BUDGET_GB, num_generations=g, per_device_train_batch_size=g,
                         max_completion_length=c, lora_rank=rank)
            peaks.append(e.peak_gb)
            sweep[(rank, g, c)] = e.peak_gb
        ax.plot(COMPLETION_LENGTHS, peaks, marker="o", label=f"G={g}")
    ax.axhline(BUDGET_GB, color="green", linestyle="--")
    ax.axhline(T4_GB, color="red", linestyle=":")
    ax.set_title(f"LoRA rank {rank}")
    ax.set_xlabel("max_completion_length")
axes[0].set_ylabel("predicted peak (GB)")
axes[-1].legend(fontsize=8)
fig.suptitle(f"{t4.model_name.split('/')[-1]}, 4-bit, vLLM at {t4.gpu_memory_utilization} on a {GPU}")
fig.tight_layout()
sweep_fig = fig
plt.show()
fits = sum(v <= BUDGET_GB for v in sweep.values())
print(f"{fits} of {len(sweep)} combinations fit {BUDGET_GB} GB")

# %% [markdown]
# Read the plot: the rank barely moves the peak (the adapter is ~18M parameters), while generations and
# completion length multiply the activations. The flat floor is the vLLM reservation, {{t4.gpu_memory_utilization}} x
# the memory free at load (sized in 05, exercise {{exercise.vllm_sizing}}), whatever you train.

# %% [markdown]
# ## 3. The OOM doctor
#
# Unsloth's own T4 CI ran the stock Qwen3-4B notebook settings (utilization 0.9, 4 generations, long completions,
# r32) and ran out of memory. Here is what the doctor says for a configuration like that, and a budget of 7 GB.

# %%
stock = MemorySettings(model="qwen3-4b", load_dtype="4bit", lora_rank=32, num_generations=4, per_device_train_batch_size=4,
                       max_prompt_length=512, max_completion_length=1536, gpu_memory_utilization=0.9,
                       optim="adamw_8bit", gradient_checkpointing=True)
err = RuntimeError("CUDA out of memory. Tried to allocate 1.16 GiB (GPU 0; 14.56 GiB total capacity)")
print(explain_oom(err, stock, gpu="t4"))
print()
for fix in cheapest_fixes(stock, BUDGET_GB, gpu="t4"):
    print(fix)

# %% [markdown]
# ## 4. Predicted vs measured
#
# The model above was checked on a GPU: the lab's `lab/benchmark_memory.py kit` ran the kit's own loading and training
# code on an H100 emulating a T4 (fp16, memory capped at 14.56 GB) and recorded each run in `results/gpu/`. The
# bars put the model's peak (without the CUDA context) beside PyTorch's measured peak for every recorded run. With
# a GPU and `RUN_BENCHMARK = True`, the cell first measures the t4 recipe (without vLLM) on your card and adds it.

# %%
import json
import subprocess
import tempfile
from pathlib import Path
from helpers.memory.measured import comparison_rows, describe, load_records

records = load_records(sorted((ROOT / "results" / "gpu").glob("*.json")))
if kit.on_gpu and RUN_BENCHMARK:  # the lab's benchmark, in a process of its own
    out = Path(tempfile.mkdtemp()) / "mine.json"
    subprocess.run([sys.executable, str(ROOT / "lab" / "benchmark_memory.py"), "kit", "--preset", "t4",
                    "--no-fast-inference", "--steps", "2", "--json", str(out)], check=True)
    records += json.loads(out.read_text())
peaks = [(describe(r), {row["what"]: row for row in comparison_rows(r)}.get("peak (reserved)"))
         for r in records if r.get("status") == "ok"]
fig, ax = plt.subplots(figsize=(9, 4))
xs = range(len(peaks))
ax.bar([x - 0.2 for x in xs], [row["predicted_gib"] for _, row in peaks], width=0.4, label="predicted (no CUDA context)")
ax.bar([x + 0.2 for x in xs], [row["measured_gib"] for _, row in peaks], width=0.4, label="measured (PyTorch reserved)")
ax.set_xticks(list(xs))
ax.set_xticklabels([name.split(": ", 1)[-1][:40] for name, _ in peaks], rotation=30, ha="right", fontsize=7)
ax.set_ylabel("GB"); ax.legend(); fig.tight_layout(); plt.show()
for name, row in peaks:
    print(f"{row['error']:+.0%}  {name}")

# %% [markdown]
# ## Exercises with self-checks
#
# Each exercise has a cell for your answer and a check cell: `ex.qN.check(...)` runs hidden test cases and tells
# you which case failed and why. Stuck? `ex.qN.hint()`; still stuck, `ex.qN.solution()`.

# %%
from helpers.teaching.exercises import nb07 as ex

# %% [markdown]
# **Exercise 7.1.** With 8 generations per prompt (batch 8) on the t4 preset, find the **largest
# `max_completion_length`** (a multiple of 64) that the memory model predicts to fit the 7 GB budget. Put it in
# `largest_completion_length`. (The reservation stays the preset's: a KV cache too small for all 8 long completions
# makes vLLM sample fewer at once, which is slower, not more memory.)

# %% tags=["solution"]
# Exercise 7.1: find the largest max_completion_length (a multiple of 64) that fits 7 GB with 8 generations
# SOLUTION
largest_completion_length = max(
    L for L in range(64, 8193, 64)
    if estimate(t4, gpu="t4", budget_gb=7.0, num_generations=8, per_device_train_batch_size=8,
                max_completion_length=L).fits)

# %%
print("largest max_completion_length that fits:", largest_completion_length)
ex.q1.check(largest_completion_length)

# %% [markdown]
# ## Recap
#
# - GRPO's peak is usually the **training** phase: the vLLM reservation stays allocated while the trainer runs
#   forward and backward next to it.
# - On a T4, `gpu_memory_utilization` decides how much room the backward pass has; 4-bit weights help less than
#   they seem because they sit inside that reservation.
# - Activations scale with `per_device_train_batch_size x (prompt + completion)`; logits with
#   `batch x completion x vocab` — Qwen's 152k vocabulary makes them large unless the loss is chunked.
# - The LoRA rank and the optimizer are small on a 1.5B model; the doctor tries them first because they are cheap.
#
# ## Exercises
#
# 1. Find the largest `max_completion_length` that keeps the t4 preset under 7 GB with 8 generations. Which part
#    grows fastest?
# 2. Switch `chunked_logits=False` (TRL's own loss) and repeat the sweep. At what completion length do the logits
#    overtake the activations?
# 3. Use `--model-name gemma-3-1b` in `python -m helpers.memory`: why does a 1B model with a 262k vocabulary need more
#    memory for the logits than {{t4.model_name|name}}?
