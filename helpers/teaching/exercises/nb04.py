"""Lesson 04 rewards: the correctness and strict-format rewards (against helpers.rewards), the +1 prediction, the
brevity reward and GRPO's group advantages (against helpers.teaching.grpo_math)."""

from __future__ import annotations

import math

from helpers.teaching.exercises.core import Exercise, Fail, call, close, letter_of, numbered
from helpers.teaching.grpo_math import group_advantages

LESSON = "04"


# Why each case scores what it does, one table per reward: a format reward is never told to compare numbers.
CHAT = ("TRL passes chat datasets' completions as [{'role': 'assistant', 'content': ...}]: rewards.completion_text(c) "
        "gives the text")
NUMBERS = "compare answers as numbers (rewards.answers_match), not as strings"
CORRECTNESS_WHY = {
    "right, no tags": "no <answer> block, no answer: the format is part of the task",
    "right, one line": "the answer block is read wherever it is: correctness does not judge the layout",
    "right, decorated": NUMBERS + ": '12 apples' holds one number, 12",
    "right, 12.0": NUMBERS + ": 12.0 is 12",
    "answer tag only": "only the <answer> block is read, whatever else is missing",
    "rambling after": "text after the answer block does not change the answer: correctness does not judge the layout",
    "tags around junk": "'banana' is not a number: no match, 0",
    "hedged answer": "an answer with two numbers is wrong even if one is right, or hedging pays",
    "number dump": "an answer with several numbers is wrong, or listing numbers pays",
    "repeated tags": "the last <answer> block is the answer",
    "empty": "an empty completion scores 0",
    "a comma in the answer": NUMBERS + ": 1,000 is 1000",
    "a dollar sign": NUMBERS + ": $18 is 18",
    "18.0 for 18": NUMBERS + ": 18.0 is 18",
    "a hedge": "an answer with two numbers is wrong even if one is right, or hedging pays (rewards.answers_match)",
    "two answer blocks, the last right": "the last <answer> block is the answer (prompts.extract_answer, "
                                         "rewards.answer_of)",
    "two answer blocks, the last wrong": "the last <answer> block is the answer (prompts.extract_answer, "
                                         "rewards.answer_of)",
    "a chat-format completion": CHAT, "a chat-format completion, wrong": CHAT,
    "an empty completion": "an empty completion scores 0",
    "a None completion": "a missing completion (None) scores 0, it must not crash the run",
}
LAYOUT = "the strict layout is the whole completion: <reasoning>, newline, ..., </answer>, nothing else"
FORMAT_WHY = {
    "right, no tags": "no tags, no layout: a right answer does not earn the format reward",
    "right, one line": "the strict layout puts each tag on its own line (STRICT has the newlines)",
    "right, decorated": "the layout is right: the format reward does not read the answer, '12 apples' is fine here",
    "right, 12.0": "the layout is right: the format reward does not read the answer",
    "wrong number": "a wrong answer in the right layout still earns the format reward: it judges the layout only",
    "answer tag only": "no <reasoning> block: not the strict layout",
    "rambling after": LAYOUT + " (text after </answer> breaks it)",
    "tags around junk": "the layout is right, whatever is inside it: that is why the format reward is small",
    "hedged answer": "the layout is right: the format reward does not read the answer",
    "number dump": "the layout is right: the format reward does not read the answer",
    "repeated tags": "the strict layout has each tag exactly once",
    "empty": "an empty completion scores 0",
    "a comma in the answer": "the layout is right: the format reward does not read the answer",
    "a dollar sign": "the layout is right: the format reward does not read the answer",
    "18.0 for 18": "the layout is right: the format reward does not read the answer",
    "a hedge": "the layout is right: the format reward does not read the answer",
    "two answer blocks, the last right": "the strict layout has each tag exactly once, and a <reasoning> block",
    "two answer blocks, the last wrong": "the strict layout has each tag exactly once, and a <reasoning> block",
    "a chat-format completion": CHAT, "a chat-format completion, wrong": CHAT,
    "an empty completion": "an empty completion scores 0",
    "a None completion": "a missing completion (None) scores 0, it must not crash the run",
    "the perfect answer with spaces around it": "surrounding whitespace does not change the layout (strip the text "
                                                "first)",
    "the layout with a second reasoning block": "the strict layout has each tag exactly once",
}
WHY = {"correctness_reward": CORRECTNESS_WHY, "strict_format_reward": FORMAT_WHY}
SCALE = {"correctness_reward": "a right answer scores 2.0: the kit's scale, where correctness outweighs every format "
                               "reward together",
         "strict_format_reward": "the strict layout scores 0.5: small, so the format alone never outweighs a right "
                                 "answer (2.0)"}


# (label, completion, gold, why correctness scores it so): the hand-written completions of the lesson's tables, the
# hacks, and the cases a reward written in ten minutes gets wrong. The kit's reward is the truth on each; WHY says
# why, per reward (the judges read it; the fourth field is CORRECTNESS_WHY's, for helpers.capstone's hint).
def reward_cases() -> list[tuple[str, object, str, str]]:
    return [(label, c, gold, CORRECTNESS_WHY.get(label, IN_TABLES)) for label, c, gold in _cases()]


IN_TABLES = "this completion is in the lesson's tables"


def _cases() -> list[tuple[str, object, str]]:
    from helpers.teaching import reward_lab

    perfect = reward_lab.HAND_WRITTEN["perfect"]
    cases = [(label, text, reward_lab.GOLD) for label, text in {**reward_lab.HAND_WRITTEN, **reward_lab.HACKS}.items()]
    return cases + [
        ("a comma in the answer", "<reasoning>\n1000 in all.\n</reasoning>\n<answer>\n1,000\n</answer>", "1000"),
        ("a dollar sign", "<reasoning>\nShe pays 18.\n</reasoning>\n<answer>\n$18\n</answer>", "18"),
        ("18.0 for 18", "<reasoning>\n9 * 2 = 18\n</reasoning>\n<answer>\n18.0\n</answer>", "18"),
        ("a hedge", "<reasoning>\nNot sure.\n</reasoning>\n<answer>\n11 or 12\n</answer>", "12"),
        ("two answer blocks, the last right", "<answer>7</answer> no, wait: <answer>12</answer>", "12"),
        ("two answer blocks, the last wrong", "<answer>12</answer> no, wait: <answer>7</answer>", "12"),
        ("a chat-format completion", [{"role": "assistant", "content": perfect}], reward_lab.GOLD),
        ("a chat-format completion, wrong", [{"role": "assistant", "content": perfect.replace("12", "13")}],
         reward_lab.GOLD),
        ("an empty completion", "", reward_lab.GOLD),
        ("a None completion", None, reward_lab.GOLD),
        ("the perfect answer with spaces around it", f"  {perfect}\n\n", reward_lab.GOLD),
        ("the layout with a second reasoning block", perfect.replace("<answer>", "<reasoning>\nmore\n</reasoning>\n"
                                                                     "<answer>"), reward_lab.GOLD),
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
        whys = WHY[kit_name]
        rows = []
        for label, completion, gold, _ in cases:
            why = whys.get(label, IN_TABLES)
            try:
                got = call(f"the completion '{label}'", fn, prompts=[None], completions=[completion], answer=[gold])
            except Fail as f:
                raise Fail(f.case, f"{f.message}. {why}" if why else f.message) from None
            if not isinstance(got, (list, tuple)) or len(got) != 1:
                raise Fail(label, f"on '{label}' your reward returned {got!r:.80}; a TRL reward returns a list with "
                                  "one float per completion (here a list of length 1).")
            want = kit_reward(prompts=[None], completions=[completion], answer=[gold])[0]
            if not close(got[0], want, 1e-9):
                scaled = want and isinstance(got[0], (int, float)) and got[0] > 0  # the right case, another score
                rows.append((label, got[0], want, SCALE[kit_name] if scaled else why))
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


def _counts_characters(fn) -> bool:
    """Whether a brevity reward refuses 60 words of 200-odd characters: it counts characters, not words."""
    try:
        return not fn(prompts=[None], completions=[_words(60)], answer=["12"])[0]
    except Exception:  # noqa: BLE001 - a probe only: the judge reports the student's error on its own cases
        return False


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
        if not close(got[0], truth, 1e-9):
            why = f"{'within' if truth else 'over'} the {MAX_WORDS}-word limit"
            if truth and _counts_characters(fn):
                why += ": count words, len(text.split()), not characters, len(text)"
            elif truth and len(completion.split()) == MAX_WORDS:
                why += ": 'at most' includes the limit itself (<=, not <)"
            raise Fail(case, f"your reward gave {got[0]!r} to {case}; it should be {truth} ({why}).")
    batch = [_words(5), _words(500), _words(50)]
    got = call("a batch of three completions (5, 500 and 50 words)", fn, prompts=[None] * 3, completions=batch,
               answer=["1"] * 3)
    want = [BREVITY_SCORE, 0.0, BREVITY_SCORE]
    if not isinstance(got, (list, tuple)) or len(got) != 3 or not all(close(g, w, 1e-9) for g, w in zip(got, want)):
        raise Fail("a batch of three completions (5, 500 and 50 words)",
                   f"for a batch of three completions (5, 500 and 50 words) your reward returned {got!r}; it should "
                   f"be {want} - one score per completion, in order.")


NO_EPSILON = ("every reward in this group is equal, so the group's std is 0 and you divided by it: add an epsilon to "
              "the std, (reward - mean) / (std + 1e-4), as TRL's GRPOTrainer does (it adds 1e-4), and every advantage "
              "is 0")


def _has_nan_or_inf(got) -> bool:
    """Whether an answer (a list, a tuple, a tensor or an array of numbers) holds a nan or an inf."""
    try:
        return any(not math.isfinite(float(x)) for x in got)
    except (TypeError, ValueError):
        return False


def _judge_advantages(fn):
    if not callable(fn):
        raise Fail("the answer", "pass the function itself: my_advantages, not my_advantages([...])")
    cases = [[4.0, 0.0, 2.5, 0.0], [1.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.5, 1.0, 4.0, 0.0, 0.0, 2.5]]
    for rewards in cases:
        case = f"the group of rewards {rewards}"
        equal = len(set(rewards)) == 1
        try:
            got = call(case, fn, list(rewards))
        except Fail as f:
            if equal and "raised ZeroDivisionError" in f.message:
                raise Fail(case, f"on {case} your function raised ZeroDivisionError: {NO_EPSILON}.") from None
            raise
        if equal and _has_nan_or_inf(got):
            raise Fail(case, f"for {case} you returned {got!r} (nan or inf, 0 / 0): {NO_EPSILON}.")
        truth = group_advantages(rewards)
        if not isinstance(got, (list, tuple)) or len(got) != len(rewards):
            raise Fail(case, f"for {case} you returned {got!r}; return one advantage per completion.")
        if all(close(g, t, 2e-3) for g, t in zip(got, truth)):
            continue
        n = len(rewards)
        mean = sum(rewards) / n
        pop = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
        why = ""
        if pop > 0 and all(close(g, (r - mean) / pop, 2e-3) for g, r in zip(got, rewards)):
            why = (" - you divided by the population std (n); TRL uses the sample std (n - 1, "
                   "trl.trainer.utils.nanstd)")
        elif all(close(g, r - mean, 2e-3) for g, r in zip(got, rewards)):
            why = " - you subtracted the mean but did not divide by the group's std (+ 1e-4)"
        elif pop == 0:
            why = " - when every completion scored the same, every advantage is 0 (std 0, nothing to compare)"
        elif not close(sum(float(x) for x in got), 0.0, 1e-2):
            why = (f" - a group's advantages sum to 0 (each is reward minus the group's mean); yours sum to "
                   f"{sum(float(x) for x in got):.4f}")
        else:
            why = " - (reward - the group's mean) / (the group's sample std + 1e-4)"
        raise Fail(case, f"for {case} you returned {[round(float(g), 4) for g in got]}; it should be "
                         f"{[round(t, 4) for t in truth]}{why}.")


SHIFT_CHOICES = {
    "a": "the mean rises by 1 too, and the advantage is the reward MINUS the group's mean: the +1 cancels",
    "b": "the std is the spread around the mean, and adding 1 to every reward does not spread them: the +1 cancels "
         "in the difference and the std is unchanged",
    "c": "",
    "d": "the mean grew by 1, but so did every reward: reward - mean is unchanged",
}


def _judge_shift(answer):
    choice = letter_of(answer, SHIFT_CHOICES)
    before = group_advantages([4.0, 0.0, 2.0, 0.0])
    after = group_advantages([5.0, 1.0, 3.0, 1.0])
    truth = "c" if all(abs(x - y) < 1e-9 for x, y in zip(before, after)) else "a"
    if choice != truth:
        raise Fail(f"choice {choice}", f"not {choice!r}: {SHIFT_CHOICES[choice]}. Run the next cell to see it.")


my_correctness_reward = Exercise(
    LESSON, "my_correctness_reward",
    hint=("read the answer the way the evaluation does: only the last <answer> block counts, and numbers are compared "
          "as numbers, not as strings.",
          "answer_from(completion_text(completion)) gives the last block's text or None; answers_match(pred, gold) "
          "compares it with the gold as a number (1,000 = 1000, $18 = 18, 18.0 = 18, and '11 or 12' is wrong).",
          "pred = answer_from(completion_text(completion)); score = 2.0 if pred is not None and answers_match(pred, "
          "gold) else 0.0."),
    judge=_judge_reward_against("correctness_reward", "my_correctness_reward"),
    success="it agrees with helpers.rewards.correctness_reward on every case, the tricky ones included.")

my_strict_format_reward = Exercise(
    LESSON, "my_strict_format_reward",
    hint=("two conditions: the layout (STRICT, a regular expression) and no repeated tag; whitespace around the whole "
          "completion does not count.",
          "text = completion_text(completion).strip(); each_once = all(text.count(tag) == 1 for tag in TAGS); layout = "
          "STRICT.fullmatch(text) is not None."),
    judge=_judge_reward_against("strict_format_reward", "my_strict_format_reward"),
    success="it agrees with helpers.rewards.strict_format_reward on every case.")

prediction = Exercise(
    LESSON, "prediction",
    hint="the advantage is (reward - the group's mean) / the group's std: what does +1 do to each of the three?",
    judge=_judge_shift,
    success="only differences within a group count: the reward's level is invisible to GRPO, only its "
            "ranking and spread within the group matter.")

brevity_reward = Exercise(
    LESSON, "brevity_reward",
    hint="a TRL reward returns [one float per completion]; helpers.rewards.completion_text(c) turns a chat-format "
         "completion into text; len(text.split()) counts words.",
    judge=_judge_brevity,
    success="add it to a table with reward_lab.score_table(..., rewards=[brevity_reward]) to see it.")

my_advantages = Exercise(
    LESSON, "my_advantages",
    hint="subtract the group mean, then divide by the group's SAMPLE standard deviation (n - 1 in the denominator) "
         "plus 1e-4.",
    judge=_judge_advantages,
    success="it matches helpers.teaching.grpo_math.group_advantages, which matches TRL 1.15.")

__getattr__, __dir__ = numbered(globals())  # ex.q1, ex.q2 ...: in the lesson's order (registry.json)
