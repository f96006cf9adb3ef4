/**
 * A HIRE worker around an async function: what the gateway calls for every paid hire.
 *
 * ```ts
 * const worker = new Worker({
 *   name: "summarizer", version: "1.0.0", taskTypes: ["summarize"],
 *   gatewayKeys: GatewayKeys.remote("https://gw.example/.well-known/jwks.json"),
 *   handler: async (ctx, input) => ({ summary: String(input.text).slice(0, 200), confidence: 0.9 }),
 * });
 * serve(worker.fetch, { port: 8081 });           // Node; or export default { fetch: worker.fetch }
 * app.route("/agent", worker.app);               // or mount it into a Hono app
 * ```
 *
 * `worker.fetch` is a standard `(Request) => Promise<Response>` handler, so it runs on any
 * runtime with the Fetch API. Routes and behaviour are the Rust `worker-sdk`'s, held in step by the
 * conformance suite (`sdks/conformance`): `GET /health`, `GET /capabilities`, `POST /execute`
 * (contract token checked offline against the gateway JWKS and bound to `X-Contract-ID`; one run
 * per (contract, attempt); `pending` + `poll_url` past `syncWaitMs`), `GET /tasks/{id}`,
 * `POST /tasks/{id}/cancel`, `GET /streams/{id}` (SSE, `Last-Event-ID`), `GET /files/{id}/{name}`,
 * and `POST /verify` with a verifier. Work that went `pending` is reported back by a signed
 * callback when `callback` is configured. State lives in memory: one process per worker.
 */
import { Hono, type Context } from "hono";

import { digestOfBytes } from "./canonical.js";
import {
  HEADER_ATTEMPT,
  HEADER_CONTRACT_ID,
  HEADER_CORRELATION_ID,
  HEADER_IDEMPOTENCY_KEY,
  HEADER_TASK_TYPE,
  PROTOCOL_NAME,
  STREAM_END_EVENT,
  STREAM_ERROR_EVENT,
  errorBody,
  outputProblem,
  type Capabilities,
  type FailedReport,
  type FileOutput,
  type Output,
  type PriceInfo,
  type Progress,
  type SingleOutput,
  type TaskError,
  type TaskReport,
} from "./protocol.js";
import { GatewayKeys, KeysUnavailable, TokenError, parsePrefixedId } from "./tokens.js";
import { verifyRequestProblem, policyProblem, verifyResponse, type VerifyHandler, type VerifyRequest } from "./verify.js";
import { WebhookSecret } from "./webhooks.js";

export const DEFAULT_SYNC_WAIT_MS = 25_000;
export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;
export const DEFAULT_MAX_INPUT_BYTES = 2 * 1024 * 1024;
/** The code of the `failed` report written when a handler throws unexpectedly. */
export const HANDLER_PANICKED = "WORKER_PANICKED";
/** The code of the `failed` report written when a handler returns an output the protocol forbids. */
export const INVALID_OUTPUT = "WORKER_INVALID_OUTPUT";
/** The code of the `failed` report of a run stopped by `POST /tasks/{id}/cancel`. */
export const TASK_CANCELLED = "TASK_CANCELLED";
const CANCEL_GRACE_MS = 500;
const CANCEL_WAIT_MS = 5_000;
const KEEP_ALIVE_MS = 15_000;

// ----- outcomes --------------------------------------------------------------------------------

/** One event of a streamed output; `done` and `error` names are reserved. */
export interface StreamEvent {
  data: string;
  event?: string;
}

const OUTCOME = Symbol("hiregate.outcome");

export type TaskOutcome =
  | { [OUTCOME]: "completed"; output: Output; metadata?: unknown }
  | { [OUTCOME]: "failed"; error: TaskError }
  | { [OUTCOME]: "pending"; work: () => Promise<unknown>; estimatedCompletion?: Date }
  | { [OUTCOME]: "stream"; events: AsyncIterable<StreamEvent | string> }
  | { [OUTCOME]: "partial"; progress?: Progress; output?: Output };

/** Builders of what a handler returns (a plain value is a `json` output, a string a `text` one). */
export const Outcome = {
  json: (content: unknown, metadata?: unknown): TaskOutcome => ({ [OUTCOME]: "completed", output: { type: "json", content }, metadata }),
  text: (content: string, metadata?: unknown): TaskOutcome => ({ [OUTCOME]: "completed", output: { type: "text", content }, metadata }),
  output: (output: Output, metadata?: unknown): TaskOutcome => ({ [OUTCOME]: "completed", output, metadata }),
  failed: (code: string, message: string, details?: unknown): TaskOutcome => ({
    [OUTCOME]: "failed",
    error: details === undefined ? { code, message } : { code, message, details },
  }),
  /** Continues `work` in the background: the worker answers `pending` now and reports the end by
   * poll and callback. */
  pending: (work: () => Promise<unknown>, estimatedCompletion?: Date): TaskOutcome => ({ [OUTCOME]: "pending", work, estimatedCompletion }),
  /** Completed with a `stream` output: the SDK serves `events` as SSE while they come. */
  stream: (events: AsyncIterable<StreamEvent | string>): TaskOutcome => ({ [OUTCOME]: "stream", events }),
  /** Ended with only part of the work: `items` as a `multiple` output. */
  partial: (progress: Progress | undefined, items: SingleOutput[]): TaskOutcome => ({
    [OUTCOME]: "partial",
    progress,
    output: items.length ? { type: "multiple", items } : undefined,
  }),
};

/** Throw from a handler to end the task `failed` with this code, message and details. */
export class TaskFailed extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
    this.name = "TaskFailed";
  }
}

function isOutcome(value: unknown): value is TaskOutcome {
  return typeof value === "object" && value !== null && OUTCOME in value;
}

const OUTPUT_TYPES = new Set(["text", "json", "file", "stream", "multiple"]);

function asOutcome(value: unknown): TaskOutcome {
  if (isOutcome(value)) return value;
  if (typeof value === "string") return Outcome.text(value);
  if (typeof value === "object" && value !== null && OUTPUT_TYPES.has(String((value as { type?: unknown }).type))) {
    // An output written by hand ({type: "file", url, …}): checked below like every output.
    if (outputProblem(value) === undefined) return Outcome.output(value as Output);
  }
  return Outcome.json(value === undefined ? null : value);
}

// ----- the context -----------------------------------------------------------------------------

interface TaskRecord {
  contractId: string;
  taskId: string;
  pollUrl: string;
  running: boolean;
  progress?: Progress;
  partialOutput?: Output;
  estimatedCompletion?: Date;
  report?: TaskReport;
  finishedAt: number;
  answeredRunning: boolean;
  settled: Deferred;
  finished: Deferred;
  cancel: AbortController;
}

interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
  done: boolean;
}

function deferred(): Deferred {
  let resolve!: () => void;
  const d: Deferred = { promise: new Promise<void>((r) => (resolve = r)), resolve: () => undefined, done: false };
  d.resolve = () => {
    d.done = true;
    resolve();
  };
  return d;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Waits for `promise` at most `ms`, without leaving a timer behind that keeps the process up. */
async function waitAtMost(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** What the handler knows about the run it performs. */
export class TaskContext {
  constructor(
    readonly contractId: string,
    /** The gateway's attempt number (1 unless it retries after a failure). */
    readonly attempt: number,
    /** This run's task id (the last segment of its poll URL). */
    readonly taskId: string,
    /** The contract's task type, when the gateway sent it (`X-Task-Type`). */
    readonly taskType: string | undefined,
    /** The hire's correlation id (`X-Correlation-ID`): put it in your logs. */
    readonly correlationId: string | undefined,
    /** Where this worker is reached (the base of its URLs). */
    readonly baseUrl: string,
    private readonly record: TaskRecord,
    private readonly hosted: HostedOutputs,
  ) {}

  /** Fires when the gateway cancels the task; long work should watch it. */
  get signal(): AbortSignal {
    return this.record.cancel.signal;
  }

  get isCancelled(): boolean {
    return this.record.cancel.signal.aborted;
  }

  /** Publishes progress: until the task ends, polls and duplicates answer `partial` with it. */
  reportProgress(progress: Progress): void {
    if (this.record.running) this.record.progress = progress;
  }

  /** Publishes progress with the items already done (a `multiple` output); the gateway relays the
   * progress and the number of items, not the items. */
  reportPartial(progress: Progress, items: SingleOutput[]): void {
    if (this.record.running) {
      this.record.progress = progress;
      this.record.partialOutput = { type: "multiple", items: [...items] };
    }
  }

  /** Hosts `data` as file `name` of this task (`GET /files/{taskId}/{name}`) and returns the
   * `file` output naming it, with its size and `sha256:` checksum. */
  hostFile(name: string, mime: string, data: Uint8Array | string): FileOutput {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    let safe = [...name].map((c) => (/^[A-Za-z0-9._-]$/.test(c) ? c : "_")).join("");
    if (!safe || /^\.+$/.test(safe)) safe = "file";
    this.hosted.addFile(this.taskId, safe, mime, bytes);
    return {
      type: "file",
      url: `${this.baseUrl}files/${this.taskId}/${safe}`,
      mime,
      size: bytes.length,
      checksum: digestOfBytes(bytes),
      name: safe,
    };
  }
}

// ----- hosted outputs --------------------------------------------------------------------------

interface HostedStream {
  contractId: string;
  events: StreamEvent[];
  ended: boolean;
  waiters: Array<() => void>;
  at: number;
}

class HostedOutputs {
  private files = new Map<string, { mime: string; data: Buffer; at: number }>();
  private streams = new Map<string, HostedStream>();

  constructor(private readonly retentionMs: number) {}

  private forgetExpired() {
    const now = Date.now();
    for (const [key, file] of this.files) if (now - file.at >= this.retentionMs) this.files.delete(key);
    for (const [key, stream] of this.streams) if (now - stream.at >= this.retentionMs) this.streams.delete(key);
  }

  addFile(taskId: string, name: string, mime: string, data: Buffer) {
    this.forgetExpired();
    this.files.set(`${taskId}/${name}`, { mime, data, at: Date.now() });
  }

  file(taskId: string, name: string) {
    return this.files.get(`${taskId}/${name}`);
  }

  startStream(taskId: string, contractId: string, source: AsyncIterable<StreamEvent | string>) {
    this.forgetExpired();
    const hosted: HostedStream = { contractId, events: [], ended: false, waiters: [], at: Date.now() };
    this.streams.set(taskId, hosted);
    const wake = () => hosted.waiters.splice(0).forEach((w) => w());
    const append = (event: StreamEvent) => {
      hosted.events.push({
        data: event.data.replace(/\r\n?/g, "\n"),
        event: event.event?.replace(/[\r\n]/g, "") || undefined,
      });
      wake();
    };
    void (async () => {
      let closedByError = false;
      try {
        for await (const item of source) {
          const event = typeof item === "string" ? { data: item } : item;
          closedByError = event.event === STREAM_ERROR_EVENT;
          append(event);
          if (closedByError) break;
        }
      } catch (error) {
        closedByError = true;
        append({ event: STREAM_ERROR_EVENT, data: JSON.stringify({ code: "WORKER_STREAM_FAILED", message: String(error) }) });
      }
      if (!closedByError) append({ event: STREAM_END_EVENT, data: "{}" });
      hosted.ended = true;
      wake();
    })();
  }

  stream(taskId: string, contractId: string): HostedStream | undefined {
    const hosted = this.streams.get(taskId);
    return hosted && hosted.contractId === contractId ? hosted : undefined;
  }
}

function sseBody(hosted: HostedStream, after: number): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  let following = after;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      while (following >= hosted.events.length && !hosted.ended) {
        let woke = false;
        await waitAtMost(
          new Promise<void>((resolve) =>
            hosted.waiters.push(() => {
              woke = true;
              resolve();
            }),
          ),
          KEEP_ALIVE_MS,
        );
        if (!woke) {
          controller.enqueue(encoder.encode(": keep-alive\n\n"));
          return;
        }
      }
      if (following < hosted.events.length) {
        const event = hosted.events[following] as StreamEvent;
        following += 1;
        const lines = [`id: ${following}`];
        if (event.event) lines.push(`event: ${event.event}`);
        for (const line of event.data.split("\n")) lines.push(`data: ${line}`);
        controller.enqueue(encoder.encode(lines.join("\n") + "\n\n"));
        return;
      }
      controller.close();
    },
  });
}

// ----- callbacks -------------------------------------------------------------------------------

export interface CallbackConfig {
  /** The gateway's base URL: callbacks go to `<gatewayUrl>/v1/callbacks/{contract_id}`. */
  gatewayUrl: string;
  /** The `callback_secret` the gateway returned at registration (`whsec_…`). */
  secret: WebhookSecret | string;
  /** `report` (default: the report plus `event`) or `hire_webhook` (no `status`, as HIRE shows). */
  shape?: "report" | "hire_webhook";
  maxAttempts?: number;
  firstRetryDelayMs?: number;
}

/** The body announcing `report`: its fields plus `event`. */
export function callbackBody(report: TaskReport, shape: "report" | "hire_webhook" = "report"): Record<string, unknown> {
  const event =
    report.status === "completed" ? "task_completed" : report.status === "failed" ? "task_failed" : "task_partial";
  const body: Record<string, unknown> = { event, ...report };
  if (shape === "hire_webhook") delete body.status;
  return body;
}

async function deliverCallback(config: CallbackConfig, report: TaskReport): Promise<boolean> {
  const secret = typeof config.secret === "string" ? WebhookSecret.parse(config.secret) : config.secret;
  const msgId = `cb_${report.task_id ?? report.contract_id}`;
  const body = JSON.stringify(callbackBody(report, config.shape));
  const url = `${config.gatewayUrl.replace(/\/+$/, "")}/v1/callbacks/${report.contract_id}`;
  const attempts = Math.max(1, config.maxAttempts ?? 5);
  let delay = config.firstRetryDelayMs ?? 1000;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      const response = await fetch(url, {
        method: "POST",
        headers: { ...secret.signHeaders(msgId, body), "content-type": "application/json", [HEADER_CONTRACT_ID]: report.contract_id },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      await response.arrayBuffer().catch(() => undefined);
      if (response.ok) return true;
      if (response.status < 500 && ![408, 425, 429].includes(response.status)) return false; // refused: do not retry
    } catch {
      // no answer: retry
    }
    if (attempt < attempts) {
      await sleep(delay);
      delay = Math.min(delay * 2, 60_000);
    }
  }
  return false;
}

// ----- the worker ------------------------------------------------------------------------------

export type TaskHandler = (ctx: TaskContext, input: any) => unknown | Promise<unknown>;

export interface WorkerOptions {
  name: string;
  version: string;
  taskTypes: string[];
  handler?: TaskHandler;
  gatewayKeys?: GatewayKeys;
  /** Accept calls without a contract token: local development only. */
  allowUnauthenticatedForLocalDev?: boolean;
  /** This worker's id at the gateway (`wk_…`): tokens for other workers are refused. */
  workerId?: string;
  /** Base URL for `poll_url` and hosted outputs (else derived from the request). */
  publicUrl?: string;
  callback?: CallbackConfig;
  /** How long `/execute` waits before answering `pending` (`null`: as long as it takes). */
  syncWaitMs?: number | null;
  retentionMs?: number;
  maxConcurrentTasks?: number;
  maxInputBytes?: number;
  pricing?: Record<string, PriceInfo>;
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }

  response(): Response {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.status === 401) headers["www-authenticate"] = "Bearer";
    if (this.status === 429) headers["retry-after"] = "1";
    if (this.status === 503) headers["retry-after"] = "5";
    return new Response(JSON.stringify(errorBody(this.code, this.message)), { status: this.status, headers });
  }
}

const IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

function newTaskId(): string {
  const random = crypto.getRandomValues(new Uint8Array(10));
  let time = Date.now();
  let head = "";
  for (let i = 0; i < 10; i++) {
    head = CROCKFORD[time % 32] + head;
    time = Math.floor(time / 32);
  }
  let value = 0n;
  for (const byte of random) value = (value << 8n) | BigInt(byte);
  let tail = "";
  for (let i = 0; i < 16; i++) {
    tail = CROCKFORD[Number(value & 31n)] + tail;
    value >>= 5n;
  }
  return `task_${head}${tail}`;
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

export class Worker {
  readonly name: string;
  readonly version: string;
  readonly taskTypes: string[];
  /** Handler runs so far (each call of the handler, not each request). */
  handlerRuns = 0;
  /** The worker as a Hono app (mount it with `app.route("/prefix", worker.app)`). */
  readonly app: Hono;
  /** The worker as a standard Fetch API handler. */
  readonly fetch: (request: Request) => Promise<Response>;

  private handler?: TaskHandler;
  private verifier?: { providerFamily: string; modelId: string; handler: VerifyHandler };
  private readonly options: WorkerOptions;
  private readonly latest = new Map<string, { attempt: number; taskId: string }>();
  private readonly tasks = new Map<string, TaskRecord>();
  private readonly hosted: HostedOutputs;
  private lastSweep = Date.now();

  constructor(options: WorkerOptions) {
    if (!options.name.trim() || !options.version.trim()) throw new TypeError("worker name and version must not be empty");
    if (!options.taskTypes.length) throw new TypeError("a worker must declare at least one task type");
    for (const taskType of options.taskTypes) {
      if (!IDENTIFIER.test(taskType)) throw new TypeError(`task type ${JSON.stringify(taskType)} is not an identifier`);
    }
    if (!options.gatewayKeys && !options.allowUnauthenticatedForLocalDev) {
      throw new TypeError("configure gatewayKeys, or explicitly allowUnauthenticatedForLocalDev");
    }
    if (options.maxConcurrentTasks !== undefined && options.maxConcurrentTasks < 1) {
      throw new RangeError("maxConcurrentTasks must be at least 1");
    }
    if (options.publicUrl !== undefined && !/^https?:\/\//.test(options.publicUrl)) {
      throw new TypeError("publicUrl must be an http(s) base URL");
    }
    if (!options.gatewayKeys) console.warn(`worker ${options.name}: gateway token check DISABLED (local development)`);
    this.options = { ...options, publicUrl: options.publicUrl?.replace(/\/*$/, "/") };
    this.name = options.name;
    this.version = options.version;
    this.taskTypes = [...new Set(options.taskTypes)];
    this.handler = options.handler;
    this.hosted = new HostedOutputs(options.retentionMs ?? DEFAULT_RETENTION_MS);
    this.app = this.buildApp();
    this.fetch = (request: Request) => Promise.resolve(this.app.fetch(request));
  }

  /** Sets the task handler (`(ctx, input) => result`); returns it, so it can wrap a declaration. */
  task<H extends TaskHandler>(handler: H): H {
    this.handler = handler;
    return handler;
  }

  /** Serves `POST /verify` with `handler` and declares `verify` in `/capabilities`. */
  onVerify(providerFamily: string, modelId: string, handler: VerifyHandler): this {
    this.verifier = { providerFamily, modelId, handler };
    return this;
  }

  capabilities(): Capabilities {
    const capabilities: Capabilities = {
      protocol: PROTOCOL_NAME,
      name: this.name,
      version: this.version,
      task_types: this.taskTypes,
      completion_callbacks: this.options.callback !== undefined,
      cancel: true,
      verify: this.verifier !== undefined,
    };
    if (this.options.pricing) capabilities.pricing = this.options.pricing;
    if (this.options.maxConcurrentTasks !== undefined) capabilities.max_concurrent_tasks = this.options.maxConcurrentTasks;
    if (this.verifier) {
      capabilities.provider_family = this.verifier.providerFamily;
      capabilities.model_id = this.verifier.modelId;
    }
    return capabilities;
  }

  /** Runs in progress (sync or background). */
  inFlight(): number {
    let count = 0;
    for (const record of this.tasks.values()) if (record.running) count++;
    return count;
  }

  private buildApp(): Hono {
    const app = new Hono();
    const guard = (route: (c: Context) => Promise<Response>) => async (c: Context) => {
      try {
        return await route(c);
      } catch (error) {
        if (error instanceof ApiError) return error.response();
        console.error("worker route failed", error);
        return new ApiError(500, "internal_error", "the worker failed to answer").response();
      }
    };
    app.get("/health", (c) =>
      json({ status: "ok", protocol: PROTOCOL_NAME, name: this.name, version: this.version, tasks_in_flight: this.inFlight() }),
    );
    app.get("/capabilities", () => json(this.capabilities()));
    app.post("/execute", guard((c) => this.execute(c)));
    app.get("/tasks/:id", guard((c) => this.taskStatus(c)));
    app.post("/tasks/:id/cancel", guard((c) => this.cancelTask(c)));
    app.get("/streams/:id", guard((c) => this.streamEvents(c)));
    app.get("/files/:id/:name", (c) => {
      const file = this.hosted.file(c.req.param("id"), c.req.param("name"));
      if (!file) return new ApiError(404, "task_not_found", "no such file").response();
      return new Response(new Uint8Array(file.data), { headers: { "content-type": file.mime } });
    });
    app.post("/verify", guard((c) => this.verify(c)));
    app.notFound(() => new ApiError(404, "not_found", "no such route").response());
    app.onError((error) => {
      console.error("worker route failed", error);
      return new ApiError(500, "internal_error", "the worker failed to answer").response();
    });
    return app;
  }

  // ----- routes --------------------------------------------------------------------------------

  private async execute(c: Context): Promise<Response> {
    // Authenticate before reading the body: an anonymous caller costs no buffering.
    const contractId = await this.authenticate(c.req.raw);
    const taskType = this.taskTypeHeader(c.req.raw);
    const key = c.req.header(HEADER_IDEMPOTENCY_KEY);
    if (key !== undefined && key !== contractId) {
      throw new ApiError(400, "idempotency_key_mismatch", "Idempotency-Key must equal X-Contract-ID");
    }
    const attempt = parseAttempt(c.req.header(HEADER_ATTEMPT));
    const base = this.baseUrl(c.req.raw);
    const body = await readBody(c.req.raw, this.options.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES);
    let input: unknown = null;
    if (body.length) {
      try {
        input = JSON.parse(body.toString("utf8"));
      } catch (error) {
        throw new ApiError(400, "invalid_input", `task input is not valid JSON: ${(error as Error).message}`);
      }
    }
    this.forgetExpired();
    const latest = this.latest.get(contractId);
    if (latest) {
      const record = this.tasks.get(latest.taskId);
      if (record && !(attempt > latest.attempt && allowsRetry(record))) {
        return reportResponse(answer(record), true);
      }
    }
    if (this.options.maxConcurrentTasks !== undefined && this.inFlight() >= this.options.maxConcurrentTasks) {
      throw new ApiError(429, "too_many_tasks", "all task slots are busy; retry later");
    }
    const taskId = newTaskId();
    const record: TaskRecord = {
      contractId,
      taskId,
      pollUrl: `${base}tasks/${taskId}`,
      running: true,
      finishedAt: 0,
      answeredRunning: false,
      settled: deferred(),
      finished: deferred(),
      cancel: new AbortController(),
    };
    this.tasks.set(taskId, record);
    this.latest.set(contractId, { attempt, taskId });
    const ctx = new TaskContext(contractId, attempt, taskId, taskType, c.req.header(HEADER_CORRELATION_ID), base, record, this.hosted);
    // The run lives on its own: a caller hanging up must not cancel paid work.
    void this.run(record, ctx, input);
    const wait = this.options.syncWaitMs === undefined ? DEFAULT_SYNC_WAIT_MS : this.options.syncWaitMs;
    await (wait === null ? record.settled.promise : waitAtMost(record.settled.promise, wait));
    return reportResponse(answer(record), true);
  }

  private async taskStatus(c: Context): Promise<Response> {
    const contractId = await this.authenticate(c.req.raw);
    const record = this.record(c.req.param("id") as string, contractId);
    return reportResponse(answer(record), false);
  }

  private async cancelTask(c: Context): Promise<Response> {
    const contractId = await this.authenticate(c.req.raw);
    const raw = c.req.param("id") as string;
    const taskId = raw === contractId ? this.latest.get(contractId)?.taskId : raw;
    const record = this.record(taskId ?? "", contractId);
    if (record.running) {
      record.cancel.abort();
      await waitAtMost(record.finished.promise, CANCEL_WAIT_MS);
    }
    const report = answer(record);
    const cancelled = report.status === "failed" && report.error.code === TASK_CANCELLED;
    if (!cancelled && report.status !== "pending" && report.status !== "partial") {
      throw new ApiError(409, "task_already_finished", `the task already ended (${report.status}); there is nothing to cancel`);
    }
    return reportResponse(report, false);
  }

  private async streamEvents(c: Context): Promise<Response> {
    const contractId = await this.authenticate(c.req.raw);
    const hosted = this.hosted.stream(c.req.param("id") as string, contractId);
    if (!hosted) throw new ApiError(404, "task_not_found", "no such stream for this contract");
    const after = Number.parseInt(c.req.header("last-event-id")?.trim() ?? "0", 10);
    return new Response(sseBody(hosted, Number.isFinite(after) && after > 0 ? after : 0), {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
    });
  }

  private async verify(c: Context): Promise<Response> {
    if (!this.verifier) throw new ApiError(404, "not_found", "no such route");
    const body = await readBody(c.req.raw, this.options.maxInputBytes ?? DEFAULT_MAX_INPUT_BYTES);
    let request: unknown;
    try {
      request = JSON.parse(body.toString("utf8"));
    } catch (error) {
      throw new ApiError(400, "invalid_verify_request", `the body is not a WattSwarm VerifyRequest: ${(error as Error).message}`);
    }
    const shape = verifyRequestProblem(request);
    if (shape) throw new ApiError(400, "invalid_verify_request", `the body is not a WattSwarm VerifyRequest: ${shape}`);
    const parsed = request as VerifyRequest;
    const policy = policyProblem(parsed.policy);
    if (policy) throw new ApiError(400, "invalid_policy", `the policy binding cannot be applied: ${policy}`);
    const verdict = await this.verifier.handler(parsed);
    return json(verifyResponse(parsed, verdict, this.verifier.providerFamily, this.verifier.modelId));
  }

  // ----- helpers -------------------------------------------------------------------------------

  private record(taskId: string, contractId: string): TaskRecord {
    const record = this.tasks.get(taskId);
    // A task of another contract is reported absent, so task ids cannot be probed across contracts.
    if (!record || record.contractId !== contractId) throw new ApiError(404, "task_not_found", "no such task for this contract");
    return record;
  }

  private async authenticate(request: Request): Promise<string> {
    const keys = this.options.gatewayKeys;
    if (!keys) return contractIdHeader(request);
    const authorization = request.headers.get("authorization") ?? "";
    const match = /^bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!match) throw new ApiError(401, "missing_token", "missing gateway contract token (Authorization: Bearer)");
    const contractId = contractIdHeader(request);
    let claims;
    try {
      claims = await keys.verifyContractToken(match[1] as string);
    } catch (error) {
      if (error instanceof TokenError) throw new ApiError(401, "invalid_token", `invalid gateway contract token: ${error.message}`);
      if (error instanceof KeysUnavailable) throw new ApiError(503, "gateway_keys_unavailable", error.message);
      throw error;
    }
    if (claims.contractId !== contractId) {
      throw new ApiError(401, "contract_mismatch", "contract token is for another contract than X-Contract-ID");
    }
    if (this.options.workerId !== undefined && claims.worker !== this.options.workerId) {
      throw new ApiError(401, "wrong_worker", "contract token is for another worker");
    }
    return contractId;
  }

  private taskTypeHeader(request: Request): string | undefined {
    const raw = request.headers.get(HEADER_TASK_TYPE);
    if (raw === null) return undefined;
    if (!this.taskTypes.includes(raw.trim())) {
      throw new ApiError(400, "unsupported_task_type", "X-Task-Type names a task type this worker does not perform");
    }
    return raw.trim();
  }

  private baseUrl(request: Request): string {
    if (this.options.publicUrl) return this.options.publicUrl;
    // The request URL's path ends in /execute: the worker's base is what comes before it, so a
    // worker mounted under a prefix builds its URLs under that prefix.
    const url = new URL(request.url);
    const host = request.headers.get("host") ?? url.host;
    if (!host) throw new ApiError(400, "missing_host", "cannot build poll URLs: no Host header and no public URL configured");
    const prefix = url.pathname.replace(/\/execute\/?$/, "");
    return `http://${host}${prefix}/`;
  }

  private forgetExpired() {
    const retention = this.options.retentionMs ?? DEFAULT_RETENTION_MS;
    const now = Date.now();
    if (now - this.lastSweep < Math.min(retention, 30_000)) return;
    this.lastSweep = now;
    for (const [taskId, record] of this.tasks) {
      if (!record.running && now - record.finishedAt >= retention) this.tasks.delete(taskId);
    }
    for (const [contractId, latest] of this.latest) if (!this.tasks.has(latest.taskId)) this.latest.delete(contractId);
  }

  private async run(record: TaskRecord, ctx: TaskContext, input: unknown): Promise<void> {
    this.handlerRuns += 1;
    let outcome = await this.guarded(() => this.callHandler(ctx, input), record);
    while (outcome[OUTCOME] === "pending") {
      record.estimatedCompletion = outcome.estimatedCompletion;
      record.settled.resolve();
      outcome = await this.guarded(outcome.work, record);
    }
    if (outcome[OUTCOME] === "stream") {
      this.hosted.startStream(record.taskId, record.contractId, outcome.events);
      outcome = Outcome.output({ type: "stream", url: `${ctx.baseUrl}streams/${record.taskId}`, format: "sse" });
    }
    const report = finalReport(outcome, record);
    record.report = report;
    record.running = false;
    record.progress = undefined;
    record.finishedAt = Date.now();
    record.settled.resolve();
    record.finished.resolve();
    if (record.answeredRunning && this.options.callback) {
      await deliverCallback(this.options.callback, report);
    }
  }

  private async callHandler(ctx: TaskContext, input: unknown): Promise<unknown> {
    if (!this.handler) throw new Error("no task handler registered (worker.task(handler))");
    return this.handler(ctx, input);
  }

  /** Runs handler code so a throw becomes a `failed` report; a cancelled run ends `failed` with
   * `TASK_CANCELLED` whatever the handler does. */
  private async guarded(work: () => Promise<unknown>, record: TaskRecord): Promise<TaskOutcome> {
    const cancelled = () => Outcome.failed(TASK_CANCELLED, "the task was cancelled");
    if (record.cancel.signal.aborted) return cancelled();
    const result = Promise.resolve()
      .then(work)
      .then(
        (value) => ({ ok: true as const, value }),
        (error: unknown) => ({ ok: false as const, error }),
      );
    const stop = new Promise<"cancelled">((resolve) =>
      record.cancel.signal.addEventListener("abort", () => resolve("cancelled"), { once: true }),
    );
    const first = await Promise.race([result, stop]);
    if (first === "cancelled") {
      await waitAtMost(result, CANCEL_GRACE_MS);
      return cancelled();
    }
    if (record.cancel.signal.aborted) return cancelled();
    if (!first.ok) {
      if (first.error instanceof TaskFailed) return Outcome.failed(first.error.code, first.error.message, first.error.details);
      console.error("task handler threw", first.error);
      return Outcome.failed(HANDLER_PANICKED, "the worker's task handler crashed");
    }
    return asOutcome(first.value);
  }
}

function allowsRetry(record: TaskRecord): boolean {
  return !record.running && (record.report?.status === "failed" || record.report?.status === "partial");
}

function currentReport(record: TaskRecord): TaskReport {
  if (record.report) return record.report;
  const estimated = record.estimatedCompletion?.toISOString();
  if (record.progress || record.partialOutput) {
    return stripUndefined({
      status: "partial",
      contract_id: record.contractId,
      task_id: record.taskId,
      poll_url: record.pollUrl,
      progress: record.progress,
      output: record.partialOutput,
      estimated_completion: estimated,
    });
  }
  return stripUndefined({
    status: "pending",
    contract_id: record.contractId,
    task_id: record.taskId,
    poll_url: record.pollUrl,
    estimated_completion: estimated,
  });
}

/** The report to give a caller now; remembers that a running state was shown (the caller is owed
 * a completion callback). */
function answer(record: TaskRecord): TaskReport {
  if (record.running) record.answeredRunning = true;
  return currentReport(record);
}

function stripUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

function finalReport(outcome: TaskOutcome, record: TaskRecord): TaskReport {
  const base = { contract_id: record.contractId, task_id: record.taskId };
  const invalid = (problem: string): FailedReport => ({
    status: "failed",
    ...base,
    error: { code: INVALID_OUTPUT, message: `the worker produced an invalid output: ${problem}` },
  });
  switch (outcome[OUTCOME]) {
    case "completed": {
      const problem = outputProblem(outcome.output);
      if (problem) return invalid(problem);
      return stripUndefined({ status: "completed", ...base, output: outcome.output, metadata: outcome.metadata });
    }
    case "partial": {
      if (outcome.output) {
        const problem = outputProblem(outcome.output);
        if (problem) return invalid(problem);
      }
      // A final partial names no poll_url: nothing is left to check back for.
      return stripUndefined({ status: "partial", ...base, progress: outcome.progress, output: outcome.output });
    }
    case "failed":
      return { status: "failed", ...base, error: outcome.error };
    default:
      return { status: "failed", ...base, error: { code: "WORKER_ERROR", message: "task ended while still pending" } };
  }
}

function reportResponse(report: TaskReport, fromExecute: boolean): Response {
  const running = report.status === "pending" || (report.status === "partial" && report.poll_url !== undefined);
  return json(report, fromExecute && running ? 202 : 200);
}

function contractIdHeader(request: Request): string {
  const raw = request.headers.get(HEADER_CONTRACT_ID);
  if (raw === null) throw new ApiError(400, "missing_contract_id", "missing X-Contract-ID header");
  try {
    return parsePrefixedId(raw.trim(), "ctr");
  } catch {
    throw new ApiError(400, "invalid_contract_id", "X-Contract-ID is not a valid contract id");
  }
}

function parseAttempt(raw: string | undefined): number {
  if (raw === undefined) return 1;
  const attempt = /^\s*\d+\s*$/.test(raw) ? Number(raw.trim()) : 0;
  if (attempt < 1 || attempt > 2 ** 32 - 1) throw new ApiError(400, "invalid_attempt", "X-Attempt must be a whole number of at least 1");
  return attempt;
}

async function readBody(request: Request, limit: number): Promise<Buffer> {
  const declared = Number(request.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > limit) {
    throw new ApiError(413, "input_too_large", `request body larger than ${limit} bytes`);
  }
  if (!request.body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = request.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      throw new ApiError(413, "input_too_large", `request body larger than ${limit} bytes`);
    }
    chunks.push(Buffer.from(value));
  }
  return Buffer.concat(chunks);
}
