/**
 * Wire types of the HIRE protocol as the gateway reads them (`seeds/hire-execution.txt`): task
 * reports (`completed`/`failed`/`pending`/`partial`), outputs (`text`, `json`, `file`,
 * `multiple`, `stream`), `/capabilities`, `/health` and the error body. Field names follow the
 * HIRE document literally.
 */

export const PROTOCOL_NAME = "hire";
export const HEADER_CONTRACT_ID = "x-contract-id";
export const HEADER_IDEMPOTENCY_KEY = "idempotency-key";
export const HEADER_TASK_TYPE = "x-task-type";
export const HEADER_ATTEMPT = "x-attempt";
export const HEADER_CORRELATION_ID = "x-correlation-id";
/** Most items in a `multiple` output. */
export const MAX_ITEMS = 64;
/** The event that closes a streamed output, and the one that fails it. */
export const STREAM_END_EVENT = "done";
export const STREAM_ERROR_EVENT = "error";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface TextOutput {
  type: "text";
  content: string;
}
export interface JsonOutput {
  type: "json";
  content: unknown;
}
export interface FileOutput {
  type: "file";
  url: string;
  mime?: string;
  size?: number;
  checksum?: string;
  name?: string;
}
export interface StreamOutput {
  type: "stream";
  url: string;
  format: "sse";
}
export type SingleOutput = TextOutput | JsonOutput | FileOutput | StreamOutput;
export interface MultipleOutput {
  type: "multiple";
  items: SingleOutput[];
}
export type Output = SingleOutput | MultipleOutput;

export interface TaskError {
  code: string;
  message: string;
  details?: unknown;
}

export interface Progress {
  percent?: number;
  message?: string;
}

export interface CompletedReport {
  status: "completed";
  contract_id: string;
  task_id?: string;
  output: Output;
  metadata?: unknown;
}
export interface FailedReport {
  status: "failed";
  contract_id: string;
  task_id?: string;
  error: TaskError;
}
export interface PendingReport {
  status: "pending";
  contract_id: string;
  task_id: string;
  poll_url: string;
  estimated_completion?: string;
}
export interface PartialReport {
  status: "partial";
  contract_id: string;
  task_id: string;
  poll_url?: string;
  progress?: Progress;
  output?: Output;
  estimated_completion?: string;
}
export type TaskReport = CompletedReport | FailedReport | PendingReport | PartialReport;

export interface PriceInfo {
  amount: string;
  currency: string;
  network?: string;
}

export interface Capabilities {
  protocol: string;
  name: string;
  version: string;
  task_types: string[];
  pricing?: Record<string, PriceInfo>;
  max_concurrent_tasks?: number;
  completion_callbacks: boolean;
  cancel: boolean;
  verify: boolean;
  provider_family?: string;
  model_id?: string;
}

export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}

export function errorBody(code: string, message: string, details?: unknown): ErrorBody {
  return { error: details === undefined ? { code, message } : { code, message, details } };
}

function isHttpUrl(value: unknown): boolean {
  return typeof value === "string" && /^https?:\/\/[^\s]+$/.test(value);
}

/** Why `output` is not an output the gateway accepts (`undefined` when it is): the same parse
 * the gateway applies, so a handler bug shows up as a clear `failed` report. */
export function outputProblem(output: unknown, nested = false): string | undefined {
  if (typeof output !== "object" || output === null) {
    return "an output is an object with a type";
  }
  const item = output as Record<string, unknown>;
  const allowed = (...keys: string[]) => {
    const extra = Object.keys(item).filter((key) => !["type", ...keys].includes(key));
    return extra.length ? `unknown field(s) ${extra.join(", ")} in a ${String(item.type)} output` : undefined;
  };
  switch (item.type) {
    case "text":
      return typeof item.content === "string" ? allowed("content") : "a text output's content is a string";
    case "json":
      if (!("content" in item)) return "a json output has content";
      try {
        JSON.stringify(item.content);
      } catch {
        return "a json output's content is not JSON";
      }
      return allowed("content");
    case "file":
      if (!isHttpUrl(item.url)) return "a file output's url must be http(s)";
      return allowed("url", "mime", "size", "checksum", "name");
    case "stream":
      if (!isHttpUrl(item.url)) return "a stream output's url must be http(s)";
      if (item.format !== "sse") return "a stream output's format is sse";
      return allowed("url", "format");
    case "multiple": {
      if (nested) return "multiple outputs cannot be nested";
      if (!Array.isArray(item.items) || item.items.length === 0) return "a multiple output has items";
      if (item.items.length > MAX_ITEMS) return `at most ${MAX_ITEMS} items per multiple output`;
      for (const inner of item.items) {
        const problem = outputProblem(inner, true);
        if (problem) return problem;
      }
      return allowed("items");
    }
    default:
      return `unknown output type ${JSON.stringify(item.type)}`;
  }
}
