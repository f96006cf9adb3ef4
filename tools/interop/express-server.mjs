// A resource server built the way the official docs show: `@x402/express` `paymentMiddleware`
// over an `x402ResourceServer` whose facilitator is reached by URL (`HTTPFacilitatorClient`),
// with the official `@x402/evm` server schemes `exact` and `upto` registered for every EVM
// network. Tests point it at hiregate's bundled facilitator (`hiregate facilitator`) to show that
// a standard x402 seller settles hiregate's schemes through it.
//
// stdin (read to its end before serving):
//   {"facilitatorUrl": "http://…",
//    "routes": {"GET /path": <@x402/express route config: accepts, description, …>, …},
//    "charges"?: {"/path": "<atomic amount>"}}
// Every route answers 200 `{"path": …}`. A path listed in `charges` also sets the
// `Settlement-Overrides` response header to that amount, which is how an `upto` seller tells the
// middleware to settle less than the authorized maximum.
// stdout: `resource server listening on http://127.0.0.1:<port>/` once bound.
import express from "express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { UptoEvmScheme } from "@x402/evm/upto/server";
import { readJsonInput, required } from "./io.mjs";

async function main() {
  const input = await readJsonInput();
  const routes = required(input, "routes");
  const charges = input.charges ?? {};
  const facilitator = new HTTPFacilitatorClient({ url: required(input, "facilitatorUrl") });
  const server = new x402ResourceServer(facilitator)
    .register("eip155:*", new ExactEvmScheme())
    .register("eip155:*", new UptoEvmScheme());

  const app = express();
  app.use(paymentMiddleware(routes, server));
  app.use((request, response) => {
    const charge = charges[request.path];
    if (charge !== undefined) {
      response.setHeader("Settlement-Overrides", JSON.stringify({ amount: charge }));
    }
    response.json({ path: request.path });
  });
  const listener = app.listen(0, "127.0.0.1", () => {
    const { port } = listener.address();
    process.stdout.write(`resource server listening on http://127.0.0.1:${port}/\n`);
  });
  const stop = () => listener.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((error) => {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exit(1);
});
