"""The in-memory execution registry: one handler run per (contract, attempt), however many
requests arrive for it, and what each request is answered.

Everything here runs on the event loop without awaiting inside a decision, so admission is atomic:
eight concurrent ``/execute`` calls for one contract start exactly one run.

Rules (the gateway's, and worker-sdk's): no run yet → start. Same or older attempt → the latest
run's current report. A newer attempt → start again only if the latest run ended ``failed`` or
``partial``; a completed or still running contract never runs twice.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Union

from .protocol import (
    CompletedReport,
    FailedReport,
    Output,
    PartialReport,
    PendingReport,
    Progress,
)

Report = Union[CompletedReport, FailedReport, PendingReport, PartialReport]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_task_id() -> str:
    """``task_`` + 26 Crockford base32 characters of time and randomness (ULID-like, URL-safe)."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "task_" + "".join(reversed(chars))


@dataclass
class TaskRecord:
    contract_id: str
    task_id: str
    poll_url: str
    running: bool = True
    progress: Progress | None = None
    partial_output: Output | None = None
    estimated_completion: datetime | None = None
    report: Report | None = None
    finished_at: float = 0.0
    answered_running: bool = False
    #: Set when the run goes to the background or ends: what a waiting ``/execute`` watches.
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)

    def current_report(self) -> Report:
        if self.report is not None:
            return self.report
        if self.progress is not None or self.partial_output is not None:
            return PartialReport(
                contract_id=self.contract_id,
                task_id=self.task_id,
                poll_url=self.poll_url,
                progress=self.progress,
                output=self.partial_output,
                estimated_completion=self.estimated_completion,
            )
        return PendingReport(
            contract_id=self.contract_id,
            task_id=self.task_id,
            poll_url=self.poll_url,
            estimated_completion=self.estimated_completion,
        )

    def answer(self) -> Report:
        """The report to give a caller now; remembers that a running state was shown (the caller
        is then owed a completion callback)."""
        if self.running:
            self.answered_running = True
        return self.current_report()

    def allows_retry(self) -> bool:
        return not self.running and isinstance(self.report, (FailedReport, PartialReport))


@dataclass
class Admission:
    """What :meth:`Executions.admit` decided: ``start`` a new run (``record``), answer an
    ``existing`` run's report, or ``busy``."""

    record: TaskRecord | None = None
    existing: Report | None = None
    busy: bool = False


class Executions:
    MAX_SWEEP_INTERVAL_S = 30.0

    def __init__(self, retention_s: float, max_concurrent_tasks: int | None) -> None:
        self._retention = retention_s
        self._slots = max_concurrent_tasks
        self._latest: dict[str, tuple[int, str]] = {}
        self._tasks: dict[str, TaskRecord] = {}
        self._last_sweep = time.monotonic()

    def admit(self, contract_id: str, attempt: int, poll_base: str) -> Admission:
        self._forget_expired()
        latest = self._latest.get(contract_id)
        if latest is not None:
            latest_attempt, task_id = latest
            record = self._tasks.get(task_id)
            if record is not None and not (attempt > latest_attempt and record.allows_retry()):
                return Admission(existing=record.answer())
        if self._slots is not None and self.in_flight() >= self._slots:
            return Admission(busy=True)
        task_id = new_task_id()
        record = TaskRecord(contract_id=contract_id, task_id=task_id, poll_url=poll_base + "tasks/" + task_id)
        self._tasks[task_id] = record
        self._latest[contract_id] = (attempt, task_id)
        return Admission(record=record)

    def get(self, task_id: str, contract_id: str) -> TaskRecord | None:
        """The task, if it exists and belongs to ``contract_id`` (a task of another contract is
        reported absent, so task ids cannot be probed across contracts)."""
        record = self._tasks.get(task_id)
        return record if record is not None and record.contract_id == contract_id else None

    def latest_task(self, contract_id: str) -> str | None:
        latest = self._latest.get(contract_id)
        return latest[1] if latest else None

    def move_to_background(self, record: TaskRecord, estimated_completion: datetime | None) -> None:
        record.estimated_completion = estimated_completion
        record.settled.set()

    def finish(self, record: TaskRecord, report: Report) -> bool:
        """Stores the final report; returns whether a caller was shown a running state."""
        record.report = report
        record.running = False
        record.progress = None
        record.finished_at = time.monotonic()
        record.settled.set()
        record.finished.set()
        return record.answered_running

    def in_flight(self) -> int:
        return sum(1 for record in self._tasks.values() if record.running)

    def _forget_expired(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < min(self._retention, self.MAX_SWEEP_INTERVAL_S):
            return
        self._last_sweep = now
        self._tasks = {
            task_id: record
            for task_id, record in self._tasks.items()
            if record.running or now - record.finished_at < self._retention
        }
        self._latest = {contract: latest for contract, latest in self._latest.items() if latest[1] in self._tasks}
