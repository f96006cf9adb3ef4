// The gateway's JSON API with the key the user pasted. The key lives in sessionStorage: it is
// gone when the tab closes and is never written anywhere else or sent to another origin.

const KEY_SLOT = "hiregate.console.key";
const ROLE_SLOT = "hiregate.console.role";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY_SLOT);
}

export function storedRole() {
  return sessionStorage.getItem(ROLE_SLOT);
}

export function forget() {
  sessionStorage.removeItem(KEY_SLOT);
  sessionStorage.removeItem(ROLE_SLOT);
}

/** The role a key's prefix names; `null` for the admin key, which has no fixed prefix. */
export function roleOfPrefix(key) {
  if (key.startsWith("hg_sk_")) return "seeker";
  if (key.startsWith("hg_op_")) return "operator";
  return null;
}

/** Check `key` against the gateway and remember it with its role. */
export async function signIn(key) {
  key = key.trim();
  const byPrefix = roleOfPrefix(key);
  // One authenticated call tells a working key from a revoked or mistyped one.
  const probe = byPrefix === "seeker"
    ? "/v1/webhooks/secret"
    : byPrefix === "operator"
      ? "/v1/operator/workers?limit=1"
      : "/v1/disputes?limit=1";
  await call("GET", probe, undefined, key);
  const role = byPrefix ?? "arbiter";
  sessionStorage.setItem(KEY_SLOT, key);
  sessionStorage.setItem(ROLE_SLOT, role);
  return role;
}

/**
 * One request to the gateway: `{status, ok, headers, body}` with the JSON body parsed (text when it
 * is not JSON). Only a gateway that does not answer throws.
 */
export async function send(method, path, { body, key = storedKey(), headers: extra = {} } = {}) {
  const headers = { Accept: "application/json", ...extra };
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, "network_error", `the gateway did not answer: ${error.message}`);
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  return { status: response.status, ok: response.ok, headers: response.headers, body: parsed };
}

/** The ApiError of an answer that is not a success, from its `{"error": {…}}` body. */
export function errorOf(answer) {
  const err = answer.body?.error ?? {};
  return new ApiError(
    answer.status,
    err.code ?? `http_${answer.status}`,
    err.message ?? `HTTP ${answer.status}`,
    err.details,
  );
}

async function call(method, path, body, key = storedKey()) {
  const answer = await send(method, path, { body, key });
  if (!answer.ok) throw errorOf(answer);
  return answer.body;
}

export const api = {
  get: (path) => call("GET", path),
  post: (path, body = {}) => call("POST", path, body),
  /**
   * `POST /v1/contracts/{id}/execute`, with `payment` (a base64 PaymentPayload) in
   * `PAYMENT-SIGNATURE` when given. Every answer is returned, not thrown: a 402 is the offer.
   */
  execute: (contractId, payment) => send("POST", `/v1/contracts/${contractId}/execute`, {
    headers: payment ? { "PAYMENT-SIGNATURE": payment } : {},
  }),
};

/** `?a=1&b=2` from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const text = q.toString();
  return text ? `?${text}` : "";
}

/**
 * Follow a Server-Sent Events stream with the key in the Authorization header (EventSource
 * cannot send one). Calls `onEvent({id, event, data})` per event; resolves when the server ends
 * the stream (a terminal contract's log is complete) and rejects on an HTTP error. Reconnects
 * with `Last-Event-ID` when the connection drops before that, until `signal` aborts. `key` is the
 * bearer credential: the signed-in key, or a contract's capability token (`hg_cap_…`).
 */
export async function followEvents(path, onEvent, signal, key = storedKey()) {
  let lastId = null;
  for (let retry = 0; !signal.aborted; retry++) {
    const headers = { Authorization: `Bearer ${key}`, Accept: "text/event-stream" };
    if (lastId !== null) headers["Last-Event-ID"] = lastId;
    let response;
    try {
      response = await fetch(path, { headers, signal, cache: "no-store" });
    } catch (error) {
      if (signal.aborted) return;
      await pause(Math.min(5000, 250 * 2 ** retry), signal);
      continue;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new ApiError(response.status, body?.error?.code ?? `http_${response.status}`,
        body?.error?.message ?? `HTTP ${response.status}`);
    }
    try {
      for await (const event of sseEvents(response.body)) {
        if (event.id !== null) lastId = event.id;
        retry = 0;
        onEvent(event);
      }
      return;
    } catch (error) {
      if (signal.aborted) return;
      await pause(Math.min(5000, 250 * 2 ** retry), signal);
    }
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/** The SSE wire format (WHATWG HTML §9.2): fields per line, events end at a blank line. */
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { id: null, event: "message", data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
      if (line === "") {
        if (event.data.length) yield { id: event.id, event: event.event, data: event.data.join("\n") };
        event = { id: null, event: "message", data: [] };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "data") event.data.push(val);
      else if (field === "event") event.event = val;
      else if (field === "id") event.id = val;
    }
  }
}
