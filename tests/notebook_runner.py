"""Executing a course notebook as CI does, shared by the tests that run notebooks (test_notebooks.py runs each one,
test_class_plans.py runs a class plan's notebooks in its order).

papermill injects the parameters after the notebook's parameters cell, as a student typing them into that cell
would, and executes it into a separate output notebook: the committed notebooks are never rewritten.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
CELL_TIMEOUT_S = 900


def read(path: Path):
    return nbformat.read(path, as_version=4)


def execute(name: str, out_dir: Path, parameters: dict, cwd: Path = NOTEBOOK_DIR, source_dir: Path = NOTEBOOK_DIR):
    """Run source_dir/<name>.ipynb top to bottom in `cwd` (the setup cell finds the kit from there) with these
    parameters; the executed copy goes to out_dir. An exercise solution that fails its own check fails here."""
    papermill = pytest.importorskip("papermill")
    output = Path(out_dir) / f"{name}.out.ipynb"
    papermill.execute_notebook(
        str(Path(source_dir) / f"{name}.ipynb"),
        str(output),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(cwd),
        progress_bar=False,
        execution_timeout=CELL_TIMEOUT_S,
    )
    nb = read(output)
    failed = [o for c in nb.cells for o in c.get("outputs", []) if "Not yet." in str(o.get("data", {}).get("text/plain", ""))]
    assert not failed, f"{name}: an exercise solution failed its own check: {failed[0]['data']['text/plain']}"
    return nb


def output_text(nb) -> str:
    """Everything the executed cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif "data" in out and "text/plain" in out.data:
                parts.append(out.data["text/plain"])
    return "\n".join(parts)


def has_image(nb) -> bool:
    return any("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def parameters_cell(nb) -> int:
    """The index of the cell tagged "parameters" (the one papermill injects after)."""
    [index] = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    return index


def parameter_defaults(nb) -> dict:
    """NAME -> default value of every assignment in the parameters cell (the cell is literals only)."""
    tree = ast.parse(nb.cells[parameters_cell(nb)].source)
    return {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def names_read_after_parameters(nb) -> set[str]:
    """The names the code cells after the parameters cell read (the setup cell included)."""
    start = parameters_cell(nb) + 1
    code = "\n".join(c.source for c in nb.cells[start:] if c.cell_type == "code")
    lines = [line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))]  # IPython magics
    return {node.id for node in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


# ------------------------------------------------------------------------------------ the class's run, as a plan runs it
# The notebooks that hand the class's run folder on: 04's reward -> 05's run -> 06 -> 05 extended (the homework). A
# plan's others (01 shown, 03 and 07 as homework) neither read nor write it (the setup cell creates no local run
# folder). tests/test_notebooks.py executes these in the 90-minute plan's order and with its CPU parameters, in one copy
# of the kit: those executions are both the notebooks' own tests and the plan's dry run.
SHARE_THE_RUN = ("04_rewards", "05_train", "06_evaluate_and_save")


def course_run(plan) -> list[tuple[str, dict]]:
    """(notebook, parameters) of the plan's CPU equivalent that share the class's run folder, in the plan's order."""
    return [(name, parameters) for name, parameters in plan.executed() if name in SHARE_THE_RUN]


def copy_kit(target: Path) -> Path:
    """A class's clone of the kit at target (no .git, venv, runs or caches): the setup cell finds it from its
    notebooks/ folder, and a notebook's default RUN_DIR lands inside it."""
    import shutil

    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "student", "__pycache__",
                                                                "*_cache", "*.egg-info"))
    return target
