// A browser wallet hires without an account from the web console, in a real headless Chromium
// (playwright-core, the distribution's Chromium), over a listing's stable x402 resource
// (`POST /x402/workers/{id}/{task}`): no API key is ever given to the page. The wallet is an
// EIP-1193 provider injected before the page's scripts (`addInitScript`) whose
// `eth_signTypedData_v4` is signed in node (`exposeFunction`) by viem with the devnet key the
// test funded, so every signature is real and the chain settles it.
//
// The run: the login page's link to the wallet hire, discovery, the listing (no proposal form
// without an account), an input refused in the page (nothing sent) and one refused by the
// gateway (its failing path shown), the gateway's signed offer shown, a wallet on another chain
// (nothing signed or sent), a declined signature
// (EIP-1193 4001: nothing sent), a payment the gateway refuses (a signature over other data: 402,
// shown as refused, the offer payable again), then the paid hire: the verified deliverable, the
// settlement transaction, the contract followed live with the capability token to `settled`;
// long work (202) followed live until its deliverable is released.
// Last, an input the worker answers badly: paid for, rejected by verification, shown as such,
// nothing delivered and nothing settled. With `scheme: "auth-capture"` in the input, the run is
// one escrowed hire of an auth-capture listing instead (ReceiveWithAuthorization, captured).
//
// Input (JSON on stdin, from gateway/tests/api/console.rs):
//   { baseUrl, chromium, screenshotDir, workerId, workerName, walletKey, chainId, network,
//     task, good, slow, bad, price: {amount, shown} }
// Output: one JSON line,
//   {"done":true,"checks":n,"screenshots":[…],"paid":{contractId,transaction,nonce},
//    "pending":{contractId,transaction},
//    "rejected":{contractId,nonce},"walletCalls":[…]}
// Any failed expectation, page error or unexpected console error exits non-zero.

import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";
import { TIMEOUT, expect, expectEqual, input, problems, screenshots, shot, tally } from "./run.mjs";
import { injectProvider, testWallet } from "./wallet.mjs";

// --- the wallet: Node holds the key, the page holds an EIP-1193 provider ----------------------

const wallet = testWallet(input.walletKey, input.chainId);

// --- the page -----------------------------------------------------------------------------

// Calls of the stable resource, paid or not, and every Authorization header the page sent.
const resourceCalls = [];
const authorizations = [];
// Chromium logs every non-2xx fetch: the 402 is a step of x402; the 400 and 422 are the
// refusals this run provokes (the gateway's input check, the rejected deliverable).
const EXPECTED_HTTP = /status of (400|402|422)\b/;

function watch(page) {
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const text = message.text();
    if (text.startsWith("Failed to load resource") && EXPECTED_HTTP.test(text)) return;
    problems.push(`console error: ${text}`);
  });
  page.on("requestfailed", (request) => {
    if (request.failure()?.errorText === "net::ERR_ABORTED") return;
    problems.push(`request failed: ${request.url()} ${request.failure()?.errorText}`);
  });
  page.on("request", (request) => {
    if (!request.url().startsWith(input.baseUrl)) problems.push(`request to another origin: ${request.url()}`);
    const authorization = request.headers().authorization;
    if (authorization) authorizations.push(authorization);
    if (new URL(request.url()).pathname.startsWith("/x402/")) {
      resourceCalls.push({ paid: Boolean(request.headers()["payment-signature"]), body: request.postData() });
    }
  });
}

const paidCalls = () => resourceCalls.filter((c) => c.paid).length;

/** Enter `value` and ask for the offer; waits for the quote. */
async function quote(page, value) {
  await page.fill("#wallet-hire-input", JSON.stringify(value));
  await page.click("#wallet-hire-quote-button");
  await page.waitForSelector('#wallet-hire-status[data-step="quoted"] #wallet-hire-pay');
  return (await page.textContent("#wallet-hire-contract-id")).trim();
}

/** Pay the quoted offer; checks the 200 and returns the settlement transaction shown. */
async function payAndSettle(page) {
  await page.click("#wallet-hire-pay");
  await page.waitForSelector("#wallet-hire-answer", { timeout: 90_000 });
  expectEqual(await page.getAttribute("#pay-outcome", "data-outcome"), "completed",
    `the paid hire: ${await page.textContent("#wallet-hire-outcome")}`);
  const transaction = (await page.textContent("#payment-response-tx")).trim();
  expect(/^0x[0-9a-f]{64}$/.test(transaction), `PAYMENT-RESPONSE names a transaction: ${transaction}`);
  expectEqual((await page.textContent("#wallet-hire-settlement-tx")).trim(), transaction,
    "the answer's settlement is PAYMENT-RESPONSE's transaction");
  const output = JSON.parse(await page.textContent("#wallet-hire-output"));
  expect(typeof output.summary === "string", `the deliverable: ${JSON.stringify(output)}`);
  expect((await page.textContent("#wallet-hire-token")).trim().startsWith("hg_cap_"), "the capability token");
  await page.waitForSelector('#wallet-hire-stream[data-state="ended"]');
  await page.waitForSelector('#wallet-hire-state[data-state="settled"]');
  const kinds = await page.$$eval("#wallet-hire-timeline li", (items) => items.map((li) => li.dataset.kind));
  expect(kinds.includes("settlement_succeeded"), `the timeline reaches the settlement: ${kinds}`);
  expect(!(await page.isVisible("#wallet-hire-pay")), "a paid offer is not offered again");
  return transaction;
}

/** An escrowed (`auth-capture`) listing: the offer, the ReceiveWithAuthorization, the capture. */
async function runEscrowed(page) {
  await page.goto(`${input.baseUrl}/console#/wallet-hire/${input.workerId}`);
  await page.waitForSelector("#wallet-hire-form");
  const contractId = await quote(page, input.good);
  expectEqual(await page.getAttribute("#wallet-hire-quote", "data-scheme"), "auth-capture", "the scheme");
  expectEqual((await page.textContent("#wallet-hire-price")).trim(), input.price.shown, "the price to pay");
  const transaction = await payAndSettle(page);
  expectEqual(wallet.signed.at(-1).primaryType, "ReceiveWithAuthorization", "the escrowed authorization");
  expectEqual(paidCalls(), 1, "one request carried a payment");
  await shot(page, "wallet-hire-escrowed-settled");
  return { paid: { contractId, transaction } };
}

async function run(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  await context.exposeFunction("hiregateTestWallet", wallet.request);
  await context.addInitScript(injectProvider);
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page);
  if (input.scheme === "auth-capture") {
    const outcome = await runEscrowed(page);
    await context.close();
    return outcome;
  }

  // No account: from the login page to the wallet hire.
  await page.goto(`${input.baseUrl}/console`);
  await page.waitForSelector("#login");
  await page.click("#wallet-hire-link");
  const row = `#workers tr[data-worker-id="${input.workerId}"]`;
  await page.waitForSelector(row);
  expectEqual((await page.textContent(`${row} .worker-link`)).trim(), input.workerName, "the listing's name");
  expect((await page.textContent(`${row} .task-price[data-task="${input.task}"]`)).includes(input.price.shown),
    "the price in the token's symbol");
  await shot(page, "wallet-hire-discovery");
  await page.click(`${row} .worker-link`);
  await page.waitForSelector("#wallet-hire-form");
  expectEqual(new URL(page.url()).hash, `#/wallet-hire/${input.workerId}`, "the listing's public link");
  expect(await page.$("#propose-form") === null, "no proposal form without an account");
  expectEqual(await page.inputValue("#wallet-hire-task"), input.task, "the task type");

  // Refused in the page: nothing sent.
  await page.fill("#wallet-hire-input", '{"mode": "ok"}');
  await page.click("#wallet-hire-quote-button");
  await page.waitForSelector('#wallet-hire-error[data-code="input_schema_violation"] ~ .violations[data-source="console"]');
  const local = await page.$$eval('.violations[data-source="console"] li', (items) => items.map((li) => li.textContent));
  expect(local.some((v) => v.includes('"text" is required')), `the missing field: ${local}`);
  await page.fill("#wallet-hire-input", "{not json");
  await page.click("#wallet-hire-quote-button");
  await page.waitForSelector('#wallet-hire-error[data-code="input_not_json"]');
  expectEqual(resourceCalls.length, 0, "nothing was sent");

  // Refused by the gateway (a length only it checks), with the failing path.
  await page.fill("#wallet-hire-input", '{"text": ""}');
  await page.click("#wallet-hire-quote-button");
  await page.waitForSelector('.violations[data-source="gateway"]');
  const remote = await page.$$eval('.violations[data-source="gateway"] code.path', (items) => items.map((c) => c.textContent));
  expectEqual(remote, ["/text"], "the gateway's failing path");
  expectEqual(resourceCalls.length, 1, "one unpaid call");
  await shot(page, "wallet-hire-input-refused");

  // The offer.
  const offered = await quote(page, input.good);
  expect(/^ctr_/.test(offered), `the offer's contract id: ${offered}`);
  expectEqual((await page.textContent("#wallet-hire-price")).trim(), input.price.shown, "the price to pay");
  expectEqual(await page.getAttribute("#wallet-hire-quote", "data-scheme"), "exact", "the scheme");
  const termsHash = (await page.textContent("#wallet-hire-terms-hash")).trim();
  expect(/^sha256:[0-9a-f]{64}$/.test(termsHash), `the terms hash: ${termsHash}`);
  expect(await page.$("#wallet-hire-output") === null, "nothing delivered before payment");
  await shot(page, "wallet-hire-offer");

  // A wallet on another chain: refused before anything is signed or sent.
  wallet.chainId = 1;
  await page.click("#wallet-hire-pay");
  await page.waitForSelector('#wallet-hire-error[data-code="wrong_chain"]');
  const wrongChain = await page.textContent("#wallet-hire-error");
  expect(wrongChain.includes("eip155:1") && wrongChain.includes(input.network),
    `the wrong-chain message names both chains: ${wrongChain}`);
  expect(!wallet.calls.includes("eth_signTypedData_v4"), "nothing was given to sign");
  expectEqual(paidCalls(), 0, "no payment was sent");
  wallet.chainId = input.chainId;

  // Declined in the wallet: nothing sent.
  wallet.reject = true;
  await page.click("#wallet-hire-pay");
  await page.waitForSelector('#wallet-hire-error[data-code="user_rejected"]');
  expect((await page.textContent("#wallet-hire-error")).includes("nothing was paid"), "the decline explained");
  expectEqual(paidCalls(), 0, "no payment was sent");
  wallet.reject = false;

  // A signature over other data: the gateway refuses the payment; the offer can be paid again.
  wallet.corrupt = true;
  await page.click("#wallet-hire-pay");
  await page.waitForSelector('#wallet-hire-answer[data-status="402"] #pay-outcome[data-outcome="refused"]');
  expectEqual(paidCalls(), 1, "the bad payment was sent once");
  expect(await page.$("#wallet-hire-output") === null, "nothing delivered for a refused payment");
  expect(await page.isVisible("#wallet-hire-pay"), "the offer can be paid again");
  await shot(page, "wallet-hire-payment-refused");
  wallet.corrupt = false;

  // Paid: the deliverable, the settlement and the live contract.
  const transaction = await payAndSettle(page);
  expectEqual(paidCalls(), 2, "one more request carried a payment");
  const signed = wallet.signed.at(-1);
  expectEqual([signed.primaryType, signed.domain.chainId, signed.message.value],
    ["TransferWithAuthorization", input.chainId, input.price.amount], "what the wallet signed");
  await shot(page, "wallet-hire-settled");

  // Long work: the paid call answers 202; the page follows the contract with the capability
  // token and shows the deliverable once it is verified and settled.
  const pending = await quote(page, input.slow);
  await page.click("#wallet-hire-pay");
  await page.waitForSelector("#wallet-hire-answer", { timeout: 90_000 });
  expectEqual(await page.getAttribute("#wallet-hire-answer", "data-status"), "202", "long work's status");
  expectEqual(await page.getAttribute("#pay-outcome", "data-outcome"), "pending", "shown as under way");
  expect(await page.$("#wallet-hire-output") === null, "nothing delivered before the work is done");
  await page.waitForSelector('#wallet-hire-stream[data-state="live"]');
  await shot(page, "wallet-hire-pending");
  await page.waitForSelector('#wallet-hire-state[data-state="settled"]', { timeout: 60_000 });
  await page.waitForSelector("#wallet-hire-output");
  const late = JSON.parse(await page.textContent("#wallet-hire-output"));
  expectEqual(late.summary, input.slow.text, "the long work's deliverable");
  const pendingTx = (await page.textContent("#wallet-hire-settlement-tx")).trim();
  expect(/^0x[0-9a-f]{64}$/.test(pendingTx), `the long work's settlement: ${pendingTx}`);
  await page.waitForSelector('#wallet-hire-stream[data-state="ended"]');
  await shot(page, "wallet-hire-pending-settled");

  // A deliverable that fails verification: paid for, rejected, nothing delivered or settled.
  const rejected = await quote(page, input.bad);
  expect(rejected !== offered, "a new offer for another input");
  await page.click("#wallet-hire-pay");
  await page.waitForSelector("#wallet-hire-answer", { timeout: 90_000 });
  expectEqual(await page.getAttribute("#wallet-hire-answer", "data-status"), "422", "the rejected hire's status");
  expectEqual(await page.getAttribute("#pay-outcome", "data-outcome"), "rejected", "shown as rejected");
  expect(await page.$("#wallet-hire-output") === null, "the rejected deliverable is not shown");
  expect(await page.$("#payment-response-tx") === null, "no settlement for a rejected deliverable");
  await page.waitForSelector('#wallet-hire-state[data-state="rejected"]');
  await page.waitForSelector('#verification[data-status="failed"]');
  const rejectedNonce = wallet.signed.at(-1).message.nonce;
  await shot(page, "wallet-hire-rejected");

  // The page never sent a key: the wallet was the seeker; only capability tokens were used.
  expect(authorizations.every((a) => a.startsWith("Bearer hg_cap_")), `credentials sent: ${authorizations}`);
  await context.close();
  return {
    paid: { contractId: offered, transaction, nonce: signed.message.nonce },
    pending: { contractId: pending, transaction: pendingTx },
    rejected: { contractId: rejected, nonce: rejectedNonce },
  };
}

mkdirSync(input.screenshotDir, { recursive: true });
const browser = await chromium.launch({
  executablePath: input.chromium,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const outcome = await run(browser);
  if (problems.length) throw new Error(`the page reported errors:\n${problems.join("\n")}`);
  process.stdout.write(`${JSON.stringify({ done: true, checks: tally.checks, screenshots, walletCalls: wallet.calls, ...outcome })}\n`);
} catch (error) {
  process.stderr.write(`${error.stack ?? error}\n`);
  if (problems.length) process.stderr.write(`page problems:\n${problems.join("\n")}\n`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
