import re
import socket

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


# ------------------------------------------------------------------------------------- GSM8K on any runtime

GSM8K_LAST_LINE = re.compile(r"#### (-?[\d,]+)")  # every gold in the shipped rows is an integer, maybe with commas


@pytest.mark.parametrize("split,n", [("train", 40), ("test", 20)])
def test_the_shipped_sample_is_gsm8k_as_published(split, n):
    records = data.gsm8k_sample(split)
    assert len(records) == n and all(list(r) == ["question", "answer"] for r in records)
    assert len({r["question"] for r in records}) == n
    for r in records:
        last = GSM8K_LAST_LINE.fullmatch(r["answer"].splitlines()[-1])
        assert last, f"GSM8K's solution ends with '#### N': {r['answer'][-40:]!r}"
        gold = data.parse_gsm8k_answer(r["answer"])
        assert re.fullmatch(r"-?\d+", gold) and int(gold) == int(last.group(1).replace(",", ""))
    assert sum("<<" in r["answer"] for r in records) > n // 2, "calculator annotations, as in GSM8K"
    # one gold with a thousands comma in each split, which the parser strips
    assert [data.parse_gsm8k_answer(r["answer"]) for r in records if "," in r["answer"].splitlines()[-1]] == (
        ["1080"] if split == "train" else ["2125"])
    assert data.gsm8k_rows(records[:1], worked_example=False)[0]["answer"] == ("72" if split == "train" else "18")


def test_train_and_test_samples_share_no_question():
    assert not {r["question"] for r in data.gsm8k_sample("train")} & {r["question"] for r in data.gsm8k_sample("test")}


def _no_offline_settings(monkeypatch):
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def _fake_hub(monkeypatch, load_dataset, reachable=True):
    """datasets.load_dataset replaced, and the probe answering as told (no network in tests)."""
    import datasets

    _no_offline_settings(monkeypatch)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(data, "_hub_unreachable", lambda timeout_s: None if reachable else "offline: no network here")


def test_gsm8k_records_are_the_real_split_when_datasets_loads_it(monkeypatch, capsys):
    from datasets import Dataset

    calls = []
    hub = [{"question": f"Q{i}?", "answer": f"step\n#### {i}"} for i in range(3)]

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return Dataset.from_list(hub)

    _fake_hub(monkeypatch, load_dataset)
    assert data.gsm8k_records("test", limit=2) == hub[:2]
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    assert capsys.readouterr().out == "GSM8K test: 2 rows of the real split, openai/gsm8k from the Hugging Face Hub\n"


def test_gsm8k_records_fall_back_to_the_sample_when_datasets_fails_and_say_why(monkeypatch, capsys):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\nmore detail")

    _fake_hub(monkeypatch, load_dataset)
    assert data.gsm8k_records("train", limit=5) == data.gsm8k_sample("train")[:5]
    out = capsys.readouterr().out
    assert out == ("GSM8K train: 5 real rows shipped with the kit (helpers/fixtures/gsm8k/train.jsonl), not the whole "
                   "split: datasets failed: ConnectionError: Couldn't reach 'openai/gsm8k' on the Hub "
                   "(LocalEntryNotFoundError)\n")
    assert data.gsm8k_records("test") == data.gsm8k_sample("test")  # no limit: the whole sample
    # a run never trains on the sample: the t4 preset's loader still fails loudly
    with pytest.raises(ConnectionError):
        data.load_gsm8k("train", limit=5)


def test_gsm8k_records_do_not_call_datasets_when_the_hub_is_out_of_reach(monkeypatch, capsys):
    def load_dataset(*args, **kwargs):
        raise AssertionError("datasets must not be asked when the probe failed")

    _fake_hub(monkeypatch, load_dataset, reachable=False)
    assert data.gsm8k_records("train", limit=3) == data.gsm8k_sample("train")[:3]
    assert capsys.readouterr().out.rstrip().endswith("not the whole split: offline: no network here")


def test_the_probe_reports_an_endpoint_that_does_not_answer(monkeypatch):
    with socket.socket() as s:  # a local port nobody listens on: refused at once, no network needed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    why = data._hub_unreachable(timeout_s=2)
    assert why and why.startswith(f"offline: http://127.0.0.1:{port} does not answer (") and "refused" in why


def test_the_probe_gives_up_after_its_timeout(monkeypatch):
    import time
    import urllib.request

    _no_offline_settings(monkeypatch)
    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kwargs: time.sleep(5))  # a lookup that hangs
    start = time.monotonic()
    assert data._hub_unreachable(timeout_s=0.2) == "offline: https://huggingface.co did not answer within 0.2 s"
    assert time.monotonic() - start < 2


def test_offline_settings_use_the_cache_and_ask_no_network(monkeypatch, capsys):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub: offline mode is enabled.")

    _fake_hub(monkeypatch, load_dataset)
    monkeypatch.setattr(data, "_hub_unreachable", lambda timeout_s: pytest.fail("no probe in offline mode"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert data.gsm8k_records("test", limit=1) == data.gsm8k_sample("test")[:1]
    assert "offline (HF_HUB_OFFLINE=1) and not in datasets' cache: ConnectionError" in capsys.readouterr().out


@pytest.mark.parametrize("env,flag", [
    ({}, None), ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE=1"), ({"HF_HUB_OFFLINE": "0"}, None),
    ({"TRANSFORMERS_OFFLINE": "yes"}, "TRANSFORMERS_OFFLINE=yes"),
    ({"HF_DATASETS_OFFLINE": "true"}, "HF_DATASETS_OFFLINE=true"),
    ({"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "1"}, None),  # datasets' rule: its own variable decides
])
def test_offline_settings_are_read_as_datasets_reads_them(monkeypatch, env, flag):
    _no_offline_settings(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert data._offline_flag() == flag


@pytest.mark.parametrize("kwargs,match", [(dict(split="validation"), "splits"), (dict(limit=-1), "limit")])
def test_gsm8k_records_refuse_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.gsm8k_records(**kwargs)


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


# ------------------------------------------------------------------ questions a run draws, by TRL's own sampler


def _trl_questions_drawn(cfg, n_rows: int = 500) -> int:
    """Replay TRL's own train sampler (GRPOTrainer._get_train_sampler on a stand-in trainer) through the
    dataloader's batches, and count the prompts at the micro-steps where _prepare_inputs generates
    (`_step % (steps_per_generation * num_iterations) == 0`, TRL 1.15)."""
    from types import SimpleNamespace

    from trl import GRPOTrainer

    stand_in = SimpleNamespace(args=cfg, num_generations=cfg.num_generations, num_iterations=cfg.num_iterations,
                               shuffle_dataset=True, train_dataset=list(range(n_rows)))
    indices = list(GRPOTrainer._get_train_sampler(stand_in))
    batch = cfg.per_device_train_batch_size * cfg.steps_per_generation  # get_train_dataloader's batch size
    batches = [indices[i:i + batch] for i in range(0, len(indices), batch)]
    generate_every = cfg.steps_per_generation * cfg.num_iterations
    micro_steps = cfg.max_steps * cfg.gradient_accumulation_steps
    assert micro_steps <= len(batches), "the stand-in dataset is too small for one epoch"
    return sum(len(set(batches[step])) for step in range(micro_steps) if step % generate_every == 0)


@pytest.mark.parametrize("settings", [
    dict(max_steps=40, per_device_train_batch_size=8, num_generations=8, num_iterations=2),   # the cpu preset
    dict(max_steps=250, per_device_train_batch_size=6, num_generations=6, num_iterations=1),  # the t4 preset
    dict(max_steps=9, per_device_train_batch_size=8, num_generations=4, num_iterations=3),
    dict(max_steps=10, per_device_train_batch_size=4, num_generations=4, num_iterations=2, gradient_accumulation_steps=3),
    dict(max_steps=7, per_device_train_batch_size=4, num_generations=2, num_iterations=1, steps_per_generation=4),
])
def test_questions_per_run_is_what_trls_sampler_draws(settings, tmp_path):
    from trl import GRPOConfig

    cfg = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **settings)
    assert data.questions_per_run(cfg) == _trl_questions_drawn(cfg)


def test_the_cpu_preset_samples_on_half_its_steps():
    from helpers.config import build_grpo_config, get_preset
    from helpers.runtime import fake_runtime

    preset = get_preset("cpu")
    cfg = build_grpo_config(preset, fake_runtime("cpu"), output_dir="/tmp/x")
    assert (data.sampling_steps(preset), data.questions_per_run(preset)) == (20, 20)
    assert data.questions_per_run(cfg) == data.questions_per_run(preset)
    assert data.questions_per_run(preset.with_overrides(num_iterations=1)) == 40
