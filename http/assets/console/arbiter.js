// Arbiter pages (admin key): the escalated disputes queue and one dispute with everything the
// decision rests on — terms, deliverable and its digest, the original verification and the
// replay, both parties' statements — and the final decision.

import { api } from "./api.js";
import { badge, card, errorBox, facts, fill, h, json, money, short, table, time } from "./dom.js";

/** `#/disputes`. */
export async function queue(main) {
  const page = await api.get("/v1/disputes?state=escalated&limit=100");
  fill(main, h("h1", {}, "Escalated disputes"),
    card(null, page.disputes.length
      ? table(["Dispute", "Contract", "Opened by", "Reason", "Original", "Replay", "Opened", "Voided unless decided by"],
        page.disputes.map(({ dispute: d, contract: c, deadline_at: deadline }) => h("tr", { "data-dispute-id": d.dispute_id },
          h("td", {}, h("a", { href: `#/disputes/${d.dispute_id}` }, d.dispute_id)),
          h("td", {}, h("code", {}, short(c.contract_id, 18)), " ", badge(c.state)),
          h("td", {}, d.party),
          h("td", {}, d.reason),
          h("td", {}, badge(c.verification?.verification_status)),
          h("td", {}, badge(d.replay?.verification_status)),
          h("td", {}, time(d.created_at)),
          h("td", { class: "deadline" }, deadline ? time(deadline) : "—"))), { id: "dispute-queue" })
      : h("p", { class: "muted", id: "queue-empty" }, "No dispute waits for a decision.")));
}

function violations(result) {
  const list = result?.details?.schema_violations ?? [];
  return list.length
    ? h("ul", { class: "failing-paths" }, list.map((v) =>
      h("li", {}, h("code", { class: "path" }, v.instance_path || "/"), ` — ${v.message}`)))
    : null;
}

/** `#/disputes/{id}`. */
export async function disputePage(main, id) {
  const [dispute, page] = await Promise.all([
    api.get(`/v1/disputes/${id}`),
    api.get("/v1/disputes?state=escalated&limit=100"),
  ]);
  // The queue carries the contract view the arbiter needs; a decided dispute is no longer in
  // it, so its contract part is only shown while it waits.
  const contract = page.disputes.find((item) => item.dispute.dispute_id === id)?.contract;
  const outcome = h("div", { id: "decision-result" });
  fill(main,
    h("p", {}, h("a", { href: "#/disputes" }, "← queue")),
    h("h1", {}, "Dispute ", h("code", {}, id)),
    h("div", { class: "grid" },
      card(`Statement of the ${dispute.party}`, h("div", { id: "statement" }, facts([
        ["Opened by", dispute.opened_by],
        ["Reason", h("span", { id: "dispute-reason" }, dispute.reason)],
        ["Claim", dispute.claim ? json(dispute.claim) : "—"],
        ["Opened", time(dispute.created_at)],
      ]))),
      card(`Statement of the ${dispute.party === "seeker" ? "operator" : "seeker"}`,
        h("div", { id: "answer" }, dispute.response ? facts([
          ["By", dispute.response.by],
          ["Statement", h("span", { id: "answer-statement" }, dispute.response.statement)],
          ["Claim", dispute.response.claim ? json(dispute.response.claim) : "—"],
          ["Answered", time(dispute.response.at)],
        ]) : h("p", { class: "muted" }, "The other party has not answered."))),
      card("Replay of the pinned policy", h("div", { id: "replay" }, dispute.replay ? [facts([
        ["Status", badge(dispute.replay.verification_status)],
        ["Reason codes", (dispute.replay.reason_codes ?? []).join(", ") || "none"],
        ["Result hash", h("code", {}, dispute.replay_verifier_result_hash)],
      ]), violations(dispute.replay)] : h("p", { class: "muted" }, "Not replayed.")))),
    contract ? [
      h("div", { class: "grid" },
        card("Contract terms", h("div", { id: "terms" }, facts([
          ["Contract", h("code", { id: "terms-contract-id" }, contract.contract_id)],
          ["State", badge(contract.state)],
          ["Seeker", contract.seeker_id],
          ["Worker", h("code", {}, contract.worker_id)],
          ["Task", contract.task_type],
          ["Price", contract.terms?.price
            ? `${money(contract.terms.price.amount, contract.terms.price.asset, contract.terms.price.network)} (${contract.terms.price.scheme})`
            : "—"],
          ["Policy", contract.terms?.verification?.policy_id ?? "—"],
          ["Terms hash", h("code", {}, contract.terms_hash)],
        ]), h("details", {}, h("summary", {}, "Signed terms"), json(contract.terms)))),
        card("Deliverable", h("div", { id: "arbiter-deliverable" }, contract.deliverable ? [
          facts([["Digest", h("code", { id: "arbiter-digest" }, contract.deliverable.digest)]]),
          json(contract.deliverable.content?.output ?? contract.deliverable.content, { id: "arbiter-output" }),
        ] : h("p", { class: "muted" }, "Nothing delivered.")))),
      card("Original verification", h("div", { id: "original-verification" }, contract.verification ? [facts([
        ["Status", badge(contract.verification.verification_status)],
        ["Reason codes", (contract.verification.reason_codes ?? []).join(", ") || "none"],
        ["Policy hash", h("code", {}, contract.verification.policy_hash)],
      ]), violations(contract.verification)] : h("p", { class: "muted" }, "No verification."))),
    ] : null,
    card("Decision", dispute.decision ? decided(dispute) : decisionForm(id, outcome, () => disputePage(main, id)), outcome));
}

function decided(dispute) {
  const d = dispute.decision;
  return h("p", { id: "decided", "data-decision": d.decision },
    `Decided: ${d.decision} by ${d.decided_by} via ${d.via} on ${time(d.decided_at)}. Reason: ${d.reason}`);
}

function decisionForm(id, outcome, reload) {
  const reason = h("textarea", { id: "decision-reason", required: true, maxlength: 2000 });
  const choice = h("select", { id: "decision" },
    h("option", { value: "settle" }, "settle: the worker is paid"),
    h("option", { value: "void" }, "void: the seeker keeps the money"));
  const form = h("form", { id: "decision-form" },
    h("label", {}, "Decision", choice),
    h("label", {}, "Reason (recorded in the audit log)", reason),
    h("p", {}, h("button", { type: "submit", id: "submit-decision" }, "Record the final decision")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api.post(`/v1/disputes/${id}/decision`, { decision: choice.value, reason: reason.value });
      await reload();
    } catch (error) {
      fill(outcome, errorBox(error, { id: "decision-error" }));
    }
  });
  return form;
}
