// Checks a server's signed offers and receipt (the x402 `offer-receipt` extension) with the
// official `@x402/extensions/offer-receipt` functions, as a buyer holding them would:
// `extractOffersFromPaymentRequired`, `verifyOfferSignatureJWS` (the key found from the JWS
// `kid`: did:key read in place, did:web fetched), `findAcceptsObjectFromSignedOffer`,
// `extractReceiptFromResponse` (from the PAYMENT-RESPONSE header), `verifyReceiptSignatureJWS`
// and `verifyReceiptMatchesOffer`.
//
// stdin:  {"paymentRequired": <decoded PAYMENT-REQUIRED>, "paymentResponseHeader"?: "<raw
//          PAYMENT-RESPONSE>", "payer"?: "0x…", "didWebKid"?: "did:web:…#kid", "gatewayUrl"?: "http://…"}
// `didWebKid` also resolves that DID URL with the official resolver and checks every artifact
// against the key it finds; did:web is defined over https, so requests to
// `https://<host>/…` are sent to `gatewayUrl` (a test gateway serves plain http).
// stdout: {"offers": [{"payload", "kid", "matchesAccept": bool} | {"error"}],
//          "receipt": {"payload", "kid"} | {"error"} | null, "receiptMatchesOffer": bool | null,
//          "didWeb": {"offers": [bool], "receipt": bool | null} | null}
// A verification failure is a verdict (`error`), not a script failure.
import {
  extractJWSHeader,
  extractOffersFromPaymentRequired,
  extractPublicKeyFromKid,
  extractReceiptFromResponse,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureJWS,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureJWS,
} from "@x402/extensions/offer-receipt";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

/** `check()`'s value, or `{error}` with why it threw. */
async function verdict(check) {
  try {
    return await check();
  } catch (error) {
    return { error: String(error?.message ?? error) };
  }
}

/** Sends the resolver's https requests for the gateway's host to `gatewayUrl` instead. */
function serveDidWebOverHttp(gatewayUrl) {
  const gateway = new URL(gatewayUrl);
  const realFetch = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = new URL(typeof input === "string" ? input : input.url);
    if (url.protocol === "https:" && url.host === gateway.host) {
      url.protocol = gateway.protocol;
    }
    return realFetch(url, init);
  };
}

run(async () => {
  const input = await readJsonInput();
  const paymentRequired = required(input, "paymentRequired");
  const accepts = paymentRequired.accepts ?? [];

  const signedOffers = extractOffersFromPaymentRequired(paymentRequired);
  const offers = [];
  for (const offer of signedOffers) {
    offers.push(
      await verdict(async () => {
        const payload = await verifyOfferSignatureJWS(offer);
        return {
          payload,
          kid: extractJWSHeader(offer.signature).kid,
          matchesAccept: findAcceptsObjectFromSignedOffer(offer, accepts) !== undefined,
        };
      }),
    );
  }

  let receipt = null;
  let signedReceipt;
  if (input.paymentResponseHeader) {
    const response = new Response(null, {
      headers: { "PAYMENT-RESPONSE": input.paymentResponseHeader },
    });
    signedReceipt = extractReceiptFromResponse(response);
    receipt = signedReceipt
      ? await verdict(async () => ({
          payload: await verifyReceiptSignatureJWS(signedReceipt),
          kid: extractJWSHeader(signedReceipt.signature).kid,
        }))
      : { error: "no receipt in PAYMENT-RESPONSE" };
  }

  let receiptMatchesOffer = null;
  if (signedReceipt && offers[0]?.payload && input.payer) {
    receiptMatchesOffer = verifyReceiptMatchesOffer(signedReceipt, offers[0].payload, [input.payer]);
  }

  let didWeb = null;
  if (input.didWebKid) {
    serveDidWebOverHttp(required(input, "gatewayUrl"));
    const key = await extractPublicKeyFromKid(input.didWebKid);
    const verifies = async (check) => (await verdict(async () => (await check(), true))) === true;
    didWeb = {
      offers: await Promise.all(
        signedOffers.map((offer) => verifies(() => verifyOfferSignatureJWS(offer, key))),
      ),
      receipt: signedReceipt
        ? await verifies(() => verifyReceiptSignatureJWS(signedReceipt, key))
        : null,
    };
  }

  writeJsonOutput({ offers, receipt, receiptMatchesOffer, didWeb });
});
