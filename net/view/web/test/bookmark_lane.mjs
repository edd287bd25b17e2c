// The replay of a session with a bookmark made in the live page (net/tests/net/viewer/):
// `node bookmark_lane.mjs URL OUT_DIR NOTE`. The timeline's bookmarks lane holds one event;
// hovering it shows its note; clicking it lands on its tick. Prints the findings as one
// JSON line (`what: "bookmark-lane"`) for the Rust side to check against the recording.
import { check, drawn, launch, pageWithErrors } from "./launch.mjs";

const [url, out, note] = process.argv.slice(2);
const browser = await launch();
try {
  const errors = [];
  const page = await pageWithErrors(browser, errors);
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.replay?.timeline && window.migratory.replay.markers?.complete, null, { timeout: 20000 });
  await drawn(page); // so the lanes hold the markers and bookmarks
  const lane = await page.evaluate(() => window.migratory.replay.timeline.lanes[4].map((e) => e[0]));
  check(lane.length === 1, `one bookmark on the timeline (${JSON.stringify(lane)})`);
  const box = await page.evaluate(() => { const b = document.getElementById("replay-events").getBoundingClientRect(); return [b.left, b.top]; });
  const [x, y] = await page.evaluate((t) => { const tl = window.migratory.replay.timeline; return [tl.xOf(t), tl.laneY(4)]; }, lane[0]);
  await page.mouse.move(box[0] + x, box[1] + y);
  const tip = await page.evaluate(() => document.getElementById("replay-tip").textContent);
  check(tip.includes(note), `its tooltip has the note (${tip})`);
  await page.mouse.click(box[0] + x, box[1] + y);
  await page.waitForFunction((t) => window.migratory.replay.shown === t, lane[0], { timeout: 10000 });
  await page.screenshot({ path: `${out}/replay-bookmark.png` });
  console.log(JSON.stringify({ what: "bookmark-lane", tick: lane[0], tip, shown: await page.evaluate(() => window.migratory.replay.shown) }));
  check(errors.length === 0, `no console errors (${errors.join(" | ")})`);
} finally {
  await browser.close();
}
