"""Completion callbacks: when work that was reported ``pending`` ends, the worker POSTs the final
report to the gateway's ``/v1/callbacks/{contract_id}``, signed with its per-worker secret
(Standard Webhooks, see :mod:`hiregate.webhooks`).

Delivery retries transient failures with backoff (5xx, 408, 425, 429, no answer); any other 4xx
means the gateway understood and refused (e.g. the result already arrived by polling). The gateway
also polls ``poll_url``, so a lost callback delays the result but never loses it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from ._executions import Report
from .protocol import HEADER_CONTRACT_ID, CompletedReport, FailedReport, report_json
from .webhooks import WebhookSecret

log = logging.getLogger("hiregate.callbacks")

CALLBACK_TIMEOUT_S = 10.0
MAX_RETRY_DELAY_S = 60.0


@dataclass
class CallbackConfig:
    """Callbacks to ``<gateway_url>/v1/callbacks/{contract_id}`` signed with ``secret`` (the
    ``callback_secret`` the gateway returned when the worker was registered).

    ``shape``: ``report`` (the default: the report with its ``status`` plus ``event``) or
    ``hire_webhook`` (the HIRE document's webhook exactly: no ``status``)."""

    gateway_url: str
    secret: WebhookSecret
    shape: Literal["report", "hire_webhook"] = "report"
    max_attempts: int = 5
    first_retry_delay_s: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.secret, str):
            self.secret = WebhookSecret.parse(self.secret)
        self.max_attempts = max(1, self.max_attempts)


def callback_body(report: Report, shape: str = "report") -> dict[str, Any]:
    """The body announcing ``report``: its fields plus ``event`` (``task_completed``,
    ``task_failed`` or ``task_partial``)."""
    body = report_json(report)
    if isinstance(report, CompletedReport):
        event = "task_completed"
    elif isinstance(report, FailedReport):
        event = "task_failed"
    else:
        event = "task_partial"
    body = {"event": event, **body}
    if shape == "hire_webhook":
        body.pop("status", None)
    return body


def callback_url(gateway_url: str, contract_id: str) -> str:
    return gateway_url.rstrip("/") + "/v1/callbacks/" + contract_id


async def deliver(config: CallbackConfig, report: Report, http: httpx.AsyncClient) -> bool:
    """Delivers the callback of a finished task; returns whether the gateway took it."""
    contract_id = report.contract_id
    # One id per task: the gateway dedupes retries of the same callback by it.
    msg_id = f"cb_{report.task_id or contract_id}"
    body = json.dumps(callback_body(report, config.shape), separators=(",", ":")).encode()
    url = callback_url(config.gateway_url, contract_id)
    delay = config.first_retry_delay_s
    for attempt in range(1, config.max_attempts + 1):
        headers = config.secret.sign_headers(msg_id, body)
        headers["content-type"] = "application/json"
        headers[HEADER_CONTRACT_ID] = contract_id
        try:
            response = await http.post(url, content=body, headers=headers, timeout=CALLBACK_TIMEOUT_S)
        except httpx.HTTPError as error:
            log.warning("completion callback for %s failed (attempt %d): %s", contract_id, attempt, error)
        else:
            status = response.status_code
            if 200 <= status < 300:
                log.info("completion callback for %s delivered (attempt %d)", contract_id, attempt)
                return True
            if status < 500 and status not in (408, 425, 429):
                log.warning("completion callback for %s refused: HTTP %d", contract_id, status)
                return False
            log.warning("completion callback for %s failed (attempt %d): HTTP %d", contract_id, attempt, status)
        if attempt < config.max_attempts:
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_S)
    log.warning("completion callback for %s given up; the gateway can still poll", contract_id)
    return False
