"""Write the student copies of the course notebooks: notebooks/student/*.ipynb, solutions removed.

    .venv/bin/python scripts/make_student_notebooks.py              # -> notebooks/student/
    .venv/bin/python scripts/make_student_notebooks.py --out /tmp/s  # somewhere else (the sync test does this)

The notebooks in notebooks/ are the instructor versions. A solution cell is a code cell tagged "solution" whose
source has a "# SOLUTION" marker line; everything above the marker (the "# Exercise <n>: <task>" line) is kept,
everything below it is replaced by a skeleton (see scaffold): imports kept, each function's signature and
docstring kept with a body that raises

    raise NotImplementedError("Student exercise: <task>")

and each top-level `name = ...` kept as a blank (`...`), plus a comment saying where to write the answer. A
solution can instead keep its structure and blank only the lines that teach (a Neuromatch-style partial scaffold):
a line ending in `# blank: <why>` keeps its code up to the value, which becomes `...` (`name = ...`, `field=...,`,
`return ...`), and `<why>` stays as its comment; every other line is copied. A
solution that is a whole script, written by a `%%writefile PATH` cell (the capstone, 09), keeps its magic line and
exercise line and gets the script's skeleton instead (capstone_skeleton: its header, then one TODO per step). So
every name stays defined and "Run all" on a blank copy reaches the end: each check cell says "not answered yet"
and the cells after it run. Every other cell is copied as is (check cells, hints), the badge points at the
student copy, and outputs are never written. The student copies are committed; CI
(tests/test_student_notebooks.py) regenerates them and fails when they are out of date, then runs each blank copy
to the end, each check saying "not answered yet" and no cell raising.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "notebooks"
PATTERN = "0[1-9]_*.ipynb"
MARKER = "# SOLUTION"
TASK_RE = re.compile(r"^#\s*Exercise\s+([\w.]+):\s*(.+?)\s*$", re.M)
STEP_RE = re.compile(r"^# (\d+)\. (.+)$")
STUDENT_NOTE = ("> **Student version.** Exercise cells keep the names and signatures, with blanks for you to fill; "
                "run the check cell after each one (it says \"not answered yet\" until you do). \"Run all\" reaches "
                "the end either way. Instructors: the solutions are in `notebooks/`.\n\n")


class StudentNotebookError(ValueError):
    pass


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and "solution" in cell.metadata.get("tags", [])


def task_of(source: str, where: str) -> tuple[str, str]:
    m = TASK_RE.search(source)
    if not m:
        raise StudentNotebookError(f"{where}: a solution cell must start with '# Exercise <n>: <task>'")
    return m.group(1), m.group(2)


def scaffold(body: str, task: str) -> list[str]:
    """The solution's skeleton: imports kept, each function's signature (and docstring) kept with a body that
    raises NotImplementedError, each top-level `name = ...` kept as a blank (`...`). So a skipped exercise leaves
    every name defined: its check says "not answered yet" and the cells after it still run."""
    lines = body.splitlines()
    tree = ast.parse(body)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(ast.get_source_segment(body, node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0]
            keep_until = first.end_lineno if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                                              and isinstance(first.value.value, str)) else first.lineno - 1
            out += lines[node.lineno - 1 : keep_until]
            indent = " " * first.col_offset
            out.append(f"{indent}# your code here, then delete the next line")
            out.append(f"{indent}raise NotImplementedError({('Student exercise: ' + task)!r})")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.append(f"{node.targets[0].id} = ...  # your answer here")
    return out


BLANK_RE = re.compile(r"^(?P<code>.*?)\s*#\s*blank:\s*(?P<why>.*)$")
BLANK_FORMS = (re.compile(r"^(?P<keep>\s*[\w.\[\]\"']+\s*=\s*).+?(?P<end>,?)$"),  # name = value, field=value,
               re.compile(r"^(?P<keep>\s*return\s+).+?(?P<end>)$"))                    # return value


def blank_line(line: str, where: str) -> str:
    """`gold = solution.split(...)  # blank: the number after ####` -> `gold = ...  # the number after ####`."""
    m = BLANK_RE.match(line)
    code, why = m.group("code"), m.group("why").strip()
    for form in BLANK_FORMS:
        f = form.match(code)
        if f:
            return f"{f.group('keep')}...{f.group('end')}" + (f"  # {why}" if why else "")
    raise StudentNotebookError(f"{where}: '# blank:' goes on a line of the form `name = value`, `field=value,` or "
                               f"`return value`; got {code.strip()!r}")


def partial_scaffold(body: str, where: str) -> list[str] | None:
    """The solution with its `# blank:` lines blanked, or None when it has none (then scaffold() is used)."""
    lines = body.splitlines()
    if not any(BLANK_RE.match(line) for line in lines):
        return None
    return [blank_line(line, where) if BLANK_RE.match(line) else line for line in lines]


def capstone_skeleton(script: str, where: str = "a script") -> str:
    """A whole script's student copy: its header (docstring, imports, the --max-steps/--output-dir contract: all
    above its first step comment `# 1. ...`) kept, then each numbered step comment as a TODO, in order. The checker
    (helpers.capstone) reads the TODOs left without a GRPOTrainer call as "not answered yet"."""
    lines = script.splitlines()
    steps = [i for i, line in enumerate(lines) if STEP_RE.match(line)]
    if not steps:
        raise StudentNotebookError(f"{where}: a %%writefile solution needs step comments '# 1. <what>', '# 2. ...'")
    todos = [STEP_RE.sub(r"# TODO \1. \2", lines[i]) for i in steps]
    return "\n".join([*lines[:steps[0]], "# Write each step's code under its TODO, in order; run this cell (it writes "
                      "the file), then the check cell.", *[line for todo in todos for line in (todo, "")]]).rstrip()


def solution_text(source: str, where: str = "a cell") -> str:
    """What `ex.qN.solution()` prints and the instructor guide shows: the cell below its "# SOLUTION" line, each
    `# blank: <why>` marker left as the comment `# <why>` (the student copy blanks those lines; a reader needs
    only the why)."""
    lines = source.splitlines()
    if MARKER not in [line.strip() for line in lines]:
        raise StudentNotebookError(f"{where}: a cell tagged 'solution' needs a '{MARKER}' line")
    body = lines[[line.strip() for line in lines].index(MARKER) + 1:]
    return "\n".join(BLANK_RE.sub(lambda m: m.group("code") + (f"  # {m.group('why').strip()}"
                                                            if m.group("why").strip() else ""), line)
                     for line in body).strip("\n")


def strip_solution(source: str, where: str = "a cell") -> str:
    lines = source.splitlines()
    if MARKER not in [line.strip() for line in lines]:
        raise StudentNotebookError(f"{where}: a cell tagged 'solution' needs a '{MARKER}' line")
    cut = [line.strip() for line in lines].index(MARKER)
    label, task = task_of(source, where)
    if lines[0].startswith("%%writefile "):  # the cell writes a script: the magic and the task stay, then its skeleton
        return "\n".join([*lines[:cut], capstone_skeleton("\n".join(lines[cut + 1:]), where)])
    partial = partial_scaffold("\n".join(lines[cut + 1:]), where)
    if partial is not None:
        return "\n".join([*lines[:cut], "# Replace each ... with your code (the check cell says 'not answered yet' "
                          "until you do; the cells after it run either way).", *partial])
    skeleton = scaffold("\n".join(lines[cut + 1:]), task)
    if not skeleton:  # nothing to keep a name for: the old placeholder
        return "\n".join([*lines[:cut], "# Your answer here: replace the next line with your code, then run the "
                          "check cell.", f"raise NotImplementedError({('Student exercise: ' + task)!r})"])
    return "\n".join([*lines[:cut], "# Fill in the blanks (the check cell says 'not answered yet' until you do; the "
                      "cells after it run either way).", *skeleton])


def student_version(nb, name: str):
    nb = copy.deepcopy(nb)
    n = 0
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            cell.source = strip_solution(cell.source, f"{name} cell {i}")
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != "solution"] + ["exercise"]
            n += 1
        elif cell.cell_type == "code" and MARKER in cell.source.splitlines():
            raise StudentNotebookError(f"{name} cell {i} has a '{MARKER}' line but no 'solution' tag")
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    first = nb.cells[0]
    if first.cell_type == "markdown":
        first.source = first.source.replace(f"/notebooks/{name}", f"/notebooks/student/{name}")
        head, sep, rest = first.source.partition("\n\n")
        first.source = head + sep + STUDENT_NOTE + rest if sep else first.source + "\n\n" + STUDENT_NOTE
    if n == 0:
        raise StudentNotebookError(f"{name} has no solution cell: every course notebook has at least one exercise")
    nbformat.validate(nb)
    return nb


def write_all(out: Path, source: Path = SOURCE) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(source.glob(PATTERN)):
        nb = student_version(nbformat.read(path, as_version=4), path.name)
        target = out / path.name
        nbformat.write(nb, target)
        written.append(target)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=SOURCE / "student")
    args = ap.parse_args(argv)
    try:
        for path in write_all(args.out):
            print("wrote", path)
    except StudentNotebookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
