"""Each tenant's open streams in a process: the cap, its default, the refusal, the release."""

from __future__ import annotations

import pytest

from jobstream.server.problems import Problem
from jobstream.server.stream_slots import RETRY_AFTER_S, StreamSlots, tenant_limit


def test_the_default_is_a_quarter_of_the_connection_cap_and_at_least_one() -> None:
    assert tenant_limit(None, 40) == 10
    assert tenant_limit(None, 10_000) == 2_500
    assert tenant_limit(None, 3) == 1
    assert tenant_limit(7, 40) == 7  # JOBSTREAM_TENANT_MAX_STREAMS wins


def test_a_tenant_past_its_cap_is_refused_and_others_are_not() -> None:
    slots = StreamSlots(2)
    held = [slots.take("a"), slots.take("a")]
    with pytest.raises(Problem) as refused:
        slots.take("a")
    problem = refused.value
    assert (problem.status, problem.slug) == (429, "too-many-streams")
    assert problem.headers == {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"}
    assert slots.refused == 1
    slots.take("b")  # another tenant's count is its own
    assert (slots.held("a"), slots.held("b")) == (2, 1)
    held[0].release()
    slots.take("a")  # room again once one of its own ends
    assert slots.held("a") == 2


def test_a_slot_is_released_once_however_often_asked() -> None:
    slots = StreamSlots(3)
    first, second = slots.take("a"), slots.take("a")
    first.release()
    first.release()  # the stream's end and a handler's clean-up may both release
    assert slots.held("a") == 1
    with second:
        pass
    assert slots.held("a") == 0
    assert "a" not in slots._open  # a tenant with no stream open holds no entry
