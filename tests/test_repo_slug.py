"""The repository address lives in one place (helpers.notebook_setup.REPO_SLUG); scripts/set_repo.py changes it
everywhere, and every badge and clone URL agrees with it - whatever notebooks exist (URL patterns, not cells)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from helpers import notebook_setup
from scripts import set_repo

ROOT = Path(__file__).resolve().parents[1]


def test_every_badge_and_clone_url_names_repo_slug():
    assert set_repo.current_slug() == notebook_setup.REPO_SLUG
    assert set_repo.disagreements() == []
    mentions = [m for p in set_repo.kit_files() for m in set_repo.slug_mentions(p.read_text(errors="replace"))]
    assert len(mentions) >= 3, "found (almost) no badge or clone URL: the patterns no longer match the notebooks"


def test_each_badge_opens_its_own_notebook():
    for path in set_repo.kit_files():
        if path.suffix != ".ipynb":
            continue
        for target in re.findall(r"colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w.-]+/([^)\s\"]+)",
                                 path.read_text()):
            assert target == path.relative_to(ROOT).as_posix(), f"{path.name}'s badge opens {target}"


def test_setup_cell_uses_the_slug():
    assert f"https://github.com/{notebook_setup.REPO_SLUG}" in notebook_setup.SETUP_CELL
    assert set_repo.slug_mentions(notebook_setup.SETUP_CELL) == [notebook_setup.REPO_SLUG]


def test_set_repo_rewrites_every_mention_and_nothing_else(tmp_path):
    kit = tmp_path / "kit"
    for rel in ("notebooks", "docs", "scripts", "helpers/notebook_setup.py", "README.md", "tests/test_notebooks.py"):
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, kit / rel, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            (kit / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, kit / rel)
    other = "https://github.com/unslothai/unsloth"
    (kit / "docs" / "links.md").write_text(f"see {other} and https://github.com/{notebook_setup.REPO_SLUG}.git\n")
    before = sum(len(set_repo.slug_mentions(p.read_text(errors="replace"))) for p in set_repo.kit_files(kit))
    assert set_repo.main(["my-org/grpo-kit.v2", "--root", str(kit)]) == 0
    assert set_repo.current_slug(kit) == "my-org/grpo-kit.v2"
    assert set_repo.disagreements(kit) == []
    after = [m for p in set_repo.kit_files(kit) for m in set_repo.slug_mentions(p.read_text(errors="replace"))]
    assert len(after) == before and set(after) == {"my-org/grpo-kit.v2"}
    links = (kit / "docs" / "links.md").read_text()
    assert other in links and "https://github.com/my-org/grpo-kit.v2.git" in links
    assert set_repo.main(["--check", "--root", str(kit)]) == 0


def test_set_repo_refuses_a_malformed_slug(tmp_path):
    with pytest.raises(SystemExit, match="not a GitHub owner/name"):
        set_repo.set_repo("just-a-name", ROOT)
