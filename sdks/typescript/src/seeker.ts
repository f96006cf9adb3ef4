/**
 * The seeker's side: discover workers, propose a contract, pay its x402 challenge with the
 * official `@x402/fetch` client, follow the contract (SSE with `Last-Event-ID` resume, or polling),
 * fetch its receipt and verify it offline.
 *
 * ```ts
 * const seeker = new SeekerClient({ gatewayUrl, apiKey, walletPrivateKey, maxPrice: 2_000_000n });
 * const [worker] = await seeker.discover({ taskType: "summarize", healthy: true });
 * const hire = await seeker.hire(worker.id, "summarize", { text: "…" });
 * ```
 *
 * Paying is plain x402 v2: the gateway's 402 carries `PAYMENT-REQUIRED`, the official client signs
 * an EIP-3009 authorization and retries with `PAYMENT-SIGNATURE`. Its spend controls allow only the
 * contract's asset, capped at `maxPrice` (atomic units) when given, else at the contract's price.
 */
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { decodePaymentResponseHeader, wrapFetchWithPaymentFromConfig } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";

import { TERMINAL_STATES, verifyReceipt, type Receipt } from "./receipts.js";
import { parseJwks, verifyContractToken, type ContractTokenClaims, type Jwks } from "./tokens.js";

/** States {@link SeekerClient.wait} stops at by default: every terminal state and `rejected`. */
export const FINAL_STATES = new Set([...TERMINAL_STATES, "rejected"]);

export class GatewayError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: unknown,
  ) {
    super(`gateway answered ${status}: ${code}: ${message}`);
    this.name = "GatewayError";
  }
}

/** The contract asks more than the client may pay; nothing was signed. */
export class SpendingGuardError extends Error {
  override name = "SpendingGuardError";
}

export interface ExecuteResult {
  status: number;
  body: any;
  /** The decoded `PAYMENT-RESPONSE` (the settlement), when the gateway settled. */
  paymentResponse: Record<string, unknown> | null;
}

export interface ContractEvent {
  id: number;
  kind: string;
  data: Record<string, any>;
}

export interface Hire {
  contractId: string;
  proposal: any;
  execute: ExecuteResult;
  contract: any;
  receipt: Receipt | null;
}

export interface SeekerOptions {
  gatewayUrl: string;
  apiKey: string;
  /** Hex private key of the paying EVM account (never logged). */
  walletPrivateKey?: `0x${string}`;
  /** The most (atomic units) one execute may pay. */
  maxPrice?: bigint;
  timeoutMs?: number;
}

export class SeekerClient {
  readonly base: string;
  readonly #apiKey: string;
  readonly #walletKey?: `0x${string}`;
  readonly maxPrice?: bigint;
  private readonly timeoutMs: number;
  private jwksCache?: Jwks;

  constructor(options: SeekerOptions) {
    this.base = options.gatewayUrl.replace(/\/*$/, "/");
    this.#apiKey = options.apiKey;
    this.#walletKey = options.walletPrivateKey;
    this.maxPrice = options.maxPrice;
    this.timeoutMs = options.timeoutMs ?? 60_000;
  }

  /** The address this client pays from (`undefined` without a wallet). */
  get payer(): string | undefined {
    return this.#walletKey ? privateKeyToAccount(this.#walletKey).address : undefined;
  }

  toJSON() {
    // The API key and the wallet key are credentials: never serialise them.
    return { base: this.base, payer: this.payer };
  }

  private auth(): Record<string, string> {
    return { authorization: `Bearer ${this.#apiKey}` };
  }

  private async call(path: string, init: RequestInit = {}): Promise<any> {
    const response = await fetch(this.base + path.replace(/^\//, ""), {
      ...init,
      headers: { ...this.auth(), ...(init.body ? { "content-type": "application/json" } : {}), ...(init.headers as object) },
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    return parsed(response);
  }

  /** `GET /v1/workers`: listings matching the filters (first page). */
  async discover(filters: { taskType?: string; maxPrice?: bigint; healthy?: boolean } & Record<string, unknown> = {}): Promise<any[]> {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(filters)) {
      if (value === undefined) continue;
      const name = key === "taskType" ? "task_type" : key === "maxPrice" ? "max_price" : key;
      params.set(name, String(value));
    }
    const page = await this.call(`v1/workers?${params}`);
    return page.workers;
  }

  /** `POST /v1/contracts`: the signed contract (`contract_id`, `terms`, `terms_hash`, `gateway_jws`, `payment.x402`). */
  async propose(workerId: string, taskType: string, input: unknown, options: Record<string, unknown> = {}): Promise<any> {
    const proposal = { worker_id: workerId, task_type: taskType, input, ...options };
    return this.call("v1/contracts", { method: "POST", body: JSON.stringify(proposal) });
  }

  /** `GET /v1/contracts/{id}`. */
  async contract(contractId: string): Promise<any> {
    return this.call(`v1/contracts/${contractId}`);
  }

  /** Checks a proposed contract's `gateway_jws` offline against the JWKS, bound to its id and terms. */
  async verifyContractToken(contract: any): Promise<ContractTokenClaims> {
    const claims = await verifyContractToken(contract.gateway_jws, await this.jwks());
    if (claims.contractId !== contract.contract_id || claims.termsHash !== contract.terms_hash) {
      throw new Error("the contract token binds another contract or other terms");
    }
    return claims;
  }

  /** The contract's x402 challenge (the decoded `PAYMENT-REQUIRED` of the unpaid 402). */
  async challenge(contractId: string): Promise<any> {
    const response = await fetch(`${this.base}v1/contracts/${contractId}/execute`, {
      method: "POST",
      headers: this.auth(),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const header = response.headers.get("payment-required");
    if (response.status !== 402 || !header) {
      await parsed(response);
      throw new GatewayError(response.status, "no_challenge", "the gateway did not ask for payment", null);
    }
    return JSON.parse(Buffer.from(header, "base64").toString("utf8"));
  }

  /** `POST /v1/contracts/{id}/execute`, paying the 402 with the official x402 client. Refuses
   * ({@link SpendingGuardError}, nothing signed) a price above `maxPrice`. */
  async execute(contractId: string): Promise<ExecuteResult> {
    if (!this.#walletKey) throw new Error("this client has no wallet to pay with");
    const offer = (await this.challenge(contractId)).accepts[0];
    const price = BigInt(offer.amount);
    if (this.maxPrice !== undefined && price > this.maxPrice) {
      throw new SpendingGuardError(`the contract asks ${price}, more than maxPrice ${this.maxPrice}`);
    }
    const payingFetch = wrapFetchWithPaymentFromConfig(fetch, {
      schemes: [{ network: "eip155:*", client: new ExactEvmScheme(privateKeyToAccount(this.#walletKey)) }],
      spendControls: {
        allowedAssets: [
          { network: offer.network, asset: offer.asset, maxAmountPerPayment: String(this.maxPrice ?? price) },
        ],
      },
    });
    const response = await payingFetch(`${this.base}v1/contracts/${contractId}/execute`, {
      method: "POST",
      headers: this.auth(),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const text = await response.text();
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    const header = response.headers.get("payment-response");
    return {
      status: response.status,
      body,
      paymentResponse: header ? (decodePaymentResponseHeader(header) as unknown as Record<string, unknown>) : null,
    };
  }

  /** The contract's events as they happen (SSE), after `after`; a dropped connection is resumed
   * with `Last-Event-ID`, so nothing is lost or repeated. Ends when the gateway closes the stream. */
  async *events(contractId: string, after?: number): AsyncGenerator<ContractEvent> {
    let last = after;
    let retries = 0;
    for (;;) {
      const headers: Record<string, string> = { ...this.auth(), accept: "text/event-stream" };
      if (last !== undefined) headers["last-event-id"] = String(last);
      let response: Response;
      try {
        response = await fetch(`${this.base}v1/contracts/${contractId}/events`, { headers });
      } catch (error) {
        if (++retries > 5) throw error;
        await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** retries, 5000)));
        continue;
      }
      if (!response.ok || !response.body) {
        await parsed(response);
        return;
      }
      const queue: EventSourceMessage[] = [];
      const parser = createParser({ onEvent: (event) => queue.push(event) });
      const decoder = new TextDecoder();
      try {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          parser.feed(decoder.decode(chunk, { stream: true }));
          while (queue.length) {
            const event = queue.shift() as EventSourceMessage;
            if (!event.id) continue;
            last = Number(event.id);
            retries = 0;
            yield { id: last, kind: event.event ?? "message", data: JSON.parse(event.data || "{}") };
          }
        }
        return;
      } catch (error) {
        if (++retries > 5) throw error;
      }
    }
  }

  /** Follows the contract until its state is in `until` (SSE, or polling) and returns its view. */
  async wait(
    contractId: string,
    { until = FINAL_STATES, timeoutMs = 120_000, useEvents = true, pollIntervalMs = 500 } = {},
  ): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    let view = await this.contract(contractId);
    if (until.has(view.state)) return view;
    if (useEvents) {
      for await (const event of this.events(contractId)) {
        if (until.has(event.data.to_state)) break;
        if (Date.now() > deadline) throw new Error(`contract ${contractId} did not finish in ${timeoutMs} ms`);
      }
      return this.contract(contractId);
    }
    while (!until.has(view.state)) {
      if (Date.now() > deadline) throw new Error(`contract ${contractId} did not finish in ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, pollIntervalMs));
      view = await this.contract(contractId);
    }
    return view;
  }

  /** The gateway's JWKS (fetched once, kept). */
  async jwks(refresh = false): Promise<Jwks> {
    if (!this.jwksCache || refresh) this.jwksCache = parseJwks(await this.call(".well-known/jwks.json"));
    return this.jwksCache;
  }

  /** `GET /v1/contracts/{id}/receipt`: the compact JWS. */
  async receipt(contractId: string): Promise<string> {
    return (await this.call(`v1/contracts/${contractId}/receipt`)).receipt;
  }

  /** The contract's receipt, verified offline against the JWKS, about this contract (and terms). */
  async verifiedReceipt(contractId: string, termsHash?: string): Promise<Receipt> {
    const token = await this.receipt(contractId);
    try {
      return await verifyReceipt(token, await this.jwks(), { contractId, termsHash });
    } catch {
      // A key rotated in since the JWKS was fetched: fetch it again, once.
      return verifyReceipt(token, await this.jwks(true), { contractId, termsHash });
    }
  }

  /** Proposes, checks the contract token, pays, follows the contract to its end and verifies its
   * receipt offline. */
  async hire(workerId: string, taskType: string, input: unknown, options: Record<string, unknown> = {}): Promise<Hire> {
    const proposal = await this.propose(workerId, taskType, input, options);
    await this.verifyContractToken(proposal);
    const execute = await this.execute(proposal.contract_id);
    const contract = await this.wait(proposal.contract_id);
    const receipt = TERMINAL_STATES.has(contract.state)
      ? await this.verifiedReceipt(proposal.contract_id, proposal.terms_hash)
      : null;
    return { contractId: proposal.contract_id, proposal, execute, contract, receipt };
  }

  /** `POST /v1/contracts/{id}/disputes`. */
  async openDispute(contractId: string, reason: string, claim?: unknown): Promise<any> {
    return this.call(`v1/contracts/${contractId}/disputes`, {
      method: "POST",
      body: JSON.stringify(claim === undefined ? { reason } : { reason, claim }),
    });
  }

  /** `POST /v1/webhooks/secret`: a new signing secret for this seeker's webhooks (shown once);
   * verify deliveries with {@link WebhookSecret}. */
  async createWebhookSecret(): Promise<string> {
    return (await this.call("v1/webhooks/secret", { method: "POST" })).secret;
  }
}

async function parsed(response: Response): Promise<any> {
  const text = await response.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (response.ok) return body;
  const error = body && typeof body === "object" ? body.error ?? {} : {};
  throw new GatewayError(response.status, String(error.code ?? "http_error"), String(error.message ?? text.slice(0, 200)), body);
}
