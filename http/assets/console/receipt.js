// Offline check of a receipt: a compact JWS (EdDSA over Ed25519) verified in the browser with
// WebCrypto against the gateway's published JWKS. Nothing but the JWKS is fetched; the verdict
// does not rest on the gateway's word about its own receipt.

const RECEIPT_TYPE = "hiregate-receipt+jwt";
const ISSUER = "hiregate";
const TERMINAL = new Set([
  "settled", "settlement_failed", "voided", "failed", "cancelled", "expired", "refunded",
]);

function b64urlBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(text.length / 4) * 4, "=");
  const raw = atob(base64);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function b64urlJson(text) {
  return JSON.parse(new TextDecoder().decode(b64urlBytes(text)));
}

/**
 * Verify `token` with `jwks` and check it speaks of `contract` (id and terms hash). Resolves to
 * `{kid, claims}`; rejects with an Error saying what failed.
 */
export async function verifyReceipt(token, jwks, contract) {
  const parts = token.trim().split(".");
  if (parts.length !== 3) throw new Error("not a compact JWS (expected three parts)");
  const [encodedHeader, encodedPayload, encodedSignature] = parts;
  const header = b64urlJson(encodedHeader);
  if (header.alg !== "EdDSA") throw new Error(`unexpected alg ${header.alg}`);
  if (header.typ !== RECEIPT_TYPE) throw new Error(`unexpected typ ${header.typ}`);
  const jwk = (jwks.keys ?? []).find((k) => k.kid === header.kid);
  if (!jwk) throw new Error(`no key ${header.kid} in the gateway's JWKS`);
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519") throw new Error(`key ${header.kid} is not Ed25519`);
  const key = await crypto.subtle.importKey(
    "jwk",
    { kty: "OKP", crv: "Ed25519", x: jwk.x },
    { name: "Ed25519" },
    false,
    ["verify"],
  );
  const signed = new TextEncoder().encode(`${encodedHeader}.${encodedPayload}`);
  const valid = await crypto.subtle.verify({ name: "Ed25519" }, key, b64urlBytes(encodedSignature), signed);
  if (!valid) throw new Error("the signature does not verify");
  const claims = b64urlJson(encodedPayload);
  if (claims.iss !== ISSUER) throw new Error(`issuer is ${claims.iss}`);
  if (claims.sub !== contract.contract_id) throw new Error(`the receipt is for ${claims.sub}`);
  if (claims.terms_hash !== contract.terms_hash) throw new Error("terms hash differs from the contract's");
  if (!TERMINAL.has(claims.outcome)) throw new Error(`outcome ${claims.outcome} is not terminal`);
  return { kid: header.kid, claims };
}
