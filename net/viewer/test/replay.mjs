// The replay viewer in a real browser: seeks to each tick given and prints the entities
// it drew from, one JSON line per tick. Run by net/tests/net/viewer.rs as
// `node replay.mjs URL OUT_DIR TICK...`.
import { launch, pageWithErrors } from "./launch.mjs";
import { mkdirSync } from "node:fs";

const [url, out, ...ticks] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await launch();
try {
  const errors = [];
  const page = await pageWithErrors(browser, errors);
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
