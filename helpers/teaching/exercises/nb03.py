"""Lesson 03 data: gsm8k_to_row (a GSM8K record -> the kit's training row) and questions_per_run."""

from __future__ import annotations

from helpers.config import get_preset
from helpers.teaching.exercises.core import Exercise, Fail, call, close, numbered

LESSON = "03"


# (max_steps, completions per step, num_generations): the cpu and t4 presets' shapes and the same budgets split into
# smaller or larger groups.
QUESTIONS_CASES = [(40, 8, 4), (40, 8, 8), (250, 6, 6), (40, 8, 2), (100, 32, 8), (10, 16, 16), (30, 12, 4)]


def questions_truth(max_steps: int, completions_per_step: int, num_generations: int) -> int:
    """The prompts a run draws, from the kit's own Preset.prompts_per_step (one process, no accumulation)."""
    preset = get_preset("cpu").with_overrides(max_steps=max_steps, per_device_train_batch_size=completions_per_step,
                                              gradient_accumulation_steps=1, num_generations=num_generations)
    return preset.prompts_per_step * preset.max_steps


def _judge_questions(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: questions_per_run, not questions_per_run(40, 8, 8)")
    for steps, batch, g in QUESTIONS_CASES:
        case = f"max_steps={steps}, {batch} completions per step, num_generations={g}"
        got = call(case, fn, steps, batch, g)
        want = questions_truth(steps, batch, g)
        if close(got, want, 1e-9):
            continue
        why = "each step's completions come in groups of num_generations, one group per question"
        if close(got, steps * batch, 1e-9):
            why = ("that counts completions: every question is answered num_generations times (its group, GRPO's "
                   "baseline), so divide by num_generations")
        elif close(got, steps * g, 1e-9):
            why = ("the batch counts completions, not questions (TRL >= 0.18): questions per step = completions "
                   "per step / num_generations")
        elif close(got, batch / g, 1e-9):
            why = "that is one step's questions: the run takes max_steps steps"
        raise Fail(case, f"for {case} you returned {got!r}; it should be {want}: {why}.")


# Rows with the edges the real split has (commas in thousands, negative numbers, stray spaces), next to the
# shipped sample's real rows.
GSM8K_EDGE_RECORDS = [
    {"question": "A farm sells 1,250 eggs a day. How many does it sell in 4 days?",
     "answer": "It sells 1,250 * 4 = <<1250*4=5000>>5,000 eggs.\n#### 5,000"},
    {"question": "The temperature was 4 degrees and fell by 7. What is it now?",
     "answer": "It is 4 - 7 = <<4-7=-3>>-3 degrees.\n#### -3"},
    {"question": "Tom has 3 bags of 4 apples. How many apples?", "answer": "3 * 4 = <<3*4=12>>12\n####   12  "},
]


def _messages_diff(got, want, worked_example: bool) -> str:
    """Why a prompt is not the kit's prompts.build_messages(question, worked_example)."""
    if isinstance(got, str):
        return ("the prompt is one string; TRL's conversational datasets take a list of chat messages "
                "[{'role': 'system', ...}, ..., {'role': 'user', 'content': question}]: "
                "prompts.build_messages(question, worked_example=...) builds it")
    if not isinstance(got, list) or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in got):
        return f"the prompt should be a list of {{'role', 'content'}} dicts, got {got!r:.120}"
    if not got or got[0].get("role") != "system":
        return ("there is no system message first: it carries the answer format (prompts.SYSTEM_PROMPT) the rewards "
                "check")
    if len(got) != len(want):
        return (f"worked_example={worked_example} should {'include' if worked_example else 'leave out'} the solved "
                f"example turn (a user question and the assistant's tagged answer): you have {len(got)} messages, "
                f"the kit {len(want)}. Pass worked_example on to prompts.build_messages")
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"message {i} is {a!r:.100}; it should be {b!r:.100}"
    return ""


def _judge_gsm8k_row(fn, records=()):
    from helpers.data import gsm8k_rows, gsm8k_sample

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: gsm8k_to_row, not gsm8k_to_row(record)")
    cases = [(f"edge row {i} (gold line {r['answer'].split('####')[-1]!r})", r, True)
             for i, r in enumerate(GSM8K_EDGE_RECORDS)]
    cases += [(f"the shipped GSM8K {split} row {i}", r, i % 2 == 0)
              for split in ("train", "test") for i, r in enumerate(gsm8k_sample(split))]
    cases += [(f"row {i} of the records above", r, i % 2 == 1) for i, r in enumerate(records)]
    for case, record, worked in cases:
        case = f"{case}, worked_example={worked}"
        got = call(case, fn, dict(record), worked_example=worked)
        want = gsm8k_rows([record], worked_example=worked)[0]
        if not isinstance(got, dict):
            raise Fail(case, f"on {case} you returned {type(got).__name__} {got!r:.80}; return a dict "
                             "{'prompt': [...], 'answer': '...', 'question': '...'}")
        missing = [k for k in want if k not in got]
        if missing:
            raise Fail(case, f"on {case} your row has keys {sorted(got)}; it needs {sorted(want)} (missing: "
                             f"{', '.join(missing)}). TRL reads 'prompt'; the rewards get 'answer' as a keyword.")
        answer, gold = got["answer"], want["answer"]
        if answer != gold:
            why = f"the number after '####' is {gold!r}"
            if not isinstance(answer, str):
                why = (f"keep it a string ({gold!r}): a column holds one type, and a gold like '5,000' is text "
                       "until commas are stripped")
            elif "####" in answer or len(answer) > 3 * len(gold) + 10:
                why = "that is (part of) the worked solution: the gold answer is only the number after '####'"
            elif answer.replace(",", "") == gold:
                why = "strip the commas: GSM8K writes 5,000 where the rewards compare the number 5000"
            elif answer.strip() == gold:
                why = "strip the spaces around the number"
            raise Fail(case, f"on {case} your answer is {answer!r}; {why}.")
        problem = _messages_diff(got["prompt"], want["prompt"], worked)
        if problem:
            raise Fail(case, f"on {case}: {problem}.")
        if got["question"] != want["question"]:
            raise Fail(case, f"on {case} 'question' is {got['question']!r:.80}; keep the record's question as is "
                             "(evaluation and samples.jsonl show it).")


gsm8k_to_row = Exercise(
    LESSON, "gsm8k_to_row",
    hint=("the training row is what the reward functions and the trainer read: which part of GSM8K's answer is the gold "
          "number, and which messages does the model see?",
          "the gold is the text after the last '####', without spaces or thousands commas; the prompt is a list of chat "
          "messages that helpers.prompts builds for you.",
          "gold = record['answer'].split('####')[-1].strip().replace(',', ''); messages = "
          "prompts.build_messages(record['question'], worked_example=worked_example)."),
    judge=_judge_gsm8k_row,
    success="it builds the same rows as the kit's data.gsm8k_rows, the ones the t4 preset trains on.")

questions_per_run = Exercise(
    LESSON, "questions_per_run",
    hint="a step samples completions_per_step completions, num_generations of them for each question (its group).",
    judge=_judge_questions,
    success="GRPO spends its sampling budget on depth (G answers per question), not breadth: a run reads "
            "few questions, so which ones matters (Preset.prompts_per_step agrees).")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
