# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/05_train.ipynb)
#
# # 05 · The T4 lab: GRPO training within 7 GB
#
# This is the course's **one notebook on a GPU**: on Colab it opens a T4 runtime, and everything that needs the GPU happens here, in one runtime, so the GPU install, the restart, the model download and the vLLM engine start are paid once: load the model (02's calls, with Unsloth), evaluate, train, evaluate again, save, and export if you ask for it. The other lessons run on CPU runtimes; on Colab, Google Drive carries the state between them (`USE_DRIVE = None`, the default): your reward from 04 comes in, and the run goes out to 06.
#
# Now we train, with the calls a GRPO project is made of: TRL's `GRPOConfig(...)` written out from the preset, `GRPOTrainer(...)` with the rewards from 04, and `trainer.train()`. Around them, the same named steps `python -m helpers.train` runs (`helpers.run.pipeline`: `start`, `load_model`, `load_data`, `evaluate_before`, `finish`), so the notebook and the command line cannot drift. You watch it live on a dashboard, and a session that dies (a Colab disconnect) is resumed from its last checkpoint by running the cells again.
#
# ## Learning objectives
#
# - Explain the settings that decide memory on a T4: vLLM reservation, 4-bit weights, LoRA rank, generations, completion length, 8-bit optimizer, fp16.
# - Read a GRPOConfig built from a preset for this runtime.
# - Train while watching the live dashboard: reward per function, reward spread (no spread = no gradient), completion length, memory, the latest sampled completions and plain-words warnings.
# - Save checkpoints (locally or on Google Drive) and resume an interrupted run.
# - Know what the run folder holds (05 saves it; 06 reads it), and export the trained model when you ask for it.
#
# **Expected time on a free Colab T4:** the GPU-stack install and restart (not timed), then about 48-97 min for {{t4.max_steps}} steps plus a few minutes of loading and evaluation (an estimate scaled from Unsloth's logged T4 run, derived in docs/instructor-guide.md; not measured). On a CPU with the embedded model (`PRESET = "cpu"`): {{time.cpu_preset_run|min}} ({{time.cpu_preset_run}}) for the preset's {{cpu.max_steps}} steps and both evaluations, measured for the same job, `python -m helpers.train --preset cpu`, on the 2-core development machine, 2026-11-23 (lab/docs/performance.md; machines of the same kind differ by up to 3.5x). The {{time.ci_nb05}} in the README is CI's 2-step settings, the mechanics only.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "05_train"           # docs/colab.md: the T4 lab, the one lesson that needs a GPU
MAX_STEPS = None              # GRPO steps (cpu preset: {{cpu.max_steps}}, t4 preset: {{t4.max_steps}})
EVAL_SIZE = None              # held-out questions for evaluation (cpu: {{cpu.eval_size}}, t4: {{t4.eval_size}})
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating
SAVE_STEPS = None             # a resumable checkpoint every N steps (None: about 5 per run, at most every 25; 0: none)
KEEP = 2                      # how many of the latest checkpoints stay on disk
USE_DRIVE = None              # None: Drive on Colab (04's reward reaches 05, 05's run reaches 06); local elsewhere
OVERWRITE = False             # True: replace an earlier run in RUN_DIR instead of resuming it
USE_MY_REWARDS = True         # also train with the rewards you wrote in 04 (saved in RUN_DIR/my_rewards.py)
RERUN_STEPS = None            # steps of 08's loop in the rerun exercise below (None: its 12, as the stored seeds ran)
EXPORT_MERGED = False         # True: after training, also write the merged 16-bit model (2 bytes a parameter: about 3 GB for a 1.5B model)
EXPORT_GGUF = False           # True: after training, also write a GGUF file (llama.cpp, Ollama)
HUB_REPO = None               # e.g. "your-name/grpo-math": upload the export (needs the HF_TOKEN secret)
EXPORT_TO_DRIVE = False       # True (Colab): exports go to Google Drive instead of this runtime's disk
OVERWRITE_EXPORTS = False     # True: replace earlier exports instead of stopping

# %%
# {{setup cell}}

# %% [markdown]
# ## The budget and the preset
#
# The t4 preset is sized for **7 GB** of a T4's 14.56 GB: vLLM reserves `gpu_memory_utilization` x the memory free
# at load up front (Unsloth multiplies the fraction by what is free) for the 4-bit weights, the KV cache and vLLM's
# workspace, plus its CUDA graphs beside it, and training shares what is left. You size that reservation yourself
# below; the preset's {{t4.gpu_memory_utilization}} is the same computation. The levers, in the order they matter:
# the vLLM reservation, completions per step (`num_generations`, batch), completion length (the logits tensor is
# completions x length x ~151k vocabulary for Qwen), LoRA instead of full training, an 8-bit optimizer, gradient
# checkpointing, and no reference model (`beta=0`).

# %%
from helpers import sharing
from helpers.model import unsloth_guard
from helpers.run import checkpoints, dashboard, metrics, pipeline
from helpers.teaching import course, grpo_math, measured_runs

course.print_preset(kit.preset)

# %% [markdown]
# ### How much does vLLM need? Size it yourself
#
# `gpu_memory_utilization` is the one number of Unsloth's load call that you cannot copy from a model card. vLLM
# reserves it up front and keeps it while training, so too much starves the backward pass and too little stops vLLM
# before the first step. What the reservation must hold, with `fast_inference=True`: the model's weights (vLLM and
# training share one copy), the KV cache of the sequences sampled at once (each keeps its keys and values for every
# token, prompt and completion, in every layer) and vLLM's own workspace (`VLLM_WORKSPACE_GB`, measured in the record
# below: its reservation less the weights and the cache). Then a margin, because every one of those numbers is an
# estimate.
#
# **Exercise 5.1 (size vLLM).** Write `vllm_sizing(arch, sequences, tokens, weights_gb, card, margin)` returning
# `(kv_cache_gb, gpu_memory_utilization)`: `arch` is the model's shape from its config.json
# (`helpers.memory.architectures`: `arch.num_layers`, `arch.num_heads`, `arch.num_kv_heads`, `arch.head_dim`,
# `arch.hidden_size`), `sequences` the sequences sampled at once and `tokens` the length of each (prompt +
# completion), `weights_gb` the loaded weights, `card.total_gb` what the GPU shows and `card.free_gb` what is free
# when Unsloth loads, and `margin` the fraction you add on top (0.25: a quarter more than needed). GB are GiB
# (2**30 bytes). The check runs it on the 2026-11-27 vLLM record (what vLLM logged), on the t4 preset and on another
# model, and names the mistake when a number is off. Stuck? `ex.q1.hint()`.

# %%
from helpers.teaching.exercises import nb05 as ex  # this lesson's self-checking exercises

t4_run = ex.q1.t4_case()  # the t4 preset's run: t4_run.arch, .sequences, .tokens, .weights_gb, .card
print(t4_run.arch)       # the t4 model's shape, from helpers.memory.architectures

# %% tags=["solution"]
# Exercise 5.1: write vllm_sizing(arch, sequences, tokens, weights_gb, card, margin): the KV cache (GB) the run needs and the gpu_memory_utilization that holds it
# SOLUTION
from helpers.memory import VLLM_WORKSPACE_GB  # what vLLM keeps beside the weights and the cache (measured)


def vllm_sizing(arch, sequences, tokens, weights_gb, card, margin):
    """(KV cache in GB, gpu_memory_utilization) for `sequences` sampled at once of `tokens` tokens each."""
    bytes_per_value = 2  # vLLM caches K and V in the dtype it computes in: fp16 on a T4, whatever the weights' 4 bits
    per_token = 2 * arch.num_layers * arch.num_kv_heads * arch.head_dim * bytes_per_value  # a key and a value, every layer
    kv_gb = sequences * tokens * per_token / 2**30
    need_gb = weights_gb + kv_gb + VLLM_WORKSPACE_GB  # all three live inside vLLM's reservation
    return kv_gb, need_gb * (1 + margin) / card.free_gb  # Unsloth takes the fraction of the memory free at load


# %%
my_margin = 0.25  # state yours: what does it cover? (the kit's: one record, FP4 weights measured, a T4 never measured)
result = ex.q1.check(vllm_sizing, margin=my_margin)  # then yours (the kit's until it passes) beside the record
result

# %% [markdown]
# The record's vLLM had room for far more sequences than the preset ever samples at once: the reservation it ran
# with was mostly idle KV cache. The preset now reserves what the sizing says, rounded up (`helpers.memory.estimate.
# sized_utilization`, the kit's margin `VLLM_SIZING_MARGIN`), and `python -m helpers.memory --preset t4` predicts its
# peak (an estimate; docs/memory.md). Unsloth reads the smaller reservation too: below about 0.24 its own KV estimate
# makes it run 8 sequences at once instead of 16 (`max_num_seqs`; more than the {{t4.per_device_train_batch_size}}
# sampled at once), and only below about 0.10 would it cut `max_model_len` under prompt + completion
# (docs/gpu-stack.md).

# %% [markdown]
# ## Step 1: start the run, load the model and the data
#
# These are the first steps of `python -m helpers.train`, called with the preset itself (not command-line strings):
# `start` refuses impossible settings before anything loads and decides between a fresh start, a resume, and a
# refusal for `RUN_DIR`. On the T4 the model comes from Unsloth's two calls, the cell you read in 02:
# `FastLanguageModel.from_pretrained(..., load_in_4bit=True, fast_inference=True, gpu_memory_utilization=...)` loads
# the 4-bit weights and starts vLLM on them, with the preset's values in sight, and `get_peft_model` adds the LoRA
# adapter (if vLLM's engine fails to start, `vllm_enforce_eager=True` in `setup.prepare(...)`:
# docs/troubleshooting.md). On a CPU `pipeline.load_model` makes 02's CPU calls with the kit's CPU speed-ups.
# `load_data` drops prompts longer than `max_prompt_length` (03); `evaluate_before` measures greedy accuracy on
# held-out questions.
#
# The rewards are a list of functions: the kit's five (04), plus the ones you saved in 04's exercise
# {{exercise.brevity_reward}} (on Colab they come from Drive when both notebooks keep `USE_DRIVE = None` and the same
# `RUN_DIR`; if not, the cell says how to bring them). The memory figures of 02 are printed around the load.

# %%
from helpers.rewards import DEFAULT_REWARDS

reward_funcs = list(DEFAULT_REWARDS) + (course.load_rewards(kit.run_dir) if USE_MY_REWARDS else [])
# (with USE_DRIVE = True the whole run folder, checkpoints included, is on Google Drive: the setup cell moved RUN_DIR)
options = pipeline.RunOptions(run_dir=kit.run_dir, overwrite=OVERWRITE, save_steps=SAVE_STEPS, keep=KEEP)
state = pipeline.start(kit.preset, options, reward_funcs, kit.runtime)  # checks, plans RUN_DIR, config.json
memory = [course.memory_snapshot("before loading")]
p = kit.preset
# {{include lessons/unsloth_load.py}}
if not kit.on_gpu:
    model, tokenizer = pipeline.load_model(state)            # 02's CPU branch, with the kit's CPU speed-ups
state.model, state.tokenizer = model, tokenizer              # the run's next steps evaluate, train and save this model
course.print_memory(memory + [course.memory_snapshot("after loading")])  # GPU: allocated, reserved, nvidia-smi; CPU: RSS
train_dataset, heldout = pipeline.load_data(state)           # 03's questions, long prompts dropped
before = pipeline.evaluate_before(state, heldout)            # greedy accuracy before training

# %% [markdown]
# ## Step 2: the GRPOConfig, written by you
#
# Every value comes from the preset (`p`), so what you change in the setup cell (`setup.prepare(..., beta=0.04)`) is
# what trains, and `config.json` in the run folder says so. Precision is decided by the card: on a T4
# `fp16=True, bf16=False` (no bf16 on compute capability 7.5; TRL's default `bf16=True` would fail), on a CPU
# `use_cpu=True`.
#
# **Exercise 5.2.** Fill in the blanks of `make_config`: the settings that are decisions, not copies. The preset's
# own fields (the group, the batch, the completion length, beta, the learning rate) are written out for you; you
# decide what depends on the card and the run: the precision flags, whether TRL samples with vLLM, who does the
# gradient checkpointing, and whether checkpoints are saved. Each exercise has a
# check cell after it: it says which case failed and why. This one builds your config for three machines (the cpu
# preset on a CPU, the t4 preset on a T4 and on an A100), so precision written for this machine only is caught, and
# compares it field by field with the config `python -m helpers.train` builds, giving the reason for each field.
# Stuck? `ex.q2.hint()`; still stuck, `ex.q2.solution()`.

# %%
from trl import GRPOConfig

# %% tags=["solution"]
# Exercise 5.2: fill in make_config(p, runtime, output_dir, save_steps): the GRPOConfig settings that depend on the card and the run
# SOLUTION
def make_config(p, runtime, output_dir, save_steps):
    """The GRPOConfig of preset p on this runtime: the one `python -m helpers.train` builds."""
    on_gpu = p.backend.uses_unsloth              # Unsloth + vLLM on a GPU; transformers + peft on a CPU
    bf16_ok = on_gpu and runtime.bf16_supported  # Ampere (compute capability 8.0) or newer
    return GRPOConfig(
        output_dir=output_dir,                   # checkpoint-N/ folders go here
        # --- the group GRPO compares
        num_generations=p.num_generations,       # completions sampled per prompt (the group)
        per_device_train_batch_size=p.per_device_train_batch_size,  # completions (not prompts) per step
        gradient_accumulation_steps=p.gradient_accumulation_steps,  # batches per optimizer step
        max_completion_length=p.max_completion_length,  # tokens per completion: caps time and the logits
        temperature=p.temperature,               # sampling must vary, or a group ties and teaches nothing
        scale_rewards=p.scale_rewards,           # "group": advantage = (reward - group mean) / group std
        beta=p.beta,                             # weight of the KL penalty; 0.0 = no reference model in memory
        # --- the optimizer
        learning_rate=p.learning_rate,           # LoRA on the tiny CPU model: {{cpu.learning_rate|e}}; the t4 preset: {{t4.learning_rate|e}}
        weight_decay=p.weight_decay,
        warmup_steps=p.warmup_steps,
        lr_scheduler_type=p.lr_scheduler_type,
        max_grad_norm=p.max_grad_norm,           # clip the update: RL gradients are noisy
        optim=p.optim,                           # adamw_8bit on a GPU keeps the optimizer state small
        max_steps=p.max_steps,
        num_iterations=p.num_iterations,         # optimizer steps per batch of completions (2: sample every other step)
        seed=p.seed,
        # --- precision and device
        bf16=bf16_ok,  # blank: a T4 (compute capability 7.5) has no bf16 ...
        fp16=on_gpu and not bf16_ok,  # blank: ... so it trains in fp16
        use_cpu=not on_gpu,  # blank: no GPU: TRL must not look for one
        # --- generation and memory
        use_vllm=on_gpu and p.fast_inference,  # blank: GPU only: the vLLM engine Unsloth attached (weights shared)
        gradient_checkpointing=p.gradient_checkpointing and not on_gpu,  # blank: GPU: Unsloth checkpoints itself (02)
        # --- logging and checkpoints
        logging_steps=p.logging_steps,
        save_strategy="steps" if save_steps else "no",  # blank: save_steps None or 0: no checkpoints
        save_steps=save_steps or 500,            # every N steps (500 is TRL's default, unused when "no")
        save_only_model=False,                   # keep optimizer and scheduler state: resumable
        report_to="none",
        log_completions=False,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )


# %%
result = ex.q2.check(make_config)
# Yours once it passes; until then the config helpers.train builds (pipeline.grpo_config), so the lesson goes on.
config = (make_config(kit.preset, kit.runtime, str(state.folder.checkpoint_dir), state.save_steps) if result.passed
          else pipeline.grpo_config(state))
# raises, naming the field, if this differs from the preset's config (pipeline.check_config); then why each field
why = course.describe_config(state, config)
result

# %% [markdown]
# ### Will it fit? The predicted memory of the t4 recipe
#
# Before a single step runs, the memory model (`helpers.memory`, docs/memory.md) adds up where GRPO's GPU memory
# goes for the t4 preset: vLLM's reservation (weights and KV cache), LoRA, optimizer, activations, logits and the
# CUDA context. The dashed lines are the 7 GB budget and the 14.56 GB a T4 shows to PyTorch. While training, the
# dashboard's memory panel shows what was really used; if a run ever runs out of memory, the kit prints the
# cheapest changes that would fit (`helpers.memory.oom_doctor`).

# %%
course.plot_predicted_memory(kit);

# %% [markdown]
# **Exercise 5.3 (a config that fits).** A classmate's t4 settings run out of memory on the T4. They want a group of
# 8 completions (fewer groups tie, exercise {{exercise.zero_spread_chance}}), 512-token answers, and 16 completions
# per optimizer step (2 questions). Decide what to change so the memory model (`helpers.memory.estimate`, the
# figure above) predicts the 7 GB budget holds, **keeping those three**: put the settings in a dict `budget_fix`
# (the preset's field names; what you leave out stays the classmate's). The check names the setting you must not
# touch; then it asks whether vLLM would start at all (its reservation, `gpu_memory_utilization` x the memory free at
# load, must hold the weights and the KV cache of one full sequence, or vLLM stops before the first step); only then
# does it weigh the budget, naming, when it still does not fit, the largest part of the estimate and why it is that
# large.

# %%
classmate = dict(ex.CLASSMATE)  # the t4 preset with these changes
print(classmate)
print(ex.budget_estimate(classmate).table())  # try your own: ex.budget_estimate({**classmate, ...}).table()

# %% tags=["solution"]
# Exercise 5.3: budget_fix, the classmate's settings changed to fit 7 GB on a T4 with a group of 8, 512-token answers and 16 completions per step
# SOLUTION
budget_fix = {**classmate, "gradient_checkpointing": True, "gpu_memory_utilization": {{t4.gpu_memory_utilization}}}

# %%
result = ex.q3.check(budget_fix)  # once it fits, the estimate of your fix, part by part
result

# %% [markdown]
# **Exercise 5.4.** GRPO learns only from groups whose rewards differ. Suppose the reward is just correctness and
# the model answers a question right with probability `p`, independently for each of the `G` completions of its
# group. Write `zero_spread_chance(p, group_size)`: the chance that the group has **zero spread** (all right or all
# wrong), so its advantages are all 0 and it teaches nothing. The check then prints it for this preset's
# `num_generations`; compare with `frac_reward_zero_std` in the training logs below.

# %% tags=["solution"]
# Exercise 5.4: write zero_spread_chance(p, group_size): the chance that a group of G completions has zero reward spread
# SOLUTION
def zero_spread_chance(p, group_size):
    return p ** group_size + (1 - p) ** group_size


# %%
result = ex.q4.check(zero_spread_chance)
if result.passed:
    G = kit.preset.num_generations
    for p_right in (0.05, 0.2, 0.5, 0.9):
        print(f"right with p={p_right}: {zero_spread_chance(p_right, G):.1%} of groups of {G} have no spread")
result

# %% [markdown]
# ## Step 3: the trainer
#
# `GRPOTrainer` takes the model, the tokenizer, the reward functions, the config and the dataset. For every prompt
# it samples `num_generations` completions, calls every reward function on them (each gets the dataset's other
# columns, here `answer`, as keyword arguments), sums the rewards, turns them into group-relative advantages (04)
# and takes a policy-gradient step. The kit's extras are ordinary TRL callbacks (`helpers.run.pipeline.kit_callbacks`):
# the memory monitor, `metrics.jsonl`, checkpoint rotation and the live dashboard.

# %% [markdown]
# **Exercise 5.5.** Write the call yourself: `make_trainer` returns `GRPOTrainer(...)` built from its arguments, with
# TRL's keyword names (`help(GRPOTrainer)` lists them; the tokenizer is TRL's `processing_class`, the config its
# `args`). The check calls your function with stand-ins and says which one landed in the wrong place, and why it
# belongs where it does.

# %%
from trl import GRPOTrainer

# %% tags=["solution"]
# Exercise 5.5: write make_trainer(...): the GRPOTrainer call, each argument to its keyword
# SOLUTION
def make_trainer(model, tokenizer, reward_funcs, config, train_dataset, callbacks):
    """The trainer: it samples the groups, calls the rewards, computes the advantages and takes the steps."""
    return GRPOTrainer(
        model=model,  # the LoRA model: only the adapter trains
        processing_class=tokenizer,  # tokenizes prompts, decodes completions
        reward_funcs=reward_funcs,  # f(prompts, completions, answer=..., **kw) -> list[float], summed
        args=config,  # the GRPOConfig of exercise {{exercise.make_config}}
        train_dataset=train_dataset,  # rows with "prompt" (chat messages) and "answer" (for the rewards)
        callbacks=callbacks,  # the kit's extras, as TRL callbacks
    )


# %%
result = ex.q5.check(make_trainer)
callbacks = pipeline.kit_callbacks(state)  # memory monitor, metrics.jsonl, checkpoint rotation, live dashboard
# Yours once it passes; until then the same call in helpers.run.pipeline.build_trainer, so the lesson goes on.
trainer = (make_trainer(model, tokenizer, reward_funcs, config, train_dataset, callbacks) if result.passed
           else pipeline.build_trainer(state, train_dataset))
print("reward functions:", [f.__name__ for f in reward_funcs])
print("callbacks:", [type(c).__name__ for c in trainer.callback_handler.callbacks])
result

# %% [markdown]
# ## Step 4: train, watch, resume
#
# `trainer.train()` runs the steps. While it trains, the cell shows a **live dashboard** that redraws in place at every step
# (`helpers.run.dashboard`): reward per function, spread, zero-spread groups, advantages, completion length and
# clipping, entropy, KL (when `beta > 0`), memory, the latest sampled completions with their rewards, and a warning in plain words when
# something goes wrong (no learning signal, answers cut off at the length cap, a collapsing reward).
#
# **Checkpoints.** Every `SAVE_STEPS` steps the adapter, optimizer, scheduler and random state are saved; the last
# `KEEP` stay. If the session dies, **run the notebook again from the top (Runtime > Run all) with the same
# `RUN_DIR`**: the run resumes from its last complete checkpoint (a half-written one is set aside, never loaded); a
# dead runtime has lost its variables, so this cell alone would fail. On Colab a disconnect wipes the disk: with
# `USE_DRIVE = None` (the default) the checkpoints are on Google Drive (it asks for access once). A finished run is never
# retrained silently: to train it longer, raise `MAX_STEPS` and run the notebook again (it continues from the
# checkpoint of its last step); otherwise `start` stops with the fix (a new `RUN_DIR`, or `OVERWRITE = True`, which
# says what it replaces).
#
# After training, `helpers.run.pipeline.finish` saves the adapter, evaluates the same held-out questions again, and writes
# the plots and `summary.json`. On Colab without Google Drive (`USE_DRIVE = False`, or Drive blocked), the cell then
# downloads the run's results and adapter as one zip (`<RUN_DIR name>-run.zip`, no checkpoints) for 06 to upload.

# %%
# pipeline.training: on the GPU it checks that the trainer samples with the model's vLLM engine and adapter; the
# dashboard gets the trainer, the kit's TRL patches go in; an OOM prints the cheapest fixes, Ctrl-C (Interrupt) says
# how to resume, a full disk says what to free
with course.RssSampler(interval=1.0) as rss, pipeline.training(state, trainer):
    if not state.folder.training_done:  # a run stopped during its final evaluation is not trained past MAX_STEPS
        trainer.train(resume_from_checkpoint=pipeline.resume_checkpoint(state))  # None: a fresh start
# finish: adapter/, evaluation after, plots, summary.json; on Colab without Drive, the run's zip for 06 downloads
summary = pipeline.finish(state, trainer, heldout, before)
print(summary)

# %%
ckpt_root = state.folder.checkpoint_dir  # RUN_DIR/trainer (on Drive too when USE_DRIVE = True)
kept = checkpoints.list_checkpoints(ckpt_root)
print(f"checkpoints in {ckpt_root}: " + (", ".join(f"{c.path.name} ({'complete' if c.complete else 'incomplete'})" for c in kept) or "none"))
print("interrupted? run the notebook again from the top with the same RUN_DIR: it resumes from the newest complete one.")

# %% [markdown]
# ## What to watch
#
# - **Reward per function**: correctness should rise; format rewards usually rise first. Expect a total near zero
#   for the first steps on the CPU demo: the small model rarely uses the tags yet. Rewards exist only on the steps
#   that sample: with `num_iterations=2` (the cpu preset) every other step trains again on the last sampled
#   completions and logs no reward, so a run "trained" when its sampling steps logged rewards, not every step.
# - **Reward spread**: `reward_std` is the spread of the step's rewards (TRL takes it over the whole sampled batch;
#   both presets sample one question per step, so it is the spread within that one group; a batch of several
#   questions would mix in their differences); `frac_reward_zero_std` is the share of groups where
#   every completion scored the same. Those groups give **zero gradient**. Lots of them = wasted steps (more
#   generations, a worked example or a finer reward help).
# - **Advantages**: the push each completion gets (04). `advantages/abs_mean` is its mean size, `advantages/nonzero`
#   the share of completions that are pushed at all (the kit logs both from TRL's own store of the latest batch's
#   advantages, `helpers.run.metrics.AdvantageStats`). With `scale_rewards="group"` a group with any spread pushes
#   with advantages of size about 1, however small its reward differences were.
# - **Entropy**: how spread out the policy's next-token choices are, in nats per sampled token. When it falls near
#   0 every completion in a group is the same, the spread goes with it, and learning stops; the kit's earlier CPU
#   recipe did exactly that (lab/docs/performance.md).
# - **Completion length**: collapsing length can be reward hacking; length at the cap (clipped ratio) means answers
#   are cut off.
# - **Memory**: `memory/*` from the run's logs (GPU memory, or the process RAM on CPU), else the RSS sampled here.
# - **The loss** printed by the trainer starts near 0: advantages are zero-mean within each group (04's last
#   section). That is normal.

# %%
rows = metrics.read_metrics(kit.run_dir / "metrics.jsonl")
print(f"{len(rows)} logged steps; keys: {sorted(rows[0]) if rows else []}")
# The dashboard's figure for the whole run; without memory/* logs its memory panel shows the RSS sampled above.
fig = dashboard.plot_dashboard(rows, title=f"GRPO on {kit.preset.model_name}", rss_samples=rss.samples)
fig.savefig(kit.run_dir / "training_curves.png", dpi=100)

# %%
from IPython.display import Image, display

display(Image(filename=str(kit.run_dir / "dashboard.png")))
print("run folder:", kit.run_dir)
for name in course.run_files(kit.run_dir):
    print("  ", name)

# %% [markdown]
# ## Experiment: change one setting, predict, rerun
#
# Reading curves is one half; the other is changing a setting and seeing what it does to **learning**. One run beside
# one other proves little: two runs that differ only in their random seed already end apart. So the yardstick is the
# spread of seeds: lesson 08's GRPO loop (the kit's own, on the embedded model: groups of 8 completions, 64 tokens,
# the five rewards of 04) was run with its default settings on three seeds, and each curve is stored
# (`results/lesson08-trl-curve.json`, `scripts/lesson08_trl_curve.py`). A changed setting made a real difference
# when the changed run's final reward (the mean of its last groups) ends outside those seeds' mean +- 2 standard
# deviations; inside, it is "about the same" for this many steps.
#
# **Exercise 5.6 (predict, then rerun).** Choose one setting of that loop in `rerun_setting`, `"learning_rate"`
# (the default 5e-4, `grpo_math.LOOP`'s) or `"temperature"` (the default 1.0: it divides the logits before each
# token is sampled), and its new value in `rerun_value`. Before running anything, predict in `rerun_prediction` what
# it does to the **final reward after the rerun's steps**, against the default settings' seeds:
#
# - **a**: higher, beyond the seeds' spread: it learns faster
# - **b**: about the same, within the seeds' spread
# - **c**: lower, beyond the seeds' spread: it learns slower, or not at all
#
# The cell after it records your prediction, then runs 08's loop with your change for its 12 steps
# (`grpo_math.LOOP`) from the base model (on a T4 runtime too: the embedded model, on the CPU; the seeds took 4 to 6
# minutes each on a loaded 2-core development machine, measured 2026-11-29; about 2 minutes on an idle one is an
# estimate), prints its curve beside the seeds' final rewards, and says why either way. The run is the same on the
# same machine, so when this cell runs again with a setting already run (after a disconnect, or in the homework's
# rerun of this notebook), it reads that run back instead of training it again, and says so;
# `ex.q6.rerun(..., reuse=False)` trains it again.

# %% tags=["solution"]
# Exercise 5.6: change one setting of 08's loop (rerun_setting, rerun_value) and predict its final reward against the default seeds: "a", "b" or "c"
# SOLUTION
rerun_setting = "learning_rate"
rerun_value = 5e-5
rerun_prediction = "c"

# %%
outcome = ex.q6.rerun(rerun_setting, rerun_value, rerun_prediction, steps=RERUN_STEPS)  # recorded first, then run
result = ex.q6.check(rerun_prediction, outcome=outcome)
result

# %% [markdown]
# ## Export the trained model (opt-in)
#
# `finish` saved the LoRA adapter (`RUN_DIR/adapter`, megabytes; on Colab on Drive): that is what 06 and a later
# run read. Anything bigger is written only when you ask, as Unsloth's notebooks end with `if False:` cells: a
# merged 16-bit model (`EXPORT_MERGED`; Unsloth's `model.save_pretrained_merged(..., save_method="merged_16bit")`),
# a GGUF file (`EXPORT_GGUF`; `model.save_pretrained_gguf(..., quantization_method="q4_k_m")`) and an upload
# (`HUB_REPO`). They go to this runtime's disk (`helpers.sharing.export_dir`), not to Drive, unless
# `EXPORT_TO_DRIVE = True`: a merged 1.5B model is about 3 GB of a free Drive's 15 GB. This model, on this GPU, is
# the one to export from; 06 shows each export step by step on the embedded model. To export after the run
# finished, set a flag in a new cell and run this cell again.

# %%
exports = sharing.export_dir(kit.run_dir, to_drive=EXPORT_TO_DRIVE)  # this runtime's disk unless EXPORT_TO_DRIVE
adapter = state.run_dir / "adapter"  # what finish saved; on the CPU the merges start from it (GPU: the model)
merged = None
if EXPORT_MERGED:  # GPU: Unsloth's save_pretrained_merged; CPU: peft's merge_and_unload
    merged = sharing.export_merged(model, tokenizer, exports / "merged", kit.preset, adapter,
                                   overwrite=OVERWRITE_EXPORTS)
if EXPORT_GGUF:  # GPU: Unsloth, the merge in gguf/ and the .gguf in gguf_gguf/; CPU: an F16 .gguf in gguf/
    gguf = sharing.export_gguf(model, tokenizer, exports / "gguf", kit.preset, adapter, overwrite=OVERWRITE_EXPORTS)
    print("GGUF:", gguf)
if HUB_REPO:  # private; the token comes from Colab secrets or HF_TOKEN and is never printed
    print("uploaded:", sharing.push_folder(merged or adapter, HUB_REPO))
if not (EXPORT_MERGED or EXPORT_GGUF or HUB_REPO):
    print(f"No export asked for: the adapter is in {adapter}. Set EXPORT_MERGED = True, EXPORT_GGUF = True or "
          f"HUB_REPO = \"your-name/model\" to write more (into {exports}).")

# %% [markdown]
# ## The policy update, by hand
#
# What did one of those steps do? Lesson 08 takes one GRPO step from scratch on the embedded model, on any runtime
# in a few minutes: one sampled group, its rewards and advantages, the token-level loss written by you and checked
# against TRL's own `GRPOTrainer._compute_loss`, one optimizer step, and the rewarded completion's probability going
# up. The exercises below take the same loss apart: its clipping and its KL term.

# %% [markdown]
# ## What the kit's own runs show
#
# One run says little: the same recipe with another seed draws other questions and other samples. The kit ships the
# logs of its own measured CPU runs (`results/cpu-runs/`, each with the command that made it and the commit it ran
# from; `helpers.teaching.measured_runs` reads them): the cpu preset on three seeds, and changes to it. The table
# lists every setting each run changed from the preset, read from the command in its `run.json` (the seed aside): most
# change one, and `earlier-recipe-seed2` changed two at once. A 40-step run takes 10-15 minutes on 2 cores; reading
# its log takes none.

# %%
for name in measured_runs.names():
    run = measured_runs.load(name)
    before, after = run.meta["before"], run.meta["after"]
    print(f"{name:<22} changed {run.changes():<42} accuracy {before['accuracy']:.2f} -> {after['accuracy']:.2f}, "
          f"format {before['format_rate']:.2f} -> {after['format_rate']:.2f}")

# %% [markdown]
# **Exercise 5.7 (predict, then look).** Four of those runs, drawn below from their logs: the total reward (black),
# the correctness reward (green), and on the right axis the policy's entropy (dotted) and the share of groups with
# zero spread (dashed). Which of them **learned**, that is, answered more of 50 held-out questions right after
# training than before? Answer `"learned"` or `"did not learn"` for each, in a dict `learned_or_not`, before you
# look at their names. The check reads each run's accuracy from its `run.json`, and when you are wrong it says what
# the curves showed.

# %%
fig = ex.q7.plot()  # runs A-D (ex.q7.runs() gives their logs)

# %% tags=["solution"]
# Exercise 5.7: for runs A-D, "learned" or "did not learn" (held-out accuracy after training against before)
# SOLUTION
learned_or_not = {"A": "did not learn", "B": "learned", "C": "did not learn", "D": "learned"}

# %%
result = ex.q7.check(learned_or_not)
for letter, run in ex.q7.runs().items():  # the names, now
    print(f"run {letter} = {run.label()}")
    print(f"    its most common answers to the 50 held-out questions after training: {run.common_answers()}")
result

# %% [markdown]
# **Exercise 5.8.** The per-token objective in GRPO's policy update is PPO's clipped surrogate, which GRPO
# keeps. Write `clipped_objective(ratio, advantage, epsilon=0.2)`: `min(ratio x A, clip(ratio, 1 - epsilon,
# 1 + epsilon) x A)`. The check then compares it with `helpers.teaching.grpo_math.policy_loss` (TRL's loss is minus it).

# %% tags=["solution"]
# Exercise 5.8: write clipped_objective(ratio, advantage, epsilon=0.2), PPO's clipped surrogate for one token
# SOLUTION
def clipped_objective(ratio, advantage, epsilon=0.2):
    clipped = max(1 - epsilon, min(ratio, 1 + epsilon))
    return min(ratio * advantage, clipped * advantage)

# %%
result = ex.q8.check(clipped_objective)
if result.passed:
    import math

    for r, a in [(1.5, 1.0), (0.5, 1.0), (0.5, -1.0), (1.5, -1.0)]:
        trl_loss = float(grpo_math.policy_loss([[math.log(r)]], [[0.0]], [a], [[1]], loss_type="grpo")["loss"])
        print(f"ratio {r}, advantage {a:+}: objective {clipped_objective(r, a):+.2f}, TRL's loss {trl_loss:+.2f}")
result

# %% [markdown]
# **Exercise 5.9.** What beta trades. With `beta > 0` TRL adds `beta x KL` to every token's loss, where KL is a
# per-token estimate of how far the policy has moved from the reference (the model before training):
# `exp(d) - d - 1` with `d = ref_logp - logp`. (TRL 1.15 also multiplies it by the token's ratio, its default
# `use_bias_correction_kl=True`: 1 in value when the batch was just sampled, but it changes the gradient;
# `helpers.teaching.grpo_math.policy_loss` does the same.) Write `kl_penalty(logp, ref_logp)`; the cell after it
# prints what beta = 0.04 adds to a token's loss as the policy moves away from the reference.

# %% tags=["solution"]
# Exercise 5.9: write kl_penalty(logp, ref_logp), TRL's per-token KL estimate exp(d) - d - 1 with d = ref_logp - logp
# SOLUTION
import math

def kl_penalty(logp, ref_logp):
    d = ref_logp - logp
    return math.exp(d) - d - 1

# %%
result = ex.q9.check(kl_penalty)
if result.passed:
    for logp in (-1.0, -0.5, -2.0, -4.0):
        penalty = 0.04 * kl_penalty(logp, -1.0)
        print(f"reference log-prob -1.0, policy {logp:+.1f}: beta x KL = {penalty:.4f} added to that token's loss")
result

# %% [markdown]
# ## Experiment: beta 0 against 0.04, measured over 40 steps
#
# Two of the kit's measured runs differ only in beta: the cpu preset at seed 0 (`beta = 0`, TRL's default: no
# reference model) and the same with `beta = 0.04`, which adds `0.04 x KL` to every token's loss (exercise {{exercise.kl_penalty}}) and
# a forward pass of the reference model (the adapter switched off) to every step. Both start from the same weights
# and draw the same first batch. A few live steps of each would show only noise, so this reads the 40-step logs.
#
# **Exercise 5.10 (predict, then look).** After 40 steps, how does the `beta = 0.04` run do on the 50 held-out
# questions, against the `beta = 0` run? Answer with one letter, then run the cell after the check:
#
# - **a**: better: the penalty stops the collapse onto one answer, so it keeps learning
# - **b**: worse: the penalty holds the policy near where it started, and 40 steps are not enough to move it
# - **c**: the same: 0.04 is too small to matter

# %% tags=["solution"]
# Exercise 5.10: predict beta = 0.04 against beta = 0 after 40 steps on held-out questions: "a", "b" or "c"
# SOLUTION
beta_prediction = "b"

# %%
import matplotlib.pyplot as plt

result = ex.q10.check(beta_prediction)
runs = {"beta = 0": measured_runs.load("default-seed0"), "beta = 0.04": measured_runs.load("beta-0.04")}
fig, (ax_r, ax_e, ax_kl) = plt.subplots(1, 3, figsize=(13, 3.2))
for label, run in runs.items():
    rows = run.sampled
    steps = [r["step"] for r in rows]
    ax_r.plot(steps, [r["rewards/correctness_reward/mean"] for r in rows], "o-", markersize=3, label=label)
    ax_e.plot(steps, [r["entropy"] for r in rows], "o-", markersize=3, label=label)
    kl = [(r["step"], r["kl"]) for r in rows if "kl" in r]  # TRL logs kl only when beta > 0 (no reference model)
    if kl:
        ax_kl.plot(*zip(*kl), "o-", markersize=3, color="tab:orange", label=label)
    print(f"{label}: accuracy {run.meta['before']['accuracy']:.2f} -> {run.meta['after']['accuracy']:.2f}; entropy "
          f"at the end {rows[-1]['entropy']:.2f}; " + (f"kl at the end {kl[-1][1]:.3f}" if kl else "kl not logged"))
ax_r.set_title("correctness reward"); ax_e.set_title("entropy (nats per token)"); ax_kl.set_title("kl to the start")
for ax in (ax_r, ax_e, ax_kl):
    ax.set_xlabel("step"); ax.legend(fontsize=8)
fig.tight_layout(); plt.show()
result

# %% [markdown]
# **Exercise 5.11 (a recipe, with its evidence).** You have seen seven measured runs of 40 steps. Choose the
# `learning_rate` (measured: 1e-3, 2.5e-4, and 5e-4 only together with `num_iterations=1`) and the `beta` (0.0,
# 0.04) you would train the cpu preset with, and justify each with the runs' names in `because`: for each setting, a
# run where your value learned, and a run where another value did not. A run that changed some other setting is not evidence for these two, and neither is a run
# that changed two settings at once (the table above lists what each changed): it cannot tell which one did it.

# %% tags=["solution"]
# Exercise 5.11: recipe_choice, a learning rate and a beta for 40 steps, each justified by the measured runs that show it
# SOLUTION
recipe_choice = {"learning_rate": 2.5e-4, "beta": 0.0,
                 "because": ["default-seed0", "default-seed1", "lr-1e-3", "beta-0.04"]}

# %%
ex.q11.check(recipe_choice)

# %% [markdown]
# ## Recap
#
# - The preset is the recipe; `GRPOConfig(...)` takes its values, adapted to the card (fp16 on a T4, `use_cpu` on CPU); `GRPOTrainer(...)` gets the model, the rewards and the data; `trainer.train()` runs it.
# - Memory on a T4 is decided by vLLM's reservation, completions per step and completion length more than by the weights.
# - vLLM's reservation is sized, not guessed: weights + the KV cache of the sequences sampled at once (2 x layers x KV heads x head size x 2 bytes per token) + its workspace, with a margin, as a fraction of the memory free at load (exercise {{exercise.vllm_sizing}}).
# - Watch the dashboard: groups with zero spread teach nothing; answers at the cap score low; a falling reward means hacking or a too-high learning rate.
# - Checkpoints make a disconnect cheap: run the notebook again with the same RUN_DIR and it resumes.
#
# ## Exercises
#
# 1. Does beta = 0.04 catch up with more steps? Train it for 80 (`python -m helpers.train --preset cpu --beta 0.04 --max-steps 80 --run-dir runs/beta-80`, about 15-30 minutes on 2 cores), ship it beside the others (`scripts/ship_cpu_run.py`) and compare its accuracy, entropy and `kl` with the 40-step runs.
# 2. Interrupt the training cell (the stop button) after a checkpoint, then run it again. From which step does it resume, and what happened to `metrics.jsonl`?
# 3. Open `samples.jsonl` in the run folder and find a question the model got right after training and wrong before.
