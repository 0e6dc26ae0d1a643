"""Build the course notebooks from their lesson sources: lessons/0N_*.py (jupytext percent format) ->
notebooks/0N_*.ipynb (instructor, solutions included) and notebooks/student/0N_*.ipynb (solutions blanked).

    .venv/bin/python scripts/make_notebooks.py            # rewrite notebooks/ and notebooks/student/
    .venv/bin/python scripts/make_notebooks.py --check    # exit 1, naming them, if a committed notebook is stale
    .venv/bin/python scripts/make_notebooks.py --out /tmp/x   # write under /tmp/x/notebooks instead

Edit the lessons, not the notebooks: a lesson is a Python file whose cells start with `# %%` (code) or
`# %% [markdown]` (text, each line behind `# `); cell tags go on the marker line (`# %% tags=["solution"]`).
Jupyter opens them directly with jupytext installed (requirements-cpu.txt pins it). Exercise solutions are code
cells tagged "solution" whose first lines are "# Exercise <n>: <task>" and "# SOLUTION"; the student copy keeps
imports and signatures with blanks (scripts/make_student_notebooks.py). `{{cpu.max_steps}}` in a lesson becomes that
preset field's value, so the notebooks never carry a stale copy of a number. Cell ids are stable (prefix +
position) and outputs are never written. tests/test_student_notebooks.py runs --check.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

KIT = Path(__file__).resolve().parents[1]  # where helpers/ and lessons/ are
if str(KIT) not in sys.path:  # run as a file: helpers/ and scripts/ import from the kit's folder
    sys.path.insert(0, str(KIT))

from helpers.config import PRESETS  # noqa: E402
from helpers.notebook_setup import lesson_needs_gpu  # noqa: E402
from scripts import make_student_notebooks as student  # noqa: E402

REPO = KIT  # where the committed notebooks are compared and written (tests point it elsewhere)
LESSONS = KIT / "lessons"
PLACEHOLDER = re.compile(r"\{\{([\w-]+)\.(\w+)\}\}")


def fill_placeholders(text: str, where: str) -> str:
    """{{preset.field}} -> the preset's value (helpers.config.PRESETS)."""
    def value(m):
        preset, field = m.group(1), m.group(2)
        if preset not in PRESETS or not hasattr(PRESETS[preset], field):
            raise SystemExit(f"{where}: unknown placeholder {m.group(0)} (presets: {', '.join(PRESETS)})")
        return str(getattr(PRESETS[preset], field))

    return PLACEHOLDER.sub(value, text)


def colab_metadata(lesson_name: str) -> dict:
    """What the notebook asks Colab for when its badge is opened: a T4 only for the lesson that needs one (05, the
    T4 lab; helpers.notebook_setup.LESSONS); every other lesson opens on a CPU runtime and leaves the GPU free."""
    if lesson_needs_gpu(lesson_name):
        return {"colab": {"provenance": [], "gpuType": "T4"}, "accelerator": "GPU"}
    return {"colab": {"provenance": []}}


def build_notebook(lesson: Path):
    """The instructor notebook of one lesson file."""
    nb = jupytext.reads(fill_placeholders(lesson.read_text(), lesson.name), fmt="py:percent")
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        **colab_metadata(lesson.stem),
    }
    source = f"lessons/{lesson.name}"
    first = nb.cells[0]
    if first.cell_type != "markdown":
        raise SystemExit(f"{source}: the first cell must be the markdown header (badge, title, objectives)")
    first.source += (f"\n\n*Generated from `{source}` by `scripts/make_notebooks.py`: edit the lesson there, not this "
                     "notebook.*")
    prefix = lesson.stem.split("_")[0]
    for i, cell in enumerate(nb.cells):
        cell.id = f"{prefix}-{i:02d}"  # stable ids: rebuilding does not churn the diff
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
    nbformat.validate(nb)
    return nb


def build(out_root: Path) -> list[Path]:
    """Write every lesson's instructor and student notebook under out_root/notebooks."""
    instructor_dir, student_dir = out_root / "notebooks", out_root / "notebooks" / "student"
    student_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for lesson in sorted(LESSONS.glob("0[1-9]_*.py")):
        nb = build_notebook(lesson)
        name = f"{lesson.stem}.ipynb"
        nbformat.write(nb, instructor_dir / name)
        nbformat.write(student.student_version(nb, name), student_dir / name)
        written += [instructor_dir / name, student_dir / name]
    return written


def stale_notebooks() -> list[str]:
    """Committed notebooks that differ from a fresh build (or have no lesson, or are missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.relative_to(tmp).as_posix(): p.read_text() for p in build(Path(tmp))}
    committed = {p.relative_to(REPO).as_posix(): p.read_text()
                 for p in [*(REPO / "notebooks").glob("0*.ipynb"), *(REPO / "notebooks" / "student").glob("0*.ipynb")]}
    return sorted(k for k in set(fresh) | set(committed) if fresh.get(k) != committed.get(k))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a committed notebook is not what the lessons build")
    ap.add_argument("--out", type=Path, default=None, help="write under OUT/notebooks (default: this checkout)")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_notebooks()
        if stale:
            print("stale notebooks (not what lessons/ builds): " + ", ".join(stale) + "\nFix: run "
                  "`.venv/bin/python scripts/make_notebooks.py` and commit notebooks/ (edit lessons/, not the "
                  "notebooks).", file=sys.stderr)
            return 1
        print("notebooks/ and notebooks/student/ are up to date with lessons/")
        return 0
    for path in build(args.out or REPO):
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
