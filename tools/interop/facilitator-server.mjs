// The OFFICIAL facilitator library (@x402/core/facilitator with the @x402/evm `exact` and `upto`
// facilitator schemes) served over plain node `http`, as an external facilitator a gateway reaches by URL. Same wiring as the
// one-shot facilitator.mjs; this one stays up so a gateway process can call it many times.
//
//   POST /verify   {x402Version, paymentPayload, paymentRequirements} → VerifyResponse
//   POST /settle   {x402Version, paymentPayload, paymentRequirements} → SettleResponse
//   GET  /supported                                                   → SupportedResponse
//
// Configuration (argv wins over the environment):
//   --rpc-url <url>     | FACILITATOR_RPC_URL      EVM JSON-RPC endpoint
//   --chain-id <n>      | FACILITATOR_CHAIN_ID     EIP-155 chain id
//   --port <n>          | FACILITATOR_PORT         TCP port on 127.0.0.1 (default 0: any free one)
//   FACILITATOR_RELAYER_KEY                        relayer private key (env only: argv is visible
//                                                  to every user of the machine)
// Prints `facilitator listening on http://127.0.0.1:<port>/` on stdout once bound.
//
// A library exception answers 500 with {"error": message} (as the reference express server
// does); a body that is not JSON or lacks a field answers 400.
import { createServer } from "node:http";
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { createWalletClient, defineChain, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";

// Bounded so a stuck chain gives the library's `settlement_pending`-style failure instead of a
// request that never ends; callers put their own, shorter time limit in front.
const CONFIRMATION_TIMEOUT_MS = 60_000;
const MAX_BODY_BYTES = 1_000_000;

function option(name, envName) {
  const index = process.argv.indexOf(`--${name}`);
  if (index !== -1 && index + 1 < process.argv.length) {
    return process.argv[index + 1];
  }
  return process.env[envName];
}

function requiredOption(name, envName) {
  const value = option(name, envName);
  if (value === undefined || value === "") {
    throw new Error(`--${name} or ${envName} is required`);
  }
  return value;
}

function send(response, status, value) {
  const body = JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? v.toString() : v));
  response.writeHead(status, { "content-type": "application/json" });
  response.end(body);
}

async function readBody(request) {
  const chunks = [];
  let size = 0;
  for await (const chunk of request) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      throw Object.assign(new Error("body too large"), { status: 413 });
    }
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch (error) {
    throw Object.assign(new Error(`body is not JSON: ${error.message}`), { status: 400 });
  }
}

function main() {
  const rpcUrl = requiredOption("rpc-url", "FACILITATOR_RPC_URL");
  const chainId = Number(requiredOption("chain-id", "FACILITATOR_CHAIN_ID"));
  const port = Number(option("port", "FACILITATOR_PORT") ?? 0);
  const relayerKey = process.env.FACILITATOR_RELAYER_KEY;
  if (!relayerKey) {
    throw new Error("FACILITATOR_RELAYER_KEY is required");
  }
  if (!Number.isSafeInteger(chainId) || chainId <= 0) {
    throw new Error(`chain id must be a positive integer, got ${chainId}`);
  }
  if (!Number.isSafeInteger(port) || port < 0 || port > 65535) {
    throw new Error(`port must be 0..65535, got ${port}`);
  }

  // viem needs a chain object to send transactions; a devnet is not one of its known chains.
  const chain = defineChain({
    id: chainId,
    name: `devnet-${chainId}`,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const account = privateKeyToAccount(relayerKey);
  const client = createWalletClient({ account, chain, transport: http(rpcUrl) }).extend(publicActions);
  const signer = toFacilitatorEvmSigner(
    { ...client, address: account.address },
    { confirmationTimeoutMs: CONFIRMATION_TIMEOUT_MS },
  );
  const facilitator = new x402Facilitator();
  registerExactEvmScheme(facilitator, { signer, networks: `eip155:${chainId}` });
  // `upto` has no register helper in 2.27; its scheme advertises the relayer as the
  // `facilitatorAddress` an upto payer must name.
  facilitator.register(`eip155:${chainId}`, new UptoEvmScheme(signer));

  const server = createServer(async (request, response) => {
    try {
      const path = new URL(request.url, "http://localhost").pathname;
      if (request.method === "GET" && path === "/supported") {
        send(response, 200, facilitator.getSupported());
        return;
      }
      if (request.method === "POST" && (path === "/verify" || path === "/settle")) {
        const body = await readBody(request);
        if (!body?.paymentPayload || !body?.paymentRequirements) {
          send(response, 400, { error: "paymentPayload and paymentRequirements are required" });
          return;
        }
        const verdict =
          path === "/verify"
            ? await facilitator.verify(body.paymentPayload, body.paymentRequirements)
            : await facilitator.settle(body.paymentPayload, body.paymentRequirements);
        send(response, 200, verdict);
        return;
      }
      send(response, 404, { error: `no route ${request.method} ${path}` });
    } catch (error) {
      send(response, error?.status ?? 500, { error: String(error?.message ?? error) });
    }
  });
  server.listen(port, "127.0.0.1", () => {
    const { port: bound } = server.address();
    process.stdout.write(`facilitator listening on http://127.0.0.1:${bound}/\n`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

try {
  main();
} catch (error) {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
}
