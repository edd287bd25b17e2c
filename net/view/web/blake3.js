// BLAKE3-256 (unkeyed hash mode) over a whole byte array, for the terrain checksum. Written
// from the BLAKE3 specification: 1 KiB chunks of 64-byte blocks, a binary tree of
// chaining values, the root compressed with the ROOT flag.

const IV = Uint32Array.of(0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19);
const PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8;
const BLOCK_BYTES = 64, CHUNK_BYTES = 1024;

const rotr = (x, n) => (x >>> n) | (x << (32 - n));

function g(s, a, b, c, d, mx, my) {
  s[a] = (s[a] + s[b] + mx) | 0; s[d] = rotr(s[d] ^ s[a], 16);
  s[c] = (s[c] + s[d]) | 0; s[b] = rotr(s[b] ^ s[c], 12);
  s[a] = (s[a] + s[b] + my) | 0; s[d] = rotr(s[d] ^ s[a], 8);
  s[c] = (s[c] + s[d]) | 0; s[b] = rotr(s[b] ^ s[c], 7);
}

/** The compression function: 16 words out (the first 8 are the chaining value). */
function compress(cv, m, counter, blockLen, flags) {
  const s = new Uint32Array(16);
  s.set(cv, 0);
  s.set(IV.subarray(0, 4), 8);
  s[12] = counter >>> 0;
  s[13] = Math.floor(counter / 0x100000000) >>> 0;
  s[14] = blockLen;
  s[15] = flags;
  let w = Uint32Array.from(m);
  for (let round = 0; round < 7; round++) {
    g(s, 0, 4, 8, 12, w[0], w[1]); g(s, 1, 5, 9, 13, w[2], w[3]);
    g(s, 2, 6, 10, 14, w[4], w[5]); g(s, 3, 7, 11, 15, w[6], w[7]);
    g(s, 0, 5, 10, 15, w[8], w[9]); g(s, 1, 6, 11, 12, w[10], w[11]);
    g(s, 2, 7, 8, 13, w[12], w[13]); g(s, 3, 4, 9, 14, w[14], w[15]);
    if (round < 6) w = Uint32Array.from(PERMUTATION, (i) => w[i]);
  }
  for (let i = 0; i < 8; i++) { s[i] ^= s[i + 8]; s[i + 8] ^= cv[i]; }
  return s;
}

/** 64 bytes (zero-padded) as 16 little-endian words. */
function words(bytes, at, len) {
  const m = new Uint32Array(16);
  for (let i = 0; i < len; i++) m[i >> 2] |= bytes[at + i] << (8 * (i & 3));
  return m;
}

/** A chunk's last block, not yet compressed: the root flag may still have to be added. */
function chunkOutput(bytes, start, end, counter) {
  let cv = IV;
  let at = start;
  let flags = CHUNK_START;
  while (end - at > BLOCK_BYTES) {
    cv = compress(cv, words(bytes, at, BLOCK_BYTES), counter, BLOCK_BYTES, flags).subarray(0, 8);
    flags = 0;
    at += BLOCK_BYTES;
  }
  return { cv, m: words(bytes, at, end - at), counter, blockLen: end - at, flags: flags | CHUNK_END };
}

function parentOutput(left, right) {
  const m = new Uint32Array(16);
  m.set(left, 0);
  m.set(right, 8);
  return { cv: IV, m, counter: 0, blockLen: BLOCK_BYTES, flags: PARENT };
}

const chainingValue = (o) => compress(o.cv, o.m, o.counter, o.blockLen, o.flags).subarray(0, 8);

/** BLAKE3-256 of `bytes` (a Uint8Array): 32 bytes. */
export function blake3(bytes) {
  const chunks = Math.max(1, Math.ceil(bytes.length / CHUNK_BYTES));
  const stack = [];
  for (let c = 0; c < chunks - 1; c++) {
    let cv = chainingValue(chunkOutput(bytes, c * CHUNK_BYTES, (c + 1) * CHUNK_BYTES, c));
    // Merge completed subtrees: as many as there are trailing zero bits in the count.
    for (let total = c + 1; (total & 1) === 0; total >>= 1) cv = chainingValue(parentOutput(stack.pop(), cv));
    stack.push(cv);
  }
  let out = chunkOutput(bytes, (chunks - 1) * CHUNK_BYTES, bytes.length, chunks - 1);
  while (stack.length) out = parentOutput(stack.pop(), chainingValue(out));
  const root = compress(out.cv, out.m, out.counter, out.blockLen, out.flags | ROOT);
  const hash = new Uint8Array(32);
  for (let i = 0; i < 8; i++) for (let b = 0; b < 4; b++) hash[4 * i + b] = root[i] >>> (8 * b);
  return hash;
}
