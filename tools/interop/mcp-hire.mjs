// Hires a hiregate worker over MCP with OFFICIAL clients only, no hiregate account: the MCP
// TypeScript SDK (@modelcontextprotocol/sdk Client over streamable HTTP) and the x402 client
// (@x402/core x402Client + @x402/evm ExactEvmScheme), following the x402 MCP transport as a client
// does: call the tool; on `isError` read the PaymentRequired from `structuredContent` (else from
// `content[0].text`); sign it; call again with `_meta["x402/payment"]`; read the settlement from
// the result's `_meta["x402/payment-response"]`.
//
// stdin:  {"url": ".../mcp", "privateKey": "0x…", "workerId": "wk_…", "taskType": "summarize",
//          "input": {…}, "copies"?: 1}
// stdout: {"tools": [...], "found": <find_workers result>, "unpaid": <the unpaid result>,
//          "paid": [<one result per copy of the paid call, sent at once with one payment>]}
//
// The devnet token is not one of the client's default assets, so the assets the offer names are
// allowed explicitly (and only those), as in sign.mjs.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { x402Client } from "@x402/core/client";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { privateKeyToAccount } from "viem/accounts";
import { readJsonInput, required, run, writeJsonOutput } from "./io.mjs";

const PAYMENT_META_KEY = "x402/payment";

/** The PaymentRequired of a tool result, as the transport's client requirements read it. */
function paymentRequiredOf(result) {
  if (!result.isError) return null;
  const isRequired = (value) =>
    value && typeof value === "object" && "x402Version" in value && Array.isArray(value.accepts);
  if (isRequired(result.structuredContent)) return result.structuredContent;
  const first = result.content?.[0];
  if (first?.type === "text") {
    try {
      const parsed = JSON.parse(first.text);
      if (isRequired(parsed)) return parsed;
    } catch {
      // not JSON: no payment asked
    }
  }
  return null;
}

run(async () => {
  const input = await readJsonInput();
  const account = privateKeyToAccount(required(input, "privateKey"));
  const args = {
    worker_id: required(input, "workerId"),
    task_type: required(input, "taskType"),
    input: required(input, "input"),
  };
  const copies = input.copies ?? 1;

  // No Authorization header: a wallet is all this caller has.
  const client = new Client({ name: "hiregate-interop", version: "0.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(required(input, "url"))));
  try {
    const tools = (await client.listTools()).tools.map((tool) => tool.name).sort();
    const found = await client.callTool({ name: "find_workers", arguments: { task_type: args.task_type } });

    const unpaid = await client.callTool({ name: "hire_worker", arguments: args });
    const paymentRequired = paymentRequiredOf(unpaid);
    if (!paymentRequired) {
      writeJsonOutput({ tools, found, unpaid, paid: [] });
      return;
    }
    const allowedAssets = paymentRequired.accepts
      .filter((accept) => typeof accept?.network === "string" && accept.network.startsWith("eip155:"))
      .map((accept) => ({ network: accept.network, asset: accept.asset }));
    const payer = x402Client.fromConfig({
      schemes: [{ network: "eip155:*", client: new ExactEvmScheme(account) }],
      spendControls: { allowedAssets },
    });
    const payment = await payer.createPaymentPayload(paymentRequired);
    const paid = await Promise.all(
      Array.from({ length: copies }, () =>
        client.callTool(
          { name: "hire_worker", arguments: args, _meta: { [PAYMENT_META_KEY]: payment } },
          undefined,
          { timeout: 180_000 },
        ),
      ),
    );
    writeJsonOutput({ tools, found, unpaid, paid });
  } finally {
    await client.close();
  }
});
