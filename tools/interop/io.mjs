// Shared plumbing of the interop scripts: each reads one JSON document on stdin and prints one
// JSON document on stdout. Failures go to stderr with exit code 1, so the Rust caller
// (`hiregate_payments::devnet::node_script`) can tell a broken script from a negative verdict.

/** Reads all of stdin and parses it as JSON. */
export async function readJsonInput() {
  const chunks = [];
  for await (const chunk of process.stdin) {
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`stdin is not JSON: ${error.message}`);
  }
}

/** Fails with a clear message when a required input field is absent. */
export function required(input, field) {
  const value = input?.[field];
  if (value === undefined || value === null || value === "") {
    throw new Error(`input field "${field}" is required`);
  }
  return value;
}

/** Prints `value` as JSON; bigints (viem's numbers) become decimal strings. */
export function writeJsonOutput(value) {
  process.stdout.write(
    `${JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? v.toString() : v))}\n`,
  );
}

/** Runs `main`, turning a thrown error into a message on stderr and exit code 1. */
export function run(main) {
  main().then(
    // Exit once stdout is written out: past the pipe's 64 KiB buffer, the rest of a write waits
    // in the stream, and exiting at once cut a long document short (a bench's failure list).
    () => process.stdout.write("", () => process.exit(0)),
    (error) => {
      process.stderr.write(`${error?.stack ?? error}\n`);
      process.exit(1);
    },
  );
}
