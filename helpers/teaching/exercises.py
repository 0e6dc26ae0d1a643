"""Exercises that check themselves (in the spirit of Kaggle's learntools), one namespace per notebook.

    from helpers.teaching.exercises import nb04 as ex
    ex.q1.hint()                       # a nudge
    ex.q1.check(brevity_reward)        # runs hidden test cases; says which case failed and why
    ex.q1.solution()                   # prints a reference solution

check() returns a CheckResult (passed, message, case); in a notebook its text is shown as the cell's output.
A failing check names the case ("your reward gave 0.5 to a 300-word answer; it should be 0.0 ...") and never
raises, so the rest of the notebook keeps running. Student code that raises is reported the same way.

The truth is never a copy of the answer: the checkers ask the kit's own helpers (helpers.teaching.grpo_math for advantages,
helpers.config's Preset.prompts_per_step for the questions a run draws, helpers.memory.estimate for memory,
helpers.run.dashboard's warning functions for training curves, helpers.evaluation.pass_at_k for pass@k), so a change
of preset values or formulas moves the expected answers with them. tests/test_exercises.py runs every checker
against known-wrong and known-right answers.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

from helpers.config import get_preset
from helpers.evaluation import pass_at_k
from helpers.memory import T4_BUDGET_GB, estimate
from helpers.teaching.grpo_math import group_advantages

_MISSING = object()


@dataclass
class CheckResult:
    passed: bool
    message: str
    case: str | None = None  # the hidden case that failed (None when passed or not answered)

    def __repr__(self) -> str:
        mark = "Correct!" if self.passed else "Not yet."
        return f"{mark} {self.message}"

    __str__ = __repr__


class Fail(Exception):
    """Raised by a judge: the case that failed and what was wrong."""

    def __init__(self, case: str, message: str):
        super().__init__(message)
        self.case, self.message = case, message


class NotAnswered(Exception):
    """The student's function still raises NotImplementedError (the student copy's placeholder)."""


def call(case: str, fn, *args, **kwargs):
    """Run the student's function on a hidden case; an exception becomes feedback that names the case."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotAnswered() from None
    except Exception as err:  # noqa: BLE001 - any error in student code is feedback, not a crash
        raise Fail(case, f"on {case} your function raised {type(err).__name__}: {err}") from None


class Exercise:
    def __init__(self, qid: str, task: str, hint: str, solution: str, judge, success: str = ""):
        self.qid, self.task, self._hint, self._solution, self._judge = qid, task, hint, solution, judge
        self.success = success

    def check(self, answer=_MISSING, **context) -> CheckResult:
        """context: what a judge needs from the notebook besides the answer (e.g. the real records it also tries)."""
        if answer is _MISSING or answer is None or answer is Ellipsis:
            return self._not_answered()
        blanks = blanks_left(answer)
        if blanks:
            return self._not_answered(f"{blanks} blank{'s' if blanks > 1 else ''} (`...`) left in "
                                      f"{getattr(answer, '__name__', 'your answer')}. ")
        try:
            self._judge(answer, **context)
        except NotAnswered:
            return self._not_answered()
        except Fail as f:
            return CheckResult(False, f.message, f.case)
        return CheckResult(True, self.success or "every hidden case passed.")

    def _not_answered(self, detail: str = "") -> CheckResult:
        return CheckResult(False, f"not answered yet: {detail}write your answer in the cell above, run it, then run "
                                  f"this check again. The task: {self.task}")

    def hint(self, level: int = 1) -> None:
        """A nudge; where the exercise has several (a tuple), hint(2), hint(3) ... say more, the last nearly the
        answer (as Kaggle Learn's)."""
        hints = (self._hint,) if isinstance(self._hint, str) else tuple(self._hint)
        level = max(1, min(level, len(hints)))
        more = f" (more: ex.{self.qid}.hint({level + 1}))" if level < len(hints) else ""
        print(f"Hint ({self.qid}{f', {level} of {len(hints)}' if len(hints) > 1 else ''}): {hints[level - 1]}{more}")

    def solution(self) -> None:
        print(f"Solution ({self.qid}):\n{textwrap.dedent(self._solution).strip()}")

    def __repr__(self) -> str:
        return f"<exercise {self.qid}: {self.task} - .check(answer), .hint(), .solution()>"


def blanks_left(fn) -> int:
    """How many `...` of a partial scaffold (scripts/make_student_notebooks.py) are still in a function's code: a
    blank is not a wrong answer, and running it would only fail somewhere inside TRL."""
    if not callable(fn):
        return 0
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return 0
    return sum(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree))


class _Recorder:
    """Stands in for a class the student's function calls (GRPOConfig, GRPOTrainer): records the arguments."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __call__(self, *args, **kwargs):
        self.calls.append(inspect.signature(self.real).bind_partial(*args, **kwargs).arguments)
        return self.calls[-1]


@contextmanager
def _intercept(fn, name: str, real):
    """While judging, `name` in the student's function's module is a _Recorder: the function's call to it is read,
    not run (a T4's fp16=True config cannot be built on a CPU, and a trainer would load the model)."""
    g = fn.__globals__
    if g.get(name) is not real:
        raise Fail("the answer", f"{fn.__name__} should call {name}(...) imported from trl (`from trl import {name}`)"
                                 f"; {name} in its module is {g.get(name)!r}")
    g[name] = recorder = _Recorder(real)
    try:
        yield recorder
    finally:
        g[name] = real


def _close(a, b, tol=1e-3) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except (TypeError, ValueError):
        return False


# =========================================================================================== 01 setup

# (right answers, group size): hard questions (1 right), easy ones (all but 1 right), even ones, and groups with no
# spread (every completion right, or every one wrong) - those last so a division by zero is named plainly.
RIGHT_WRONG_CASES = [(1, 4), (3, 4), (2, 4), (1, 8), (7, 8), (4, 8), (1, 2), (2, 6), (0, 4), (4, 4), (0, 8), (8, 8)]


def right_wrong_truth(n_right: int, group_size: int) -> tuple[float, float]:
    """(advantage of a right answer, of a wrong one) in a group of group_size completions of which n_right scored 1
    and the rest 0, by helpers.teaching.grpo_math.group_advantages (TRL's default scale_rewards='group')."""
    adv = group_advantages([1.0] * n_right + [0.0] * (group_size - n_right))
    return (adv[0] if n_right else 0.0), (adv[-1] if n_right < group_size else 0.0)


def _judge_right_wrong(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: right_wrong_advantages, not right_wrong_advantages(1, 4)")
    for k, g in RIGHT_WRONG_CASES:
        case = (f"{k} right of {g}" + (" (every completion right)" if k == g else " (every completion wrong)"
                                       if k == 0 else ""))
        want = right_wrong_truth(k, g)
        try:
            got = call(case, fn, k, g)
        except Fail as f:
            if k in (0, g):
                f.message += (" - when every completion scored the same there is nothing to compare: std 0, every "
                              "advantage 0, return (0.0, 0.0)")
            raise
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            raise Fail(case, f"for {case} you returned {got!r}; return a pair: (advantage of a right answer, "
                             "advantage of a wrong answer).")
        if _close(got[0], want[0], 2e-3) and _close(got[1], want[1], 2e-3):
            continue
        mean = k / g
        pop = math.sqrt(mean * (1 - mean))
        why = "reward minus the group's mean, divided by the group's sample std (n - 1) + 1e-4"
        if k in (0, g):
            why = "every completion scored the same: std 0, nothing to compare, every advantage is 0"
        elif pop > 0 and _close(got[0], (1 - mean) / pop, 2e-3) and _close(got[1], -mean / pop, 2e-3):
            why = "you divided by the population std (n); TRL uses the sample std (n - 1, trl.trainer.utils.nanstd)"
        elif _close(got[0], 1 - mean, 2e-3) and _close(got[1], -mean, 2e-3):
            why = "you subtracted the mean (the baseline) but did not divide by the group's std (+ 1e-4)"
        elif _close(got[0], want[1], 2e-3) and _close(got[1], want[0], 2e-3):
            why = "the pair is swapped: the right answer's advantage comes first"
        elif _close(got[0], 1.0, 2e-3) and _close(got[1], 0.0, 2e-3):
            why = "that is the raw reward: GRPO subtracts the group's mean, the baseline a value model would predict"
        raise Fail(case, f"for {case} you returned ({float(got[0]):.4f}, {float(got[1]):.4f}); it should be "
                         f"({want[0]:.4f}, {want[1]:.4f}): {why}.")


nb01 = SimpleNamespace(q1=Exercise(
    "q1", "write right_wrong_advantages(n_right, group_size) -> (advantage of a right answer, advantage of a wrong "
          "answer) when n_right of group_size completions scored 1 and the others 0",
    "the group's mean is n_right / group_size (the baseline, what a value model would have to predict); the sample "
    "std divides the sum of squared deviations by group_size - 1; add 1e-4 to it before dividing. All equal: (0, 0).",
    """
    import math

    def right_wrong_advantages(n_right, group_size):
        if n_right in (0, group_size):
            return 0.0, 0.0  # all equal: nothing to compare, nothing to learn
        mean = n_right / group_size
        squares = n_right * (1 - mean) ** 2 + (group_size - n_right) * mean ** 2
        std = math.sqrt(squares / (group_size - 1))
        return (1 - mean) / (std + 1e-4), (0 - mean) / (std + 1e-4)
    """,
    _judge_right_wrong, "the same reward of 1 is a big push on a hard question and a small one on an easy question - "
                        "the group did the value model's job (helpers.teaching.grpo_math.group_advantages agrees)."))


# =========================================================================================== 02 load model


def _tiny_models():
    import torch

    a = torch.nn.Linear(10, 10)  # 110 parameters, all trainable
    b = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 1, bias=False))  # 110 + 10
    for p in b[0].parameters():
        p.requires_grad_(False)
    c = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))  # 20 + 20, none trainable
    for p in c.parameters():
        p.requires_grad_(False)
    class Params4bit(torch.nn.Parameter):
        """bitsandbytes' 4-bit weight as peft sees it: two 4-bit values packed in each uint8 element."""

    d = torch.nn.Module()
    d.frozen = Params4bit(torch.zeros(50, dtype=torch.uint8), requires_grad=False)  # 100 packed 4-bit weights
    d.lora = torch.nn.Linear(10, 1, bias=False)  # 10 trainable
    return [("a Linear(10, 10) with every parameter trainable (110 of 110)", a, 1.0),
            ("a model with 10 trainable of 120 parameters (a frozen Linear(10, 10) + a trainable Linear(10, 1))", b,
             10 / 120),
            ("a fully frozen model (0 of 40 trainable)", c, 0.0),
            ("a 4-bit model as on the T4: 100 frozen 4-bit weights packed in 50 bytes (a Params4bit) + 10 trainable",
             d, 10 / 110)]


def _judge_trainable_fraction(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: trainable_fraction, not trainable_fraction(model)")
    for case, model, truth in _tiny_models():
        got = call(case, fn, model)
        if not _close(got, truth, 1e-6):
            extra = ""
            if "4-bit" in case and _close(got, 10 / 60, 1e-6):
                extra = (" (bitsandbytes packs two 4-bit weights in each byte, so numel() of a Params4bit counts "
                         "half of them: count it as numel() * 2 * element_size(), as peft's print_trainable_parameters "
                         "does)")
            elif truth and _close(got, 10 / 110, 1e-6):
                extra = " (trainable / FROZEN is not the fraction: divide by all parameters, trainable included)"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {truth:.4f}{extra}.")


nb02 = SimpleNamespace(q1=Exercise(
    "q1", "write trainable_fraction(model) -> the share of the model's parameters that training updates (0..1)",
    "model.parameters() yields tensors; p.numel() counts a tensor's values and p.requires_grad says if it trains.",
    """
    def trainable_fraction(model):
        def count(p):  # bitsandbytes packs two 4-bit weights per byte: numel() of a Params4bit counts half
            return p.numel() * 2 * p.element_size() if type(p).__name__ == "Params4bit" else p.numel()

        total = sum(count(p) for p in model.parameters())
        trainable = sum(count(p) for p in model.parameters() if p.requires_grad)
        return trainable / total if total else 0.0
    """,
    _judge_trainable_fraction, "LoRA trains a small fraction of the model; print trainable_fraction(model) to see it."))


# =========================================================================================== 03 data

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
        if _close(got, want, 1e-9):
            continue
        why = "each step's completions come in groups of num_generations, one group per question"
        if _close(got, steps * batch, 1e-9):
            why = ("that counts completions: every question is answered num_generations times (its group, GRPO's "
                   "baseline), so divide by num_generations")
        elif _close(got, steps * g, 1e-9):
            why = ("the batch counts completions, not questions (TRL >= 0.18): questions per step = completions "
                   "per step / num_generations")
        elif _close(got, batch / g, 1e-9):
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


nb03 = SimpleNamespace(q1=Exercise(
    "q1", "write gsm8k_to_row(record, worked_example=True): one GSM8K record {'question', 'answer'} -> the kit's "
          "row {'prompt': chat messages, 'answer': the gold number after '####' with commas stripped, 'question'}",
    ("the training row is what the reward functions and the trainer read: which part of GSM8K's answer is the gold "
     "number, and which messages does the model see?",
     "the gold is the text after the last '####', without spaces or thousands commas; the prompt is a list of chat "
     "messages that helpers.prompts builds for you.",
     "gold = record['answer'].split('####')[-1].strip().replace(',', ''); messages = "
     "prompts.build_messages(record['question'], worked_example=worked_example)."),
    """
    from helpers import prompts

    def gsm8k_to_row(record, worked_example=True):
        gold = record["answer"].split("####")[-1].strip().replace(",", "")
        messages = prompts.build_messages(record["question"], worked_example=worked_example)
        return {"prompt": messages, "answer": gold, "question": record["question"]}
    """,
    _judge_gsm8k_row, "it builds the same rows as the kit's data.gsm8k_rows, the ones the t4 preset trains on."),
    q2=Exercise(
    "q2", "write questions_per_run(max_steps, completions_per_step, num_generations) -> how many questions "
          "(prompts) a GRPO run draws from the training set",
    "a step samples completions_per_step completions, num_generations of them for each question (its group).",
    """
    def questions_per_run(max_steps, completions_per_step, num_generations):
        return max_steps * completions_per_step // num_generations
    """,
    _judge_questions, "GRPO spends its sampling budget on depth (G answers per question), not breadth: a run reads "
                      "few questions, so which ones matters (Preset.prompts_per_step agrees)."))


# =========================================================================================== 04 rewards

# (label, completion, gold, what it tests): the hand-written completions of the lesson's tables, the hacks, and the
# cases a reward written in ten minutes gets wrong. The kit's reward is the truth on each.
def reward_cases() -> list[tuple[str, object, str, str]]:
    from helpers.teaching import reward_lab

    perfect = reward_lab.HAND_WRITTEN["perfect"]
    why = {"right, no tags": "no <answer> block, no answer: the format is part of the task",
           "right, decorated": "compare answers as numbers (rewards.answers_match), not as strings",
           "right, 12.0": "compare answers as numbers (rewards.answers_match): 12.0 is 12",
           "answer tag only": "only the <answer> block is read, whatever else is missing",
           "hedged answer": "an answer with two numbers is wrong even if one is right, or hedging pays",
           "number dump": "an answer with several numbers is wrong, or listing numbers pays",
           "repeated tags": "the last <answer> block is the answer",
           "empty": "an empty completion scores 0"}
    cases = [(label, text, reward_lab.GOLD, why.get(label, "this completion is in the lesson's tables"))
             for label, text in {**reward_lab.HAND_WRITTEN, **reward_lab.HACKS}.items()]
    return cases + [
        ("a comma in the answer", "<reasoning>\n1000 in all.\n</reasoning>\n<answer>\n1,000\n</answer>", "1000",
         "compare answers as numbers (rewards.answers_match): 1,000 is 1000"),
        ("a dollar sign", "<reasoning>\nShe pays 18.\n</reasoning>\n<answer>\n$18\n</answer>", "18",
         "compare answers as numbers (rewards.answers_match): $18 is 18"),
        ("18.0 for 18", "<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n18.0\n</answer>", "18",
         "compare answers as numbers (rewards.answers_match): 18.0 is 18"),
        ("a hedge", "<reasoning>\nNot sure.\n</reasoning>\n<answer>\n11 or 12\n</answer>", "12",
         "an answer with two numbers is wrong even if one is right, or hedging pays (rewards.answers_match)"),
        ("two answer blocks, the last right", "<answer>7</answer> no, wait: <answer>12</answer>", "12",
         "the last <answer> block is the answer (prompts.extract_answer, rewards.answer_of)"),
        ("two answer blocks, the last wrong", "<answer>12</answer> no, wait: <answer>7</answer>", "12",
         "the last <answer> block is the answer (prompts.extract_answer, rewards.answer_of)"),
        ("a chat-format completion", [{"role": "assistant", "content": perfect}], reward_lab.GOLD,
         "TRL passes chat datasets' completions as [{'role': 'assistant', 'content': ...}]: "
         "rewards.completion_text(c) gives the text"),
        ("a chat-format completion, wrong", [{"role": "assistant", "content": perfect.replace("12", "13")}],
         reward_lab.GOLD, "TRL passes chat datasets' completions as [{'role': 'assistant', 'content': ...}]: "
         "rewards.completion_text(c) gives the text"),
        ("an empty completion", "", reward_lab.GOLD, "an empty completion scores 0"),
        ("a None completion", None, reward_lab.GOLD, "a missing completion (None) scores 0, it must not crash the run"),
        ("the perfect answer with spaces around it", f"  {perfect}\n\n", reward_lab.GOLD,
         "surrounding whitespace does not change the layout (strip the text first)"),
        ("the layout with a second reasoning block", perfect.replace("<answer>", "<reasoning>\nmore\n</reasoning>\n"
                                                                     "<answer>"), reward_lab.GOLD,
         "the strict layout has each tag exactly once"),
    ]


def _number(x) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) else repr(x)[:6]


def _judge_reward_against(kit_name: str, name: str):
    """A judge comparing a student's reward with helpers.rewards.<kit_name> on reward_cases(): the first differences,
    as a table."""
    def judge(fn):
        from helpers import rewards

        kit_reward = getattr(rewards, kit_name)
        if not callable(fn):
            raise Fail("the answer", f"pass the reward function itself: {name}, not {name}(...)")
        cases = reward_cases()
        rows = []
        for label, completion, gold, why in cases:
            try:
                got = call(f"the completion '{label}'", fn, prompts=[None], completions=[completion], answer=[gold])
            except Fail as f:
                raise Fail(f.case, f"{f.message}. {why}" if why else f.message) from None
            if not isinstance(got, (list, tuple)) or len(got) != 1:
                raise Fail(label, f"on '{label}' your reward returned {got!r:.80}; a TRL reward returns a list with "
                                  "one float per completion (here a list of length 1).")
            want = kit_reward(prompts=[None], completions=[completion], answer=[gold])[0]
            if not _close(got[0], want, 1e-9):
                rows.append((label, got[0], want, why))
        if rows:
            table = "\n".join(f"  {label[:40]:<40} {_number(got):>6} {want:>6g}  {why}"
                              for label, got, want, why in rows[:6])
            raise Fail(rows[0][0], f"your {name} differs from the kit's on {len(rows)} of {len(cases)} "
                                   f"completions:\n  {'completion':<40} {'yours':>6} {'kit':>6}\n{table}")
        batch = {label: (c, gold) for label, c, gold, _ in cases}
        texts, golds = zip(*(batch[k] for k in ("perfect", "a comma in the answer", "a dollar sign")))  # 12, 1000, 18
        got = call("a batch of three completions", fn, prompts=[None] * 3, completions=list(texts),
                   answer=list(golds))
        want = kit_reward(prompts=[None] * 3, completions=list(texts), answer=list(golds))
        if not isinstance(got, (list, tuple)) or [float(g) for g in got] != want:
            raise Fail("a batch of three completions", f"for a batch of three completions your reward returned "
                       f"{got!r:.80}; it should be {want}: one score per completion, in order, each with its own "
                       "gold answer (zip(completions, answer)).")
    return judge


MAX_WORDS = 100  # the limit of the brevity exercise
BREVITY_SCORE = 0.5


def _words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def _judge_brevity(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the reward function itself, not its result")
    cases = [
        ("a 10-word answer", _words(10), BREVITY_SCORE),
        (f"an answer of exactly {MAX_WORDS} words", _words(MAX_WORDS), BREVITY_SCORE),
        (f"a {MAX_WORDS + 1}-word answer", _words(MAX_WORDS + 1), 0.0),
        ("a 300-word answer", _words(300), 0.0),
        ("an empty answer", "", BREVITY_SCORE),
        ("a 300-word answer spread over many lines", "\n".join(_words(300).split(" ")), 0.0),
        ("a conversational completion ([{'role': 'assistant', 'content': <300 words>}], as TRL passes chat data)",
         [{"role": "assistant", "content": _words(300)}], 0.0),
    ]
    for case, completion, truth in cases:
        got = call(case, fn, prompts=[None], completions=[completion], answer=["12"])
        if not isinstance(got, (list, tuple)) or len(got) != 1:
            raise Fail(case, f"on {case} your reward returned {got!r}; a TRL reward returns a list with one float "
                             "per completion (here a list of length 1).")
        if not _close(got[0], truth, 1e-9):
            raise Fail(case, f"your reward gave {got[0]!r} to {case}; it should be {truth} "
                             f"({'within' if truth else 'over'} the {MAX_WORDS}-word limit).")
    batch = [_words(5), _words(500), _words(50)]
    got = call("a batch of three completions (5, 500 and 50 words)", fn, prompts=[None] * 3, completions=batch,
               answer=["1"] * 3)
    want = [BREVITY_SCORE, 0.0, BREVITY_SCORE]
    if not isinstance(got, (list, tuple)) or len(got) != 3 or not all(_close(g, w, 1e-9) for g, w in zip(got, want)):
        raise Fail("a batch of three completions (5, 500 and 50 words)",
                   f"for a batch of three completions (5, 500 and 50 words) your reward returned {got!r}; it should "
                   f"be {want} - one score per completion, in order.")


def _judge_advantages(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: my_advantages, not my_advantages([...])")
    cases = [[4.0, 0.0, 2.5, 0.0], [1.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.5, 1.0, 4.0, 0.0, 0.0, 2.5]]
    for rewards in cases:
        case = f"the group of rewards {rewards}"
        got = call(case, fn, list(rewards))
        truth = group_advantages(rewards)
        if not isinstance(got, (list, tuple)) or len(got) != len(rewards):
            raise Fail(case, f"for {case} you returned {got!r}; return one advantage per completion.")
        if all(_close(g, t, 2e-3) for g, t in zip(got, truth)):
            continue
        n = len(rewards)
        mean = sum(rewards) / n
        pop = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
        why = ""
        if pop > 0 and all(_close(g, (r - mean) / pop, 2e-3) for g, r in zip(got, rewards)):
            why = (" - you divided by the population std (n); TRL uses the sample std (n - 1, "
                   "trl.trainer.utils.nanstd)")
        elif all(_close(g, r - mean, 2e-3) for g, r in zip(got, rewards)):
            why = " - you subtracted the mean but did not divide by the group's std (+ 1e-4)"
        elif pop == 0:
            why = " - when every completion scored the same, every advantage is 0 (std 0, nothing to compare)"
        raise Fail(case, f"for {case} you returned {[round(float(g), 4) for g in got]}; it should be "
                         f"{[round(t, 4) for t in truth]}{why}.")


SHIFT_CHOICES = {
    "a": "the mean rises by 1 too, and the advantage is the reward MINUS the group's mean: the +1 cancels",
    "b": "the std is the spread around the mean, and adding 1 to every reward does not spread them: the +1 cancels "
         "in the difference and the std is unchanged",
    "c": "",
    "d": "the mean grew by 1, but so did every reward: reward - mean is unchanged",
}


def _letter(answer, choices: dict) -> str:
    """The letter a predict-then-run answer picked, or Fail naming the choices."""
    choice = answer.strip().lower()[:1] if isinstance(answer, str) else None
    if choice not in choices:
        letters = ", ".join(f"'{c}'" for c in choices)
        raise Fail("the answer", f"answer with one letter: {letters} (you gave {answer!r})")
    return choice


def _judge_shift(answer):
    choice = _letter(answer, SHIFT_CHOICES)
    before = group_advantages([4.0, 0.0, 2.0, 0.0])
    after = group_advantages([5.0, 1.0, 3.0, 1.0])
    truth = "c" if all(abs(x - y) < 1e-9 for x, y in zip(before, after)) else "a"
    if choice != truth:
        raise Fail(f"choice {choice}", f"not {choice!r}: {SHIFT_CHOICES[choice]}. Run the next cell to see it.")


nb04 = SimpleNamespace(
    q1=Exercise(
        "q1", "write my_correctness_reward(prompts, completions, answer, **kwargs): 2.0 when the last <answer> block "
              "equals the gold answer as a number, else 0.0",
        ("read the answer the way the evaluation does: only the last <answer> block counts, and numbers are compared "
         "as numbers, not as strings.",
         "answer_from(completion_text(completion)) gives the last block's text or None; answers_match(pred, gold) "
         "compares it with the gold as a number (1,000 = 1000, $18 = 18, 18.0 = 18, and '11 or 12' is wrong).",
         "pred = answer_from(completion_text(completion)); score = 2.0 if pred is not None and answers_match(pred, "
         "gold) else 0.0."),
        """
        from helpers.rewards import answers_match, completion_text
        from helpers.rewards import answer_of as answer_from  # the kit's twin of the lesson's answer_from

        def my_correctness_reward(prompts=None, completions=None, answer=None, **kwargs):
            scores = []
            for completion, gold in zip(completions, answer):
                pred = answer_from(completion_text(completion))
                score = 2.0 if pred is not None and answers_match(pred, gold) else 0.0
                scores.append(score)
            return scores
        """,
        _judge_reward_against("correctness_reward", "my_correctness_reward"),
        "it agrees with helpers.rewards.correctness_reward on every case, the tricky ones included."),
    q2=Exercise(
        "q2", "write my_strict_format_reward(prompts, completions, **kwargs): 0.5 for exactly the worked example's "
              "layout (each tag once, each on its own line), else 0.0",
        ("two conditions: the layout (STRICT, a regular expression) and no repeated tag; whitespace around the whole "
         "completion does not count.",
         "text = completion_text(completion).strip(); each_once = all(text.count(tag) == 1 for tag in TAGS); layout = "
         "STRICT.fullmatch(text) is not None."),
        r"""
        import re

        from helpers.rewards import completion_text

        TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
        STRICT = re.compile(r"<reasoning>\n.*\n</reasoning>\n<answer>\n.*\n</answer>", re.DOTALL)

        def my_strict_format_reward(prompts=None, completions=None, **kwargs):
            scores = []
            for completion in completions:
                text = completion_text(completion).strip()
                each_once = all(text.count(tag) == 1 for tag in TAGS)
                layout = STRICT.fullmatch(text) is not None
                scores.append(0.5 if each_once and layout else 0.0)
            return scores
        """,
        _judge_reward_against("strict_format_reward", "my_strict_format_reward"),
        "it agrees with helpers.rewards.strict_format_reward on every case."),
    q3=Exercise(
        "q3", f"write brevity_reward(prompts, completions, **kwargs): {BREVITY_SCORE} for a completion of at most "
              f"{MAX_WORDS} words (split on whitespace), 0.0 for a longer one",
        "a TRL reward returns [one float per completion]; helpers.rewards.completion_text(c) turns a chat-format "
        "completion into text; len(text.split()) counts words.",
        f"""
        from helpers.rewards import completion_text

        def brevity_reward(prompts=None, completions=None, **kwargs):
            return [{BREVITY_SCORE} if len(completion_text(c).split()) <= {MAX_WORDS} else 0.0 for c in completions]
        """,
        _judge_brevity, "add it to a table with reward_lab.score_table(..., rewards=[brevity_reward]) to see it."),
    q4=Exercise(
        "q4", "write my_advantages(rewards) -> GRPO's group-relative advantage of each completion in ONE group "
              "(TRL's default scale_rewards='group')",
        "subtract the group mean, then divide by the group's SAMPLE standard deviation (n - 1 in the denominator) "
        "plus 1e-4.",
        """
        import math

        def my_advantages(rewards):
            n = len(rewards)
            mean = sum(rewards) / n
            std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
            return [(r - mean) / (std + 1e-4) for r in rewards]
        """,
        _judge_advantages, "it matches helpers.teaching.grpo_math.group_advantages, which matches TRL 1.15."),
    q5=Exercise(
        "q5", "predict what adding 1 to every reward of a group does to its advantages: 'a', 'b', 'c' or 'd'",
        "the advantage is (reward - the group's mean) / the group's std: what does +1 do to each of the three?",
        """
        prediction = "c"  # only differences within a group count: the mean moves with the rewards, the std does not
        """,
        _judge_shift, "only differences within a group count: the reward's level is invisible to GRPO, only its "
                      "ranking and spread within the group matter."),
)


# =========================================================================================== 05 train

# (what the case is, preset, runtime): the config must follow the card, not be written for the one it runs on.
def config_cases():
    from helpers.runtime import fake_runtime

    return [("the cpu preset with beta=0.04 on a CPU", get_preset("cpu").with_overrides(beta=0.04), fake_runtime("cpu"),
             5),
            ("the t4 preset on a T4 (compute capability 7.5)", get_preset("t4"), fake_runtime("t4", on_colab=True), None),
            ("the t4 preset on an A100 (compute capability 8.0)", get_preset("t4"), fake_runtime("a100", on_colab=True),
             25)]


def _field_why(name: str) -> str:
    from helpers.teaching.course import CONFIG_WHY

    return CONFIG_WHY.get(name, "see helpers.config.grpo_config_kwargs")


def _judge_config(fn):
    import dataclasses

    from trl import GRPOConfig

    from helpers.config import grpo_config_kwargs

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: make_config, not make_config(...) or a GRPOConfig")
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for case, preset, runtime, save_steps in config_cases():
        with _intercept(fn, "GRPOConfig", GRPOConfig) as rec:
            call(case, fn, preset, runtime, "runs/check", save_steps)
        if len(rec.calls) != 1:
            raise Fail(case, f"for {case} make_config called GRPOConfig {len(rec.calls)} times; call it once and "
                             "return what it gives")
        got, want = rec.calls[0], grpo_config_kwargs(preset, runtime, "runs/check", save_steps=save_steps)
        for name, value in want.items():
            mine = got.get(name, defaults.get(name))
            if name == "output_dir" or mine == value:
                continue
            why = _field_why(name)
            if name == "per_device_train_batch_size" and mine == value // preset.num_generations:
                why = "it counts completions, not prompts (TRL >= 0.18): prompts per step = this / num_generations"
            elif name in ("bf16", "fp16", "use_cpu"):
                why = (f"{why}. Precision follows the card: bf16 only from compute capability 8.0 (runtime."
                       "bf16_supported), fp16 on an older GPU, use_cpu with no GPU")
            left = "" if name in got else " (you left it out: GRPOConfig's default)"
            raise Fail(case, f"for {case}, {name} is {mine!r}{left}; it should be {value!r}: {why}.")


def _judge_trainer(fn):
    from trl import GRPOTrainer

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: make_trainer, not make_trainer(...)")
    names = ("model", "tokenizer", "reward_funcs", "config", "train_dataset", "callbacks")
    given = {n: SimpleNamespace(name=n) for n in names}  # stand-ins: each argument must reach its parameter
    where = {"model": "model", "processing_class": "tokenizer", "reward_funcs": "reward_funcs", "args": "config",
             "train_dataset": "train_dataset", "callbacks": "callbacks"}
    role = {"model": "the LoRA model (only the adapter trains)",
            "processing_class": "the tokenizer (it tokenizes prompts and decodes completions)",
            "reward_funcs": "the list of reward functions (summed into one reward per completion)",
            "args": "the GRPOConfig", "train_dataset": "the rows with 'prompt' and 'answer'",
            "callbacks": "the kit's callbacks (memory monitor, metrics.jsonl, checkpoints, dashboard)"}
    with _intercept(fn, "GRPOTrainer", GRPOTrainer) as rec:
        call("the trainer", fn, *given.values())
    if len(rec.calls) != 1:
        raise Fail("the trainer", f"make_trainer called GRPOTrainer {len(rec.calls)} times; call it once")
    got = rec.calls[0]
    for param, arg in where.items():
        value = got.get(param)
        if value is not given[arg]:
            have = f"got {value.name}" if isinstance(value, SimpleNamespace) else f"got {value!r:.40}"
            raise Fail(param, f"GRPOTrainer's {param}= should be {role[param]} (make_trainer's {arg}); it {have}.")

ZERO_SPREAD_CASES = [(0.5, 2), (0.5, 4), (0.2, 8), (0.9, 8), (0.05, 16), (0.0, 4), (1.0, 6), (0.3, 1)]


def zero_spread_truth(p: float, group_size: int) -> float:
    """The chance that G completions, each right with probability p (independently), all score the same."""
    return p ** group_size + (1 - p) ** group_size


def _judge_zero_spread(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: zero_spread_chance, not zero_spread_chance(0.5, 4)")
    for p, g in ZERO_SPREAD_CASES:
        case = f"p={p}, G={g}"
        got = call(case, fn, p, g)
        want = zero_spread_truth(p, g)
        if not _close(got, want, tol=1e-6):
            hint = ("a group ties when ALL its completions are right OR all are wrong" if _close(got, p ** g, 1e-6)
                    or _close(got, (1 - p) ** g, 1e-6) else "the completions are independent: multiply chances")
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:.6f} ({hint})")


def diagnose(rows, cap: int = 64) -> tuple[str, str]:
    """(kind, evidence) from helpers.run.dashboard's warning functions: the first warning that holds, else healthy."""
    from helpers.run.dashboard import training_warnings

    found = training_warnings(rows, max_completion_length=cap)
    if not found:
        return "healthy", "the dashboard raises no warning: reward rising, spread above zero, few answers cut off"
    return found[0].kind, found[0].message


# Exercise 5.4: four of the kit's measured CPU runs (helpers.teaching.measured_runs), by letter. Whether a run
# learned is read from its held-out accuracy, not from its training curves: that is the point of the exercise.
LEARNING_RUNS = {"A": "lr-1e-3", "B": "default-seed1", "C": "earlier-recipe-seed2", "D": "scale-none"}
LEARNED_MARGIN = 0.1  # accuracy on 50 held-out questions; one standard error is about 0.07
_LEARNED = {"learned": True, "yes": True, "true": True, "did not learn": False, "didn't learn": False, "no": False,
            "false": False, "not learned": False}


def measured(letter_to_name=None) -> dict:
    from helpers.teaching import measured_runs

    return {letter: measured_runs.load(name) for letter, name in (letter_to_name or LEARNING_RUNS).items()}


def learned(run) -> bool | None:
    """True when held-out accuracy rose by LEARNED_MARGIN or more, False when it did not rise, None in between."""
    change = run.meta["after"]["accuracy"] - run.meta["before"]["accuracy"]
    return True if change >= LEARNED_MARGIN - 1e-9 else False if change <= 0 else None


def curve_evidence(run) -> str:
    """What a run's training curves say, in words: the correctness reward, the entropy, the silent groups."""
    rows = run.sampled
    late = rows[len(rows) // 2:]
    correct = sum(r.get("rewards/correctness_reward/mean", 0.0) for r in late) / len(late)
    silent = sum(r.get("frac_reward_zero_std", 0.0) for r in rows) / len(rows)
    return (f"its total reward ended at {rows[-1]['reward']:.2f}, its correctness reward averaged {correct:.2f} (of "
            f"2.0) over the second half, the policy's entropy went {rows[0]['entropy']:.2f} -> {rows[-1]['entropy']:.2f}"
            f", and {silent:.0%} of its sampled groups had zero spread; the dashboard's verdict: {diagnose(run.rows)[0]}")


def plot_measured(runs=None):
    """One panel per run: total and correctness reward (left axis), entropy and zero-spread groups (right axis)."""
    import matplotlib.pyplot as plt

    runs = measured() if runs is None else runs
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.2), sharey=True)
    for ax, (letter, run) in zip(axes, runs.items()):
        rows = run.sampled
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r["reward"] for r in rows], "o-", color="black", markersize=3)
        ax.plot(steps, [r.get("rewards/correctness_reward/mean", 0.0) for r in rows], ".-", color="tab:green")
        ax.set_title(f"run {letter}")
        ax.set_xlabel("step")
        twin = ax.twinx()
        twin.plot(steps, [r["entropy"] for r in rows], ":", color="tab:cyan")
        twin.plot(steps, [r["frac_reward_zero_std"] for r in rows], "--", color="tab:red")
        twin.set_ylim(-0.05, 2.05)
    axes[0].set_ylabel("reward")
    fig.legend(["total reward", "correctness reward", "entropy (right axis)", "zero-spread groups (right axis)"],
               loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _judge_learned(answer):
    if not isinstance(answer, dict):
        raise Fail("the answer", "answer with a dict from run letter to 'learned' or 'did not learn', e.g. "
                                 "{'A': 'learned', ...}")
    runs = measured()
    missing = sorted(set(runs) - set(answer))
    if missing:
        raise Fail(f"run {missing[0]}", f"run {missing[0]} has no answer: give one for each of {sorted(runs)}.")
    for letter, run in runs.items():
        said = _LEARNED.get(str(answer[letter]).strip().lower())
        if said is None:
            raise Fail(f"run {letter}", f"run {letter}: answer 'learned' or 'did not learn', not {answer[letter]!r}.")
        truth = learned(run)
        if said != truth:
            b, a = run.meta["before"]["accuracy"], run.meta["after"]["accuracy"]
            raise Fail(f"run {letter}", f"run {letter}: you said {answer[letter]!r}, but accuracy on "
                                        f"{run.meta['after']['n']} held-out questions went {b:.2f} -> {a:.2f}. From the "
                                        f"curves: {curve_evidence(run)}.")


BETA_CHOICES = {
    "a": "the penalty did keep the sampling more varied (its entropy stayed higher), but that did not turn into "
         "right answers within 40 steps",
    "b": "",
    "c": "0.04 times the KL is small per token, but it is added at every token of every step: it was enough to "
         "change where the run went",
}


def beta_outcome() -> tuple[str, str]:
    """(letter, what happened) from the two measured runs that differ only in beta (default-seed0, beta-0.04)."""
    from helpers.teaching import measured_runs

    zero, penalty = measured_runs.load("default-seed0"), measured_runs.load("beta-0.04")
    a0, a1 = zero.meta["after"]["accuracy"], penalty.meta["after"]["accuracy"]
    letter = "c" if abs(a1 - a0) < LEARNED_MARGIN else "a" if a1 > a0 else "b"
    return letter, (f"on 50 held-out questions beta = 0 went {zero.meta['before']['accuracy']:.2f} -> {a0:.2f} and "
                    f"beta = 0.04 went {penalty.meta['before']['accuracy']:.2f} -> {a1:.2f}; entropy at the end "
                    f"{zero.sampled[-1]['entropy']:.2f} against {penalty.sampled[-1]['entropy']:.2f}")


def _judge_beta(answer):
    choice = _letter(answer, BETA_CHOICES)
    truth, evidence = beta_outcome()
    if choice != truth:
        raise Fail(f"choice {choice}", f"not {choice!r}: {evidence}. {BETA_CHOICES[choice]}".rstrip(". ") + ".")


CLIP_CASES = [(1.0, 1.0, 0.2), (1.5, 1.0, 0.2), (0.5, 1.0, 0.2), (0.5, -1.0, 0.2), (1.5, -1.0, 0.2),
              (1.1, 2.0, 0.2), (1.5, 1.0, 0.1), (0.7, -0.5, 0.2)]


def clipped_objective_truth(ratio, advantage, epsilon=0.2):
    return min(ratio * advantage, max(1 - epsilon, min(ratio, 1 + epsilon)) * advantage)


def _judge_clipped(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: clipped_objective, not clipped_objective(1.5, 1.0)")
    for r, a, eps in CLIP_CASES:
        case = f"ratio={r}, advantage={a}, epsilon={eps}"
        got = call(case, fn, r, a, eps)
        want = clipped_objective_truth(r, a, eps)
        if not _close(got, want, tol=1e-9):
            if _close(got, r * a, 1e-9):
                why = "that is ratio x advantage without clipping: past 1 +/- epsilon the push must stop growing"
            elif _close(got, max(1 - eps, min(r, 1 + eps)) * a, 1e-9):
                why = "that is the clipped term alone: take the min of the clipped and unclipped terms (pessimistic)"
            else:
                why = "min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A)"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:g} ({why})")


# (policy log-prob, reference log-prob) per token: equal, the policy more sure, less sure, far apart.
KL_CASES = [(-1.0, -1.0), (-0.5, -1.0), (-2.0, -1.0), (-0.1, -3.0), (-3.0, -0.1)]


def kl_penalty_truth(logp, ref_logp):
    """TRL's per-token KL estimate (Schulman's k3): exp(ref - logp) - (ref - logp) - 1, never negative."""
    d = ref_logp - logp
    return math.exp(d) - d - 1


def _judge_kl(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: kl_penalty, not kl_penalty(-1.0, -1.0)")
    for logp, ref in KL_CASES:
        case = f"logp={logp}, ref_logp={ref}"
        got = call(case, fn, logp, ref)
        want = kl_penalty_truth(logp, ref)
        if not _close(got, want, tol=1e-9):
            if _close(got, logp - ref, 1e-9) or _close(got, ref - logp, 1e-9):
                why = "that is the plain log-ratio, which can be negative; TRL uses exp(d) - d - 1 with d = ref - logp"
            elif _close(got, kl_penalty_truth(ref, logp), 1e-9):
                why = "the sign of d is swapped: d = ref_logp - logp"
            else:
                why = "exp(d) - d - 1 with d = ref_logp - logp"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {want:.6g} ({why})")


nb05 = SimpleNamespace(
    q1=Exercise(
        "q1", "fill in make_config(p, runtime, output_dir, save_steps): the GRPOConfig fields that decide GRPO and "
              "memory (the group, the batch, the completion length, the precision for this card, beta, the "
              "learning rate)",
        ("each blank but the precision flags is the preset's field of the same name.",
         "num_generations=p.num_generations, per_device_train_batch_size=p.per_device_train_batch_size, and so on "
         "for max_completion_length, beta and learning_rate.",
         "precision follows the card: bf16=bf16_ok (an Ampere or newer GPU), fp16=on_gpu and not bf16_ok (a T4), "
         "use_cpu=not on_gpu."),
        """
        from trl import GRPOConfig

        from helpers.config import GRPO_CONFIG_FIELDS

        def make_config(p, runtime, output_dir, save_steps):
            on_gpu = p.backend == "unsloth"
            bf16_ok = on_gpu and runtime.bf16_supported
            blanks = dict(
                num_generations=p.num_generations,
                per_device_train_batch_size=p.per_device_train_batch_size,
                max_completion_length=p.max_completion_length,
                beta=p.beta,
                learning_rate=p.learning_rate,
                bf16=bf16_ok,
                fp16=on_gpu and not bf16_ok,
                use_cpu=not on_gpu,
            )
            given = {name: getattr(p, name) for name in GRPO_CONFIG_FIELDS if name not in blanks}  # the rest
            return GRPOConfig(output_dir=output_dir, **blanks, **given, use_vllm=on_gpu and p.fast_inference,
                              gradient_checkpointing=p.gradient_checkpointing and not on_gpu,
                              save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                              report_to="none", log_completions=False, disable_tqdm=False, dataloader_num_workers=0)
        """,
        _judge_config, "it builds the config helpers.train builds, on a CPU, a T4 and an A100."),
    q2=Exercise(
        "q2", "write zero_spread_chance(p, group_size): the chance that a group of G completions, each correct "
              "with probability p, has zero reward spread (all right or all wrong), so it teaches nothing",
        "a group ties when all G completions are right (p ** G) or all are wrong ((1 - p) ** G); the two cannot "
        "both happen (for G >= 1).",
        """
        def zero_spread_chance(p, group_size):
            return p ** group_size + (1 - p) ** group_size
        """,
        _judge_zero_spread,
        "groups tie most when the model is almost always right or almost always wrong: that is when more "
        "generations (or a finer reward) pay."),
    q3=Exercise(
        "q3", "fill in make_trainer(...): GRPOTrainer's arguments",
        "GRPOTrainer(model=..., processing_class=<the tokenizer>, reward_funcs=..., args=<the config>, "
        "train_dataset=..., callbacks=...).",
        """
        from trl import GRPOTrainer

        def make_trainer(model, tokenizer, reward_funcs, config, train_dataset, callbacks):
            return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward_funcs, args=config,
                               train_dataset=train_dataset, callbacks=callbacks)
        """,
        _judge_trainer, "this is the call helpers.run.pipeline.build_trainer makes."),
    q4=Exercise(
        "q4", "four of the kit's measured CPU runs A-D (ex.q4.plot() draws their training curves): for each, say "
              "whether it learned (held-out accuracy rose) or did not learn",
        "the total reward mixes format and correctness: a run can collect all the format points and still get "
        "worse at the arithmetic. Look at the green correctness curve, and at the entropy: a policy whose entropy "
        "is near 0 writes the same answer every time.",
        """
        learned_or_not = {"A": "did not learn", "B": "learned", "C": "did not learn", "D": "learned"}
        # A (learning rate 1e-3) ends up answering '2' to everything, C (the earlier recipe) mostly '12': both keep
        # the format points, so their total reward looks fine; their correctness reward does not.
        """,
        _judge_learned, "the training reward alone could not tell these runs apart: evaluate on held-out questions."),
    q5=Exercise(
        "q5", "write clipped_objective(ratio, advantage, epsilon=0.2): the per-token objective GRPO maximises "
              "(PPO's clipped surrogate): min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A)",
        "clip(ratio, lo, hi) is max(lo, min(ratio, hi)); the min of the two terms means: never reward a move "
        "beyond the clip range, but always count a move in the wrong direction in full.",
        """
        def clipped_objective(ratio, advantage, epsilon=0.2):
            clipped = max(1 - epsilon, min(ratio, 1 + epsilon))
            return min(ratio * advantage, clipped * advantage)
        """,
        _judge_clipped, "TRL's loss is minus this, averaged over tokens as loss_type says (helpers.teaching.grpo_math)."),
    q6=Exercise(
        "q6", "write kl_penalty(logp, ref_logp): TRL's per-token KL estimate between the policy and the reference "
              "model, exp(d) - d - 1 with d = ref_logp - logp; beta times it is added to each token's loss",
        "it is 0 when the two log-probabilities are equal and grows on both sides, faster when the policy gives a "
        "token much LESS probability than the reference did; use math.exp.",
        """
        import math

        def kl_penalty(logp, ref_logp):
            d = ref_logp - logp
            return math.exp(d) - d - 1
        """,
        _judge_kl, "beta trades reward for staying close to the starting model: 0 (TRL's default) lets the policy "
                   "drift for reward; 0.04 pulls it back, and costs a reference forward pass every step."),
    q7=Exercise(
        "q7", "predict beta = 0.04 against beta = 0 after 40 steps of the cpu preset, on held-out questions: 'a' "
              "better, 'b' worse, 'c' the same",
        "the KL term pulls every token back towards the starting model, whose answers were right 22% of the time.",
        """
        beta_prediction = "b"  # 0.48 against 0.18: the penalty kept the policy near its weak start for 40 steps
        """,
        _judge_beta, "the penalty kept the policy near the start (higher entropy, kl mostly 0.1-0.2), and on this small "
                     "model 40 steps near the start were not enough to learn the arithmetic. TRL's default is "
                     "beta = 0 for reasons like this one (and it saves the reference model's memory)."),
)
nb05.q4.plot = plot_measured
nb05.q4.runs = measured


# =========================================================================================== 06 evaluate

PASS_K_CASES = [(4, 0, 1), (4, 4, 2), (4, 1, 1), (4, 1, 2), (4, 1, 4), (10, 3, 5), (8, 2, 3)]


def _judge_pass_at_k(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: my_pass_at_k, not my_pass_at_k(4, 1, 2)")
    for n, c, k in PASS_K_CASES:
        case = f"n={n} samples, c={c} correct, k={k}"
        got = call(case, fn, n, c, k)
        truth = pass_at_k(n, c, k)
        if not _close(got, truth, 1e-6):
            why = ""
            if _close(got, 1 - (1 - c / n) ** k, 1e-6):
                why = (" - that is drawing k samples WITH replacement; pass@k picks k of the n samples without "
                       "replacement: 1 - C(n-c, k) / C(n, k)")
            elif _close(got, c / n, 1e-6):
                why = " - c/n is pass@1 only; for k > 1 it is the chance that at least one of k picked samples is right"
            raise Fail(case, f"for {case} you returned {got!r}; it should be {truth:.4f}{why}.")


nb06 = SimpleNamespace(q1=Exercise(
    "q1", "write my_pass_at_k(n, c, k): with n samples of which c are correct, the chance that at least one of k "
          "samples (drawn without replacement) is correct",
    "1 minus the chance that all k picked samples are wrong: math.comb(n - c, k) / math.comb(n, k) (comb gives 0 "
    "when k > n - c).",
    """
    import math

    def my_pass_at_k(n, c, k):
        return 1.0 - math.comb(n - c, k) / math.comb(n, k)
    """,
    _judge_pass_at_k, "this is the unbiased estimator of the Codex paper, as helpers.evaluation.pass_at_k."))


# =========================================================================================== 07 memory lab

LAB_GENERATIONS = 8
LAB_BUDGET_GB = T4_BUDGET_GB
LAB_STEP = 64


def lab_fits(length: int):
    return estimate("t4", gpu="t4", budget_gb=LAB_BUDGET_GB, num_generations=LAB_GENERATIONS,
                    per_device_train_batch_size=LAB_GENERATIONS, max_completion_length=length)


def _judge_lab_length(answer):
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < LAB_STEP or answer % LAB_STEP:
        raise Fail("the answer", f"answer with a multiple of {LAB_STEP} tokens (64, 128, ...), not {answer!r}")
    est = lab_fits(answer)
    if not est.fits:
        raise Fail(f"max_completion_length={answer}", f"max_completion_length={answer} does not fit: predicted "
                   f"{est.peak_gb:.2f} GB, over {LAB_BUDGET_GB:g} GB with {LAB_GENERATIONS} generations.")
    nxt = lab_fits(answer + LAB_STEP)
    if nxt.fits:
        raise Fail(f"max_completion_length={answer}", f"max_completion_length={answer} fits ({est.peak_gb:.2f} GB) "
                   f"but {answer + LAB_STEP} fits too ({nxt.peak_gb:.2f} GB): find the largest.")


nb07 = SimpleNamespace(q1=Exercise(
    "q1", f"find the largest max_completion_length (a multiple of {LAB_STEP}) that keeps the t4 preset with "
          f"{LAB_GENERATIONS} generations (batch {LAB_GENERATIONS}) within {LAB_BUDGET_GB:g} GB",
    "loop over range(64, 4097, 64) and keep the lengths whose estimate(...).fits is True.",
    f"""
    largest_completion_length = max(
        L for L in range({LAB_STEP}, 4097, {LAB_STEP})
        if estimate(t4, gpu="t4", budget_gb={LAB_BUDGET_GB}, num_generations={LAB_GENERATIONS},
                    per_device_train_batch_size={LAB_GENERATIONS}, max_completion_length=L).fits)
    """,
    _judge_lab_length, "the logits and activations grow linearly with the completion length."))




# =========================================================================================== 08 one GRPO step
# Appended as a block: lesson 08's loss exercise. Its truth is TRL's own GRPOTrainer._compute_loss, run on the given
# log-probabilities (helpers.teaching.grpo_math.trl_loss), never a copy of the formula.


def _loss_batch(seed: int, completions: int, tokens: int, lengths, spread: float, rewards):
    """A hidden batch: log-probs that moved since sampling (ratios away from 1, so clipping matters), padding
    positions holding log-probs too (so counting them shows), one length per completion."""
    import torch

    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(completions, tokens, generator=g) * 3 - 0.05
    logps = old + torch.randn(completions, tokens, generator=g) * spread
    mask = torch.zeros(completions, tokens, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return logps, old, torch.tensor(group_advantages(rewards), dtype=torch.float32), mask


def loss_cases():
    """(case, logps, old_logps, advantages, mask, epsilon): the hidden batches of exercise 8.1."""
    return [
        ("a group of 4 completions of 6, 3, 5 and 1 tokens (epsilon 0.2)",
         *_loss_batch(0, 4, 6, [6, 3, 5, 1], 0.4, [3.5, 0.0, 1.5, 0.0]), 0.2),
        ("a group of 3 completions of 2, 7 and 4 tokens (epsilon 0.1)",
         *_loss_batch(1, 3, 7, [2, 7, 4], 0.3, [0.0, 2.5, 0.5]), 0.1),
        ("a group of 4 completions of 4 tokens each, 4, 2, 3 and 4 of them real (epsilon 0.2)",
         *_loss_batch(2, 4, 4, [4, 2, 3, 4], 0.4, [0.0, 1.0, 0.25, 2.0]), 0.2),
    ]


def _per_token(logps, old, adv, eps, ratio=None, clip=True):
    import torch

    ratio = torch.exp(logps - old) if ratio is None else ratio
    if not clip:
        return -(ratio * adv)
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


def loss_mistakes(logps, old, adv, mask, eps) -> list[tuple[str, float]]:
    """(what went wrong, the loss it gives) for each known mistake, on one batch."""
    a, m = adv.unsqueeze(1), mask.float()
    right = _per_token(logps, old, a, eps)
    dapo = lambda per_token: float((per_token * m).sum() / m.sum())  # noqa: E731
    out = [
        ("the padding after each completion's end was counted: multiply the per-token losses by the mask before "
         "summing (only completion tokens count)", float(right.mean())),
        ("the padding after each completion's end was counted: multiply the per-token losses by the mask before "
         "summing (only completion tokens count)", float(right.sum() / m.sum())),
        ("you divided by every position, padding included: divide by the number of completion tokens, mask.sum()",
         float((right * m).sum() / m.numel())),
        ("the sign is flipped: that loss would be minimised by making the rewarded tokens LESS likely (gradient "
         "ascent on the objective is descent on minus it); per token the loss is -min(ratio * A, clipped * A)",
         -dapo(right)),
        ("there is no clipping: clamp the ratio to [1 - epsilon, 1 + epsilon] and take -min(ratio * A, clipped * A),"
         " so a token that already moved far enough stops pulling (PPO's trust region)",
         dapo(_per_token(logps, old, a, eps, clip=False))),
        ("you averaged per completion, then over completions (loss_type 'grpo', where each completion weighs the same"
         " whatever its length); TRL's default 'dapo' sums over ALL completion tokens of the batch and divides by "
         "their count", float(((right * m).sum(-1) / m.sum(-1)).mean())),
        ("the ratio is exp(logp - old_logp) (a ratio of probabilities), not logp / old_logp (a ratio of "
         "log-probabilities)", dapo(_per_token(logps, old, a, eps, ratio=logps / old))),
        ("epsilon was not used: clip to [1 - epsilon, 1 + epsilon] with the epsilon passed in, not a fixed 0.2",
         dapo(_per_token(logps, old, a, 0.2))),
    ]
    if logps.size(0) == logps.size(1):  # square: advantages (B,) broadcast silently along the tokens
        out.append(("the advantages were spread along the tokens, not the completions: advantages has one value per "
                    "completion, shape (B,); advantages.unsqueeze(1) (shape (B, 1)) gives every token of a completion"
                    " its completion's advantage", dapo(_per_token(logps, old, adv.unsqueeze(0), eps))))
    return out


def _loss_and_grad(fn, case, logps, old, adv, mask, eps):
    """Run a loss function on a copy of the batch; (the loss value, d loss / d logps or None, what it returned)."""
    import torch

    leaf = logps.detach().clone().requires_grad_(True)
    got = call(case, fn, leaf, old.clone(), adv.clone(), mask.clone(), epsilon=eps)
    if not isinstance(got, torch.Tensor):
        return got, None
    if got.requires_grad and got.numel() == 1:
        got.backward()
    return got, leaf.grad


def _judge_policy_loss(fn, this_batch=None):
    import torch

    from helpers.teaching.grpo_math import trl_loss

    if not callable(fn):
        raise Fail("the answer", "pass the function itself: policy_loss, not policy_loss(logps, ...)")
    cases = loss_cases()
    if this_batch is not None:
        logps, old, adv, mask = (t.detach() for t in this_batch)
        cases.append(("this lesson's batch (the group sampled above)", logps, old, adv, mask, 0.2))
    for case, logps, old, adv, mask, eps in cases:
        try:
            got, grad = _loss_and_grad(fn, case, logps, old, adv, mask, eps)
        except Fail as f:
            if "must match the size" in f.message:
                f.message += (" - advantages has one value per completion, shape (B,), the log-probs (B, T): "
                              "advantages.unsqueeze(1), shape (B, 1), gives every token its completion's advantage")
            raise
        leaf = logps.clone().requires_grad_(True)
        truth = trl_loss(leaf, old, adv, mask, epsilon=eps)
        truth.backward()
        want = float(truth.detach())
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            raise Fail(case, f"on {case} you returned the number {got!r}, not a tensor: the optimizer step needs the "
                             "loss tensor with its graph (no .item(), no float(...)); return the tensor itself.")
        if not isinstance(got, torch.Tensor) or got.numel() != 1:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise Fail(case, f"on {case} you returned {shape}; return ONE number, a 0-dim tensor: the per-token "
                             "losses summed over the completion tokens and divided by their count.")
        value = float(got.detach())
        if not math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-6):
            why = next((w for w, v in loss_mistakes(logps, old, adv, mask, eps)
                        if math.isclose(value, v, rel_tol=1e-4, abs_tol=1e-6)),
                       "per token -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A) with ratio = "
                       "exp(logp - old_logp), summed over the completion tokens (mask) and divided by their count")
            raise Fail(case, f"on {case} your loss is {value:+.6f}; TRL's GRPOTrainer._compute_loss gives {want:+.6f}: "
                             f"{why}.")
        if grad is None:
            raise Fail(case, f"on {case} your loss has the right value ({value:+.6f}) but no gradient: it was detached "
                             "(.detach(), .item(), torch.no_grad() or a new torch.tensor(...)), so the optimizer step "
                             "would change nothing; compute it from logps with torch operations.")
        if not torch.allclose(grad, leaf.grad, rtol=1e-4, atol=1e-7):
            raise Fail(case, f"on {case} your loss has TRL's value but not its gradient with respect to logps: part of "
                             "it was detached (old_logps is the constant; logps must stay in the graph everywhere).")


class _LossExercise(Exercise):
    """Exercise 8.1: check(answer, this_batch=(logps, old_logps, advantages, mask)) adds the lesson's own batch."""

    def check(self, answer=_MISSING, this_batch=None) -> CheckResult:
        judge = self._judge
        self._judge = lambda fn: judge(fn, this_batch)
        try:
            result = super().check(answer)
        finally:
            self._judge = judge
        if result.passed and this_batch is not None:
            from helpers.teaching.grpo_math import trl_loss

            logps, old, adv, mask = (t.detach() for t in this_batch)
            ours, theirs = float(answer(logps, old, adv, mask, epsilon=0.2)), float(trl_loss(logps, old, adv, mask))
            result.message += f" On this lesson's batch: yours {ours:+.6f}, TRL's _compute_loss {theirs:+.6f}."
        return result


nb08 = SimpleNamespace(q1=_LossExercise(
    "q1", "write policy_loss(logps, old_logps, advantages, mask, epsilon=0.2) -> the GRPO loss as TRL computes it "
          "by default (loss_type 'dapo'): per token -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A), "
          "ratio = exp(logp - old_logp), summed over the completion tokens and divided by their count; a 0-dim "
          "tensor with its gradient",
    "logps and old_logps are (B, T), advantages (B,), mask (B, T) with 1 on completion tokens: "
    "advantages.unsqueeze(1) broadcasts A over a completion's tokens; torch.exp, torch.clamp, torch.min; "
    "(per_token * mask).sum() / mask.sum().",
    """
    import torch

    def policy_loss(logps, old_logps, advantages, mask, epsilon=0.2):
        ratio = torch.exp(logps - old_logps)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
        A = advantages.unsqueeze(1)
        per_token = -torch.min(ratio * A, clipped * A)
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
    """,
    _judge_policy_loss, "it equals TRL's GRPOTrainer._compute_loss, value and gradient, on every hidden batch."))


ALL = {"nb01": nb01, "nb02": nb02, "nb03": nb03, "nb04": nb04, "nb05": nb05, "nb06": nb06, "nb07": nb07,
       "nb08": nb08}
