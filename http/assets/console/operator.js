// Operator pages: the operator's workers with load against max_parallel, health and earnings;
// one worker's health history, contracts by state, recent failures and verification
// rejections.

import { api } from "./api.js";
import { badge, card, errorBox, facts, fill, h, json, money, short, table, time } from "./dom.js";

/** Probes listed on a worker's page (the API keeps more). */
const HISTORY_SHOWN = 20;

function load(stats) {
  return h("span", { class: "load", "data-in-flight": stats.in_flight, "data-max-parallel": stats.max_parallel },
    h("meter", { min: 0, max: stats.max_parallel, value: stats.in_flight }),
    ` ${stats.in_flight} / ${stats.max_parallel}`);
}

function earnings(stats) {
  if (!stats.earnings.length) return h("span", { class: "muted earnings" }, "nothing settled yet");
  return h("span", { class: "earnings" }, stats.earnings.map((e, i) => [
    i ? "; " : null,
    h("span", { class: "earning", "data-asset": e.asset, "data-amount": e.amount },
      `${money(e.amount, e.asset, e.network)} (${e.payments} payment${e.payments === 1 ? "" : "s"})`),
  ]));
}

/** `#/workers`. */
export async function workerList(main) {
  const page = await api.get("/v1/operator/workers?limit=200");
  const stats = await Promise.all(page.workers.map((w) =>
    api.get(`/v1/workers/${w.id}/stats`).catch((error) => ({ error }))));
  const rows = page.workers.map((w, i) => {
    const s = stats[i];
    return h("tr", { "data-worker-id": w.id },
      h("td", {}, h("a", { href: `#/workers/${w.id}` }, w.id)),
      h("td", {}, w.retired_at ? badge("retired") : badge(w.health)),
      h("td", {}, Object.keys(w.tasks ?? {}).join(", ")),
      h("td", {}, s.error ? errorBox(s.error) : load(s)),
      h("td", {}, s.error ? "—" : earnings(s)),
      h("td", {}, s.error ? "—" : String(s.recent_failures.length)),
      h("td", {}, s.error ? "—" : String(s.recent_rejections.length)));
  });
  fill(main, h("h1", {}, "Your workers"),
    card(null, page.workers.length
      ? table(["Worker", "Health", "Tasks", "In flight", "Earnings (settled)", "Recent failures", "Recent rejections"],
        rows, { id: "workers" })
      : h("p", { class: "muted", id: "no-workers" }, "No workers registered with this key.")));
}

/** `#/workers/{id}`. */
export async function workerPage(main, id) {
  const [worker, stats, recent] = await Promise.all([
    api.get(`/v1/workers/${id}`),
    api.get(`/v1/workers/${id}/stats`),
    api.get(`/v1/contracts?worker_id=${encodeURIComponent(id)}&limit=20`),
  ]);
  const byState = Object.entries(stats.contracts_by_state);
  fill(main,
    h("p", {}, h("a", { href: "#/workers" }, "← workers")),
    h("h1", {}, "Worker ", h("code", {}, id)),
    h("div", { class: "grid" },
      card("Listing", facts([
        ["Health", h("span", { id: "worker-health" }, badge(worker.health))],
        ["Endpoint", h("code", {}, worker.endpoint)],
        ["Protocol", worker.protocol],
        ["Pay to", h("code", {}, worker.pay_to)],
        ["Network", worker.network],
        ["Tasks", Object.entries(worker.tasks ?? {})
          .map(([t, o]) => `${t} at ${money(o.price, worker.asset, worker.network)}`).join(", ")],
        ["Last probe", `${time(worker.last_probe_at)}${worker.last_probe_error ? ` (${worker.last_probe_error})` : ""}`],
      ])),
      card("Load and earnings", facts([
        ["In flight", h("span", { id: "worker-load" }, load(stats))],
        ["Earnings (settled)", h("span", { id: "worker-earnings" }, earnings(stats))],
        ["Contracts", byState.length
          ? h("span", { id: "contracts-by-state" }, byState.map(([s, n], i) => [i ? ", " : null, badge(s), ` ${n}`]))
          : "none yet"],
      ]))),
    card("Recent contracts",
      recent.contracts.length
        ? table(["Contract", "State", "Task", "Price", "Created"], recent.contracts.map((c) =>
          h("tr", { class: "contract", "data-contract-id": c.contract_id },
            h("td", {}, h("code", {}, c.contract_id)),
            h("td", {}, badge(c.state)),
            h("td", {}, c.task_type),
            h("td", {}, money(c.price?.amount, c.price?.asset, c.price?.network)),
            h("td", {}, time(c.created_at)))), { id: "worker-contracts" })
        : h("p", { class: "muted", id: "no-worker-contracts" }, "No contracts yet.")),
    card("Health history",
      stats.health_history.length
        ? table(["Probe", "Result", "Health after", "Error"], stats.health_history.slice(0, HISTORY_SHOWN).map((p) =>
          h("tr", { class: "probe", "data-passed": String(p.passed) },
            h("td", {}, time(p.at)),
            h("td", {}, p.passed ? h("span", { class: "ok" }, "passed") : h("span", { class: "bad" }, "missed")),
            h("td", {}, badge(p.health)),
            h("td", {}, p.error ?? "—"))), { id: "health-history" })
        : h("p", { class: "muted", id: "health-history-empty" }, "No probes recorded since registration.")),
    card("Recent failures",
      stats.recent_failures.length
        ? table(["Contract", "Attempt", "State", "HTTP", "Error", "Started"], stats.recent_failures.map((f) =>
          h("tr", { class: "failure", "data-contract-id": f.contract_id },
            h("td", {}, h("code", {}, short(f.contract_id, 18))),
            h("td", {}, String(f.attempt_no)),
            h("td", {}, badge(f.state)),
            h("td", {}, f.http_status ?? "—"),
            h("td", {}, f.error ? json(f.error) : "—"),
            h("td", {}, time(f.started_at)))), { id: "failures" })
        : h("p", { class: "muted", id: "no-failures" }, "No failed attempts.")),
    card("Verification rejections",
      stats.recent_rejections.length
        ? table(["Contract", "Status", "Reason codes", "Failing paths", "When"], stats.recent_rejections.map((r) =>
          h("tr", { class: "rejection", "data-contract-id": r.contract_id },
            h("td", {}, h("code", {}, short(r.contract_id, 18))),
            h("td", {}, badge(r.verification_status)),
            h("td", {}, r.reason_codes.join(", ")),
            h("td", {}, (r.details?.schema_violations ?? []).map((v) =>
              h("div", {}, h("code", { class: "path" }, v.instance_path || "/"), ` ${v.message}`))),
            h("td", {}, time(r.created_at)))), { id: "rejections" })
        : h("p", { class: "muted", id: "no-rejections" }, "No rejected deliveries.")));
}
