"""Tests for helpers/rewards.py: numeric equality, each reward's max and zero cases, and robustness properties."""

from __future__ import annotations

import math
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.prompts import MAX_SCAN_CHARS, TAGS, extract_answer, format_completion
from helpers.rewards import (
    DEFAULT_REWARDS,
    REWARD_TABLE,
    answer_of,
    answers_match,
    completion_text,
    correctness_reward,
    integer_answer_reward,
    parse_number,
    score_completion,
    soft_format_reward,
    strict_format_reward,
    tag_count_reward,
)

FULL = {
    "correctness_reward": 2.0,
    "integer_answer_reward": 0.5,
    "strict_format_reward": 0.5,
    "soft_format_reward": 0.5,
    "tag_count_reward": 0.5,
}
GOOD = format_completion("3 boxes of 4 pens: 3 * 4 = 12.", "12")
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_all(completions, answer=None):
    """Every default reward on a batch, as {name: scores}."""
    kwargs = {} if answer is None else {"answer": answer}
    return {fn.__name__: fn(prompts=[None] * 3, completions=completions, **kwargs) for fn in DEFAULT_REWARDS}


def assert_scores(scores, n):
    assert isinstance(scores, list) and len(scores) == n
    for s in scores:
        assert type(s) is float and math.isfinite(s)


# ---------------------------------------------------------------------------------------------- numeric equality


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("1,000", "1000"),
        ("1000", "1,000"),
        ("1,234,567", "1234567"),
        ("$18", "18"),
        ("$1,000.00", "1000"),
        ("72.0", "72"),
        ("72", "72.00"),
        ("-5", "-5"),
        ("\u22125", "-5"),  # Unicode minus sign
        ("18.", "18"),
        ("18 dollars", "18"),
        ("The answer is 18", "18"),
        ("x = 18", "18"),
        ("50%", "50"),
        (".5", "0.5"),
        ("\\boxed{18}", "18"),
        ("18", "#### 18"),  # a raw GSM8K gold
        ("\\frac{1}{2}", "0.5"),
        ("0.5", "\\frac{1}{2}"),
        ("$\\dfrac{3}{4}$", "0.75"),
        ("3/4", "0.75"),
        ("2 \\cdot 9", "18"),
        ("\\sqrt{144}", "12"),
        ("(18)", "18"),
        (18, "18"),  # non-string inputs are stringified
        ("18", 18),
        ("A", "A"),  # non-numeric golds compare as strings
    ],
)
def test_answers_match_equal(pred, gold):
    assert answers_match(pred, gold)


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("18 or 19", "18"),
        ("18 or 19", "19"),
        ("18, 19", "18"),
        ("between 18 and 19", "18"),
        ("18 to 19", "18"),
        ("18 19", "18"),
        ("18 (19)", "18"),
        ("{18}{19}", "18"),
        ("18 or 18", "18"),  # more than one number is wrong even when they agree
        ("19", "18"),
        ("1,0000", "10000"),  # not a valid thousands grouping: two numbers
        ("3,5", "3.5"),  # decimal commas are not supported
        ("\\sqrt{144}", "144"),
        ("18^2", "324"),  # powers never reach sympy
        ("9^9^9^9", "1"),
        ("1e3", "1000"),  # scientific notation is two numbers
        ("", "18"),
        ("   ", "18"),
        ("18", ""),
        (None, "18"),
        ("18", None),
        (True, "1"),
        ([18], "18"),
        ("\u0661\u0662", "12"),  # Arabic-Indic digits are not numbers
        ("\uff11\uff12", "12"),  # neither are fullwidth digits
        ("12", "\u0661\u0662"),
    ],
)
def test_answers_match_not_equal(pred, gold):
    assert not answers_match(pred, gold)


@pytest.mark.parametrize(
    "text, value",
    [
        ("1,000", 1000.0),
        ("$18", 18.0),
        ("72.0", 72.0),
        ("-5", -5.0),
        ("18.", 18.0),
        ("18 dollars", 18.0),
        (".25", 0.25),
        (7, 7.0),
        (2.5, 2.5),
        ("18 or 19", None),
        ("no number", None),
        ("", None),
        (None, None),
        (True, None),
        ({"a": 1}, None),
        ("\u0661\u0662", None),
        (float("inf"), None),
        ("9" * 400, None),  # overflows a float: None rather than inf
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_answers_match_off_main_thread():
    """math-verify runs with its signal.alarm timeouts off, so it works in a worker thread."""
    results = []
    t = threading.Thread(target=lambda: results.append(answers_match("\\frac{1}{4}", "0.25")))
    t.start()
    t.join(timeout=60)
    assert results == [True]


# ---------------------------------------------------------------------------------------------- each reward


def test_full_score_plain_and_conversational():
    assert score_completion(GOOD, "12") == FULL
    assert score_completion([{"role": "assistant", "content": GOOD}], "12") == FULL
    assert score_completion({"role": "assistant", "content": GOOD}, "12") == FULL
    parts = [{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}]
    assert score_completion(parts, "12") == FULL


def test_conversational_ignores_non_assistant_messages():
    conv = [{"role": "tool", "content": "<answer>99</answer>"}, {"role": "assistant", "content": GOOD}]
    assert completion_text(conv) == GOOD


def test_zero_cases():
    zero = dict.fromkeys(FULL, 0.0)
    assert score_completion("", "12") == zero
    assert score_completion("12", "12") == zero  # right number, no tags
    assert score_completion(None, "12") == zero
    assert score_completion(12, "12") == zero


def test_correctness_reward():
    wrong = format_completion("r", "13")
    assert correctness_reward([None, None], [GOOD, wrong], answer=["12", "12"]) == [2.0, 0.0]
    hedge = format_completion("r", "12 or 13")
    assert correctness_reward([None], [hedge], answer=["12"]) == [0.0]
    commas = format_completion("r", "$1,000.0")
    assert correctness_reward([None], [commas], answer=["1000"]) == [2.0]
    # the last <answer> block counts
    two = "<answer>12</answer> no wait <answer>13</answer>"
    assert correctness_reward([None], [two], answer=["13"]) == [2.0]


def test_correctness_answer_shapes():
    assert correctness_reward([None, None], [GOOD, GOOD]) == [0.0, 0.0]  # answer missing
    assert correctness_reward([None, None], [GOOD, GOOD], answer=["12"]) == [2.0, 0.0]  # too short
    assert correctness_reward([None], [GOOD], answer=["12", "13", "14"]) == [2.0]  # too long
    assert correctness_reward([None, None], [GOOD, GOOD], answer="12") == [2.0, 2.0]  # a scalar is shared
    assert correctness_reward([None], [GOOD], answer=[None]) == [0.0]
    assert correctness_reward([None], [GOOD], answer=[12]) == [2.0]
    assert correctness_reward([None], [GOOD], answer={"x": 1}) == [0.0]
    assert correctness_reward([None], [GOOD], answer=("12",)) == [2.0]


def test_integer_answer_reward():
    cases = {"12": 0.5, "-12": 0.5, "007": 0.5, "12.0": 0.0, "1,000": 0.0, "$12": 0.0, "twelve": 0.0,
             "\u0661\u0662": 0.0, "": 0.0}
    for ans, expected in cases.items():
        assert integer_answer_reward([None], [format_completion("r", ans)]) == [expected], ans
    assert integer_answer_reward([None], ["no tags 12"]) == [0.0]


def test_strict_format_reward():
    assert strict_format_reward([None], [GOOD]) == [0.5]
    assert strict_format_reward([None], ["\n  " + GOOD + "\n\n"]) == [0.5]  # outer whitespace is fine
    assert strict_format_reward([None], [format_completion("", "")]) == [0.5]
    bad = [
        GOOD + " trailing",
        "prefix " + GOOD,
        GOOD.replace("\n", " "),
        "<reasoning>\n</reasoning>\n<answer>\n12\n</answer>",  # reasoning needs its own line
        "<reasoning>\nr\n</reasoning>\n\n<answer>\n12\n</answer>",
        GOOD + "\n<answer>\n12\n</answer>",  # a tag twice
        format_completion("r <answer>", "12"),
        "<answer>\n12\n</answer>",
    ]
    for text in bad:
        assert strict_format_reward([None], [text]) == [0.0], text


def test_soft_format_reward():
    good = [
        GOOD,
        "<reasoning>r</reasoning><answer>12</answer>",  # no newlines needed
        "Sure! <reasoning>r</reasoning>\n\n <answer>12</answer> bye",  # anywhere
        "<reasoning></reasoning><answer></answer>",
    ]
    for text in good:
        assert soft_format_reward([None], [text]) == [0.5], text
    bad = [
        "<answer>12</answer><reasoning>r</reasoning>",  # wrong order
        "<reasoning>r</reasoning> so <answer>12</answer>",  # text between the blocks
        "<reasoning>r</reasoning><answer>12",  # unclosed
        "</reasoning><answer>12</answer>",  # no opening reasoning tag
        "plain text",
    ]
    for text in bad:
        assert soft_format_reward([None], [text]) == [0.0], text


def test_tag_count_reward():
    assert tag_count_reward([None], [GOOD]) == [0.5]
    assert tag_count_reward([None], [GOOD + "\n\n"]) == [0.5]  # trailing whitespace is free
    assert tag_count_reward([None], [GOOD + "x" * 10]) == [pytest.approx(0.49)]
    assert tag_count_reward([None], [GOOD + "x" * 10_000]) == [0.0]  # penalty capped at 0.5
    assert tag_count_reward([None], ["<reasoning>only"]) == [0.125]
    assert tag_count_reward([None], [GOOD + GOOD]) == [0.0]  # every tag twice, nothing trailing
    assert tag_count_reward([None], ["</answer>" * 2 + "x" * 1000]) == [-0.5]  # the floor
    assert tag_count_reward([None], ["no tags"]) == [0.0]


def test_reward_table_matches_rewards():
    assert [row["name"] for row in REWARD_TABLE] == [fn.__name__ for fn in DEFAULT_REWARDS]
    for row in REWARD_TABLE:
        assert FULL[row["name"]] == row["max_score"]
        assert row["min_score"] <= 0.0 and row["earns"]
    assert sum(row["max_score"] for row in REWARD_TABLE) == 4.0


def test_rewards_separate_a_typical_group():
    """Completions of different quality get different totals, so GRPO has an advantage to learn from."""
    group = [
        GOOD,
        format_completion("r", "13"),
        "<reasoning>r</reasoning> <answer>12</answer>",
        "The answer is 12.",
        GOOD + " Let me know if you need more help!",
    ]
    totals = [sum(score_completion(c, "12").values()) for c in group]
    assert len(set(totals)) == len(totals)


# ---------------------------------------------------------------------------------------------- robustness


WEIRD_INPUTS = [
    None,
    12,
    1.5,
    float("nan"),
    b"<answer>12</answer>",
    {},
    {"content": None},
    {"role": "assistant", "content": 12},
    [],
    [None],
    [[]],
    [{"role": "assistant"}],
    [{"role": "assistant", "content": [None, 3, {"text": None}, {"text": "<answer>12</answer>"}]}],
    [{"role": None, "content": "x"}],
    [{"role": "assistant", "content": "<answer>12</answer>"}, "stray"],
    "",
    "\x00" * 10,
    "\ud800",  # lone surrogate
    "\u0661\u0662",
    "<answer>\u0661\u0662</answer>",
    "<answer>" + "9" * 5000 + "</answer>",
    "<answer>" + "1," * 3000 + "</answer>",
    "<answer>" + "(" * 400 + "</answer>",
    "<answer>" + "\\frac{" * 20 + "</answer>",
    "<answer>" + "9" * 99 + "</answer>",
    "<answer>" + "1/" * 49 + "1</answer>",
    "<answer>-(-(-(-5)))</answer>",
    "<answer>1/0</answer>",
]


@pytest.mark.parametrize("gold", ["12", None, 12, "", "\\frac{1}{2}", [1], "1/0"])
def test_weird_inputs_never_raise(gold):
    for fn in DEFAULT_REWARDS:
        assert_scores(fn(None, WEIRD_INPUTS, answer=[gold] * len(WEIRD_INPUTS)), len(WEIRD_INPUTS))
    for item in WEIRD_INPUTS:
        scores = score_completion(item, gold)
        assert set(scores) == set(FULL) and all(math.isfinite(v) for v in scores.values())


@pytest.mark.parametrize("completions", [None, "one string", {"content": "x"}, (c for c in ["a", "b"]), 5])
def test_odd_completion_containers(completions):
    for fn in DEFAULT_REWARDS:
        scores = fn(None, completions, answer=["1"])
        assert isinstance(scores, list) and all(math.isfinite(s) for s in scores)


def test_extra_kwargs_accepted():
    scores = correctness_reward(prompts=["q"], completions=[GOOD], answer=["12"], completion_ids=[[1]], trainer_state=None)
    assert scores == [2.0]


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(["role", "content", "text", 0]), children, max_size=3),
    max_leaves=12,
)
tagged_text = st.lists(st.sampled_from(TAGS) | st.text(max_size=8) | st.sampled_from(["\n", " ", "12", "1,000", "$"]), max_size=30).map("".join)


@PROPS
@given(completions=st.lists(junk, max_size=5), answer=junk)
def test_property_junk_never_raises(completions, answer):
    for fn in DEFAULT_REWARDS:
        assert_scores(fn(None, completions, answer=answer), len(completions))


@PROPS
@given(texts=st.lists(tagged_text | st.text(), min_size=1, max_size=4), golds=st.lists(st.text(max_size=10) | st.integers().map(str), max_size=5))
def test_property_text_scores_in_range(texts, golds):
    for row, fn in zip(REWARD_TABLE, DEFAULT_REWARDS):
        scores = fn(None, texts, answer=golds)
        assert_scores(scores, len(texts))
        assert all(row["min_score"] - 1e-9 <= s <= row["max_score"] + 1e-9 for s in scores)
    convo = [[{"role": "assistant", "content": t}] for t in texts]
    assert [score_completion(c, "1") for c in convo] == [score_completion(t, "1") for t in texts]


no_tags = st.text(max_size=200).filter(lambda s: "<" not in s)


@PROPS
@given(reasoning=no_tags, n=st.integers(min_value=-(10**12), max_value=10**12))
def test_property_format_completion_gets_full_score(reasoning, n):
    assert score_completion(format_completion(reasoning, str(n)), str(n)) == FULL


@PROPS
@given(n=st.integers(min_value=-(10**9), max_value=10**9), dollar=st.booleans(), dot_zero=st.booleans(), commas=st.booleans(), other=st.integers(-1000, 1000))
def test_property_decoration_does_not_change_correctness(n, dollar, dot_zero, commas, other):
    text = f"{n:,}" if commas else str(n)
    if dollar:
        text = "-$" + text[1:] if text.startswith("-") else "$" + text
    if dot_zero:
        text += ".0"
    for gold in (n, n + other):
        plain = correctness_reward(None, [format_completion("r", str(n))], answer=[str(gold)])
        assert correctness_reward(None, [format_completion("r", text)], answer=[str(gold)]) == plain


@PROPS
@given(
    a=st.integers(-10**6, 10**6),
    b=st.integers(-10**6, 10**6),
    template=st.sampled_from(["{a} or {b}", "{a}, {b}", "between {a} and {b}", "{a} to {b}", "{a} {b}", "{a}; {b}", "{a} ({b})", "{a} or maybe {b}"]),
    decimal=st.booleans(),
)
def test_property_two_numbers_never_correct(a, b, template, decimal):
    if a == b:
        b += 1
    fa, fb = (f"{a}.5", f"{b}.5") if decimal else (str(a), str(b))
    pred = template.format(a=fa, b=fb)
    for gold in (fa, fb):
        assert not answers_match(pred, gold)
        assert correctness_reward(None, [format_completion("r", pred)], answer=[gold]) == [0.0]


@PROPS
@given(text=tagged_text)
def test_property_answer_of_agrees_with_extract_answer(text):
    assert answer_of(text) == extract_answer(text)


# ---------------------------------------------------------------------------------------------- speed


def test_long_inputs_are_fast():
    answers_match("\\frac{1}{2}", "0.5")  # warm math-verify's import outside the timed part
    one_mb = "x" * 1_000_000
    big = [
        one_mb,
        GOOD + one_mb,
        "<reasoning>\n" + one_mb + "\n</reasoning>\n<answer>\n12\n</answer>",
        "<answer>" * 5000,
        "</answer>" + "<answer>" * 5000,
        "<reasoning>" * 5000 + "</reasoning>" * 5000 + "<answer>" * 5000 + "</answer>" * 5000,
        "".join(TAGS) * 5000,
        "</reasoning>" + " " * 1_000_000 + "<answer>",
        "<answer>" + "1" * (MAX_SCAN_CHARS * 3) + "</answer>",
        "<answer>" + "1, " * 300_000 + "</answer>",
        "<answer>" + "/".join(["7"] * 50) + "</answer>",  # math-verify's verify() is exponential in this
        "<answer>" + "\\frac{" * 8 + "1}{3}" + "}{7}" * 7 + "</answer>",
        "<answer>" + "\\sqrt{" * 14 + "2" + "}" * 14 + "</answer>",
    ]
    for text in big:
        start = time.perf_counter()
        scores = score_completion(text, "12")
        assert time.perf_counter() - start < 1.0, text[:40]
        assert all(math.isfinite(v) for v in scores.values())
    # a 1 MB completion is well under 100 ms per reward
    for fn in DEFAULT_REWARDS:
        start = time.perf_counter()
        fn(None, [GOOD + one_mb], answer=["12"])
        assert time.perf_counter() - start < 0.1, fn.__name__


# ------------------------------------------------------------------------------------------ shown work (04's fix)

SHOWN_WORK_CASES = [  # (completion, gold, score): a right calculation ending at the answer pays; nothing else does
    ("<reasoning>\n3 bags times 4 apples is 3 * 4 = 12.\n</reasoning>\n<answer>\n12\n</answer>", "12", 0.5),
    ("<reasoning>\nthe box holds 3 x 4 = 12 apples\n</reasoning>\n<answer>12</answer>", "12", 0.5),
    ("<reasoning>1,000 + 250 = 1,250</reasoning><answer>1250</answer>", "1250", 0.5),
    ("<reasoning>\n48 / 2 = 24, 48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>", "72", 0.5),
    ("<answer>12</answer>", "12", 0.0),  # the answer tag alone: 2.75 of 4 on the five rewards, 0 here
    ("<reasoning>\nblah\n</reasoning>\n<answer>\n12\n</answer>", "12", 0.0),  # junk in perfect tags
    ("<reasoning>\n3 * 4 = 13\n</reasoning>\n<answer>\n13\n</answer>", "13", 0.0),  # wrong arithmetic
    ("<reasoning>\n3 * 4 = 12\n</reasoning>\n<answer>\n13\n</answer>", "13", 0.0),  # right arithmetic, not the answer
    ("<reasoning>\n12 = 12\n</reasoning>\n<answer>12</answer>", "12", 0.0),  # no operator: not a calculation
    ("The answer is 3 * 4 = 12.", "12", 0.0),  # no reasoning block
    ("<reasoning>\n0 + 12 = 12\n</reasoning>\n<answer>12</answer>", "12", 0.5),  # the documented limit: still gamed
    (None, "12", 0.0), ("", "12", 0.0),
]


@pytest.mark.parametrize("completion,gold,score", SHOWN_WORK_CASES)
def test_shown_work_reward_pays_for_a_right_calculation_that_ends_at_the_answer(completion, gold, score):
    from helpers.rewards import shown_work_reward

    assert shown_work_reward(prompts=[None], completions=[completion], answer=[gold]) == [score]


def test_shown_work_reward_stays_fast_on_long_digit_runs():
    import time

    from helpers.rewards import shown_work_reward

    start = time.perf_counter()
    shown_work_reward(completions=["<reasoning>" + "1 " * 9000 + "</reasoning><answer>1</answer>",
                                   "<reasoning>" + "1*" * 5000 + "1 = 1</reasoning><answer>1</answer>"], answer=["1"] * 2)
    assert time.perf_counter() - start < 2.0
