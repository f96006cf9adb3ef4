"""Hires a hiregate worker over MCP with the official clients, unchanged: the MCP Python SDK
(`mcp`, streamable HTTP) and the x402 Python SDK's MCP payment wrapper (`x402.mcp`), paying from
the caller's own wallet with no hiregate account.

Reads one JSON document on stdin:
  {"url": ".../mcp", "privateKey": "0x…", "network": "eip155:…", "asset": "0x…",
   "workerId": "wk_…", "taskType": "summarize", "input": {…}}
and prints one JSON document on stdout: the tools listed, what find_workers answered, the raw
unpaid call of hire_worker (as the x402 MCP transport shapes it), and the paid call that
x402MCPSession made of it (payment_made, payment_response, the result's content). Errors go to
stderr with exit code 1, as in the Node interop scripts (io.mjs).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


def _dump(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, mode="json")
    return value


def _texts(content: list[Any]) -> list[str]:
    return [item.text for item in content if getattr(item, "type", None) == "text"]


async def main() -> dict[str, Any]:
    from eth_account import Account
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    from x402 import x402Client
    from x402.mcp import x402MCPSession
    from x402.mechanisms.evm.exact import register_exact_evm_client
    from x402.mechanisms.evm.signers import EthAccountSigner

    config = json.loads(sys.stdin.read())
    arguments = {"worker_id": config["workerId"], "task_type": config["taskType"], "input": config["input"]}

    payer = x402Client()
    register_exact_evm_client(payer, EthAccountSigner(Account.from_key(config["privateKey"])))
    payer.set_spend_controls({"allowed_assets": [{"network": config["network"], "asset": config["asset"]}]})

    # No Authorization header: the caller has no hiregate account, only a wallet.
    async with streamablehttp_client(config["url"]) as (read, write, _session_id):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = sorted(tool.name for tool in (await session.list_tools()).tools)
            found = await session.call_tool("find_workers", {"task_type": config["taskType"]})

            # What any MCP client sees without paying: the x402 transport's PaymentRequired.
            unpaid = await session.call_tool("hire_worker", arguments)

            paid = await x402MCPSession(session, payer).call_tool("hire_worker", arguments)
            raw = paid.raw_result
            return {
                "tools": tools,
                "found": {"isError": bool(found.isError), "structuredContent": found.structuredContent},
                "unpaid": {
                    "isError": bool(unpaid.isError),
                    "structuredContent": unpaid.structuredContent,
                    "texts": _texts(unpaid.content),
                },
                "paid": {
                    "isError": bool(paid.is_error),
                    "paymentMade": paid.payment_made,
                    "paymentResponse": _dump(paid.payment_response),
                    "structuredContent": getattr(raw, "structuredContent", None),
                    "texts": _texts(paid.content),
                    "meta": _dump(getattr(raw, "meta", None)),
                },
            }


if __name__ == "__main__":
    try:
        result = asyncio.run(main())
    except BaseException as error:  # noqa: BLE001 - the caller reads stderr
        import traceback

        traceback.print_exception(error, file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(json.dumps(result) + "\n")
