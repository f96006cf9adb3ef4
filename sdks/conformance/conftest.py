"""Fixtures of the conformance suite: one fake gateway per session, and each worker under test
(Rust, Python, TypeScript) started once and shared by the tests that take the ``worker`` fixture.

A worker whose build is missing skips its tests with the reason, except under ``CI=true``, where
it fails: CI never passes on a worker it did not test.
"""

from __future__ import annotations

import base64
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness import FakeGateway, WorkerProcess, new_contract_id, running_in_ci, worker_kinds

WORKERS = ["rust", "python", "typescript"]
SYNC_WAIT_MS = 2000


@pytest.fixture(scope="session")
def log_dir() -> Path:
    return Path(os.environ.get("HIREGATE_CONFORMANCE_LOGS") or tempfile.mkdtemp(prefix="hiregate-conformance-"))


@pytest.fixture(scope="session")
def gateway() -> Iterator[FakeGateway]:
    fake = FakeGateway().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def callback_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Worker:
    """A worker under test and the calls the cases make to it."""

    name: str
    url: str
    gateway: FakeGateway
    secret: str
    process: WorkerProcess
    http: httpx.Client

    def headers(self, contract_id: str, *, token: str | None = None, **extra: str) -> dict[str, str]:
        headers = {
            "authorization": f"Bearer {token or self.gateway.token(contract_id)}",
            "x-contract-id": contract_id,
            "idempotency-key": contract_id,
        }
        headers.update({key.replace("_", "-"): value for key, value in extra.items()})
        return headers

    def execute(
        self,
        contract_id: str,
        task_input: Any,
        *,
        task_type: str = "summarize",
        attempt: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        sent = self.headers(contract_id)
        sent["x-task-type"] = task_type
        if attempt is not None:
            sent["x-attempt"] = str(attempt)
        if headers is not None:
            sent = headers
        return self.http.post(self.url + "execute", json=task_input, headers=sent)

    def get(self, url: str, contract_id: str, **extra: str) -> httpx.Response:
        return self.http.get(url, headers=self.headers(contract_id, **extra))

    def executions(self) -> int:
        return int(self.http.get(self.url + "test/executions").json()["executions"])

    def logs(self) -> str:
        return self.process.logs()


@pytest.fixture(scope="session", params=WORKERS)
def worker(request: pytest.FixtureRequest, gateway: FakeGateway, callback_secret: str, log_dir: Path) -> Iterator[Worker]:
    kind = worker_kinds()[request.param]
    if kind.missing is not None:
        if running_in_ci():
            pytest.fail(f"CI=true and the {kind.name} worker is missing: {kind.missing}")
        pytest.skip(f"{kind.name} worker missing: {kind.missing}")
    process = WorkerProcess(
        kind,
        {
            "WORKER_GATEWAY_JWKS_URL": gateway.jwks_url,
            "WORKER_JWKS_MIN_REFRESH_MS": "0",
            "WORKER_CALLBACK_GATEWAY_URL": gateway.url,
            "WORKER_CALLBACK_SECRET": callback_secret,
            "WORKER_SYNC_WAIT_MS": str(SYNC_WAIT_MS),
        },
        log_dir,
    )
    # No keep-alive: a server may close a connection after refusing a request whose body it did
    # not read (hyper does), and a pooled connection reused in that instant fails the next case.
    with httpx.Client(timeout=30.0, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        yield Worker(kind.name, process.url, gateway, callback_secret, process, http)
    process.stop()


@pytest.fixture
def contract_id() -> str:
    return new_contract_id()
