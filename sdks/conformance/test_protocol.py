"""The HIRE worker protocol, one set of cases run against the Rust, Python and TypeScript workers
alike (the ``worker`` fixture), so the three SDKs cannot drift apart.

Shapes follow ``seeds/hire-execution.txt`` and what the gateway's hire adapter reads; errors are
``{"error": {"code", "message"}}`` with the codes of worker-sdk's ``routes.rs``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jwt
import pytest
import rfc8785

from conftest import Worker
from harness import RECEIPT_TOKEN_TYPE, b64url, new_contract_id

CONFORMANCE_TASK_TYPES = {
    "summarize",
    "echo",
    "output_text",
    "output_json",
    "output_file",
    "output_multiple",
    "output_stream",
    "output_partial",
}
REPORT_FIELDS = {"status", "contract_id", "task_id", "output", "metadata", "error", "poll_url", "progress",
                 "estimated_completion"}


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return str(body["error"]["code"])


def poll_until(worker: Worker, url: str, contract_id: str, status: str, timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        response = worker.get(url, contract_id)
        assert response.status_code == 200, (response.text, worker.logs())
        body = response.json()
        if body["status"] == status:
            return body
        assert time.monotonic() < deadline, f"still {body['status']} after {timeout_s}s: {body}"
        time.sleep(0.05)


def sse_events(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value
        if fields:
            events.append(fields)
    return events


# ----- discovery routes ---------------------------------------------------------------------


def test_health_answers_ok_with_the_protocol(worker: Worker) -> None:
    response = worker.http.get(worker.url + "health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["protocol"] == "hire"
    assert isinstance(body["name"], str) and isinstance(body["version"], str)
    assert isinstance(body["tasks_in_flight"], int)


def test_capabilities_declare_task_types_cancel_callbacks_and_verify(worker: Worker) -> None:
    body = worker.http.get(worker.url + "capabilities").json()
    assert body["protocol"] == "hire"
    assert set(body["task_types"]) == CONFORMANCE_TASK_TYPES
    assert body["cancel"] is True
    assert body["completion_callbacks"] is True
    assert body["verify"] is True
    assert body["provider_family"] == "conformance-runtime"
    assert body["model_id"] == "conformance-model-v1"


# ----- the contract token -------------------------------------------------------------------


def test_execute_without_a_token_is_401_missing_token(worker: Worker, contract_id: str) -> None:
    response = worker.http.post(worker.url + "execute", json={}, headers={"x-contract-id": contract_id})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert error_code(response) == "missing_token"


def test_contract_id_header_is_required_and_checked(worker: Worker, contract_id: str) -> None:
    token = worker.gateway.token(contract_id)
    missing = worker.http.post(worker.url + "execute", json={}, headers={"authorization": f"Bearer {token}"})
    assert missing.status_code == 400 and error_code(missing) == "missing_contract_id"
    invalid = worker.http.post(
        worker.url + "execute", json={}, headers={"authorization": f"Bearer {token}", "x-contract-id": "ctr_xyz789"}
    )
    assert invalid.status_code == 400 and error_code(invalid) == "invalid_contract_id"


def tampered(token: str, **claims: Any) -> str:
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    decoded.update(claims)
    return ".".join([header, b64url(json.dumps(decoded).encode()), signature])


def test_a_tampered_token_is_refused_and_nothing_runs(worker: Worker, contract_id: str) -> None:
    before = worker.executions()
    other = new_contract_id()
    # The claims now name another contract, but the signature is over the original ones.
    token = tampered(worker.gateway.token(other), contract_id=contract_id, sub=contract_id)
    response = worker.execute(contract_id, {"text": "x"}, headers=worker.headers(contract_id, token=token))
    assert response.status_code == 401, response.text
    assert error_code(response) == "invalid_token"
    assert worker.executions() == before


@pytest.mark.parametrize(
    "case",
    ["expired", "not_yet_valid", "receipt_type", "unknown_key", "same_kid_other_key", "alg_none", "wrong_issuer",
     "subject_mismatch", "garbage"],
)
def test_invalid_tokens_are_401_invalid_token(worker: Worker, contract_id: str, case: str) -> None:
    gateway = worker.gateway
    now = int(time.time())
    if case == "expired":
        token = gateway.token(contract_id, iat=now - 900, exp=now - 120)
    elif case == "not_yet_valid":
        token = gateway.token(contract_id, iat=now + 600, exp=now + 1200)
    elif case == "receipt_type":
        token = gateway.token(contract_id, typ=RECEIPT_TOKEN_TYPE)
    elif case == "unknown_key":
        gateway.add_key(f"never-published-{case}-{worker.name}", publish=False)
        token = gateway.token(contract_id, kid=f"never-published-{case}-{worker.name}")
    elif case == "same_kid_other_key":
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        kid = gateway.published[0]
        token = jwt.encode(gateway.claims(contract_id), Ed25519PrivateKey.generate(), algorithm="EdDSA",
                           headers={"kid": kid, "typ": "hiregate-contract+jwt"})
    elif case == "alg_none":
        header = b64url(json.dumps({"alg": "none", "typ": "hiregate-contract+jwt", "kid": gateway.published[0]}).encode())
        token = f"{header}.{b64url(json.dumps(gateway.claims(contract_id)).encode())}."
    elif case == "wrong_issuer":
        token = gateway.token(contract_id, iss="someone-else")
    elif case == "subject_mismatch":
        token = gateway.token(contract_id, sub=new_contract_id())
    else:
        token = "not.a.token"
    response = worker.execute(contract_id, {"text": "x"}, headers=worker.headers(contract_id, token=token))
    assert response.status_code == 401, (case, response.text)
    assert error_code(response) == "invalid_token"


def test_a_token_for_another_contract_is_401_contract_mismatch(worker: Worker, contract_id: str) -> None:
    token = worker.gateway.token(new_contract_id())
    response = worker.execute(contract_id, {"text": "x"}, headers=worker.headers(contract_id, token=token))
    assert response.status_code == 401
    assert error_code(response) == "contract_mismatch"


def test_a_token_signed_after_key_rotation_is_accepted(worker: Worker, contract_id: str) -> None:
    # Warm the worker's key cache, then rotate: the new kid is unknown to the cache.
    warm = new_contract_id()
    assert worker.execute(warm, {"text": "warm"}).status_code == 200
    kid = f"rotated-{worker.name}"
    worker.gateway.add_key(kid)
    response = worker.execute(
        contract_id, {"text": "after rotation"}, headers=worker.headers(contract_id, token=worker.gateway.token(contract_id, kid=kid))
        | {"x-task-type": "summarize"},
    )
    assert response.status_code == 200, (response.text, worker.logs())
    assert response.json()["status"] == "completed"


# ----- request checks -----------------------------------------------------------------------


def test_request_headers_and_body_are_checked(worker: Worker, contract_id: str) -> None:
    before = worker.executions()
    mismatch = worker.execute(contract_id, {}, headers=worker.headers(contract_id) | {"idempotency-key": new_contract_id()})
    assert mismatch.status_code == 400 and error_code(mismatch) == "idempotency_key_mismatch"
    for bad in ["0", "first"]:
        attempt = worker.execute(contract_id, {}, headers=worker.headers(contract_id) | {"x-attempt": bad})
        assert attempt.status_code == 400 and error_code(attempt) == "invalid_attempt"
    task_type = worker.execute(contract_id, {}, headers=worker.headers(contract_id) | {"x-task-type": "translate"})
    assert task_type.status_code == 400 and error_code(task_type) == "unsupported_task_type"
    not_json = worker.http.post(
        worker.url + "execute", content=b"{not json", headers=worker.headers(contract_id) | {"content-type": "application/json"}
    )
    assert not_json.status_code == 400 and error_code(not_json) == "invalid_input"
    too_large = worker.http.post(
        worker.url + "execute",
        content=json.dumps({"text": "x" * (3 * 1024 * 1024)}).encode(),
        headers=worker.headers(contract_id) | {"content-type": "application/json"},
    )
    assert too_large.status_code == 413 and error_code(too_large) == "input_too_large"
    assert worker.executions() == before, "no refused request ran the handler"


def test_unknown_tasks_and_routes_are_404(worker: Worker, contract_id: str) -> None:
    task = worker.get(worker.url + "tasks/task_01J9ZQ4X1V8E6W0M3C5T7B2N4K", contract_id)
    assert task.status_code == 404 and error_code(task) == "task_not_found"
    route = worker.http.get(worker.url + "no/such/route")
    assert route.status_code == 404 and error_code(route) == "not_found"


# ----- sync answers -------------------------------------------------------------------------


def test_a_sync_task_answers_completed_with_a_json_output(worker: Worker, contract_id: str) -> None:
    text = "hiregate pays agents only for verified work."
    response = worker.execute(contract_id, {"text": text})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) <= REPORT_FIELDS, body
    assert body["status"] == "completed"
    assert body["contract_id"] == contract_id
    assert isinstance(body["task_id"], str) and body["task_id"]
    assert body["output"] == {"type": "json", "content": {"summary": text, "confidence": 0.9}}


def test_the_seeds_execute_request_is_summarised(worker: Worker, contract_id: str) -> None:
    seed_input = {
        "brief": "Create a minimalist logo for TechStartup Inc",
        "colors": ["#FF5733", "#333333"],
        "style_references": ["https://example.com/style1.png"],
    }
    body = worker.execute(contract_id, seed_input, task_type="echo").json()
    assert body["status"] == "completed"
    summary = json.loads(body["output"]["content"]["summary"])
    assert summary == seed_input


def test_a_failure_answers_failed_with_the_error(worker: Worker, contract_id: str) -> None:
    response = worker.execute(contract_id, {"mode": "fail"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "failed" and body["contract_id"] == contract_id
    assert body["error"]["code"] == "SIMULATED_FAILURE"
    bad = worker.execute(new_contract_id(), {"mode": "dance"}).json()
    assert bad["status"] == "failed" and bad["error"]["code"] == "INVALID_INPUT"
    assert bad["error"]["details"]["field"] == "mode"


def test_an_out_of_schema_answer_is_delivered_as_the_worker_wrote_it(worker: Worker, contract_id: str) -> None:
    # Judging is the gateway's job: the worker reports what the agent produced.
    body = worker.execute(contract_id, {"mode": "invalid"}).json()
    assert body["status"] == "completed"
    assert body["output"] == {"type": "json", "content": {"summary": 42}}


# ----- idempotency --------------------------------------------------------------------------


def test_eight_concurrent_executes_run_the_task_once(worker: Worker, contract_id: str) -> None:
    before = worker.executions()
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: worker.execute(contract_id, {"mode": "slow", "delay_ms": 300, "text": "once"}),
                                  range(8)))
    assert worker.executions() == before + 1, worker.logs()
    task_ids = {response.json()["task_id"] for response in responses}
    assert len(task_ids) == 1, [r.json() for r in responses]
    for response in responses:
        assert response.status_code in (200, 202), response.text
    # Once done, every duplicate gets the stored result, and still nothing runs again.
    again = worker.execute(contract_id, {"mode": "slow", "delay_ms": 300, "text": "once"})
    assert again.status_code == 200
    assert again.json()["status"] == "completed" and again.json()["task_id"] in task_ids
    assert again.json()["output"]["content"]["summary"] == "once"
    assert worker.executions() == before + 1


def test_a_new_attempt_reruns_only_after_a_failure(worker: Worker, contract_id: str) -> None:
    before = worker.executions()
    first = worker.execute(contract_id, {"mode": "flaky"}, attempt=1).json()
    assert first["status"] == "failed" and first["error"]["code"] == "TRANSIENT_FAILURE"
    assert worker.execute(contract_id, {"mode": "flaky"}, attempt=1).json() == first
    second = worker.execute(contract_id, {"mode": "flaky"}, attempt=2).json()
    assert second["status"] == "completed" and second["task_id"] != first["task_id"]
    # A stale attempt number sees the latest run; a completed contract never runs again.
    assert worker.execute(contract_id, {"mode": "flaky"}, attempt=1).json() == second
    assert worker.execute(contract_id, {"mode": "flaky"}, attempt=3).json() == second
    assert worker.executions() == before + 2
    # The first run stays readable under its own task id.
    old = worker.get(f"{worker.url}tasks/{first['task_id']}", contract_id).json()
    assert old["status"] == "failed"


# ----- pending, polling, callbacks ----------------------------------------------------------


def test_pending_work_is_polled_and_reported_by_a_signed_callback(worker: Worker, contract_id: str) -> None:
    text = "long work"
    response = worker.execute(contract_id, {"mode": "pending", "delay_ms": 600, "text": text})
    assert response.status_code == 202, response.text
    pending = response.json()
    assert pending["status"] == "pending" and pending["contract_id"] == contract_id
    assert pending["poll_url"].endswith(f"/tasks/{pending['task_id']}")
    duplicate = worker.execute(contract_id, {"mode": "pending", "delay_ms": 600, "text": text})
    assert duplicate.status_code == 202 and duplicate.json()["task_id"] == pending["task_id"]

    # Polling needs the token of this contract; another contract's token sees no such task.
    assert worker.http.get(pending["poll_url"], headers={"x-contract-id": contract_id}).status_code == 401
    other = new_contract_id()
    foreign = worker.get(pending["poll_url"], other)
    assert foreign.status_code == 404 and error_code(foreign) == "task_not_found"

    done = poll_until(worker, pending["poll_url"], contract_id, "completed")
    assert done["output"]["content"]["summary"] == text and done["task_id"] == pending["task_id"]

    (callback,) = worker.gateway.wait_for_callbacks(contract_id, 1)
    headers = callback.headers
    assert headers["x-contract-id"] == contract_id
    assert headers["content-type"].startswith("application/json")
    assert headers["webhook-id"] == f"cb_{pending['task_id']}"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 300
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + callback.body
    key = base64.b64decode(worker.secret.removeprefix("whsec_"))
    expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert expected in headers["webhook-signature"].split(" "), "the callback is signed with the worker's secret"
    body = callback.json()
    assert body["event"] == "task_completed" and body["status"] == "completed"
    assert body["contract_id"] == contract_id and body["task_id"] == pending["task_id"]
    assert body["output"] == done["output"]


def test_a_refused_callback_is_retried_under_the_same_id(worker: Worker, contract_id: str) -> None:
    worker.gateway.scripted[contract_id] = [503]
    response = worker.execute(contract_id, {"mode": "pending", "delay_ms": 100})
    assert response.status_code == 202
    first, second = worker.gateway.wait_for_callbacks(contract_id, 2)
    assert first.answered == 503 and second.answered == 200
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.json()["event"] == second.json()["event"] == "task_completed"


def test_a_cancelled_task_ends_failed_task_cancelled(worker: Worker, contract_id: str) -> None:
    pending = worker.execute(contract_id, {"mode": "pending", "delay_ms": 20000}).json()
    assert pending["status"] == "pending"
    cancel_url = f"{worker.url}tasks/{pending['task_id']}/cancel"
    cancelled = worker.http.post(cancel_url, headers=worker.headers(contract_id))
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "failed" and cancelled.json()["error"]["code"] == "TASK_CANCELLED"
    again = worker.http.post(cancel_url, headers=worker.headers(contract_id))
    assert again.status_code == 200 and again.json() == cancelled.json()
    assert worker.get(pending["poll_url"], contract_id).json()["error"]["code"] == "TASK_CANCELLED"

    finished = new_contract_id()
    done = worker.execute(finished, {"text": "done"}).json()
    refused = worker.http.post(f"{worker.url}tasks/{done['task_id']}/cancel", headers=worker.headers(finished))
    assert refused.status_code == 409 and error_code(refused) == "task_already_finished"


# ----- outputs ------------------------------------------------------------------------------


def check_hosted_file(worker: Worker, item: dict[str, Any]) -> bytes:
    assert item["type"] == "file" and item["mime"] == "application/json"
    assert item["checksum"].startswith("sha256:")
    data = worker.http.get(item["url"]).content
    assert "sha256:" + hashlib.sha256(data).hexdigest() == item["checksum"]
    assert len(data) == item["size"]
    return data


def test_file_outputs_are_hosted_with_their_digest(worker: Worker, contract_id: str) -> None:
    body = worker.execute(contract_id, {"text": "filed"}, task_type="output_file").json()
    assert body["status"] == "completed", body
    data = check_hosted_file(worker, body["output"])
    assert json.loads(data) == {"summary": "filed", "confidence": 0.9}


def test_multiple_outputs_carry_json_text_and_file(worker: Worker, contract_id: str) -> None:
    body = worker.execute(contract_id, {"text": "many"}, task_type="output_multiple").json()
    items = body["output"]["items"]
    assert body["output"]["type"] == "multiple" and [item["type"] for item in items] == ["json", "text", "file"]
    assert items[0]["content"] == {"summary": "many", "confidence": 0.9} and items[1]["content"] == "many"
    check_hosted_file(worker, items[2])


def test_text_outputs(worker: Worker, contract_id: str) -> None:
    body = worker.execute(contract_id, {"text": "plain"}, task_type="output_text").json()
    assert body["output"] == {"type": "text", "content": "plain"}


def test_stream_outputs_are_sse_and_resume_after_last_event_id(worker: Worker, contract_id: str) -> None:
    body = worker.execute(contract_id, {"text": "alpha beta gamma delta", "delay_ms": 30}, task_type="output_stream").json()
    assert body["status"] == "completed", body
    output = body["output"]
    assert output["type"] == "stream" and output["format"] == "sse"
    assert worker.http.get(output["url"], headers={"x-contract-id": contract_id}).status_code == 401

    whole = worker.get(output["url"], contract_id)
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/event-stream")
    events = sse_events(whole.text)
    assert [e["id"] for e in events] == ["1", "2", "3", "4", "5"]
    assert [e["data"] for e in events[:4]] == ["alpha ", "beta ", "gamma ", "delta"]
    assert all("event" not in e for e in events[:4])
    assert events[4]["event"] == "done"

    resumed = sse_events(worker.get(output["url"], contract_id, last_event_id="2").text)
    assert [(e["id"], e["data"]) for e in resumed[:2]] == [("3", "gamma "), ("4", "delta")]
    assert resumed[-1]["event"] == "done" and len(resumed) == 3


def test_partial_progress_is_reported_while_running_and_a_final_partial_has_no_poll_url(
    worker: Worker, contract_id: str
) -> None:
    # Items every 1.5 s: the sync wait (2 s) passes after the first, so the answer is a 202.
    task_input = {"text": "part", "items": 3, "items_done": 2, "delay_ms": 1500}
    response = worker.execute(contract_id, task_input, task_type="output_partial")
    assert response.status_code == 202, response.text
    running = response.json()
    assert running["status"] in ("partial", "pending") and running["poll_url"]
    seen_progress = running if running["status"] == "partial" else None
    deadline = time.monotonic() + 20
    while True:
        body = worker.get(running["poll_url"], contract_id).json()
        if body["status"] == "partial" and body.get("poll_url"):
            seen_progress = body
        elif body["status"] == "partial":
            final = body
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.05)
    assert seen_progress is not None, "polls saw the run's progress"
    assert seen_progress["progress"]["message"] == "1 of 3 items"
    assert seen_progress["output"]["type"] == "multiple" and len(seen_progress["output"]["items"]) == 1
    assert "poll_url" not in final and final["progress"]["message"] == "2 of 3 items"
    assert len(final["output"]["items"]) == 2
    again = worker.execute(contract_id, task_input, task_type="output_partial")
    assert again.status_code == 200 and again.json() == final


# ----- WattSwarm /verify --------------------------------------------------------------------


def verify_request(output: Any, params: dict[str, Any] | None = None, policy_hash: str | None = None) -> dict[str, Any]:
    params = params or {}
    policy_id = "vp.schema_only.v1"
    digest = "sha256:" + hashlib.sha256(policy_id.encode() + rfc8785.dumps(params)).hexdigest()
    return {
        "candidate": {
            "candidate_id": "cand-7a3f",
            "execution_id": "exec-4f2a9c",
            "output": output,
            "evidence_inline": [{"mime": "text/plain", "content": "trace:attempt-001"}],
            "evidence_refs": [],
        },
        "output_schema": {"type": "object", "required": ["summary"]},
        "policy": {"policy_id": policy_id, "policy_version": "1", "policy_hash": policy_hash or digest,
                   "policy_params": params},
    }


def expected_result_hash(request: dict[str, Any], answer: dict[str, Any]) -> str:
    bound = {
        "candidate_id": request["candidate"]["candidate_id"],
        "execution_id": request["candidate"]["execution_id"],
        "passed": answer["passed"],
        "score": answer["score"],
        "reason_codes": answer["reason_codes"],
        "provider_family": "conformance-runtime",
        "model_id": "conformance-model-v1",
        "policy_hash": request["policy"]["policy_hash"],
    }
    return "sha256:" + hashlib.sha256(rfc8785.dumps(bound)).hexdigest()


def test_verify_votes_with_the_jcs_result_hash(worker: Worker) -> None:
    good = verify_request({"summary": "s", "confidence": 0.9})
    answer = worker.http.post(worker.url + "verify", json=good).json()
    assert answer["passed"] is True and answer["score"] == 1.0 and answer["reason_codes"] == []
    assert answer["verification_status"] == "passed"
    assert answer["provider_family"] == "conformance-runtime" and answer["model_id"] == "conformance-model-v1"
    assert answer["verifier_result_hash"] == expected_result_hash(good, answer)

    bad = verify_request({"summary": 42})
    vote = worker.http.post(worker.url + "verify", json=bad).json()
    assert vote["passed"] is False and vote["reason_codes"] == [101] and vote["verification_status"] == "failed"
    assert vote["verifier_result_hash"] == expected_result_hash(bad, vote)


def test_verify_refuses_a_policy_hash_that_does_not_match(worker: Worker) -> None:
    wrong = verify_request({"summary": "s"}, policy_hash="sha256:" + "00" * 32)
    response = worker.http.post(worker.url + "verify", json=wrong)
    assert response.status_code == 400 and error_code(response) == "invalid_policy"
    garbage = worker.http.post(worker.url + "verify", json={"candidate": 1})
    assert garbage.status_code == 400 and error_code(garbage) == "invalid_verify_request"
