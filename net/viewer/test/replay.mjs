// The replay viewer in a real browser: seeks to each tick given and prints the entities
// it drew from, one JSON line per tick. Run by net/tests/net/viewer.rs as
// `node replay.mjs URL OUT_DIR TICK...`.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [url, out, ...ticks] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.replay && window.migratory.drawn.terrain, null, { timeout: 10000 });
  for (const t of ticks.map(Number)) {
    await page.evaluate((t) => {
      const s = document.getElementById("replay-slider");
      s.value = String(t);
      s.dispatchEvent(new Event("input"));
    }, t);
    await page.waitForFunction((t) => window.migratory.replay.shown === t && window.migratory.drawn.entities > 0, t, { timeout: 10000 });
    const seen = await page.evaluate(() => ({ tick: window.migratory.replay.shown, drawn: window.migratory.drawn.entities, entities: window.migratory.replay.entities }));
    await page.screenshot({ path: `${out}/replay-tick-${t}.png` });
    console.log(JSON.stringify(seen));
  }
  if (errors.length) { console.error(`console errors: ${errors.join(" | ")}`); process.exit(1); }
} finally {
  await browser.close();
}
