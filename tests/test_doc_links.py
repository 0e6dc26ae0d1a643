"""Relative links in README.md, docs/*.md, capstone/README.md and lab/docs/*.md lead somewhere: the file exists,
and a #anchor names a heading of the file it points into (GitHub's anchor rules). Links inside code are not links and are skipped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "capstone" / "README.md",
         *sorted((ROOT / "lab" / "docs").glob("*.md"))]  # the lab's record and scale-out

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target) and ![alt](target)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:|^//", re.I)  # https:, mailto:, //host


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text()):
        if m := HEADING.match(line):
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` whose file is missing or whose #anchor is not a heading there."""
    prose = INLINE_CODE.sub("", "\n".join(prose_lines(page.read_text())))
    problems = []
    for target in TARGET.findall(prose):
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading with that anchor in {dest.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_and_anchors_resolve(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading, with punctuation (2026-11-23)\n\n## Twice\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-code-heading-with-punctuation-2026-11-23) [dup](other.md#twice-1) [self](#page)\n"
        "# Page\n[gone](missing.md) [bad anchor](other.md#nope)\n"
        "[multi-line\ntext](other.md) ![image](other.md) [web](https://example.com/x.md#y)\n"
        "`[in code](missing-in-code.md)`\n```\n[in a block](missing-in-block.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading with that anchor in other.md"]


def test_slug_follows_githubs_rules():
    assert slug("`scripts/benchmark_cpu.py`: seconds per step, tokens per second, A/B") == (
        "scriptsbenchmark_cpupy-seconds-per-step-tokens-per-second-ab")
    assert slug("bf16 sampling (opt-in), and what three seeds say about the demo's learning") == (
        "bf16-sampling-opt-in-and-what-three-seeds-say-about-the-demos-learning")
    assert slug("Step 1: `import unsloth`. It works") == "step-1-import-unsloth-it-works"
