// Frame-time benchmark (opt-in, not a test): the replay viewer drawing every entity of a
// recording, in Debian's Chromium through playwright-core. Run by net/bench/viewer_frames.sh
// as `node frames.mjs URL SECONDS`: zooms out until the whole world (every boid) is on
// screen, plays at 1x, and prints the frame intervals (requestAnimationFrame) and the
// time each frame took to draw, as medians and percentiles. With VIEWER_DIR set, the
// viewer's scripts are served from that folder instead of the binary (to compare drawing
// variants without rebuilding).
import { launch } from "../test/launch.mjs";
import { readFileSync } from "node:fs";

const [url, seconds = "10"] = process.argv.slice(2);
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  if (process.env.VIEWER_DIR) {
    await page.route("**/viewer/*.js", (route) => {
      const name = new URL(route.request().url()).pathname.split("/").pop();
      route.fulfill({ contentType: "text/javascript", body: readFileSync(`${process.env.VIEWER_DIR}/${name}`) });
    });
  }
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.replay && window.migratory.drawn.terrain && window.migratory.drawn.entities > 0, null, { timeout: 20000 });
  await page.evaluate(() => {
    const m = window.migratory, size = m.replay.info.world_size_mm;
    m.camera.x_mm = m.camera.y_mm = size / 2;
    m.camera.mmPerPx = size / 760;
    m.replay.playing = true;
  });
  await page.waitForTimeout(1000);
  const result = await page.evaluate(async (ms) => {
    const m = window.migratory;
    m.drawMs.length = 0;
    const stamps = [];
    await new Promise((done) => {
      const t0 = performance.now();
      const frame = (t) => { stamps.push(t); if (t - t0 < ms) requestAnimationFrame(frame); else done(); };
      requestAnimationFrame(frame);
    });
    const intervals = stamps.slice(1).map((t, i) => t - stamps[i]);
    return { intervals, draw: m.drawMs.slice(), entities: m.drawn.entities, ticks: m.replay.shown };
  }, Number(seconds) * 1000);
  const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
  const f = (xs) => `p50 ${q(xs, 0.5).toFixed(1)} ms, p95 ${q(xs, 0.95).toFixed(1)} ms, p99 ${q(xs, 0.99).toFixed(1)} ms (n=${xs.length})`;
  console.log(`entities drawn per frame: ${result.entities}`);
  console.log(`frame interval: ${f(result.intervals)}; ${(1000 / q(result.intervals, 0.5)).toFixed(1)} fps at the median`);
  console.log(`draw time: ${f(result.draw)}`);
} finally {
  await browser.close();
}
