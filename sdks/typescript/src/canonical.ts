/**
 * Canonical JSON (RFC 8785, JCS) and the `sha256:` digests the gateway binds in its signatures:
 * terms, policies and verifier results are hashed over the RFC 8785 form, so two parties that
 * agree on a value agree on its hash whatever the key order or number spelling.
 */
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";

export const DIGEST_PREFIX = "sha256:";

/** The RFC 8785 (JCS) text of `value`. */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) {
    throw new TypeError("value has no JSON form");
  }
  return text;
}

/** `sha256:<lower-case hex>` of `data` (HIRE checksums, gateway digests). */
export function digestOfBytes(data: Uint8Array | string): string {
  return DIGEST_PREFIX + createHash("sha256").update(data).digest("hex");
}

/** `sha256:` of the canonical JSON of `value`. */
export function digestOfCanonical(value: unknown): string {
  return digestOfBytes(canonicalJson(value));
}

/** `sha256(policy_id ‖ JCS(policy_params))`: the hash a policy binding carries. */
export function policyHash(policyId: string, policyParams: unknown): string {
  return digestOfBytes(policyId + canonicalJson(policyParams));
}
