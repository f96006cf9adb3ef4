"""Canonical JSON (RFC 8785, JCS) and the ``sha256:`` digests the gateway binds in its signatures.

The gateway hashes terms, policies and verifier results over the RFC 8785 form of a JSON value, so
two parties that agree on a value agree on its hash whatever the key order or number spelling.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

DIGEST_PREFIX = "sha256:"


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 (JCS) bytes of ``value``."""
    return bytes(rfc8785.dumps(value))


def digest_of_bytes(data: bytes) -> str:
    """``sha256:<lower-case hex>`` of ``data`` (the form of HIRE checksums and gateway digests)."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def digest_of_canonical(value: Any) -> str:
    """``sha256:`` of the canonical JSON of ``value``."""
    return digest_of_bytes(canonical_json(value))


def policy_hash(policy_id: str, policy_params: Any) -> str:
    """``sha256(policy_id ‖ JCS(policy_params))``: the hash a policy binding carries."""
    return digest_of_bytes(policy_id.encode() + canonical_json(policy_params))
