// What the console's browser drivers (drive.mjs, hire.mjs, wallethire.mjs) share: their input
// (JSON on stdin), the expectations they count, the screenshots they save and the page problems
// that fail a run.

import { join } from "node:path";

async function readStdin() {
  let text = "";
  for await (const chunk of process.stdin) text += chunk;
  return text;
}

/** The driver's input, read from stdin once. */
export const input = JSON.parse(await readStdin());
/** How long a step may take, ms. */
export const TIMEOUT = 30_000;
/** Paths of the screenshots saved. */
export const screenshots = [];
/** Page errors, console errors and failed requests: any fails the run. */
export const problems = [];
/** The expectations that held. */
export const tally = { checks: 0 };

export function expect(condition, message) {
  tally.checks += 1;
  if (!condition) throw new Error(`expectation failed: ${message}`);
}

export function expectEqual(actual, expected, what) {
  expect(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
  );
}

/** Saves a full-page screenshot of `page` as `<name>.png` in the input's `screenshotDir`. */
export async function shot(page, name) {
  const path = join(input.screenshotDir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  screenshots.push(path);
}
