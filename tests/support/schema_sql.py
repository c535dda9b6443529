"""Reading schema.sql in tests: the bodies of its functions."""

from __future__ import annotations

import re
from pathlib import Path

SCHEMA = (Path(__file__).resolve().parents[2] / "schema.sql").read_text(encoding="utf-8")


def function_body(name: str) -> str:
    """The body (between its `$$`) of a function schema.sql creates."""
    found = re.search(rf"CREATE OR REPLACE FUNCTION {name}\(.*?\$\$(.*?)\$\$", SCHEMA, re.S)
    assert found, name
    return found.group(1)
