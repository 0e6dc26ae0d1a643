"""The lessons' self-checked exercises as data: for each, its number (4.3), its check (`ex.q3`), its answer's name
(the function or value the student writes, the exercise's stable name: `brevity_reward`), its task and its solution.

All of it is read from registry.json, which `scripts/make_notebooks.py` writes from the lessons' solution cells
(`# Exercise <n>: <task>` / `# SOLUTION`); `--check` fails when it is stale. So a number, a task or a solution is
typed once, in the lesson: the judges, the instructor guide, the class plans and the kit's messages read it here.
Only the standard library: the class plans and the course messages import this without the judges.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

PATH = Path(__file__).with_name("registry.json")
REGENERATE = "Fix: run `.venv/bin/python scripts/make_notebooks.py` (it writes registry.json from lessons/)."


@functools.cache
def load() -> dict:
    """{lesson ("04"): {"notebook": "04_rewards", "exercises": [{number, qid, name, task, solution}, ...]}}."""
    if not PATH.is_file():
        raise FileNotFoundError(f"{PATH} is missing. {REGENERATE}")
    return json.loads(PATH.read_text())["lessons"]


def find(name: str, lesson: str | None = None) -> dict:
    """The exercise whose answer is `name` (in `lesson`, "04", when given)."""
    lessons = load() if lesson is None else {lesson: load().get(lesson, {"exercises": []})}
    for entries in lessons.values():
        for entry in entries["exercises"]:
            if entry["name"] == name:
                return entry
    where = f"lesson {lesson}" if lesson else "any lesson"
    raise KeyError(f"no exercise answered by {name!r} in {where} of {PATH.name}. {REGENERATE}")


def number(name: str) -> str:
    """The number a lesson shows for the exercise answered by `name`: number("brevity_reward") -> "4.4"."""
    return find(name)["number"]
