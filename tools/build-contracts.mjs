// Compiles the devnet Solidity sources (payments/devnet/contracts) with the pinned npm `solc` and
// writes one artifact per contract (abi + creation and runtime bytecode) to
// payments/devnet/artifacts. The Rust crate embeds those artifacts; a test reruns this script with
// `--print` and compares, so a source edit without a rebuild cannot go unnoticed.
//
//   node tools/build-contracts.mjs           rewrite the artifacts
//   node tools/build-contracts.mjs --print   print {ContractName: artifact} as JSON, write nothing
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..");
const sourceDir = join(repoRoot, "payments", "devnet", "contracts");
const artifactDir = join(repoRoot, "payments", "devnet", "artifacts");

// The contracts that get an artifact. SignatureCheck and SafeTransfer are libraries inlined into
// their users; TokenStore, TokenCollector and X402Permit2ProxyBase have none because the escrow
// creates its stores itself and the other two are abstract.
const DEPLOYABLE = [
  "DevnetUsd",
  "Eip1271Wallet",
  "DevnetMulticall",
  "AuthCaptureEscrow",
  "ERC3009PaymentCollector",
  "OperatorRefundCollector",
  "DevnetPermitToken",
  "DevnetPlainToken",
  "Permit2",
  "X402ExactPermit2Proxy",
  "X402UptoPermit2Proxy",
];

// Fixed settings: the artifact must be byte-for-byte reproducible. `cancun` runs on every anvil
// hardfork the pinned version offers by default; the metadata hash is left out so that the
// bytecode depends only on the code, not on comments or file paths.
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  metadata: { bytecodeHash: "none", appendCBOR: false },
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
};

function compile() {
  const sources = {};
  for (const file of readdirSync(sourceDir).filter((f) => f.endsWith(".sol")).sort()) {
    sources[file] = { content: readFileSync(join(sourceDir, file), "utf8") };
  }
  const input = { language: "Solidity", sources, settings: SETTINGS };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const problems = (output.errors ?? []).filter((e) => e.severity === "error" || e.type === "Warning");
  if (problems.length > 0) {
    throw new Error(problems.map((e) => e.formattedMessage).join("\n"));
  }
  const artifacts = {};
  for (const name of DEPLOYABLE) {
    const contract = output.contracts[`${name}.sol`]?.[name];
    if (!contract) {
      throw new Error(`solc produced no output for ${name}`);
    }
    artifacts[name] = {
      contractName: name,
      compiler: { solc: solc.version(), settings: { ...SETTINGS, outputSelection: undefined } },
      abi: contract.abi,
      bytecode: `0x${contract.evm.bytecode.object}`,
      deployedBytecode: `0x${contract.evm.deployedBytecode.object}`,
    };
  }
  return artifacts;
}

const artifacts = compile();
if (process.argv.includes("--print")) {
  process.stdout.write(`${JSON.stringify(artifacts)}\n`);
} else {
  for (const [name, artifact] of Object.entries(artifacts)) {
    const path = join(artifactDir, `${name}.json`);
    writeFileSync(path, `${JSON.stringify(artifact, null, 2)}\n`);
    console.log(`wrote ${path}`);
  }
}
