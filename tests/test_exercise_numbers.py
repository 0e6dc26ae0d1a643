"""No exercise number is typed by hand outside its own lesson cells: an exercise's number is its solution cell's place
in the lesson (scripts/make_notebooks.py refuses a lesson that says otherwise), so a number typed anywhere else goes
stale when a lesson gains, loses or moves an exercise (05 once named 04's "exercise 4.1" for 4.3).

Elsewhere an exercise is named by its answer (`brevity_reward`): a lesson writes {{exercise.brevity_reward}}, Python
reads helpers.teaching.exercises.registry.number("brevity_reward"), and generated parts of docs (between
`<!-- ...:begin` and `<!-- ...:end -->` markers) are written from registry.json.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TYPED = re.compile(r"\b[Ee]xercises?\s+\(?(\d+\.\d+)")  # "exercise 4.3", "Exercises 4.1 and 4.2", "exercises (4.1"
OWN_CELL = re.compile(r"^# (Exercise \d+\.\d+: |\*\*Exercise \d+\.\d+[.\s])")  # the lesson's own: checked by the build
BEGIN, END = re.compile(r"<!-- [\w-]+:[\w-]+:begin|<!-- [\w-]+:begin"), re.compile(r":end -->")


def scanned() -> list[Path]:
    files = [*(ROOT / "helpers").rglob("*.py"), *(ROOT / "helpers").rglob("*.md"), *(ROOT / "docs").glob("*.md"),
             *(ROOT / "scripts").glob("*.py"), *(ROOT / "lessons").glob("*.py"), ROOT / "README.md"]
    return sorted(files)


def typed_numbers(text: str, lesson: bool) -> list[tuple[int, str]]:
    """(line number, line) of each exercise number typed by hand in text, generated regions left out."""
    found, generated = [], False
    for i, line in enumerate(text.splitlines(), 1):
        if BEGIN.search(line):
            generated = True
        if not generated and TYPED.search(line) and not (lesson and OWN_CELL.match(line)):
            found.append((i, line.strip()))
        if END.search(line):
            generated = False
    return found


def test_the_scan_finds_a_typed_number_and_spares_the_lessons_own_cells_and_generated_parts():
    text = ("# **Exercise 4.4.** Long answers.\n# Exercise 4.4: write brevity_reward\nplus 04's exercise 4.1 (on Colab\n"
            "<!-- exercises:begin (generated) -->\n| 4.4 | exercise 4.4 |\n<!-- exercises:end -->\n"
            "Exercises 5.1 and 5.3 come first\n(see exercises (4.2, 4.3))\nexercise {{exercise.brevity_reward}}, "
            "exercise 1 below, beta 0.04\n")
    assert typed_numbers(text, lesson=True) == [(3, "plus 04's exercise 4.1 (on Colab"),
                                                (7, "Exercises 5.1 and 5.3 come first"),
                                                (8, "(see exercises (4.2, 4.3))")]
    assert [n for n, _ in typed_numbers(text, lesson=False)] == [1, 2, 3, 7, 8]  # only a lesson has its own cells


def test_no_exercise_number_is_typed_outside_its_lesson():
    found = [f"{path.relative_to(ROOT)}:{n}: {line}" for path in scanned()
             for n, line in typed_numbers(path.read_text(), lesson=path.parent.name == "lessons")]
    assert not found, ("exercise numbers typed by hand (they go stale when a lesson's exercises move):\n"
                       + "\n".join(found) + "\nFix: name the exercise by its answer: in a lesson "
                       "{{exercise.<answer>}}, in Python helpers.teaching.exercises.registry.number('<answer>'), in "
                       "prose the answer's name (the `brevity_reward` exercise).")
