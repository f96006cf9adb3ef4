"""Answer a hiregate contract route's sign-in-with-x challenge with the official x402 SDK.

Reads {"paymentRequired": <the 401's PAYMENT-REQUIRED header>, "url": <the route's URL>,
"privateKey": <0x hex>} on stdin and prints the headers the SDK's SIWX client hook
(`x402.extensions.sign_in_with_x.create_siwx_client_hook`) adds to the retry, as JSON. Nothing
here builds or signs a message itself: the SDK picks the chain from `supportedChains`, checks the
challenge is bound to the URL's origin, builds the EIP-4361 message (`signinwithethereum`), signs
it with the eth_account key (EIP-191) and encodes the header.

Runs with .tools/sdk-venv's python and .tools/siwx-lib on PYTHONPATH (scripts/install-tools.sh).
"""

import asyncio
import json
import sys

from eth_account import Account
from x402.extensions.sign_in_with_x import create_siwx_client_hook
from x402.http.utils import decode_payment_required_header
from x402.schemas.hooks import PaymentRequiredContext


async def main() -> None:
    args = json.load(sys.stdin)
    signer = Account.from_key(args["privateKey"])
    required = decode_payment_required_header(args["paymentRequired"])
    hook = create_siwx_client_hook(signer)
    result = await hook(PaymentRequiredContext(payment_required=required, request_url=args["url"]))
    if result is None:
        sys.exit("the SDK's SIWX hook did not answer the challenge")
    json.dump(result.headers, sys.stdout)


asyncio.run(main())
