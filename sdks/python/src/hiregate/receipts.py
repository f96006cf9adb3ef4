"""Offline check of a gateway receipt: the signed statement of how a contract ended (terms hash,
payment, deliverable digests, policy and verifier result hashes, outcome, dispute decision).

Fetch the gateway's JWKS once (``/.well-known/jwks.json``) and keep it: a receipt signed by a key
rotated out of signing still verifies while that key is published.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .tokens import ISSUER, RECEIPT_TOKEN_TYPE, Jwks, TokenError, verify_signed_json

#: States a contract cannot leave; a receipt names one of them.
TERMINAL_STATES = frozenset(
    {"settled", "settlement_failed", "expired", "failed", "cancelled", "voided", "refunded"}
)


class ReceiptError(Exception):
    """A receipt did not verify. ``reason``: a :class:`~hiregate.tokens.TokenError` reason, or
    ``malformed``, ``wrong_issuer``, ``not_terminal``, ``wrong_contract``, ``wrong_terms``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ReceiptPayment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str
    asset: str
    payer: str
    nonce: str
    amount: str
    tx_hash: str | None


class ReceiptDispute(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dispute_id: str
    decision: Literal["settle", "void"]
    decided_by: str
    reason: str


class Receipt(BaseModel):
    """What a receipt states. Field names are the wire format."""

    model_config = ConfigDict(extra="forbid")
    iss: str
    sub: str
    iat: int
    terms_hash: str
    outcome: str
    payment: ReceiptPayment | None
    deliverable_digests: list[str]
    policy_hash: str | None
    verifier_result_hash: str | None
    verification_status: str | None
    dispute: ReceiptDispute | None

    @property
    def contract_id(self) -> str:
        return self.sub


def verify_receipt(
    token: str,
    jwks: Jwks | dict[str, Any],
    *,
    contract_id: str | None = None,
    terms_hash: str | None = None,
) -> Receipt:
    """Verifies ``token`` (a compact JWS) against ``jwks``: EdDSA signature by a published key,
    receipt ``typ``, gateway issuer, a terminal outcome, exactly the receipt's fields; and, when
    given, that it is about ``contract_id`` with ``terms_hash``."""
    keys = jwks if isinstance(jwks, Jwks) else Jwks.from_json(jwks)
    try:
        claims = verify_signed_json(token.strip(), keys, RECEIPT_TOKEN_TYPE)
    except TokenError as error:
        raise ReceiptError(error.reason, f"receipt does not verify: {error}") from error
    try:
        receipt = Receipt.model_validate(claims)
    except ValidationError as error:
        raise ReceiptError("malformed", f"receipt claims are not a receipt: {error}") from error
    if receipt.iss != ISSUER:
        raise ReceiptError("wrong_issuer", f"receipt issuer is {receipt.iss!r}, expected {ISSUER!r}")
    if receipt.outcome not in TERMINAL_STATES:
        raise ReceiptError("not_terminal", f"receipt outcome {receipt.outcome!r} is not a terminal state")
    if contract_id is not None and receipt.sub != contract_id:
        raise ReceiptError("wrong_contract", f"the receipt is about {receipt.sub}, not {contract_id}")
    if terms_hash is not None and receipt.terms_hash != terms_hash:
        raise ReceiptError("wrong_terms", "the receipt binds other terms than the contract's terms_hash")
    return receipt
