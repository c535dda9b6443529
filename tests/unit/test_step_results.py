"""A replayed step's result comes back as its function said it returns (worker/steps.py)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from jobstream.worker.steps import _return_type

M = TypeVar("M", bound=BaseModel)


class Point(BaseModel):
    x: int


async def annotated() -> Point:
    return Point(x=1)


async def plain():  # type: ignore[no-untyped-def]
    return {"x": 1}


async def parse(model: type[M], prompt: str | None = None, **options: Any) -> M:
    return model(x=1)


def test_an_annotation_a_type_variable_and_none() -> None:
    assert _return_type(annotated, (), {}) is Point
    assert _return_type(plain, (), {}) is None
    # ctx.llm.parse(Model, ...) returns a Model: the type variable is what the call bound.
    assert _return_type(parse, (Point,), {"prompt": "p"}) is Point
    assert _return_type(parse, (), {"model": Point}) is Point
