// Entry point: sign-in with an API key, navigation by role, and the hash router
// (`#/contracts/ctr_…`), so every page has a link that survives a reload. The wallet hire pages
// (`#/wallet-hire…`) need no sign-in: a browser wallet is all the identity they use.

import { api, forget, signIn, storedKey, storedRole } from "./api.js";
import { errorBox, fill, h, knowAssets } from "./dom.js";
import * as seeker from "./seeker.js";
import * as hire from "./hire.js";
import * as operator from "./operator.js";
import * as arbiter from "./arbiter.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

const SECTIONS = {
  seeker: [["#/hire", "Hire"], ["#/contracts", "Contracts"], ["#/webhooks", "Webhooks"]],
  operator: [["#/workers", "Workers"]],
  arbiter: [["#/disputes", "Dispute queue"]],
};

const HOME = { seeker: "#/contracts", operator: "#/workers", arbiter: "#/disputes" };

// A view may hold a live stream; leaving the page stops it.
let leave = new AbortController();

function routes(role) {
  const table = {
    seeker: [
      [/^#\/hire$/, (m, page) => hire.discover(page)],
      [/^#\/hire\/(wk_[0-9A-Za-z]+)$/, (m, page) => hire.listingPage(page, m[1], { signal: leave.signal })],
      [/^#\/contracts$/, (m, page) => seeker.contractList(page)],
      [/^#\/contracts\/(ctr_[0-9A-Za-z]+)$/, (m, page) => seeker.contractPage(page, m[1], leave.signal)],
      [/^#\/webhooks$/, (m, page) => seeker.webhooks(page)],
    ],
    operator: [
      [/^#\/workers$/, (m, page) => operator.workerList(page)],
      [/^#\/workers\/(wk_[0-9A-Za-z]+)$/, (m, page) => operator.workerPage(page, m[1])],
    ],
    arbiter: [
      [/^#\/disputes$/, (m, page) => arbiter.queue(page)],
      [/^#\/disputes\/(dsp_[0-9A-Za-z_]+)$/, (m, page) => arbiter.disputePage(page, m[1])],
    ],
  };
  return table[role] ?? [];
}

// Pages anyone may open, signed in or not.
const PUBLIC = [
  [/^#\/wallet-hire$/, (m, page) => hire.discover(page, "#/wallet-hire")],
  [/^#\/wallet-hire\/(wk_[0-9A-Za-z]+)$/, (m, page) =>
    hire.listingPage(page, m[1], { account: false, signal: leave.signal })],
];

function loginPage(error) {
  nav.replaceChildren();
  who.replaceChildren();
  const input = h("input", {
    id: "api-key", type: "password", autocomplete: "off", spellcheck: "false",
    placeholder: "hg_sk_…, hg_op_… or the admin key", required: true,
  });
  const form = h("form", { id: "login", class: "card login" },
    h("h2", {}, "Sign in with an API key"),
    h("p", { class: "muted" },
      "Seekers use an hg_sk_ key, operators an hg_op_ key, arbiters the admin key. ",
      "The key stays in this tab's session storage and is sent only to this gateway."),
    h("label", {}, "API key", input),
    h("p", {}, h("button", { type: "submit", id: "sign-in" }, "Sign in")),
    error ? errorBox(error, { id: "login-error" }) : null,
  );
  const walletHire = h("section", { class: "card" },
    h("h2", {}, "No account?"),
    h("p", {}, h("a", { href: "#/wallet-hire", id: "wallet-hire-link" }, "Hire a worker with your browser wallet"),
      ": pay per call from an EIP-1193 wallet; the worker is paid only for work that passes verification."));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const role = await signIn(input.value);
      // Setting a different hash renders through `hashchange`; the same one would not.
      if (location.hash === HOME[role]) render();
      else location.hash = HOME[role];
    } catch (err) {
      loginPage(err);
    }
  });
  fill(main, h("h1", {}, "hiregate console"), form, walletHire);
}

function chrome(role) {
  const current = location.hash.split("/").slice(0, 2).join("/");
  fill(nav, SECTIONS[role].map(([href, label]) =>
    h("a", { href, "aria-current": href === current ? "page" : null }, label)));
  fill(who,
    h("span", { id: "role", "data-role": role }, `signed in as ${role}`),
    h("button", {
      id: "sign-out", class: "secondary", type: "button",
      onclick: () => { forget(); location.hash = "#/"; loginPage(); },
    }, "Sign out"));
}

function publicChrome() {
  fill(nav, h("a", { href: "#/wallet-hire", "aria-current": "page" }, "Hire with a wallet"));
  fill(who, h("a", { href: "#/", id: "sign-in-link" }, "Sign in"));
}

async function render() {
  leave.abort();
  leave = new AbortController();
  const role = storedRole();
  const signedIn = Boolean(storedKey() && role);
  const hash = location.hash;
  const open = PUBLIC.some(([pattern]) => pattern.test(hash));
  if (!open && !signedIn) return loginPage();
  if (!open && !routes(role).some(([pattern]) => pattern.test(hash))) {
    location.replace(HOME[role]);
    return;
  }
  if (signedIn) chrome(role);
  else publicChrome();
  for (const [pattern, view] of open ? PUBLIC : routes(role)) {
    const match = hash.match(pattern);
    if (!match) continue;
    // Each visit renders into its own container: a slow answer for a page already left lands in
    // a detached node instead of over the current page.
    const page = h("div", { class: "page" }, h("p", { class: "muted" }, "Loading…"));
    fill(main, page);
    try {
      // Token symbols and decimals for the amounts on the page; without them amounts show in
      // atomic units with the token's address.
      knowAssets(await api.get("/v1/assets").then((answer) => answer.assets, () => []));
      await view(match, page);
    } catch (error) {
      if (error?.status === 401 && !open) {
        forget();
        return loginPage(error);
      }
      fill(page, errorBox(error, { id: "page-error" }));
    }
    return;
  }
}

window.addEventListener("hashchange", render);
render();

