// Hiring with a browser wallet and no account, over a listing's stable x402 resource
// (`POST /x402/workers/{worker}/{task}`), as any x402 client does:
//
//   input checked in the page ──► unpaid POST ──► 402: the gateway's signed offer (price, terms,
//   terms hash, expiry) shown ──► "Pay with browser wallet": the EIP-1193 wallet signs the
//   EIP-712 authorization (wallet.js) ──► the same POST with PAYMENT-SIGNATURE ──► the verified
//   deliverable, PAYMENT-RESPONSE's transaction, and the contract followed live with the
//   capability token (`hg_cap_…`) the answer carries, which is all the identity such a seeker has.
//
// The page sends no API key on these calls, even when one is signed in: the wallet is the
// seeker. The capability token lives only in this page's memory (and is shown to its owner).

import { errorOf, send } from "./api.js";
import { badge, card, errorBox, facts, fill, h, json, money, time } from "./dom.js";
import { cheapViolations } from "./inputcheck.js";
import { checkOfferAgainstTerms, executeOutcome, followTimeline, verificationCard } from "./seeker.js";
import {
  WalletError, browserWallet, chooseOffer, connect, decodeHeader, encodeHeader, signPayment,
} from "./wallet.js";

function resourcePath(workerId, task) {
  return `/x402/workers/${encodeURIComponent(workerId)}/${encodeURIComponent(task)}`;
}

function violationList(violations, source) {
  return h("ul", { class: "violations", "data-source": source },
    violations.map((v) => h("li", {}, h("code", { class: "path" }, v.path), ` ${v.message}`)));
}

/** The gateway's refusal of an input (400/422 with schema violations), with its failing paths. */
function inputRefusal(answer) {
  const error = errorOf(answer);
  const paths = (error.details?.violations ?? []).map((v) => ({ path: v.instance_path || "/", message: v.message }));
  if (error.details?.field) paths.push({ path: error.details.field, message: error.details.reason ?? "" });
  return [errorBox(error, { id: "wallet-hire-error", "data-code": error.code }),
    paths.length ? violationList(paths, "gateway") : null];
}

/**
 * The offer a 402 carries, checked against what was asked: the signed terms name this listing,
 * this task type and the price the x402 requirement asks. Throws a WalletError otherwise, before
 * anything is signed.
 */
function readOffer(answer, worker, task) {
  const paymentRequired = decodeHeader(answer.headers.get("payment-required") ?? "");
  const offer = chooseOffer(paymentRequired);
  const signed = offer.extra?.hiregate;
  const terms = signed?.terms;
  if (!terms || typeof signed.terms_hash !== "string") {
    throw new WalletError("unsupported_offer", "the 402 carries no signed hiregate offer (extra.hiregate)");
  }
  if (terms.worker?.id !== worker.id || terms.task?.task_type !== task) {
    throw new WalletError("offer_mismatch",
      `the offer is for ${terms.worker?.id} / ${terms.task?.task_type}, not ${worker.id} / ${task}: nothing was signed`);
  }
  checkOfferAgainstTerms(offer, terms.price);
  return { paymentRequired, offer, signed };
}

function quoteCard(offer, signed) {
  const terms = signed.terms;
  return h("div", { id: "wallet-hire-quote", "data-scheme": offer.scheme, "data-amount": String(offer.amount) },
    facts([
      ["Price", h("strong", { id: "wallet-hire-price" }, money(offer.amount, offer.asset, offer.network))],
      ["Payment", offer.scheme === "auth-capture"
        ? "auth-capture: held in escrow, released to the worker once the work passes"
        : "exact: settled to the worker only once the work passes"],
      ["Network", offer.network],
      ["Pays to", h("code", {}, offer.payTo)],
      ["Contract", h("code", { id: "wallet-hire-contract-id" }, terms.contract_id)],
      ["Terms hash", h("code", { id: "wallet-hire-terms-hash" }, signed.terms_hash)],
      ["Verification", terms.verification?.policy_hash ? h("code", {}, terms.verification.policy_hash) : "—"],
      ["Offer valid until", time(signed.expires_at)],
    ]),
    h("details", {}, h("summary", {}, "The signed terms"), json(terms)));
}

/**
 * Follow the paid contract's events with its capability token; the card shows them live. When
 * the answer carried no deliverable (202: long work), `delivered` is false and the card shows
 * the deliverable once the contract view releases it.
 */
function followCard(contractId, token, signal, delivered) {
  const timeline = h("ol", { id: "wallet-hire-timeline", class: "timeline" });
  const streamState = h("p", { id: "wallet-hire-stream", class: "muted", "data-state": "connecting" },
    "Connecting to the contract's event stream…");
  const state = h("span", { id: "wallet-hire-state" }, "—");
  const verification = h("div");
  const released = h("div");
  const seen = new Set();
  const refresh = async () => {
    const view = await send("GET", `/v1/contracts/${contractId}`, { key: token });
    if (!view.ok) return;
    state.dataset.state = view.body.state;
    fill(state, badge(view.body.state));
    fill(verification, view.body.verification ? verificationCard(view.body.verification) : null);
    const content = view.body.deliverable?.content;
    if (!delivered && content !== null && content !== undefined) {
      delivered = true;
      fill(released, deliverableCard({
        output: content.output ?? content,
        deliverable_digest: view.body.deliverable.digest,
        settlement: { transaction: view.body.settlement?.transaction },
      }));
    }
  };
  refresh();
  followTimeline(`/v1/contracts/${contractId}/events`, { timeline, streamState, seen }, {
    onState: refresh,
    onEnd: refresh,
  }, signal, token);
  return card("The hire, live",
    facts([
      ["Contract", h("code", {}, contractId)],
      ["State", state],
      ["Access", h("details", {}, h("summary", {}, "capability token"),
        h("p", { class: "muted" }, "It reads this contract (view, events, receipt, disputes) as "
          + "Authorization: Bearer; keep it to come back. It is not stored by this page."),
        h("code", { id: "wallet-hire-token" }, token))],
    ]),
    streamState, timeline, verification, released);
}

/** The deliverable of a 200: what the worker returned and the gateway verified. */
function deliverableCard(body) {
  const out = body.output;
  // A result document's output is `{type, content}`; the content is what the seeker asked for.
  const shown = out && typeof out === "object" && "content" in out ? out.content : out;
  return card("Deliverable",
    h("div", { id: "wallet-hire-deliverable" },
      facts([["Digest", h("code", {}, body.deliverable_digest ?? "—")],
        ["Settlement", h("code", { id: "wallet-hire-settlement-tx" }, body.settlement?.transaction ?? body.settlement?.status ?? "—")]]),
      json(shown, { id: "wallet-hire-output" })));
}

/**
 * The card on a listing's page that hires it with a browser wallet and no account. `worker` is
 * the public listing (`GET /v1/workers`); `signal` ends the live follow when the page is left.
 */
export function hireCard(worker, signal) {
  const tasks = Object.keys(worker.tasks ?? {});
  const taskSelect = h("select", { id: "wallet-hire-task", name: "task_type" },
    tasks.map((t) => h("option", { value: t }, `${t} — ${money(worker.tasks[t].price, worker.asset, worker.network)}`)));
  const input = h("textarea", { id: "wallet-hire-input", class: "code", spellcheck: "false", rows: 6 },
    JSON.stringify(worker.examples?.[0] ?? {}, null, 2));
  const quoteButton = h("button", { type: "submit", id: "wallet-hire-quote-button" }, "Hire");
  const status = h("div", { id: "wallet-hire-status" });
  const outcome = h("div", { id: "wallet-hire-outcome" });
  const form = h("form", { id: "wallet-hire-form" },
    h("label", {}, "Task", taskSelect),
    h("label", {}, "Input (JSON)", input),
    h("p", {}, quoteButton));
  // The live follow of the hire on show; a new hire (or leaving the page) ends it.
  let following = new AbortController();
  signal?.addEventListener("abort", () => following.abort(), { once: true });
  const step = (name, ...children) => {
    status.dataset.step = name;
    fill(status, ...children);
  };
  const stopped = (error) => {
    const declined = error?.code === "user_rejected";
    const message = declined
      ? "You declined in your wallet: nothing was signed and nothing was paid."
      : error?.message ?? String(error);
    step("stopped", errorBox({ code: error?.code, message }, { id: "wallet-hire-error", "data-code": error?.code ?? "error" }));
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    following.abort();
    following = new AbortController();
    if (signal?.aborted) following.abort();
    fill(outcome);
    let value;
    try {
      value = JSON.parse(input.value);
    } catch (error) {
      step("input", h("div", { class: "error", role: "alert", id: "wallet-hire-error", "data-code": "input_not_json" },
        `The input is not JSON: ${error.message}`));
      return;
    }
    const violations = cheapViolations(worker.input_schema, value);
    if (violations.length) {
      step("input", h("div", { class: "error", role: "alert", id: "wallet-hire-error", "data-code": "input_schema_violation" },
        "The input does not satisfy the worker's input schema (nothing was sent):"),
      violationList(violations, "console"));
      return;
    }
    const task = taskSelect.value;
    const path = resourcePath(worker.id, task);
    quoteButton.disabled = true;
    let quoted;
    try {
      step("offer", h("p", { class: "muted" }, "Asking the gateway for its offer…"));
      // No key: the wallet is the seeker of a stable-resource hire.
      const unpaid = await send("POST", path, { body: value, key: null });
      if (unpaid.status !== 402) {
        step("input", ...(unpaid.ok ? [errorBox(new Error(`the gateway answered ${unpaid.status} without a payment`),
          { id: "wallet-hire-error", "data-code": "unexpected" })] : inputRefusal(unpaid)));
        return;
      }
      quoted = readOffer(unpaid, worker, task);
    } catch (error) {
      stopped(error);
      return;
    } finally {
      quoteButton.disabled = false;
    }
    const payButton = h("button", { type: "button", id: "wallet-hire-pay" }, "Pay with browser wallet");
    payButton.addEventListener("click", () => pay(path, value, quoted, payButton));
    step("quoted",
      h("p", {}, "The gateway's signed offer. Nothing is stored until you pay; the worker is paid only "
        + "for a deliverable that passes verification."),
      quoteCard(quoted.offer, quoted.signed),
      h("p", {}, payButton));
  });

  async function pay(path, value, { paymentRequired, offer }, payButton) {
    payButton.disabled = true;
    fill(outcome);
    const progress = h("p", { class: "muted", id: "wallet-hire-progress" }, "Confirm in your wallet…");
    status.querySelector("#wallet-hire-error")?.remove();
    status.append(progress);
    try {
      const provider = browserWallet();
      const { account, chainId } = await connect(provider, offer);
      const payment = await signPayment(provider, account, chainId, paymentRequired, offer);
      progress.textContent = `Signed by ${account}. The gateway verifies the payment, runs the task and `
        + "checks the deliverable…";
      const answer = await send("POST", path, {
        body: value, key: null, headers: { "PAYMENT-SIGNATURE": encodeHeader(payment) },
      });
      progress.remove();
      status.dataset.step = "answered";
      const token = answer.body?.access?.token;
      const contractId = answer.body?.contract_id;
      fill(outcome,
        h("div", { id: "wallet-hire-answer", "data-status": String(answer.status) }, executeOutcome(answer)),
        answer.status === 200 ? deliverableCard(answer.body) : null,
        token && contractId ? followCard(contractId, token, following.signal, answer.status === 200) : null);
      // A refused payment may be retried; anything else answered this offer for good.
      payButton.hidden = answer.status !== 402;
    } catch (error) {
      progress.remove();
      status.append(errorBox({ code: error?.code, message: error?.code === "user_rejected"
        ? "You declined in your wallet: nothing was signed and nothing was paid."
        : error?.message ?? String(error) }, { id: "wallet-hire-error", "data-code": error?.code ?? "error" }));
    } finally {
      payButton.disabled = false;
    }
  }

  return h("section", { class: "card", id: "wallet-hire" },
    h("h2", {}, "Hire with a browser wallet, no account"),
    h("p", { class: "muted" },
      "Pay per call from your own wallet (EIP-1193, e.g. MetaMask) over this listing's x402 resource: ",
      "the gateway answers with its signed offer, your wallet signs the token authorization, and the ",
      "gateway pays the worker only for a deliverable that passed verification."),
    form, status, outcome);
}
