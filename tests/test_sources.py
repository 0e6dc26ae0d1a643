"""The kit cites what a reader can look up (an Unsloth script, a GitHub issue, a measurement in docs/), never the
private "field notes" its facts were first gathered in: the repository does not hold them."""

import re
from pathlib import Path

from scripts.set_repo import ROOT, kit_files

FIELD_NOTES = re.compile(r"field[\s#*_-]+notes", re.IGNORECASE)  # also across a line break: "field\n# notes"


def test_no_file_cites_the_field_notes():
    this = Path(__file__).resolve()
    citing = []
    for path in kit_files(suffixes=None):
        if path.resolve() == this:
            continue
        text = path.read_text(errors="replace")
        for match in FIELD_NOTES.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            citing.append(f"{path.relative_to(ROOT)}:{line}")
    assert not citing, f"cite the source the field notes summarised (or drop the claim): {', '.join(citing)}"
