import time

from hypothesis import given, strategies as st

from helpers import prompts


def test_messages_have_system_example_and_question():
    m = prompts.build_messages("What is 2+2?")
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user"]
    assert m[-1]["content"] == "What is 2+2?"
    assert prompts.extract_answer(m[2]["content"]) == "12"
    assert [x["role"] for x in prompts.build_messages("q", worked_example=False)] == ["system", "user"]


def test_system_prompt_asks_for_exactly_the_tags_the_format_reward_requires():
    """The tags the model is told to write are the ones strict_format_reward scores: the format the prompt
    describes earns it, and leaving out any one of those tags loses it."""
    import re

    from helpers.rewards import strict_format_reward

    asked = re.findall(r"</?\w+>", prompts.SYSTEM_PROMPT)
    good = prompts.format_completion("2 + 2 = 4", "4")
    assert set(asked) == set(re.findall(r"</?\w+>", good))
    assert strict_format_reward([None], [good]) == [0.5]
    for tag in set(asked):
        assert strict_format_reward([None], [good.replace(tag, "")]) == [0.0], tag


def test_extract_answer_takes_the_last_block():
    assert prompts.extract_answer("<answer>1</answer> then <answer> 2 </answer>") == "2"
    assert prompts.extract_answer("no tags") is None
    assert prompts.extract_answer(None) is None


@given(st.text(max_size=200), st.text(alphabet="0123456789", min_size=1, max_size=8))
def test_format_completion_round_trips(reasoning, answer):
    reasoning = reasoning.replace("<", "")
    assert prompts.extract_answer(prompts.format_completion(reasoning, answer)) == answer


def test_many_unclosed_answer_tags_stay_fast():
    text = "<answer>" * 5000 + "x" * 10_000
    start = time.perf_counter()
    assert prompts.extract_answer(text) is None
    assert time.perf_counter() - start < 0.2
