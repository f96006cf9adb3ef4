// What the paying interop scripts (pay.mjs with @x402/fetch, pay-axios.mjs with @x402/axios)
// share: the official EVM scheme client a payer registers, and the request built from their
// common stdin fields, so both clients send the same request and sign with the same scheme code.
import { AuthCaptureEvmScheme } from "@x402/evm/auth-capture/client";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";

export const REQUEST_TIMEOUT_MS = 120_000;

const SCHEME_CLIENTS = {
  exact: (account, rpcUrl) => new ExactEvmScheme(account, rpcUrl ? { rpcUrl } : undefined),
  "auth-capture": (account) => new AuthCaptureEvmScheme(account),
  upto: (account, rpcUrl) => new UptoEvmScheme(account, rpcUrl ? { rpcUrl } : undefined),
};

/** The official scheme client for `schemeName` ("exact" by default), signing with `account`. */
export function schemeClient(schemeName, account, rpcUrl) {
  const make = SCHEME_CLIENTS[schemeName ?? "exact"];
  if (!make) {
    throw new Error(`unknown scheme "${schemeName}": use one of ${Object.keys(SCHEME_CLIENTS).join(", ")}`);
  }
  return make(account, rpcUrl);
}

/** `{method, headers, body}` from the input's `method`, `headers`, `authorization` and `body`. */
export function requestOf(input) {
  const headers = { ...(input.headers ?? {}) };
  if (input.authorization) {
    headers.Authorization = input.authorization;
  }
  let body;
  if (input.body !== undefined && input.body !== null) {
    if (typeof input.body === "string") {
      body = input.body;
    } else {
      body = JSON.stringify(input.body);
      headers["Content-Type"] ??= "application/json";
    }
  }
  return { method: input.method ?? "POST", headers, body };
}

/** The answer's text as JSON when it parses, else as is (null when empty). */
export function parseBody(text) {
  try {
    return text.length > 0 ? JSON.parse(text) : null;
  } catch {
    return text;
  }
}
