// Signs an x402 v2 `auth-capture` payment with the OFFICIAL client (@x402/core x402Client +
// @x402/evm AuthCaptureEvmScheme), as any standard x402 buyer would. Needs no RPC.
//
// stdin:  {"privateKey": "0x…", "paymentRequired": <decoded PaymentRequired>}
// stdout: {"paymentSignature": "<PAYMENT-SIGNATURE header value, base64>",
//          "paymentPayload": <the same payload, decoded>}
//
// The client's default spend controls accept only well-known USDC deployments, capped at $1; the
// devnet token is neither, so the assets offered in `paymentRequired.accepts` are allowed
// explicitly (and only those).
import { x402Client, x402HTTPClient } from "@x402/core/client";
import { AuthCaptureEvmScheme } from "@x402/evm/auth-capture/client";
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

  const client = x402Client.fromConfig({
    schemes: [{ network: "eip155:*", client: new AuthCaptureEvmScheme(account) }],
    spendControls: { allowedAssets },
  });
  const paymentPayload = await client.createPaymentPayload(paymentRequired);
  const headers = new x402HTTPClient(client).encodePaymentSignatureHeader(paymentPayload);
  writeJsonOutput({ paymentSignature: headers["PAYMENT-SIGNATURE"], paymentPayload });
});
