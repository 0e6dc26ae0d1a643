"""The package layout is described where an instructor looks first: README's layout table and helpers/__init__.py's
docstring name every file of helpers/, and nothing that is not there."""

import ast
import re
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parents[1]


def _holds_code(path: Path) -> bool:
    """False for a folder's __init__.py that is only its docstring, and for __main__.py (a one-line front door)."""
    body = ast.parse(path.read_text()).body
    return path.name != "__main__.py" and not (path.name == "__init__.py" and len(body) <= 1)


FILES = {p.relative_to(ROOT / "helpers").as_posix() for p in (ROOT / "helpers").rglob("*.py")
         if _holds_code(p) and p != ROOT / "helpers" / "__init__.py"}


def test_readme_layout_names_every_helpers_file():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| file | job |"):readme.index("## Requirements")]
    named = set(re.findall(r"^\| `([\w/]+\.py)` \|", table, re.M))
    assert named == FILES, f"README layout table: missing {sorted(FILES - named)}, stale {sorted(named - FILES)}"


def test_package_docstring_names_every_helpers_file():
    doc = helpers.__doc__
    folder = ""
    named = set()
    for line in doc.splitlines():
        if m := re.match(r"^((?:\w+/)+)\s", line):  # run/, teaching/exercises/
            folder = m.group(1)
        elif m := re.match(r"^    (\w+\.py)\s", line):
            named.add(folder + m.group(1) if folder else m.group(1))
    assert named == FILES, f"helpers/__init__.py docstring: missing {sorted(FILES - named)}, stale {sorted(named - FILES)}"


def _helpers_imports() -> dict[str, set[str]]:
    """helpers module -> the helpers modules it imports, at the top or inside a function."""
    modules = {}
    for path in (ROOT / "helpers").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def test_no_import_cycle_among_helpers_modules():
    graph = _helpers_imports()
    assert graph["helpers.train"] and graph["helpers.run.pipeline"]  # the walk sees imports

    def path_back(start, node, seen):
        for nxt in graph[node]:
            if nxt == start:
                return [node, nxt]
            if nxt not in seen:
                seen.add(nxt)
                if rest := path_back(start, nxt, seen):
                    return [node, *rest]
        return None

    cycles = [" -> ".join(c) for m in sorted(graph) if (c := path_back(m, m, {m}))]
    assert not cycles, f"import cycles: {cycles}"


def test_readme_course_table_names_every_notebook_and_its_student_copy():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The course"):readme.index("## Layout")]
    lessons = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| \[(\w+)\]\(notebooks/\1\.ipynb\) \|.*$", table, re.M)}
    assert set(rows) == lessons, f"README course table: missing {sorted(lessons - set(rows))}"
    for lesson, row in rows.items():
        assert f"(notebooks/student/{lesson}.ipynb)" in row, f"{lesson}: no link to its student copy"


def test_no_helpers_file_is_over_700_lines():
    """A file that long holds more than one job (issue 34): split it along its seam before it grows past this."""
    long = {p.relative_to(ROOT).as_posix(): n for p in (ROOT / "helpers").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 700}
    assert not long, f"split these: {long}"


COURSE = ("helpers", "lessons", "scripts", "capstone")  # the course's folders; lab/ may import them, never the reverse


def lab_imports(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line import` for each import of the lab in `path`: an import statement, or importlib's import_module /
    __import__ / spec_from_file_location with a literal naming lab (a module, or a path under lab/)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__", "spec_from_file_location"):
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        for name in names:
            if name == "lab" or name.startswith(("lab.", "lab/")) or "/lab/" in name:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {name}")
    return found


def test_the_course_imports_nothing_from_the_lab():
    """helpers/, lessons/, scripts/ and capstone/ stand without lab/: an instructor can delete the lab and teach the course."""
    found = [hit for folder in COURSE for path in sorted((ROOT / folder).rglob("*.py")) for hit in lab_imports(path)]
    assert not found, ("the course imports the lab (lab/__init__.py: the lab may import the course, never the "
                       "reverse). Fix: move what these need into helpers/, or the code into lab/:\n" + "\n".join(found))


def test_the_lab_import_check_sees_each_form(tmp_path):
    (tmp_path / "sample.py").write_text(
        "import lab\nfrom lab.step_timing import StepTimer\nimport importlib\nimportlib.import_module('lab.scale_out')\n"
        "importlib.util.spec_from_file_location('x', 'lab/benchmark_memory.py')\n"
        "import labels\nfrom helpers import lab_notes\nfrom . import lab\n")
    assert lab_imports(tmp_path / "sample.py", root=tmp_path) == [
        "sample.py:1 lab", "sample.py:2 lab.step_timing", "sample.py:4 lab.scale_out",
        "sample.py:5 lab/benchmark_memory.py"]
