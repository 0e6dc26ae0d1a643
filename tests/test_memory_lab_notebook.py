"""notebooks/07_memory_lab.ipynb runs top to bottom on CPU, draws the sweep plot, and is committed clean."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NB = Path(__file__).resolve().parents[1] / "notebooks" / "07_memory_lab.ipynb"


def test_committed_without_outputs_and_tagged():
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is None and c.outputs == [] for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])


def test_executes_on_cpu_and_draws_the_sweep_plot():
    nb = nbformat.read(NB, as_version=4)
    started = time.time()
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NB.parent)}}).execute()
    assert time.time() - started < 90
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:80]
    sweep = next(c for c in nb.cells if c.cell_type == "code" and "# SWEEP PLOT" in c.source)
    assert any("image/png" in o.get("data", {}) for o in sweep.outputs)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "combinations fit" in text and "fits" in text
