"""Set the kit's GitHub owner/name everywhere: Colab badges, the setup cell's clone URL, the generators, the docs.

    python scripts/set_repo.py OWNER/NAME      # rewrite every file that names the current slug
    python scripts/set_repo.py --check         # exit 1 if a badge or clone URL names another slug

The one source is REPO_SLUG in helpers/notebook_setup.py; this script reads the current value there, replaces that
exact owner/name wherever it appears as a whole (badges, clone URLs, `REPO_SLUG = "..."`/`SLUG = "..."`), and
leaves every other GitHub address (unslothai/unsloth, ...) alone. Notebooks are edited as text, so nothing else in
them changes. tests/test_repo_slug.py checks that every badge and clone URL agrees with REPO_SLUG.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path("helpers") / "notebook_setup.py"
SLUG_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
SUFFIXES = {".py", ".ipynb", ".md", ".txt", ".toml", ".cfg", ".yml", ".yaml", ".sh", ".json"}
SKIP_DIRS = {".git", ".venv", "runs", "node_modules", "__pycache__", ".pytest_cache"}
# Addresses that must name the kit itself (what --check and the test compare).
BADGE_RE = re.compile(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/")
CLONE_RE = re.compile(r"""["']git["'],\s*["']clone["'][^\]]*?https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?["']""")
ASSIGN_RE = re.compile(r"""^\s*(?:REPO_SLUG|SLUG|REPO)\s*=\s*["']([\w.-]+/[\w.-]+)["']""", re.M)


def current_slug(root: Path = ROOT) -> str:
    match = re.search(r'^REPO_SLUG = "([^"]+)"', (root / SOURCE).read_text(), re.M)
    if not match:
        raise SystemExit(f"{root / SOURCE}: no REPO_SLUG = \"owner/name\" line")
    return match.group(1)


def kit_files(root: Path = ROOT, suffixes=SUFFIXES) -> list[Path]:
    """The kit's files ending in `suffixes` (None: every file): git's tracked and untracked-but-not-ignored files,
    else a walk without build folders."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split("\n")
        files = [root / line for line in out if line]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*") if not SKIP_DIRS.intersection(p.relative_to(root).parts)]
    return sorted(p for p in files if (suffixes is None or p.suffix in suffixes) and p.is_file())


def slug_mentions(text: str) -> list[str]:
    """The owner/name every badge, clone URL and slug assignment in `text` names."""
    return BADGE_RE.findall(text) + CLONE_RE.findall(text) + ASSIGN_RE.findall(text)


def disagreements(root: Path = ROOT, slug: str | None = None) -> list[str]:
    """'file: names X' for every badge / clone URL / slug assignment that does not name `slug` (REPO_SLUG)."""
    slug = slug or current_slug(root)
    problems = []
    for path in kit_files(root):
        for found in slug_mentions(path.read_text(errors="replace")):
            if found != slug:
                problems.append(f"{path.relative_to(root)}: names {found}, REPO_SLUG is {slug}")
    return problems


def set_repo(new: str, root: Path = ROOT) -> list[Path]:
    """Replace the current slug with `new` in every kit file; returns the files changed."""
    if not SLUG_RE.match(new):
        raise SystemExit(f"{new!r} is not a GitHub owner/name (for example: my-org/grpo-course-kit)")
    old = current_slug(root)
    if old == new:
        return []
    whole = re.compile(rf"(?<![\w.-]){re.escape(old)}(?![\w-]|\.(?!git\b)\w)")
    changed = []
    for path in kit_files(root):
        text = path.read_text(errors="replace")
        updated = whole.sub(new, text)
        if updated != text:
            path.write_text(updated)
            changed.append(path)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("slug", nargs="?", help="OWNER/NAME of the kit's GitHub repository")
    ap.add_argument("--check", action="store_true", help="only check that every badge and clone URL agrees")
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.check or not args.slug:
        problems = disagreements(args.root)
        for p in problems:
            print(p)
        print(f"REPO_SLUG {current_slug(args.root)}: " + ("all badges and clone URLs agree" if not problems
                                                           else f"{len(problems)} disagree"))
        return 1 if problems else 0
    changed = set_repo(args.slug, args.root)
    for path in changed:
        print(f"updated {path.relative_to(args.root)}")
    print(f"REPO_SLUG is now {args.slug} ({len(changed)} files changed). Regenerate nothing: badges and the setup "
          "cell were edited in place.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
