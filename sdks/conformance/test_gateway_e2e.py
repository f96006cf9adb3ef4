"""End to end against the real ``hiregate`` binary on anvil (the deployment of
``integration-tests/src/sdk_devnet.rs``, handed over by ``HIREGATE_*`` variables): each worker under
test (Python, TypeScript, and Rust for reference) is listed at the gateway by an operator and hired
by the Python SDK's seeker, which pays with the official ``x402`` client. Money claims are checked on
chain (the token's ``balanceOf``), receipts offline against the gateway's JWKS.

Without the variables these tests skip (run them through ``cargo test -p hiregate-integration-tests
--test sdks`` or against ``scripts/devnet.sh``), except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

import hiregate
from hiregate import SeekerClient
from harness import WorkerProcess, running_in_ci, worker_kinds

E2E_WORKERS = ["python", "typescript", "rust"]
SUMMARY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["summary", "confidence"],
    "properties": {"summary": {"type": "string"}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
}


@dataclass
class Deployment:
    gateway_url: str
    operator_key: str
    seeker_key: str
    rpc_url: str
    network: str
    asset: str
    wallet_keys: list[str]
    price: int

    def balance_of(self, address: str) -> int:
        data = "0x70a08231" + address.lower().removeprefix("0x").rjust(64, "0")
        answer = httpx.post(
            self.rpc_url,
            json={"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": [{"to": self.asset, "data": data}, "latest"]},
            timeout=30,
        ).json()
        return int(answer["result"], 16)


@pytest.fixture(scope="session")
def deployment() -> Deployment:
    names = ["HIREGATE_GATEWAY_URL", "HIREGATE_OPERATOR_KEY", "HIREGATE_SEEKER_KEY", "HIREGATE_RPC_URL",
             "HIREGATE_NETWORK", "HIREGATE_ASSET", "HIREGATE_SEEKER_WALLET_KEYS"]
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        if running_in_ci():
            pytest.fail(f"CI=true and no gateway deployment: {missing} unset")
        pytest.skip(f"no gateway deployment ({', '.join(missing)} unset): run scripts/devnet.sh")
    return Deployment(
        gateway_url=os.environ["HIREGATE_GATEWAY_URL"],
        operator_key=os.environ["HIREGATE_OPERATOR_KEY"],
        seeker_key=os.environ["HIREGATE_SEEKER_KEY"],
        rpc_url=os.environ["HIREGATE_RPC_URL"],
        network=os.environ["HIREGATE_NETWORK"],
        asset=os.environ["HIREGATE_ASSET"],
        wallet_keys=os.environ["HIREGATE_SEEKER_WALLET_KEYS"].split(","),
        price=int(os.environ.get("HIREGATE_WORKER_PRICE", "1250000")),
    )


@dataclass
class Listed:
    name: str
    worker_id: str
    pay_to: str
    wallet_key: str
    process: WorkerProcess
    http: httpx.Client

    def executions(self) -> int:
        return int(self.http.get(self.process.url + "test/executions").json()["executions"])


@pytest.fixture(scope="session", params=E2E_WORKERS)
def listed(request: pytest.FixtureRequest, deployment: Deployment, log_dir: Path) -> Iterator[Listed]:
    kind = worker_kinds()[request.param]
    if kind.missing is not None:
        if running_in_ci():
            pytest.fail(f"CI=true and the {kind.name} worker is missing: {kind.missing}")
        pytest.skip(f"{kind.name} worker missing: {kind.missing}")
    process = WorkerProcess(kind, {"WORKER_GATEWAY_JWKS_URL": deployment.gateway_url + ".well-known/jwks.json"}, log_dir)
    pay_to = Account.create().address
    with httpx.Client(timeout=60) as http:
        response = http.post(
            deployment.gateway_url + "v1/workers",
            headers={"authorization": f"Bearer {deployment.operator_key}"},
            json={
                "endpoint": process.url,
                "protocol": "hire",
                "pay_to": pay_to,
                "network": deployment.network,
                "asset": deployment.asset,
                "tasks": {"summarize": {"price": str(deployment.price), "output_schema": SUMMARY_SCHEMA}},
                "max_parallel": 16,
            },
        )
        assert response.status_code == 201, (response.text, process.logs())
        wallet = deployment.wallet_keys[E2E_WORKERS.index(kind.name) % len(deployment.wallet_keys)]
        yield Listed(kind.name, response.json()["id"], pay_to, wallet, process, http)
    process.stop()


def seeker(deployment: Deployment, listed: Listed) -> SeekerClient:
    return SeekerClient(deployment.gateway_url, deployment.seeker_key, wallet_private_key=listed.wallet_key,
                        max_price=deployment.price)


def proposal(**extra: Any) -> dict[str, Any]:
    return {
        "verification": {"policy_id": "vp.schema_only.v1", "policy_params": {}},
        "sla": {"max_latency_ms": 20000},
        "retry_policy": {"max_attempts": 1},
        "acceptance_window_s": 0,
        **extra,
    }


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_worker_is_hired_verified_and_settled_on_chain(deployment: Deployment, listed: Listed) -> None:
    async def scenario() -> None:
        async with seeker(deployment, listed) as client:
            payer = client.payer
            assert payer is not None
            found = await client.discover(task_type="summarize")
            assert any(worker["id"] == listed.worker_id for worker in found)
            before = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            text = f"hired through hiregate from Python, served by {listed.name}"
            created = await client.propose(listed.worker_id, "summarize", {"text": text}, **proposal())
            claims = await client.verify_contract_token(created)
            assert claims.worker == listed.worker_id
            result = await client.execute(created["contract_id"])
            assert result.status == 200, (result.body, listed.process.logs())
            assert result.payment_response and result.payment_response["success"] is True
            assert result.body["deliverable"]["output"]["content"] == {"summary": text, "confidence": 0.9}
            view = await client.contract(created["contract_id"])
            assert view["state"] == "settled", view
            after = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            assert after[0] == before[0] - deployment.price, "the payer paid the price once"
            assert after[1] == before[1] + deployment.price, "the worker's payout got the price"
            assert after[2] == before[2] + 1, "the worker ran once"
            receipt = await client.verified_receipt(created["contract_id"], terms_hash=created["terms_hash"])
            assert receipt.outcome == "settled" and receipt.verification_status == "passed"
            assert receipt.payment is not None and receipt.payment.tx_hash == result.payment_response["transaction"]
            assert receipt.payment.payer.lower() == payer.lower()

    run(scenario())


def test_an_out_of_schema_answer_is_rejected_and_nothing_is_paid(deployment: Deployment, listed: Listed) -> None:
    async def scenario() -> None:
        async with seeker(deployment, listed) as client:
            payer = client.payer
            assert payer is not None
            before = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            created = await client.propose(listed.worker_id, "summarize", {"mode": "invalid"}, **proposal())
            result = await client.execute(created["contract_id"])
            assert result.status == 422, (result.status, result.body)
            assert result.payment_response is None
            view = await client.wait(created["contract_id"], until={"rejected", "voided"})
            assert view["verification"]["verification_status"] == "failed", view
            after = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            assert after[:2] == before[:2], "no money moved"
            assert after[2] == before[2] + 1

    run(scenario())


def test_eight_concurrent_executes_run_once_and_settle_once(deployment: Deployment, listed: Listed) -> None:
    async def scenario() -> None:
        async with seeker(deployment, listed) as client:
            payer = client.payer
            assert payer is not None
            created = await client.propose(listed.worker_id, "summarize", {"text": "only once"}, **proposal())
            contract_id = created["contract_id"]
            shared = await client.sign_payment(contract_id)
            # Half the callers resend one payment, the others each sign a fresh one.
            signatures = [shared if i % 2 == 0 else await client.sign_payment(contract_id) for i in range(8)]
            before = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            answers = await asyncio.gather(*(client.execute_with_payment(contract_id, s) for s in signatures))
            transactions = set()
            for answer in answers:
                assert answer.status in (200, 202), (answer.status, answer.body)
                if answer.status == 200:
                    assert answer.payment_response and answer.payment_response["success"]
                    transactions.add(answer.payment_response["transaction"])
            view = await client.wait(contract_id)
            assert view["state"] == "settled", view
            assert len(transactions) <= 1, transactions
            after = (deployment.balance_of(payer), deployment.balance_of(listed.pay_to), listed.executions())
            assert after[0] == before[0] - deployment.price, "one transfer"
            assert after[1] == before[1] + deployment.price
            assert after[2] == before[2] + 1, "one worker execution"

    run(scenario())


def test_eight_concurrent_executes_with_the_gateways_token_reach_the_worker_once(
    deployment: Deployment, listed: Listed
) -> None:
    """The worker's own deduplication, with a real contract token of the gateway."""

    async def scenario() -> None:
        async with seeker(deployment, listed) as client:
            created = await client.propose(listed.worker_id, "summarize", {"text": "direct"}, **proposal())
        contract_id = created["contract_id"]
        headers = {
            "authorization": f"Bearer {created['gateway_jws']}",
            "x-contract-id": contract_id,
            "idempotency-key": contract_id,
            "x-task-type": "summarize",
        }
        before = listed.executions()
        async with httpx.AsyncClient(timeout=60) as http:
            answers = await asyncio.gather(
                *(http.post(listed.process.url + "execute", json={"mode": "slow", "delay_ms": 300, "text": "direct"},
                            headers=headers) for _ in range(8))
            )
        assert {a.status_code for a in answers} <= {200, 202}, [a.text for a in answers]
        assert len({a.json()["task_id"] for a in answers}) == 1
        assert listed.executions() == before + 1

    run(scenario())


def test_pending_work_is_followed_to_settlement(deployment: Deployment, listed: Listed) -> None:
    async def scenario() -> None:
        async with seeker(deployment, listed) as client:
            payer = client.payer
            assert payer is not None
            before = deployment.balance_of(payer)
            created = await client.propose(
                listed.worker_id, "summarize", {"mode": "pending", "delay_ms": 400, "text": "later"}, **proposal()
            )
            result = await client.execute(created["contract_id"])
            assert result.status in (200, 202), result.body
            events = []
            async for event in client.events(created["contract_id"]):
                events.append(event)
                if event.to_state in hiregate.receipts.TERMINAL_STATES:
                    break
            assert [e.id for e in events] == sorted({e.id for e in events}), "ids increase, none repeated"
            assert events[-1].to_state == "settled", [e.kind for e in events]
            assert any(e.to_state == "pending" for e in events), [(e.kind, e.to_state) for e in events]
            # Resuming after an event gives exactly the events after it.
            resumed = [e.id async for e in client.events(created["contract_id"], after=events[1].id)]
            assert resumed[: len(events) - 2] == [e.id for e in events[2:]]
            assert deployment.balance_of(payer) == before - deployment.price

    run(scenario())

