// The replay viewer in a real browser. Run by net/tests/net/viewer/ as
// `node replay.mjs URL OUT_DIR TICK...`: seeks to each tick and prints the entities it
// drew from; then, at the last tick, inspects an avatar by clicking it, shows the view of
// the first client, waits for the markers, and, if the server compares with another
// recording, jumps to the first divergence. One JSON line per finding, with a "what".
import { drawn, launch, pageWithErrors } from "./launch.mjs";
import { mkdirSync } from "node:fs";

const [url, out, ...ticks] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const say = (what, v) => console.log(JSON.stringify({ what, ...v }));
const browser = await launch();
try {
  const errors = [];
  const page = await pageWithErrors(browser, errors);
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.replay && window.migratory.drawn.terrain, null, { timeout: 10000 });
  const seek = (t) => page.evaluate((t) => {
    const s = document.getElementById("replay-slider");
    s.value = String(t);
    s.dispatchEvent(new Event("input"));
  }, t);
  for (const t of ticks.map(Number)) {
    await seek(t);
    await page.waitForFunction((t) => window.migratory.replay.shown === t && window.migratory.drawn.entities > 0, t, { timeout: 10000 });
    await drawn(page);
    const seen = await page.evaluate(() => ({ tick: window.migratory.replay.shown, drawn: window.migratory.drawn.entities, entities: window.migratory.replay.entities }));
    await page.screenshot({ path: `${out}/replay-tick-${t}.png` });
    say("state", seen);
  }
  const tick = Number(ticks[0]);
  await seek(tick);
  await page.waitForFunction((t) => window.migratory.replay.shown === t, tick, { timeout: 10000 });

  // The markers: wait for the scan to finish and the strip to be drawn.
  await page.waitForFunction(() => window.migratory.replay.markers?.complete && window.migratory.replay.timeline.eventsDrawn > 0, null, { timeout: 20000 });
  say("markers", await page.evaluate(() => ({ markers: window.migratory.replay.markers, drawn: window.migratory.replay.timeline.eventsDrawn })));

  // The event timeline: drag across 60 ticks around the first catch to zoom there, hover
  // the catch (its tooltip), click it (seek there, its avatar selected), `]` to the next
  // cast, a double click for the whole recording again.
  {
    const box = await page.evaluate(() => { const b = document.getElementById("replay-events").getBoundingClientRect(); return [b.left, b.top]; });
    const at = (tick, kind) => page.evaluate(([tick, kind]) => { const t = window.migratory.replay.timeline; return [t.xOf(tick), t.laneY(t.laneOfKind(kind))]; }, [tick, kind]);
    const catchRow = await page.evaluate(() => window.migratory.replay.markers.markers.find((m) => m[1] === 3));
    const [x0, y] = await at(catchRow[0] - 30, 3), [x1] = await at(catchRow[0] + 30, 3);
    await page.mouse.move(box[0] + x0, box[1] + y);
    await page.mouse.down();
    await page.mouse.move(box[0] + (x0 + x1) / 2, box[1] + y, { steps: 4 });
    await page.mouse.move(box[0] + x1, box[1] + y, { steps: 4 });
    await page.mouse.up();
    const range = await page.evaluate(() => [window.migratory.replay.timeline.from, window.migratory.replay.timeline.to]);
    const [cx, cy] = await at(catchRow[0], 3);
    await page.mouse.move(box[0] + cx, box[1] + cy);
    const tip = await page.evaluate(() => document.getElementById("replay-tip").textContent);
    await page.screenshot({ path: `${out}/replay-timeline.png` });
    await page.mouse.click(box[0] + cx, box[1] + cy);
    await page.waitForFunction((t) => window.migratory.replay.shown === t, catchRow[0], { timeout: 10000 });
    const clicked = await page.evaluate(() => ({ shown: window.migratory.replay.shown, selected: window.migratory.replay.selected }));
    // Focus the casts lane (a click on its name): `]` goes to the next cast (or `[` to
    // the one before, when none follows).
    const [, castY] = await at(catchRow[0], 2);
    await page.mouse.click(box[0] + 10, box[1] + castY);
    const key = (await page.evaluate((t) => window.migratory.replay.markers.markers.some((m) => m[1] === 2 && m[0] > t), catchRow[0])) ? "]" : "[";
    await page.keyboard.press(key);
    await page.waitForFunction((t) => window.migratory.replay.shown !== t && window.migratory.replay.shown === Math.floor(window.migratory.replay.tick), catchRow[0], { timeout: 10000 });
    const next = await page.evaluate(() => window.migratory.replay.shown);
    await page.mouse.dblclick(box[0] + cx, box[1] + cy);
    const whole = await page.evaluate(() => [window.migratory.replay.timeline.from, window.migratory.replay.timeline.to]);
    say("timeline", { catchRow, range, tip, clicked, key, next, whole });
    await seek(tick);
    await page.waitForFunction((t) => window.migratory.replay.shown === t, tick, { timeout: 10000 });
  }

  // Click the first avatar: the inspector shows its fields and track.
  const avatar = await page.evaluate(() => {
    const r = window.migratory.replay;
    const e = r.entities.find((e) => e.id >= r.info.boid_count);
    return e ? { id: e.id, at: r.screenOf(e.id) } : null;
  });
  if (!avatar) throw new Error("no avatar to inspect");
  await page.mouse.click(avatar.at[0], avatar.at[1]);
  // Of this tick: an answer for the same avatar at a tick shown earlier may still arrive first.
  await page.waitForFunction(([id, t]) => window.migratory.replay.inspected?.entity.id === id && window.migratory.replay.inspected.tick === t, [avatar.id, tick], { timeout: 10000 });
  const inspected = await page.evaluate(() => window.migratory.replay.inspected);
  await drawn(page);
  const panel = await page.evaluate(() => document.getElementById("inspector").innerText);
  say("inspected", { picked: avatar.id, inspected, panel });

  // Pin its x_mm: the value at the tick shown and a plot over the timeline's range.
  await page.click('#inspector a[data-pin="x_mm"]');
  await page.waitForFunction(() => window.migratory.replay.pins[0]?.series, null, { timeout: 20000 });
  await page.click("#replay-step");
  await page.waitForFunction((t) => window.migratory.replay.shown === t + 1, tick, { timeout: 10000 });
  await drawn(page);
  const pinned = await page.evaluate(() => {
    const p = window.migratory.replay.pins[0];
    return { id: p.id, field: p.field, from: p.from, to: p.to, series: p.series, shown: window.migratory.replay.shown, value: document.querySelector("#inspector .pin-value")?.textContent, polylines: document.querySelectorAll("#inspector svg polyline").length };
  });
  await page.screenshot({ path: `${out}/replay-inspector.png` });
  say("pinned", pinned);
  await page.click("#replay-back");
  await page.waitForFunction((t) => window.migratory.replay.shown === t, tick, { timeout: 10000 });

  // As the first client saw it.
  const client = await page.evaluate(() => window.migratory.replay.markers.clients[0].client);
  await page.selectOption("#replay-view", String(client));
  await page.waitForFunction((c) => window.migratory.replay.clientView?.client === c && !window.migratory.replay.clientView.missing, client, { timeout: 10000 });
  await drawn(page); // so the drawn count is this view's
  const cv = await page.evaluate(() => ({ view: window.migratory.replay.clientView, drawn: window.migratory.drawn.entities, camera: [window.migratory.camera.x_mm, window.migratory.camera.y_mm], follow: window.migratory.camera.follow }));
  await page.screenshot({ path: `${out}/replay-as-client.png` });
  say("client", cv);
  // Three steps forward, still as that client (the server steps its cursor, watching it).
  for (let k = 1; k <= 3; k++) {
    await page.click("#replay-step");
    await page.waitForFunction(([c, t]) => window.migratory.replay.clientView?.client === c && window.migratory.replay.clientView.tick === t, [client, tick + k], { timeout: 10000 });
  }
  await drawn(page);
  say("client-later", await page.evaluate(() => ({ view: window.migratory.replay.clientView, drawn: window.migratory.drawn.entities })));
  // Before it joined: the panel says so and when it joins, and nothing is logged as an error.
  await seek(0);
  await page.waitForFunction((c) => window.migratory.replay.clientView?.client === c && window.migratory.replay.clientView.tick === 0 && window.migratory.replay.clientView.missing, client, { timeout: 10000 });
  await drawn(page);
  say("client-absent", { client, panel: await page.evaluate(() => document.getElementById("inspector").innerText) });
  await seek(tick);
  await page.waitForFunction((t) => window.migratory.replay.shown === t, tick, { timeout: 10000 });
  await page.selectOption("#replay-view", "");

  // The keys: Right and Left step a tick, Shift a second, End goes to the last tick, and
  // Space there plays from the first; ? lists them.
  await page.evaluate(() => document.activeElement?.blur());
  const shownAfter = async (key) => {
    await page.keyboard.press(key);
    await page.waitForFunction(() => window.migratory.replay.shown === Math.floor(window.migratory.replay.tick), null, { timeout: 10000 });
    return page.evaluate(() => window.migratory.replay.shown);
  };
  const keys = { from: tick, right: await shownAfter("ArrowRight"), left: (await shownAfter("ArrowLeft"), await shownAfter("ArrowLeft")) };
  keys.shiftRight = await shownAfter("Shift+ArrowRight");
  keys.end = await shownAfter("End");
  await page.keyboard.press("Space");
  keys.playingFrom = await page.evaluate(() => ({ playing: window.migratory.replay.playing, tick: Math.floor(window.migratory.replay.tick) }));
  await page.keyboard.press("Space");
  keys.paused = await page.evaluate(() => !window.migratory.replay.playing);
  await page.keyboard.press("?");
  keys.help = await page.evaluate(() => document.getElementById("replay-keys").style.display === "block" && document.getElementById("replay-keys").innerText);
  await page.keyboard.press("Escape");
  say("keys", keys);
  await seek(tick);
  await page.waitForFunction((t) => window.migratory.replay.shown === t, tick, { timeout: 10000 });

  // The first divergence, when the server compares.
  await page.waitForFunction(() => window.migratory.replay.divergence && window.migratory.replay.divergence.status !== "pending", null, { timeout: 20000 });
  const d = await page.evaluate(() => window.migratory.replay.divergence);
  if (d.status === "found") {
    await page.click("#replay-jump");
    await page.waitForFunction((t) => window.migratory.replay.shown === t, d.explained_at_tick, { timeout: 10000 });
    await drawn(page);
    const highlighted = await page.evaluate(() => {
      const r = window.migratory.replay;
      return r.entities.filter((e) => r.highlight.has(e.id)).map((e) => e.id);
    });
    await page.screenshot({ path: `${out}/replay-divergence.png` });
    const jumped = await page.evaluate(() => {
      const r = window.migratory.replay;
      const e = r.entities.find((e) => e.id === r.selected);
      return { selected: r.selected, at: e ? [e.x_mm, e.y_mm] : null, camera: [window.migratory.camera.x_mm, window.migratory.camera.y_mm], mmPerPx: window.migratory.camera.mmPerPx };
    });
    say("divergence", { divergence: d, shown: await page.evaluate(() => window.migratory.replay.shown), highlighted, jumped, text: await page.evaluate(() => document.getElementById("replay-divergence").innerText) });
  } else {
    say("divergence", { divergence: d });
  }
  // The address bar holds the moment shown; a link to it opens exactly there.
  await page.waitForFunction(() => new URLSearchParams(location.search).get("tick") === String(window.migratory.replay.shown), null, { timeout: 10000 });
  const link = `${url}?tick=${tick}&sel=${avatar.id}&client=${client}&zoom=40`;
  const other = await pageWithErrors(browser, errors);
  await other.goto(link);
  await other.waitForFunction(([t, c]) => window.migratory?.replay?.shown === t && window.migratory.replay.clientView?.client === c && !window.migratory.replay.clientView.missing, [tick, client], { timeout: 15000 });
  await other.waitForTimeout(700); // one write of the address bar
  say("link", await other.evaluate(() => {
    const r = window.migratory.replay;
    return { shown: r.shown, selected: r.selected, client: r.client, menu: document.getElementById("replay-view").value, zoom: window.migratory.camera.mmPerPx, camera: [window.migratory.camera.x_mm, window.migratory.camera.y_mm], centre: r.clientView.centre, search: location.search };
  }));
  if (errors.length) { console.error(`console errors: ${errors.join(" | ")}`); process.exit(1); }
} finally {
  await browser.close();
}
