"""Pays an x402 v2 endpoint the way a Python buyer does, with the official x402 SDK unchanged:
its httpx transport (`x402HttpxClient`, async) or its requests adapter (`x402_requests`, sync)
sends the request, answers the 402 with a payment signed by the SDK's EVM `exact` client, and
retries once. The Python SDK (2.25) ships `exact`, `upto` and `batch-settlement` EVM clients but
no `auth-capture` one, so escrowed listings are paid from Node (pay.mjs), not here.

Reads one JSON document on stdin:
  {"url": "http://…", "privateKey": "0x…", "client": "httpx" | "requests",
   "method"?: "POST", "body"?: <JSON value>, "network": "eip155:…", "asset": "0x…"}
and prints one JSON document on stdout, the shape of pay.mjs's:
  {"status": 200, "headers": {…}, "body": <JSON if it parses, else text>,
   "paymentResponse": <decoded PAYMENT-RESPONSE, or null>}
Errors go to stderr with exit code 1, as in the Node interop scripts (io.mjs).

Spend controls: only the given network's asset may be paid (the devnet token is no default
asset of the SDK).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

REQUEST_TIMEOUT_SECONDS = 120.0


def _register(payer: Any, config: dict[str, Any]) -> Any:
    from eth_account import Account
    from x402.mechanisms.evm.exact import register_exact_evm_client
    from x402.mechanisms.evm.signers import EthAccountSigner

    register_exact_evm_client(payer, EthAccountSigner(Account.from_key(config["privateKey"])))
    payer.set_spend_controls({"allowed_assets": [{"network": config["network"], "asset": config["asset"]}]})
    return payer


def _report(status: int, headers: dict[str, str], text: str) -> dict[str, Any]:
    from x402.http import decode_payment_response_header

    try:
        body: Any = json.loads(text) if text else None
    except json.JSONDecodeError:
        body = text
    lowered = {name.lower(): value for name, value in headers.items()}
    header = lowered.get("payment-response")
    payment_response = None
    if header:
        decoded = decode_payment_response_header(header)
        payment_response = decoded.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {"status": status, "headers": lowered, "body": body, "paymentResponse": payment_response}


async def _pay_with_httpx(config: dict[str, Any]) -> dict[str, Any]:
    from x402 import x402Client
    from x402.http.clients.httpx import x402HttpxClient

    payer = _register(x402Client(), config)
    async with x402HttpxClient(payer, timeout=REQUEST_TIMEOUT_SECONDS) as client:
        response = await client.request(config.get("method", "POST"), config["url"], json=config.get("body"))
        return _report(response.status_code, dict(response.headers), response.text)


def _pay_with_requests(config: dict[str, Any]) -> dict[str, Any]:
    from x402 import x402ClientSync
    from x402.http.clients.requests import x402_requests

    payer = _register(x402ClientSync(), config)
    with x402_requests(payer) as session:
        response = session.request(
            config.get("method", "POST"), config["url"], json=config.get("body"), timeout=REQUEST_TIMEOUT_SECONDS
        )
        return _report(response.status_code, dict(response.headers), response.text)


def main() -> dict[str, Any]:
    config = json.loads(sys.stdin.read())
    client = config.get("client")
    if client == "httpx":
        return asyncio.run(_pay_with_httpx(config))
    if client == "requests":
        return _pay_with_requests(config)
    raise ValueError(f'unknown client "{client}": use "httpx" or "requests"')


if __name__ == "__main__":
    try:
        result = main()
    except BaseException as error:  # noqa: BLE001 - the caller reads stderr
        import traceback

        traceback.print_exception(error, file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(json.dumps(result) + "\n")
