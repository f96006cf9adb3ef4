// Times the official x402 client (@x402/fetch `wrapFetchWithPayment` with `ExactEvmScheme`) paying
// hiregate contracts, and the same client paying a null endpoint that accepts any payment at once,
// in the same process: the null endpoint is the client's own ceiling on this machine, so the
// ratio between the two is what the gateway costs a standard seeker. With `officialStack`, the
// same client also pays the official TypeScript stack on the same chain: an `@x402/express`
// seller (express-server.mjs) whose facilitator is the official one (facilitator-server.mjs,
// `x402Facilitator` on viem), each its own process, selling a plain route at hiregate's offer.
// That is a standard x402 seller that settles on chain before it answers, as hiregate does.
//
// stdin:  {"privateKey": "0x…", "authorization": "Bearer …", "concurrency": [1, 8],
//          "hiregate": ["http://…/v1/contracts/ctr_…/execute", …],   // one URL per hire
//          "warmup": 4,                                               // hires per target not timed
//          "allowedAssets"?: [{"network": "eip155:…", "asset": "0x…"}],
//          "officialStack"?: {"rpcUrl": "http://…", "chainId": 31337,
//                             "relayerKey": "0x…"}}                  // its facilitator's own key
// The hiregate URLs are used up in order: warm-up first, then each concurrency level in turn
// (give warmup + sum of the rounds' hires). The null endpoint answers the first of them's
// PAYMENT-REQUIRED (same offer, same signing work) and a paid request with 200 and a
// PAYMENT-RESPONSE, verifying nothing.
// stdout: {"rounds": [{"concurrency": c, "hiregate": Load, "null": Load, "official"?: Load}],
//          "failures": [...]}
//         Load = {"hires", "seconds", "per_s", "p50_ms", "p90_ms", "p99_ms"}
import { spawn } from "node:child_process";
import http from "node:http";
import { createInterface } from "node:readline";
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

/** Starts `node <script>` beside this one; resolves with the child and the URL its `… listening on <url>` line names. */
function startScript(script, { env = {}, stdin = "" } = {}) {
  const child = spawn(process.execPath, [new URL(script, import.meta.url).pathname], {
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "inherit"],
  });
  child.stdin.end(stdin);
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const url = line.match(/listening on (http:\/\/\S+)/)?.[1];
      if (url) resolve({ child, url });
    });
    child.on("exit", (code) => reject(new Error(`${script} exited (${code}) before listening`)));
  });
}

/**
 * The official stack selling `POST /hire` at `offer` (hiregate's own `accepts[0]`): the official
 * facilitator with its own relayer key, and an `@x402/express` seller that reaches it by URL.
 */
async function officialStack({ rpcUrl, chainId, relayerKey }, offer) {
  const facilitator = await startScript("./facilitator-server.mjs", {
    env: {
      FACILITATOR_RPC_URL: rpcUrl,
      FACILITATOR_CHAIN_ID: String(chainId),
      FACILITATOR_RELAYER_KEY: relayerKey,
    },
  });
  const route = {
    accepts: {
      scheme: offer.scheme,
      network: offer.network,
      payTo: offer.payTo,
      price: { amount: offer.amount, asset: offer.asset, extra: offer.extra },
      maxTimeoutSeconds: offer.maxTimeoutSeconds,
    },
    description: "the official stack's plain paid route",
  };
  const seller = await startScript("./express-server.mjs", {
    stdin: JSON.stringify({ facilitatorUrl: facilitator.url, routes: { "POST /hire": route } }),
  });
  return {
    url: new URL("hire", seller.url).toString(),
    stop: () => {
      seller.child.kill();
      facilitator.child.kill();
    },
  };
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
        const body = await response.text();
        if (response.status !== 200 || !response.headers.get("payment-response")) {
          const settlement = response.headers.get("payment-response");
          failures.push({
            target: name,
            url,
            status: response.status,
            body: body.slice(0, 300),
            settlement: settlement && Buffer.from(settlement, "base64").toString("utf8").slice(0, 300),
          });
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
  const official = input.officialStack ? await officialStack(input.officialStack, offer) : null;

  const failures = [];
  const take = (n) => urls.splice(0, n);
  await load(payingFetch, take(warmup), 1, headers, failures, "hiregate warm-up");
  await load(payingFetch, Array(warmup).fill(nullUrl), 1, {}, failures, "null warm-up");
  if (official) {
    await load(payingFetch, Array(warmup).fill(official.url), 1, {}, failures, "official warm-up");
  }
  const rounds = [];
  const perRound = Math.floor(urls.length / levels.length);
  for (const concurrency of levels) {
    const mine = take(perRound);
    // Turn about, the null endpoint first: all see the same machine. The official stack goes
    // last: what it leaves running (its facilitator still awaiting failed sends) must not
    // load the machine while hiregate is measured.
    const ceiling = await load(payingFetch, Array(mine.length).fill(nullUrl), concurrency, {}, failures, "null");
    const round = { concurrency, null: ceiling };
    round.hiregate = await load(payingFetch, mine, concurrency, headers, failures, "hiregate");
    if (official) {
      round.official = await load(payingFetch, Array(mine.length).fill(official.url), concurrency, {}, failures, "official");
    }
    round.ratio = Number((round.hiregate.per_s / ceiling.per_s).toFixed(3));
    if (official) {
      round.ratio_to_official = Number((round.hiregate.per_s / round.official.per_s).toFixed(3));
    }
    rounds.push(round);
  }
  server.close();
  official?.stop();
  writeJsonOutput({ rounds, failures });
});
