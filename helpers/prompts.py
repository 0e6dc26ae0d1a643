"""The answer format, defined once: the system prompt, the tags, and the worked example.

Rewards, data and evaluation all import from here, so changing the format in one place changes it everywhere.
"""

from __future__ import annotations

import re

REASONING_START = "<reasoning>"
REASONING_END = "</reasoning>"
ANSWER_START = "<answer>"
ANSWER_END = "</answer>"
TAGS = (REASONING_START, REASONING_END, ANSWER_START, ANSWER_END)

# Short on purpose: on the CPU path every prompt token is re-read for each of the num_generations completions.
SYSTEM_PROMPT = (
    "Solve the math problem. Reason inside <reasoning> </reasoning>, "
    "then write only the final number inside <answer> </answer>."
)


def format_completion(reasoning: str, answer: str) -> str:
    """A completion in exactly the format the strict reward expects."""
    return f"{REASONING_START}\n{reasoning}\n{REASONING_END}\n{ANSWER_START}\n{answer}\n{ANSWER_END}"


# One solved problem shown as a prior chat turn. Small models almost never produce the tags from instructions
# alone; with this turn some samples are tagged, which gives GRPO the reward differences it needs to learn from.
WORKED_EXAMPLE_QUESTION = "Tom has 3 boxes with 4 pens in each box. How many pens does Tom have?"
WORKED_EXAMPLE_COMPLETION = format_completion("3 boxes times 4 pens is 3 * 4 = 12.", "12")


def build_messages(question: str, worked_example: bool = True, system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """Chat messages for one question, in the conversational format TRL's GRPOTrainer accepts as a prompt."""
    messages = [{"role": "system", "content": system_prompt}]
    if worked_example:
        messages += [
            {"role": "user", "content": WORKED_EXAMPLE_QUESTION},
            {"role": "assistant", "content": WORKED_EXAMPLE_COMPLETION},
        ]
    messages.append({"role": "user", "content": question})
    return messages


_ANSWER_RE = re.compile(re.escape(ANSWER_START) + r"(.*?)" + re.escape(ANSWER_END), re.DOTALL)
MAX_SCAN_CHARS = 20_000  # rewards and evaluation look at no more than this, so a megabyte completion stays fast


def extract_answer(text) -> str | None:
    """The stripped content of the last <answer>...</answer> block, or None when there is none."""
    if not isinstance(text, str):
        return None
    text = text[-MAX_SCAN_CHARS:]
    end = text.rfind(ANSWER_END)
    if end < 0:  # checked first: scanning many unclosed <answer> tags with the regex is quadratic
        return None
    text = text[: end + len(ANSWER_END)]
    matches = _ANSWER_RE.findall(text)
    return matches[-1].strip() if matches else None
