"""Unit tests of the Python SDK (no gateway needed) and, when a deployment is handed over by
``HIREGATE_*`` variables, the seeker example hiring the Rust example worker end to end."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

import hiregate
from hiregate import GatewayKeys, Jwks, ReceiptError, TokenError, WebhookError, WebhookSecret, Worker

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid() -> str:
    import secrets

    return "0" + "".join(secrets.choice(CROCKFORD) for _ in range(25))


class Issuer:
    def __init__(self, kid: str = "k1") -> None:
        self.kid = kid
        self.key = Ed25519PrivateKey.generate()
        raw = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        self.jwks = Jwks.from_json({"keys": [{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": kid, "x": x}]})

    def sign(self, payload: dict[str, Any], typ: str = "hiregate-contract+jwt") -> str:
        return jwt.encode(payload, self.key, algorithm="EdDSA", headers={"kid": self.kid, "typ": typ})

    def token(self, contract_id: str, **overrides: Any) -> str:
        now = int(time.time())
        claims = {"iss": "hiregate", "sub": contract_id, "iat": now, "exp": now + 600, "contract_id": contract_id,
                  "terms_hash": "sha256:" + "ab" * 32, "seeker": f"skr_{ulid()}", "worker": f"wk_{ulid()}"}
        claims.update(overrides)
        return self.sign(claims)


def test_standard_webhooks_vector_tampering_and_window() -> None:
    secret = WebhookSecret.parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    body = b'{"test": 2432232314}'
    assert secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    headers = secret.sign_headers("msg_1", body, 1_700_000_000)
    assert secret.verify(headers, body, now=1_700_000_010).id == "msg_1"
    with pytest.raises(WebhookError) as error:
        secret.verify(headers, body + b" ", now=1_700_000_010)
    assert error.value.reason == "no_matching_signature"
    with pytest.raises(WebhookError) as error:
        secret.verify(headers, body, now=1_700_000_400)
    assert error.value.reason == "timestamp_too_old"
    assert repr(secret) == "WebhookSecret(<redacted>)"


def test_canonical_hashes_are_rfc8785() -> None:
    assert hiregate.canonical_json({"b": 1, "a": [1.0, "é", 1e21]}) == '{"a":[1,"é",1e+21],"b":1}'.encode()
    expected = "sha256:" + hashlib.sha256(b'vp.schema_only.v1{"x":1}').hexdigest()
    assert hiregate.policy_hash("vp.schema_only.v1", {"x": 1}) == expected


def test_contract_tokens_verify_offline_and_bad_ones_do_not() -> None:
    issuer = Issuer()
    contract_id = f"ctr_{ulid()}"
    claims = hiregate.verify_contract_token(issuer.token(contract_id), issuer.jwks)
    assert claims.contract_id == contract_id
    header, payload, signature = issuer.token(contract_id).split(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    decoded["contract_id"] = f"ctr_{ulid()}"
    altered = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
    cases = {
        "invalid_signature": f"{header}.{altered}.{signature}",
        "expired": issuer.token(contract_id, exp=int(time.time()) - 120),
        "wrong_type": issuer.sign({"iss": "hiregate"}, "hiregate-receipt+jwt"),
        "wrong_issuer": issuer.token(contract_id, iss="other"),
        "malformed": issuer.token(contract_id, seeker="sk_nope"),
    }
    for reason, token in cases.items():
        with pytest.raises(TokenError) as error:
            hiregate.verify_contract_token(token, issuer.jwks)
        assert error.value.reason == reason, (reason, error.value)


def test_receipts_verify_offline() -> None:
    issuer = Issuer()
    contract_id = f"ctr_{ulid()}"
    receipt = {"iss": "hiregate", "sub": contract_id, "iat": 1_790_000_000, "terms_hash": "sha256:" + "01" * 32,
               "outcome": "settled", "payment": None, "deliverable_digests": [], "policy_hash": None,
               "verifier_result_hash": None, "verification_status": "passed", "dispute": None}
    token = issuer.sign(receipt, "hiregate-receipt+jwt")
    assert hiregate.verify_receipt(token, issuer.jwks, contract_id=contract_id).outcome == "settled"
    for reason, claims in {"not_terminal": {**receipt, "outcome": "accepted"}, "malformed": {**receipt, "extra": 1}}.items():
        with pytest.raises(ReceiptError) as error:
            hiregate.verify_receipt(issuer.sign(claims, "hiregate-receipt+jwt"), issuer.jwks)
        assert error.value.reason == reason
    with pytest.raises(ReceiptError):
        hiregate.verify_receipt(token, issuer.jwks, contract_id=f"ctr_{ulid()}")


def test_a_worker_mounted_in_an_app_runs_eight_concurrent_executes_once() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    issuer = Issuer()
    worker = Worker("unit", "1", task_types=["summarize"], gateway_keys=GatewayKeys.fixed(issuer.jwks))

    @worker.task
    async def handle(ctx: hiregate.TaskContext, task_input: Any) -> Any:
        await asyncio.sleep(0.05)
        if task_input.get("boom"):
            raise RuntimeError("boom")
        return {"summary": task_input["text"], "confidence": 0.9, "base": ctx.base_url}

    app = Starlette(routes=[Mount("/agent", app=worker.app())])

    async def scenario() -> None:
        contract_id = f"ctr_{ulid()}"
        headers = {"x-contract-id": contract_id, "authorization": f"Bearer {issuer.token(contract_id)}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w.test") as client:
            assert (await client.post("/agent/execute", json={})).status_code == 401
            answers = await asyncio.gather(*(client.post("/agent/execute", json={"text": "once"}, headers=headers)
                                             for _ in range(8)))
            bodies = [a.json() for a in answers]
            assert worker.handler_runs == 1
            assert len({b["task_id"] for b in bodies}) == 1
            assert bodies[0]["output"]["content"]["base"] == "http://w.test/agent/", "URLs keep the mount prefix"
            other = f"ctr_{ulid()}"
            crashed = await client.post("/agent/execute", json={"boom": True},
                                        headers={"x-contract-id": other, "authorization": f"Bearer {issuer.token(other)}"})
            assert crashed.json()["error"]["code"] == "WORKER_PANICKED"

    asyncio.run(scenario())


def test_the_seeker_example_hires_the_rust_example_worker_and_verifies_the_receipt() -> None:
    if not os.environ.get("HIREGATE_GATEWAY_URL") or not os.environ.get("HIREGATE_RUST_WORKER_ID"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and no gateway deployment (HIREGATE_GATEWAY_URL unset)")
        pytest.skip("no gateway deployment: run scripts/devnet.sh")
    wallets = os.environ["HIREGATE_SEEKER_WALLET_KEYS"].split(",")
    env = {**os.environ, "HIREGATE_WORKER_ID": os.environ["HIREGATE_RUST_WORKER_ID"],
           "HIREGATE_SEEKER_WALLET_KEY": wallets[3 % len(wallets)]}
    done = subprocess.run([sys.executable, str(EXAMPLES / "hire.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["state"] == "settled" and result["execute_status"] == 200
    assert result["settlement"]["success"] is True
    assert result["receipt"]["outcome"] == "settled"
    assert result["receipt"]["tx_hash"] == result["settlement"]["transaction"]
    assert result["deliverable"]["content"]["summary"] == "hiregate pays agents only for verified work."
