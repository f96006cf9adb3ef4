// Verifies or settles one payment with the OFFICIAL facilitator library (@x402/core/facilitator +
// @x402/evm/exact/facilitator for `exact` over EIP-3009 and Permit2, @x402/evm/upto/facilitator for
// `upto`) against a given EVM RPC, e.g. a hiregate devnet. For `upto`, the settle request's
// `paymentRequirements.amount` is the amount to settle, and the relayer is the facilitator the
// payer's witness must name.
//
// stdin:  {"rpcUrl": "http://127.0.0.1:…", "chainId": 31337, "relayerKey": "0x…",
//          "paymentPayload": {…}, "paymentRequirements": {…}, "action": "verify" | "settle"}
// stdout: the library's verdict: a VerifyResponse ({isValid, invalidReason?, payer?, …}) or a
//         SettleResponse ({success, transaction, network, payer?, errorReason?, …}).
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { createWalletClient, defineChain, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

// Bounded so a stuck chain gives `settlement_pending` rather than hanging the caller.
const CONFIRMATION_TIMEOUT_MS = 30_000;

run(async () => {
  const input = await readJsonInput();
  const rpcUrl = required(input, "rpcUrl");
  const chainId = Number(required(input, "chainId"));
  const action = required(input, "action");
  const paymentPayload = required(input, "paymentPayload");
  const paymentRequirements = required(input, "paymentRequirements");
  if (!Number.isSafeInteger(chainId) || chainId <= 0) {
    throw new Error(`chainId must be a positive integer, got ${input.chainId}`);
  }

  // viem needs a chain object to send transactions; the devnet is not one of its known chains.
  const chain = defineChain({
    id: chainId,
    name: `devnet-${chainId}`,
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const account = privateKeyToAccount(required(input, "relayerKey"));
  const client = createWalletClient({ account, chain, transport: http(rpcUrl) }).extend(publicActions);
  const signer = toFacilitatorEvmSigner(
    { ...client, address: account.address },
    { confirmationTimeoutMs: CONFIRMATION_TIMEOUT_MS },
  );

  const facilitator = new x402Facilitator();
  registerExactEvmScheme(facilitator, { signer, networks: `eip155:${chainId}` });
  facilitator.register(`eip155:${chainId}`, new UptoEvmScheme(signer));

  let verdict;
  if (action === "verify") {
    verdict = await facilitator.verify(paymentPayload, paymentRequirements);
  } else if (action === "settle") {
    verdict = await facilitator.settle(paymentPayload, paymentRequirements);
  } else {
    throw new Error(`action must be "verify" or "settle", got ${JSON.stringify(action)}`);
  }
  writeJsonOutput(verdict);
});
