// Times the official x402 client (@x402/fetch `wrapFetchWithPayment` with `ExactEvmScheme`) paying
// hiregate contracts, and the same client paying a null endpoint that accepts any payment at once,
// in the same process: the null endpoint is the client's own ceiling on this machine, so the
// ratio between the two is what the gateway costs a standard seeker.
//
// stdin:  {"privateKey": "0x…", "authorization": "Bearer …", "concurrency": [1, 8],
//          "hiregate": ["http://…/v1/contracts/ctr_…/execute", …],   // one URL per hire
//          "warmup": 4,                                               // hires per target not timed
//          "allowedAssets"?: [{"network": "eip155:…", "asset": "0x…"}]}
// The hiregate URLs are used up in order: warm-up first, then each concurrency level in turn
// (give warmup + sum of the rounds' hires). The null endpoint answers the first of them's
// PAYMENT-REQUIRED (same offer, same signing work) and a paid request with 200 and a
// PAYMENT-RESPONSE, verifying nothing.
// stdout: {"rounds": [{"concurrency": c, "hiregate": Load, "null": Load}], "failures": [...]}
//         Load = {"hires", "seconds", "per_s", "p50_ms", "p90_ms", "p99_ms"}
import http from "node:http";
import { wrapFetchWithPaymentFromConfig } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

const REQUEST_TIMEOUT_MS = 60_000;

/** A server that demands `paymentRequired` and accepts any payment at once. */
async function nullEndpoint(paymentRequired, settlement) {
  const server = http.createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      if (request.headers["payment-signature"]) {
        response.writeHead(200, {
          "content-type": "application/json",
          "payment-response": settlement,
        });
        response.end('{"status":"completed","output":{"summary":"null"}}');
      } else {
        response.writeHead(402, {
          "content-type": "application/json",
          "payment-required": paymentRequired,
        });
        response.end('{"error":{"code":"payment_required"}}');
      }
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const index = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return Number(sorted[Math.max(0, index)].toFixed(2));
}

/** Pays every URL of `urls` with `concurrency` seekers at once; returns the load figures. */
async function load(payingFetch, urls, concurrency, headers, failures, name) {
  const latencies = [];
  let next = 0;
  const started = performance.now();
  async function seeker() {
    while (next < urls.length) {
      const url = urls[next++];
      const t0 = performance.now();
      try {
        const response = await payingFetch(url, {
          method: "POST",
          headers,
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        await response.arrayBuffer();
        if (response.status !== 200 || !response.headers.get("payment-response")) {
          failures.push({ target: name, url, status: response.status });
          continue;
        }
        latencies.push(performance.now() - t0);
      } catch (error) {
        failures.push({ target: name, url, error: String(error?.message ?? error) });
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, seeker));
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    hires: latencies.length,
    seconds: Number(seconds.toFixed(3)),
    per_s: Number((latencies.length / seconds).toFixed(1)),
    p50_ms: percentile(latencies, 50),
    p90_ms: percentile(latencies, 90),
    p99_ms: percentile(latencies, 99),
  };
}

run(async () => {
  const input = await readJsonInput();
  const account = privateKeyToAccount(required(input, "privateKey"));
  const urls = [...required(input, "hiregate")];
  const levels = input.concurrency ?? [1, 8];
  const warmup = input.warmup ?? 4;
  const headers = input.authorization ? { Authorization: input.authorization } : {};
  const payingFetch = wrapFetchWithPaymentFromConfig(fetch, {
    schemes: [{ network: "eip155:*", client: new ExactEvmScheme(account) }],
    spendControls: { allowedAssets: Array.isArray(input.allowedAssets) ? input.allowedAssets : true },
  });

  // The null endpoint demands what hiregate demands, so the client signs the same thing.
  const sample = await fetch(urls[0], { method: "POST", headers });
  const paymentRequired = sample.headers.get("payment-required");
  await sample.arrayBuffer();
  if (sample.status !== 402 || !paymentRequired) {
    throw new Error(`the first hiregate URL answered ${sample.status}, not a 402 with PAYMENT-REQUIRED`);
  }
  const offer = JSON.parse(Buffer.from(paymentRequired, "base64").toString("utf8")).accepts[0];
  const settlement = Buffer.from(
    JSON.stringify({
      success: true,
      transaction: `0x${"00".repeat(32)}`,
      network: offer.network,
      payer: account.address,
    }),
  ).toString("base64");
  const server = await nullEndpoint(paymentRequired, settlement);
  const nullUrl = `http://127.0.0.1:${server.address().port}/execute`;

  const failures = [];
  const take = (n) => urls.splice(0, n);
  await load(payingFetch, take(warmup), 1, headers, failures, "hiregate warm-up");
  await load(payingFetch, Array(warmup).fill(nullUrl), 1, {}, failures, "null warm-up");
  const rounds = [];
  const perRound = Math.floor(urls.length / levels.length);
  for (const concurrency of levels) {
    const mine = take(perRound);
    // Turn about, the null endpoint first: both see the same machine.
    const ceiling = await load(payingFetch, Array(mine.length).fill(nullUrl), concurrency, {}, failures, "null");
    const ours = await load(payingFetch, mine, concurrency, headers, failures, "hiregate");
    rounds.push({
      concurrency,
      hiregate: ours,
      null: ceiling,
      ratio: Number((ours.per_s / ceiling.per_s).toFixed(3)),
    });
  }
  server.close();
  writeJsonOutput({ rounds, failures });
});
