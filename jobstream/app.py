"""Your jobs: an `App` holds named job definitions, each an `@app.job` handler.

    app = jobstream.App()

    @app.job("answer", input=Question, max_attempts=3, timeout_s=600)
    async def answer(question: Question, ctx: jobstream.Context) -> str:
        await ctx.progress(0.1, "thinking")
        return await ctx.llm.stream(prompt=question.text)

The server reads the definitions to validate a create's input and to publish its schemas; the
worker to know which names it claims and which handler runs each (docs/design.md, "Your own
jobs and durable steps"). The same definitions serve both, so a name the server accepts is one
some worker can run.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter

from jobstream.jobspec import BUILT_IN_JOB, DEFAULT_TIMEOUT_S

Handler = Callable[..., Any]
H = TypeVar("H", bound=Handler)

# A job's name is part of URLs, logs and the claim's queue key: short, plain, stable.
_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class JobDefinition:
    """One named job: its handler, its input and output models, and its policy."""

    name: str
    handler: Handler
    input: type[BaseModel]
    # The model the handler's return value is validated against; None: the result is the
    # text the job emitted, and the return value counts only where the handler emitted
    # nothing and returned a string: that string is then the text (worker/handlers.py).
    output: Any = None
    max_attempts: int = 3
    timeout_s: float = DEFAULT_TIMEOUT_S
    retry_unknown: bool = False
    # Running jobs of this name across the fleet, at most (None: no cap of its own). Not
    # enforced yet: a job that sets it warns when its app loads.
    concurrency: int | None = None
    # The most a job may spend across its calls and attempts (overridable per create).
    max_cost_usd: float | None = None
    # The provider whose queue and concurrency limit the job's claim counts against (None: the
    # deployment's default provider).
    provider: str | None = None
    # Tries of an answer that fails its model (ctx.llm.parse, or the output model), beside
    # max_attempts.
    invalid_output_retries: int = 2
    is_async: bool = field(init=False)
    _output_adapter: TypeAdapter[Any] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))
        adapter = TypeAdapter(self.output) if self.output is not None else None
        object.__setattr__(self, "_output_adapter", adapter)

    def parse_input(self, raw: Any) -> BaseModel:
        """The handler's argument from the stored input (raises pydantic's ValidationError)."""
        return self.input.model_validate(raw)

    def checked_output(self, value: Any) -> Any:
        """The handler's return value, validated against `output`, as JSON-ready data."""
        if self._output_adapter is None:
            return None
        validated = self._output_adapter.validate_python(value)
        return self._output_adapter.dump_python(validated, mode="json")

    def input_schema(self) -> dict[str, Any]:
        return self.input.model_json_schema()

    def output_schema(self) -> dict[str, Any]:
        adapter = self._output_adapter or TypeAdapter(str)
        return adapter.json_schema()


class App:
    """A set of job definitions; `JOBSTREAM_APP=package.module:app` names the one to load."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobDefinition] = {}

    def job(
        self,
        name: str,
        *,
        input: type[BaseModel],
        output: Any = None,
        max_attempts: int = 3,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_unknown: bool = False,
        concurrency: int | None = None,
        max_cost_usd: float | None = None,
        provider: str | None = None,
        invalid_output_retries: int = 2,
    ) -> Callable[[H], H]:
        """Register the decorated function as the job `name`.

        The handler takes `(input, ctx)`: the validated input model and a `jobstream.Context`.
        An `async def` runs on the worker's loop; a plain `def` runs in a thread, with a context
        whose methods are plain calls.
        """
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"job name {name!r}: lowercase letters, digits, '_', '.' or '-', "
                "starting with a letter, at most 64 characters"
            )
        if name == BUILT_IN_JOB:
            raise ValueError(f"{BUILT_IN_JOB!r} is the built-in job's name")
        if not (isinstance(input, type) and issubclass(input, BaseModel)):
            raise TypeError(f"job {name!r}: input must be a pydantic model class")
        if not 1 <= max_attempts <= 10:
            raise ValueError(f"job {name!r}: max_attempts must be 1 to 10")
        if not 1 <= timeout_s <= 3600:
            raise ValueError(f"job {name!r}: timeout_s must be 1 to 3600")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"job {name!r}: concurrency must be at least 1")
        if concurrency is not None:
            # Said where the app is loaded, not left for an operator to find out under load.
            warnings.warn(
                f"job {name!r}: concurrency={concurrency} is not enforced yet (docs/jobs.md, "
                "'Not there yet'); the worker's slots and the provider limits still hold",
                stacklevel=2,
            )
        if max_cost_usd is not None and max_cost_usd < 0:
            raise ValueError(f"job {name!r}: max_cost_usd must not be negative")
        if not 0 <= invalid_output_retries <= 10:
            raise ValueError(f"job {name!r}: invalid_output_retries must be 0 to 10")

        def register(handler: H) -> H:
            self._add(
                JobDefinition(
                    name=name,
                    handler=handler,
                    input=input,
                    output=output,
                    max_attempts=max_attempts,
                    timeout_s=float(timeout_s),
                    retry_unknown=retry_unknown,
                    concurrency=concurrency,
                    max_cost_usd=max_cost_usd,
                    provider=provider,
                    invalid_output_retries=invalid_output_retries,
                )
            )
            return handler

        return register

    def include(self, other: App) -> None:
        """Add every job of `other` (an app of another module or package)."""
        for definition in other.jobs.values():
            self._add(definition)

    def _add(self, definition: JobDefinition) -> None:
        existing = self._jobs.get(definition.name)
        if existing is not None and existing.handler is not definition.handler:
            raise ValueError(f"job {definition.name!r} is defined twice")
        self._jobs[definition.name] = definition

    @property
    def jobs(self) -> Mapping[str, JobDefinition]:
        return self._jobs

    def __iter__(self) -> Iterator[JobDefinition]:
        return iter(self._jobs.values())
