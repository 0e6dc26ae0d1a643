"""The linter is part of the test run: `ruff check` with the rules in pyproject.toml ([tool.ruff]), and no function in
helpers/ or scripts/ longer than MAX_FUNCTION_LINES."""

import ast
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


MAX_FUNCTION_LINES = 80  # a longer function hides its steps: split it into named ones (e.g. helpers.memory.estimate)


def functions_over(paths, limit: int = MAX_FUNCTION_LINES) -> list[tuple[Path, int, str, int]]:
    """(file, line, name, length) of each function or method in `paths` longer than `limit` lines, def to end."""
    found = []
    for path in map(Path, paths):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((path, node.lineno, node.name, lines))
    return found


def test_no_function_in_helpers_or_scripts_is_over_80_lines():
    paths = sorted(p for folder in ("helpers", "scripts") for p in (ROOT / folder).rglob("*.py"))
    too_long = [f"{path.relative_to(ROOT)}:{line} {name} ({lines} lines)"
                for path, line, name, lines in functions_over(paths)]
    assert not too_long, f"over {MAX_FUNCTION_LINES} lines (split into named steps):\n" + "\n".join(too_long)


def test_the_length_check_counts_from_def_to_the_last_line(tmp_path):
    def function(name, lines):  # a def line and lines - 1 body lines
        return f"def {name}():\n" + "    x = 1\n" * (lines - 1)

    source = tmp_path / "sample.py"  # lines 1-80: exactly_80; 83: class Holder; 84-164: method_81
    source.write_text(function("exactly_80", 80) + "\n\nclass Holder:\n    " +
                      function("method_81", 81).replace("\n", "\n    ").rstrip() + "\n")
    assert functions_over([source]) == [(source, 84, "method_81", 81)]
