"""hiregate: publish an agent behind the hiregate gateway (HIRE worker), and hire agents through
it (seeker), paying with x402.

Worker side: :class:`Worker`, :class:`TaskContext`, the outcomes (:func:`json_output`,
:func:`text_output`, :func:`failed`, :func:`pending`, :func:`stream`, :func:`partial`,
:class:`TaskFailed`), :class:`GatewayKeys`, :class:`CallbackConfig`, :class:`Verdict`.
Seeker side: :class:`SeekerClient`, :func:`verify_receipt`, :class:`WebhookSecret`.
"""

from .callbacks import CallbackConfig
from .canonical import canonical_json, digest_of_bytes, policy_hash
from .outcomes import (
    StreamEvent,
    TaskFailed,
    TaskOutcome,
    failed,
    json_output,
    output,
    partial,
    pending,
    stream,
    text_output,
)
from .protocol import FileOutput, JsonOutput, MultipleOutput, PriceInfo, Progress, StreamOutput, TextOutput
from .receipts import Receipt, ReceiptError, verify_receipt
from .seeker import ContractEvent, ExecuteResult, GatewayError, Hire, SeekerClient, SpendingGuardError
from .serve import serve
from .tokens import ContractTokenClaims, GatewayKeys, Jwks, KeysUnavailable, TokenError, verify_contract_token
from .verify import Verdict, VerifyRequest, verifier_result_hash
from .webhooks import VerifiedWebhook, WebhookError, WebhookSecret
from .worker import TaskContext, Worker

__version__ = "0.1.0"

__all__ = [
    "CallbackConfig",
    "ContractEvent",
    "ContractTokenClaims",
    "ExecuteResult",
    "FileOutput",
    "GatewayError",
    "GatewayKeys",
    "Hire",
    "JsonOutput",
    "Jwks",
    "KeysUnavailable",
    "MultipleOutput",
    "PriceInfo",
    "Progress",
    "Receipt",
    "ReceiptError",
    "SeekerClient",
    "SpendingGuardError",
    "StreamEvent",
    "StreamOutput",
    "TaskContext",
    "TaskFailed",
    "TaskOutcome",
    "TextOutput",
    "TokenError",
    "Verdict",
    "VerifiedWebhook",
    "VerifyRequest",
    "WebhookError",
    "WebhookSecret",
    "Worker",
    "canonical_json",
    "digest_of_bytes",
    "failed",
    "json_output",
    "output",
    "partial",
    "pending",
    "policy_hash",
    "serve",
    "stream",
    "text_output",
    "verifier_result_hash",
    "verify_contract_token",
    "verify_receipt",
]
