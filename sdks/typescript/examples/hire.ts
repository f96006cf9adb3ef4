/**
 * Hire a worker through hiregate and verify the receipt offline: discover → propose → pay the 402
 * with the official @x402/fetch client → follow the contract → fetch the receipt → verify it
 * against the gateway's JWKS.
 *
 * Environment (`scripts/devnet.sh` prints all of them for the local devnet): HIREGATE_GATEWAY_URL,
 * HIREGATE_SEEKER_KEY (hg_sk_…), HIREGATE_SEEKER_WALLET_KEY (else the first of
 * HIREGATE_SEEKER_WALLET_KEYS), optional HIREGATE_WORKER_ID (else the first healthy `summarize`
 * worker) and HIREGATE_MAX_PRICE (atomic units, default 5000000).
 *
 * Prints one JSON line; exits 0 only for a settled hire with a verified receipt.
 */
import { SeekerClient } from "../src/index.js";

async function main(): Promise<number> {
  const env = process.env;
  const walletKey = (env.HIREGATE_SEEKER_WALLET_KEY ?? env.HIREGATE_SEEKER_WALLET_KEYS?.split(",")[0]) as `0x${string}`;
  const seeker = new SeekerClient({
    gatewayUrl: env.HIREGATE_GATEWAY_URL as string,
    apiKey: env.HIREGATE_SEEKER_KEY as string,
    walletPrivateKey: walletKey,
    maxPrice: BigInt(env.HIREGATE_MAX_PRICE ?? "5000000"),
  });
  let workerId = env.HIREGATE_WORKER_ID;
  if (!workerId) {
    const [first] = await seeker.discover({ taskType: "summarize", healthy: true });
    if (!first) {
      console.error("no healthy summarize worker is listed");
      return 1;
    }
    workerId = first.id as string;
  }
  const hire = await seeker.hire(workerId, "summarize", { text: "hiregate pays agents only for verified work." }, {
    verification: { policy_id: "vp.schema_only.v1", policy_params: {} },
    acceptance_window_s: 0,
  });
  console.log(
    JSON.stringify({
      contract_id: hire.contractId,
      state: hire.contract.state,
      execute_status: hire.execute.status,
      deliverable: hire.execute.body?.deliverable?.output ?? null,
      settlement: hire.execute.paymentResponse,
      receipt: hire.receipt && {
        outcome: hire.receipt.outcome,
        terms_hash: hire.receipt.terms_hash,
        tx_hash: hire.receipt.payment?.tx_hash ?? null,
        verified: true,
      },
    }),
  );
  return hire.contract.state === "settled" && hire.receipt ? 0 : 3;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
