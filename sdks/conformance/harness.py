"""The conformance suite's stand-ins and process handling.

- :class:`FakeGateway`: the two things a worker needs from a gateway, under the suite's control: a
  JWKS at ``/.well-known/jwks.json`` (keys the suite rotates) and ``POST /v1/callbacks/{id}``
  (recorded, answered with scripted statuses). Contract tokens are signed here exactly as the
  gateway signs them (``contracts/src/token.rs``: EdDSA, ``kid``, ``typ`` =
  ``hiregate-contract+jwt``, claims ``iss``/``sub``/``iat``/``exp``/``contract_id``/``terms_hash``/
  ``seeker``/``worker``), written here from that wire description and not with any SDK, so no SDK
  is tested against itself. The end-to-end tests (``test_gateway_e2e.py``) use the real gateway's
  tokens.
- :class:`WorkerProcess`: one worker under test as a child process (Rust, Python or TypeScript),
  configured by the same environment variables, found by its ``listening on`` line.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

REPO = Path(__file__).resolve().parents[2]
CONTRACT_TOKEN_TYPE = "hiregate-contract+jwt"
RECEIPT_TOKEN_TYPE = "hiregate-receipt+jwt"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
STARTUP_TIMEOUT_S = 60.0


def ulid_body() -> str:
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def new_contract_id() -> str:
    return "ctr_" + ulid_body()


def new_worker_id() -> str:
    return "wk_" + ulid_body()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def running_in_ci() -> bool:
    return os.environ.get("CI") == "true"


@dataclass
class Callback:
    """One callback as the fake gateway received it."""

    contract_id: str
    headers: dict[str, str]
    body: bytes
    answered: int

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeGateway:
    keys: dict[str, Ed25519PrivateKey] = field(default_factory=dict)
    published: list[str] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    #: Statuses to answer the next callbacks of a contract with (then 200).
    scripted: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    jwks_fetches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    callback_arrived: threading.Condition = field(default_factory=threading.Condition)
    server: ThreadingHTTPServer | None = None
    worker_id: str = field(default_factory=new_worker_id)

    def start(self) -> FakeGateway:
        self.add_key("k1")
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/.well-known/jwks.json":
                    self.send_error(404)
                    return
                with gateway.lock:
                    gateway.jwks_fetches += 1
                    body = json.dumps(gateway.jwks()).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                prefix = "/v1/callbacks/"
                if not self.path.startswith(prefix):
                    self.send_error(404)
                    return
                contract_id = self.path[len(prefix) :]
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with gateway.lock:
                    script = gateway.scripted[contract_id]
                    status = script.pop(0) if script else 200
                with gateway.callback_arrived:
                    gateway.callbacks.append(
                        Callback(contract_id, {k.lower(): v for k, v in self.headers.items()}, body, status)
                    )
                    gateway.callback_arrived.notify_all()
                reply = b'{"ok":true}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/"

    @property
    def jwks_url(self) -> str:
        return self.url + ".well-known/jwks.json"

    def add_key(self, kid: str, *, publish: bool = True) -> None:
        with self.lock:
            self.keys[kid] = Ed25519PrivateKey.generate()
            if publish:
                self.published.insert(0, kid)

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid in self.published:
            raw = self.keys[kid].public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            keys.append({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": kid, "x": b64url(raw)})
        return {"keys": keys}

    def claims(self, contract_id: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": "hiregate",
            "sub": contract_id,
            "iat": now,
            "exp": now + 600,
            "contract_id": contract_id,
            "terms_hash": "sha256:" + "ab" * 32,
            "seeker": "skr_" + ulid_body(),
            "worker": self.worker_id,
        }
        claims.update(overrides)
        return claims

    def token(
        self, contract_id: str, *, kid: str | None = None, typ: str = CONTRACT_TOKEN_TYPE, **overrides: Any
    ) -> str:
        kid = kid or self.published[0]
        return jwt.encode(
            self.claims(contract_id, **overrides),
            self.keys[kid],
            algorithm="EdDSA",
            headers={"kid": kid, "typ": typ},
        )

    def wait_for_callbacks(self, contract_id: str, count: int, timeout_s: float = 30.0) -> list[Callback]:
        deadline = time.monotonic() + timeout_s
        with self.callback_arrived:
            while True:
                found = [c for c in self.callbacks if c.contract_id == contract_id]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{len(found)} callbacks for {contract_id}, expected {count}")
                self.callback_arrived.wait(remaining)


@dataclass
class WorkerKind:
    name: str
    command: list[str]
    env: dict[str, str]
    missing: str | None


def worker_kinds() -> dict[str, WorkerKind]:
    rust = os.environ.get("HIREGATE_RUST_CONFORMANCE_WORKER") or str(REPO / "target/debug/example-worker")
    ts_dist = REPO / "sdks/typescript/dist/src/index.js"
    here = Path(__file__).resolve().parent
    return {
        "rust": WorkerKind(
            "rust",
            [rust],
            {"EXAMPLE_WORKER": "conformance"},
            None if Path(rust).is_file() else f"{rust} is not built (cargo build -p hiregate-integration-tests --bins)",
        ),
        "python": WorkerKind("python", [sys.executable, str(here / "workers/python_worker.py")], {}, None),
        "typescript": WorkerKind(
            "typescript",
            ["node", str(here / "workers/typescript_worker.mjs")],
            {},
            None if ts_dist.is_file() else f"{ts_dist} is not built (npm run build in sdks/typescript)",
        ),
    }


class WorkerProcess:
    """A worker under test, started with ``env`` on a free port."""

    def __init__(self, kind: WorkerKind, env: dict[str, str], log_dir: Path) -> None:
        self.kind = kind
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"{kind.name}-{secrets.token_hex(3)}.stdout.log"
        self.stderr_path = self.stdout_path.with_suffix("").with_suffix(".stderr.log")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "FAULTY_", "EXAMPLE_"))}
        full_env.update(kind.env)
        full_env.update(env)
        full_env.setdefault("WORKER_LISTEN", "127.0.0.1:0")
        self.process = subprocess.Popen(
            kind.command,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=self.stdout_path.open("wb"),
            stderr=self.stderr_path.open("wb"),
            cwd=str(REPO),
        )
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.stdout_path.read_text(errors="replace").splitlines():
                if line.startswith("listening on "):
                    url = line.split()[2]
                    return url if url.endswith("/") else url + "/"
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"worker {self.kind.name} did not start:\n{self.logs()}")

    def logs(self) -> str:
        return (
            f"--- {self.kind.name} stdout ---\n{self.stdout_path.read_text(errors='replace')[-4000:]}\n"
            f"--- {self.kind.name} stderr ---\n{self.stderr_path.read_text(errors='replace')[-4000:]}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
