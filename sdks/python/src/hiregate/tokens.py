"""The gateway's signatures, checked offline against its JWKS (``/.well-known/jwks.json``).

Every gateway token is a compact JWS signed with Ed25519 (``alg: EdDSA``) under a ``kid`` the JWKS
publishes, and tagged by its JWS ``typ`` so one kind can never pass as another:

- contract tokens (``hiregate-contract+jwt``): sent as ``Authorization: Bearer`` on every call the
  gateway makes to a worker, and returned to the seeker as ``gateway_jws``; claims ``iss``
  (``hiregate``), ``sub`` = ``contract_id``, ``iat``, ``exp``, ``terms_hash``, ``seeker``,
  ``worker``;
- receipts (``hiregate-receipt+jwt``): see :mod:`hiregate.receipts`.

:class:`GatewayKeys` holds the keys: a fixed set, or fetched from the gateway and cached, fetched
again when a token names a key id the cache does not know (key rotation), at most once per
``min_refresh_interval`` so made-up key ids cannot make the worker hammer the gateway.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

log = logging.getLogger("hiregate.tokens")

CONTRACT_TOKEN_TYPE = "hiregate-contract+jwt"
RECEIPT_TOKEN_TYPE = "hiregate-receipt+jwt"
ISSUER = "hiregate"
#: Clock skew tolerated when checking ``exp`` and ``iat``, seconds (as the gateway does).
CLOCK_SKEW_LEEWAY_S = 30
DEFAULT_MIN_REFRESH_INTERVAL_S = 30.0
DEFAULT_MAX_JWKS_AGE_S = 3600.0
MAX_JWKS_BYTES = 256 * 1024
JWKS_FETCH_TIMEOUT_S = 10.0


class TokenError(Exception):
    """A gateway token did not verify. ``reason`` is a stable word: ``malformed``,
    ``wrong_algorithm``, ``wrong_type``, ``missing_key_id``, ``unknown_key_id``,
    ``unusable_key``, ``invalid_signature``, ``expired``, ``not_yet_valid``, ``wrong_issuer``,
    ``subject_mismatch``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class KeysUnavailable(Exception):
    """The gateway's keys could not be fetched, so no token can be checked right now."""


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Jwks:
    """A JSON Web Key Set: ``{"keys": [...]}``."""

    keys: tuple[dict[str, Any], ...]

    @classmethod
    def from_json(cls, document: Any) -> Jwks:
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError("a JWKS is an object with a 'keys' list")
        return cls(tuple(key for key in document["keys"] if isinstance(key, dict)))

    def key_ids(self) -> list[str]:
        return [str(key["kid"]) for key in self.keys if "kid" in key]

    def public_key(self, kid: str) -> Ed25519PublicKey:
        """The Ed25519 key published under ``kid``."""
        for key in self.keys:
            if key.get("kid") == kid:
                if key.get("kty") != "OKP" or key.get("crv") != "Ed25519" or key.get("alg", "EdDSA") != "EdDSA":
                    raise TokenError("unusable_key", f"JWKS key {kid!r} is not an Ed25519 (OKP) key")
                try:
                    raw = _b64url_decode(str(key.get("x", "")))
                except ValueError as error:
                    raise TokenError("unusable_key", f"JWKS key {kid!r}: {error}") from error
                if len(raw) != 32:
                    raise TokenError("unusable_key", f"JWKS key {kid!r} is not 32 bytes")
                return Ed25519PublicKey.from_public_bytes(raw)
        raise TokenError("unknown_key_id", f"no key {kid!r} in the JWKS")


def verify_signed_json(token: str, jwks: Jwks, token_type: str) -> dict[str, Any]:
    """Checks a gateway JWS (EdDSA, ``typ``, a ``kid`` the JWKS has, the signature) and returns its
    payload. Time claims are left to the caller."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise TokenError("malformed", f"malformed token: {error}") from error
    if header.get("alg") != "EdDSA":
        raise TokenError("wrong_algorithm", "token algorithm must be EdDSA")
    if header.get("typ") != token_type:
        raise TokenError("wrong_type", f"token type is {header.get('typ')!r}, expected {token_type!r}")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise TokenError("missing_key_id", "token header has no kid")
    key = jwks.public_key(kid)
    try:
        payload = jwt.decode(
            token,
            key,
            algorithms=["EdDSA"],
            options={
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
                "verify_sub": False,
                "verify_jti": False,
                "require": [],
            },
        )
    except jwt.InvalidSignatureError as error:
        raise TokenError("invalid_signature", "token signature is invalid") from error
    except jwt.PyJWTError as error:
        raise TokenError("malformed", f"malformed token: {error}") from error
    if not isinstance(payload, dict):
        raise TokenError("malformed", "token payload is not a JSON object")
    return payload


@dataclass(frozen=True)
class ContractTokenClaims:
    """What a contract token states."""

    contract_id: str
    terms_hash: str
    seeker: str
    worker: str
    issued_at: int
    expires_at: int


def verify_contract_token(token: str, jwks: Jwks, now: float | None = None) -> ContractTokenClaims:
    """Verifies a contract token offline: signature by a key in ``jwks``, type, issuer, subject,
    and that ``now`` lies between ``iat`` and ``exp`` (with :data:`CLOCK_SKEW_LEEWAY_S`)."""
    claims = verify_signed_json(token, jwks, CONTRACT_TOKEN_TYPE)
    try:
        parsed = ContractTokenClaims(
            contract_id=_id_claim(claims, "contract_id", "ctr"),
            terms_hash=_digest_claim(claims, "terms_hash"),
            seeker=_id_claim(claims, "seeker", "skr"),
            worker=_id_claim(claims, "worker", "wk"),
            issued_at=_int_claim(claims, "iat"),
            expires_at=_int_claim(claims, "exp"),
        )
        subject = _id_claim(claims, "sub", "ctr")
        issuer = _str_claim(claims, "iss")
    except (KeyError, TypeError) as error:
        raise TokenError("malformed", f"malformed token claims: {error}") from error
    if issuer != ISSUER:
        raise TokenError("wrong_issuer", f"token issuer is not {ISSUER!r}")
    if subject != parsed.contract_id:
        raise TokenError("subject_mismatch", "token subject does not match its contract_id")
    now_s = int(time.time() if now is None else now)
    if now_s >= parsed.expires_at + CLOCK_SKEW_LEEWAY_S:
        raise TokenError("expired", f"token expired at {parsed.expires_at}")
    if now_s + CLOCK_SKEW_LEEWAY_S < parsed.issued_at:
        raise TokenError("not_yet_valid", "token is not valid yet")
    return parsed


_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$", re.IGNORECASE)
_DIGEST = re.compile(r"^sha256:[0-9a-fA-F]{64}$")


def parse_prefixed_id(raw: str, prefix: str) -> str:
    """``<prefix>_<ULID>`` in its canonical (upper-case) spelling; ``ValueError`` otherwise."""
    head, sep, body = raw.partition("_")
    if head != prefix or not sep or not _ULID.match(body):
        raise ValueError(f"not a {prefix}_<ULID> identifier")
    return f"{prefix}_{body.upper()}"


def _id_claim(claims: dict[str, Any], name: str, prefix: str) -> str:
    try:
        return parse_prefixed_id(_str_claim(claims, name), prefix)
    except ValueError as error:
        raise TypeError(f"claim {name}: {error}") from error


def _digest_claim(claims: dict[str, Any], name: str) -> str:
    value = _str_claim(claims, name)
    if not _DIGEST.match(value):
        raise TypeError(f"claim {name} must be sha256:<64 hex>")
    return value.lower()


def _str_claim(claims: dict[str, Any], name: str) -> str:
    value = claims[name]
    if not isinstance(value, str):
        raise TypeError(f"claim {name} must be a string")
    return value


def _int_claim(claims: dict[str, Any], name: str) -> int:
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"claim {name} must be an integer")
    return value


class GatewayKeys:
    """Where a worker gets the gateway's public keys: :meth:`fixed` or :meth:`remote`."""

    def __init__(
        self,
        *,
        jwks: Jwks | None = None,
        url: str | None = None,
        min_refresh_interval_s: float = DEFAULT_MIN_REFRESH_INTERVAL_S,
        max_age_s: float = DEFAULT_MAX_JWKS_AGE_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if (jwks is None) == (url is None):
            raise ValueError("give exactly one of jwks and url")
        self._fixed = jwks
        self._url = url
        self._min_refresh = min_refresh_interval_s
        self._max_age = max_age_s
        self._http = http
        self._cached: Jwks | None = None
        self._fetched_at = 0.0
        self._lock: asyncio.Lock | None = None

    @classmethod
    def fixed(cls, jwks: Jwks | dict[str, Any]) -> GatewayKeys:
        """A fixed key set (configuration or tests); never fetched."""
        return cls(jwks=jwks if isinstance(jwks, Jwks) else Jwks.from_json(jwks))

    @classmethod
    def remote(
        cls,
        jwks_url: str,
        *,
        min_refresh_interval_s: float = DEFAULT_MIN_REFRESH_INTERVAL_S,
        max_age_s: float = DEFAULT_MAX_JWKS_AGE_S,
        http: httpx.AsyncClient | None = None,
    ) -> GatewayKeys:
        """Keys fetched from ``jwks_url`` (``<gateway>/.well-known/jwks.json``) on first use, cached,
        fetched again after ``max_age_s`` and when a token names an unknown key id (at most once
        per ``min_refresh_interval_s``)."""
        return cls(url=jwks_url, min_refresh_interval_s=min_refresh_interval_s, max_age_s=max_age_s, http=http)

    async def verify_contract_token(self, token: str) -> ContractTokenClaims:
        """Verifies ``token`` against the current keys. Raises :class:`TokenError` or
        :class:`KeysUnavailable`."""
        if self._fixed is not None:
            return verify_contract_token(token, self._fixed)
        jwks, fetched_at = await self._current()
        try:
            return verify_contract_token(token, jwks)
        except TokenError as error:
            if error.reason != "unknown_key_id" or time.monotonic() - fetched_at < self._min_refresh:
                raise
        jwks, _ = await self._fetch_unless_newer_than(fetched_at)
        return verify_contract_token(token, jwks)

    async def jwks(self) -> Jwks:
        """The current key set (fetched if needed)."""
        if self._fixed is not None:
            return self._fixed
        jwks, _ = await self._current()
        return jwks

    async def _current(self) -> tuple[Jwks, float]:
        if self._cached is not None and time.monotonic() - self._fetched_at < self._max_age:
            return self._cached, self._fetched_at
        try:
            return await self._fetch_unless_newer_than(self._fetched_at if self._cached else -1.0)
        except KeysUnavailable:
            if self._cached is not None:
                log.warning("using an expired gateway JWKS; refetch failed")
                return self._cached, self._fetched_at
            raise

    async def _fetch_unless_newer_than(self, seen: float) -> tuple[Jwks, float]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._cached is not None and self._fetched_at > seen:
                return self._cached, self._fetched_at
            jwks = await self._fetch()
            self._cached, self._fetched_at = jwks, time.monotonic()
            return jwks, self._fetched_at

    async def _fetch(self) -> Jwks:
        assert self._url is not None
        try:
            if self._http is not None:
                response = await self._http.get(self._url, timeout=JWKS_FETCH_TIMEOUT_S)
            else:
                async with httpx.AsyncClient(timeout=JWKS_FETCH_TIMEOUT_S) as client:
                    response = await client.get(self._url)
            response.raise_for_status()
            if len(response.content) > MAX_JWKS_BYTES:
                raise KeysUnavailable("JWKS document too large")
            return Jwks.from_json(json.loads(response.content))
        except (httpx.HTTPError, ValueError) as error:
            raise KeysUnavailable(f"gateway keys unavailable: {error}") from error
