// Drives the web console in a real headless Chromium (playwright-core, the distribution's
// Chromium) through a seeker's, an operator's and an arbiter's pages, and a phone-width (360 px)
// sign-in and sign-out, asserting on the rendered DOM and saving a screenshot of every page.
//
// Input: a JSON document on stdin (written by gateway/tests/api/console.rs):
//   { baseUrl, chromium, screenshotDir, seekerKey, operatorKey, adminKey, workerId,
//     settled: {contractId, eventKinds, summary, transaction}, live: {contractId},
//     accepted: {contractId}, rejected: {contractId}, escalated: {disputeId, contractId},
//     flaky: {contractId},
//     newestFirst: [contract ids], earnings: {asset, amount, shown}, price: {amount, shown},
//     deadLetter: {deliveryId} }
// Protocol on stdout, one JSON object per line:
//   {"step":"live_page_open","contractId":…}  the test should now pay that contract;
//   {"done":true,"screenshots":[…],"checks":n}  everything held.
// Any failed expectation, page error or console error exits non-zero with the reason on stderr.

import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";
import { TIMEOUT, expect, expectEqual, input, problems, screenshots, shot, tally } from "./run.mjs";


function say(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

// Page errors and console errors fail the run. A deliberate wrong-key sign-in makes the browser
// log the 401 of that one request; it is allowed only while `allowHttpErrors` is set.
let allowHttpErrors = false;

function watch(page, role) {
  page.on("pageerror", (error) => problems.push(`${role}: page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const text = message.text();
    if (allowHttpErrors && text.startsWith("Failed to load resource")) return;
    problems.push(`${role}: console error: ${text}`);
  });
  page.on("requestfailed", (request) => {
    // Leaving a contract page aborts its event stream on purpose.
    if (request.failure()?.errorText === "net::ERR_ABORTED") return;
    problems.push(`${role}: request failed: ${request.url()} ${request.failure()?.errorText}`);
  });
  page.on("request", (request) => {
    if (!request.url().startsWith(input.baseUrl)) {
      problems.push(`${role}: request to another origin: ${request.url()}`);
    }
  });
}

async function signIn(page, key, role) {
  await page.goto(`${input.baseUrl}/console`);
  await page.fill("#api-key", key);
  await page.click("#sign-in");
  await page.waitForSelector(`#role[data-role="${role}"]`);
}

async function texts(page, selector) {
  return page.$$eval(selector, (els) => els.map((e) => e.textContent.trim()));
}

async function attrs(page, selector, name) {
  return page.$$eval(selector, (els, n) => els.map((e) => e.getAttribute(n)), name);
}

async function seeker(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page, "seeker");

  // A wrong key is refused on the sign-in page.
  await page.goto(`${input.baseUrl}/console`);
  await page.waitForSelector("#login");
  await shot(page, "login");
  allowHttpErrors = true;
  await page.fill("#api-key", "hg_sk_not-a-real-key");
  await page.click("#sign-in");
  await page.waitForSelector("#login-error");
  allowHttpErrors = false;
  expect((await page.textContent("#login-error")).includes("invalid_api_key"),
    "a wrong key is refused with invalid_api_key");

  await signIn(page, input.seekerKey, "seeker");
  await page.waitForSelector("#contracts tbody tr");
  const listed = await attrs(page, "#contracts tbody tr", "data-contract-id");
  expectEqual(listed, input.newestFirst, "the seeker's contracts, newest first");
  await shot(page, "seeker-contracts");

  // Filter by state: only settled ones remain.
  await page.selectOption("#filter-state", "settled");
  await page.click("#apply-filters");
  await page.waitForFunction(() =>
    [...document.querySelectorAll("#contracts tbody tr .state")].every((s) => s.dataset.state === "settled"));
  const settledOnly = await attrs(page, "#contracts tbody tr", "data-contract-id");
  expect(settledOnly.includes(input.settled.contractId), "the settled contract passes the state filter");
  expect(!settledOnly.includes(input.accepted.contractId), "the accepted contract is filtered out");
  await shot(page, "seeker-contracts-settled");

  // Filter by worker (any state): every contract is with the one worker.
  await page.selectOption("#filter-state", "");
  await page.fill("#filter-worker", input.workerId);
  await page.click("#apply-filters");
  await page.waitForFunction((n) => document.querySelectorAll("#contracts tbody tr").length === n,
    input.newestFirst.length);
  await page.fill("#filter-worker", "wk_01HZZZZZZZZZZZZZZZZZZZZZZZ");
  await page.click("#apply-filters");
  await page.waitForSelector("#no-contracts");
  await page.fill("#filter-worker", "");
  await page.click("#apply-filters");
  await page.waitForSelector(`#contracts tr[data-contract-id="${input.settled.contractId}"]`);

  // The settled contract: full timeline from the stream, deliverable, verification, receipt.
  await page.click(`a[href="#/contracts/${input.settled.contractId}"]`);
  await page.waitForSelector('#stream-state[data-state="ended"]');
  expectEqual(await attrs(page, "#timeline li", "data-kind"), input.settled.eventKinds,
    "the timeline shows the contract's whole event log in order");
  expect(await page.$('#contract-state[data-state="settled"]'), "the contract shows as settled");
  const content = JSON.parse(await page.textContent("#deliverable-content"));
  expectEqual(content.summary, input.settled.summary, "the released deliverable");
  expect(await page.$('#verification[data-status="passed"]'), "the verification passed");
  expectEqual((await page.textContent("#payment-amount")).trim(), input.price.shown,
    "the amount paid, in the token's symbol and decimals");
  expectEqual((await page.getAttribute("#payment-amount", "data-amount")), input.price.amount,
    "the amount paid, in atomic units");
  expectEqual((await page.textContent("#settlement-tx")).trim(), input.settled.transaction,
    "the settlement transaction");
  await page.click("#verify-receipt");
  await page.waitForSelector("#receipt-verified, #receipt-invalid");
  expect(await page.$('#receipt-verified[data-outcome="settled"]'),
    `the receipt verifies offline: ${await page.textContent("#receipt-result")}`);
  expectEqual((await page.textContent("#receipt-tx")).trim(), input.settled.transaction,
    "the receipt binds the settlement transaction");
  await shot(page, "seeker-contract-settled");

  // The page's verifier is no rubber stamp: the same code refuses a receipt whose payload was
  // altered, one signed for another contract, and one checked against a JWKS without its key.
  const refusals = await page.evaluate(async ({ contractId }) => {
    const { verifyReceipt } = await import("/console/receipt.js");
    const key = sessionStorage.getItem("hiregate.console.key");
    const get = (path) => fetch(path, { headers: { Authorization: `Bearer ${key}` } }).then((r) => r.json());
    const [stored, jwks, contract] = await Promise.all([
      get(`/v1/contracts/${contractId}/receipt`), get("/.well-known/jwks.json"), get(`/v1/contracts/${contractId}`),
    ]);
    const [head, body, sig] = stored.receipt.split(".");
    const claims = JSON.parse(atob(body.replace(/-/g, "+").replace(/_/g, "/")));
    claims.outcome = "voided";
    const forged = btoa(JSON.stringify(claims)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const attempt = (token, keys, c) => verifyReceipt(token, keys, c).then(() => "accepted", (e) => e.message);
    return [
      await attempt(`${head}.${forged}.${sig}`, jwks, contract),
      await attempt(stored.receipt, jwks, { ...contract, contract_id: "ctr_00000000000000000000000000" }),
      await attempt(stored.receipt, { keys: [] }, contract),
      await attempt(stored.receipt, jwks, contract),
    ];
  }, { contractId: input.settled.contractId });
  expectEqual(refusals[0], "the signature does not verify", "an altered receipt is refused");
  expect(refusals[1].startsWith("the receipt is for"), `a receipt of another contract: ${refusals[1]}`);
  expect(refusals[2].startsWith("no key"), `a JWKS without the key: ${refusals[2]}`);
  expectEqual(refusals[3], "accepted", "the untouched receipt");

  // A live contract: open its page while it is only offered, then the test pays it and the
  // timeline grows from the stream until the contract is settled.
  await page.goto(`${input.baseUrl}/console#/contracts/${input.live.contractId}`);
  await page.waitForSelector('#stream-state[data-state="live"]');
  expectEqual(await attrs(page, "#timeline li", "data-kind"), ["contract_offered"],
    "an unpaid contract's timeline");
  expect(await page.$("#deliverable-content") === null, "nothing delivered before payment");
  await shot(page, "seeker-contract-live-offered");
  say({ step: "live_page_open", contractId: input.live.contractId });
  await page.waitForSelector('#stream-state[data-state="ended"]', { timeout: 60_000 });
  await page.waitForSelector('#contract-state[data-state="settled"]');
  const liveKinds = await attrs(page, "#timeline li", "data-kind");
  // The same hire as the settled contract's, seen as it happened.
  expectEqual(liveKinds, input.settled.eventKinds, "the live timeline");
  await page.waitForSelector("#deliverable-content");
  await shot(page, "seeker-contract-live-settled");

  // A rejected contract: the verification's failing paths, nothing released.
  await page.goto(`${input.baseUrl}/console#/contracts/${input.rejected.contractId}`);
  await page.waitForSelector('#verification[data-status="failed"]');
  const paths = await texts(page, "#failing-paths code.path");
  expect(paths.length > 0, "the failing paths of the rejected deliverable are listed");
  expect(await page.$("#deliverable-content") === null, "a rejected deliverable is not released");
  await shot(page, "seeker-contract-rejected");

  // The operator disputed another rejection: the seeker states its side for the arbiter.
  await page.goto(`${input.baseUrl}/console#/contracts/${input.escalated.contractId}`);
  await page.waitForSelector("#answer-form");
  await page.fill("#answer-statement", "The summary must be a string; 42 is not a summary.");
  await page.click("#send-answer");
  await page.waitForSelector("#dispute-answer");
  expect((await page.textContent("#dispute-answer")).includes("42 is not a summary"),
    "the seeker's statement is recorded");
  await shot(page, "seeker-dispute-answered");

  // Dispute the accepted contract: the replay upholds the acceptance.
  await page.goto(`${input.baseUrl}/console#/contracts/${input.accepted.contractId}`);
  await page.waitForSelector("#dispute-form");
  await page.fill("#dispute-reason", "The summary misses the main point.");
  await page.fill("#dispute-claim", "a summary naming the main point");
  await shot(page, "seeker-dispute-form");
  await page.click("#open-dispute");
  await page.waitForSelector("#dispute[data-state]");
  const disputeState = await page.getAttribute("#dispute", "data-state");
  expectEqual(disputeState, "escalated",
    "a replay that only repeats the acceptance leaves the seeker's claim to the arbiter");
  expect((await page.textContent("#dispute")).includes("The summary misses the main point."),
    "the dispute shows its reason");
  await shot(page, "seeker-dispute-opened");

  // Webhooks: rotate the secret, redeliver the dead letter.
  await page.goto(`${input.baseUrl}/console#/webhooks`);
  await page.waitForSelector(`#dead-letter-table tr[data-delivery-id="${input.deadLetter.deliveryId}"]`);
  await shot(page, "seeker-webhooks");
  await page.click("#rotate-secret");
  await page.waitForSelector("#new-secret");
  expect(/whsec_/.test(await page.textContent("#new-secret")), "the new secret is shown once");
  await page.click(`button.redeliver[data-delivery-id="${input.deadLetter.deliveryId}"]`);
  await page.waitForFunction((id) =>
    !document.querySelector(`#dead-letter-table tr[data-delivery-id="${id}"]`), input.deadLetter.deliveryId);
  await shot(page, "seeker-webhooks-redelivered");
  await context.close();
}

async function operator(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page, "operator");
  await signIn(page, input.operatorKey, "operator");
  const row = `#workers tr[data-worker-id="${input.workerId}"]`;
  await page.waitForSelector(row);
  expectEqual(await page.getAttribute(`${row} .load`, "data-in-flight"), "0", "nothing in flight");
  expectEqual(await page.getAttribute(`${row} .load`, "data-max-parallel"), "4", "max_parallel");
  expectEqual(await page.getAttribute(`${row} .earning`, "data-amount"), input.earnings.amount,
    "settled earnings");
  expectEqual(await page.getAttribute(`${row} .earning`, "data-asset"), input.earnings.asset,
    "the earnings' asset");
  const earning = await page.textContent(`${row} .earning`);
  expect(earning.startsWith(`${input.earnings.shown} (`),
    `the earnings in the token's symbol, not its address: ${earning}`);
  expect(!earning.toLowerCase().includes(input.earnings.asset.slice(0, 10).toLowerCase()),
    `no token address where the symbol is known: ${earning}`);
  await shot(page, "operator-workers");

  await page.click(`${row} a`);
  await page.waitForSelector("#health-history tr.probe");
  const probes = await attrs(page, "#health-history tr.probe", "data-passed");
  expect(probes.length > 0 && probes.every((p) => p === "true"), `health history: ${probes}`);
  await page.waitForSelector("#worker-contracts tr.contract");
  expectEqual(await attrs(page, "#worker-contracts tr.contract", "data-contract-id"), input.newestFirst,
    "the worker's contracts, newest first");
  await page.waitForSelector("#failures tr.failure");
  expectEqual(await attrs(page, "#failures tr.failure", "data-contract-id"), [input.flaky.contractId],
    "the failed attempt of the flaky contract");
  await page.waitForSelector("#rejections tr.rejection");
  expect((await texts(page, "#rejections code.path")).length > 0,
    "the rejection lists its failing paths");
  expect((await page.textContent("#worker-load")).includes("0 / 4"), "load against max_parallel");
  await shot(page, "operator-worker");
  await context.close();
}

// A phone (360 px wide): the header wraps instead of overflowing, so the sign-out button is on
// screen and works.
async function phone(browser) {
  const width = 360;
  const context = await browser.newContext({ viewport: { width, height: 740 }, isMobile: true });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page, "phone");
  for (const [key, role] of [[input.operatorKey, "operator"], [input.seekerKey, "seeker"]]) {
    await signIn(page, key, role);
    await page.waitForSelector("main table, main .muted");
    const header = await page.$eval("header.bar", (bar) =>
      ({ scrollWidth: bar.scrollWidth, clientWidth: bar.clientWidth }));
    expect(header.scrollWidth <= header.clientWidth,
      `${role}: the header fits its ${header.clientWidth} px (content ${header.scrollWidth} px)`);
    const box = await (await page.$("#sign-out")).boundingBox();
    expect(box && box.x >= 0 && box.x + box.width <= width && box.y >= 0,
      `${role}: sign-out within the ${width} px viewport: ${JSON.stringify(box)}`);
    await shot(page, `phone-${role}`);
    // A real click at the button's place, which only lands if the button is on screen.
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await page.waitForSelector("#login");
    expect(await page.evaluate(() => sessionStorage.getItem("hiregate.console.key")) === null,
      `${role}: signed out`);
  }
  await context.close();
}

async function arbiter(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watch(page, "arbiter");
  await signIn(page, input.adminKey, "arbiter");
  const row = `#dispute-queue tr[data-dispute-id="${input.escalated.disputeId}"]`;
  await page.waitForSelector(row);
  await shot(page, "arbiter-queue");

  await page.click(`${row} a`);
  await page.waitForSelector("#decision-form");
  expectEqual((await page.textContent("#terms-contract-id")).trim(), input.escalated.contractId,
    "the disputed contract's terms");
  expect(/^sha256:/.test((await page.textContent("#arbiter-digest")).trim()),
    "the deliverable digest");
  expect((await texts(page, "#original-verification code.path")).length > 0,
    "the original verification's failing paths");
  expect((await texts(page, "#replay code.path")).length > 0, "the replay's failing paths");
  expect((await page.textContent("#dispute-reason")).includes("The output is fine"),
    "the operator's statement");
  expect((await page.textContent("#answer-statement")).includes("42 is not a summary"),
    "the seeker's statement");
  await shot(page, "arbiter-dispute");

  await page.selectOption("#decision", "void");
  await page.fill("#decision-reason", "The output misses the required field.");
  await page.click("#submit-decision");
  await page.waitForSelector('#decided[data-decision="void"]');
  await shot(page, "arbiter-decided");

  await page.goto(`${input.baseUrl}/console#/disputes`);
  // The seeker's dispute of the accepted contract still waits for the arbiter, with its deadline.
  await page.waitForSelector("#dispute-queue tr[data-dispute-id] td.deadline");
  expectEqual((await page.$$("#dispute-queue tr[data-dispute-id]")).length, 1, "one dispute left");
  expect(!(await page.$(row)), "the decided dispute left the queue");
  await context.close();
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
  await seeker(browser);
  await operator(browser);
  await phone(browser);
  await arbiter(browser);
  if (problems.length) throw new Error(`the pages reported errors:\n${problems.join("\n")}`);
  say({ done: true, screenshots, checks: tally.checks });
} catch (error) {
  process.stderr.write(`${error.stack ?? error}\n`);
  if (problems.length) process.stderr.write(`page problems:\n${problems.join("\n")}\n`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
