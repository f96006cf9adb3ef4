// Signs an x402 v2 `auth-capture` payment with the OFFICIAL client (@x402/evm
// AuthCaptureEvmScheme), as any standard x402 buyer would: an ERC-3009 ReceiveWithAuthorization to
// the deployment's token collector, nonce = the payer-agnostic PaymentInfo hash.
//
// stdin:  {"privateKey": "0x…", "requirements": <one auth-capture PaymentRequirements entry>}
// stdout: {"paymentPayload": {"x402Version": 2, "payload": {"authorization", "signature", "salt"…}}}
//
// The scheme client is called directly (not through x402Client), because the client's default
// spend controls would refuse the devnet token; what it signs is the same.
import { AuthCaptureEvmScheme } from "@x402/evm/auth-capture/client";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

run(async () => {
  const input = await readJsonInput();
  const account = privateKeyToAccount(required(input, "privateKey"));
  const requirements = required(input, "requirements");
  const scheme = new AuthCaptureEvmScheme(account);
  const paymentPayload = await scheme.createPaymentPayload(2, requirements);
  writeJsonOutput({ paymentPayload });
});
