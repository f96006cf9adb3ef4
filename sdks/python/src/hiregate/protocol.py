"""Wire types of the HIRE protocol as the gateway reads them (``seeds/hire-execution.txt``).

Task reports (``completed``/``failed``/``pending``/``partial``), outputs (``text``, ``json``,
``file``, ``multiple``, ``stream``), ``/capabilities``, ``/health`` and the error body. Field names
and values follow the HIRE document literally; :func:`report_json` gives the JSON a report is sent
as (absent fields left out, as the gateway expects).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import to_jsonable_python

PROTOCOL_NAME = "hire"

#: Header names of the HIRE protocol (lower case).
HEADER_CONTRACT_ID = "x-contract-id"
HEADER_IDEMPOTENCY_KEY = "idempotency-key"
HEADER_TASK_TYPE = "x-task-type"
HEADER_ATTEMPT = "x-attempt"
HEADER_CORRELATION_ID = "x-correlation-id"

#: Most items in a ``multiple`` output.
MAX_ITEMS = 64

#: The event that closes a streamed output, and the one that fails it.
STREAM_END_EVENT = "done"
STREAM_ERROR_EVENT = "error"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _http_url(value: str) -> str:
    if not (value.startswith("http://") or value.startswith("https://")):
        raise ValueError("must be an http(s) URL")
    return value


class TextOutput(_Wire):
    """Plain text, inline."""

    type: Literal["text"] = "text"
    content: str


class JsonOutput(_Wire):
    """Structured data, inline: what output schemas usually constrain."""

    type: Literal["json"] = "json"
    content: Any


class FileOutput(_Wire):
    """A file by URL, with the ``sha256:`` checksum the gateway checks the download against."""

    type: Literal["file"] = "file"
    url: str
    mime: str | None = None
    size: int | None = None
    checksum: str | None = None
    name: str | None = None

    _check_url = field_validator("url")(_http_url)


class StreamOutput(_Wire):
    """Incremental output: Server-Sent Events at ``url``."""

    type: Literal["stream"] = "stream"
    url: str
    format: Literal["sse"] = "sse"

    _check_url = field_validator("url")(_http_url)


SingleOutput = Annotated[
    Union[TextOutput, JsonOutput, FileOutput, StreamOutput], Field(discriminator="type")
]


class MultipleOutput(_Wire):
    """Several outputs (1 to 64, not nested)."""

    type: Literal["multiple"] = "multiple"
    items: list[SingleOutput] = Field(min_length=1, max_length=MAX_ITEMS)


Output = Annotated[
    Union[TextOutput, JsonOutput, FileOutput, StreamOutput, MultipleOutput],
    Field(discriminator="type"),
]


class TaskError(_Wire):
    """The ``error`` of a ``failed`` report."""

    code: str
    message: str
    details: Any | None = None


class Progress(_Wire):
    """How far a running task has come."""

    percent: float | None = Field(default=None, ge=0, le=100)
    message: str | None = None


class CompletedReport(_Wire):
    status: Literal["completed"] = "completed"
    contract_id: str
    task_id: str | None = None
    output: Output
    metadata: Any | None = None


class FailedReport(_Wire):
    status: Literal["failed"] = "failed"
    contract_id: str
    task_id: str | None = None
    error: TaskError


class PendingReport(_Wire):
    status: Literal["pending"] = "pending"
    contract_id: str
    task_id: str
    poll_url: str
    estimated_completion: datetime | None = None


class PartialReport(_Wire):
    status: Literal["partial"] = "partial"
    contract_id: str
    task_id: str
    poll_url: str | None = None
    progress: Progress | None = None
    output: Output | None = None
    estimated_completion: datetime | None = None


TaskReport = Annotated[
    Union[CompletedReport, FailedReport, PendingReport, PartialReport],
    Field(discriminator="status"),
]


class PriceInfo(_Wire):
    """An informational price (the gateway listing is authoritative)."""

    amount: str
    currency: str
    network: str | None = None


class Capabilities(_Wire):
    """Body of ``GET /capabilities``."""

    protocol: str = PROTOCOL_NAME
    name: str
    version: str
    task_types: list[str]
    pricing: dict[str, PriceInfo] | None = None
    max_concurrent_tasks: int | None = None
    completion_callbacks: bool = False
    cancel: bool = True
    verify: bool = False
    provider_family: str | None = None
    model_id: str | None = None


class Health(_Wire):
    """Body of ``GET /health``."""

    status: str = "ok"
    protocol: str = PROTOCOL_NAME
    name: str
    version: str
    tasks_in_flight: int


def wire_json(model: BaseModel) -> dict[str, Any]:
    """The JSON object a wire model is sent as: absent (``None``) fields left out, while values
    inside free-form fields (``content``, ``metadata``, ``details``) are kept as they are."""
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if value is not None:
            out[name] = _jsonable(value)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return wire_json(value)
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    return to_jsonable_python(value)


def report_json(report: CompletedReport | FailedReport | PendingReport | PartialReport) -> dict[str, Any]:
    """The JSON of a task report."""
    return wire_json(report)


def error_body(code: str, message: str, details: Any | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "details"?}}``, the gateway's error shape."""
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}
