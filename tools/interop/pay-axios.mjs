// Pays an x402 v2 endpoint with the official axios client: @x402/axios `wrapAxiosWithPayment`
// adds a response interceptor to a plain axios instance that answers the 402 with a payment
// signed by the official EVM scheme client and retries once.
//
// stdin and stdout as pay.mjs's (same fields, same answer shape); `rpcUrl` as there.
//
// @x402/axios is published on the 2.11 line only (npm has 2.2.0 and 2.11.0), so it brings its own
// @x402/core 2.11 while the scheme clients come from @x402/evm 2.27: the interceptor only calls
// the scheme client's `createPaymentPayload`, which both lines share. Core 2.11 has no
// `spendControls`; the allowed assets are enforced by a payment policy instead (the same rule).
import axios from "axios";
import { decodePaymentResponseHeader, wrapAxiosWithPaymentFromConfig } from "@x402/axios";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";
import { parseBody, REQUEST_TIMEOUT_MS, requestOf, schemeClient } from "./payer.mjs";

/** A policy keeping the offers whose network and asset are listed (addresses case-insensitive). */
function allowedAssetsPolicy(allowed) {
  const key = (network, asset) => `${network}|${String(asset).toLowerCase()}`;
  const keys = new Set(allowed.map(({ network, asset }) => key(network, asset)));
  return (_version, requirements) => requirements.filter((r) => keys.has(key(r.network, r.asset)));
}

run(async () => {
  const input = await readJsonInput();
  const url = required(input, "url");
  const account = privateKeyToAccount(required(input, "privateKey"));
  const { method, headers, body } = requestOf(input);

  const instance = axios.create({
    timeout: REQUEST_TIMEOUT_MS,
    // The answer as text, parsed below as pay.mjs parses it.
    transformResponse: [(data) => data],
  });
  wrapAxiosWithPaymentFromConfig(instance, {
    schemes: [{ network: "eip155:*", client: schemeClient(input.scheme, account, input.rpcUrl) }],
    policies: Array.isArray(input.allowedAssets) ? [allowedAssetsPolicy(input.allowedAssets)] : [],
  });

  let response;
  try {
    response = await instance.request({ url, method, headers, data: body });
  } catch (error) {
    // axios rejects every non-2xx answer (the paid retry's 422 too): report it like a success.
    if (!error.response) {
      throw error;
    }
    response = error.response;
  }

  const responseHeaders = Object.fromEntries(
    Object.entries(response.headers.toJSON?.() ?? response.headers).map(([k, v]) => [k.toLowerCase(), String(v)]),
  );
  const paymentResponseHeader = responseHeaders["payment-response"];
  writeJsonOutput({
    status: response.status,
    headers: responseHeaders,
    body: parseBody(typeof response.data === "string" ? response.data : ""),
    paymentResponse: paymentResponseHeader ? decodePaymentResponseHeader(paymentResponseHeader) : null,
  });
});
