/**
 * `POST /verify`: a worker as a WattSwarm cross-check verifier (`seeds/wattswarm-verify-endpoint.txt`).
 * The author judges a {@link VerifyRequest} and returns a {@link Verdict}; the SDK checks the
 * request (a known policy whose `policy_hash` is `sha256(policy_id ‖ JCS(policy_params))`) and
 * answers the seed's VerifyResponse with `verifier_result_hash = sha256(JCS({candidate_id,
 * execution_id, passed, score, reason_codes, provider_family, model_id, policy_hash}))`, the
 * RFC 8785 form the gateway recomputes.
 */
import { digestOfCanonical, policyHash } from "./canonical.js";

export const KNOWN_POLICIES = ["vp.schema_only.v1", "vp.schema_thresholds.v1", "vp.crosscheck.v1"];
export const POLICY_VERSION = "1";

export type VerificationStatus = "passed" | "failed" | "inconclusive";

export interface VerifyRequest {
  candidate: {
    candidate_id: string;
    execution_id: string;
    output_ref?: Record<string, unknown>;
    output: unknown;
    evidence_inline?: Array<{ mime: string; content: unknown }>;
    evidence_refs?: Array<Record<string, unknown>>;
  };
  output_schema: unknown;
  policy: { policy_id: string; policy_version: string; policy_hash: string; policy_params: Record<string, unknown> };
}

export interface Verdict {
  passed: boolean;
  score: number;
  reasonCodes?: number[];
  status?: VerificationStatus;
}

export const Verdict = {
  pass: (score = 1): Verdict => ({ passed: true, score, reasonCodes: [], status: "passed" }),
  fail: (score: number, reasonCodes: number[]): Verdict => ({ passed: false, score, reasonCodes, status: "failed" }),
  inconclusive: (reasonCodes: number[]): Verdict => ({ passed: false, score: 0, reasonCodes, status: "inconclusive" }),
};

export type VerifyHandler = (request: VerifyRequest) => Promise<Verdict> | Verdict;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Why `body` is not the seed's VerifyRequest (`undefined` when it is). */
export function verifyRequestProblem(body: unknown): string | undefined {
  if (!isObject(body)) return "the body is not a JSON object";
  const { candidate, policy } = body;
  if (!isObject(candidate)) return "candidate is required";
  if (typeof candidate.candidate_id !== "string" || typeof candidate.execution_id !== "string") {
    return "candidate.candidate_id and candidate.execution_id are strings";
  }
  if (!("output" in candidate)) return "candidate.output is required";
  if (!("output_schema" in body)) return "output_schema is required";
  if (!isObject(policy)) return "policy is required";
  for (const field of ["policy_id", "policy_version", "policy_hash"]) {
    if (typeof policy[field] !== "string") return `policy.${field} is a string`;
  }
  if (!isObject(policy.policy_params)) return "policy.policy_params is an object";
  const extra = Object.keys(policy).filter((key) => !["policy_id", "policy_version", "policy_hash", "policy_params"].includes(key));
  if (extra.length) return `unknown policy field(s) ${extra.join(", ")}`;
  return undefined;
}

/** Why the binding cannot be applied (`undefined` when it can). */
export function policyProblem(policy: VerifyRequest["policy"]): string | undefined {
  if (!KNOWN_POLICIES.includes(policy.policy_id)) return `unknown policy ${policy.policy_id}`;
  if (policy.policy_version !== POLICY_VERSION) return `unsupported policy version ${policy.policy_version}`;
  const expected = policyHash(policy.policy_id, policy.policy_params);
  if (policy.policy_hash !== expected) {
    return `policy_hash ${policy.policy_hash} does not match the policy id and params (expected ${expected})`;
  }
  return undefined;
}

export function verifierResultHash(fields: {
  candidate_id: string;
  execution_id: string;
  passed: boolean;
  score: number;
  reason_codes: number[];
  provider_family: string;
  model_id: string;
  policy_hash: string;
}): string {
  return digestOfCanonical({
    candidate_id: fields.candidate_id,
    execution_id: fields.execution_id,
    passed: fields.passed,
    score: fields.score,
    reason_codes: fields.reason_codes,
    provider_family: fields.provider_family,
    model_id: fields.model_id,
    policy_hash: fields.policy_hash,
  });
}

/** The seed's VerifyResponse for `verdict` on `request`. */
export function verifyResponse(request: VerifyRequest, verdict: Verdict, providerFamily: string, modelId: string) {
  const raw = Number(verdict.score);
  const score = Number.isFinite(raw) ? Math.min(Math.max(raw, 0), 1) : 0;
  const status: VerificationStatus = verdict.status ?? (verdict.passed ? "passed" : "failed");
  // A vote saying both "passed" and "failed" would be counted inconsistently: the status decides.
  const passed = status === "passed";
  const reasonCodes = (verdict.reasonCodes ?? []).map((code) => {
    if (!Number.isInteger(code) || code < 0 || code > 0xffff) throw new RangeError(`reason code ${code} is not a u16`);
    return code;
  });
  return {
    passed,
    score,
    reason_codes: reasonCodes,
    verification_status: status,
    verifier_result_hash: verifierResultHash({
      candidate_id: request.candidate.candidate_id,
      execution_id: request.candidate.execution_id,
      passed,
      score,
      reason_codes: reasonCodes,
      provider_family: providerFamily,
      model_id: modelId,
      policy_hash: request.policy.policy_hash,
    }),
    provider_family: providerFamily,
    model_id: modelId,
  };
}
