# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/06_evaluate_and_save.ipynb)
#
# # 06 · Evaluate before vs after, save, export and share
#
# Training curves show rewards on the training questions. Whether the model got better is measured on held-out questions it never trained on, before and after - the same questions, the same scorer (`helpers.evaluation`): greedy accuracy, and sampled pass@k. Then we save the LoRA adapter (megabytes), check that it reloads, export a merged 16-bit model (and GGUF on a GPU), and optionally push it to the Hugging Face Hub without ever showing your token.
#
# ## Learning objectives
#
# - Compute pass@k by hand, then measure greedy accuracy and sampled pass@k before and after training.
# - Read the side-by-side answers behind the numbers.
# - Save the LoRA adapter, check that it reloads to the same answers, and export a merged model (GGUF on a GPU).
# - Share on the Hugging Face Hub with a token kept in Colab secrets or HF_TOKEN, never in the notebook.
# - Know that this notebook can start on its own: it finds the adapter 05 saved, or trains a tiny one.
#
# **Expected time on a free Colab T4:** about 10-15 min ({{t4.eval_size}} questions greedy and sampled, twice, plus the exports) (estimate, not yet measured). On a CPU with the embedded model: a few minutes (plus a tiny training run if 05 was not run).
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "06_evaluate_and_save" # docs/colab.md: needs the T4 runtime
USE_DRIVE = False             # Colab: keep the whole run folder (adapter included) on Google Drive
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating
STAGED_ADAPTER = None         # folder or Hugging Face repo id of the instructor's pre-trained adapter (docs/colab.md)
TRAIN_IF_MISSING = False      # no adapter anywhere: train a tiny 2-step run here (its numbers show mechanics only)
PASS_K_SAMPLES = 4            # sampled answers per question for pass@k (0: skip)
OVERWRITE_EXPORTS = False     # True: replace earlier exports in RUN_DIR (final_adapter/, merged/, gguf/)
HUB_REPO = None               # e.g. "your-name/grpo-math": upload the merged model (needs the HF_TOKEN secret)

# %%
# Setup - the same cell in every notebook (helpers/notebook_setup.py). Colab: finds the kit (an earlier clone, an uploaded zip, a copy on Drive) or clones it, installs its pinned stack at most once per runtime.
import glob, os, subprocess, sys, zipfile
from pathlib import Path
def kit_dirs():
    return [p for p in [Path.cwd(), *Path.cwd().parents] if (p / "helpers" / "notebook_setup.py").is_file()] + sorted(
        Path(f).resolve().parents[1] for f in glob.glob("*/helpers/notebook_setup.py") + glob.glob("drive/MyDrive/*/helpers/notebook_setup.py"))
if any(k.startswith("COLAB_") for k in os.environ) and not kit_dirs():  # Colab's working directory is /content
    [zipfile.ZipFile(z).extractall() for z in glob.glob("*.zip") if "helpers/notebook_setup.py" in str(zipfile.ZipFile(z).namelist())]
    if not kit_dirs(): subprocess.run(["git", "clone", "-q", "https://github.com/grpo-course-kit/grpo-course-kit", "grpo-course-kit"], check=True)
ROOT = kit_dirs()[0]
if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
from helpers import notebook_setup as setup
setup.install_if_colab(ROOT, lesson=LESSON)
kit = setup.prepare(PRESET, lesson=LESSON, drive=USE_DRIVE, run_dir=RUN_DIR, max_steps=MAX_STEPS, eval_size=EVAL_SIZE,
                    num_generations=NUM_GENERATIONS, per_device_train_batch_size=BATCH_SIZE,
                    max_completion_length=MAX_COMPLETION_LENGTH, eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)

# %% [markdown]
# ## pass@k, by hand first
#
# Greedy decoding gives one answer per question. Sampling gives different answers each time: with `n` samples of
# which `c` are correct, **pass@k** is the chance that at least one of `k` samples (drawn from the `n` without
# replacement) is correct. pass@1 is the plain share of correct samples; if pass@4 is much higher than pass@1, the
# model often *can* answer but is not reliable yet - what RL tends to fix.

# %% [markdown]
# ## Exercises with self-checks
#
# Each exercise has a cell for your answer and a check cell: `ex.qN.check(...)` runs hidden test cases and tells
# you which case failed and why. Stuck? `ex.qN.hint()`; still stuck, `ex.qN.solution()`.

# %%
from helpers.teaching.exercises import nb06 as ex

# %% [markdown]
# **Exercise 6.1.** Write `my_pass_at_k(n, c, k)`: with `n` samples of which `c` are correct, the chance that at
# least one of `k` samples drawn without replacement is correct.

# %% tags=["solution"]
# Exercise 6.1: write my_pass_at_k(n, c, k)
# SOLUTION
import math

def my_pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


# %%
result = ex.q1.check(my_pass_at_k)
if result.passed:
    print("n=4, c=1: pass@1 =", my_pass_at_k(4, 1, 1), " pass@2 =", my_pass_at_k(4, 1, 2))
result

# %% [markdown]
# ## Find the adapter from 05
#
# 05 saved the adapter to `RUN_DIR/adapter`. On Colab, a new runtime starts empty: with `USE_DRIVE = True` in 05
# and here, the run folder lives on Google Drive and is found again; or your instructor shares a pre-trained adapter
# (`STAGED_ADAPTER`: a folder, e.g. on Drive, or a Hugging Face repo id). If none is found, the cell says where it
# looked and what to do. `TRAIN_IF_MISSING = True` instead trains a tiny run (2 steps) so the rest still works -
# the numbers then show the mechanics, not a trained model. The tiny run's model is then used below instead of
# loading it again: on a GPU it holds this runtime's vLLM engine, and a second one does not fit.

# %%
from helpers.teaching import course

model = tokenizer = None  # loaded in the next cell, unless the tiny run already holds them
try:
    adapter = setup.locate_adapter(kit, staged=STAGED_ADAPTER)
except setup.AdapterMissing as missing:
    if not TRAIN_IF_MISSING:
        raise
    print(f"[grpo-kit] {missing}")  # where it looked, and the fixes
    adapter, model, tokenizer = course.train_tiny_adapter(kit)  # its trained model (on a GPU: its vLLM engine)

# %% [markdown]
# ## Greedy: before vs after, side by side
#
# CPU: the saved adapter is loaded onto the embedded model; "before" is the same model with the adapter switched
# off. GPU: vLLM answers without the adapter, then with it as a `LoRARequest`. The table shows the same questions
# answered before and after (`helpers.evaluation.show_side_by_side`).

# %%
from helpers import data, evaluation

if model is None:  # answers with and without the adapter (a tiny run's model already does)
    model, tokenizer = evaluation.load_for_eval(kit.preset, adapter, kit.runtime)
rows = data.heldout_questions(kit.preset)  # the held-out questions 05 evaluated on
result = evaluation.before_after(model, tokenizer, rows, kit.preset, adapter)  # greedy: {"before": ..., "after": ...}
evaluation.show_side_by_side(result["before"], result["after"], limit=3)

# %% [markdown]
# ### One answer with the trained adapter, by hand
#
# What the evaluation did for every question. On a GPU, vLLM generates and the adapter is passed per request:
# `model.load_lora(path)` reads the folder `save_lora` wrote, and `fast_generate(..., lora_request=...)` uses it (no
# adapter: the base model). On a CPU, peft's model generates with the adapter it holds.

# %%
p = kit.preset
text = tokenizer.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
if kit.on_gpu:
    from vllm import SamplingParams

    outputs = model.fast_generate(
        [text],
        sampling_params=SamplingParams(temperature=0.0, max_tokens=p.eval_max_new_tokens),  # greedy
        lora_request=model.load_lora(str(adapter)),      # the trained adapter for this request
    )
    answer_text = outputs[0].outputs[0].text
else:
    inputs = tokenizer([text], return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=p.eval_max_new_tokens, do_sample=False)
    answer_text = tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
print("Q:", rows[0]["question"], "| gold:", rows[0]["answer"])
print(answer_text)

# %% [markdown]
# ## Sampled pass@k: before vs after
#
# `PASS_K_SAMPLES` answers per question at the training temperature, with and without the adapter
# (`helpers.evaluation.pass_at_k_before_after`). Everything goes into `RUN_DIR/eval.json`.

# %%
pass_k = None  # PASS_K_SAMPLES = 0: skipped
if PASS_K_SAMPLES:
    pass_k = evaluation.pass_at_k_before_after(model, tokenizer, rows, kit.preset, n=PASS_K_SAMPLES,
                                               adapter_path=adapter)
course.print_pass_at_k(pass_k)
report = evaluation.eval_report(result["before"], result["after"], kit.preset, pass_at_k=pass_k)
eval_path = evaluation.write_eval(kit.run_dir / "eval.json", report)  # the layout helpers.train writes
print("\nsaved", eval_path)

# %% [markdown]
# ## Save the LoRA adapter, and check that it reloads
#
# The adapter is the only thing training changed. Saved on its own it is a few megabytes; to use it, load the base
# model and then the adapter (`peft.PeftModel.from_pretrained(base, path)` on CPU, `model.load_lora(path)` with
# Unsloth/vLLM). An existing folder is never replaced silently: set `OVERWRITE_EXPORTS = True` to replace it.
# `helpers.sharing.check_reload` loads the saved adapter onto a fresh base model and compares greedy answers.

# %%
from helpers import sharing

final = sharing.fresh_folder(kit.run_dir / "final_adapter", overwrite=OVERWRITE_EXPORTS)  # never replaced silently
if kit.on_gpu:
    sharing.attach_trained_adapter(model, adapter)  # the vLLM model holds a fresh adapter: copy the trained weights in
    model.save_lora(str(final))                     # Unsloth: the adapter only, in the form load_lora reads
else:
    model.save_pretrained(str(final))               # peft: adapter_config.json + adapter_model.safetensors
tokenizer.save_pretrained(str(final))
course.list_folder(final, "(the base model is not in here: load it, then the adapter)")
reload = sharing.check_reload(model, tokenizer, final, kit.preset)
print("reloaded adapter gives the same greedy answers:", reload["match"])
if reload.get("note"):
    print(reload["note"])

# %% [markdown]
# ## Export
#
# **Merged 16-bit model** (CPU and GPU): the adapter folded into the base weights, one folder that plain
# `transformers` loads without peft (`helpers.sharing.export_merged`; Unsloth's `save_pretrained_merged` on a GPU).
#
# **GGUF** (GPU only): a `q4_k_m` file for llama.cpp, Ollama or LM Studio through Unsloth's `save_pretrained_gguf`.
# On the CPU path the cell says what to do instead.

# %%
merged = sharing.export_merged(model, tokenizer, kit.run_dir / "merged", kit.preset,
                               adapter_path=None if kit.on_gpu else adapter, overwrite=OVERWRITE_EXPORTS)
course.list_folder(merged, "(standalone: transformers loads it without peft)")

# %%
if kit.on_gpu:
    gguf = sharing.export_gguf(model, tokenizer, kit.run_dir / "gguf", overwrite=OVERWRITE_EXPORTS)
    course.list_folder(gguf)
else:
    print("GGUF export skipped: it runs on the GPU path (Unsloth's save_pretrained_gguf). On a CPU, convert the "
          "merged folder with llama.cpp's convert_hf_to_gguf.py.")

# %% [markdown]
# ## Share on the Hugging Face Hub (optional)
#
# Set `HUB_REPO = "your-name/model-name"` and give the kit a token with write access - **never paste it into a
# cell**. On Colab: the key icon in the left sidebar > Secrets > add `HF_TOKEN`, switch on notebook access.
# Elsewhere: `export HF_TOKEN=...` before starting Jupyter. With `HUB_REPO` set the cell uploads to a private
# repository, or stops and says how to add the token if there is none; the token is never printed.

# %%
if HUB_REPO:
    url = sharing.push_folder(merged, HUB_REPO)  # private; token from Colab secrets or HF_TOKEN (sharing.hf_token)
else:
    print("HUB_REPO is None: nothing uploaded. To share the model, set HUB_REPO = \"your-name/model-name\" and add "
          "your token as the HF_TOKEN secret (Colab key icon) or environment variable.")

# %% [markdown]
# ## Capstone: your own `train_grpo.py`
#
# You have now seen every call a GRPO project is made of: the dataset (03), the model and its LoRA adapter (02), the
# rewards (04), `GRPOConfig`, `GRPOTrainer` and `trainer.train()` (05), generation with the adapter and
# `save_pretrained` / `save_lora` (06). Write them yourself in one script of about 40 lines, without
# `helpers.train`: the task and its contract are in `capstone/README.md`. Check it with 2 GRPO steps on the CPU
# model:
#
# ```bash
# .venv/bin/python -m helpers.capstone train_grpo.py
# ```

# %% [markdown]
# ## Recap
#
# - Evaluate on held-out questions before and after, with the same scorer as training: greedy accuracy, and sampled pass@k.
# - A few training steps rarely move accuracy; format usually moves first; pass@k above pass@1 means the model can but does not yet reliably.
# - The LoRA adapter is small and needs its base model; the merged folder stands alone; GGUF runs in llama.cpp/Ollama.
# - Tokens live in Colab secrets or HF_TOKEN, never in a notebook.
#
# ## Exercises
#
# 1. Raise `EVAL_SIZE` and rerun the evaluation. How much do the before/after numbers move with more questions?
# 2. Find a held-out question the model answers differently after training (`result['after']['samples']`). Is the new answer better?
# 3. Load the merged folder with `sharing.load_merged(merged)` in a fresh kernel and answer one question with it.
