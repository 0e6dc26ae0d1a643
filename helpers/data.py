"""Questions for training and evaluation: GSM8K on GPU, an offline synthetic set on CPU.

Every row has the same columns: "prompt" (chat messages built by helpers.prompts), "answer" (the gold number as
a string, the column the correctness reward reads) and "question" (plain text, for printing).
"""

from __future__ import annotations

import hashlib
import random

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


def load_gsm8k(split: str = "train", worked_example: bool = True, limit: int | None = None):
    """GSM8K from the Hugging Face Hub as a datasets.Dataset of kit rows (needs internet: Colab, not CI)."""
    from datasets import Dataset, load_dataset

    if split not in ("train", "test"):
        raise ValueError(f"GSM8K has splits 'train' and 'test', not {split!r}")
    raw = load_dataset(*GSM8K_DATASET, split=split)
    if limit is not None:
        raw = raw.select(range(min(limit, len(raw))))
    return Dataset.from_list(gsm8k_rows(raw, worked_example=worked_example))


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
