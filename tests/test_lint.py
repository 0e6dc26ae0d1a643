"""The linter is part of the test run: `ruff check` with the rules in pyproject.toml ([tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff_command() -> list[str]:
    """ruff from the environment running the tests (requirements-cpu.txt pins it), else from PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ruff")
    if found is None:
        raise AssertionError("ruff is not installed: pip install -r requirements-cpu.txt (it pins ruff)")
    return [found]


def test_ruff_passes():
    done = subprocess.run([*ruff_command(), "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"ruff check found problems (fix them, or `ruff check --fix .`):\n{done.stdout}{done.stderr}"


def test_ruff_reads_the_project_rules():
    """The lint test means something only if ruff uses pyproject.toml: a blind `except Exception` is reported."""
    probe = "try:\n    pass\nexcept Exception:\n    pass\n"
    done = subprocess.run([*ruff_command(), "check", "--no-cache", "--stdin-filename", "helpers/probe.py", "-"],
                          cwd=ROOT, input=probe, capture_output=True, text=True)
    assert done.returncode == 1 and "BLE001" in done.stdout, done.stdout + done.stderr
