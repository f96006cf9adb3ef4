"""The seeker's side: discover workers, propose a contract, pay its x402 challenge with the
official ``x402`` client, follow the contract (SSE with ``Last-Event-ID`` resume, or polling),
fetch its receipt and verify it offline, verify the gateway's webhooks.

::

    async with SeekerClient(gateway_url, api_key, wallet_private_key=key, max_price=2_000_000) as seeker:
        workers = await seeker.discover(task_type="summarize", healthy=True)
        hire = await seeker.hire(workers[0]["id"], "summarize", {"text": "..."})
        print(hire.contract["state"], hire.receipt.outcome)

Paying needs nothing hiregate-specific: the gateway answers ``POST …/execute`` with a standard
x402 v2 402 (``PAYMENT-REQUIRED``), the official client signs an EIP-3009 authorization and
retries with ``PAYMENT-SIGNATURE``. The client's spend controls allow only the contract's own
asset, capped at ``max_price`` (atomic units) when given, else at the contract's price.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from .receipts import TERMINAL_STATES, Receipt, verify_receipt
from .tokens import ContractTokenClaims, Jwks, verify_contract_token

PAYMENT_REQUIRED_HEADER = "payment-required"
PAYMENT_RESPONSE_HEADER = "payment-response"
#: States :meth:`SeekerClient.wait` stops at by default: every terminal state, and ``rejected``
#: (nothing will be paid unless a dispute says otherwise).
FINAL_STATES = TERMINAL_STATES | {"rejected"}
DEFAULT_TIMEOUT_S = 60.0


class GatewayError(Exception):
    """The gateway answered with an error body ``{"error": {"code", "message", "details"}}``."""

    def __init__(self, status: int, code: str, message: str, body: Any) -> None:
        super().__init__(f"gateway answered {status}: {code}: {message}")
        self.status = status
        self.code = code
        self.body = body


class SpendingGuardError(Exception):
    """The contract asks more than the client may pay; nothing was signed."""


@dataclass
class ExecuteResult:
    """What one execute call ended in."""

    #: HTTP status of the final answer: 200 completed, 202 pending, 422 rejected, 402 …
    status: int
    #: Its JSON body (``None`` when empty or not JSON).
    body: Any
    #: The decoded ``PAYMENT-RESPONSE`` (the settlement), when the gateway settled.
    payment_response: dict[str, Any] | None


@dataclass
class ContractEvent:
    """One event of a contract's log (``GET /v1/contracts/{id}/events``)."""

    id: int
    kind: str
    data: dict[str, Any]

    @property
    def to_state(self) -> str | None:
        value = self.data.get("to_state")
        return value if isinstance(value, str) else None


@dataclass
class Hire:
    """A finished hire: the proposal, the execute answer, the contract as it ended and its
    verified receipt."""

    contract_id: str
    proposal: dict[str, Any]
    execute: ExecuteResult
    contract: dict[str, Any]
    receipt: Receipt | None = None
    events: list[ContractEvent] = field(default_factory=list)


def decode_x402_header(value: str) -> dict[str, Any]:
    """A ``PAYMENT-REQUIRED`` / ``PAYMENT-RESPONSE`` header: base64 of a JSON object."""
    decoded = json.loads(base64.b64decode(value))
    if not isinstance(decoded, dict):
        raise ValueError("x402 header is not a JSON object")
    return decoded


class SeekerClient:
    """A seeker's view of one gateway: its API key and, to pay, a wallet.

    ``wallet_private_key``: hex key of the paying EVM account (never logged). ``max_price``: the
    most (atomic units) one execute may pay. ``http``: an ``httpx.AsyncClient`` to use for API
    calls (timeouts, proxies)."""

    def __init__(
        self,
        gateway_url: str,
        api_key: str,
        *,
        wallet_private_key: str | None = None,
        max_price: int | None = None,
        http: httpx.AsyncClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base = gateway_url.rstrip("/") + "/"
        self._api_key = api_key
        self._wallet_key = wallet_private_key
        self.max_price = max_price
        self._timeout = timeout_s
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout_s)
        self._jwks: Jwks | None = None

    def __repr__(self) -> str:
        # The API key and the wallet key are credentials: never print them.
        return f"SeekerClient({self.base!r}, payer={self.payer!r})"

    async def __aenter__(self) -> SeekerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    @property
    def payer(self) -> str | None:
        """The address this client pays from (``None`` without a wallet)."""
        if self._wallet_key is None:
            return None
        from eth_account import Account

        return str(Account.from_key(self._wallet_key).address)

    def _auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"}

    def _url(self, path: str) -> str:
        return self.base + path.lstrip("/")

    async def _json(self, response: httpx.Response) -> Any:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        if response.is_success:
            return body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        raise GatewayError(
            response.status_code,
            str(error.get("code", "http_error")),
            str(error.get("message", response.text[:200])),
            body,
        )

    # ----- discovery and contracts ---------------------------------------------------------

    async def discover(
        self, *, task_type: str | None = None, max_price: int | None = None, healthy: bool | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """``GET /v1/workers``: the listings matching the filters (first page)."""
        params: dict[str, Any] = {key: value for key, value in filters.items() if value is not None}
        if task_type is not None:
            params["task_type"] = task_type
        if max_price is not None:
            params["max_price"] = str(max_price)
        if healthy is not None:
            params["healthy"] = "true" if healthy else "false"
        page = await self._json(await self._http.get(self._url("v1/workers"), params=params))
        workers: list[dict[str, Any]] = page["workers"]
        return workers

    async def propose(
        self,
        worker_id: str,
        task_type: str,
        task_input: Any,
        *,
        verification: dict[str, Any] | None = None,
        sla: dict[str, Any] | None = None,
        retry_policy: dict[str, Any] | None = None,
        acceptance_window_s: int | None = None,
        webhook_url: str | None = None,
        output_schema: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """``POST /v1/contracts``: the signed contract (``contract_id``, ``terms``,
        ``terms_hash``, ``gateway_jws``, ``payment.x402``)."""
        proposal: dict[str, Any] = {"worker_id": worker_id, "task_type": task_type, "input": task_input}
        optional = {
            "verification": verification,
            "sla": sla,
            "retry_policy": retry_policy,
            "acceptance_window_s": acceptance_window_s,
            "webhook_url": webhook_url,
            "output_schema": output_schema,
            **extra,
        }
        proposal.update({key: value for key, value in optional.items() if value is not None})
        created: dict[str, Any] = await self._json(
            await self._http.post(self._url("v1/contracts"), json=proposal, headers=self._auth())
        )
        return created

    async def contract(self, contract_id: str) -> dict[str, Any]:
        """``GET /v1/contracts/{id}``."""
        view: dict[str, Any] = await self._json(
            await self._http.get(self._url(f"v1/contracts/{contract_id}"), headers=self._auth())
        )
        return view

    async def verify_contract_token(self, contract: dict[str, Any]) -> ContractTokenClaims:
        """Checks a proposed contract's ``gateway_jws`` offline against the gateway's JWKS and
        that it binds the contract's id and ``terms_hash``."""
        claims = verify_contract_token(contract["gateway_jws"], await self.jwks())
        if claims.contract_id != contract["contract_id"] or claims.terms_hash != contract["terms_hash"]:
            raise ValueError("the contract token binds another contract or other terms")
        return claims

    # ----- paying --------------------------------------------------------------------------

    async def challenge(self, contract_id: str) -> dict[str, Any]:
        """The contract's x402 challenge (the 402's decoded ``PAYMENT-REQUIRED``), unpaid."""
        response = await self._http.post(self._url(f"v1/contracts/{contract_id}/execute"), headers=self._auth())
        header = response.headers.get(PAYMENT_REQUIRED_HEADER)
        if response.status_code != 402 or header is None:
            await self._json(response)
            raise GatewayError(response.status_code, "no_challenge", "the gateway did not ask for payment", None)
        return decode_x402_header(header)

    def _paying_client(self, offer: dict[str, Any]) -> httpx.AsyncClient:
        if self._wallet_key is None:
            raise ValueError("this client has no wallet to pay with")
        from eth_account import Account
        from x402 import x402Client
        from x402.http.clients.httpx import x402AsyncTransport
        from x402.mechanisms.evm.exact import register_exact_evm_client
        from x402.mechanisms.evm.signers import EthAccountSigner

        cap = int(offer["amount"]) if self.max_price is None else self.max_price
        client = x402Client()
        register_exact_evm_client(client, EthAccountSigner(Account.from_key(self._wallet_key)))
        client.set_spend_controls(
            {
                "allowed_assets": [
                    {"network": offer["network"], "asset": offer["asset"], "max_amount_per_payment": str(cap)}
                ]
            }
        )
        return httpx.AsyncClient(transport=x402AsyncTransport(client), timeout=self._timeout)

    async def execute(self, contract_id: str, *, headers: dict[str, str] | None = None) -> ExecuteResult:
        """``POST /v1/contracts/{id}/execute``, paying the 402 with the official x402 client when
        one comes. Refuses (:class:`SpendingGuardError`, nothing signed) a price above
        ``max_price``."""
        offer = (await self.challenge(contract_id))["accepts"][0]
        if self.max_price is not None and int(offer["amount"]) > self.max_price:
            raise SpendingGuardError(f"the contract asks {offer['amount']}, more than max_price {self.max_price}")
        async with self._paying_client(offer) as paying:
            response = await paying.post(
                self._url(f"v1/contracts/{contract_id}/execute"), headers={**self._auth(), **(headers or {})}
            )
        return _execute_result(response)

    async def execute_with_payment(self, contract_id: str, payment_signature: str) -> ExecuteResult:
        """Sends ``payment_signature`` (a ``PAYMENT-SIGNATURE`` value) as it is: for resending one
        payment on purpose (duplicates, replays)."""
        response = await self._http.post(
            self._url(f"v1/contracts/{contract_id}/execute"),
            headers={**self._auth(), "payment-signature": payment_signature},
        )
        return _execute_result(response)

    async def sign_payment(self, contract_id: str) -> str:
        """A ``PAYMENT-SIGNATURE`` value for the contract's challenge, signed by the official x402
        client but not sent."""
        challenge = await self.challenge(contract_id)
        offer = challenge["accepts"][0]
        if self.max_price is not None and int(offer["amount"]) > self.max_price:
            raise SpendingGuardError(f"the contract asks {offer['amount']}, more than max_price {self.max_price}")
        if self._wallet_key is None:
            raise ValueError("this client has no wallet to pay with")
        from eth_account import Account
        from x402 import x402Client
        from x402.http import x402HTTPClient
        from x402.mechanisms.evm.exact import register_exact_evm_client
        from x402.mechanisms.evm.signers import EthAccountSigner
        from x402.schemas import PaymentRequired

        client = x402Client()
        register_exact_evm_client(client, EthAccountSigner(Account.from_key(self._wallet_key)))
        client.set_spend_controls({"allowed_assets": [{"network": offer["network"], "asset": offer["asset"]}]})
        payload = await client.create_payment_payload(PaymentRequired.model_validate(challenge))
        headers: dict[str, str] = x402HTTPClient(client).encode_payment_signature_header(payload)
        return next(value for key, value in headers.items() if key.lower() == "payment-signature")

    # ----- following -----------------------------------------------------------------------

    async def events(self, contract_id: str, *, after: int | None = None) -> AsyncIterator[ContractEvent]:
        """The contract's events as they happen (SSE), from the one after ``after``. A dropped
        connection is resumed with ``Last-Event-ID``, so nothing is lost or repeated; the stream
        ends when the gateway closes it (the contract is terminal)."""
        last = after
        retries = 0
        while True:
            headers = self._auth()
            if last is not None:
                headers["last-event-id"] = str(last)
            try:
                async with httpx.AsyncClient(timeout=httpx.Timeout(self._timeout, read=None)) as client:
                    async with aconnect_sse(
                        client, "GET", self._url(f"v1/contracts/{contract_id}/events"), headers=headers
                    ) as source:
                        if not source.response.is_success:
                            await source.response.aread()
                            await self._json(source.response)
                        async for sse in source.aiter_sse():
                            if not sse.id:
                                continue
                            last = int(sse.id)
                            retries = 0
                            yield ContractEvent(id=last, kind=sse.event, data=json.loads(sse.data or "{}"))
                return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                retries += 1
                if retries > 5:
                    raise
                await asyncio.sleep(min(0.2 * 2**retries, 5.0))

    async def wait(
        self,
        contract_id: str,
        *,
        until: frozenset[str] | set[str] = FINAL_STATES,
        timeout_s: float = 120.0,
        use_events: bool = True,
        poll_interval_s: float = 0.5,
    ) -> dict[str, Any]:
        """Follows the contract until its state is in ``until`` (by SSE, or by polling with
        ``use_events=False``) and returns its view."""

        async def follow() -> dict[str, Any]:
            view = await self.contract(contract_id)
            if view["state"] in until:
                return view
            if use_events:
                async for event in self.events(contract_id):
                    if event.to_state in until:
                        return await self.contract(contract_id)
                return await self.contract(contract_id)
            while True:
                await asyncio.sleep(poll_interval_s)
                view = await self.contract(contract_id)
                if view["state"] in until:
                    return view

        return await asyncio.wait_for(follow(), timeout_s)

    # ----- receipts ------------------------------------------------------------------------

    async def jwks(self, *, refresh: bool = False) -> Jwks:
        """The gateway's JWKS (fetched once, kept)."""
        if self._jwks is None or refresh:
            self._jwks = Jwks.from_json(await self._json(await self._http.get(self._url(".well-known/jwks.json"))))
        return self._jwks

    async def receipt(self, contract_id: str) -> str:
        """``GET /v1/contracts/{id}/receipt``: the compact JWS (409 ``contract_not_terminal``
        while the contract can still change)."""
        body = await self._json(
            await self._http.get(self._url(f"v1/contracts/{contract_id}/receipt"), headers=self._auth())
        )
        token: str = body["receipt"]
        return token

    async def verified_receipt(self, contract_id: str, *, terms_hash: str | None = None) -> Receipt:
        """The contract's receipt, verified offline against the JWKS, about this contract (and
        these terms, when given)."""
        token = await self.receipt(contract_id)
        try:
            return verify_receipt(token, await self.jwks(), contract_id=contract_id, terms_hash=terms_hash)
        except Exception:
            # A key rotated in since the JWKS was fetched: fetch it again, once.
            return verify_receipt(token, await self.jwks(refresh=True), contract_id=contract_id, terms_hash=terms_hash)

    # ----- the whole hire ------------------------------------------------------------------

    async def hire(self, worker_id: str, task_type: str, task_input: Any, **proposal: Any) -> Hire:
        """Proposes, checks the contract token, pays, follows the contract to its end and verifies
        its receipt offline."""
        created = await self.propose(worker_id, task_type, task_input, **proposal)
        contract_id = created["contract_id"]
        await self.verify_contract_token(created)
        result = await self.execute(contract_id)
        contract = await self.wait(contract_id)
        receipt = None
        if contract["state"] in TERMINAL_STATES:
            receipt = await self.verified_receipt(contract_id, terms_hash=created["terms_hash"])
        return Hire(contract_id, created, result, contract, receipt)

    # ----- disputes and webhooks -----------------------------------------------------------

    async def open_dispute(self, contract_id: str, reason: str, claim: Any | None = None) -> dict[str, Any]:
        """``POST /v1/contracts/{id}/disputes``."""
        body: dict[str, Any] = {"reason": reason}
        if claim is not None:
            body["claim"] = claim
        dispute: dict[str, Any] = await self._json(
            await self._http.post(self._url(f"v1/contracts/{contract_id}/disputes"), json=body, headers=self._auth())
        )
        return dispute

    async def create_webhook_secret(self) -> str:
        """``POST /v1/webhooks/secret``: a new signing secret (``whsec_…``) for this seeker's
        webhooks, shown once (the previous one stops signing). Verify deliveries with
        :class:`hiregate.WebhookSecret`."""
        body = await self._json(await self._http.post(self._url("v1/webhooks/secret"), headers=self._auth()))
        secret: str = body["secret"]
        return secret


def _execute_result(response: httpx.Response) -> ExecuteResult:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = response.text
    header = response.headers.get(PAYMENT_RESPONSE_HEADER)
    return ExecuteResult(
        status=response.status_code,
        body=body,
        payment_response=decode_x402_header(header) if header else None,
    )
