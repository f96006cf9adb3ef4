// Building blocks of every view. Text goes in as text nodes, never as markup, so nothing an API
// answer holds (a deliverable, a dispute reason) can become part of the page's code.

/** An element: `h("a", {href: "#/x", class: "y"}, "text", child, …)`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace the content of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A state badge; the state name is also its class (colours in console.css). */
export function badge(state) {
  return h("span", { class: `state ${state ?? ""}`, "data-state": state ?? "" }, state ?? "—");
}

/** A definition list of `[label, value]` pairs (values may be nodes). */
export function facts(pairs, attrs = {}) {
  return h(
    "dl",
    { class: "facts", ...attrs },
    pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]),
  );
}

/** A table: `columns` are header labels, `rows` arrays of cells. */
export function table(columns, rows, attrs = {}) {
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows),
  );
}

/** A card with a heading. */
export function card(title, ...children) {
  return h("section", { class: "card" }, title ? h("h2", {}, title) : null, children);
}

/** Pretty JSON in a <pre>. */
export function json(value, attrs = {}) {
  return h("pre", attrs, JSON.stringify(value, null, 2));
}

/** An error box for a failed call. */
export function errorBox(error, attrs = {}) {
  const code = error?.code ? `${error.code}: ` : "";
  return h("div", { class: "error", role: "alert", ...attrs }, code + (error?.message ?? String(error)));
}

/** A UTC time as `YYYY-MM-DD HH:MM:SS`. */
export function time(value) {
  if (!value) return "—";
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? String(value) : d.toISOString().replace("T", " ").slice(0, 19);
}

/** Atomic units as a decimal string in whole tokens (`1500000`, 6 decimals → `1.5`). */
export function units(atomic, decimals) {
  const digits = String(atomic ?? "0").replace(/^0+(?=\d)/, "");
  if (!/^\d+$/.test(digits)) return String(atomic);
  const padded = digits.padStart(decimals + 1, "0");
  const whole = padded.slice(0, padded.length - decimals);
  const fraction = padded.slice(padded.length - decimals).replace(/0+$/, "");
  return fraction ? `${whole}.${fraction}` : whole;
}

// The tokens the gateway knows (`GET /v1/assets`), by lower-case address and by network too.
const tokens = new Map();

/** Remember the gateway's known tokens (the answer of `GET /v1/assets`). */
export function knowAssets(list) {
  tokens.clear();
  for (const token of list ?? []) {
    const address = String(token.address).toLowerCase();
    tokens.set(`${token.network}|${address}`, token);
    if (!tokens.has(address)) tokens.set(address, token);
  }
}

/**
 * An amount of `asset` (atomic units) for people: `1.25 USDC` when the gateway knows the token's
 * symbol and decimals, else the atomic units and the token's address (nothing is guessed).
 */
export function money(atomic, asset, network) {
  if (atomic === undefined || atomic === null) return "—";
  const address = String(asset ?? "").toLowerCase();
  const token = tokens.get(`${network}|${address}`) ?? tokens.get(address);
  if (!token) return asset ? `${atomic} atomic units of ${short(asset, 10)}` : `${atomic} atomic units`;
  return `${units(atomic, token.decimals)} ${token.symbol}`;
}

/** A short form of a long id or hash for tables. */
export function short(value, keep = 14) {
  const text = String(value ?? "");
  return text.length > keep + 3 ? `${text.slice(0, keep)}…` : text;
}
