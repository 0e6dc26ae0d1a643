# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/06_evaluate_and_save.ipynb)
#
# # 06 · Evaluate before vs after, save, export and share
#
# Training curves show rewards on the training questions. Whether the model got better is measured on held-out questions it never trained on, before and after - the same questions, the same scorer (`helpers.evaluation`): greedy accuracy, and sampled pass@k. Then we save the LoRA adapter (megabytes) and check that it reloads to the same answers. The exports are opt-in, one switch each, as in Unsloth's notebooks: a merged 16-bit model, a GGUF file, an upload to the Hugging Face Hub (your token never shown).
#
# This notebook needs **no GPU**: it runs on a Colab CPU runtime with the small embedded model (SmolLM2-135M). If `RUN_DIR` holds the T4 lab's run (05, on Google Drive), you first see that run's own results, read from its files without loading its model; the hands-on evaluation and saving then run on a CPU model: a CPU run found in `RUN_DIR`, an adapter your instructor staged, or a tiny run trained here.
#
# ## Learning objectives
#
# - Compute pass@k by hand, then measure greedy accuracy and sampled pass@k before and after training.
# - Read a run's measured results from its files, and the side-by-side answers behind the numbers.
# - Save the LoRA adapter and check that it reloads to the same answers; know when you need a merged model or a GGUF file, and export one.
# - Share on the Hugging Face Hub with a token kept in Colab secrets or HF_TOKEN, never in the notebook.
# - Know where every file goes: exports on this runtime's disk, on Google Drive only when you ask.
#
# **Expected time:** no GPU needed. Measured on an idle 2-core CPU machine (2026-11-27, lab/docs/performance.md), with a tiny run trained here: {{time.nb06_defaults|min}} with the defaults ({{cpu.eval_size}} questions, 4 samples each for pass@k); {{time.nb06_class|min}} with the class plans' `EVAL_SIZE = 50`, `PASS_K_SAMPLES = 2`; 1 min 35 s to 1 min 41 s with `EVAL_SIZE = 20`, `PASS_K_SAMPLES = 2`; the opt-in merged and GGUF exports add about 10 s. A Colab CPU runtime adds its install (about a minute, estimate) and may be slower or faster than that machine (not measured).
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "06_evaluate_and_save" # docs/colab.md: no GPU needed (a CPU runtime)
USE_DRIVE = None              # None: on Colab yes, elsewhere no - read 05's run folder from Google Drive
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05's run, which this notebook reads and never changes
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating
STAGED_ADAPTER = None         # folder or Hugging Face repo id of the instructor's adapter for this preset (docs/colab.md)
TRAIN_IF_MISSING = True       # no adapter this runtime can evaluate: train a tiny 1-step run in a folder of its own
PASS_K_SAMPLES = 4            # sampled answers per question for pass@k (0: skip)
EXPORT_MERGED = False         # True: write the merged 16-bit model (2 bytes a parameter: SmolLM2-135M about 270 MB, a 1.5B model 3 GB)
EXPORT_GGUF = False           # True: write a GGUF file for llama.cpp / Ollama (CPU: F16, about 270 MB for SmolLM2)
HUB_REPO = None               # e.g. "your-name/grpo-math": upload the export (needs the HF_TOKEN secret)
EXPORT_TO_DRIVE = False       # True (Colab): exports go to Google Drive instead of this runtime's disk
OVERWRITE_EXPORTS = False     # True: replace earlier exports (adapter/, merged/, gguf/) instead of stopping

# %%
# {{setup cell}}

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
# ## The run in RUN_DIR, read from its files
#
# 05 left its results next to its adapter: `summary.json` (greedy accuracy and format rate before and after, on the
# held-out questions) and `eval.json` (every answer before and after; pass@k when it was measured).
# `helpers.evaluation.read_run` reads them; no model is loaded. On a CPU runtime with the T4 lab's run in
# `RUN_DIR` (on Google Drive), these are the T4 run's own numbers: evaluating {{t4.model_name|name}} again on a CPU would take
# far longer than a lesson, so the hands-on part below runs on a CPU model, and the cell says so. On Colab without
# Google Drive (`USE_DRIVE = False`, or Drive blocked) the cell first asks for the zip 05 downloaded
# (`<RUN_DIR name>-run.zip`): choose it, or cancel to go on without the class run.

# %%
from helpers import evaluation, sharing
from helpers.teaching import course

sharing.receive_run(kit.run_dir)  # Colab without Drive only: asks for the zip 05 downloaded, unpacks it in RUN_DIR
run = evaluation.read_run(kit.run_dir)  # None: RUN_DIR holds no finished run
course.show_run(run, kit)
if run is not None:
    evaluation.show_side_by_side(run["before"], run["after"], limit=3)  # answers the run wrote, not generated now

# %% [markdown]
# ## The adapter this runtime evaluates
#
# `course.adapter_for_this_runtime` takes the first of: `RUN_DIR/adapter` when this runtime's model can load it (05
# ran with the same preset: the CPU run on a CPU runtime, the T4 run on a T4); then, in a folder of this notebook's
# own beside `RUN_DIR` (`runs/course-cpu`; on the runtime's disk when `RUN_DIR` is on Drive) an earlier tiny run,
# `STAGED_ADAPTER` (an adapter your instructor shared, for the same preset), or `MyDrive/grpo-kit/staged/adapter`
# (`helpers.sharing.locate_adapter`). If none is there, `TRAIN_IF_MISSING = True` trains a tiny run (1 step) into that
# folder - its numbers show the mechanics, not a trained model; it skips its own evaluation
# (`RunOptions(evaluate=False)`, `--no-evaluate` on the command line), since this notebook evaluates it next - and its
# model is used below instead of loading it again (on a GPU it holds the runtime's one vLLM engine). With `TRAIN_IF_MISSING = False` the cell stops, naming
# where it looked and the fixes. `RUN_DIR` itself is never written to: it is 05's.

# %%
from helpers.teaching import course

# adapter: the folder to evaluate; work_dir: the run folder it belongs to (RUN_DIR, or this notebook's own)
adapter, work_dir, model, tokenizer = course.adapter_for_this_runtime(kit, staged=STAGED_ADAPTER,
                                                                      train_if_missing=TRAIN_IF_MISSING)
print("evaluating", adapter, "| run folder:", work_dir)

# %% [markdown]
# ## Where this notebook writes
#
# Everything below is written to one folder, `helpers.sharing.export_dir`: `<run folder>/exports` on this
# machine's disk. When the run folder is on Google Drive (`USE_DRIVE`), the exports still go to the runtime's own
# disk (`/content/exports/<run name>`): a merged model is hundreds of megabytes (3 GB for a 1.5B model), Drive's
# free quota is 15 GB, and Drive writes are slow. Download what you want to keep (the folder icon on the left), or
# set `EXPORT_TO_DRIVE = True` to write the exports to Drive instead. Nothing already there is replaced unless
# `OVERWRITE_EXPORTS = True`.

# %%
from helpers import sharing

exports = sharing.export_dir(work_dir, to_drive=EXPORT_TO_DRIVE)  # local unless EXPORT_TO_DRIVE = True
print("this notebook writes to", exports)

# %% [markdown]
# ## Greedy: before vs after, side by side
#
# CPU: the adapter is loaded onto the embedded model; "before" is the same model with the adapter switched off.
# GPU: vLLM answers without the adapter, then with it as a `LoRARequest`. The table shows the same questions
# answered before and after (`helpers.evaluation.show_side_by_side`), this time generated here.

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
# (`helpers.evaluation.pass_at_k_before_after`). Everything goes into `eval.json` in the exports folder.

# %%
pass_k = None  # PASS_K_SAMPLES = 0: skipped
if PASS_K_SAMPLES:
    pass_k = evaluation.pass_at_k_before_after(model, tokenizer, rows, kit.preset, n=PASS_K_SAMPLES,
                                               adapter_path=adapter)
course.print_pass_at_k(pass_k)
report = evaluation.eval_report(result["before"], result["after"], kit.preset, pass_at_k=pass_k)
eval_path = evaluation.write_eval(exports / "eval.json", report)  # the layout helpers.train writes
print("\nsaved", eval_path)

# %% [markdown]
# ## Save the LoRA adapter, and check that it reloads
#
# The adapter is the only thing training changed. Saved on its own it is a few megabytes; to use it, load the base
# model and then the adapter (`peft.PeftModel.from_pretrained(base, path)` on CPU, `model.load_lora(path)` with
# Unsloth/vLLM). An existing folder is never replaced silently: set `OVERWRITE_EXPORTS = True` to replace it.
# `helpers.sharing.check_reload` loads the saved adapter onto a fresh base model and compares greedy answers.

# %%
final = sharing.fresh_folder(exports / "adapter", overwrite=OVERWRITE_EXPORTS)  # never replaced silently
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
# ## Export (opt-in)
#
# The adapter needs its base model. Two exports stand alone; each is written only when you switch it on, because
# each is big and takes time (in Unsloth's notebooks these cells read `if False:`):
#
# - **Merged 16-bit model** (`EXPORT_MERGED = True`; CPU and GPU): the adapter folded into the base weights, one
#   folder that plain `transformers` (or vLLM) loads without peft (`helpers.sharing.export_merged`; Unsloth's
#   `save_pretrained_merged` on a GPU). About 270 MB for SmolLM2-135M, 3 GB for a 1.5B model.
# - **GGUF** (`EXPORT_GGUF = True`): one file for llama.cpp, Ollama or LM Studio. GPU: a `q4_k_m` file through
#   Unsloth's `save_pretrained_gguf`. CPU: an F16 file of the merged model, written with the `gguf` package
#   (`helpers.sharing.export_gguf_cpu`: llama.cpp's tensor names, the embedded model's tokenizer and chat template),
#   about 270 MB for SmolLM2-135M.
#
# Switched off, each cell says what it would write and where.

# %%
merged = None  # EXPORT_MERGED = False: not written
if EXPORT_MERGED:
    merged = sharing.export_merged(model, tokenizer, exports / "merged", kit.preset,
                                   adapter_path=None if kit.on_gpu else adapter, overwrite=OVERWRITE_EXPORTS)
    course.list_folder(merged, "(standalone: transformers loads it without peft)")
else:
    print(f"EXPORT_MERGED = False: no merged model written. Set EXPORT_MERGED = True to merge the adapter into a "
          f"16-bit copy of {kit.preset.model_name} and write it to {exports / 'merged'}.")

# %%
gguf = None  # EXPORT_GGUF = False: not written
if not EXPORT_GGUF:
    print(f"EXPORT_GGUF = False: no GGUF written. Set EXPORT_GGUF = True to write one GGUF file (llama.cpp, Ollama) "
          f"of the merged model into {exports / 'gguf'}" + ("_gguf." if kit.on_gpu else "."))
elif kit.on_gpu:  # Unsloth writes the 16-bit merge into gguf/ and the .gguf file into gguf_gguf/
    gguf = sharing.export_gguf(model, tokenizer, exports / "gguf", overwrite=OVERWRITE_EXPORTS)
else:  # the merge, in F16, with llama.cpp's tensor names
    gguf = sharing.export_gguf_cpu(model, exports / "gguf", kit.preset, adapter_path=adapter,
                                   overwrite=OVERWRITE_EXPORTS)
if gguf is not None:
    course.list_folder(gguf, "(llama.cpp: llama-cli -m <file>; Ollama: a Modelfile with FROM <file>)")

# %% [markdown]
# ## Share on the Hugging Face Hub (opt-in)
#
# Set `HUB_REPO = "your-name/model-name"` and give the kit a token with write access - **never paste it into a
# cell**. On Colab: the key icon in the left sidebar > Secrets > add `HF_TOKEN`, switch on notebook access.
# Elsewhere: `export HF_TOKEN=...` before starting Jupyter. With `HUB_REPO` set the cell uploads the merged model
# if you exported it, else the adapter, to a private repository, or stops and says how to add the token if there
# is none; the token is never printed.

# %%
upload = merged or final  # the merged model if exported, else the adapter (which needs its base model)
if HUB_REPO:
    url = sharing.push_folder(upload, HUB_REPO)  # private; token from Colab secrets or HF_TOKEN (sharing.hf_token)
else:
    print(f"HUB_REPO = None: nothing uploaded. Set HUB_REPO = \"your-name/model-name\" (and your token as the "
          f"HF_TOKEN secret or environment variable) to upload {upload} as a private repository.")

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
# - A run's results live in its files (summary.json, eval.json): read them without loading the model.
# - A few training steps rarely move accuracy; format usually moves first; pass@k above pass@1 means the model can but does not yet reliably.
# - The LoRA adapter is small and needs its base model; the merged folder stands alone; GGUF runs in llama.cpp/Ollama. Exports are opt-in and go to this runtime's disk unless you ask for Drive.
# - Tokens live in Colab secrets or HF_TOKEN, never in a notebook.
#
# ## Exercises
#
# 1. Raise `EVAL_SIZE` and rerun the evaluation. How much do the before/after numbers move with more questions?
# 2. Find a held-out question the model answers differently after training (`result['after']['samples']`). Is the new answer better?
# 3. Set `EXPORT_MERGED = True`, run the export cell, then load the folder with `sharing.load_merged(merged)` in a fresh kernel and answer one question with it.
