"""docs/design.md names, for each invariant, the tests that hold it: each must exist, so that a
renamed or deleted test cannot leave the contract citing nothing. And the repository names no
path outside itself."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"`((?:unit|integration|e2e)/[\w/]+\.py)::(\w+)`")


def test_every_test_the_design_cites_exists() -> None:
    text = (ROOT / "docs" / "design.md").read_text()
    cited = CITED.findall(text)
    assert len(cited) > 50  # the invariants' lists, not a stray mention
    missing = [
        f"{path}::{name}"
        for path, name in cited
        if not (ROOT / "tests" / path).exists()
        or not re.search(rf"def {name}\(", (ROOT / "tests" / path).read_text())
    ]
    assert missing == []


def test_no_document_sends_readers_outside_the_repository() -> None:
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    outside = [
        f"{doc.name}: {line.strip()}"
        for doc in documents
        for line in doc.read_text().splitlines()
        if "../shared" in line or "DESIGN.md" in line
    ]
    assert outside == []
