import time

from hypothesis import given, strategies as st

from helpers import prompts


def test_messages_have_system_example_and_question():
    m = prompts.build_messages("What is 2+2?")
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user"]
    assert m[-1]["content"] == "What is 2+2?"
    assert prompts.extract_answer(m[2]["content"]) == "12"
    assert [x["role"] for x in prompts.build_messages("q", worked_example=False)] == ["system", "user"]


def test_system_prompt_names_every_tag():
    for tag in ("<reasoning>", "</reasoning>", "<answer>", "</answer>"):
        assert tag in prompts.SYSTEM_PROMPT


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
