"""Hires a hiregate listing over A2A with the official clients, unchanged: the A2A SDK (PyPI
`a2a-sdk`) resolves the listing's agent card (its signature checked by the SDK's verifier with
the gateway's JWKS), picks the interface it names and sends
`SendMessage` with the task input; the task comes back in TASK_STATE_INPUT_REQUIRED with the
a2a-x402 requirements (`x402.payment.required`), which the official x402 client (PyPI `x402`)
signs as an `exact` EIP-3009 payment; the same task's next message carries it
(`x402.payment.payload`, `payment-submitted`) and the answer is the final task. `GetTask` then
reads the task with the capability token of the paid answer.

Runs with the SDK venv's python (`x402`, `eth_account`, `httpx`) and the A2A venv on PYTHONPATH
(`a2a-sdk`, `protobuf`, `json-rpc`): see gateway/tests/api/a2a.rs.

Input (JSON on stdin): {"base": gateway URL, "cardPath": the card's path, "privateKey": 0x…,
"input": the task input, "allowedAssets": [{"network", "asset"}] the client may pay with,
"copies": how many identical payment messages to send at once (1), "streaming": true to use
SendStreamingMessage (the card must claim streaming), "metadata": extra message metadata}.
Output (JSON on stdout): {"interface": the card's, "offered": the input-required task,
"paid": [the answer to each payment message], "got": GetTask's answer (or null), "events": the
kinds of the events received, in order}.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from eth_account import Account
from google.protobuf import json_format, struct_pb2
from jwt import PyJWK
from x402 import x402Client
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import PaymentRequired


def struct(value):
    message = struct_pb2.Struct()
    message.update(value)
    return message


async def send(client, message, events=None):
    """The task `SendMessage` answers (the SDK yields it as a StreamResponse), or, streamed
    (`SendStreamingMessage`), the task its events come to: the first event is the task, artifact
    updates add artifacts, status updates replace its status. `events` collects their kinds."""
    task = None
    async for response in client.send_message(SendMessageRequest(message=message)):
        kind = response.WhichOneof("payload")
        if events is not None:
            events.append(kind)
        if kind == "task":
            task = response.task
        elif kind == "artifact_update" and task is not None:
            task.artifacts.append(response.artifact_update.artifact)
        elif kind == "status_update" and task is not None:
            task.status.CopyFrom(response.status_update.status)
        else:
            raise RuntimeError(f"unexpected event: {response}")
    if task is None:
        raise RuntimeError("no task")
    return task


def as_dict(message):
    return json_format.MessageToDict(message)


async def main():
    args = json.load(sys.stdin)
    async with httpx.AsyncClient(timeout=120) as http:
        # The card is the gateway's: its signature is checked with the SDK's own verifier and
        # the gateway's JWKS before anything is paid.
        jwks = (await http.get(f"{args['base']}/.well-known/jwks.json")).json()

        def key_provider(kid, _jku):
            for key in jwks.get("keys", []):
                if key.get("kid") == kid:
                    return PyJWK(key)
            raise SignatureVerificationError(f"no key {kid!r} in the JWKS")

        card = await A2ACardResolver(http, args["base"]).get_agent_card(
            relative_card_path=args["cardPath"],
            signature_verifier=create_signature_verifier(key_provider, ["EdDSA"]),
        )
        streaming = bool(args.get("streaming", False))
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        events = []
        input_part = Part()
        input_part.data.CopyFrom(json_format.ParseDict(args["input"], struct_pb2.Value()))
        request = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[input_part],
            metadata=struct(args.get("metadata") or {}),
        )
        offered = await send(client, request, events)
        metadata = as_dict(offered.status.message.metadata)
        assert metadata.get("x402.payment.status") == "payment-required", metadata
        required = PaymentRequired.model_validate(metadata["x402.payment.required"])

        signer = x402Client()
        register_exact_evm_client(signer, EthAccountSigner(Account.from_key(args["privateKey"])))
        # The client's spend controls allow only default assets: the devnet token is named.
        signer.set_spend_controls({"allowed_assets": args["allowedAssets"]})
        payload = await signer.create_payment_payload(required)
        payment = payload.model_dump(by_alias=True, exclude_none=True)

        def payment_message():
            return Message(
                message_id=str(uuid.uuid4()),
                task_id=offered.id,
                context_id=offered.context_id,
                role=Role.ROLE_USER,
                parts=[Part(text="Here is the payment authorization.")],
                metadata=struct(
                    {"x402.payment.status": "payment-submitted", "x402.payment.payload": payment}
                ),
            )

        copies = int(args.get("copies", 1))
        paid = await asyncio.gather(
            *(send(client, payment_message(), events) for _ in range(copies))
        )
        paid = [as_dict(task) for task in paid]

        got = None
        access = next(
            (
                task["status"]["message"]["metadata"].get("hiregate.access")
                for task in paid
                if task["status"]["message"].get("metadata", {}).get("hiregate.access")
            ),
            None,
        )
        if access:
            async with httpx.AsyncClient(
                timeout=60, headers={"Authorization": f"Bearer {access['token']}"}
            ) as reader_http:
                reader = ClientFactory(
                    ClientConfig(httpx_client=reader_http, streaming=False)
                ).create(card)
                got = as_dict(await reader.get_task(GetTaskRequest(id=offered.id)))

        interface = as_dict(card.supported_interfaces[0])
        print(
            json.dumps(
                {
                    "interface": interface,
                    "offered": as_dict(offered),
                    "paid": paid,
                    "got": got,
                    "events": events,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
