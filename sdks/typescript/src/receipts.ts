/**
 * Offline check of a gateway receipt: the signed statement of how a contract ended (terms hash,
 * payment, deliverable digests, policy and verifier result hashes, outcome, dispute decision).
 * Keep the JWKS: a receipt signed by a key rotated out of signing verifies while that key is
 * published.
 */
import { ISSUER, RECEIPT_TOKEN_TYPE, TokenError, parseJwks, verifySignedJson, type Jwks } from "./tokens.js";

/** States a contract cannot leave; a receipt names one of them. */
export const TERMINAL_STATES = new Set([
  "settled",
  "settlement_failed",
  "expired",
  "failed",
  "cancelled",
  "voided",
  "refunded",
]);

export interface Receipt {
  iss: string;
  sub: string;
  iat: number;
  terms_hash: string;
  outcome: string;
  payment: { network: string; asset: string; payer: string; nonce: string; amount: string; tx_hash: string | null } | null;
  deliverable_digests: string[];
  policy_hash: string | null;
  verifier_result_hash: string | null;
  verification_status: string | null;
  dispute: { dispute_id: string; decision: "settle" | "void"; decided_by: string; reason: string } | null;
}

const RECEIPT_FIELDS = [
  "iss",
  "sub",
  "iat",
  "terms_hash",
  "outcome",
  "payment",
  "deliverable_digests",
  "policy_hash",
  "verifier_result_hash",
  "verification_status",
  "dispute",
];

/** A receipt did not verify; `reason` is a token reason or `malformed`, `wrong_issuer`,
 * `not_terminal`, `wrong_contract`, `wrong_terms`. */
export class ReceiptError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = "ReceiptError";
  }
}

/** Verifies `token` against `jwks`: EdDSA signature by a published key, receipt `typ`, gateway
 * issuer, terminal outcome, exactly the receipt's fields; and, when given, that it is about
 * `contractId` with `termsHash`. */
export async function verifyReceipt(
  token: string,
  jwks: Jwks | unknown,
  expect: { contractId?: string; termsHash?: string } = {},
): Promise<Receipt> {
  let claims: Record<string, unknown>;
  try {
    claims = await verifySignedJson(token.trim(), parseJwks(jwks), RECEIPT_TOKEN_TYPE);
  } catch (error) {
    if (error instanceof TokenError) throw new ReceiptError(error.reason, `receipt does not verify: ${error.message}`);
    throw error;
  }
  const keys = Object.keys(claims);
  const missing = RECEIPT_FIELDS.filter((field) => !keys.includes(field));
  const unknown = keys.filter((key) => !RECEIPT_FIELDS.includes(key));
  if (missing.length || unknown.length || !Array.isArray(claims.deliverable_digests) || typeof claims.sub !== "string") {
    throw new ReceiptError("malformed", `receipt claims are not a receipt (missing ${missing}, unknown ${unknown})`);
  }
  const receipt = claims as unknown as Receipt;
  if (receipt.iss !== ISSUER) throw new ReceiptError("wrong_issuer", `receipt issuer is ${receipt.iss}, expected ${ISSUER}`);
  if (!TERMINAL_STATES.has(receipt.outcome)) {
    throw new ReceiptError("not_terminal", `receipt outcome ${receipt.outcome} is not a terminal state`);
  }
  if (expect.contractId !== undefined && receipt.sub !== expect.contractId) {
    throw new ReceiptError("wrong_contract", `the receipt is about ${receipt.sub}, not ${expect.contractId}`);
  }
  if (expect.termsHash !== undefined && receipt.terms_hash !== expect.termsHash) {
    throw new ReceiptError("wrong_terms", "the receipt binds other terms than the contract's terms_hash");
  }
  return receipt;
}
