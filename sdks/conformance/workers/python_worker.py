"""The Python worker of the conformance suite: the same behaviour as the Rust ``example-worker``
with ``EXAMPLE_WORKER=conformance`` (worker-sdk's faulty and outputs example workers and a
verifier), built on the ``hiregate`` Python SDK.

Environment (the Rust example's names): ``WORKER_LISTEN`` (``host:port``, default
``127.0.0.1:0``), ``WORKER_GATEWAY_JWKS_URL`` or ``WORKER_INSECURE_NO_AUTH=1``,
``WORKER_JWKS_MIN_REFRESH_MS``, ``WORKER_PUBLIC_URL``, ``WORKER_CALLBACK_GATEWAY_URL`` +
``WORKER_CALLBACK_SECRET``, ``WORKER_SYNC_WAIT_MS``, ``WORKER_MAX_CONCURRENT_TASKS``,
``FAULTY_MODE``, ``FAULTY_DELAY_MS``. Prints ``listening on http://…/``; ``GET /test/executions``
answers how many times the handler ran.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from starlette.responses import JSONResponse
from starlette.routing import Route

import hiregate
from hiregate import (
    CallbackConfig,
    GatewayKeys,
    JsonOutput,
    MultipleOutput,
    Progress,
    StreamEvent,
    TaskContext,
    TextOutput,
    Verdict,
    VerifyRequest,
    Worker,
)

SUMMARY_CHARS = 200
CONFIDENCE = 0.9
MODES = ["ok", "invalid", "fail", "slow", "pending", "flaky"]
OUTPUT_TASK_TYPES = ["output_text", "output_json", "output_file", "output_multiple", "output_stream", "output_partial"]


def env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def build_worker() -> Worker:
    jwks_url = env("WORKER_GATEWAY_JWKS_URL")
    keys = None
    if jwks_url:
        refresh_ms = env("WORKER_JWKS_MIN_REFRESH_MS")
        keys = GatewayKeys.remote(
            jwks_url, min_refresh_interval_s=int(refresh_ms) / 1000 if refresh_ms else 30.0
        )
    callback = None
    if env("WORKER_CALLBACK_GATEWAY_URL") and env("WORKER_CALLBACK_SECRET"):
        callback = CallbackConfig(
            env("WORKER_CALLBACK_GATEWAY_URL") or "",
            hiregate.WebhookSecret.parse(env("WORKER_CALLBACK_SECRET") or ""),
            first_retry_delay_s=0.2,
        )
    sync_wait = env("WORKER_SYNC_WAIT_MS")
    max_tasks = env("WORKER_MAX_CONCURRENT_TASKS")
    return Worker(
        "conformance-worker-python",
        hiregate.__version__,
        task_types=["summarize", "echo", *OUTPUT_TASK_TYPES],
        gateway_keys=keys,
        allow_unauthenticated_for_local_dev=env("WORKER_INSECURE_NO_AUTH") == "1",
        public_url=env("WORKER_PUBLIC_URL"),
        callback=callback,
        sync_wait_s=int(sync_wait) / 1000 if sync_wait else 25.0,
        max_concurrent_tasks=int(max_tasks) if max_tasks else None,
    )


worker = build_worker()
DEFAULT_MODE = env("FAULTY_MODE") or "ok"
DEFAULT_DELAY_MS = int(env("FAULTY_DELAY_MS") or 500)


def input_text(task_input: Any) -> str:
    if isinstance(task_input, dict) and isinstance(task_input.get("text"), str):
        return str(task_input["text"])
    return json.dumps(task_input, separators=(",", ":"), sort_keys=True)


def summary(ctx: TaskContext, task_input: Any) -> dict[str, Any]:
    text = input_text(task_input)
    return {"summary": text if ctx.task_type == "echo" else text[:SUMMARY_CHARS], "confidence": CONFIDENCE}


@worker.task
async def handle(ctx: TaskContext, task_input: Any) -> Any:
    if ctx.task_type is not None and ctx.task_type.startswith("output_"):
        return await outputs(ctx, task_input)
    return await faulty(ctx, task_input)


async def faulty(ctx: TaskContext, task_input: Any) -> Any:
    given = task_input if isinstance(task_input, dict) else {}
    mode = given.get("mode", DEFAULT_MODE)
    if not isinstance(mode, str):
        return hiregate.failed("INVALID_INPUT", "mode must be a string", {"field": "mode"})
    if mode not in MODES:
        return hiregate.failed("INVALID_INPUT", f"unknown mode {mode!r}", {"field": "mode", "expected": MODES})
    delay_ms = given.get("delay_ms", DEFAULT_DELAY_MS)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        return hiregate.failed("INVALID_INPUT", "delay_ms must be a whole number", {"field": "delay_ms"})
    delay = delay_ms / 1000
    if mode == "invalid":
        return {"summary": 42}
    if mode == "fail":
        return hiregate.failed("SIMULATED_FAILURE", "the faulty worker was asked to fail")
    if mode == "slow":
        await asyncio.sleep(delay)
    if mode == "pending":

        async def later() -> Any:
            await asyncio.sleep(delay)
            return summary(ctx, task_input)

        return hiregate.pending(later, datetime.now(timezone.utc) + timedelta(seconds=delay))
    if mode == "flaky" and ctx.attempt == 1:
        return hiregate.failed("TRANSIENT_FAILURE", "the faulty worker fails the first attempt")
    return summary(ctx, task_input)


async def outputs(ctx: TaskContext, task_input: Any) -> Any:
    text = input_text(task_input)
    content = {"summary": text, "confidence": CONFIDENCE}
    given = task_input if isinstance(task_input, dict) else {}
    delay = int(given.get("delay_ms", 0) or 0) / 1000

    def hosted() -> hiregate.FileOutput:
        return ctx.host_file("summary.json", "application/json", json.dumps(content, separators=(",", ":")))

    if ctx.task_type == "output_text":
        return TextOutput(content=text)
    if ctx.task_type == "output_file":
        return hosted()
    if ctx.task_type == "output_multiple":
        return MultipleOutput(items=[JsonOutput(content=content), TextOutput(content=text), hosted()])
    if ctx.task_type == "output_stream":

        async def words() -> Any:
            parts = [word + " " for word in text.split(" ")]
            parts[-1] = parts[-1][:-1]
            for part in parts:
                if not part:
                    continue
                await asyncio.sleep(delay)
                yield StreamEvent(part)

        return hiregate.stream(words())
    if ctx.task_type == "output_partial":
        wanted = int(given.get("items", 3))
        done = min(int(given.get("items_done", wanted)), wanted)
        items: list[Any] = []
        for _ in range(done):
            await asyncio.sleep(delay)
            items.append(JsonOutput(content=content))
            ctx.report_partial(progress_of(len(items), wanted), list(items))
        if done == wanted:
            return MultipleOutput(items=items)
        return hiregate.partial(progress_of(len(items), wanted), items)
    return content


def progress_of(done: int, wanted: int) -> Progress:
    return Progress(percent=done * 100 / max(wanted, 1), message=f"{done} of {wanted} items")


@worker.verifier("conformance-runtime", "conformance-model-v1")
async def judge(request: VerifyRequest) -> Verdict:
    output = request.candidate.output
    if isinstance(output, dict) and isinstance(output.get("summary"), str):
        return Verdict.passing(1.0)
    return Verdict.failing(1.0, [101])


async def executions(_request: Any) -> JSONResponse:
    return JSONResponse({"executions": worker.handler_runs})


app = worker.app()
app.router.routes.append(Route("/test/executions", executions, methods=["GET"]))


if __name__ == "__main__":
    listen = env("WORKER_LISTEN") or "127.0.0.1:0"
    host, _, port = listen.rpartition(":")
    asyncio.run(hiregate.serve(app, host or "127.0.0.1", int(port)))
