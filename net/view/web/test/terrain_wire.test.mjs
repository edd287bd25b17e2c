// The JavaScript terrain wire decoder against the Rust encoder and decoder, on the vectors
// net/tests/net/viewer/terrain.rs generates: every dtype x compression x uint16 range x
// delivery decodes to exactly the heights Rust decodes; every damaged copy is refused.
// zstd frames are decoded by the fzstd package (the decoder takes a zstd function).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decompress as fzstd } from "fzstd";
import { blake3 } from "../blake3.js";
import { TerrainAssembler, TerrainDecodeError } from "../terrain_wire.js";

const vectors = JSON.parse(readFileSync(new URL("./vectors/terrain.json", import.meta.url)));
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const bytes = (b64) => new Uint8Array(Buffer.from(b64, "base64"));
const zstd = (payload, expected) => fzstd(payload, new Uint8Array(expected));

function decodeAll(messages) {
  const a = new TerrainAssembler({ zstd });
  let out = null;
  for (const m of messages) out = a.push(bytes(m));
  return out;
}

test("blake3 matches the Rust blake3 across chunk and tree boundaries", () => {
  for (const v of vectors.blake3) {
    const input = Uint8Array.from({ length: v.len }, (_, i) => i % 251);
    assert.equal(hex(blake3(input)), v.hex, `length ${v.len}`);
  }
});

test("every combination decodes to the heights Rust decodes", () => {
  assert.equal(vectors.cases.length, 24);
  for (const c of vectors.cases) {
    const what = `${c.dtype}/${c.compression}/${c.range ?? "auto"}/${c.chunked ? "chunked" : "single"}`;
    const t = decodeAll(c.messages);
    assert.ok(t, `${what}: nothing decoded`);
    assert.equal(t.cells, c.cells, what);
    assert.equal(t.cellSizeMm, c.cell_size_mm, what);
    assert.deepEqual(t.quantization, c.quantization, what);
    assert.deepEqual(Array.from(t.heightsM.subarray(0, 8)), c.first_heights_m, what);
    const le = new Uint8Array(t.heightsM.buffer.slice(0)); // Float64Array is little-endian here
    assert.equal(hex(blake3(le)), c.heights_blake3, `${what}: heights differ`);
  }
});

test("damaged deliveries are refused, and the decoder starts over after an error", () => {
  let damaged = 0;
  for (const c of vectors.cases) {
    for (const d of c.damaged) {
      damaged++;
      const a = new TerrainAssembler({ zstd });
      assert.throws(() => { for (const m of d) a.push(bytes(m)); }, TerrainDecodeError, `${c.dtype}/${c.compression}/${c.chunked}`);
      // After the error, a whole good delivery still decodes.
      let out = null;
      for (const m of c.messages) out = a.push(bytes(m));
      assert.ok(out, "a good delivery after an error");
    }
  }
  assert.ok(damaged >= 30, `${damaged} damaged deliveries`);
});

test("a zstd payload without a zstd decoder is a clear error", () => {
  const c = vectors.cases.find((c) => c.compression === "zstd" && !c.chunked);
  assert.throws(() => new TerrainAssembler().push(bytes(c.messages[0])), /needs a zstd decoder/);
});
