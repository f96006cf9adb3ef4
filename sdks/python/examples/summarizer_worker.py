"""An example worker wrapping a tiny deterministic "agent": an extractive summariser (the sentences
with the most frequent words, in their original order) that needs no model download. Replace
``summarise`` with your agent (LangChain, CrewAI, LlamaIndex, an OpenAI/Anthropic call…).

Environment: ``WORKER_LISTEN`` (default ``127.0.0.1:8090``), ``WORKER_GATEWAY_JWKS_URL`` (the
gateway's ``/.well-known/jwks.json``), optional ``WORKER_CALLBACK_GATEWAY_URL`` +
``WORKER_CALLBACK_SECRET`` (the ``callback_secret`` of the registration) for pending work.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from typing import Any

from hiregate import CallbackConfig, GatewayKeys, TaskContext, TaskFailed, Worker, serve

STOP_WORDS = set("a an and are as at be by for from has in is it of on or that the to was were will with".split())


def summarise(text: str, max_sentences: int = 2) -> dict[str, Any]:
    """The agent: deterministic, so the same input always gives the same summary."""
    sentences = [s.strip() for s in re.findall(r"[^.!?]+[.!?]*", text) if s.strip()]
    if not sentences:
        return {"summary": "", "confidence": 0.0}

    def words(sentence: str) -> list[str]:
        return [w for w in re.findall(r"[a-z0-9']+", sentence.lower()) if w not in STOP_WORDS]

    frequency = Counter(words(text))
    scored = sorted(
        ((sum(frequency[w] for w in words(s)) / max(len(words(s)), 1), -i, s) for i, s in enumerate(sentences)),
        reverse=True,
    )[:max_sentences]
    chosen = [s for _, _, s in sorted(scored, key=lambda item: -item[1])]
    return {"summary": " ".join(chosen), "confidence": 0.95 if len(sentences) <= max_sentences else 0.8}


worker = Worker(
    "summarizer-py",
    "1.0.0",
    task_types=["summarize"],
    gateway_keys=GatewayKeys.remote(
        os.environ.get("WORKER_GATEWAY_JWKS_URL", "http://127.0.0.1:8402/.well-known/jwks.json")
    ),
    callback=CallbackConfig(os.environ["WORKER_CALLBACK_GATEWAY_URL"], os.environ["WORKER_CALLBACK_SECRET"])
    if os.environ.get("WORKER_CALLBACK_GATEWAY_URL") and os.environ.get("WORKER_CALLBACK_SECRET")
    else None,
)


@worker.task
async def summarize(ctx: TaskContext, task_input: Any) -> dict[str, Any]:
    text = task_input.get("text") if isinstance(task_input, dict) else None
    if not isinstance(text, str):
        raise TaskFailed("INVALID_INPUT", "input.text must be a string", {"field": "text"})
    print(f"contract {ctx.contract_id} (attempt {ctx.attempt}): summarising {len(text)} characters", flush=True)
    return summarise(text)


app = worker.app()  # or: your_fastapi_app.mount("/summarizer", worker.app())

if __name__ == "__main__":
    host, _, port = os.environ.get("WORKER_LISTEN", "127.0.0.1:8090").rpartition(":")
    asyncio.run(serve(app, host, int(port)))
