# %% [markdown]
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/grpo-course-kit/grpo-course-kit/blob/main/notebooks/03_data.ipynb)
#
# # 03 · The data: questions, answers and the answer format
#
# GRPO needs prompts and a way to check answers. The t4 preset trains on GSM8K (grade-school math word problems); the cpu preset on an offline synthetic set of one-step word problems with the same columns. On any runtime this lesson also shows real GSM8K rows: from the Hugging Face Hub when it can be reached, else from a sample shipped with the kit.
#
# ## Learning objectives
#
# - Know the columns every row has: `prompt` (chat messages), `answer` (the gold number), `question`.
# - Read a real GSM8K row, then write the function that turns it into a training row: chat messages and the gold number after `#### N`.
# - Read the answer format the rewards check: `<reasoning>...</reasoning>` then `<answer>...</answer>`.
# - See why a worked example is in the prompt for a small model.
# - Measure prompt lengths and filter long prompts before training (`helpers.data.filter_long_prompts`).
#
# **Expected time on a Colab CPU runtime** (this lesson needs no GPU): about 2 min (estimate, not yet measured). On a CPU with the embedded model: under a minute.
#
# Run the cells from top to bottom. The first code cell holds the parameters, the second is the setup cell (the same in every notebook).

# %% tags=["parameters"]
# Parameters (papermill overrides these; CI runs tiny values). None means "the preset's own value".
PRESET = None                 # None: "t4" when a GPU is visible, else "cpu" (the embedded SmolLM2-135M)
LESSON = "03_data"            # docs/colab.md: no GPU needed - runs on a Colab CPU runtime with the embedded model
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

# %%
from helpers import data, prompts
from helpers.teaching.exercises import nb03 as ex  # this lesson's self-checking exercises

dataset = data.training_questions(kit.preset)  # the questions helpers.train trains on, as a datasets.Dataset
print(f"{len(dataset)} training questions from the {kit.preset.dataset!r} set; columns: {dataset.column_names}")
row = dataset[0]
print("\nquestion:", row["question"])
print("gold answer:", row["answer"])
print("\nprompt (chat messages):")
for message in row["prompt"]:
    print(f"  [{message['role']}] {message['content']}")

# %% [markdown]
# ## What 05 trains on, and GSM8K
#
# - **t4** ({{t4.model_name|name}} on a Colab T4): GSM8K's train split ({{t4.train_size}} questions), evaluated on its test
#   split, prompts without the worked example.
# - **cpu** (the embedded SmolLM2-135M): the synthetic set (the cell above prints it on a CPU). It needs no
#   download (CI has no Hub), and its one-step questions are ones a 135M model sometimes gets right. GSM8K problems
#   take several steps, which a model that small rarely gets right, and a group of answers that are all wrong
#   teaches GRPO nothing (05 shows why). Most of their solutions are also longer than a CPU completion's budget
#   (counted below).
#
# GSM8K's `answer` column is a worked solution: calculator annotations `<<48/2=24>>` in the steps, the final number
# after `####`. `data.gsm8k_records` returns those records and prints where they came from:

# %%
from helpers.config import get_preset

t4 = get_preset("t4")
records = data.gsm8k_records("train", limit=40)  # the real split, or the kit's sample when the Hub is out of reach
print("\nquestion:", records[0]["question"])
print("solution (GSM8K's answer column):\n  " + records[0]["answer"].replace("\n", "\n  "))

# %% [markdown]
# **Exercise 3.1.** Turn a GSM8K record into a row GRPO can train on. `GRPOTrainer` reads the `prompt` column (chat
# messages); every other column reaches the reward functions as a keyword argument, so `answer` must be what the
# correctness reward compares with: the gold number only, the text after `####` with spaces and commas stripped
# (`1,000` -> `1000`). Fill in `gsm8k_to_row(record, worked_example=True)`; `prompts.build_messages(question,
# worked_example=...)` builds the messages (the system prompt with the answer format, then, if asked, one solved
# example, then the question). The check runs it on the GSM8K rows shipped with the kit, on rows with the edges of the
# real split (thousands, negative numbers), and on the records above. Each exercise in this course has a check cell
# like it: it says which case failed and why; `ex.q1.hint()` nudges, `ex.q1.solution()` shows an answer.

# %% tags=["solution"]
# Exercise 3.1: write gsm8k_to_row(record, worked_example=True): one GSM8K record -> {"prompt", "answer", "question"}
# SOLUTION
def gsm8k_to_row(record, worked_example=True):
    """One GSM8K record {"question", "answer"} -> the row GRPOTrainer trains on: {"prompt", "answer", "question"}."""
    solution = record["answer"]  # the worked solution; its last line is "#### <number>"
    gold = solution.split("####")[-1].strip().replace(",", "")  # blank: the number after "####", spaces and commas stripped
    messages = prompts.build_messages(record["question"], worked_example=worked_example)  # blank: the chat messages
    return {"prompt": messages, "answer": gold, "question": record["question"]}


# %%
result = ex.q1.check(gsm8k_to_row, records=records)
# Yours once it passes; until then the kit's data.gsm8k_rows (the same rows), so the lesson goes on.
gsm8k = ([gsm8k_to_row(r, worked_example=t4.worked_example) for r in records] if result.passed
         else data.gsm8k_rows(records, worked_example=t4.worked_example))
print("gold answer:", gsm8k[0]["answer"])
print("prompt (chat messages, as the t4 preset builds them):")
for message in gsm8k[0]["prompt"]:
    print(f"  [{message['role']}] {message['content']}")
result

# %% [markdown]
# ## The answer format
#
# One place defines it (`helpers/prompts.py`): the system prompt, the tags and `format_completion`. The rewards
# and the evaluation read answers with `extract_answer` (the last `<answer>` block). GSM8K's gold answers come after
# `####`; `parse_gsm8k_answer` strips commas and `$`, as OpenAI's grader does.

# %%
print("system prompt:", prompts.SYSTEM_PROMPT)
example = prompts.format_completion("3 bags with 4 apples is 3 * 4 = 12.", "12")
print("\na completion in the format:\n" + example)
print("\nextract_answer ->", repr(prompts.extract_answer(example)))
print("extract_answer without tags ->", repr(prompts.extract_answer("The answer is 12.")))
print("GSM8K gold 'She pays 500 + 500 = 1,000.\n#### 1,000' ->", data.parse_gsm8k_answer("She pays 500 + 500 = 1,000.\n#### 1,000"))

# %% [markdown]
# ## Why long prompts are filtered
#
# Since TRL 1.0 `GRPOTrainer` no longer truncates prompts (`max_prompt_length` was removed). Every prompt is
# copied into `num_generations` sequences, and memory grows with the longest one, so a single long question can
# push one step past the budget - an out-of-memory error after 100 good steps. The kit drops prompts longer than
# the preset's `max_prompt_length` before training, so every step has a known maximum size.

# %%
from transformers import AutoTokenizer
from helpers.model import prepare_embedded_model
from helpers.teaching import course

# The tokenizer alone, without the model: the embedded SmolLM2's folder on a CPU, the Hub model on a GPU.
source = prepare_embedded_model() if kit.preset.backend.is_cpu else kit.preset.model_name
tokenizer = AutoTokenizer.from_pretrained(source)
lengths = [data.prompt_token_length(tokenizer, row["prompt"]) for row in dataset]  # chat template applied
limit = kit.preset.max_prompt_length
print(f"prompt tokens: min {min(lengths)}, median {sorted(lengths)[len(lengths) // 2]}, max {max(lengths)}; limit {limit}")
course.plot_prompt_lengths(lengths, limit, title=f"{kit.preset.dataset} prompts");

# %%
kept, dropped = data.filter_long_prompts(dataset, tokenizer, limit)
print(f"max_prompt_length={limit}: kept {len(kept)}, dropped {dropped}")
# A tighter limit shows the filter at work on any dataset (the synthetic questions are all short):
tight = sorted(lengths)[len(lengths) // 2]
kept_tight, dropped_tight = data.filter_long_prompts(dataset, tokenizer, tight)
print(f"max_prompt_length={tight} (the median): kept {len(kept_tight)}, dropped {dropped_tight}")

# %%
# The GSM8K rows above, counted with the same tokenizer (on a CPU SmolLM2's; the t4's Qwen tokenizer counts a little
# differently). Their solutions are what a completion has to write, tags aside.
gsm8k_lengths = [data.prompt_token_length(tokenizer, r["prompt"]) for r in gsm8k]
solution_lengths = [len(tokenizer(r["answer"])["input_ids"]) for r in records]
print(f"GSM8K prompts ({len(gsm8k)}): min {min(gsm8k_lengths)}, median {sorted(gsm8k_lengths)[len(gsm8k) // 2]}, "
      f"max {max(gsm8k_lengths)}; {sum(n > t4.max_prompt_length for n in gsm8k_lengths)} over the t4 limit "
      f"{t4.max_prompt_length}")
print(f"GSM8K solutions: median {sorted(solution_lengths)[len(records) // 2]} tokens, max {max(solution_lengths)}; "
      f"completion budget: t4 {t4.max_completion_length}, cpu {get_preset('cpu').max_completion_length}")

# %% [markdown]
# ## The worked example costs tokens
#
# A small model almost never produces the tags from the instruction alone, and when every completion in a group
# scores the same, GRPO learns nothing. One solved example as a prior chat turn makes some completions tagged.
# It is paid for in prompt tokens, re-read for every completion:

# %%
question = dataset[0]["question"]
with_example = data.prompt_token_length(tokenizer, prompts.build_messages(question, worked_example=True))
without = data.prompt_token_length(tokenizer, prompts.build_messages(question, worked_example=False))
print(f"prompt tokens with the worked example: {with_example}, without: {without}")

# %% [markdown]
# **Exercise 3.2.** How many questions does training read? A GRPO step samples a fixed number of completions
# (TRL's `per_device_train_batch_size` counts completions, not prompts), and spends them on depth: `num_generations`
# answers to each question, the group that serves as its own baseline. Write
# `questions_per_run(max_steps, completions_per_step, num_generations)`: how many questions (prompts) a run draws
# from the training set. The check compares it with the kit's `Preset.prompts_per_step`, then sets it beside this
# preset's training set.

# %% tags=["solution"]
# Exercise 3.2: write questions_per_run(max_steps, completions_per_step, num_generations): the prompts a run draws
# SOLUTION
def questions_per_run(max_steps, completions_per_step, num_generations):
    return max_steps * completions_per_step // num_generations


# %%
result = ex.q2.check(questions_per_run)
if result.passed:
    p = kit.preset
    budget = p.per_device_train_batch_size * p.gradient_accumulation_steps
    sampled = data.sampling_steps(p)  # TRL samples on these steps only: num_iterations reuses each batch
    used = questions_per_run(sampled, budget, p.num_generations)
    assert used == data.questions_per_run(p)  # the kit's count, by TRL's sampler arithmetic
    print(f"this preset: {p.max_steps} steps, num_iterations={p.num_iterations}: TRL samples on {sampled} of them; "
          f"{sampled} x {budget} completions, groups of {p.num_generations} -> {used} questions "
          f"of the {len(dataset)} in the training set ({used / len(dataset):.1%})")
    for g in sorted({2, 4, p.num_generations, 16} & {d for d in range(2, budget + 1) if budget % d == 0}):
        print(f"  the same {budget} completions per step in groups of {g}: {questions_per_run(sampled, budget, g)} "
              "questions")
result

# %% [markdown]
# One more count: TRL samples only on some steps. With `num_iterations=2` (the cpu preset) each sampled batch is
# trained on twice, so the second step of each pair samples nothing: a 40-step run samples on 20 steps and reads 20
# questions, not 40 (`data.questions_per_run(preset)` counts them as TRL's sampler draws them; 05 shows the rewards
# logged only on those steps). That is why the cell above passes your function the sampling steps, not `max_steps`:
# your arithmetic holds per sampling step.
#
# A run reads a small share of its training set, each question answered `num_generations` times. Smaller groups
# would read more questions at the same cost, but each group's mean is a rougher baseline and more groups come out
# all-right or all-wrong, with no spread and so no signal (05 puts a number on it). So the questions that are drawn
# should be ones the model sometimes solves: neither hopeless nor trivial for it. On the synthetic set,
# `data.synthetic_problems(n, levels=...)` sets that difficulty (exercise 1 below).

# %% [markdown]
# ## Recap
#
# - Every row has `prompt`, `answer` and `question`; the rewards read `answer`. You wrote the GSM8K mapping the t4 preset trains on.
# - A GRPO step spends its completions on depth: `num_generations` answers per question, so a run reads `sampling steps x completions per step / num_generations` questions (sampling steps = `max_steps / num_iterations`: 20 for the 40-step cpu run) - few, so choose them well.
# - The format is defined once in `helpers/prompts.py`; answers are read from the last `<answer>` block.
# - TRL no longer truncates prompts: `filter_long_prompts` keeps every step within the memory budget.
#
# ## Exercises
#
# 1. Make a harder synthetic set: `data.synthetic_problems(200, levels=(1, 2, 3))`. How do prompt lengths change?
# 2. Lower `max_prompt_length` until a quarter of the prompts are dropped. What does that cost the training set?
# 3. Which GSM8K questions in `gsm8k` are the longest? Print the three longest and decide whether you would keep them.
