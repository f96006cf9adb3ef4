"""``POST /verify``: a worker as a WattSwarm cross-check verifier
(``seeds/wattswarm-verify-endpoint.txt``), so it can vote in a ``vp.crosscheck.v1`` quorum.

The author writes an async function judging a :class:`VerifyRequest` and returning a
:class:`Verdict`; the SDK checks the request (the seed's shape, a known policy whose
``policy_hash`` is ``sha256(policy_id ‖ JCS(policy_params))``: the handler never sees a binding
whose hash does not match its parameters) and answers the seed's VerifyResponse with the worker's
``provider_family`` and ``model_id`` and ``verifier_result_hash = sha256(JCS({candidate_id,
execution_id, passed, score, reason_codes, provider_family, model_id, policy_hash}))``, the RFC 8785
form the gateway recomputes.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .canonical import digest_of_canonical, policy_hash

KNOWN_POLICIES = ("vp.schema_only.v1", "vp.schema_thresholds.v1", "vp.crosscheck.v1")
POLICY_VERSION = "1"

VerificationStatus = Literal["passed", "failed", "inconclusive"]


class ArtifactRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    uri: str
    digest: str


class InlineEvidence(BaseModel):
    model_config = ConfigDict(extra="allow")
    mime: str
    content: Any


class Candidate(BaseModel):
    model_config = ConfigDict(extra="allow")
    candidate_id: str
    execution_id: str
    output_ref: ArtifactRef | None = None
    output: Any
    evidence_inline: list[InlineEvidence] = []
    evidence_refs: list[ArtifactRef] = []


class PolicyBinding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy_id: str
    policy_version: str
    policy_hash: str
    policy_params: dict[str, Any]


class VerifyRequest(BaseModel):
    """The seed's VerifyRequest."""

    model_config = ConfigDict(extra="allow")
    candidate: Candidate
    output_schema: Any
    policy: PolicyBinding


@dataclass
class Verdict:
    """A verify handler's judgement. ``score`` is clamped to [0, 1]; ``status`` decides
    ``passed`` when given."""

    passed: bool
    score: float
    reason_codes: list[int] = field(default_factory=list)
    status: VerificationStatus | None = None

    @classmethod
    def passing(cls, score: float = 1.0) -> Verdict:
        return cls(True, score, [], "passed")

    @classmethod
    def failing(cls, score: float, reason_codes: list[int]) -> Verdict:
        return cls(False, score, list(reason_codes), "failed")

    @classmethod
    def inconclusive(cls, reason_codes: list[int]) -> Verdict:
        return cls(False, 0.0, list(reason_codes), "inconclusive")


VerifyHandler = Callable[[VerifyRequest], Awaitable[Verdict]]


class PolicyBindingError(ValueError):
    pass


def check_binding(binding: PolicyBinding) -> None:
    """A known policy, version 1, and a hash that is the hash of its id and parameters."""
    if binding.policy_id not in KNOWN_POLICIES:
        raise PolicyBindingError(f"unknown policy {binding.policy_id!r}")
    if binding.policy_version != POLICY_VERSION:
        raise PolicyBindingError(f"unsupported policy version {binding.policy_version!r}")
    expected = policy_hash(binding.policy_id, binding.policy_params)
    if binding.policy_hash != expected:
        raise PolicyBindingError(
            f"policy_hash {binding.policy_hash} does not match the policy id and params (expected {expected})"
        )


def verifier_result_hash(
    *,
    candidate_id: str,
    execution_id: str,
    passed: bool,
    score: float,
    reason_codes: list[int],
    provider_family: str,
    model_id: str,
    policy_hash: str,
) -> str:
    """``sha256(JCS({candidate_id, execution_id, passed, score, reason_codes, provider_family,
    model_id, policy_hash}))``."""
    return digest_of_canonical(
        {
            "candidate_id": candidate_id,
            "execution_id": execution_id,
            "passed": passed,
            "score": score,
            "reason_codes": reason_codes,
            "provider_family": provider_family,
            "model_id": model_id,
            "policy_hash": policy_hash,
        }
    )


def verify_response(request: VerifyRequest, verdict: Verdict, provider_family: str, model_id: str) -> dict[str, Any]:
    """The seed's VerifyResponse for ``verdict`` on ``request``."""
    score = float(verdict.score)
    score = min(max(score, 0.0), 1.0) if math.isfinite(score) else 0.0
    status: VerificationStatus = verdict.status or ("passed" if verdict.passed else "failed")
    # A vote saying both "passed" and "failed" would be counted inconsistently: the status decides.
    passed = status == "passed"
    codes = [int(code) for code in verdict.reason_codes]
    for code in codes:
        if not 0 <= code <= 0xFFFF:
            raise ValueError(f"reason code {code} is not a u16")
    return {
        "passed": passed,
        "score": score,
        "reason_codes": codes,
        "verification_status": status,
        "verifier_result_hash": verifier_result_hash(
            candidate_id=request.candidate.candidate_id,
            execution_id=request.candidate.execution_id,
            passed=passed,
            score=score,
            reason_codes=codes,
            provider_family=provider_family,
            model_id=model_id,
            policy_hash=request.policy.policy_hash,
        ),
        "provider_family": provider_family,
        "model_id": model_id,
    }
