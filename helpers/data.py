"""Questions for training and evaluation: GSM8K on GPU, an offline synthetic set on CPU; real GSM8K rows anywhere.

Every row has the same columns: "prompt" (chat messages built by helpers.prompts), "answer" (the gold number as
a string, the column the correctness reward reads) and "question" (plain text, for printing).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import threading
import urllib.error
import urllib.request
from pathlib import Path

from helpers.prompts import build_messages

# --------------------------------------------------------------------------------------------------- GSM8K

GSM8K_DATASET = ("openai/gsm8k", "main")


def parse_gsm8k_answer(solution: str) -> str:
    """The gold number after '####', commas, '$' and spaces removed ("#### 1,000" -> "1000").

    OpenAI's reference grader strips commas the same way; exact string match without it marks "1,000" wrong.
    """
    if not isinstance(solution, str) or "####" not in solution:
        raise ValueError(f"a GSM8K answer must contain '####' followed by the number; got {solution!r:.80}")
    gold = solution.split("####")[-1].strip().replace(",", "").replace("$", "").replace(" ", "")
    if not gold:
        raise ValueError(f"nothing after '####' in GSM8K answer {solution!r:.80}")
    return gold


def gsm8k_rows(records, worked_example: bool = True) -> list[dict]:
    """Turn GSM8K records ({"question", "answer"}) into kit rows."""
    return [
        {
            "prompt": build_messages(r["question"], worked_example=worked_example),
            "answer": parse_gsm8k_answer(r["answer"]),
            "question": r["question"],
        }
        for r in records
    ]


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K has splits 'train' and 'test', not {split!r}")


def _hub_split(split: str, limit: int | None):
    """GSM8K's records ({"question", "answer"}) through datasets.load_dataset: the first `limit` of them."""
    from datasets import load_dataset

    raw = load_dataset(*GSM8K_DATASET, split=split)
    if limit is not None:
        raw = raw.select(range(min(limit, len(raw))))
    return raw


def load_gsm8k(split: str = "train", worked_example: bool = True, limit: int | None = None):
    """GSM8K from the Hugging Face Hub as a datasets.Dataset of kit rows (needs internet: Colab, not CI)."""
    from datasets import Dataset

    _check_split(split)
    return Dataset.from_list(gsm8k_rows(_hub_split(split, limit), worked_example=worked_example))


# Real GSM8K rows shipped with the kit (40 train, 20 test; provenance and MIT license in that folder's README.md).
GSM8K_SAMPLE_DIR = Path(__file__).resolve().parent / "fixtures" / "gsm8k"


def gsm8k_sample(split: str = "train") -> list[dict]:
    """The GSM8K records shipped with the kit: lines of OpenAI's own jsonl, {"question", "answer"} each."""
    _check_split(split)
    lines = (GSM8K_SAMPLE_DIR / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _offline_flag() -> str | None:
    """The setting that tells datasets to stay offline ("HF_HUB_OFFLINE=1"), or None when none does.

    datasets' own rule: HF_DATASETS_OFFLINE decides when it is set, else HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE."""
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value is not None and (name == "HF_DATASETS_OFFLINE" or value):
            return f"{name}={value}" if value.strip().upper() in {"1", "ON", "YES", "TRUE"} else None
    return None


def _hub_unreachable(timeout_s: float) -> str | None:
    """Why the Hugging Face Hub cannot be reached (one request, at most timeout_s), or None when it answers.

    Asked first so that a machine without the Hub (CI) gives up at once, not after datasets' own timeouts and
    retries. The request runs in a thread because a name lookup ignores socket timeouts. urllib honours HTTPS_PROXY;
    HF_ENDPOINT is read as datasets reads it."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/api/datasets/{GSM8K_DATASET[0]}", method="HEAD")
    answer: list[str | None] = []

    def probe():
        try:
            with urllib.request.urlopen(request, timeout=timeout_s):
                answer.append(None)
        except urllib.error.HTTPError:
            answer.append(None)  # the server answered (whatever it said): datasets may try, and says what went wrong
        except Exception as exc:  # noqa: BLE001 - no such host, refused, a proxy, a timeout: no answer, said why
            answer.append(f"offline: {endpoint} does not answer ({getattr(exc, 'reason', None) or exc})")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return answer[0] if answer else f"offline: {endpoint} did not answer within {timeout_s:g} s"


def gsm8k_records(split: str = "train", limit: int | None = None, timeout_s: float = 5.0) -> list[dict]:
    """GSM8K records ({"question", "answer"}) on any runtime, with one printed line saying where they came from.

    The real split through datasets (what load_gsm8k loads for the t4 preset) when it can be loaded; else the kit's
    shipped sample (gsm8k_sample), the reason given. With HF_HUB_OFFLINE=1 (or HF_DATASETS_OFFLINE=1) only datasets'
    local cache is tried. limit: at most that many, from the start of the split. gsm8k_rows turns the records into
    kit rows. For showing the data: a run never trains on the sample (load_gsm8k fails without the Hub)."""
    _check_split(split)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    flag = _offline_flag()
    why = None if flag else _hub_unreachable(timeout_s)
    if why is None:
        try:
            records = [{"question": r["question"], "answer": r["answer"]} for r in _hub_split(split, limit)]
        except Exception as exc:  # noqa: BLE001 - whatever stops datasets (network, cache, Hub): the sample, said why
            error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            why = f"offline ({flag}) and not in datasets' cache: {error}" if flag else f"datasets failed: {error}"
        else:
            where = f"datasets' local cache ({flag})" if flag else "the Hugging Face Hub"
            print(f"GSM8K {split}: {len(records)} rows of the real split, {GSM8K_DATASET[0]} from {where}")
            return records
    sample = gsm8k_sample(split)[:limit]
    where = (GSM8K_SAMPLE_DIR / f"{split}.jsonl").relative_to(GSM8K_SAMPLE_DIR.parents[2]).as_posix()
    print(f"GSM8K {split}: {len(sample)} real rows shipped with the kit ({where}), not the whole split: {why}")
    return sample


# ----------------------------------------------------------------------------------------------- synthetic

_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena", "Mo", "Nia"]
_ITEMS = ["apples", "books", "coins", "stickers", "marbles", "pencils", "cards", "shells", "stamps", "beads"]

OPERATIONS = ("add", "sub", "mul", "div")
LEVELS = (1, 2, 3)
# Level 1: one operation, small numbers. Level 2: one operation, larger numbers. Level 3: two operations.
_RANGES = {1: (2, 12), 2: (10, 60), 3: (2, 12)}


def _one_step(rng: random.Random, op: str, level: int, name: str, item: str) -> tuple[str, str, int]:
    """(setup sentence, question sentence, answer) for one operation."""
    lo, hi = _RANGES[level]
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    if op == "add":
        return f"{name} has {a} {item} and gets {b} more.", f"How many {item} does {name} have now?", a + b
    if op == "sub":
        a, b = max(a, b) + lo, min(a, b)
        return f"{name} has {a} {item} and gives away {b}.", f"How many {item} does {name} have left?", a - b
    if op == "mul":
        return f"{name} has {a} bags with {b} {item} in each bag.", f"How many {item} does {name} have?", a * b
    # div: exact division only, so the gold answer is always an integer
    return (f"{name} shares {a * b} {item} equally among {a} friends.",
            f"How many {item} does each friend get?", b)


def _two_step(rng: random.Random, op: str, name: str, item: str) -> tuple[str, int]:
    setup, _, first = _one_step(rng, op, 1, name, item)
    if op == "div":
        setup = setup.replace("friends.", "friends, keeping one share.")
    extra = rng.randint(2, 9)
    return f"{setup} Then {name} finds {extra} more. How many {item} does {name} have now?", first + extra


def make_problem(rng: random.Random, op: str, level: int) -> dict:
    """One word problem with an integer answer; seeded by rng."""
    if op not in OPERATIONS:
        raise ValueError(f"operation must be one of {OPERATIONS}, got {op!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if level == 3:
        question, answer = _two_step(rng, op, name, item)
    else:
        setup, ask, answer = _one_step(rng, op, level, name, item)
        question = f"{setup} {ask}"
    return {"question": question, "answer": str(answer), "operation": op, "level": level}


def split_of(question: str, heldout_fraction: float = 0.2) -> str:
    """'train' or 'heldout', decided by a hash of the question text, so the two splits can never share one."""
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "heldout" if bucket < heldout_fraction else "train"


def synthetic_problems(
    n: int,
    split: str = "train",
    seed: int = 0,
    operations=OPERATIONS,
    levels=(1,),
    worked_example: bool = True,
) -> list[dict]:
    """n distinct problems from one split ('train' or 'heldout'), reproducible from seed.

    Problems cycle through operations and levels so every split is balanced.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    operations, levels = tuple(operations), tuple(levels)
    rng = random.Random(f"{seed}-{split}")
    rows, seen, tries = [], set(), 0
    while len(rows) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise ValueError(
                f"could not find {n} distinct {split} problems for operations={operations} levels={levels}; "
                "ask for fewer, or allow more operations or levels"
            )
        op = operations[len(rows) % len(operations)]
        level = levels[(len(rows) // len(operations)) % len(levels)]
        p = make_problem(rng, op, level)
        if p["question"] in seen or split_of(p["question"]) != split:
            continue
        seen.add(p["question"])
        p["prompt"] = build_messages(p["question"], worked_example=worked_example)
        rows.append(p)
    return rows


def synthetic_dataset(n: int, split: str = "train", **kwargs):
    """synthetic_problems as a datasets.Dataset (what GRPOTrainer takes)."""
    from datasets import Dataset

    return Dataset.from_list(synthetic_problems(n, split, **kwargs))


# ------------------------------------------------------------------ how many held-out questions there are

GSM8K_TEST_ROWS = 1319  # openai/gsm8k main's test split (helpers/fixtures/gsm8k/README.md)


class _Scripted:
    """An rng that answers make_problem's draws from a list: every question it could write, one at a time."""

    def __init__(self, values):
        self._values = iter(values)

    def choice(self, seq):
        return next(self._values)

    def randint(self, lo, hi):
        return next(self._values)


@functools.lru_cache(maxsize=None)
def _heldout_pool(op: str, level: int) -> int:
    """Distinct held-out questions helpers.make_problem can write for one operation and level (a level-1 pool
    in 0.05 s, a level-2 one in about 1 s): it draws a name, an item, two numbers and, at level 3, a third."""
    lo, hi = _RANGES[1 if level == 3 else level]
    draws = [_NAMES, _ITEMS, range(lo, hi + 1), range(lo, hi + 1), *([range(2, 10)] if level == 3 else [])]
    return len({q for combo in itertools.product(*draws)
                if split_of(q := make_problem(_Scripted(combo), op, level)["question"]) == "heldout"})


def synthetic_heldout_count(levels, operations=OPERATIONS) -> int:
    """How many questions synthetic_problems can give from the held-out split (any seed): row i is
    operation i % O at level (i // O) % L, so the first row it cannot fill is the first whose pool is used up."""
    o, n_levels = len(operations), len(levels)
    return min(o * (k + n_levels * _heldout_pool(op, level)) + j
               for j, op in enumerate(operations) for k, level in enumerate(levels))


def heldout_count(preset) -> int:
    """The held-out questions there are to evaluate on: GSM8K's test split, or the synthetic held-out split."""
    if preset.dataset == "gsm8k":
        return GSM8K_TEST_ROWS
    return synthetic_heldout_count(tuple(preset.synthetic_levels))


def eval_size_problem(preset, known_good: int = 0) -> tuple[str, str] | None:
    """(problem, fix) when preset.eval_size asks for more held-out questions than the split holds, else None. The synthetic split searched for minutes before giving up, and GSM8K's was cut to its rows without a
    word. Counted (up to seconds for level 2) only above known_good, a size already known to be there."""
    if preset.eval_size <= known_good:
        return None
    available = heldout_count(preset)
    if preset.eval_size <= available:
        return None
    split = ("GSM8K's test split" if preset.dataset == "gsm8k" else
             f"the synthetic held-out split (levels {','.join(map(str, preset.synthetic_levels))})")
    return f"{split} has {available} questions", f"pass --eval-size {available} or less"



# ------------------------------------------------------------------------------------- a preset's questions


def training_questions(preset, limit: int | None = None):
    """The questions a preset trains on (before the prompt-length filter), as a datasets.Dataset: the GSM8K train
    split, or the synthetic train split with the preset's seed and levels. limit: at most that many."""
    n = preset.train_size if limit is None else min(limit, preset.train_size)
    if preset.dataset == "gsm8k":
        return load_gsm8k("train", worked_example=preset.worked_example, limit=n)
    return synthetic_dataset(n, "train", seed=preset.seed, levels=preset.synthetic_levels,
                             worked_example=preset.worked_example)


def heldout_questions(preset, n: int | None = None) -> list[dict]:
    """The held-out questions a preset is evaluated on, before and after training (the GSM8K test split, or the
    synthetic held-out split): the first n of them (default: the preset's eval_size)."""
    n = preset.eval_size if n is None else n
    if preset.dataset == "gsm8k":
        return list(load_gsm8k("test", worked_example=preset.worked_example, limit=n))
    return synthetic_problems(n, "heldout", seed=preset.seed, levels=preset.synthetic_levels,
                              worked_example=preset.worked_example)


def sampling_steps(config) -> int:
    """How many times a run samples fresh completions, counted as TRL 1.x's GRPOTrainer does.

    config: a GRPOConfig or a Preset (anything with max_steps, gradient_accumulation_steps, num_iterations and,
    optionally, steps_per_generation). TRL generates on a micro-batch when `_step % (steps_per_generation *
    num_iterations) == 0`, and a run takes max_steps x gradient_accumulation_steps micro-batches; its RepeatSampler
    repeats each generation batch num_iterations x steps_per_generation times so the other micro-batches reuse it.
    num_iterations=2 (the cpu preset) samples on every other step: 40 steps, 20 sampling steps.
    """
    per_gen = getattr(config, "steps_per_generation", None) or config.gradient_accumulation_steps
    micro_steps = config.max_steps * config.gradient_accumulation_steps
    return -(-micro_steps // (per_gen * config.num_iterations))  # ceil: the first micro-batch always samples


def questions_per_run(config, num_processes: int | None = None) -> int:
    """The questions (prompts) a run draws from its training set, by TRL's RepeatSampler arithmetic: each sampling
    step draws generation_batch_size / num_generations prompts (generation_batch_size = per_device_train_batch_size
    x processes x steps_per_generation), each answered num_generations times. Not max_steps x prompts per step:
    with num_iterations=2 only every other step samples. Counts draws: past one epoch a question comes back.

    num_processes: default the config's own (a Preset's num_processes), else 1.
    """
    procs = num_processes or getattr(config, "num_processes", None) or 1
    per_gen = getattr(config, "steps_per_generation", None) or config.gradient_accumulation_steps
    generation_batch = config.per_device_train_batch_size * procs * per_gen
    return sampling_steps(config) * (generation_batch // config.num_generations)


# --------------------------------------------------------------------------------------- prompt length filter


def prompt_token_length(tokenizer, messages) -> int:
    """Tokens the chat template makes of these messages, generation prompt included."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


def filter_long_prompts(dataset, tokenizer, max_prompt_tokens: int):
    """Drop rows whose prompt is longer than max_prompt_tokens; return (kept, n_dropped).

    TRL >= 1.0 removed max_prompt_length and no longer truncates prompts, so one long GSM8K question can push a
    step past the memory budget (an OOM after 100 steps). Filtering up front keeps every step the same size.
    """
    if max_prompt_tokens <= 0:
        raise ValueError(f"max_prompt_tokens must be positive, got {max_prompt_tokens}")
    keep = [i for i, row in enumerate(dataset) if prompt_token_length(tokenizer, row["prompt"]) <= max_prompt_tokens]
    dropped = len(dataset) - len(keep)
    if isinstance(dataset, list):
        return [dataset[i] for i in keep], dropped
    return dataset.select(keep), dropped
