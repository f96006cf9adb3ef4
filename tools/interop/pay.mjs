// Pays an x402 v2 endpoint the way a standard buyer does: @x402/fetch `wrapFetchWithPayment`
// sends the request, answers the 402 with a payment signed by the official EVM client, and
// retries once.
//
// stdin:  {"url": "http://…", "privateKey": "0x…", "method"?: "POST", "authorization"?: "Bearer …",
//          "body"?: <JSON value or string>, "headers"?: {name: value},
//          "allowedAssets"?: [{"network": "eip155:…", "asset": "0x…"}],
//          "scheme"?: "exact" | "auth-capture" | "upto", "rpcUrl"?: "http://…"}
// `scheme` picks the official client registered for EVM networks: `ExactEvmScheme` (default),
// `AuthCaptureEvmScheme` (escrowed payments) or `UptoEvmScheme` (metered payments, a Permit2
// authorization of a maximum); the 402 must offer that scheme. `rpcUrl` gives the
// exact client a node to read from, which it needs to offer the `eip2612GasSponsoring` extension
// of a Permit2 payment (it signs an EIP-2612 permit approving Permit2 when the payer's allowance
// is short and the 402 declares the extension); without it the payer must have approved Permit2.
// stdout: {"status": 200, "headers": {…}, "body": <JSON if it parses, else text>,
//          "paymentResponse": <decoded PAYMENT-RESPONSE, or null>}
//
// Spend controls: the listed assets are allowed (the devnet token is not a default asset); without
// a list any asset is allowed, which is acceptable only because this runs against test chains.
import { decodePaymentResponseHeader, wrapFetchWithPaymentFromConfig } from "@x402/fetch";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";
import { parseBody, REQUEST_TIMEOUT_MS, requestOf, schemeClient } from "./payer.mjs";

run(async () => {
  const input = await readJsonInput();
  const url = required(input, "url");
  const account = privateKeyToAccount(required(input, "privateKey"));
  const { method, headers, body } = requestOf(input);

  const payingFetch = wrapFetchWithPaymentFromConfig(fetch, {
    schemes: [{ network: "eip155:*", client: schemeClient(input.scheme, account, input.rpcUrl) }],
    spendControls: { allowedAssets: Array.isArray(input.allowedAssets) ? input.allowedAssets : true },
  });
  const response = await payingFetch(url, {
    method,
    headers,
    body,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });

  const paymentResponseHeader = response.headers.get("payment-response");
  writeJsonOutput({
    status: response.status,
    headers: Object.fromEntries(response.headers.entries()),
    body: parseBody(await response.text()),
    paymentResponse: paymentResponseHeader ? decodePaymentResponseHeader(paymentResponseHeader) : null,
  });
});
