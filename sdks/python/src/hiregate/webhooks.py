"""Standard Webhooks signatures (https://www.standardwebhooks.com), symmetric ``v1`` scheme.

The signed content is ``{webhook-id}.{webhook-timestamp}.{body}``, MAC'd with HMAC-SHA256 under
the shared secret (``whsec_<base64>``) and sent as ``webhook-signature: v1,<base64 mac>``; the
header may list several space-separated signatures (key rotation), one match is enough.

Workers sign their completion callbacks to the gateway with the per-worker secret the gateway
issued at registration; seekers verify the gateway's webhooks with their webhook secret.
Remembering seen ``webhook-id`` values (replay protection beyond the time window) is the
receiver's job.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
#: How far a timestamp may be from the receiver's clock, either way (the standard's advice).
DEFAULT_TOLERANCE_S = 5 * 60
SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64


class WebhookError(Exception):
    """A webhook was refused. ``reason``: ``missing_header``, ``invalid_header``,
    ``timestamp_too_old``, ``timestamp_too_new``, ``no_matching_signature``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class VerifiedWebhook:
    """What a successful verification vouches for."""

    id: str
    timestamp: int


class WebhookSecret:
    """A shared signing secret. Its ``repr`` never shows the key."""

    def __init__(self, key: bytes) -> None:
        if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
            raise ValueError(f"webhook secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, got {len(key)}")
        self._key = key

    @classmethod
    def parse(cls, text: str) -> WebhookSecret:
        """A secret from its text form ``whsec_<base64>``."""
        text = text.strip()
        if not text.startswith(SECRET_PREFIX):
            raise ValueError('webhook secret must start with "whsec_"')
        try:
            key = base64.b64decode(text[len(SECRET_PREFIX) :], validate=True)
        except ValueError as error:
            raise ValueError('webhook secret is not valid base64 after "whsec_"') from error
        return cls(key)

    @classmethod
    def generate(cls) -> WebhookSecret:
        return cls(os.urandom(32))

    def expose_whsec(self) -> str:
        """The text form, to hand to the other party. Treat it as the secret it is."""
        return SECRET_PREFIX + base64.b64encode(self._key).decode()

    def __repr__(self) -> str:
        return "WebhookSecret(<redacted>)"

    def _mac(self, msg_id: str, timestamp: int, body: bytes) -> bytes:
        signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
        return hmac.new(self._key, signed, hashlib.sha256).digest()

    def sign(self, msg_id: str, timestamp: int, body: bytes) -> str:
        """The ``webhook-signature`` value (``v1,<base64>``) of this message."""
        return "v1," + base64.b64encode(self._mac(msg_id, timestamp, body)).decode()

    def sign_headers(self, msg_id: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        """The three Standard Webhooks headers of this message, sent now unless ``timestamp``."""
        ts = int(time.time()) if timestamp is None else timestamp
        return {HEADER_ID: msg_id, HEADER_TIMESTAMP: str(ts), HEADER_SIGNATURE: self.sign(msg_id, ts, body)}

    def verify(
        self,
        headers: Mapping[str, str],
        body: bytes,
        *,
        now: float | None = None,
        tolerance_s: int = DEFAULT_TOLERANCE_S,
    ) -> VerifiedWebhook:
        """Verifies a received webhook: headers present, timestamp within ``tolerance_s`` of
        ``now`` either way, one ``v1`` signature matching (compared in constant time). Header
        names are matched case-insensitively."""
        lowered = {key.lower(): value for key, value in headers.items()}

        def header(name: str) -> str:
            if name not in lowered:
                raise WebhookError("missing_header", f"missing header {name}")
            return lowered[name]

        msg_id, raw_ts, signatures = header(HEADER_ID), header(HEADER_TIMESTAMP), header(HEADER_SIGNATURE)
        try:
            timestamp = int(raw_ts.strip())
        except ValueError as error:
            raise WebhookError("invalid_header", f"malformed header {HEADER_TIMESTAMP}") from error
        age = int(time.time() if now is None else now) - timestamp
        if age > tolerance_s:
            raise WebhookError("timestamp_too_old", "webhook timestamp is too old")
        if age < -tolerance_s:
            raise WebhookError("timestamp_too_new", "webhook timestamp is in the future")
        expected = self._mac(msg_id, timestamp, body)
        for entry in signatures.split(" "):
            if not entry.startswith("v1,"):
                continue
            try:
                candidate = base64.b64decode(entry[3:], validate=True)
            except ValueError:
                continue
            if hmac.compare_digest(candidate, expected):
                return VerifiedWebhook(id=msg_id, timestamp=timestamp)
        raise WebhookError("no_matching_signature", "no webhook signature matched")
