// Playback benchmark (opt-in, not a test): the replay viewer in Debian's Chromium through
// playwright-core, server and browser on the same machine. Run by
// net/bench/replay_playback.sh as `node playback.mjs URL SECONDS SEEKS`. With the whole
// world on screen (every boid drawn) it prints:
// - seeks: the time from asking for a tick to that tick drawn, over SEEKS ticks spread
//   over the recording in a scrambled order (so every seek goes far), p50 and p95;
// - playback at 1x, 4x and 16x for SECONDS each: distinct world states drawn per second,
//   ticks per state, frame interval and draw time per frame.
import { launch } from "../test/launch.mjs";
import { readFileSync } from "node:fs";

const [url, seconds = "8", seekCount = "40"] = process.argv.slice(2);
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const ms = (x) => `${x.toFixed(1)} ms`;

const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  // VIEWER_DIR: the viewer's scripts from that folder instead of the binary (to compare
  // variants side by side without rebuilding).
  if (process.env.VIEWER_DIR) {
    await page.route("**/viewer/*.js", (route) => {
      const name = new URL(route.request().url()).pathname.split("/").pop();
      route.fulfill({ contentType: "text/javascript", body: readFileSync(`${process.env.VIEWER_DIR}/${name}`) });
    });
  }
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.replay && window.migratory.drawn.terrain && window.migratory.drawn.entities > 0, null, { timeout: 30000 });
  // The marker scan fills the seek index as it goes: seeks are timed once it is done.
  await page.waitForFunction(() => window.migratory.replay.markers?.complete, null, { timeout: 600000, polling: 500 });
  // BENCH_NO_TIMELINE=1: the event timeline is not drawn (to measure what it costs).
  if (process.env.BENCH_NO_TIMELINE) await page.evaluate(() => { window.migratory.replay.timeline.draw = () => {}; });
  const info = await page.evaluate(() => {
    const m = window.migratory, size = m.replay.info.world_size_mm;
    m.camera.follow = false;
    m.camera.x_mm = m.camera.y_mm = size / 2;
    m.camera.mmPerPx = size / 760;
    return m.replay.info;
  });
  const index = await (await fetch(new URL("/replay/markers?from=999999999", url))).json();
  console.log(`recording: ${info.file}, ticks ${info.start_tick}..${info.last_tick} at ${info.tick_rate_hz} Hz, ${info.boid_count} boids`);
  if (index.seek_index) console.log(`seek index: ${index.seek_index.checkpoints} checkpoints, ${(index.seek_index.bytes / 1e6).toFixed(1)} MB, every ${index.seek_index.spacing_ticks} ticks`);

  const n = Number(seekCount), span = info.last_tick - info.start_tick;
  const ticks = Array.from({ length: n }, (_, k) => info.start_tick + 1 + Math.floor((((k * 7919) % n) + 0.37) * span / n));
  const seeks = [];
  for (const t of ticks) {
    const took = await page.evaluate((t) => new Promise((done) => {
      const r = window.migratory.replay, t0 = performance.now();
      r.playing = false;
      r.tick = t;
      const wait = () => (r.shown === t ? done(performance.now() - t0) : requestAnimationFrame(wait));
      requestAnimationFrame(wait);
    }), t);
    seeks.push(took);
  }
  console.log(`seek (asked to drawn), n=${n}: p50 ${ms(q(seeks, 0.5))}, p95 ${ms(q(seeks, 0.95))}, max ${ms(Math.max(...seeks))}`);

  // Where the renderer's main thread spends each playback (Chromium's Performance domain).
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Performance.enable");
  const metrics = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  for (const speed of [1, 4, 16]) {
    const m0 = await metrics();
    const from = info.start_tick + Math.floor(span / 10);
    const result = await page.evaluate(([speed, from, ms]) => new Promise((done) => {
      const m = window.migratory, r = m.replay;
      r.playing = false;
      r.tick = from;
      const wait = () => {
        if (r.shown !== from) return requestAnimationFrame(wait);
        r.speed = speed;
        r.playing = true;
        // A moment to fill the pipeline, then measure.
        setTimeout(() => {
          m.drawMs.length = 0;
          // Counted here, each frame, so the figure needs nothing from the page but `shown`.
          const tick0 = r.shown, stamps = [];
          let states = 0, last = r.shown;
          const frame = (t) => {
            stamps.push(t);
            if (r.shown !== last) { states++; last = r.shown; }
            if (t - stamps[0] < ms && r.playing) return requestAnimationFrame(frame);
            const secs = (stamps[stamps.length - 1] - stamps[0]) / 1000;
            done({
              secs,
              states: states / secs,
              ticksPerState: (r.shown - tick0) / Math.max(1, states),
              ticksPerSecond: (r.shown - tick0) / secs,
              intervals: stamps.slice(1).map((t, i) => t - stamps[i]),
              draw: m.drawMs.slice(),
              entities: m.drawn.entities,
              window: r.playback?.fetchMs.slice(-20) ?? [],
              ended: !r.playing,
            });
            r.playing = false;
          };
          requestAnimationFrame(frame);
        }, 300);
      };
      requestAnimationFrame(wait);
    }), [speed, from, Number(seconds) * 1000]);
    const fps = 1000 / q(result.intervals, 0.5);
    console.log(`${speed}x: ${result.states.toFixed(1)} distinct states/s (${result.ticksPerState.toFixed(2)} ticks apart, ${result.ticksPerSecond.toFixed(0)} ticks/s of ${speed * info.tick_rate_hz}), ` +
      `${result.entities} entities drawn; frame interval p50 ${ms(q(result.intervals, 0.5))} (${fps.toFixed(1)} fps at the median, ${(result.intervals.length / result.secs).toFixed(1)} frames/s in all), p95 ${ms(q(result.intervals, 0.95))}; ` +
      `draw p50 ${ms(q(result.draw, 0.5))}, p95 ${ms(q(result.draw, 0.95))}; window fetch p50 ${result.window.length ? ms(q(result.window, 0.5)) : "-"}` +
      `${result.ended ? " (reached the end early)" : ""}`);
    const m1 = await metrics(), busySpan = m1.Timestamp - m0.Timestamp;
    const share = (k) => `${((100 * (m1[k] - m0[k])) / busySpan).toFixed(0)}%`;
    console.log(`   renderer main thread busy ${share("TaskDuration")} of the time (script ${share("ScriptDuration")}, style ${share("RecalcStyleDuration")}, layout ${share("LayoutDuration")})`);
  }
} finally {
  await browser.close();
}
