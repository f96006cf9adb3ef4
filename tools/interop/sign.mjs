// Signs an x402 v2 payment with the OFFICIAL client (@x402/core x402Client + @x402/evm
// ExactEvmScheme and UptoEvmScheme), as any standard x402 buyer would: `exact` over EIP-3009 or,
// when the offer says `assetTransferMethod: "permit2"`, over Permit2; `upto` over Permit2. Given
// an `rpcUrl`, the client reads the payer's allowance to Permit2 and, when the offer lists the
// `eip2612GasSponsoring` extension and the allowance is short, adds a signed EIP-2612 permit (or,
// under `erc20ApprovalGasSponsoring` for a token whose offer names no EIP-712 domain, a signed
// `approve(Permit2, maxUint256)` transaction at the payer's next nonce).
//
// stdin:  {"privateKey": "0x…", "paymentRequired": <decoded PaymentRequired>, "rpcUrl"?: "http://…"}
// stdout: {"paymentSignature": "<PAYMENT-SIGNATURE header value, base64>",
//          "paymentPayload": <the same payload, decoded>}
//
// The client's default spend controls accept only well-known USDC deployments, capped at $1; the
// devnet token is neither, so the assets offered in `paymentRequired.accepts` are allowed
// explicitly (and only those).
import { x402Client, x402HTTPClient } from "@x402/core/client";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

run(async () => {
  const input = await readJsonInput();
  const account = privateKeyToAccount(required(input, "privateKey"));
  const paymentRequired = required(input, "paymentRequired");
  const offered = Array.isArray(paymentRequired.accepts) ? paymentRequired.accepts : [];
  const allowedAssets = offered
    .filter((accept) => typeof accept?.network === "string" && accept.network.startsWith("eip155:"))
    .map((accept) => ({ network: accept.network, asset: accept.asset }));

  const options = input.rpcUrl ? { rpcUrl: input.rpcUrl } : undefined;
  const client = x402Client.fromConfig({
    schemes: [
      { network: "eip155:*", client: new ExactEvmScheme(account, options) },
      { network: "eip155:*", client: new UptoEvmScheme(account, options) },
    ],
    spendControls: { allowedAssets },
  });
  const paymentPayload = await client.createPaymentPayload(paymentRequired);
  const headers = new x402HTTPClient(client).encodePaymentSignatureHeader(paymentPayload);
  writeJsonOutput({ paymentSignature: headers["PAYMENT-SIGNATURE"], paymentPayload });
});
