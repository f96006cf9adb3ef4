// A seeker hires from the web console in a real headless Chromium (playwright-core, the
// distribution's Chromium) and pays with a browser wallet: an EIP-1193 provider injected before
// the page's scripts (`addInitScript`) that forwards the account and chain queries and
// `eth_signTypedData_v4` to a Node-side signer (viem with the devnet private key the test
// funded, `exposeFunction`), so every signature is real and the chain settles it.
//
// The run: discovery with filters, the listing (input schema, examples, reputation), a proposal
// refused by the page's input check (nothing sent) and one refused by the gateway (its failing
// path shown), then one `exact` contract: a wallet on the wrong chain is refused before anything
// is signed or sent, a user rejection (EIP-1193 4001) leaves the contract offered, and the third
// attempt pays it, followed live until settled; then an escrowed (`auth-capture`) contract paid
// the same way. Throughout, the page's deliverable appears only once the money moved.
//
// Input: a JSON document on stdin (written by gateway/tests/api/console.rs):
//   { baseUrl, chromium, screenshotDir, seekerKey, workerId, workerName, walletKey, chainId,
//     network, inputSchema, examples, price: {amount, shown}, escrowFeeShown }
// Output: one JSON line on stdout,
//   {"done":true,"checks":n,"screenshots":[…],"exact":{contractId,transaction},
//    "escrowed":{contractId,transaction},"walletCalls":[…]}
// Any failed expectation, page error or unexpected console error exits non-zero with the reason
// on stderr.

import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";
import { keccak256 } from "viem";
import { TIMEOUT, expect, expectEqual, input, problems, screenshots, shot, tally } from "./run.mjs";
import { injectProvider, testWallet } from "./wallet.mjs";

async function api(path) {
  const response = await fetch(`${input.baseUrl}${path}`, {
    headers: { Authorization: `Bearer ${input.seekerKey}` },
  });
  expect(response.ok, `GET ${path}: ${response.status}`);
  return response.json();
}

// --- the wallet: Node holds the key, the page holds an EIP-1193 provider ----------------------

const wallet = testWallet(input.walletKey, input.chainId);

// --- the page -----------------------------------------------------------------------------

// Requests that carried a payment, and proposals sent: what "nothing is sent" is checked on.
const payments = [];
const proposals = [];
// Chromium logs every non-2xx fetch; the 402 is a step of x402 and 422s are the refusals this
// run provokes on purpose (the gateway's input check).
const EXPECTED_HTTP = /status of (402|422)\b/;

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
    if (request.headers()["payment-signature"]) payments.push(request.url());
    if (request.method() === "POST" && request.url().endsWith("/v1/contracts")) proposals.push(request.url());
  });
}

/**
 * Record, on every change of the contract's details, its state and whether deliverable content
 * is on the page: the evidence that nothing unpaid is shown.
 */
async function observeDeliverable(page) {
  await page.evaluate(() => {
    window.deliverableSightings = [];
    const details = document.getElementById("contract-details");
    const note = () => window.deliverableSightings.push({
      state: document.getElementById("contract-state")?.dataset.state ?? null,
      content: document.getElementById("deliverable-content") !== null,
    });
    new MutationObserver(note).observe(details, { childList: true, subtree: true });
    note();
  });
}

async function contractIdOfPage(page) {
  await page.waitForURL(/#\/contracts\/ctr_/);
  return new URL(page.url()).hash.replace("#/contracts/", "");
}

async function propose(page, { example, scheme }) {
  await page.goto(`${input.baseUrl}/console#/hire/${input.workerId}`);
  await page.waitForSelector("#propose-form");
  await page.click(`.use-example[data-example="${example}"]`);
  await page.selectOption("#propose-scheme", scheme);
  await page.click("#propose");
  const contractId = await contractIdOfPage(page);
  await page.waitForSelector("#pay-wallet");
  await page.waitForSelector('#stream-state[data-state="live"]');
  return contractId;
}

/** Pay the open contract page's contract; returns the PAYMENT-RESPONSE transaction shown. */
async function payAndFollow(page, contractId, { releasedIn }) {
  const before = payments.length;
  await observeDeliverable(page);
  await page.click("#pay-wallet");
  await page.waitForSelector("#pay-outcome", { timeout: 90_000 });
  expectEqual(await page.getAttribute("#pay-outcome", "data-outcome"), "completed",
    `the paid execute of ${contractId}: ${await page.textContent("#pay-status")}`);
  expectEqual(payments.length - before, 1, "one request carried the payment");
  const transaction = (await page.textContent("#payment-response-tx")).trim();
  expect(/^0x[0-9a-f]{64}$/.test(transaction), `PAYMENT-RESPONSE names a transaction: ${transaction}`);
  expectEqual(await page.getAttribute("#payment-response", "data-success"), "true", "PAYMENT-RESPONSE success");
  await page.waitForSelector('#contract-state[data-state="settled"]', { timeout: 60_000 });
  await page.waitForSelector("#deliverable-content");
  expectEqual((await page.textContent("#settlement-tx")).trim(), transaction,
    "the contract's settlement is the transaction PAYMENT-RESPONSE named");
  const content = JSON.parse(await page.textContent("#deliverable-content"));
  expect(typeof content.summary === "string", `the deliverable's summary: ${JSON.stringify(content)}`);
  const sightings = await page.evaluate(() => window.deliverableSightings);
  expect(sightings.some((s) => s.content), "the deliverable was seen");
  const early = sightings.filter((s) => s.content && !releasedIn.includes(s.state));
  expectEqual(early, [], `deliverable content only in ${releasedIn.join("/")}`);
  const kinds = await page.$$eval("#timeline li", (items) => items.map((li) => li.dataset.kind));
  expectEqual(kinds[0], "contract_offered", "the live timeline starts at the offer");
  expect(kinds.includes("settlement_succeeded"), `the live timeline reaches the settlement: ${kinds}`);
  await page.waitForSelector('#stream-state[data-state="ended"]');
  return transaction;
}

async function run(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  await context.exposeFunction("hiregateTestWallet", wallet.request);
  await context.addInitScript(injectProvider);
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page);

  await page.goto(`${input.baseUrl}/console`);
  await page.fill("#api-key", input.seekerKey);
  await page.click("#sign-in");
  await page.waitForSelector('#role[data-role="seeker"]');

  // The page's Keccak-256 (EIP-55 checksums, the escrow nonce) agrees with viem's.
  const samples = [0, 135, 136, 300].map((n) => Array.from({ length: n }, (_, i) => (i * 31 + 7) % 256));
  const hashes = await page.evaluate(async (inputs) => {
    const { keccak256: hash } = await import("/console/keccak.js");
    return inputs.map((bytes) => Array.from(hash(Uint8Array.from(bytes)),
      (b) => b.toString(16).padStart(2, "0")).join(""));
  }, samples);
  expectEqual(hashes.map((h) => `0x${h}`), samples.map((bytes) => keccak256(Uint8Array.from(bytes))),
    "the console's keccak256");

  // Discovery with filters.
  await page.click('nav a[href="#/hire"]');
  const row = `#workers tr[data-worker-id="${input.workerId}"]`;
  await page.waitForSelector(row);
  expect((await page.textContent(`${row} .worker-link`)).trim() === input.workerName, "the listing's name");
  expect((await page.textContent(`${row} .task-price[data-task="summarize"]`)).includes(input.price.shown),
    "the price in the token's symbol");
  await page.fill("#filter-task", "summarize");
  await page.fill("#filter-max-price", String(BigInt(input.price.amount) - 1n));
  await page.click("#apply-worker-filters");
  await page.waitForSelector("#no-workers");
  await page.fill("#filter-max-price", input.price.amount);
  await page.selectOption("#filter-sort", "reputation");
  await page.click("#apply-worker-filters");
  await page.waitForSelector(row);
  await shot(page, "hire-discovery");

  // The listing: input schema, examples, reputation.
  await page.click(`${row} .worker-link`);
  await page.waitForSelector("#propose-form");
  expectEqual(JSON.parse(await page.textContent("#input-schema")), input.inputSchema, "the input schema shown");
  expectEqual((await page.$$("#examples > li")).length, input.examples.length, "the examples shown");
  expectEqual(await page.$$eval("#reputation tr[data-window]", (rows) => rows.map((r) => r.dataset.window)),
    ["7d", "30d", "all"], "the reputation windows");
  expectEqual(JSON.parse(await page.inputValue("#propose-input")), input.examples[0], "the first example prefilled");
  await shot(page, "hire-listing");
  // A reload (or a shared link) finds the listing without discovery's page in memory.
  await page.reload();
  await page.waitForSelector("#propose-form");
  expectEqual((await page.textContent("#listing-name")).trim(), input.workerName, "the listing after a reload");

  // The page's cheap check refuses a missing field: nothing is sent.
  await page.fill("#propose-input", '{"mode": "ok", "colour": "red"}');
  await page.click("#propose");
  await page.waitForSelector('#propose-error[data-code="input_schema_violation"] .violations[data-source="console"]');
  const local = await page.$$eval(".violations li", (items) => items.map((li) => li.textContent));
  expect(local.some((v) => v.includes('"text" is required')), `the missing field: ${local}`);
  expect(local.some((v) => v.startsWith("/colour")), `the unknown field: ${local}`);
  expectEqual(proposals.length, 0, "no proposal was sent");
  await page.fill("#propose-input", "{not json");
  await page.click("#propose");
  await page.waitForSelector('#propose-error[data-code="input_not_json"]');
  expectEqual(proposals.length, 0, "no proposal was sent");

  // What only the gateway checks (a length) comes back with its failing path.
  await page.fill("#propose-input", '{"text": ""}');
  await page.click("#propose");
  await page.waitForSelector('#propose-error[data-code="input_schema_violation"] ~ .violations[data-source="gateway"]');
  const remote = await page.$$eval('.violations[data-source="gateway"] code.path', (items) => items.map((c) => c.textContent));
  expectEqual(remote, ["/text"], "the gateway's failing path");
  expectEqual(proposals.length, 1, "the proposal was sent once");
  await shot(page, "hire-proposal-refused");

  // An exact contract.
  const exact = await propose(page, { example: 0, scheme: "exact" });
  expectEqual((await page.textContent("#pay-amount")).trim(), input.price.shown, "the amount to pay");
  expect(await page.$("#deliverable-content") === null, "nothing delivered before payment");
  await shot(page, "hire-contract-offered");

  // A wallet on another chain: refused before anything is signed or sent.
  wallet.chainId = 1;
  const paidBefore = payments.length;
  await page.click("#pay-wallet");
  await page.waitForSelector('#pay-error[data-code="wrong_chain"]');
  const wrongChain = await page.textContent("#pay-error");
  expect(wrongChain.includes("eip155:1") && wrongChain.includes(input.network),
    `the wrong-chain message names both chains: ${wrongChain}`);
  expect(!wallet.calls.includes("eth_signTypedData_v4"), "nothing was given to sign");
  expectEqual(payments.length, paidBefore, "no payment was sent");
  await shot(page, "hire-wrong-chain");

  // The user declines in the wallet (EIP-1193 4001): the contract stays offered.
  wallet.chainId = input.chainId;
  wallet.reject = true;
  await page.click("#pay-wallet");
  await page.waitForSelector('#pay-error[data-code="user_rejected"]');
  expectEqual(wallet.calls.filter((m) => m === "eth_signTypedData_v4").length, 1, "the wallet was asked once");
  expectEqual(payments.length, paidBefore, "no payment was sent");
  const declined = await api(`/v1/contracts/${exact}`);
  expectEqual([declined.state, declined.payment ?? null], ["offered", null], "the declined contract");
  await shot(page, "hire-declined");

  // Paid for real, followed live to the settlement; the deliverable only once settled.
  wallet.reject = false;
  const exactTx = await payAndFollow(page, exact, { releasedIn: ["settled"] });
  const typed = wallet.signed.at(-1);
  expectEqual([typed.primaryType, typed.domain.chainId, typed.message.value],
    ["TransferWithAuthorization", input.chainId, input.price.amount], "what the wallet signed");
  await shot(page, "hire-contract-settled");

  // An escrowed contract: held in escrow, released once verified, captured.
  const escrowed = await propose(page, { example: 1, scheme: "auth-capture" });
  const escrowedTx = await payAndFollow(page, escrowed, { releasedIn: ["accepted", "settling", "settled"] });
  expectEqual(wallet.signed.at(-1).primaryType, "ReceiveWithAuthorization", "the escrowed authorization");
  await shot(page, "hire-escrowed-settled");

  await context.close();
  return {
    exact: { contractId: exact, transaction: exactTx },
    escrowed: { contractId: escrowed, transaction: escrowedTx },
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
