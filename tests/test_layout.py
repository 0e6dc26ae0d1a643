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
        if m := re.match(r"^(\w+)/\s", line):
            folder = m.group(1) + "/"
        elif m := re.match(r"^    (\w+\.py)\s", line):
            named.add(folder + m.group(1) if folder else m.group(1))
    assert named == FILES, f"helpers/__init__.py docstring: missing {sorted(FILES - named)}, stale {sorted(named - FILES)}"
