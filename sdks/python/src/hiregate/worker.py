"""A HIRE worker around an async function: what the gateway calls for every paid hire.

::

    from hiregate import GatewayKeys, TaskContext, Worker

    worker = Worker("summarizer", "1.0.0", task_types=["summarize"],
                    gateway_keys=GatewayKeys.remote("https://gw.example/.well-known/jwks.json"))

    @worker.task
    async def summarize(ctx: TaskContext, input: dict) -> dict:
        return {"summary": input["text"][:200], "confidence": 0.9}

    app = worker.app()          # an ASGI (Starlette) app; or mount it into FastAPI:
    # fastapi_app.mount("/agent", worker.app())

Routes (the same as the Rust ``worker-sdk``; the conformance suite in ``sdks/conformance`` holds
the three SDKs to one behaviour):

- ``GET /health``, ``GET /capabilities``: unauthenticated.
- ``POST /execute``: ``Authorization: Bearer <contract token>`` is verified offline against the
  gateway's JWKS and must name the contract of ``X-Contract-ID`` (401 ``missing_token`` /
  ``invalid_token`` / ``contract_mismatch`` / ``wrong_worker``); ``Idempotency-Key``, if sent,
  must equal it (400 ``idempotency_key_mismatch``); ``X-Attempt`` (default 1) reruns a
  ``failed``/``partial`` contract. One handler run per (contract, attempt): duplicates get the
  stored result or the current state. The request waits for the handler up to ``sync_wait_s``,
  then answers ``pending`` (202, ``poll_url``) while the work goes on.
- ``GET /tasks/{id}``: the task's current report (same token rules; 404 ``task_not_found`` for a
  task of another contract).
- ``POST /tasks/{id}/cancel``: stops a running task (``failed``, ``TASK_CANCELLED``).
- ``GET /streams/{id}`` (token) and ``GET /files/{id}/{name}``: hosted outputs.
- ``POST /verify`` with :meth:`Worker.verifier`: WattSwarm cross-check votes.

Work that went ``pending`` is reported back to the gateway by a signed callback when
``callback`` is configured. State is in memory: run one process per worker (or route a
contract's calls to the same process).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import callbacks as callback_delivery
from ._executions import Executions, Report, TaskRecord
from ._hosted import HostedOutputs, sse_body
from .callbacks import CallbackConfig
from .canonical import digest_of_bytes
from .outcomes import (
    HANDLER_PANICKED,
    INVALID_OUTPUT,
    TASK_CANCELLED,
    Completed,
    Failed,
    Partial,
    Pending,
    Streamed,
    TaskFailed,
    TaskOutcome,
    aiter_events,
    as_outcome,
)
from .protocol import (
    HEADER_ATTEMPT,
    HEADER_CONTRACT_ID,
    HEADER_CORRELATION_ID,
    HEADER_IDEMPOTENCY_KEY,
    HEADER_TASK_TYPE,
    Capabilities,
    CompletedReport,
    FailedReport,
    FileOutput,
    Health,
    MultipleOutput,
    Output,
    PartialReport,
    PendingReport,
    PriceInfo,
    Progress,
    StreamOutput,
    TaskError,
    error_body,
    report_json,
    wire_json,
)
from .tokens import GatewayKeys, KeysUnavailable, TokenError, parse_prefixed_id
from .verify import PolicyBindingError, Verdict, VerifyRequest, check_binding, verify_response

log = logging.getLogger("hiregate.worker")

#: How long ``/execute`` waits for a handler before answering ``pending`` by default (below the
#: HIRE document's 30-second connection timeout).
DEFAULT_SYNC_WAIT_S = 25.0
#: How long finished runs are remembered for duplicates and polls (HIRE's long-running horizon).
DEFAULT_RETENTION_S = 24 * 60 * 60.0
DEFAULT_MAX_INPUT_BYTES = 2 * 1024 * 1024
#: How long a cancelled handler may take to stop before it is cancelled by force.
CANCEL_GRACE_S = 0.5
CANCEL_WAIT_S = 5.0

_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")

_OUTPUT = TypeAdapter(Output)

Handler = Callable[["TaskContext", Any], Any]
H = TypeVar("H", bound=Callable[..., Any])


class TaskContext:
    """What the handler knows about the run it performs."""

    def __init__(
        self,
        *,
        contract_id: str,
        attempt: int,
        task_id: str,
        task_type: str | None,
        correlation_id: str | None,
        base_url: str,
        record: TaskRecord,
        hosted: HostedOutputs,
    ) -> None:
        self.contract_id = contract_id
        #: The gateway's attempt number (1 unless it retries after a failure).
        self.attempt = attempt
        #: This run's task id (the last segment of its poll URL).
        self.task_id = task_id
        #: The contract's task type, when the gateway sent it (``X-Task-Type``).
        self.task_type = task_type
        #: The hire's correlation id (``X-Correlation-ID``): put it in your logs.
        self.correlation_id = correlation_id
        #: Where this worker is reached (the base of its URLs).
        self.base_url = base_url
        self._record = record
        self._hosted = hosted

    @property
    def is_cancelled(self) -> bool:
        """Whether the gateway cancelled the task; long work should check it between steps."""
        return self._record.cancel.is_set()

    async def cancelled(self) -> None:
        """Returns when the task is cancelled (for ``asyncio.wait`` next to the work)."""
        await self._record.cancel.wait()

    def report_progress(self, percent: float | None = None, message: str | None = None) -> None:
        """Publishes progress: until the task ends, polls and duplicates answer ``partial`` with it."""
        if self._record.running:
            self._record.progress = Progress(percent=percent, message=message)

    def report_partial(self, progress: Progress, items: list[Output]) -> None:
        """Publishes progress with the items already done (a ``multiple`` output); the gateway
        relays the progress and the number of items to the seeker, not the items."""
        if self._record.running:
            self._record.progress = progress
            self._record.partial_output = MultipleOutput(items=items)  # type: ignore[arg-type]

    def host_file(self, name: str, mime: str, data: bytes | str) -> FileOutput:
        """Hosts ``data`` as file ``name`` of this task (``GET /files/{task_id}/{name}``) and
        returns the ``file`` output naming it, with its size and ``sha256:`` checksum."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        safe = "".join(c if (c.isascii() and c.isalnum()) or c in ".-_" else "_" for c in name)
        if not safe or set(safe) == {"."}:
            safe = "file"
        self._hosted.add_file(self.task_id, safe, mime, raw)
        return FileOutput(
            url=f"{self.base_url}files/{self.task_id}/{safe}",
            mime=mime,
            size=len(raw),
            checksum=digest_of_bytes(raw),
            name=safe,
        )


class ApiError(Exception):
    """Every non-report answer: ``{"error": {"code", "message"}}`` with an HTTP status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def response(self) -> Response:
        headers = {}
        if self.status == 401:
            headers["www-authenticate"] = "Bearer"
        elif self.status == 429:
            headers["retry-after"] = "1"
        elif self.status == 503:
            headers["retry-after"] = "5"
        return JSONResponse(error_body(self.code, str(self)), status_code=self.status, headers=headers)


class Worker:
    """A HIRE worker. Configure it, register the handler with :meth:`task`, serve :meth:`app`."""

    def __init__(
        self,
        name: str,
        version: str,
        *,
        task_types: list[str],
        gateway_keys: GatewayKeys | None = None,
        allow_unauthenticated_for_local_dev: bool = False,
        worker_id: str | None = None,
        public_url: str | None = None,
        callback: CallbackConfig | None = None,
        sync_wait_s: float | None = DEFAULT_SYNC_WAIT_S,
        retention_s: float = DEFAULT_RETENTION_S,
        max_concurrent_tasks: int | None = None,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        pricing: dict[str, PriceInfo] | None = None,
        handler: Handler | None = None,
    ) -> None:
        if not name.strip() or not version.strip():
            raise ValueError("worker name and version must not be empty")
        if not task_types:
            raise ValueError("a worker must declare at least one task type")
        for task_type in task_types:
            if not _IDENTIFIER.match(task_type):
                raise ValueError(f"task type {task_type!r} is not an identifier")
        if pricing and set(pricing) - set(task_types):
            raise ValueError("price given for an undeclared task type")
        if gateway_keys is None and not allow_unauthenticated_for_local_dev:
            raise ValueError("configure gateway_keys, or explicitly allow_unauthenticated_for_local_dev")
        if max_concurrent_tasks is not None and max_concurrent_tasks < 1:
            raise ValueError("max_concurrent_tasks must be at least 1")
        if public_url is not None and not public_url.startswith(("http://", "https://")):
            raise ValueError("public_url must be an http(s) base URL")
        if gateway_keys is None:
            log.warning("worker %s: gateway token check DISABLED (local development)", name)
        self.name = name
        self.version = version
        self.task_types = list(dict.fromkeys(task_types))
        self.gateway_keys = gateway_keys
        self.worker_id = worker_id
        self.public_url = None if public_url is None else public_url.rstrip("/") + "/"
        self.callback = callback
        self.sync_wait_s = sync_wait_s
        self.max_input_bytes = max_input_bytes
        self.max_concurrent_tasks = max_concurrent_tasks
        self.pricing = pricing
        self._handler = handler
        self._verifier: tuple[str, str, Callable[[VerifyRequest], Awaitable[Verdict]]] | None = None
        self._executions = Executions(retention_s, max_concurrent_tasks)
        self._hosted = HostedOutputs(retention_s)
        self._background: set[asyncio.Task[Any]] = set()
        self._http: httpx.AsyncClient | None = None
        #: Handler runs so far (each call of the handler, not each request).
        self.handler_runs = 0

    # ----- configuration -------------------------------------------------------------------

    def task(self, handler: H) -> H:
        """Decorator: ``handler(ctx, input)`` performs the tasks. It may be ``async`` (preferred)
        or a plain function (run in a thread). It returns a :class:`~hiregate.TaskOutcome`, an
        output model, a ``str`` (``text``) or any JSON value (``json``), or raises
        :class:`~hiregate.TaskFailed`."""
        self._handler = handler
        return handler

    def verifier(self, provider_family: str, model_id: str) -> Callable[[H], H]:
        """Decorator: serves ``POST /verify`` with ``handler(request) -> Verdict`` and declares
        ``verify`` with ``provider_family`` and ``model_id`` in ``/capabilities``."""

        def register(handler: H) -> H:
            self._verifier = (provider_family, model_id, handler)
            return handler

        return register

    def capabilities(self) -> Capabilities:
        return Capabilities(
            name=self.name,
            version=self.version,
            task_types=self.task_types,
            pricing=self.pricing or None,
            max_concurrent_tasks=self.max_concurrent_tasks,
            completion_callbacks=self.callback is not None,
            cancel=True,
            verify=self._verifier is not None,
            provider_family=self._verifier[0] if self._verifier else None,
            model_id=self._verifier[1] if self._verifier else None,
        )

    def routes(self) -> list[Route]:
        """The worker's routes, to add to an existing Starlette app."""
        routes = [
            Route("/health", self._health, methods=["GET"]),
            Route("/capabilities", self._capabilities, methods=["GET"]),
            Route("/execute", self._execute, methods=["POST"]),
            Route("/tasks/{task_id}", self._task_status, methods=["GET"]),
            Route("/tasks/{task_id}/cancel", self._cancel, methods=["POST"]),
            Route("/streams/{task_id}", self._stream, methods=["GET"]),
            Route("/files/{task_id}/{name}", self._file, methods=["GET"]),
        ]
        if self._verifier is not None:
            routes.append(Route("/verify", self._verify, methods=["POST"]))
        return routes

    def app(self) -> Starlette:
        """The worker as an ASGI app (mount it into FastAPI/Starlette, or serve it with uvicorn)."""

        async def http_error(request: Request, exc: Exception) -> Response:
            status = exc.status_code if isinstance(exc, HTTPException) else 500
            code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
            return JSONResponse(error_body(code, "no such route" if status == 404 else str(exc)), status_code=status)

        return Starlette(routes=self.routes(), exception_handlers={HTTPException: http_error})

    # ----- routes --------------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        health = Health(name=self.name, version=self.version, tasks_in_flight=self._executions.in_flight())
        return JSONResponse(wire_json(health))

    async def _capabilities(self, request: Request) -> Response:
        return JSONResponse(wire_json(self.capabilities()))

    async def _execute(self, request: Request) -> Response:
        try:
            # Authenticate before reading the body: an anonymous caller costs no buffering.
            contract_id = await self._authenticate(request)
            task_type = self._task_type_header(request)
            key = request.headers.get(HEADER_IDEMPOTENCY_KEY)
            if key is not None and key != contract_id:
                raise ApiError(400, "idempotency_key_mismatch", "Idempotency-Key must equal X-Contract-ID")
            attempt = _attempt(request.headers.get(HEADER_ATTEMPT))
            base = self._base_url(request)
            body = await _read_body(request, self.max_input_bytes)
            try:
                task_input = json.loads(body) if body else None
            except ValueError as error:
                raise ApiError(400, "invalid_input", f"task input is not valid JSON: {error}") from error
            admission = self._executions.admit(contract_id, attempt, base)
            if admission.busy:
                raise ApiError(429, "too_many_tasks", "all task slots are busy; retry later")
            if admission.existing is not None:
                return _report_response(admission.existing, from_execute=True)
            assert admission.record is not None
            report = await self._start_and_wait(
                admission.record, attempt, task_type, request.headers.get(HEADER_CORRELATION_ID), base, task_input
            )
            return _report_response(report, from_execute=True)
        except ApiError as error:
            return error.response()

    async def _task_status(self, request: Request) -> Response:
        try:
            contract_id = await self._authenticate(request)
            record = self._executions.get(request.path_params["task_id"], contract_id)
            if record is None:
                raise ApiError(404, "task_not_found", "no such task for this contract")
            return _report_response(record.answer(), from_execute=False)
        except ApiError as error:
            return error.response()

    async def _cancel(self, request: Request) -> Response:
        try:
            contract_id = await self._authenticate(request)
            raw = request.path_params["task_id"]
            task_id = self._executions.latest_task(contract_id) if raw == contract_id else raw
            record = self._executions.get(task_id, contract_id) if task_id else None
            if record is None:
                raise ApiError(404, "task_not_found", "no such task for this contract")
            if record.running:
                record.cancel.set()
                try:
                    await asyncio.wait_for(record.finished.wait(), CANCEL_WAIT_S)
                except asyncio.TimeoutError:
                    pass
            report = record.answer()
            cancelled = isinstance(report, FailedReport) and report.error.code == TASK_CANCELLED
            if not cancelled and not isinstance(report, (PendingReport, PartialReport)):
                raise ApiError(
                    409, "task_already_finished", f"the task already ended ({report.status}); there is nothing to cancel"
                )
            log.info("task %s of %s cancelled", record.task_id, contract_id)
            return _report_response(report, from_execute=False)
        except ApiError as error:
            return error.response()

    async def _stream(self, request: Request) -> Response:
        try:
            contract_id = await self._authenticate(request)
            hosted = self._hosted.stream(request.path_params["task_id"], contract_id)
            if hosted is None:
                raise ApiError(404, "task_not_found", "no such stream for this contract")
            try:
                after = max(0, int(request.headers.get("last-event-id", "0").strip() or 0))
            except ValueError:
                after = 0
            return StreamingResponse(
                sse_body(hosted, after),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        except ApiError as error:
            return error.response()

    async def _file(self, request: Request) -> Response:
        hosted = self._hosted.file(request.path_params["task_id"], request.path_params["name"])
        if hosted is None:
            return ApiError(404, "task_not_found", "no such file").response()
        return Response(hosted.data, media_type=hosted.mime)

    async def _verify(self, request: Request) -> Response:
        assert self._verifier is not None
        provider_family, model_id, handler = self._verifier
        try:
            body = await _read_body(request, self.max_input_bytes)
            try:
                verify_request = VerifyRequest.model_validate_json(body)
            except ValidationError as error:
                raise ApiError(400, "invalid_verify_request", f"the body is not a WattSwarm VerifyRequest: {error}") from error
            try:
                check_binding(verify_request.policy)
            except PolicyBindingError as error:
                raise ApiError(400, "invalid_policy", f"the policy binding cannot be applied: {error}") from error
            verdict = await handler(verify_request)
            return JSONResponse(verify_response(verify_request, verdict, provider_family, model_id))
        except ApiError as error:
            return error.response()

    # ----- helpers -------------------------------------------------------------------------

    async def _authenticate(self, request: Request) -> str:
        """Checks the contract token (unless the local-dev opt-out is on); returns the contract."""
        if self.gateway_keys is None:
            return _contract_id_header(request)
        token = _bearer(request)
        if token is None:
            raise ApiError(401, "missing_token", "missing gateway contract token (Authorization: Bearer)")
        contract_id = _contract_id_header(request)
        try:
            claims = await self.gateway_keys.verify_contract_token(token)
        except TokenError as error:
            raise ApiError(401, "invalid_token", f"invalid gateway contract token: {error}") from error
        except KeysUnavailable as error:
            raise ApiError(503, "gateway_keys_unavailable", str(error)) from error
        if claims.contract_id != contract_id:
            raise ApiError(401, "contract_mismatch", "contract token is for another contract than X-Contract-ID")
        if self.worker_id is not None and claims.worker != self.worker_id:
            raise ApiError(401, "wrong_worker", "contract token is for another worker")
        return contract_id

    def _task_type_header(self, request: Request) -> str | None:
        raw = request.headers.get(HEADER_TASK_TYPE)
        if raw is None:
            return None
        if raw.strip() not in self.task_types:
            raise ApiError(400, "unsupported_task_type", "X-Task-Type names a task type this worker does not perform")
        return raw.strip()

    def _base_url(self, request: Request) -> str:
        if self.public_url is not None:
            return self.public_url
        host = request.headers.get("host")
        if not host:
            raise ApiError(400, "missing_host", "cannot build poll URLs: no Host header and no public URL configured")
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return f"http://{host}{root}/"

    async def _start_and_wait(
        self,
        record: TaskRecord,
        attempt: int,
        task_type: str | None,
        correlation_id: str | None,
        base: str,
        task_input: Any,
    ) -> Report:
        ctx = TaskContext(
            contract_id=record.contract_id,
            attempt=attempt,
            task_id=record.task_id,
            task_type=task_type,
            correlation_id=correlation_id,
            base_url=base,
            record=record,
            hosted=self._hosted,
        )
        log.info("task %s of %s started (attempt %d)", record.task_id, record.contract_id, attempt)
        # The run lives on its own task: a caller hanging up must not cancel paid work, and
        # duplicates must find its result.
        self._spawn(self._run(record, ctx, task_input))
        try:
            await asyncio.wait_for(record.settled.wait(), self.sync_wait_s)
        except asyncio.TimeoutError:
            pass  # the normal way for a slow run to become `pending`
        return record.answer()

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _run(self, record: TaskRecord, ctx: TaskContext, task_input: Any) -> None:
        self.handler_runs += 1
        outcome = await self._guarded(lambda: self._call_handler(ctx, task_input), record)
        while isinstance(outcome, Pending):
            self._executions.move_to_background(record, outcome.estimated_completion)
            outcome = await self._guarded(outcome.work, record)
        if isinstance(outcome, Streamed):
            self._hosted.start_stream(record.task_id, record.contract_id, aiter_events(outcome.events))
            outcome = Completed(StreamOutput(url=f"{ctx.base_url}streams/{record.task_id}"))
        report = _final_report(outcome, record)
        log.info("task %s of %s finished: %s", record.task_id, record.contract_id, report.status)
        owed_callback = self._executions.finish(record, report)
        if owed_callback and self.callback is not None:
            if self._http is None:
                self._http = httpx.AsyncClient()
            await callback_delivery.deliver(self.callback, report, self._http)

    async def _call_handler(self, ctx: TaskContext, task_input: Any) -> Any:
        if self._handler is None:
            raise RuntimeError("no task handler registered (use @worker.task)")
        if inspect.iscoroutinefunction(self._handler):
            return await self._handler(ctx, task_input)
        result = await asyncio.to_thread(self._handler, ctx, task_input)
        return await result if inspect.isawaitable(result) else result

    async def _guarded(self, work: Callable[[], Awaitable[Any]] | Awaitable[Any], record: TaskRecord) -> TaskOutcome:
        """Runs handler code so an exception becomes a ``failed`` report instead of a run stuck
        ``pending``; a cancelled run ends ``failed`` with ``TASK_CANCELLED`` whatever the handler
        does (it gets :data:`CANCEL_GRACE_S` to stop on its own, then it is cancelled)."""

        def cancelled() -> Failed:
            return Failed(TaskError(code=TASK_CANCELLED, message="the task was cancelled"))

        if record.cancel.is_set():
            return cancelled()
        awaitable = work() if callable(work) else work
        task: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(record.cancel.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), CANCEL_GRACE_S)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - the run is cancelled anyway
                task.cancel()
            return cancelled()
        if record.cancel.is_set():
            return cancelled()
        try:
            return as_outcome(task.result())
        except TaskFailed as failure:
            return Failed(failure.error)
        except ValidationError as error:
            return Failed(TaskError(code=INVALID_OUTPUT, message=f"the worker produced an invalid output: {error}"))
        except Exception:  # noqa: BLE001 - any handler crash is a failed task, never a hung one
            log.exception("task handler raised")
            return Failed(TaskError(code=HANDLER_PANICKED, message="the worker's task handler crashed"))


def _final_report(outcome: TaskOutcome, record: TaskRecord) -> Report:
    contract_id, task_id = record.contract_id, record.task_id
    try:
        if isinstance(outcome, Completed):
            _check_output(outcome.output)
            json.dumps(outcome.metadata)
            return CompletedReport(contract_id=contract_id, task_id=task_id, output=outcome.output, metadata=outcome.metadata)
        if isinstance(outcome, Partial):
            if outcome.output is not None:
                _check_output(outcome.output)
            # A final partial names no poll_url: nothing is left to check back for.
            return PartialReport(contract_id=contract_id, task_id=task_id, progress=outcome.progress, output=outcome.output)
    except (ValidationError, ValueError, TypeError) as error:
        return FailedReport(
            contract_id=contract_id,
            task_id=task_id,
            error=TaskError(code=INVALID_OUTPUT, message=f"the worker produced an invalid output: {error}"),
        )
    if isinstance(outcome, Failed):
        return FailedReport(contract_id=contract_id, task_id=task_id, error=outcome.error)
    return FailedReport(
        contract_id=contract_id,
        task_id=task_id,
        error=TaskError(code="WORKER_ERROR", message="task ended while still pending"),
    )


def _check_output(output: Output) -> None:
    """The same parse the gateway applies, so a handler bug shows as a clear ``failed`` report."""
    data = wire_json(output)
    json.dumps(data, allow_nan=False)
    _OUTPUT.validate_python(data)


def _report_response(report: Report, *, from_execute: bool) -> Response:
    running = isinstance(report, PendingReport) or (isinstance(report, PartialReport) and report.poll_url is not None)
    status = 202 if from_execute and running else 200
    return JSONResponse(report_json(report), status_code=status)


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization")
    if not value or " " not in value:
        return None
    scheme, token = value.split(" ", 1)
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _contract_id_header(request: Request) -> str:
    raw = request.headers.get(HEADER_CONTRACT_ID)
    if raw is None:
        raise ApiError(400, "missing_contract_id", "missing X-Contract-ID header")
    try:
        return parse_prefixed_id(raw.strip(), "ctr")
    except ValueError:
        raise ApiError(400, "invalid_contract_id", "X-Contract-ID is not a valid contract id") from None


def _attempt(raw: str | None) -> int:
    if raw is None:
        return 1
    try:
        attempt = int(raw.strip())
    except ValueError:
        attempt = 0
    if attempt < 1 or attempt > 2**32 - 1:
        raise ApiError(400, "invalid_attempt", "X-Attempt must be a whole number of at least 1")
    return attempt


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "input_too_large", f"request body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "input_too_large", f"request body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)

