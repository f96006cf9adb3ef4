"""What a task handler returns: a :class:`TaskOutcome` (or a plain value, see
:func:`as_outcome`), and the events of a streamed output."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Union

from .protocol import (
    STREAM_ERROR_EVENT,
    FileOutput,
    JsonOutput,
    MultipleOutput,
    Output,
    Progress,
    StreamOutput,
    TaskError,
    TextOutput,
)

#: The code of the ``failed`` report written when a handler raises an unexpected exception.
HANDLER_PANICKED = "WORKER_PANICKED"
#: The code of the ``failed`` report written when a handler returns an output the protocol forbids.
INVALID_OUTPUT = "WORKER_INVALID_OUTPUT"
#: The code of the ``failed`` report of a run stopped by ``POST /tasks/{id}/cancel``.
TASK_CANCELLED = "TASK_CANCELLED"


@dataclass(frozen=True)
class StreamEvent:
    """One event of a streamed output. Its ``data`` is output (the gateway assembles the data of
    all events, in order, into the deliverable); ``done`` and ``error`` names are reserved."""

    data: str
    event: str | None = None

    def __post_init__(self) -> None:
        # SSE cannot carry carriage returns.
        object.__setattr__(self, "data", self.data.replace("\r\n", "\n").replace("\r", "\n"))
        if self.event is not None:
            name = self.event.replace("\r", "").replace("\n", "")
            object.__setattr__(self, "event", name or None)

    @classmethod
    def error(cls, code: str, message: str) -> StreamEvent:
        """The closing event of a failed stream: the gateway fails the attempt with ``code``."""
        import json

        return cls(json.dumps({"code": code, "message": message}), STREAM_ERROR_EVENT)


class TaskFailed(Exception):
    """Raise from a handler to end the task ``failed`` with this code, message and details."""

    def __init__(self, code: str, message: str, details: Any | None = None) -> None:
        super().__init__(message)
        self.error = TaskError(code=code, message=message, details=details)


class TaskOutcome:
    """How a handler run ended (or that it continues in the background). Build with the class
    methods."""


@dataclass
class Completed(TaskOutcome):
    output: Output
    metadata: Any | None = None


@dataclass
class Failed(TaskOutcome):
    error: TaskError


@dataclass
class Pending(TaskOutcome):
    work: Callable[[], Awaitable[Any]]
    estimated_completion: datetime | None = None


@dataclass
class Streamed(TaskOutcome):
    events: AsyncIterable[StreamEvent | str]


@dataclass
class Partial(TaskOutcome):
    progress: Progress | None = None
    output: Output | None = None


def json_output(content: Any, metadata: Any | None = None) -> Completed:
    """Completed with a ``json`` output."""
    return Completed(JsonOutput(content=content), metadata)


def text_output(content: str, metadata: Any | None = None) -> Completed:
    """Completed with a ``text`` output."""
    return Completed(TextOutput(content=content), metadata)


def output(value: Output, metadata: Any | None = None) -> Completed:
    """Completed with any output."""
    return Completed(value, metadata)


def failed(code: str, message: str, details: Any | None = None) -> Failed:
    """Failed with a code (e.g. ``INVALID_INPUT``) and a message."""
    return Failed(TaskError(code=code, message=message, details=details))


def pending(work: Callable[[], Awaitable[Any]], estimated_completion: datetime | None = None) -> Pending:
    """Continues ``work`` (an async function returning what a handler returns) in the background:
    the worker answers ``pending`` now and reports the end by poll and callback."""
    return Pending(work, estimated_completion)


def stream(events: AsyncIterable[StreamEvent | str]) -> Streamed:
    """Completed with a ``stream`` output: the SDK serves ``events`` as SSE while they come."""
    return Streamed(events)


def partial(progress: Progress | None, items: list[Any]) -> Partial:
    """Ended with only part of the work: ``items`` as a ``multiple`` output (the gateway accepts it
    only when the contract's policy allows partial deliveries of that many items)."""
    return Partial(progress, MultipleOutput(items=items) if items else None)


HandlerResult = Union[TaskOutcome, Output, dict[str, Any], list[Any], str, int, float, bool, None]


def as_outcome(value: Any) -> TaskOutcome:
    """What a handler's return value means: a :class:`TaskOutcome` as is, an output model as a
    completed output, a ``str`` as ``text``, anything else JSON-serialisable as ``json``."""
    if isinstance(value, TaskOutcome):
        return value
    if isinstance(value, (TextOutput, JsonOutput, FileOutput, StreamOutput, MultipleOutput)):
        return Completed(value)
    if isinstance(value, str):
        return text_output(value)
    return json_output(value)


async def aiter_events(events: AsyncIterable[StreamEvent | str]) -> AsyncIterator[StreamEvent]:
    async for item in events:
        yield item if isinstance(item, StreamEvent) else StreamEvent(str(item))


__all__ = [
    "HANDLER_PANICKED",
    "INVALID_OUTPUT",
    "TASK_CANCELLED",
    "Completed",
    "Failed",
    "Partial",
    "Pending",
    "StreamEvent",
    "Streamed",
    "TaskFailed",
    "TaskOutcome",
    "as_outcome",
    "failed",
    "json_output",
    "output",
    "partial",
    "pending",
    "stream",
    "text_output",
]
