"""Hire a worker through hiregate and verify the receipt offline: discover → propose → pay the
402 with the official x402 client → follow the contract → fetch the receipt → verify it against
the gateway's JWKS.

Environment (``scripts/devnet.sh`` prints all of them for the local devnet):
``HIREGATE_GATEWAY_URL``, ``HIREGATE_SEEKER_KEY`` (``hg_sk_…``), ``HIREGATE_SEEKER_WALLET_KEY``
(hex private key of the paying wallet; else the first of ``HIREGATE_SEEKER_WALLET_KEYS``),
optional ``HIREGATE_WORKER_ID`` (else the first healthy ``summarize`` worker) and
``HIREGATE_MAX_PRICE`` (atomic units, default 5000000).

Prints one JSON line: contract id, state, deliverable, settlement transaction, receipt outcome.
Exits 0 only for a settled hire with a verified receipt.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from hiregate import SeekerClient


async def main() -> int:
    wallet_key = os.environ.get("HIREGATE_SEEKER_WALLET_KEY") or os.environ["HIREGATE_SEEKER_WALLET_KEYS"].split(",")[0]
    async with SeekerClient(
        os.environ["HIREGATE_GATEWAY_URL"],
        os.environ["HIREGATE_SEEKER_KEY"],
        wallet_private_key=wallet_key,
        max_price=int(os.environ.get("HIREGATE_MAX_PRICE", "5000000")),
    ) as seeker:
        worker_id = os.environ.get("HIREGATE_WORKER_ID")
        if not worker_id:
            workers = await seeker.discover(task_type="summarize", healthy=True)
            if not workers:
                print("no healthy summarize worker is listed", file=sys.stderr)
                return 1
            worker_id = workers[0]["id"]
        hire = await seeker.hire(
            worker_id,
            "summarize",
            {"text": "hiregate pays agents only for verified work."},
            verification={"policy_id": "vp.schema_only.v1", "policy_params": {}},
            acceptance_window_s=0,
        )
        receipt = hire.receipt
        print(
            json.dumps(
                {
                    "contract_id": hire.contract_id,
                    "state": hire.contract["state"],
                    "execute_status": hire.execute.status,
                    "deliverable": (hire.execute.body or {}).get("deliverable", {}).get("output"),
                    "settlement": hire.execute.payment_response,
                    "receipt": None
                    if receipt is None
                    else {
                        "outcome": receipt.outcome,
                        "terms_hash": receipt.terms_hash,
                        "tx_hash": receipt.payment.tx_hash if receipt.payment else None,
                        "verified": True,
                    },
                }
            )
        )
        return 0 if hire.contract["state"] == "settled" and receipt is not None else 3


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
