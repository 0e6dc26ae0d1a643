import pytest
from hypothesis import given, settings, strategies as st

from helpers import data
from helpers.prompts import build_messages


@pytest.mark.parametrize("text,gold", [
    ("She pays 5 + 3 = 8 dollars.\n#### 8", "8"),
    ("Total: 1000\n#### 1,000", "1000"),
    ("#### $18", "18"),
    ("#### -5", "-5"),
    ("a\n#### 2\n#### 72", "72"),
])
def test_gsm8k_gold_is_the_number_after_hashes_without_commas(text, gold):
    assert data.parse_gsm8k_answer(text) == gold


@pytest.mark.parametrize("bad", ["no hashes here", "####   ", None])
def test_gsm8k_bad_answer_raises_a_clear_error(bad):
    with pytest.raises(ValueError, match="####"):
        data.parse_gsm8k_answer(bad)


def test_gsm8k_rows_are_chat_prompts_with_gold():
    rows = data.gsm8k_rows([{"question": "Q?", "answer": "work\n#### 1,234"}], worked_example=False)
    assert rows == [{"prompt": build_messages("Q?", worked_example=False), "answer": "1234", "question": "Q?"}]


def test_synthetic_is_reproducible_and_seed_dependent():
    a = data.synthetic_problems(20, "train", seed=1)
    assert a == data.synthetic_problems(20, "train", seed=1)
    assert a != data.synthetic_problems(20, "train", seed=2)


def test_train_and_heldout_never_share_a_question():
    train = {p["question"] for p in data.synthetic_problems(1500, "train", levels=(1, 2, 3))}
    held = {p["question"] for p in data.synthetic_problems(300, "heldout", levels=(1, 2, 3))}
    assert len(train) == 1500 and len(held) == 300 and not train & held


def test_every_operation_and_level_appears():
    rows = data.synthetic_problems(24, "train", levels=(1, 2, 3))
    assert {r["operation"] for r in rows} == set(data.OPERATIONS)
    assert {r["level"] for r in rows} == {1, 2, 3}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(data.OPERATIONS), st.sampled_from(data.LEVELS))
def test_synthetic_answers_are_right(seed, op, level):
    import random

    p = data.make_problem(random.Random(seed), op, level)
    nums = [int(t.rstrip(".,?")) for t in p["question"].split() if t.rstrip(".,?").isdigit()]
    a = int(p["answer"])
    expected = {
        "add": lambda n: n[0] + n[1], "sub": lambda n: n[0] - n[1], "mul": lambda n: n[0] * n[1],
        "div": lambda n: n[0] // n[1],
    }[op](nums)
    if level == 3:
        expected += nums[2]
    assert a == expected and a >= 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(split="test"), "split"), (dict(n=-1), "n must"), (dict(levels=(7,)), "level"),
    (dict(operations=("pow",)), "operation"),
])
def test_bad_synthetic_arguments_name_the_problem(kwargs, match):
    args = dict(n=3, split="train") | kwargs
    with pytest.raises(ValueError, match=match):
        data.synthetic_problems(**args)


class _CharTokenizer:
    """One token per character of the rendered messages: enough to test the filter without a model."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list("".join(m["content"] for m in messages))


def test_filter_long_prompts_drops_only_the_long_ones():
    rows = [{"prompt": [{"role": "user", "content": "x" * n}], "answer": "1"} for n in (5, 50, 10, 500)]
    kept, dropped = data.filter_long_prompts(rows, _CharTokenizer(), 20)
    assert dropped == 2 and [len(r["prompt"][0]["content"]) for r in kept] == [5, 10]
    with pytest.raises(ValueError, match="positive"):
        data.filter_long_prompts(rows, _CharTokenizer(), 0)


def test_filter_works_on_a_datasets_dataset():
    ds = data.synthetic_dataset(10, "train", worked_example=False)
    kept, dropped = data.filter_long_prompts(ds, _CharTokenizer(), 10_000)
    assert dropped == 0 and len(kept) == 10 and kept.column_names == ds.column_names


def test_a_presets_questions_have_one_home():
    """helpers.data decides which questions a preset trains and is evaluated on (the notebooks, helpers.train and
    the evaluate command all call it); the held-out ones never appear in training."""
    from helpers.config import get_preset

    preset = get_preset("cpu", train_size=40, eval_size=6, seed=3)
    train_rows = data.training_questions(preset)
    heldout = data.heldout_questions(preset)
    assert len(train_rows) == 40 and len(heldout) == 6
    assert not {r["question"] for r in heldout} & set(train_rows["question"])
    assert data.heldout_questions(preset, 2) == heldout[:2]
    assert list(data.training_questions(preset, limit=5)["question"]) == train_rows["question"][:5]
    assert data.training_questions(preset.with_overrides(seed=4))["question"] != train_rows["question"]
