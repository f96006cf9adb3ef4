"""Outputs the worker hosts itself, so a handler never runs its own web server.

- Files (:meth:`hiregate.TaskContext.host_file`): kept in memory and served at
  ``GET /files/{task_id}/{name}`` (unauthenticated, like any HIRE file URL: "URLs MUST be
  accessible to seeker"; the task id is unguessable); the handler gets a ``file`` output with its
  URL, media type, size and ``sha256:`` checksum, which the gateway checks before judging.
- Streams (:func:`hiregate.stream`): the events are served at ``GET /streams/{task_id}`` as
  Server-Sent Events numbered ``1, 2, …`` while the handler produces them; a reader reconnecting
  with ``Last-Event-ID: n`` gets the events after ``n``. The SDK closes the stream with ``done``
  (an ``error`` event closes it as a failure). Reading needs the contract token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from .outcomes import StreamEvent
from .protocol import STREAM_END_EVENT, STREAM_ERROR_EVENT

KEEP_ALIVE_S = 15.0


@dataclass
class HostedFile:
    mime: str
    data: bytes
    at: float = field(default_factory=time.monotonic)


@dataclass
class HostedStream:
    contract_id: str
    events: list[StreamEvent] = field(default_factory=list)
    ended: bool = False
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    at: float = field(default_factory=time.monotonic)

    async def append(self, event: StreamEvent) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    async def end(self) -> None:
        async with self.changed:
            self.ended = True
            self.changed.notify_all()


class HostedOutputs:
    def __init__(self, retention_s: float) -> None:
        self._retention = retention_s
        self._files: dict[tuple[str, str], HostedFile] = {}
        self._streams: dict[str, HostedStream] = {}
        self._pumps: set[asyncio.Task[None]] = set()

    def _forget_expired(self) -> None:
        now = time.monotonic()
        self._files = {k: v for k, v in self._files.items() if now - v.at < self._retention}
        self._streams = {k: v for k, v in self._streams.items() if now - v.at < self._retention}

    def add_file(self, task_id: str, name: str, mime: str, data: bytes) -> None:
        self._forget_expired()
        self._files[(task_id, name)] = HostedFile(mime, data)

    def file(self, task_id: str, name: str) -> HostedFile | None:
        return self._files.get((task_id, name))

    def start_stream(self, task_id: str, contract_id: str, source: AsyncIterator[StreamEvent]) -> None:
        """Hosts ``source`` for ``task_id``: a background task appends its events as they come and
        closes the stream with ``done`` unless an ``error`` event closed it."""
        self._forget_expired()
        hosted = HostedStream(contract_id)
        self._streams[task_id] = hosted

        async def pump() -> None:
            closed_by_error = False
            try:
                async for event in source:
                    closed_by_error = event.event == STREAM_ERROR_EVENT
                    await hosted.append(event)
                    if closed_by_error:
                        break
            except Exception as error:  # noqa: BLE001 - a crashing producer fails the stream
                closed_by_error = True
                await hosted.append(StreamEvent.error("WORKER_STREAM_FAILED", str(error)))
            if not closed_by_error:
                await hosted.append(StreamEvent("{}", STREAM_END_EVENT))
            await hosted.end()

        task = asyncio.get_running_loop().create_task(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

    def stream(self, task_id: str, contract_id: str) -> HostedStream | None:
        hosted = self._streams.get(task_id)
        return hosted if hosted is not None and hosted.contract_id == contract_id else None


def sse_frame(event_id: int, event: StreamEvent) -> bytes:
    lines = [f"id: {event_id}"]
    if event.event:
        lines.append(f"event: {event.event}")
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


async def sse_body(hosted: HostedStream, after: int) -> AsyncIterator[bytes]:
    """The stream's events after number ``after``, as SSE, until it ends."""
    following = after
    while True:
        async with hosted.changed:
            while following >= len(hosted.events) and not hosted.ended:
                try:
                    await asyncio.wait_for(hosted.changed.wait(), KEEP_ALIVE_S)
                except asyncio.TimeoutError:
                    break
            batch = hosted.events[following:]
            ended = hosted.ended
        if not batch and not ended:
            yield b": keep-alive\n\n"
            continue
        for event in batch:
            following += 1
            yield sse_frame(following, event)
        if ended and following >= len(hosted.events):
            return
