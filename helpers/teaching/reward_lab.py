"""The rewards notebook's lab bench: hand-written completions, score tables, a live playground and reward hacking.

The rewards themselves live in helpers.rewards; this module only runs them. The two "naive" rewards below are
the kind of first attempt the course warns about (substring match, tag counting without limits); they exist to be
gamed in 04_rewards.ipynb and are never used for training.
"""

from __future__ import annotations

from helpers.prompts import format_completion
from helpers.rewards import DEFAULT_REWARDS, REWARD_TABLE, TAGS, score_completion

GOLD = "12"
QUESTION = "Ana has 3 bags with 4 apples in each bag. How many apples does Ana have?"

# Hand-written completions for GOLD, from perfect to broken: the rows of the first score table.
HAND_WRITTEN = {
    "perfect": format_completion("3 bags times 4 apples is 3 * 4 = 12.", "12"),
    "right, no tags": "3 bags times 4 apples is 12. The answer is 12.",
    "right, one line": "<reasoning>3 * 4 = 12</reasoning><answer>12</answer>",
    "right, decorated": format_completion("3 * 4 = 12", "12 apples"),
    "right, 12.0": format_completion("3 * 4 = 12", "12.0"),
    "wrong number": format_completion("3 + 4 = 7", "7"),
    "answer tag only": "<answer>12</answer>",
    "rambling after": format_completion("3 * 4 = 12", "12") + "\nAlso, here is a poem about apples. " * 8,
    "empty": "",
}

# Completions that game a reward, each paired with the honest completion it should lose to.
HACKS = {
    "tags around junk": format_completion("blah blah blah", "banana"),
    "repeated tags": "<reasoning><reasoning>12</reasoning></reasoning><answer>12</answer><answer>12</answer>" * 3,
    "hedged answer": format_completion("it is one of these", "11 or 12 or 13"),
    "number dump": format_completion("listing numbers", " ".join(str(i) for i in range(1, 31))),
}
HONEST = {
    "honest, formatted": HAND_WRITTEN["perfect"],
    "honest, no format": HAND_WRITTEN["right, no tags"],
}


def naive_contains_answer_reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """NAIVE (do not train with it): 2.0 when the gold answer appears anywhere in the completion."""
    golds = answer if isinstance(answer, (list, tuple)) else [answer] * len(completions)
    return [2.0 if str(g) in str(c) else 0.0 for c, g in zip(completions, golds)]


def naive_tag_reward(prompts=None, completions=None, **kwargs) -> list[float]:
    """NAIVE (do not train with it): 0.125 for every tag occurrence, however many."""
    return [0.125 * sum(str(c).count(tag) for tag in TAGS) for c in completions]


NAIVE_REWARDS = [naive_contains_answer_reward, naive_tag_reward]


def short_name(fn_or_name) -> str:
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    return name.replace("_reward", "").replace("naive_", "naive ")


def score_all(completion, answer=GOLD, rewards=None) -> dict[str, float]:
    """{reward name: score} for one completion; the kit's rewards by default (helpers.rewards.score_completion)."""
    if rewards is None:
        return score_completion(completion, answer)
    return {fn.__name__: float(fn(prompts=[None], completions=[completion], answer=[answer])[0]) for fn in rewards}


def score_table(completions: dict[str, str], answer=GOLD, rewards=None) -> dict[str, dict[str, float]]:
    """{label: {reward: score, ..., 'total': sum}} for labelled completions."""
    table = {}
    for label, text in completions.items():
        scores = score_all(text, answer, rewards)
        table[label] = {**scores, "total": round(sum(scores.values()), 4)}
    return table


def print_table(table: dict[str, dict[str, float]]) -> None:
    """A plain-text table: one row per completion, one column per reward, total last."""
    if not table:
        print("(nothing to score)")
        return
    columns = list(next(iter(table.values())))
    width = max(len(label) for label in table) + 2
    print(f"{'completion':<{width}}" + "".join(f"{short_name(c):>15}" for c in columns))
    for label, scores in table.items():
        print(f"{label:<{width}}" + "".join(f"{scores[c]:>15.3f}" for c in columns))


def print_reward_rules() -> None:
    """The five rewards, their score ranges and what earns them (helpers.rewards.REWARD_TABLE)."""
    for row in REWARD_TABLE:
        print(f"{row['name']:<24} {row['min_score']:>5} .. {row['max_score']:<5} {row['earns']}")
    print(f"{'maximum total':<24} {sum(r['max_score'] for r in REWARD_TABLE):>14}")


def hacking_demo(answer=GOLD) -> dict[str, dict[str, dict[str, float]]]:
    """Score the hacks and the honest completions with the naive rewards and with the kit's rewards.

    Returns {'naive': table, 'kit': table}. What it shows (and tests/test_notebooks.py checks):
    under the naive rewards a hack beats an honest answer; under the kit's rewards every honest formatted
    answer beats every hack, because correctness (2.0) outweighs all format points together (1.5), hedges and
    number dumps are not correct, and repeated tags earn no tag points.
    """
    completions = {**HACKS, **HONEST}
    return {"naive": score_table(completions, answer, NAIVE_REWARDS), "kit": score_table(completions, answer)}


def playground(completion: str = HAND_WRITTEN["perfect"], answer: str = GOLD):
    """An ipywidgets editor: change the completion (or the gold answer) and every reward's score updates.

    Returns the widget; its `.scores` attribute always holds the latest {reward: score} dict, and
    `.update()` recomputes (what the widget calls on every edit).
    """
    import ipywidgets as widgets

    text = widgets.Textarea(value=completion, description="completion", layout=widgets.Layout(width="95%", height="160px"))
    gold = widgets.Text(value=answer, description="gold answer")
    table = widgets.HTML()
    box = widgets.VBox([gold, text, table])

    def update(*_):
        scores = score_completion(text.value, gold.value)
        total = sum(scores.values())
        cells = "".join(
            f"<tr><td style='padding:2px 12px'>{name}</td><td style='text-align:right'>{value:.3f}</td></tr>"
            for name, value in scores.items()
        )
        table.value = (f"<table>{cells}<tr><td style='padding:2px 12px'><b>total</b></td>"
                       f"<td style='text-align:right'><b>{total:.3f}</b> of 4</td></tr></table>")
        box.scores = {**scores, "total": total}
        return box.scores

    text.observe(update, names="value")
    gold.observe(update, names="value")
    box.update = update
    box.textarea, box.gold = text, gold
    update()
    return box


def reward_names() -> list[str]:
    return [fn.__name__ for fn in DEFAULT_REWARDS]
