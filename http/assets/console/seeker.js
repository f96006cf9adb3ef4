// Seeker pages: contracts (filtered list, newest first), one contract (payment from a browser
// wallet while it is offered, live timeline, deliverable, verification, receipt checked
// offline, dispute), webhooks (secret, dead letters).

import { api, errorOf, followEvents, query } from "./api.js";
import { badge, card, errorBox, facts, fill, h, json, money, short, table, time } from "./dom.js";
import { verifyReceipt } from "./receipt.js";
import {
  WalletError, browserWallet, chooseOffer, connect, decodeHeader, encodeHeader, signPayment,
} from "./wallet.js";

const STATES = [
  "", "offered", "paid", "executing", "pending", "delivered", "verifying", "accepted", "rejected",
  "disputed", "settling", "settled", "settlement_failed", "settlement_unknown", "failed",
  "cancelled", "expired", "voided", "refunded",
];
const TERMINAL = new Set([
  "settled", "settlement_failed", "voided", "failed", "cancelled", "expired", "refunded",
]);

function price(p) {
  if (!p) return "—";
  return h("span", { class: "money", "data-amount": p.amount, "data-asset": p.asset },
    `${money(p.amount, p.asset, p.network)} ${p.scheme ?? ""}`.trim());
}

/** `#/contracts`: filters in the URL's query part of the hash are not needed; the form holds them. */
export async function contractList(main) {
  const stateSelect = h("select", { id: "filter-state", name: "state" },
    STATES.map((s) => h("option", { value: s }, s || "any state")));
  const workerInput = h("input", { id: "filter-worker", name: "worker_id", placeholder: "wk_…", size: 32 });
  const results = h("div", { id: "contract-results" });
  let cursor = null;

  async function load(append) {
    const page = await api.get(`/v1/contracts${query({
      state: stateSelect.value, worker_id: workerInput.value.trim(), limit: 25,
      cursor: append ? cursor : null,
    })}`);
    cursor = page.next_cursor;
    const rows = page.contracts.map((c) => h("tr", { "data-contract-id": c.contract_id },
      h("td", {}, h("a", { href: `#/contracts/${c.contract_id}` }, c.contract_id)),
      h("td", {}, badge(c.state)),
      h("td", {}, c.task_type),
      h("td", {}, h("code", {}, short(c.worker_id, 20))),
      h("td", {}, price(c.price)),
      h("td", {}, time(c.created_at))));
    if (!append) {
      fill(results, page.contracts.length
        ? table(["Contract", "State", "Task", "Worker", "Price", "Created"], rows, { id: "contracts" })
        : h("p", { id: "no-contracts", class: "muted" }, "No contracts match."));
    } else {
      results.querySelector("tbody")?.append(...rows);
    }
    more.hidden = !cursor;
  }

  const more = h("button", { type: "button", class: "secondary", id: "more", hidden: true,
    onclick: () => load(true).catch(show) }, "Older contracts");
  const show = (error) => fill(results, errorBox(error));
  const form = h("form", { class: "inline", id: "contract-filters" },
    h("label", {}, "State", stateSelect),
    h("label", {}, "Worker", workerInput),
    h("button", { type: "submit", id: "apply-filters" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load(false).catch(show);
  });
  fill(main, h("h1", {}, "Your contracts"), card(null, form, results, more));
  await load(false);
}

/**
 * Follows a contract's event stream (`path`) into `timeline`, each event once (`seen` holds the
 * sequence numbers shown), telling in `streamState` whether the stream is connecting, live,
 * ended or failed. `onState(state)` runs for each state change, `onEnd()` once the log is
 * complete; `key` is the credential (the stored key by default).
 */
export function followTimeline(path, { timeline, streamState, seen }, { onState, onEnd }, signal, key) {
  return followEvents(path, (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (seen.has(event.seq)) return;
    seen.add(event.seq);
    timeline.append(timelineItem(event));
    if (streamState.dataset.state === "connecting") {
      streamState.dataset.state = "live";
      streamState.textContent = "Live: new events appear as they happen.";
    }
    if (event.to_state) onState(event.to_state);
  }, signal, key).then(() => {
    if (signal.aborted) return;
    onEnd();
    streamState.dataset.state = "ended";
    streamState.textContent = "The contract is final: its event log is complete.";
  }, (error) => {
    if (signal.aborted) return;
    streamState.dataset.state = "error";
    fill(streamState, errorBox(error));
  });
}

export function timelineItem(event) {
  const transition = event.to_state
    ? [" ", event.from_state ? badge(event.from_state) : null, event.from_state ? " → " : null, badge(event.to_state)]
    : null;
  return h("li", { "data-seq": event.seq, "data-kind": event.kind },
    h("strong", {}, event.kind), transition,
    h("div", { class: "muted" }, `#${event.seq} · ${time(event.at)} · ${event.actor}`));
}

export function verificationCard(v) {
  if (!v) return card("Verification", h("p", { class: "muted", id: "verification" }, "Not verified yet."));
  const d = v.details ?? {};
  const violations = d.schema_violations ?? [];
  const failures = [...(d.threshold_failures ?? []), ...(d.reference_mismatches ?? [])];
  return card("Verification",
    h("div", { id: "verification", "data-status": v.verification_status },
      facts([
        ["Status", badge(v.verification_status)],
        ["Score", String(v.score)],
        ["Reason codes", (v.reason_codes ?? []).join(", ") || "none"],
        ["Policy hash", h("code", {}, v.policy_hash)],
        ["Result hash", h("code", {}, v.verifier_result_hash)],
      ]),
      violations.length ? [h("h3", {}, "Failing paths"),
        h("ul", { id: "failing-paths" }, violations.map((x) =>
          h("li", {}, h("code", { class: "path" }, x.instance_path || "/"), ` — ${x.message}`)))] : null,
      failures.length ? [h("h3", {}, "Failed rules"),
        h("ul", { id: "failed-rules" }, failures.map((x) =>
          h("li", {}, h("code", { class: "path" }, x.pointer), ` must be ${x.rule}; found ${x.actual ?? "nothing"}`)))] : null,
      (d.notes ?? []).length ? h("ul", {}, d.notes.map((n) => h("li", {}, n))) : null));
}

/** A worker's result document: its output first, the whole document on request. */
function output(document) {
  const out = document?.output;
  const shown = out && "content" in out ? out.content : out ?? document;
  return [
    out?.type ? h("p", { class: "muted" }, `Output (${out.type})`) : null,
    json(shown, { id: "deliverable-content" }),
    h("details", {}, h("summary", {}, "Whole result document"), json(document)),
  ];
}

function deliverableCard(delivery) {
  if (!delivery) return card("Deliverable", h("p", { class: "muted", id: "deliverable" }, "Nothing delivered yet."));
  return card("Deliverable",
    h("div", { id: "deliverable" },
      facts([["Digest", h("code", { id: "deliverable-digest" }, delivery.digest)]]),
      delivery.content_withheld
        ? h("p", { class: "notice", id: "deliverable-withheld" }, delivery.content_withheld)
        : output(delivery.content),
      (delivery.evidence ?? []).length
        ? table(["Evidence", "Digest", "Bytes"], delivery.evidence.map((e) =>
          h("tr", {}, h("td", {}, e.url ?? "—"), h("td", {}, h("code", {}, e.digest)), h("td", {}, String(e.size_bytes)))))
        : null));
}

function receiptCard(contract) {
  const out = h("div", { id: "receipt-result" });
  const button = h("button", { type: "button", id: "verify-receipt" }, "Fetch and verify the receipt offline");
  button.addEventListener("click", async () => {
    button.disabled = true;
    fill(out, h("p", { class: "muted" }, "Verifying…"));
    try {
      const [stored, jwks] = await Promise.all([
        api.get(`/v1/contracts/${contract.contract_id}/receipt`),
        api.get("/.well-known/jwks.json"),
      ]);
      const { kid, claims } = await verifyReceipt(stored.receipt, jwks, contract);
      fill(out,
        h("p", { class: "ok", id: "receipt-verified", "data-outcome": claims.outcome },
          `Signature valid (Ed25519, key ${kid}); outcome ${claims.outcome}; terms hash matches.`),
        facts([
          ["Outcome", badge(claims.outcome)],
          ["Payer", claims.payment?.payer],
          ["Amount", claims.payment
            ? money(claims.payment.amount, claims.payment.asset, claims.payment.network) : null],
          ["Transaction", claims.payment?.tx_hash ? h("code", { id: "receipt-tx" }, claims.payment.tx_hash) : null],
          ["Deliverables", (claims.deliverable_digests ?? []).join(", ")],
          ["Verification", claims.verification_status],
          ["Issued", claims.iat ? time(claims.iat * 1000) : null],
        ]),
        h("details", {}, h("summary", {}, "Compact JWS"), h("pre", {}, stored.receipt)));
    } catch (error) {
      fill(out, h("p", { class: "bad", id: "receipt-invalid" }, `Receipt not verified: ${error.message}`));
    } finally {
      button.disabled = false;
    }
  });
  const terminal = TERMINAL.has(contract.state);
  return card("Receipt",
    terminal ? button : h("p", { class: "muted" }, "A receipt is issued once the contract is final."),
    out);
}

function answerForm(d, onChange) {
  const statement = h("textarea", { id: "answer-statement", required: true, maxlength: 2000 });
  const status = h("div");
  const form = h("form", { id: "answer-form" },
    h("label", {}, `The ${d.party} disputes this contract. Your side, for the arbiter:`, statement),
    h("p", {}, h("button", { type: "submit", id: "send-answer" }, "Send your statement")),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api.post(`/v1/disputes/${d.dispute_id}/response`, { statement: statement.value });
      await onChange();
    } catch (error) {
      fill(status, errorBox(error, { id: "answer-error" }));
    }
  });
  return form;
}

function disputeCard(contract, onChange) {
  const d = contract.dispute;
  if (d) {
    return card("Dispute", h("div", { id: "dispute", "data-state": d.state },
      facts([
        ["Dispute", h("code", {}, d.dispute_id)],
        ["State", badge(d.state)],
        ["Opened by", `${d.party} (${d.opened_by})`],
        ["Reason", d.reason],
        ["Answer", d.response ? h("span", { id: "dispute-answer" }, `${d.response.statement} (${d.response.by})`) : "—"],
        ["Replay", d.replay ? badge(d.replay.verification_status) : "—"],
        ["Decision", d.decision ? `${d.decision.decision} by ${d.decision.decided_by} (${d.decision.via}): ${d.decision.reason}` : "pending"],
      ])),
      d.party !== "seeker" && !d.response && !d.decision ? answerForm(d, onChange) : null);
  }
  if (contract.state !== "accepted") {
    return card("Dispute", h("p", { class: "muted", id: "no-dispute" },
      "A seeker may dispute an accepted contract while its acceptance window is open."));
  }
  const reason = h("textarea", { id: "dispute-reason", required: true, maxlength: 2000 });
  const claim = h("textarea", { id: "dispute-claim", required: true, maxlength: 4000,
    placeholder: "what the deliverable gets wrong, for the arbiter" });
  const paths = h("input", { id: "dispute-failing-paths", placeholder: "optional: /summary, /items/0" });
  const status = h("div");
  const form = h("form", { id: "dispute-form" },
    h("label", {}, "Why do you dispute this delivery?", reason),
    h("label", {}, "Claim", claim),
    h("label", {}, "Failing paths (JSON Pointers, comma separated)", paths),
    h("p", {}, h("button", { type: "submit", id: "open-dispute" }, "Open dispute")),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api.post(`/v1/contracts/${contract.contract_id}/disputes`, {
        reason: reason.value,
        claim: {
          text: claim.value.trim(),
          failing_paths: paths.value.split(",").map((p) => p.trim()).filter((p) => p),
        },
      });
      await onChange();
    } catch (error) {
      fill(status, errorBox(error, { id: "dispute-error" }));
    }
  });
  return card("Dispute", form);
}

/** The offer of the 402 must be the one the signed terms name; else nothing is signed. */
export function checkOfferAgainstTerms(offer, price) {
  if (!price) return;
  const differs = [];
  if (String(offer.amount) !== String(price.amount)) differs.push(`amount ${offer.amount} ≠ ${price.amount}`);
  if (offer.network !== price.network) differs.push(`network ${offer.network} ≠ ${price.network}`);
  if (String(offer.asset).toLowerCase() !== String(price.asset).toLowerCase()) differs.push("token");
  if (price.scheme && offer.scheme !== price.scheme) differs.push(`scheme ${offer.scheme} ≠ ${price.scheme}`);
  if (differs.length) {
    throw new WalletError("offer_mismatch",
      `the gateway's payment offer differs from the signed terms (${differs.join(", ")}): nothing was signed`);
  }
}

/** What the paid execute answered, for people. */
export function executeOutcome(answer) {
  const header = answer.headers.get("payment-response");
  let settlement = null;
  try {
    settlement = header ? decodeHeader(header) : null;
  } catch {
    settlement = null;
  }
  const receipt = settlement ? facts([
    ["Settled", settlement.success ? "yes" : "no"],
    ["Transaction", h("code", { id: "payment-response-tx" }, settlement.transaction || "—")],
    ["Network", settlement.network],
    ["Payer", settlement.payer ? h("code", {}, settlement.payer) : null],
  ], { id: "payment-response", "data-success": String(Boolean(settlement.success)) }) : null;
  if (answer.status === 200) {
    return [h("p", { class: "ok", id: "pay-outcome", "data-outcome": "completed" },
      "Paid and delivered: the deliverable passed verification."), receipt];
  }
  if (answer.status === 202) {
    return [h("p", { class: "notice", id: "pay-outcome", "data-outcome": "pending" },
      "Paid: the worker is still at it. The timeline shows each step as it happens."), receipt];
  }
  if (answer.status === 402) {
    let reason = answer.body?.error?.message;
    try {
      reason = decodeHeader(answer.headers.get("payment-required")).error ?? reason;
    } catch {
      // The body's reason stands.
    }
    return [h("div", { class: "error", role: "alert", id: "pay-outcome", "data-outcome": "refused" },
      `The gateway refused the payment: ${reason ?? "no reason given"}. Nothing was paid.`), receipt];
  }
  if (answer.status === 422 && answer.body?.error?.code === "verification_failed") {
    return [h("div", { class: "error", role: "alert", id: "pay-outcome", "data-outcome": "rejected" },
      "The deliverable failed verification: nothing was settled and nothing is shown. ",
      "See the verification card for the failing paths."), receipt];
  }
  return [errorBox(errorOf(answer), { id: "pay-outcome", "data-outcome": "error" }), receipt];
}

/**
 * The payment card of an offered contract: read the 402's offer, have the browser wallet sign
 * it, send it in `PAYMENT-SIGNATURE`, then show `PAYMENT-RESPONSE`. `onPaid` refreshes the page;
 * the timeline follows the hire meanwhile.
 */
function payCard(contract, onPaid) {
  const price = contract.terms?.price;
  const status = h("div", { id: "pay-status" });
  const button = h("button", { type: "button", id: "pay-wallet" }, "Pay with browser wallet");
  const step = (name, text) => {
    status.dataset.step = name;
    fill(status, h("p", { class: "muted" }, text));
  };
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const provider = browserWallet();
      step("offer", "Reading the payment offer…");
      const challenge = await api.execute(contract.contract_id);
      if (challenge.status !== 402) throw errorOf(challenge);
      const paymentRequired = decodeHeader(challenge.headers.get("payment-required") ?? "");
      const offer = chooseOffer(paymentRequired);
      checkOfferAgainstTerms(offer, price);
      step("wallet", "Confirm in your wallet…");
      const { account, chainId } = await connect(provider, offer);
      const payment = await signPayment(provider, account, chainId, paymentRequired, offer);
      step("paying", `Signed by ${account}. The gateway verifies the payment, runs the task and checks `
        + "the deliverable; the timeline below follows it live.");
      const answer = await api.execute(contract.contract_id, encodeHeader(payment));
      status.dataset.step = "answered";
      fill(status, executeOutcome(answer));
      if (answer.status !== 402) button.hidden = true;
      await onPaid();
    } catch (error) {
      status.dataset.step = "stopped";
      fill(status, errorBox(error, { id: "pay-error", "data-code": error?.code ?? "error" }));
    } finally {
      button.disabled = false;
    }
  });
  return h("section", { class: "card", id: "pay" },
    h("h2", {}, "Pay"),
    h("p", {}, "Pay ", price ? h("strong", { id: "pay-amount" }, money(price.amount, price.asset, price.network)) : "the price",
      ` ${price?.scheme === "auth-capture" ? "into escrow (released to the worker once the work passes)" : "(settled once the work passes)"}`,
      ` on ${price?.network ?? "the contract's chain"} from your browser wallet. The wallet shows what it signs.`),
    h("p", {}, button),
    status);
}

/** `#/contracts/{id}`. */
export async function contractPage(main, id, signal) {
  const timeline = h("ol", { class: "timeline", id: "timeline" });
  const streamState = h("p", { class: "muted", id: "stream-state", "data-state": "connecting" }, "Connecting to the event stream…");
  const details = h("div", { id: "contract-details" });
  const seen = new Set();
  let shownState = null;
  let shownContract = null;
  let latestState = null;
  let quiet = null;

  async function refresh() {
    const contract = await api.get(`/v1/contracts/${id}`);
    shownState = contract.state;
    shownContract = contract;
    const p = contract.payment;
    fill(details,
      h("div", { class: "grid" },
        card("Contract", facts([
          ["Contract", h("code", { id: "contract-id" }, contract.contract_id)],
          ["State", h("span", { id: "contract-state", "data-state": contract.state }, badge(contract.state))],
          ["Task", contract.task_type],
          ["Worker", h("code", {}, contract.worker_id)],
          ["Price", price(contract.terms?.price)],
          ["Terms hash", h("code", {}, contract.terms_hash)],
          ["Created", time(contract.created_at)],
        ])),
        card("Payment", p ? facts([
          ["State", badge(p.state)],
          ["Payer", h("code", {}, p.payer)],
          ["Amount", h("span", { id: "payment-amount", "data-amount": p.amount },
            money(p.amount, p.asset ?? contract.terms?.price?.asset, p.network))],
          ["Network", p.network],
          ["Settlement tx", contract.settlement?.transaction ? h("code", { id: "settlement-tx" }, contract.settlement.transaction) : "—"],
        ]) : h("p", { class: "muted" }, "Not paid yet."))),
      deliverableCard(contract.deliverable),
      verificationCard(contract.verification),
      receiptCard(contract),
      disputeCard(contract, refreshSoon));
  }

  async function refreshSoon() {
    if (!signal.aborted) await refresh().catch((e) => fill(details, errorBox(e)));
  }

  // The stream first replays the whole log: reload the contract only once the events pause and
  // only if they moved it past what is shown, so a replay of a finished contract re-renders
  // nothing (a receipt being checked or a dispute being typed stays as it is).
  function stateSeen(state) {
    latestState = state;
    clearTimeout(quiet);
    quiet = setTimeout(() => {
      if (latestState !== shownState) refreshSoon();
    }, 150);
  }

  const payment = h("div", { id: "payment-slot" });
  fill(main,
    h("p", {}, h("a", { href: "#/contracts" }, "← contracts")),
    h("h1", {}, "Contract ", h("code", {}, id)),
    payment,
    details,
    card("Timeline (live)", streamState, timeline));
  await refresh();
  // Rendered once, outside the details the stream re-renders, so a payment in flight keeps its
  // status; it stays after the payment to show PAYMENT-RESPONSE.
  if (shownState === "offered") fill(payment, payCard(shownContract, refreshSoon));

  followTimeline(`/v1/contracts/${id}/events`, { timeline, streamState, seen }, {
    onState: stateSeen,
    onEnd: () => {
      if (latestState && latestState !== shownState) refreshSoon();
    },
  }, signal);
}

/** `#/webhooks`: the signing secret and dead letters with redelivery. */
export async function webhooks(main) {
  const secretBox = h("div", { id: "webhook-secret" });
  const letters = h("div", { id: "dead-letters" });

  async function loadSecret(revealed) {
    const status = await api.get("/v1/webhooks/secret");
    const rotate = h("button", { type: "button", id: "rotate-secret" },
      status.configured ? "Rotate secret" : "Create secret");
    rotate.addEventListener("click", async () => {
      try {
        const created = await api.post("/v1/webhooks/secret");
        await loadSecret(created);
      } catch (error) {
        secretBox.append(errorBox(error));
      }
    });
    fill(secretBox,
      facts([
        ["Configured", status.configured ? "yes" : "no"],
        ["Created", time(status.created_at)],
      ], { id: "secret-status", "data-configured": String(status.configured) }),
      revealed ? h("div", { class: "notice", id: "new-secret" },
        "New secret (shown once; store it now): ", h("code", {}, revealed.secret)) : null,
      h("p", {}, rotate));
  }

  async function loadLetters() {
    const page = await api.get("/v1/webhooks/dead-letters?limit=100");
    if (!page.dead_letters.length) {
      fill(letters, h("p", { class: "muted", id: "no-dead-letters" }, "No dead letters."));
      return;
    }
    fill(letters, table(["Delivery", "Contract", "Event", "URL", "Tries", "Last status", "Last error", ""],
      page.dead_letters.map((d) => {
        const button = h("button", { type: "button", class: "redeliver", "data-delivery-id": d.delivery_id }, "Redeliver");
        button.addEventListener("click", async () => {
          button.disabled = true;
          try {
            await api.post(`/v1/webhooks/dead-letters/${d.delivery_id}/redeliver`);
            await loadLetters();
          } catch (error) {
            button.after(errorBox(error));
          }
        });
        return h("tr", { "data-delivery-id": d.delivery_id },
          h("td", {}, h("code", {}, d.delivery_id)),
          h("td", {}, h("a", { href: `#/contracts/${d.contract_id}` }, short(d.contract_id, 18))),
          h("td", {}, `${d.kind} #${d.seq}`),
          h("td", {}, d.url),
          h("td", {}, String(d.total_attempts)),
          h("td", {}, d.last_status ?? "—"),
          h("td", {}, d.last_error ?? "—"),
          h("td", {}, button));
      }), { id: "dead-letter-table" }));
  }

  fill(main, h("h1", {}, "Webhooks"),
    card("Signing secret", h("p", { class: "muted" },
      "Deliveries are signed with this secret (Standard Webhooks). It is shown only when created."), secretBox),
    card("Dead letters", letters));
  await Promise.all([loadSecret(null), loadLetters()]);
}
