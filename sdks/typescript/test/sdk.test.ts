// Unit tests of the TypeScript SDK (no gateway needed) and, when a deployment is handed over by
// HIREGATE_* variables (cargo test -p hiregate-integration-tests --test sdks, or scripts/devnet.sh),
// the seeker example hiring the Rust example worker end to end.
import { strict as assert } from "node:assert";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CompactSign, exportJWK, generateKeyPair } from "jose";

import {
  GatewayKeys,
  Outcome,
  WebhookSecret,
  Worker,
  canonicalJson,
  policyHash,
  verifierResultHash,
  verifyContractToken,
  verifyReceipt,
} from "../src/index.js";

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const ulid = () => "0" + Array.from({ length: 25 }, () => CROCKFORD[Math.floor(Math.random() * 32)]).join("");
const contractId = () => `ctr_${ulid()}`;

async function issuer(kid = "k1") {
  const { privateKey, publicKey } = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
  const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid, alg: "EdDSA", use: "sig" }] };
  const sign = async (payload: object, typ = "hiregate-contract+jwt") =>
    new CompactSign(new TextEncoder().encode(JSON.stringify(payload))).setProtectedHeader({ alg: "EdDSA", kid, typ }).sign(privateKey);
  const token = (id: string, overrides: Record<string, unknown> = {}) => {
    const now = Math.floor(Date.now() / 1000);
    return sign({
      iss: "hiregate", sub: id, iat: now, exp: now + 600, contract_id: id,
      terms_hash: "sha256:" + "ab".repeat(32), seeker: `skr_${ulid()}`, worker: `wk_${ulid()}`, ...overrides,
    });
  };
  return { jwks, sign, token };
}

test("Standard Webhooks: the specification's vector, tampering and the time window", () => {
  const secret = WebhookSecret.parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  const body = '{"test": 2432232314}';
  assert.equal(secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  const headers = secret.signHeaders("msg_1", body, 1_700_000_000);
  assert.deepEqual(secret.verify(headers, body, { nowS: 1_700_000_010 }), { id: "msg_1", timestamp: 1_700_000_000 });
  assert.throws(() => secret.verify(headers, body + " ", { nowS: 1_700_000_010 }), /no webhook signature matched/);
  assert.throws(() => secret.verify(headers, body, { nowS: 1_700_000_400 }), /too old/);
  assert.throws(() => WebhookSecret.generate().verify(headers, body, { nowS: 1_700_000_010 }), /no webhook signature/);
  assert.equal(String(secret), "WebhookSecret(<redacted>)");
});

test("canonical hashes are RFC 8785", () => {
  assert.equal(canonicalJson({ b: 1, a: [1.0, "é", 1e21] }), '{"a":[1,"é",1e+21],"b":1}');
  const expected = "sha256:" + createHash("sha256").update('vp.schema_only.v1{"x":1}').digest("hex");
  assert.equal(policyHash("vp.schema_only.v1", { x: 1 }), expected);
  const hash = verifierResultHash({
    candidate_id: "c", execution_id: "e", passed: true, score: 1, reason_codes: [], provider_family: "p", model_id: "m",
    policy_hash: expected,
  });
  const bound = `{"candidate_id":"c","execution_id":"e","model_id":"m","passed":true,"policy_hash":"${expected}","provider_family":"p","reason_codes":[],"score":1}`;
  assert.equal(hash, "sha256:" + createHash("sha256").update(bound).digest("hex"));
});

test("contract tokens verify offline, and tampered, expired or mistyped ones do not", async () => {
  const { jwks, token, sign } = await issuer();
  const id = contractId();
  const claims = await verifyContractToken(await token(id), jwks);
  assert.equal(claims.contractId, id);
  const [h, p, s] = (await token(id)).split(".");
  const altered = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p as string, "base64url").toString()), contract_id: contractId() })).toString("base64url");
  await assert.rejects(verifyContractToken(`${h}.${altered}.${s}`, jwks), { reason: "invalid_signature" });
  const now = Math.floor(Date.now() / 1000);
  await assert.rejects(verifyContractToken(await token(id, { exp: now - 120 }), jwks), { reason: "expired" });
  await assert.rejects(verifyContractToken(await sign({ iss: "hiregate" }, "hiregate-receipt+jwt"), jwks), { reason: "wrong_type" });
  await assert.rejects(verifyContractToken(await token(id), { keys: [] }), { reason: "unknown_key_id" });
});

test("receipts verify offline and name a terminal outcome with exactly the receipt's fields", async () => {
  const { jwks, sign } = await issuer();
  const id = contractId();
  const receipt = {
    iss: "hiregate", sub: id, iat: 1_790_000_000, terms_hash: "sha256:" + "01".repeat(32), outcome: "settled",
    payment: { network: "eip155:31337", asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3", payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", nonce: "0x" + "ab".repeat(32), amount: "10000", tx_hash: "0x" + "cd".repeat(32) },
    deliverable_digests: ["sha256:" + "02".repeat(32)], policy_hash: null, verifier_result_hash: null,
    verification_status: "passed", dispute: null,
  };
  const token = await sign(receipt, "hiregate-receipt+jwt");
  assert.deepEqual(await verifyReceipt(token, jwks, { contractId: id, termsHash: receipt.terms_hash }), receipt);
  await assert.rejects(verifyReceipt(token, jwks, { contractId: contractId() }), { reason: "wrong_contract" });
  await assert.rejects(verifyReceipt(await sign({ ...receipt, outcome: "accepted" }, "hiregate-receipt+jwt"), jwks), { reason: "not_terminal" });
  await assert.rejects(verifyReceipt(await sign({ ...receipt, extra: 1 }, "hiregate-receipt+jwt"), jwks), { reason: "malformed" });
  await assert.rejects(verifyReceipt(await sign(receipt, "hiregate-contract+jwt"), jwks), { reason: "wrong_type" });
});

test("a worker in-process: token checked, eight concurrent executes run once, handler errors become failed reports", async () => {
  const { jwks, token } = await issuer();
  let runs = 0;
  const worker = new Worker({
    name: "unit", version: "1", taskTypes: ["summarize"], gatewayKeys: GatewayKeys.fixed(jwks),
    handler: async (_ctx, input) => {
      runs++;
      await new Promise((r) => setTimeout(r, 50));
      if (input.boom) throw new Error("boom");
      return Outcome.json({ summary: input.text, confidence: 0.9 });
    },
  });
  const id = contractId();
  const call = async (body: unknown, bearer?: string) =>
    worker.fetch(new Request("http://worker.test/execute", {
      method: "POST",
      headers: { "x-contract-id": id, "content-type": "application/json", ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
      body: JSON.stringify(body),
    }));
  assert.equal((await call({ text: "x" })).status, 401);
  const bearer = await token(id);
  const answers = await Promise.all(Array.from({ length: 8 }, () => call({ text: "once" }, bearer)));
  const bodies = await Promise.all(answers.map((a) => a.json()));
  assert.equal(runs, 1);
  assert.equal(new Set(bodies.map((b) => b.task_id)).size, 1);
  // The call that reaches the worker first waits for the result; a duplicate arriving while it
  // runs is told `pending` with the same task (which one is first is not the array's order).
  const finished = bodies.filter((b) => b.status !== "pending");
  assert.ok(finished.length >= 1, "the first call answers the result");
  for (const body of finished) {
    assert.deepEqual(body.output, { type: "json", content: { summary: "once", confidence: 0.9 } });
  }
  const other = contractId();
  const crashed = await worker.fetch(new Request("http://worker.test/execute", {
    method: "POST",
    headers: { "x-contract-id": other, authorization: `Bearer ${await token(other)}` },
    body: JSON.stringify({ boom: true }),
  }));
  const report = await crashed.json();
  assert.equal(report.status, "failed");
  assert.equal(report.error.code, "WORKER_PANICKED");
});

test("the seeker example hires the Rust example worker and verifies the receipt offline", async (t) => {
  const env = process.env;
  if (!env.HIREGATE_GATEWAY_URL || !env.HIREGATE_RUST_WORKER_ID) {
    if (env.CI === "true") assert.fail("CI=true and no gateway deployment (HIREGATE_GATEWAY_URL unset)");
    t.skip("no gateway deployment: run scripts/devnet.sh, or cargo test -p hiregate-integration-tests --test sdks");
    return;
  }
  const script = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "hire.js");
  const wallets = (env.HIREGATE_SEEKER_WALLET_KEYS ?? "").split(",");
  const { stdout } = await promisify(execFile)(process.execPath, [script], {
    env: { ...env, HIREGATE_WORKER_ID: env.HIREGATE_RUST_WORKER_ID, HIREGATE_SEEKER_WALLET_KEY: wallets[wallets.length - 1] },
    timeout: 120_000,
  });
  const result = JSON.parse(stdout.trim().split("\n").pop() as string);
  assert.equal(result.state, "settled", stdout);
  assert.equal(result.execute_status, 200);
  assert.equal(result.settlement.success, true);
  assert.equal(result.receipt.outcome, "settled");
  assert.equal(result.receipt.tx_hash, result.settlement.transaction);
  assert.equal(result.deliverable.content.summary, "hiregate pays agents only for verified work.");
});
