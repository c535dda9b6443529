"""The ids a create gives its jobs: random version-4 UUIDs in their canonical text."""

from __future__ import annotations

import uuid

from jobstream.creates import _new_ids


def test_new_ids_are_distinct_version_4_uuids_in_canonical_text() -> None:
    ids = _new_ids(10_000)
    assert len(set(ids)) == len(ids)
    # Every bit outside the version and variant varies: none is stuck at 0 or 1.
    seen_set = 0
    seen_clear = 0
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
        seen_set |= parsed.int
        seen_clear |= ~parsed.int
    fixed = (0xF << 76) | (0x3 << 62)  # the version's 4 bits and the variant's 2
    everything = (1 << 128) - 1
    assert (seen_set & seen_clear & everything) == everything & ~fixed
