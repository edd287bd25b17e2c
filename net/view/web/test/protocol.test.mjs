// The JavaScript protocol code against the Rust encoders, on the vectors
// net/tests/net/viewer/ generates.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decodeServer, encodeAck, encodeCamera, encodeHello, encodeInput, encodeInputAck, encodePing } from "../protocol.js";

const vectors = JSON.parse(readFileSync(new URL("./vectors/protocol.json", import.meta.url)));
const bytes = (hex) => Uint8Array.from(hex.match(/../g) ?? [], (h) => parseInt(h, 16));
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

test("client messages are byte for byte the Rust ones", () => {
  for (const v of vectors.client) {
    let got;
    if (v.what === "hello") {
      got = encodeHello(v.name, v.hash ? bytes(v.hash) : null, v.spectate === true, {
        wantToken: v.want_token === true,
        reclaim: v.reclaim ? bytes(v.reclaim) : null,
        keepsBaselines: v.keeps_baselines === true,
      });
    }
    else if (v.what === "camera") got = encodeCamera(v.seq, v.x_mm, v.y_mm);
    else if (v.what === "input") got = encodeInput(v.seq, v.dir_x, v.dir_y, v.throttle, v.cast);
    else if (v.what === "input_ack") got = encodeInputAck(v.seq, v.dir_x, v.dir_y, v.throttle, v.cast, v.tick);
    else if (v.what === "ack") got = encodeAck(v.tick);
    else if (v.what === "ping") got = encodePing(v.nonce);
    assert.equal(hex(got), v.hex, JSON.stringify(v));
  }
  assert.equal(vectors.client.length, 21);
});

test("server messages decode to the Rust fields", () => {
  for (const v of vectors.server) {
    const m = decodeServer(bytes(v.hex));
    assert.equal(m.type, v.what);
    const got = { ...m };
    delete got.type;
    if (got.terrain) got.terrain = { ...got.terrain, contentHash: hex(got.terrain.contentHash) };
    if (got.snapshot) got.snapshot = hex(got.snapshot);
    if ("reconnectToken" in got) got.reconnectToken = got.reconnectToken && hex(got.reconnectToken);
    assert.deepEqual(got, v.fields, v.what);
  }
});

test("cut-off and unknown server messages are refused", () => {
  for (const v of vectors.server) {
    const b = bytes(v.hex);
    for (const cut of [0, 1, b.length - 1]) {
      if (v.what === "snapshot" && cut >= 2) continue; // any snapshot length is a message
      assert.throws(() => decodeServer(b.subarray(0, cut)), `${v.what} cut to ${cut}`);
    }
  }
  assert.throws(() => decodeServer(Uint8Array.of(0x7f)));
});
