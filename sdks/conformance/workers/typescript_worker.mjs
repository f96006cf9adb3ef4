// The TypeScript worker of the conformance suite: the same behaviour as the Rust `example-worker`
// with EXAMPLE_WORKER=conformance (worker-sdk's faulty and outputs example workers and a verifier),
// built on the hiregate TypeScript SDK (sdks/typescript, built to dist/ by `npm run build`).
//
// Environment: the Rust example's names (WORKER_LISTEN, WORKER_GATEWAY_JWKS_URL or
// WORKER_INSECURE_NO_AUTH=1, WORKER_JWKS_MIN_REFRESH_MS, WORKER_PUBLIC_URL,
// WORKER_CALLBACK_GATEWAY_URL + WORKER_CALLBACK_SECRET, WORKER_SYNC_WAIT_MS,
// WORKER_MAX_CONCURRENT_TASKS, FAULTY_MODE, FAULTY_DELAY_MS). Prints `listening on http://…/`;
// GET /test/executions answers how many times the handler ran.
import { GatewayKeys, Outcome, Verdict, Worker, serve } from "../../typescript/dist/src/index.js";

const env = (name) => (process.env[name] ?? "").trim() || undefined;
const SUMMARY_CHARS = 200;
const CONFIDENCE = 0.9;
const MODES = ["ok", "invalid", "fail", "slow", "pending", "flaky"];
const OUTPUT_TASK_TYPES = ["output_text", "output_json", "output_file", "output_multiple", "output_stream", "output_partial"];
const DEFAULT_MODE = env("FAULTY_MODE") ?? "ok";
const DEFAULT_DELAY_MS = Number(env("FAULTY_DELAY_MS") ?? 500);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const jwksUrl = env("WORKER_GATEWAY_JWKS_URL");
const worker = new Worker({
  name: "conformance-worker-typescript",
  version: "0.1.0",
  taskTypes: ["summarize", "echo", ...OUTPUT_TASK_TYPES],
  gatewayKeys: jwksUrl
    ? GatewayKeys.remote(jwksUrl, { minRefreshIntervalMs: env("WORKER_JWKS_MIN_REFRESH_MS") ? Number(env("WORKER_JWKS_MIN_REFRESH_MS")) : undefined })
    : undefined,
  allowUnauthenticatedForLocalDev: env("WORKER_INSECURE_NO_AUTH") === "1",
  publicUrl: env("WORKER_PUBLIC_URL"),
  callback:
    env("WORKER_CALLBACK_GATEWAY_URL") && env("WORKER_CALLBACK_SECRET")
      ? { gatewayUrl: env("WORKER_CALLBACK_GATEWAY_URL"), secret: env("WORKER_CALLBACK_SECRET"), firstRetryDelayMs: 200 }
      : undefined,
  syncWaitMs: env("WORKER_SYNC_WAIT_MS") ? Number(env("WORKER_SYNC_WAIT_MS")) : undefined,
  maxConcurrentTasks: env("WORKER_MAX_CONCURRENT_TASKS") ? Number(env("WORKER_MAX_CONCURRENT_TASKS")) : undefined,
});

function sortedJson(value) {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${sortedJson(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

const inputText = (input) => (input && typeof input.text === "string" ? input.text : sortedJson(input));
const summary = (ctx, input) => {
  const text = inputText(input);
  return { summary: ctx.taskType === "echo" ? text : [...text].slice(0, SUMMARY_CHARS).join(""), confidence: CONFIDENCE };
};
const progressOf = (done, wanted) => ({ percent: (done * 100) / Math.max(wanted, 1), message: `${done} of ${wanted} items` });

async function faulty(ctx, input) {
  const given = input && typeof input === "object" && !Array.isArray(input) ? input : {};
  const mode = "mode" in given ? given.mode : DEFAULT_MODE;
  if (typeof mode !== "string") return Outcome.failed("INVALID_INPUT", "mode must be a string", { field: "mode" });
  if (!MODES.includes(mode)) return Outcome.failed("INVALID_INPUT", `unknown mode "${mode}"`, { field: "mode", expected: MODES });
  const delayMs = "delay_ms" in given ? given.delay_ms : DEFAULT_DELAY_MS;
  if (!Number.isInteger(delayMs) || delayMs < 0) {
    return Outcome.failed("INVALID_INPUT", "delay_ms must be a whole number", { field: "delay_ms" });
  }
  switch (mode) {
    case "invalid":
      return { summary: 42 };
    case "fail":
      return Outcome.failed("SIMULATED_FAILURE", "the faulty worker was asked to fail");
    case "slow":
      await sleep(delayMs);
      return summary(ctx, input);
    case "pending":
      return Outcome.pending(async () => {
        await sleep(delayMs);
        return summary(ctx, input);
      }, new Date(Date.now() + delayMs));
    case "flaky":
      if (ctx.attempt === 1) return Outcome.failed("TRANSIENT_FAILURE", "the faulty worker fails the first attempt");
      return summary(ctx, input);
    default:
      return summary(ctx, input);
  }
}

async function outputs(ctx, input) {
  const text = inputText(input);
  const content = { summary: text, confidence: CONFIDENCE };
  const given = input && typeof input === "object" ? input : {};
  const delay = Number(given.delay_ms ?? 0);
  const hosted = () => ctx.hostFile("summary.json", "application/json", JSON.stringify(content));
  switch (ctx.taskType) {
    case "output_text":
      return { type: "text", content: text };
    case "output_file":
      return hosted();
    case "output_multiple":
      return { type: "multiple", items: [{ type: "json", content }, { type: "text", content: text }, hosted()] };
    case "output_stream": {
      const parts = text.split(" ").map((word, i, all) => (i < all.length - 1 ? `${word} ` : word)).filter(Boolean);
      return Outcome.stream(
        (async function* () {
          for (const part of parts) {
            await sleep(delay);
            yield part;
          }
        })(),
      );
    }
    case "output_partial": {
      const wanted = Number(given.items ?? 3);
      const done = Math.min(Number(given.items_done ?? wanted), wanted);
      const items = [];
      for (let i = 0; i < done; i++) {
        await sleep(delay);
        items.push({ type: "json", content });
        ctx.reportPartial(progressOf(items.length, wanted), items);
      }
      if (done === wanted) return { type: "multiple", items };
      return Outcome.partial(progressOf(items.length, wanted), items);
    }
    default:
      return content;
  }
}

worker.task(async (ctx, input) => (ctx.taskType?.startsWith("output_") ? outputs(ctx, input) : faulty(ctx, input)));
worker.onVerify("conformance-runtime", "conformance-model-v1", async (request) => {
  const output = request.candidate.output;
  return output && typeof output === "object" && typeof output.summary === "string" ? Verdict.pass(1) : Verdict.fail(1, [101]);
});

const listen = env("WORKER_LISTEN") ?? "127.0.0.1:0";
const at = listen.lastIndexOf(":");
await serve(
  async (request) =>
    new URL(request.url).pathname === "/test/executions"
      ? Response.json({ executions: worker.handlerRuns })
      : worker.fetch(request),
  { hostname: listen.slice(0, at) || "127.0.0.1", port: Number(listen.slice(at + 1)) },
);
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
