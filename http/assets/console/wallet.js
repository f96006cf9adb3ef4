// Paying an x402 v2 offer from the browser's own wallet (EIP-1193: `window.ethereum`). The page
// builds the payment the official `@x402/evm` 2.27 client builds, field for field, and asks the
// wallet to sign its EIP-712 typed data (`eth_signTypedData_v4`): the key never reaches the page
// and no wallet library is loaded, the wallet doing the EIP-712 hashing itself.
//
// - `exact`: an EIP-3009 `TransferWithAuthorization` of the offer's amount to its `payTo`, with a
//   random 32-byte nonce, valid from 0 until now + `maxTimeoutSeconds`.
// - `auth-capture` (escrowed): an ERC-3009 `ReceiveWithAuthorization` to the escrow's token
//   collector, whose nonce is the payer-agnostic hash of the PaymentInfo (operator, receiver,
//   token, amount, deadlines, fees, a fresh salt), so the signature commits to the whole escrow.
//   That hash is Keccak-256 over ABI words, computed here (keccak.js).
//
// The token's EIP-712 domain is the offer's `extra` {name, version}, the chain id its CAIP-2
// network and the verifying contract its asset. A wallet on another chain is refused before
// anything is signed.

import { keccak256 } from "./keccak.js";

/** Why a wallet payment stopped; `code` is stable for the page and its tests. */
export class WalletError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

const ZERO_ADDRESS = "0x0000000000000000000000000000000000000000";

// base/commerce-payments deployments the official client knows: escrow → ERC-3009 collector.
// An offer naming no escrow means v1.1, as in the official client.
const ESCROW_DEPLOYMENTS = [
  { version: "v1.1", escrow: "0xf96815976523E00e65Be8f34cA5e64b4f41EB19c", collector: "0x8612dfdc421f80336cd14E8EF9cb1E765dB5ab88" },
  { version: "v1.0", escrow: "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff", collector: "0x0E3dF9510de65469C4518D7843919c0b8C7A7757" },
];

const AUTHORIZATION_FIELDS = [
  { name: "from", type: "address" },
  { name: "to", type: "address" },
  { name: "value", type: "uint256" },
  { name: "validAfter", type: "uint256" },
  { name: "validBefore", type: "uint256" },
  { name: "nonce", type: "bytes32" },
];

const DOMAIN_FIELDS = [
  { name: "name", type: "string" },
  { name: "version", type: "string" },
  { name: "chainId", type: "uint256" },
  { name: "verifyingContract", type: "address" },
];

const PAYMENT_INFO_TYPE = "PaymentInfo(address operator,address payer,address receiver,address token,"
  + "uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,"
  + "uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)";
const SALT_BINDING_TYPE = "x402AuthCaptureSaltBinding(address receiverAuthorizer,address policy,uint256 saltNonce)";

export const PAYABLE_SCHEMES = ["exact", "auth-capture"];

// --- bytes, hex, base64 ---------------------------------------------------------------------

function hex(bytes) {
  return `0x${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function utf8(text) {
  return new TextEncoder().encode(text);
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function randomBytes32() {
  return hex(crypto.getRandomValues(new Uint8Array(32)));
}

/** One ABI word of an unsigned integer (a bigint, a decimal string or a 0x hex string). */
function uintWord(value) {
  let n = BigInt(value);
  if (n < 0n || n >= 1n << 256n) throw new WalletError("unsupported_offer", `${value} does not fit a uint256`);
  const word = new Uint8Array(32);
  for (let i = 31; i >= 0 && n > 0n; i--) {
    word[i] = Number(n & 0xffn);
    n >>= 8n;
  }
  return word;
}

function addressWord(address) {
  return uintWord(BigInt(checksum(address)));
}

/** Standard base64 of the UTF-8 JSON text of `value` (the x402 header encoding). */
export function encodeHeader(value) {
  let binary = "";
  for (const byte of utf8(JSON.stringify(value))) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** The JSON inside an x402 header (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`). */
export function decodeHeader(value) {
  const bytes = Uint8Array.from(atob(value.trim()), (c) => c.charCodeAt(0));
  return JSON.parse(new TextDecoder().decode(bytes));
}

// --- addresses and chains -----------------------------------------------------------------

/** EIP-55 checksum form of an address; throws on anything that is not 20 hex bytes. */
export function checksum(address) {
  if (typeof address !== "string" || !/^0x[0-9a-fA-F]{40}$/.test(address)) {
    throw new WalletError("unsupported_offer", `${address} is not an address`);
  }
  const lower = address.slice(2).toLowerCase();
  const hash = keccak256(utf8(lower));
  let out = "0x";
  for (let i = 0; i < 40; i++) {
    const nibble = (hash[i >> 1] >> (i % 2 === 0 ? 4 : 0)) & 0xf;
    out += nibble >= 8 ? lower[i].toUpperCase() : lower[i];
  }
  return out;
}

function sameAddress(a, b) {
  return typeof a === "string" && typeof b === "string" && a.toLowerCase() === b.toLowerCase();
}

/** The chain id of a CAIP-2 `eip155:<id>` network, as a decimal string; `null` for others. */
export function chainIdOf(network) {
  const match = /^eip155:([1-9][0-9]*)$/.exec(String(network));
  return match ? match[1] : null;
}

/** The first offer of a `PAYMENT-REQUIRED` this page can pay, or a WalletError saying why none. */
export function chooseOffer(paymentRequired) {
  if (paymentRequired?.x402Version !== 2 || !Array.isArray(paymentRequired.accepts)) {
    throw new WalletError("unsupported_offer", "the gateway's 402 is not an x402 v2 PAYMENT-REQUIRED");
  }
  const offer = paymentRequired.accepts.find((o) =>
    PAYABLE_SCHEMES.includes(o?.scheme) && chainIdOf(o?.network) !== null);
  if (!offer) {
    const seen = paymentRequired.accepts.map((o) => `${o?.scheme} on ${o?.network}`).join(", ");
    throw new WalletError("unsupported_offer",
      `this console pays exact and auth-capture offers on EVM chains; the gateway offers ${seen || "nothing"}`);
  }
  return offer;
}

// --- the wallet -----------------------------------------------------------------------------

/** An EIP-1193 request; a refusal becomes a WalletError (4001: the user said no). */
async function ask(provider, method, params) {
  try {
    return await provider.request(params === undefined ? { method } : { method, params });
  } catch (error) {
    if (error?.code === 4001) {
      throw new WalletError("user_rejected",
        "You declined the request in your wallet: nothing was signed and nothing was paid. The contract stays offered.");
    }
    throw new WalletError("wallet_error", `the wallet refused ${method}: ${error?.message ?? error}`);
  }
}

/** The page's injected wallet (`window.ethereum`), or a WalletError when there is none. */
export function browserWallet() {
  const provider = globalThis.ethereum;
  if (!provider || typeof provider.request !== "function") {
    throw new WalletError("no_wallet",
      "No browser wallet found: install one that injects an EIP-1193 provider (window.ethereum), then pay again.");
  }
  return provider;
}

/**
 * The wallet's account, once the wallet is on the offer's chain. `eth_requestAccounts` first
 * (the wallet asks the user to connect), then `eth_chainId`: on another chain nothing is signed.
 */
export async function connect(provider, offer) {
  const wanted = chainIdOf(offer.network);
  const accounts = await ask(provider, "eth_requestAccounts");
  if (!Array.isArray(accounts) || typeof accounts[0] !== "string") {
    throw new WalletError("wallet_error", "the wallet named no account");
  }
  const account = checksum(accounts[0]);
  const raw = await ask(provider, "eth_chainId");
  let current;
  try {
    current = BigInt(raw).toString();
  } catch {
    throw new WalletError("wallet_error", `the wallet answered eth_chainId with ${raw}`);
  }
  if (current !== wanted) {
    throw new WalletError("wrong_chain",
      `Your wallet is on chain ${current} (eip155:${current}), but this contract is paid on ${offer.network}. `
      + `Switch your wallet to chain ${wanted} and pay again: nothing was signed or sent.`);
  }
  return { account, chainId: Number(current) };
}

function tokenDomain(offer, chainId) {
  const { name, version } = offer.extra ?? {};
  if (typeof name !== "string" || !name || typeof version !== "string" || !version) {
    throw new WalletError("unsupported_offer",
      `the offer names no EIP-712 domain (extra.name, extra.version) for token ${offer.asset}`);
  }
  return { name, version, chainId, verifyingContract: checksum(offer.asset) };
}

function validity(offer, now) {
  if (!Number.isSafeInteger(offer.maxTimeoutSeconds) || offer.maxTimeoutSeconds <= 0) {
    throw new WalletError("unsupported_offer", "the offer has no maxTimeoutSeconds");
  }
  if (!/^[0-9]+$/.test(String(offer.amount))) {
    throw new WalletError("unsupported_offer", `the offer's amount ${offer.amount} is not atomic units`);
  }
  return String(now + offer.maxTimeoutSeconds);
}

/** `exact`: what the official client's `createEIP3009Payload` signs. */
function exactAuthorization(account, offer, now) {
  const method = offer.extra?.assetTransferMethod ?? "eip3009";
  if (method !== "eip3009") {
    throw new WalletError("unsupported_offer", `this console signs EIP-3009 payments, not ${method}`);
  }
  return {
    primaryType: "TransferWithAuthorization",
    authorization: {
      from: account,
      to: checksum(offer.payTo),
      value: String(offer.amount),
      validAfter: "0",
      validBefore: validity(offer, now),
      nonce: randomBytes32(),
    },
    extra: {},
  };
}

/** `auth-capture`: what the official client's `AuthCaptureEvmScheme` signs with ERC-3009. */
function escrowedAuthorization(account, offer, chainId, now) {
  const extra = offer.extra ?? {};
  for (const key of ["captureAuthorizer", "feeRecipient"]) {
    if (typeof extra[key] !== "string") throw new WalletError("unsupported_offer", `the offer's extra has no ${key}`);
  }
  for (const key of ["captureDeadline", "refundDeadline", "minFeeBps", "maxFeeBps"]) {
    if (!Number.isSafeInteger(extra[key])) throw new WalletError("unsupported_offer", `the offer's extra has no ${key}`);
  }
  const method = extra.assetTransferMethod ?? "eip3009";
  if (method !== "eip3009") {
    throw new WalletError("unsupported_offer", `this console signs escrowed payments with ERC-3009, not ${method}`);
  }
  const deployment = extra.authCaptureEscrow
    ? ESCROW_DEPLOYMENTS.find((d) => sameAddress(d.escrow, extra.authCaptureEscrow))
    : ESCROW_DEPLOYMENTS[0];
  if (!deployment) {
    throw new WalletError("unsupported_offer",
      `the offer's escrow ${extra.authCaptureEscrow} is not a base/commerce-payments deployment this console knows`);
  }
  const validBefore = validity(offer, now);
  // A non-zero receiver authorizer or policy binds the salt to them (v1.1); the fresh bytes
  // then travel as `saltNonce` beside the commitment.
  const receiverAuthorizer = extra.receiverAuthorizer ?? ZERO_ADDRESS;
  const policy = extra.policy ?? ZERO_ADDRESS;
  const bound = !sameAddress(receiverAuthorizer, ZERO_ADDRESS) || !sameAddress(policy, ZERO_ADDRESS);
  const saltNonce = randomBytes32();
  const salt = bound
    ? hex(keccak256(concat(keccak256(utf8(SALT_BINDING_TYPE)), addressWord(receiverAuthorizer),
      addressWord(policy), uintWord(saltNonce))))
    : saltNonce;
  // The PaymentInfo with the payer zeroed: the facilitator rebuilds the same hash from the offer.
  const paymentInfoHash = keccak256(concat(
    keccak256(utf8(PAYMENT_INFO_TYPE)),
    addressWord(extra.captureAuthorizer),
    addressWord(ZERO_ADDRESS),
    addressWord(offer.payTo),
    addressWord(offer.asset),
    uintWord(offer.amount),
    uintWord(validBefore),
    uintWord(extra.captureDeadline),
    uintWord(extra.refundDeadline),
    uintWord(extra.minFeeBps),
    uintWord(extra.maxFeeBps),
    addressWord(extra.feeRecipient),
    uintWord(salt),
  ));
  const nonce = hex(keccak256(concat(uintWord(chainId), addressWord(deployment.escrow), paymentInfoHash)));
  return {
    primaryType: "ReceiveWithAuthorization",
    authorization: {
      from: account,
      to: deployment.collector,
      value: String(offer.amount),
      validAfter: "0",
      validBefore,
      nonce,
    },
    extra: bound ? { salt, saltNonce } : { salt },
  };
}

/**
 * Sign `offer` (one of `paymentRequired.accepts`) with the wallet's `account` and return the
 * x402 v2 PaymentPayload: `{x402Version: 2, resource, accepted, payload: {authorization,
 * signature, …}}`, the server's extensions echoed as the official client does.
 */
export async function signPayment(provider, account, chainId, paymentRequired, offer) {
  const now = Math.floor(Date.now() / 1000);
  const domain = tokenDomain(offer, chainId);
  const { primaryType, authorization, extra } = offer.scheme === "auth-capture"
    ? escrowedAuthorization(account, offer, chainId, now)
    : exactAuthorization(account, offer, now);
  const typedData = {
    types: { EIP712Domain: DOMAIN_FIELDS, [primaryType]: AUTHORIZATION_FIELDS },
    primaryType,
    domain,
    message: authorization,
  };
  const signature = await ask(provider, "eth_signTypedData_v4", [account, JSON.stringify(typedData)]);
  if (typeof signature !== "string" || !/^0x[0-9a-fA-F]{130,}$/.test(signature)) {
    throw new WalletError("wallet_error", "the wallet's signature is not a hex signature");
  }
  const payload = {
    x402Version: 2,
    resource: paymentRequired.resource,
    accepted: offer,
    payload: { authorization, signature, ...extra },
  };
  if (paymentRequired.extensions) payload.extensions = paymentRequired.extensions;
  return payload;
}
