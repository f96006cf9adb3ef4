/**
 * Standard Webhooks signatures (https://www.standardwebhooks.com), symmetric `v1` scheme: the
 * signed content is `{webhook-id}.{webhook-timestamp}.{body}`, MAC'd with HMAC-SHA256 under the
 * shared secret (`whsec_<base64>`), sent as `webhook-signature: v1,<base64>` (several
 * space-separated signatures may be listed; one match is enough).
 *
 * Workers sign completion callbacks with their per-worker secret; seekers verify the gateway's
 * webhooks with theirs. Remembering seen `webhook-id`s is the receiver's job.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

export const HEADER_ID = "webhook-id";
export const HEADER_TIMESTAMP = "webhook-timestamp";
export const HEADER_SIGNATURE = "webhook-signature";
export const DEFAULT_TOLERANCE_S = 5 * 60;
const PREFIX = "whsec_";

/** A webhook was refused: `reason` is `missing_header`, `invalid_header`, `timestamp_too_old`,
 * `timestamp_too_new` or `no_matching_signature`. */
export class WebhookError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
    this.name = "WebhookError";
  }
}

export class WebhookSecret {
  readonly #key: Buffer;

  constructor(key: Uint8Array) {
    if (key.length < 24 || key.length > 64) {
      throw new RangeError(`webhook secret must be 24 to 64 bytes, got ${key.length}`);
    }
    this.#key = Buffer.from(key);
  }

  /** A secret from its text form `whsec_<base64>`. */
  static parse(text: string): WebhookSecret {
    const trimmed = text.trim();
    if (!trimmed.startsWith(PREFIX)) throw new TypeError('webhook secret must start with "whsec_"');
    const b64 = trimmed.slice(PREFIX.length);
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw new TypeError('webhook secret is not valid base64 after "whsec_"');
    return new WebhookSecret(Buffer.from(b64, "base64"));
  }

  static generate(): WebhookSecret {
    return new WebhookSecret(randomBytes(32));
  }

  /** The text form, to hand to the other party. Treat it as the secret it is. */
  exposeWhsec(): string {
    return PREFIX + this.#key.toString("base64");
  }

  toString(): string {
    return "WebhookSecret(<redacted>)";
  }

  toJSON(): string {
    return this.toString();
  }

  private mac(msgId: string, timestamp: number, body: Uint8Array | string): Buffer {
    return createHmac("sha256", this.#key).update(`${msgId}.${timestamp}.`).update(body).digest();
  }

  /** The `webhook-signature` value (`v1,<base64>`) of this message. */
  sign(msgId: string, timestamp: number, body: Uint8Array | string): string {
    return `v1,${this.mac(msgId, timestamp, body).toString("base64")}`;
  }

  /** The three Standard Webhooks headers of this message, sent now unless `timestamp`. */
  signHeaders(msgId: string, body: Uint8Array | string, timestamp = Math.floor(Date.now() / 1000)): Record<string, string> {
    return {
      [HEADER_ID]: msgId,
      [HEADER_TIMESTAMP]: String(timestamp),
      [HEADER_SIGNATURE]: this.sign(msgId, timestamp, body),
    };
  }

  /** Verifies a received webhook (headers present, timestamp within `toleranceS` either way, one
   * `v1` signature matching in constant time); returns its id and timestamp. */
  verify(
    headers: Headers | Record<string, string | undefined>,
    body: Uint8Array | string,
    { nowS = Date.now() / 1000, toleranceS = DEFAULT_TOLERANCE_S } = {},
  ): { id: string; timestamp: number } {
    const get = (name: string): string => {
      const value =
        headers instanceof Headers
          ? headers.get(name)
          : Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
      if (value === undefined || value === null) throw new WebhookError("missing_header", `missing header ${name}`);
      return value;
    };
    const id = get(HEADER_ID);
    const rawTs = get(HEADER_TIMESTAMP).trim();
    const signatures = get(HEADER_SIGNATURE);
    if (!/^-?\d+$/.test(rawTs)) throw new WebhookError("invalid_header", `malformed header ${HEADER_TIMESTAMP}`);
    const timestamp = Number(rawTs);
    const age = Math.floor(nowS) - timestamp;
    if (age > toleranceS) throw new WebhookError("timestamp_too_old", "webhook timestamp is too old");
    if (age < -toleranceS) throw new WebhookError("timestamp_too_new", "webhook timestamp is in the future");
    const expected = this.mac(id, timestamp, body);
    for (const entry of signatures.split(" ")) {
      if (!entry.startsWith("v1,")) continue;
      const candidate = Buffer.from(entry.slice(3), "base64");
      if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) {
        return { id, timestamp };
      }
    }
    throw new WebhookError("no_matching_signature", "no webhook signature matched");
  }
}
