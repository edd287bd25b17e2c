// The JavaScript snapshot decoder against the Rust one, on the vectors
// net/tests/net/viewer/ generates. Run by that test (`node --test`), or by hand:
//   node --test net/view/web/test/snapshot.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { ClientDecoder, applySnapshot, decodeHeader, SnapshotError } from "../snapshot.js";

const vectors = JSON.parse(readFileSync(new URL("./vectors/snapshots.json", import.meta.url)));

function bytes(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function asRows(view) {
  return view.map((e) => [e.id, e.kind, e.qx, e.qy, e.qvx, e.qvy]);
}

/** Decodes `b` on `decoder`, as the Rust side's outcome shape. */
function outcome(decoder, b) {
  try {
    const { header, view, sentTicks } = decoder.decode(b);
    return {
      tick: header.tick,
      baseline_tick: header.baselineTick,
      avatar_id: header.avatarId,
      score: header.score,
      view: asRows(view),
      sent_ticks: sentTicks,
    };
  } catch (e) {
    if (!(e instanceof SnapshotError)) throw e;
    return { error: e.kind };
  }
}

function clone(decoder) {
  const c = new ClientDecoder();
  for (const [t, v] of decoder.views) c.views.set(t, v);
  return c;
}

test("vectors cover deltas, carried entries, drops and damage", () => {
  let deltas = 0, carried = 0, dropped = 0, rejected = 0;
  for (const c of vectors.clients) {
    for (const f of c.frames) {
      if (!f.delivered) dropped++;
      if (f.expect?.baseline_tick != null) deltas++;
      if (f.expect?.sent_ticks?.some((t) => t !== f.expect.tick)) carried++;
      for (const m of f.mutants ?? []) if (m.expect.error) rejected++;
    }
  }
  assert.ok(deltas > 50 && carried > 10 && dropped > 10 && rejected > 50, { deltas, carried, dropped, rejected });
});

for (const c of vectors.clients) {
  test(`client ${c.client} (ack lag ${c.ack_lag_ticks}, ${c.dropped_tenths}/10 dropped)`, () => {
    const decoder = new ClientDecoder();
    c.frames.forEach((f, i) => {
      const b = bytes(f.hex);
      if (!f.delivered) {
        // Not delivered, but its header still reads.
        assert.equal(decodeHeader(b).version, 1);
        return;
      }
      for (const m of f.mutants ?? []) {
        const got = outcome(clone(decoder), bytes(m.hex));
        if (m.expect.error) {
          assert.ok(got.error, `frame ${i}: mutant ${m.hex} should be rejected (${m.expect.error}), got a view`);
        } else {
          assert.deepEqual(got, m.expect, `frame ${i}: mutant ${m.hex}`);
        }
      }
      assert.deepEqual(outcome(decoder, b), f.expect, `frame ${i} (tick ${f.expect.tick})`);
    });
  });
}

test("the format document's worked example 9.2", () => {
  const baseline = [
    { id: 3, kind: 0, qx: 10, qy: 20, qvx: 0, qvy: 0 },
    { id: 7, kind: 1, qx: 100, qy: 200, qvx: 3, qvy: -2 },
    { id: 9, kind: 0, qx: 5, qy: 5, qvx: 1, qvy: 1 },
  ];
  const b = bytes("0164000000620000000700000003000000" + "99ab93d2121a092b80ff02");
  const { header, view, sent } = applySnapshot(b, baseline);
  assert.deepEqual([header.tick, header.baselineTick, header.avatarId, header.score], [100, 98, 7, 3]);
  assert.deepEqual(asRows(view), [
    [7, 1, 101, 199, 3, 0],
    [9, 0, 5, 5, 1, 1],
    [12, 0, 0x1234, 0x56, -1, 5],
  ]);
  assert.deepEqual(sent, [true, false, true]);
});
