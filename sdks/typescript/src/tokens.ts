/**
 * The gateway's signatures, checked offline against its JWKS (`/.well-known/jwks.json`).
 *
 * Every gateway token is a compact JWS signed with Ed25519 (`alg: EdDSA`) under a `kid` the JWKS
 * publishes, tagged by its JWS `typ`: contract tokens (`hiregate-contract+jwt`, sent to workers as
 * `Authorization: Bearer` and to seekers as `gateway_jws`) and receipts (`hiregate-receipt+jwt`).
 *
 * {@link GatewayKeys} holds the keys: fixed, or fetched and cached, fetched again when a token names
 * an unknown key id (rotation), at most once per `minRefreshIntervalMs`.
 */
import { compactVerify, decodeProtectedHeader, importJWK, type JWK } from "jose";

export const CONTRACT_TOKEN_TYPE = "hiregate-contract+jwt";
export const RECEIPT_TOKEN_TYPE = "hiregate-receipt+jwt";
export const ISSUER = "hiregate";
/** Clock skew tolerated when checking `exp` and `iat`, seconds (as the gateway does). */
export const CLOCK_SKEW_LEEWAY_S = 30;
export const DEFAULT_MIN_REFRESH_INTERVAL_MS = 30_000;
export const DEFAULT_MAX_JWKS_AGE_MS = 3_600_000;
const MAX_JWKS_BYTES = 256 * 1024;
const JWKS_FETCH_TIMEOUT_MS = 10_000;

/** A gateway token did not verify; `reason` is a stable word (`malformed`, `wrong_algorithm`,
 * `wrong_type`, `missing_key_id`, `unknown_key_id`, `unusable_key`, `invalid_signature`,
 * `expired`, `not_yet_valid`, `wrong_issuer`, `subject_mismatch`). */
export class TokenError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = "TokenError";
  }
}

/** The gateway's keys could not be fetched, so no token can be checked right now. */
export class KeysUnavailable extends Error {
  override name = "KeysUnavailable";
}

export interface Jwks {
  keys: Array<Record<string, unknown>>;
}

export function parseJwks(document: unknown): Jwks {
  const keys = (document as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys)) {
    throw new TypeError("a JWKS is an object with a 'keys' list");
  }
  return { keys: keys.filter((key): key is Record<string, unknown> => typeof key === "object" && key !== null) };
}

async function publicKey(jwks: Jwks, kid: string) {
  const jwk = jwks.keys.find((key) => key.kid === kid);
  if (!jwk) {
    throw new TokenError("unknown_key_id", `no key ${JSON.stringify(kid)} in the JWKS`);
  }
  const x = typeof jwk.x === "string" ? Buffer.from(jwk.x, "base64url") : Buffer.alloc(0);
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || (jwk.alg ?? "EdDSA") !== "EdDSA" || x.length !== 32) {
    throw new TokenError("unusable_key", `JWKS key ${JSON.stringify(kid)} is not a 32-byte Ed25519 (OKP) key`);
  }
  return importJWK({ kty: "OKP", crv: "Ed25519", x: jwk.x as string } as JWK, "EdDSA");
}

/** Checks a gateway JWS (EdDSA, `typ`, a `kid` the JWKS has, the signature) and returns its
 * payload. Time claims are left to the caller. */
export async function verifySignedJson(token: string, jwks: Jwks, tokenType: string): Promise<Record<string, unknown>> {
  let header;
  try {
    header = decodeProtectedHeader(token);
  } catch (error) {
    throw new TokenError("malformed", `malformed token: ${(error as Error).message}`);
  }
  if (header.alg !== "EdDSA") throw new TokenError("wrong_algorithm", "token algorithm must be EdDSA");
  if (header.typ !== tokenType) {
    throw new TokenError("wrong_type", `token type is ${JSON.stringify(header.typ)}, expected ${tokenType}`);
  }
  if (typeof header.kid !== "string" || !header.kid) throw new TokenError("missing_key_id", "token header has no kid");
  const key = await publicKey(jwks, header.kid);
  let payload: Uint8Array;
  try {
    ({ payload } = await compactVerify(token, key, { algorithms: ["EdDSA"] }));
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "ERR_JWS_SIGNATURE_VERIFICATION_FAILED") {
      throw new TokenError("invalid_signature", "token signature is invalid");
    }
    throw new TokenError("malformed", `malformed token: ${(error as Error).message}`);
  }
  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(payload).toString("utf8"));
  } catch {
    throw new TokenError("malformed", "token payload is not JSON");
  }
  if (typeof claims !== "object" || claims === null || Array.isArray(claims)) {
    throw new TokenError("malformed", "token payload is not a JSON object");
  }
  return claims as Record<string, unknown>;
}

const ULID = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/i;
const DIGEST = /^sha256:[0-9a-fA-F]{64}$/;

/** `<prefix>_<ULID>` in its canonical (upper-case) spelling; throws otherwise. */
export function parsePrefixedId(raw: string, prefix: string): string {
  const at = raw.indexOf("_");
  const head = raw.slice(0, at);
  const body = raw.slice(at + 1);
  if (at < 0 || head !== prefix || !ULID.test(body)) {
    throw new TypeError(`not a ${prefix}_<ULID> identifier`);
  }
  return `${prefix}_${body.toUpperCase()}`;
}

export interface ContractTokenClaims {
  contractId: string;
  termsHash: string;
  seeker: string;
  worker: string;
  issuedAt: number;
  expiresAt: number;
}

/** Verifies a contract token offline: signature by a key in `jwks`, type, issuer, subject, and
 * that `nowS` lies between `iat` and `exp` (with {@link CLOCK_SKEW_LEEWAY_S}). */
export async function verifyContractToken(token: string, jwks: Jwks, nowS?: number): Promise<ContractTokenClaims> {
  const claims = await verifySignedJson(token, jwks, CONTRACT_TOKEN_TYPE);
  const str = (name: string) => {
    const value = claims[name];
    if (typeof value !== "string") throw new TokenError("malformed", `malformed token claims: ${name} must be a string`);
    return value;
  };
  const int = (name: string) => {
    const value = claims[name];
    if (typeof value !== "number" || !Number.isInteger(value)) {
      throw new TokenError("malformed", `malformed token claims: ${name} must be an integer`);
    }
    return value;
  };
  const id = (name: string, prefix: string) => {
    try {
      return parsePrefixedId(str(name), prefix);
    } catch (error) {
      if (error instanceof TokenError) throw error;
      throw new TokenError("malformed", `malformed token claims: ${name}: ${(error as Error).message}`);
    }
  };
  const termsHash = str("terms_hash");
  if (!DIGEST.test(termsHash)) throw new TokenError("malformed", "malformed token claims: terms_hash");
  const parsed: ContractTokenClaims = {
    contractId: id("contract_id", "ctr"),
    termsHash: termsHash.toLowerCase(),
    seeker: id("seeker", "skr"),
    worker: id("worker", "wk"),
    issuedAt: int("iat"),
    expiresAt: int("exp"),
  };
  const subject = id("sub", "ctr");
  if (str("iss") !== ISSUER) throw new TokenError("wrong_issuer", `token issuer is not ${ISSUER}`);
  if (subject !== parsed.contractId) throw new TokenError("subject_mismatch", "token subject does not match its contract_id");
  const now = Math.floor(nowS ?? Date.now() / 1000);
  if (now >= parsed.expiresAt + CLOCK_SKEW_LEEWAY_S) throw new TokenError("expired", `token expired at ${parsed.expiresAt}`);
  if (now + CLOCK_SKEW_LEEWAY_S < parsed.issuedAt) throw new TokenError("not_yet_valid", "token is not valid yet");
  return parsed;
}

export interface RemoteKeysOptions {
  minRefreshIntervalMs?: number;
  maxAgeMs?: number;
  fetch?: typeof fetch;
}

/** Where a worker gets the gateway's public keys: {@link GatewayKeys.fixed} or
 * {@link GatewayKeys.remote}. */
export class GatewayKeys {
  private cached?: Jwks;
  private fetchedAt = -Infinity;
  private inflight?: Promise<Jwks>;

  private constructor(
    private readonly fixedKeys: Jwks | undefined,
    private readonly url: string | undefined,
    private readonly options: Required<Omit<RemoteKeysOptions, "fetch">> & { fetch?: typeof fetch },
  ) {}

  /** A fixed key set (configuration or tests); never fetched. */
  static fixed(jwks: Jwks | unknown): GatewayKeys {
    return new GatewayKeys(parseJwks(jwks), undefined, {
      minRefreshIntervalMs: DEFAULT_MIN_REFRESH_INTERVAL_MS,
      maxAgeMs: DEFAULT_MAX_JWKS_AGE_MS,
    });
  }

  /** Keys fetched from `jwksUrl` on first use, cached, fetched again after `maxAgeMs` and when a
   * token names an unknown key id (at most once per `minRefreshIntervalMs`). */
  static remote(jwksUrl: string, options: RemoteKeysOptions = {}): GatewayKeys {
    return new GatewayKeys(undefined, jwksUrl, {
      minRefreshIntervalMs: options.minRefreshIntervalMs ?? DEFAULT_MIN_REFRESH_INTERVAL_MS,
      maxAgeMs: options.maxAgeMs ?? DEFAULT_MAX_JWKS_AGE_MS,
      fetch: options.fetch,
    });
  }

  /** Verifies `token` against the current keys; throws {@link TokenError} or {@link KeysUnavailable}. */
  async verifyContractToken(token: string): Promise<ContractTokenClaims> {
    if (this.fixedKeys) return verifyContractToken(token, this.fixedKeys);
    const jwks = await this.current();
    const seen = this.fetchedAt;
    try {
      return await verifyContractToken(token, jwks);
    } catch (error) {
      if (!(error instanceof TokenError) || error.reason !== "unknown_key_id") throw error;
      if (Date.now() - seen < this.options.minRefreshIntervalMs) throw error;
    }
    return verifyContractToken(token, await this.refresh(seen));
  }

  /** The current key set (fetched if needed). */
  async jwks(): Promise<Jwks> {
    return this.fixedKeys ?? this.current();
  }

  private async current(): Promise<Jwks> {
    if (this.cached && Date.now() - this.fetchedAt < this.options.maxAgeMs) return this.cached;
    try {
      return await this.refresh(this.fetchedAt);
    } catch (error) {
      if (this.cached) return this.cached; // an expired cache beats no keys while the gateway is away
      throw error;
    }
  }

  /** Fetches the key set unless another caller already did after `seen` (one fetch at a time). */
  private async refresh(seen: number): Promise<Jwks> {
    if (this.cached && this.fetchedAt > seen) return this.cached;
    if (!this.inflight) {
      this.inflight = this.fetchKeys().finally(() => {
        this.inflight = undefined;
      });
    }
    return this.inflight;
  }

  private async fetchKeys(): Promise<Jwks> {
    const doFetch = this.options.fetch ?? fetch;
    try {
      const response = await doFetch(this.url as string, { signal: AbortSignal.timeout(JWKS_FETCH_TIMEOUT_MS) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const text = await response.text();
      if (text.length > MAX_JWKS_BYTES) throw new Error("JWKS document too large");
      const jwks = parseJwks(JSON.parse(text));
      this.cached = jwks;
      this.fetchedAt = Date.now();
      return jwks;
    } catch (error) {
      throw new KeysUnavailable(`gateway keys unavailable: ${(error as Error).message}`);
    }
  }
}
