"""The ids a create gives its jobs: version-7 UUIDs (time, then random bits) in canonical text."""

from __future__ import annotations

import time
import uuid

from jobstream.job_ids import new_ids


def test_new_ids_are_distinct_version_7_uuids_in_canonical_text_and_ascending() -> None:
    before_ms = time.time_ns() // 1_000_000
    ids = new_ids(10_000)
    after_ms = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # one batch's ids ascend: its index entries go side by side
    # Every random bit varies: none is stuck at 0 or 1.
    seen_set = 0
    seen_clear = 0
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
        assert before_ms <= parsed.int >> 80 <= after_ms  # the leading 48 bits: milliseconds
        seen_set |= parsed.int
        seen_clear |= ~parsed.int
    random_bits = ((1 << 80) - 1) & ~((0xF << 76) | (0x3 << 62))  # less version and variant
    assert (seen_set & seen_clear & random_bits) == random_bits
