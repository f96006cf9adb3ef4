// Answer a hiregate contract route's sign-in-with-x challenge with the official TypeScript x402
// SDK (@x402/extensions/sign-in-with-x). Reads {"paymentRequired": <the 401's PAYMENT-REQUIRED
// header>, "url": <the route's URL>, "privateKey": <0x hex>} on stdin and prints the headers the
// SDK's SIWX client hook (createSIWxClientHook) adds to the retry, as JSON. Nothing here builds or
// signs a message itself: the SDK picks the chain, checks the challenge is bound to the URL's
// origin, builds the EIP-4361 message, signs it with the viem account (EIP-191) and encodes it.
import { createSIWxClientHook } from "@x402/extensions/sign-in-with-x";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { privateKeyToAccount } from "viem/accounts";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const args = JSON.parse(input);
const hook = createSIWxClientHook(privateKeyToAccount(args.privateKey));
const result = await hook({
  paymentRequired: decodePaymentRequiredHeader(args.paymentRequired),
  requestUrl: args.url,
});
if (!result) {
  console.error("the SDK's SIWX hook did not answer the challenge");
  process.exit(1);
}
process.stdout.write(JSON.stringify(result.headers));
