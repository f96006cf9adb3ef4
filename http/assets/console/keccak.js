// Keccak-256 as Ethereum uses it (the original Keccak padding 0x01, not SHA-3's 0x06). WebCrypto
// has no Keccak, and the console loads nothing from elsewhere, so the few hashes a browser payment
// needs (EIP-55 address checksums, the `auth-capture` PaymentInfo nonce) come from these lines.
// Lanes are BigInts: slow next to a native hash, but a payment takes a handful of them.

const RATE_BYTES = 136; // 1600-bit state, 512-bit capacity
const MASK = (1n << 64n) - 1n;

const ROUND_CONSTANTS = [
  0x0000000000000001n, 0x0000000000008082n, 0x800000000000808an, 0x8000000080008000n,
  0x000000000000808bn, 0x0000000080000001n, 0x8000000080008081n, 0x8000000000008009n,
  0x000000000000008an, 0x0000000000000088n, 0x0000000080008009n, 0x000000008000000an,
  0x000000008000808bn, 0x800000000000008bn, 0x8000000000008089n, 0x8000000000008003n,
  0x8000000000008002n, 0x8000000000000080n, 0x000000000000800an, 0x800000008000000an,
  0x8000000080008081n, 0x8000000000008080n, 0x0000000080000001n, 0x8000000080008008n,
];

// ρ offsets of lane (x, y), at index x + 5y.
const ROTATIONS = [
  0, 1, 62, 28, 27,
  36, 44, 6, 55, 20,
  3, 10, 43, 25, 39,
  41, 45, 15, 21, 8,
  18, 2, 61, 56, 14,
];

function rotl(lane, n) {
  return n === 0 ? lane : ((lane << BigInt(n)) | (lane >> BigInt(64 - n))) & MASK;
}

/** Keccak-f[1600] on 25 lanes, lane (x, y) at index x + 5y. */
function permute(a) {
  const b = new Array(25);
  for (const constant of ROUND_CONSTANTS) {
    // θ: each lane takes the parity of two neighbouring columns.
    const c = [0, 1, 2, 3, 4].map((x) => a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20]);
    for (let x = 0; x < 5; x++) {
      const d = c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1);
      for (let y = 0; y < 25; y += 5) a[x + y] ^= d;
    }
    // ρ and π: rotate each lane and move (x, y) to (y, 2x + 3y).
    for (let x = 0; x < 5; x++) {
      for (let y = 0; y < 5; y++) b[y + 5 * ((2 * x + 3 * y) % 5)] = rotl(a[x + 5 * y], ROTATIONS[x + 5 * y]);
    }
    // χ: the only non-linear step, along rows.
    for (let y = 0; y < 25; y += 5) {
      for (let x = 0; x < 5; x++) a[x + y] = b[x + y] ^ (~b[((x + 1) % 5) + y] & MASK & b[((x + 2) % 5) + y]);
    }
    // ι
    a[0] ^= constant;
  }
}

/** Keccak-256 of `bytes` (a Uint8Array), as 32 bytes. */
export function keccak256(bytes) {
  const padded = new Uint8Array(Math.floor(bytes.length / RATE_BYTES) * RATE_BYTES + RATE_BYTES);
  padded.set(bytes);
  padded[bytes.length] ^= 0x01;
  padded[padded.length - 1] ^= 0x80;
  const state = new Array(25).fill(0n);
  for (let block = 0; block < padded.length; block += RATE_BYTES) {
    for (let lane = 0; lane < RATE_BYTES / 8; lane++) {
      let value = 0n;
      for (let byte = 7; byte >= 0; byte--) value = (value << 8n) | BigInt(padded[block + 8 * lane + byte]);
      state[lane] ^= value;
    }
    permute(state);
  }
  const out = new Uint8Array(32);
  for (let lane = 0; lane < 4; lane++) {
    let value = state[lane];
    for (let byte = 0; byte < 8; byte++) {
      out[8 * lane + byte] = Number(value & 0xffn);
      value >>= 8n;
    }
  }
  return out;
}
