// A seeker hires from the browser: discovery (`#/hire`: GET /v1/workers with filters), a
// listing (`#/hire/wk_…`: what it does, its input schema and examples, prices, reputation) and
// the proposal form, which creates the signed contract and opens its page, where the seeker pays
// with a browser wallet (seeker.js, wallet.js) and follows the hire live. The same pages without
// an account (`#/wallet-hire`, `#/wallet-hire/wk_…`) hire over the listing's stable x402 resource
// with the browser wallet alone (wallethire.js); a signed-in seeker's listing page offers both.

import { api, query } from "./api.js";
import { badge, card, errorBox, facts, fill, h, json, money, short, table } from "./dom.js";
import { cheapViolations } from "./inputcheck.js";
import { hireCard } from "./wallethire.js";

// Listings seen in discovery, so opening one costs no second look-up.
const seen = new Map();

function remember(workers) {
  for (const worker of workers) seen.set(worker.id, worker);
}

function percent(rate) {
  return rate === null || rate === undefined ? "—" : `${Math.round(rate * 1000) / 10} %`;
}

function reputationLine(r) {
  if (!r || !r.hires) return h("span", { class: "muted" }, "no paid hires yet");
  return `${percent(r.pass_rate)} passed of ${r.judged} judged · ${r.hires_settled} settled`
    + (r.p95_latency_ms !== null && r.p95_latency_ms !== undefined ? ` · p95 ${r.p95_latency_ms} ms` : "");
}

function prices(worker) {
  return Object.entries(worker.tasks ?? {}).map(([task, offer]) =>
    h("div", { class: "task-price", "data-task": task },
      h("code", {}, task), " ", money(offer.price, worker.asset, worker.network)));
}

/**
 * `#/hire` (signed in) or `#/wallet-hire` (no account): live listings, filtered as the form
 * says; `base` is where a listing's link points.
 */
export async function discover(main, base = "#/hire") {
  const taskInput = h("input", { id: "filter-task", name: "task_type", placeholder: "summarize", size: 18 });
  const priceInput = h("input", { id: "filter-max-price", name: "max_price", inputmode: "numeric",
    placeholder: "atomic units", size: 14 });
  const healthyInput = h("input", { id: "filter-healthy", type: "checkbox", checked: true });
  const sortSelect = h("select", { id: "filter-sort" },
    h("option", { value: "created" }, "oldest first"),
    h("option", { value: "reputation" }, "best reputation first"));
  const results = h("div", { id: "worker-results" });
  let after = null;

  async function load(append) {
    const page = await api.get(`/v1/workers${query({
      task_type: taskInput.value.trim(),
      max_price: priceInput.value.trim(),
      healthy: healthyInput.checked ? "true" : null,
      sort: sortSelect.value,
      limit: 25,
      after: append ? after : null,
    })}`);
    remember(page.workers);
    after = page.next_after;
    const rows = page.workers.map((w) => h("tr", { "data-worker-id": w.id },
      h("td", {}, h("a", { href: `${base}/${w.id}`, class: "worker-link" }, w.name ?? w.id),
        w.name ? h("div", { class: "muted" }, h("code", {}, short(w.id, 20))) : null),
      h("td", {}, prices(w)),
      h("td", {}, (w.payment_schemes ?? []).join(", ")),
      h("td", {}, badge(w.health)),
      h("td", { class: "reputation" }, reputationLine(w.reputation))));
    if (!append) {
      fill(results, page.workers.length
        ? table(["Worker", "Tasks and prices", "Payment", "Health", "Reputation (30 days)"], rows, { id: "workers" })
        : h("p", { id: "no-workers", class: "muted" }, "No worker matches."));
    } else {
      results.querySelector("tbody")?.append(...rows);
    }
    more.hidden = !after;
  }

  const show = (error) => fill(results, errorBox(error, { id: "discovery-error" }));
  const more = h("button", { type: "button", class: "secondary", id: "more-workers", hidden: true,
    onclick: () => load(true).catch(show) }, "More workers");
  const form = h("form", { class: "inline", id: "worker-filters" },
    h("label", {}, "Task type", taskInput),
    h("label", {}, "Max price", priceInput),
    h("label", { class: "check" }, healthyInput, "healthy only"),
    h("label", {}, "Order", sortSelect),
    h("button", { type: "submit", id: "apply-worker-filters" }, "Find workers"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load(false).catch(show);
  });
  fill(main, h("h1", {}, "Hire a worker"),
    card(null,
      h("p", { class: "muted" },
        "Pick a worker, propose a task, then pay from your browser wallet: the gateway pays the ",
        "worker only for a deliverable that passed verification."),
      form, results, more));
  await load(false);
}

/** A listing by id: from discovery if it was shown there, else found in discovery's pages. */
async function listing(id) {
  if (seen.has(id)) return seen.get(id);
  let after = null;
  do {
    const page = await api.get(`/v1/workers${query({ limit: 200, after })}`);
    remember(page.workers);
    if (seen.has(id)) return seen.get(id);
    after = page.next_after;
  } while (after);
  const error = new Error(`${id} is not a live listing (it may have been retired)`);
  error.code = "not_found";
  throw error;
}

function violationList(violations, source) {
  return h("ul", { class: "violations", "data-source": source },
    violations.map((v) => h("li", {}, h("code", { class: "path" }, v.path), ` ${v.message}`)));
}

// --- the listing and the proposal -----------------------------------------------------------

async function reputationCard(id) {
  let view;
  try {
    view = await api.get(`/v1/workers/${id}/reputation`);
  } catch (error) {
    return card("Reputation", errorBox(error));
  }
  const rows = (view.reputation?.windows ?? []).map((w) => {
    const f = w.overall;
    return h("tr", { "data-window": w.window },
      h("td", {}, w.window),
      h("td", {}, String(f.hires.value)),
      h("td", {}, String(f.hires_settled.value)),
      h("td", {}, percent(f.pass_rate.value)),
      h("td", {}, String(f.disputes_lost.value)),
      h("td", {}, f.latency.p95_ms === null ? "—" : `${f.latency.p95_ms} ms`));
  });
  return card("Reputation",
    h("p", { class: "muted" }, "From verified, paid outcomes only, signed by the gateway."),
    table(["Window", "Hires", "Settled", "Passed", "Disputes lost", "p95 latency"], rows, { id: "reputation" }));
}

function proposeForm(worker) {
  const tasks = Object.keys(worker.tasks ?? {});
  const schemes = worker.payment_schemes ?? ["exact"];
  const taskSelect = h("select", { id: "propose-task", name: "task_type" },
    tasks.map((t) => h("option", { value: t }, `${t} — ${money(worker.tasks[t].price, worker.asset, worker.network)}`)));
  const schemeSelect = h("select", { id: "propose-scheme", name: "payment_scheme" },
    schemes.map((s) => h("option", { value: s },
      s === "auth-capture" ? "auth-capture (held in escrow until the work passes)" : `${s} (paid when the work passes)`)));
  const input = h("textarea", { id: "propose-input", class: "code", spellcheck: "false", rows: 8 },
    JSON.stringify(worker.examples?.[0] ?? {}, null, 2));
  const status = h("div", { id: "propose-status" });
  const submit = h("button", { type: "submit", id: "propose" }, "Propose contract");
  const form = h("form", { id: "propose-form" },
    h("div", { class: "inline" },
      h("label", {}, "Task", taskSelect),
      h("label", {}, "Payment", schemeSelect)),
    h("label", {}, "Input (JSON)", input),
    h("p", {}, submit),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fill(status);
    let value;
    try {
      value = JSON.parse(input.value);
    } catch (error) {
      fill(status, h("div", { class: "error", role: "alert", id: "propose-error", "data-code": "input_not_json" },
        `The input is not JSON: ${error.message}`));
      return;
    }
    const violations = cheapViolations(worker.input_schema, value);
    if (violations.length) {
      fill(status, h("div", { class: "error", role: "alert", id: "propose-error", "data-code": "input_schema_violation" },
        "The input does not satisfy the worker's input schema (nothing was sent):",
        violationList(violations, "console")));
      return;
    }
    submit.disabled = true;
    try {
      const created = await api.post("/v1/contracts", {
        worker_id: worker.id,
        task_type: taskSelect.value,
        input: value,
        payment_scheme: schemeSelect.value,
      });
      location.hash = `#/contracts/${created.contract_id}`;
    } catch (error) {
      const paths = (error.details?.violations ?? []).map((v) => ({ path: v.instance_path || "/", message: v.message }));
      if (error.details?.field) paths.push({ path: error.details.field, message: error.details.reason ?? "" });
      fill(status, errorBox(error, { id: "propose-error", "data-code": error.code }),
        paths.length ? violationList(paths, "gateway") : null);
    } finally {
      submit.disabled = false;
    }
  });
  return { form, input };
}

/**
 * `#/hire/{worker id}`: the listing, the proposal form (with an account) and the wallet hire
 * card; `#/wallet-hire/{worker id}` (`account` false): the listing and the wallet hire card.
 */
export async function listingPage(main, id, { account = true, signal } = {}) {
  const worker = await listing(id);
  const { form, input } = proposeForm(worker);
  const walletHire = hireCard(worker, signal);
  const walletInput = walletHire.querySelector("#wallet-hire-input");
  const examples = (worker.examples ?? []).map((example, index) =>
    h("li", {}, json(example),
      h("button", { type: "button", class: "secondary use-example", "data-example": index,
        onclick: () => {
          const target = account ? input : walletInput;
          target.value = JSON.stringify(example, null, 2);
          target.focus();
        } }, "Use this example")));
  fill(main,
    h("p", {}, h("a", { href: account ? "#/hire" : "#/wallet-hire" }, "← workers")),
    h("h1", { id: "listing-name", "data-worker-id": worker.id }, worker.name ?? worker.id),
    worker.description ? h("p", { id: "listing-description" }, worker.description) : null,
    h("div", { class: "grid" },
      card("Listing", facts([
        ["Worker", h("code", {}, worker.id)],
        ["Health", badge(worker.health)],
        ["Network", worker.network],
        ["Token", h("code", {}, worker.asset)],
        ["Pays to", h("code", {}, worker.pay_to)],
        ["Payment", (worker.payment_schemes ?? []).join(", ")],
        worker.fee_policy ? ["Escrow fee", `${worker.fee_policy.fee_bps / 100} %`] : null,
        ["Parallel contracts", String(worker.max_parallel)],
      ])),
      card("Tasks", table(["Task", "Price", "Output schema"],
        Object.entries(worker.tasks ?? {}).map(([task, offer]) => h("tr", { "data-task": task },
          h("td", {}, h("code", {}, task)),
          h("td", {}, money(offer.price, worker.asset, worker.network)),
          h("td", {}, h("details", {}, h("summary", {}, "schema"), json(offer.output_schema))))),
        { id: "listing-tasks" }))),
    card("Input",
      worker.input_schema
        ? [h("h3", {}, "Input schema"), json(worker.input_schema, { id: "input-schema" })]
        : h("p", { class: "muted" }, "The worker publishes no input schema."),
      examples.length ? [h("h3", {}, "Examples"), h("ol", { id: "examples", class: "examples" }, examples)] : null),
    account ? card("Propose a contract", form) : null,
    walletHire,
    await reputationCard(worker.id));
}
