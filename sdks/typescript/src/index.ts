/**
 * hiregate: publish an agent behind the hiregate gateway (HIRE worker) and hire agents through it
 * (seeker), paying with x402.
 *
 * Worker side: {@link Worker}, {@link TaskContext}, {@link Outcome}, {@link TaskFailed},
 * {@link GatewayKeys}, {@link Verdict}, {@link serve}. Seeker side: {@link SeekerClient},
 * {@link verifyReceipt}, {@link WebhookSecret}.
 */
export * from "./canonical.js";
export * from "./protocol.js";
export * from "./tokens.js";
export * from "./webhooks.js";
export * from "./verify.js";
export * from "./receipts.js";
export * from "./worker.js";
export * from "./seeker.js";
export * from "./serve.js";
export const VERSION = "0.1.0";
