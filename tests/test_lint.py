"""The linter is part of the test run: `ruff check` with the rules in pyproject.toml ([tool.ruff]), and no function in
helpers/ or scripts/ longer than MAX_FUNCTION_LINES."""

import ast
import re
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


def test_lessons_pass_ruff_as_built():
    """A lesson is linted as its notebook holds it: `# {{setup cell}}` written in (it defines ROOT and kit) and the
    placeholders filled (scripts/make_notebooks.py); lessons/ is excluded from the plain `ruff check .`."""
    from scripts import make_notebooks as maker

    problems = []
    for lesson in maker.lesson_files():
        done = subprocess.run([*ruff_command(), "check", "--no-cache", "--output-format", "concise", "--stdin-filename",
                               f"lessons/{lesson.name}", "-"], cwd=ROOT, input=maker.lesson_text(lesson),
                              capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(done.stdout + done.stderr)
    assert maker.lesson_files() and not problems, "ruff on the lessons as built:\n" + "".join(problems)


def test_ruff_reads_the_project_rules():
    """The lint test means something only if ruff uses pyproject.toml: a blind `except Exception` is reported, and
    so is an import inside a function (PLC0415) in a file without an exception for it."""
    probe = "try:\n    pass\nexcept Exception:\n    pass\n\n\ndef f():\n    import json\n\n    return json\n"
    done = subprocess.run([*ruff_command(), "check", "--no-cache", "--stdin-filename", "helpers/probe.py", "-"],
                          cwd=ROOT, input=probe, capture_output=True, text=True)
    assert done.returncode == 1 and "BLE001" in done.stdout and "PLC0415" in done.stdout, done.stdout + done.stderr


def import_exceptions(pyproject: str) -> list[str]:
    """The patterns in [tool.ruff.lint.per-file-ignores] whose codes include PLC0415, in the order written."""
    section = pyproject.split("[tool.ruff.lint.per-file-ignores]", 1)[1].split("\n[", 1)[0]
    return re.findall(r'^"([^"]+)"\s*=\s*\[[^\]]*"PLC0415"', section, re.M)


def test_every_import_exception_still_names_an_import_inside_a_function():
    """An exception for PLC0415 covers files that import inside functions for a reason (pyproject.toml says which).
    Once the last such import moved to the top, the exception is stale: it would hide the next habitual one."""
    patterns = import_exceptions((ROOT / "pyproject.toml").read_text())
    assert "helpers/model.py" in patterns and "tests/*.py" in patterns  # the section is read
    files = {pattern: sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern)) for pattern in patterns}
    assert all(files.values()), f"exceptions naming no file: {[p for p, f in files.items() if not f]}"
    everything = sorted({f for found in files.values() for f in found})
    done = subprocess.run([*ruff_command(), "check", "--no-cache", "--isolated", "--select", "PLC0415",
                           "--output-format", "concise", *everything], cwd=ROOT, capture_output=True, text=True)
    reported = {Path(line.split(":", 1)[0]).as_posix() for line in done.stdout.splitlines() if "PLC0415" in line}
    assert reported, done.stdout + done.stderr  # ruff ran and saw the imports
    stale = [pattern for pattern, found in files.items() if not reported & set(found)]
    assert not stale, f"PLC0415 exceptions in pyproject.toml for files with no import inside a function: {stale}"


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
    paths = sorted(p for folder in ("helpers", "scripts", "lab") for p in (ROOT / folder).rglob("*.py"))
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
