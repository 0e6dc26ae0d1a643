"""Reward functions for GRPO on math word problems, in TRL's GRPOTrainer calling contract.

Each reward is ``f(prompts, completions, **kwargs) -> list[float]``, one float per completion; the gold answers
arrive as the keyword ``answer`` (the dataset column). The five rewards follow willccbb's grpo_demo lineage (the
one Unsloth's GRPO notebooks copy: unslothai/notebooks ``nb/Qwen2.5_(3B)-GRPO.ipynb``) with three fixes:

* correctness compares numbers, not strings: "1,000" = "1000", "$18" = "18", "72.0" = "72" (exact string match
  scores those as wrong, which teaches the model nothing it should learn);
* an answer holding more than one number ("18 or 19") is wrong, so hedging never pays;
* the trailing-text penalty of the tag-count reward is capped, so a rambling completion cannot drive it to -1000.

A reward runs inside the training loop on whatever the model emits, so every function returns a finite float for
every completion and never raises: bad input (None, non-strings, odd shapes, megabytes of text, thousands of
tags) scores 0.0 for that completion. Format rewards use only linear-time string methods; answers are read from
the last ``prompts.MAX_SCAN_CHARS`` characters. math-verify (a fallback for expressions like "\\frac{1}{2}") is
called with its signal-based timeouts off, so it works off the main thread; to make sure it cannot hang, it only
ever sees a short string that is one plain arithmetic expression with at most four operators (no powers,
factorials, letters or commas). See docs/rewards.md for the rules with examples.
"""

from __future__ import annotations

import ast
import logging
import math
import operator
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from helpers.prompts import (
    ANSWER_END,
    ANSWER_START,
    MAX_SCAN_CHARS,
    REASONING_END,
    REASONING_START,
    TAGS,
    extract_answer,
)

__all__ = [
    "CORRECT_SCORE",
    "INTEGER_SCORE",
    "STRICT_FORMAT_SCORE",
    "SOFT_FORMAT_SCORE",
    "TAG_SCORE",
    "TRAILING_PENALTY_PER_CHAR",
    "TRAILING_PENALTY_CAP",
    "MATH_VERIFY_MAX_CHARS",
    "MATH_VERIFY_MAX_OPS",
    "correctness_reward",
    "integer_answer_reward",
    "strict_format_reward",
    "soft_format_reward",
    "tag_count_reward",
    "DEFAULT_REWARDS",
    "REWARD_TABLE",
    "score_completion",
    "answers_match",
    "parse_number",
    "completion_text",
    "answer_of",
]

CORRECT_SCORE = 2.0
INTEGER_SCORE = 0.5
STRICT_FORMAT_SCORE = 0.5
SOFT_FORMAT_SCORE = 0.5
TAG_SCORE = 0.125  # per tag that appears exactly once; four tags => 0.5
TRAILING_PENALTY_PER_CHAR = 0.001  # per non-whitespace-bounded character after the last </answer>
TRAILING_PENALTY_CAP = 0.5  # reached at 500 trailing characters
MATH_VERIFY_MAX_CHARS = 100  # longer strings never reach math-verify
MATH_VERIFY_MAX_OPS = 4  # nor do expressions with more operators: verify() is exponential in "7/7/7/..." chains

# --------------------------------------------------------------------------------------------------------------
# Reading completions
# --------------------------------------------------------------------------------------------------------------


def _message_content(message) -> str:
    """The text of one chat message dict (string content, or the text parts of a list content)."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def completion_text(completion) -> str:
    """The text of one completion: a string as is, or the assistant message contents of a conversational one."""
    try:
        if isinstance(completion, str):
            return str(completion)
        if isinstance(completion, dict):
            return _message_content(completion)
        if isinstance(completion, (list, tuple)):
            texts = [
                _message_content(m)
                for m in completion
                if isinstance(m, dict) and m.get("role", "assistant") == "assistant"
            ]
            return "".join(texts)
    except Exception:  # noqa: BLE001 - a reward must never raise
        pass
    return ""


def answer_of(text) -> str | None:
    """The last <answer>...</answer> content, or None (prompts.extract_answer, which is linear time)."""
    return extract_answer(text)


def _as_list(values) -> list:
    """A list of completions (a single string or dict counts as one completion; None as none)."""
    if values is None:
        return []
    if isinstance(values, list):
        return values
    if isinstance(values, (str, bytes, dict)):
        return [values]
    try:
        return list(values)
    except Exception:  # noqa: BLE001
        return [values]


def _golds(answer, n: int) -> list:
    """The gold answers, one per completion: a list is indexed (missing => None), a scalar is shared."""
    if isinstance(answer, (str, int, float, Decimal)) and not isinstance(answer, bool):
        return [answer] * n
    if answer is None or isinstance(answer, (bytes, dict)):
        return [None] * n
    try:  # a list, tuple, or any other sequence (e.g. a numpy array)
        size = len(answer)
        return [answer[i] if i < size else None for i in range(n)]
    except Exception:  # noqa: BLE001
        return [None] * n


def _finite(x) -> float:
    """x as a finite float, 0.0 when that is impossible."""
    try:
        x = float(x)
    except Exception:  # noqa: BLE001
        return 0.0
    return x if math.isfinite(x) else 0.0


def _score_each(completions, score, golds=None) -> list[float]:
    """Apply score(text[, gold]) to every completion; any exception or non-finite value scores 0.0."""
    items = _as_list(completions)
    out = []
    for i, c in enumerate(items):
        try:
            text = completion_text(c)
            value = score(text) if golds is None else score(text, golds[i])
        except Exception:  # noqa: BLE001 - a reward must never raise
            value = 0.0
        out.append(_finite(value))
    return out


# --------------------------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------------------------

# One number: optional minus (ASCII or U+2212, possibly before a currency sign: "-$5"), then digits with valid
# thousands commas ("1,000,000") or plain digits, then an optional decimal part; or a bare decimal part (".5").
# ASCII digits only, by design.
_NUMBER_RE = re.compile(
    r"(?:[-\u2212][$\u20ac\u00a3]?)?(?:(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)"
)
_NOT_IN_NUMBER = str.maketrans({",": None, "$": None, "\u20ac": None, "\u00a3": None, "\u2212": "-"})
_INTEGER_RE = re.compile(r"-?[0-9]+")


def _numbers(text: str, limit: int = 2) -> list[Decimal]:
    """Up to `limit` numbers found in text, in order, as exact Decimals."""
    found = []
    for m in _NUMBER_RE.finditer(text):
        token = m.group().translate(_NOT_IN_NUMBER)
        try:
            found.append(Decimal(token))
        except (InvalidOperation, ValueError):
            return []
        if len(found) >= limit:
            break
    return found


def _to_str(value) -> str | None:
    """A gold or predicted answer as a string: str as is, int/float/Decimal via str(), anything else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    return None


def _single_number(text: str) -> Decimal | None:
    """The one number in text, or None when it holds none or more than one."""
    nums = _numbers(text[:MAX_SCAN_CHARS], limit=2)
    return nums[0] if len(nums) == 1 else None


def parse_number(text) -> float | None:
    """The single number in text ("$1,000" -> 1000.0, "18 dollars" -> 18.0); None for none, several, or non-ASCII."""
    try:
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            value = float(text)
            return value if math.isfinite(value) else None
        s = _to_str(text)
        if s is None:
            return None
        d = _single_number(s)
        if d is None:
            return None
        value = float(d)
        return value if math.isfinite(value) else None
    except Exception:  # noqa: BLE001
        return None


# math-verify fallback. math-verify happily extracts *part* of a string ("18 (19)" verifies as 18), and sympy can
# be made to hang ("9^9^9^9"), so only a short ASCII string that is ONE well-formed arithmetic expression reaches
# it: numbers, + - * /, \cdot, \times, brackets, \frac{..}{..}, \sqrt{..}; no powers, no factorials, no
# letters, no commas, no implicit multiplication, at most MATH_VERIFY_MAX_OPS operators (measured worst case on a
# CPU: ~0.3 s; a 22-step "7/7/.../7" ran past 20 s). _is_simple_expression checks that with a tiny parser.
_EXPR_TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)|(?P<cmd>\\[a-zA-Z]+)|(?P<op>[-+*/(){}]))"
)
_EXPR_COMMANDS = {"\\frac": "frac", "\\dfrac": "frac", "\\tfrac": "frac", "\\sqrt": "sqrt",
                  "\\cdot": "*", "\\times": "*", "\\left": None, "\\right": None}
_OPEN_CLOSE = {"(": ")", "{": "}"}
_EXPR_OPERATORS = frozenset({"+", "-", "*", "/", "frac", "sqrt"})


def _expr_tokens(s: str) -> list[str] | None:
    """Tokens of a candidate expression ("n" for a number), or None when s holds anything else."""
    tokens, pos, s = [], 0, s.rstrip()
    while pos < len(s):
        m = _EXPR_TOKEN_RE.match(s, pos)
        if m is None:
            return None
        pos = m.end()
        if m.group("num") is not None:
            tokens.append("n")
        elif m.group("cmd") is not None:
            if m.group("cmd") not in _EXPR_COMMANDS:
                return None
            kind = _EXPR_COMMANDS[m.group("cmd")]
            if kind is not None:  # \left and \right are dropped
                tokens.append(kind)
        else:
            tokens.append(m.group("op"))
    return tokens


def _is_expression(tokens: list[str]) -> bool:
    """Whether tokens form exactly one arithmetic expression (recursive descent; input is at most 100 chars)."""
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take(expected) -> bool:
        nonlocal pos
        if peek() == expected:
            pos += 1
            return True
        return False

    def group(open_: str) -> bool:  # "(" expr ")" or "{" expr "}"
        return take(open_) and expr() and take(_OPEN_CLOSE[open_])

    def primary() -> bool:
        nonlocal pos
        tok = peek()
        if tok == "n":
            pos += 1
            return True
        if tok == "(":  # a bare "{...}" is a set to math-verify, so braces only follow \frac and \sqrt
            return group("(")
        if tok == "frac":
            pos += 1
            return group("{") and group("{")
        if tok == "sqrt":
            pos += 1
            return group("{")
        return False

    def unary() -> bool:
        while peek() in ("-", "+"):
            take(peek())
        return primary()

    def term() -> bool:
        if not unary():
            return False
        while peek() in ("*", "/"):
            take(peek())
            if not unary():
                return False
        return True

    def expr() -> bool:
        if not term():
            return False
        while peek() in ("+", "-"):
            take(peek())
            if not term():
                return False
        return True

    try:
        return bool(tokens) and expr() and pos == len(tokens)
    except RecursionError:
        return False


def _is_simple_expression(s: str) -> bool:
    """Whether s is short, ASCII, and exactly one arithmetic expression (so math-verify may judge it)."""
    if len(s) > MATH_VERIFY_MAX_CHARS or not s.isascii():
        return False
    tokens = _expr_tokens(s.strip().strip("$"))
    if tokens is None or sum(t in _EXPR_OPERATORS for t in tokens) > MATH_VERIFY_MAX_OPS:
        return False
    return _is_expression(tokens)


# Characters that make a string more than a bare number, and operators that change a number's value.
_STRUCTURE_CHARS = frozenset("\\(){}[]*/^!")
_VALUE_OPS_RE = re.compile(r"[*/^!]|\\(?:[dt]?frac|sqrt|times|cdot|div|pi)|[-\u2212]\s*[({]")
_logged_filter_installed = False


class _DropTimeoutWarning(logging.Filter):
    """Drops math-verify's one-time 'Timeout is disabled' warning: we disable it on purpose (see module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            return "Timeout is disabled" not in record.getMessage()
        except Exception:  # noqa: BLE001
            return True


@lru_cache(maxsize=4096)
def _math_verify_equal(pred: str, gold: str) -> bool:
    """math-verify's verdict on two simple expressions (gold second here, first in verify); False on any error."""
    global _logged_filter_installed
    try:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
    except Exception:  # noqa: BLE001 - math-verify missing: the fallback is simply off
        return False
    if not _logged_filter_installed:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutWarning())
        _logged_filter_installed = True

    def _parse(s: str):
        s = "$" + s.strip().strip("$").strip() + "$"  # parsed as LaTeX: brackets and \frac need delimiters
        config = [LatexExtractionConfig(), ExprExtractionConfig()]
        return parse(s, extraction_config=config, parsing_timeout=None)

    try:
        g, p = _parse(gold), _parse(pred)
        if not g or not p:
            return False
        return bool(verify(g, p, timeout_seconds=None))  # gold first: verify is asymmetric
    except Exception:  # noqa: BLE001
        return False


def answers_match(pred, gold) -> bool:
    """Whether a predicted answer equals the gold one: as exactly one number, else via math-verify; never raises."""
    try:
        p, g = _to_str(pred), _to_str(gold)
        if p is None or g is None:
            return False
        if "####" in g:  # a raw GSM8K solution: the answer follows the last "####"
            g = g.rsplit("####", 1)[1]
        p, g = p.strip(), g.strip()
        if not p or not g:
            return False
        pn, gn = _single_number(p), _single_number(g)
        both_numbers = pn is not None and gn is not None
        if both_numbers and _STRUCTURE_CHARS.isdisjoint(p) and _STRUCTURE_CHARS.isdisjoint(g):
            return pn == gn  # exact Decimal equality: "72.0" == "72", "1,000" == "1000", "$18" == "18 dollars"
        if _is_simple_expression(p) and _is_simple_expression(g):
            return _math_verify_equal(p, g)  # "\frac{1}{2}" == "0.5", "3/4" == "0.75", "(18)" == "18"
        if both_numbers and not _VALUE_OPS_RE.search(p) and not _VALUE_OPS_RE.search(g):
            return pn == gn  # one number with harmless decoration: "\boxed{18}", "18 (dollars)"
        if pn is None and gn is None and p == g:
            # non-numeric golds (e.g. "A") compare as strings; never reached for a single-number gold, so a
            # hedge like "18 or 19" can match only a gold that is literally "18 or 19"
            return True
        return False
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------------------------------------------
# The rewards
# --------------------------------------------------------------------------------------------------------------


def _correctness(text: str, gold) -> float:
    """CORRECT_SCORE when the text's answer matches gold."""
    pred = answer_of(text)
    return CORRECT_SCORE if pred is not None and answers_match(pred, gold) else 0.0


def _integer(text: str) -> float:
    """INTEGER_SCORE when the answer is a plain integer."""
    pred = answer_of(text)
    return INTEGER_SCORE if pred is not None and _INTEGER_RE.fullmatch(pred) else 0.0


_STRICT_HEAD = REASONING_START + "\n"
_STRICT_MIDDLE = "\n" + REASONING_END + "\n" + ANSWER_START + "\n"
_STRICT_TAIL = "\n" + ANSWER_END


def _strict(text: str) -> float:
    """STRICT_FORMAT_SCORE for exactly format_completion's layout, allowing whitespace around the whole."""
    s = text.strip()
    if not (s.startswith(_STRICT_HEAD) and s.endswith(_STRICT_TAIL)):
        return 0.0
    if any(s.count(tag) != 1 for tag in TAGS):
        return 0.0
    middle = s.find(_STRICT_MIDDLE)
    if middle < len(_STRICT_HEAD):
        return 0.0
    if len(s) - len(_STRICT_TAIL) < middle + len(_STRICT_MIDDLE):
        return 0.0
    return STRICT_FORMAT_SCORE


_REASONING_THEN_ANSWER_RE = re.compile(re.escape(REASONING_END) + r"\s*" + re.escape(ANSWER_START))


def _soft(text: str) -> float:
    """SOFT_FORMAT_SCORE when <reasoning>..</reasoning>, whitespace, <answer>..</answer> occur in order anywhere."""
    start = text.find(REASONING_START)
    if start < 0:
        return 0.0
    m = _REASONING_THEN_ANSWER_RE.search(text, start + len(REASONING_START))
    if m is None:
        return 0.0
    return SOFT_FORMAT_SCORE if text.find(ANSWER_END, m.end()) >= 0 else 0.0


def _tag_count(text: str) -> float:
    """TAG_SCORE per tag appearing exactly once, minus the capped trailing-text penalty."""
    score = sum(TAG_SCORE for tag in TAGS if text.count(tag) == 1)
    last_end = text.rfind(ANSWER_END)
    if last_end >= 0:
        trailing = len(text[last_end + len(ANSWER_END) :].strip())
        score -= min(TRAILING_PENALTY_CAP, TRAILING_PENALTY_PER_CHAR * trailing)
    return score


# The five rewards above check the answer and the layout, never the reasoning: '<answer>12</answer>' alone scores
# 2.75 of 4, and junk inside perfect tags with the right answer the full 4.0. shown_work_reward (not in
# DEFAULT_REWARDS; 04 shows it) pays for one verifiable piece of the reasoning: a calculation whose result is the
# answer. It cannot check the steps before it, so it narrows the gap, it does not close it ("0 + 12 = 12" passes).
SHOWN_WORK_SCORE = 0.5
_REASONING_RE = re.compile(re.escape(REASONING_START) + r"(.*?)" + re.escape(REASONING_END), re.DOTALL)
_CALCULATION_RE = re.compile(r"(?P<lhs>[0-9.,()+\-*/x\u00d7\u00f7 ]{0,80}[0-9)])\s*=\s*\$?(?P<rhs>-?[0-9][0-9,]*(?:\.[0-9]+)?)")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _arithmetic(expression: str) -> float | None:
    """The value of a plain arithmetic expression with at least one operator ("3 x 4", "1,000 + 250"), else None."""
    text = expression.replace(",", "").replace("\u00d7", "*").replace("x", "*").replace("\u00f7", "/").strip()
    text = text.lstrip("*/+ ")  # "box 3 x 4" leaves "x 3 x 4": the x of a word, not an operator
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return None

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not plain arithmetic")

    try:
        return value(tree) if isinstance(tree, ast.BinOp) else None
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def _shown_work(text: str, gold) -> float:
    """SHOWN_WORK_SCORE when the last reasoning block holds a right calculation whose result is the gold answer."""
    blocks = _REASONING_RE.findall(text[-MAX_SCAN_CHARS:])
    if not blocks or gold is None:
        return 0.0
    for m in _CALCULATION_RE.finditer(blocks[-1]):
        lhs, rhs = _arithmetic(m.group("lhs")), parse_number(m.group("rhs"))
        if lhs is not None and rhs is not None and math.isclose(lhs, rhs, rel_tol=1e-9, abs_tol=1e-9) \
                and answers_match(m.group("rhs"), gold):
            return SHOWN_WORK_SCORE
    return 0.0


def shown_work_reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """0.5 when the reasoning shows a calculation that is right and ends at the gold answer ("3 * 4 = 12")."""
    return _score_each(completions, _shown_work, _golds(answer, len(_as_list(completions))))


def correctness_reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """2.0 when the completion's last <answer> block equals the gold `answer` numerically, else 0.0."""
    try:
        items = _as_list(completions)
        return _score_each(items, _correctness, _golds(answer, len(items)))
    except Exception:  # noqa: BLE001
        return [0.0] * len(_as_list(completions))


def integer_answer_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.5 when the last <answer> block holds a plain integer (ASCII digits, optional leading '-'), else 0.0."""
    return _score_each(completions, _integer)


def strict_format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.5 when the whole completion is exactly prompts.format_completion's layout (outer whitespace allowed)."""
    return _score_each(completions, _strict)


def soft_format_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.5 when a <reasoning>...</reasoning> block is followed (after whitespace) by an <answer>...</answer> one."""
    return _score_each(completions, _soft)


def tag_count_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """0.125 per tag appearing exactly once, minus 0.001 per char after the last </answer> (capped at 0.5)."""
    return _score_each(completions, _tag_count)


DEFAULT_REWARDS = [
    correctness_reward,
    integer_answer_reward,
    strict_format_reward,
    soft_format_reward,
    tag_count_reward,
]

REWARD_TABLE = [
    {
        "name": "correctness_reward",
        "max_score": CORRECT_SCORE,
        "min_score": 0.0,
        "earns": "the last <answer> block holds exactly one number equal to the gold answer "
        "(commas, $, units and trailing .0 ignored), or an expression math-verify proves equal",
    },
    {
        "name": "integer_answer_reward",
        "max_score": INTEGER_SCORE,
        "min_score": 0.0,
        "earns": "the last <answer> block is a plain integer: ASCII digits with an optional leading '-'",
    },
    {
        "name": "strict_format_reward",
        "max_score": STRICT_FORMAT_SCORE,
        "min_score": 0.0,
        "earns": "the whole completion is '<reasoning>\\n...\\n</reasoning>\\n<answer>\\n...\\n</answer>' "
        "with each tag once (whitespace around it allowed)",
    },
    {
        "name": "soft_format_reward",
        "max_score": SOFT_FORMAT_SCORE,
        "min_score": 0.0,
        "earns": "somewhere a <reasoning>...</reasoning> block, then only whitespace, then <answer>...</answer>",
    },
    {
        "name": "tag_count_reward",
        "max_score": 4 * TAG_SCORE,
        "min_score": -TRAILING_PENALTY_CAP,
        "earns": "0.125 for each of the four tags that appears exactly once, minus 0.001 per character after "
        "the last </answer> (outer whitespace of that tail ignored; penalty capped at 0.5)",
    },
]


def score_completion(completion, answer) -> dict[str, float]:
    """Every default reward on one completion (a string or a message list): {reward name: score}."""
    scores = {}
    for fn in DEFAULT_REWARDS:
        try:
            values = fn(prompts=[None], completions=[completion], answer=[answer])
            scores[fn.__name__] = _finite(values[0]) if values else 0.0
        except Exception:  # noqa: BLE001
            scores[fn.__name__] = 0.0
    return scores
