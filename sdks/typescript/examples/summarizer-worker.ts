/**
 * An example worker wrapping a tiny deterministic "agent": an extractive summariser (the sentences
 * with the most frequent words, in their original order) that needs no model download. Replace
 * `summarise` with your agent (Vercel AI SDK, Mastra, an OpenAI/Anthropic call…).
 *
 * Environment: WORKER_LISTEN (default 127.0.0.1:8091), WORKER_GATEWAY_JWKS_URL (the gateway's
 * /.well-known/jwks.json), optional WORKER_CALLBACK_GATEWAY_URL + WORKER_CALLBACK_SECRET (the
 * `callback_secret` of the registration) for pending work.
 */
import { GatewayKeys, Worker, serve, type TaskContext } from "../src/index.js";

const STOP_WORDS = new Set("a an and are as at be by for from has in is it of on or that the to was were will with".split(" "));

/** The agent: deterministic, so the same input always gives the same summary. */
export function summarise(text: string, maxSentences = 2): { summary: string; confidence: number } {
  const sentences = text.match(/[^.!?]+[.!?]*/g)?.map((s) => s.trim()).filter(Boolean) ?? [];
  if (sentences.length === 0) return { summary: "", confidence: 0 };
  const words = (s: string) => s.toLowerCase().match(/[a-z0-9']+/g)?.filter((w) => !STOP_WORDS.has(w)) ?? [];
  const frequency = new Map<string, number>();
  for (const word of words(text)) frequency.set(word, (frequency.get(word) ?? 0) + 1);
  const score = (s: string) => words(s).reduce((sum, w) => sum + (frequency.get(w) ?? 0), 0) / Math.max(words(s).length, 1);
  const chosen = sentences
    .map((sentence, index) => ({ sentence, index, score: score(sentence) }))
    .sort((a, b) => b.score - a.score || a.index - b.index)
    .slice(0, maxSentences)
    .sort((a, b) => a.index - b.index);
  return { summary: chosen.map((c) => c.sentence).join(" "), confidence: sentences.length <= maxSentences ? 0.95 : 0.8 };
}

const env = process.env;
const worker = new Worker({
  name: "summarizer-ts",
  version: "1.0.0",
  taskTypes: ["summarize"],
  gatewayKeys: GatewayKeys.remote(env.WORKER_GATEWAY_JWKS_URL ?? "http://127.0.0.1:8402/.well-known/jwks.json"),
  callback:
    env.WORKER_CALLBACK_GATEWAY_URL && env.WORKER_CALLBACK_SECRET
      ? { gatewayUrl: env.WORKER_CALLBACK_GATEWAY_URL, secret: env.WORKER_CALLBACK_SECRET }
      : undefined,
});

worker.task(async (ctx: TaskContext, input: { text?: unknown }) => {
  const text = typeof input?.text === "string" ? input.text : JSON.stringify(input);
  console.log(`contract ${ctx.contractId} (attempt ${ctx.attempt}): summarising ${text.length} characters`);
  return summarise(text);
});

const [host, port] = (env.WORKER_LISTEN ?? "127.0.0.1:8091").split(":");
await serve(worker.fetch, { hostname: host, port: Number(port) });
