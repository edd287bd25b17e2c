// The live viewer keeps its avatar when its world moves: run by net/tests/net/viewer/ as
// `node reclaim.mjs URL OUT_DIR`. It joins, prints `move-now` (the harness stops the server
// for a move, which closes the page with 4001, and starts the world again from its
// recording on the same address), and checks that the page reconnects by itself and takes
// its avatar back: the same client and avatar, snapshots decoding on with the kept decoder,
// the world's ticks going on. Exits 0 when every check passed.
import { check, launch, pageWithErrors } from "./launch.mjs";
import { mkdirSync } from "node:fs";

const [url, out] = process.argv.slice(2);
mkdirSync(out, { recursive: true });

const browser = await launch();
try {
  const errors = [];
  const page = await pageWithErrors(browser, errors);
  await page.goto(url);
  await page.waitForFunction(() => window.migratory?.drawn.terrain === true, null, { timeout: 10000 });
  await page.fill("#name", "mover");
  await page.click("#play");
  await page.waitForFunction(() => window.migratory.connection === "playing" && window.migratory.own, null, { timeout: 10000 });
  const before = await page.evaluate(() => {
    const m = window.migratory;
    return { client: m.welcome.clientId, avatar: m.welcome.avatarId, tick: m.latest.header.tick, token: m.reconnectToken !== null };
  });
  check(before.token, "WELCOME carried a reconnect token");

  console.log("move-now");
  // The page's refused reconnects (1006) follow at once: look at every close, not the last.
  await page.waitForFunction(() => window.migratory.closeCodes.includes(4001), null, { timeout: 15000 });
  check(true, "the move closed the page with 4001");
  await page.waitForFunction(() => window.migratory.reclaims === 1 && window.migratory.connection === "playing", null, { timeout: 20000 });
  await page.waitForFunction((t) => window.migratory.latest && window.migratory.latest.header.tick > t + 30, before.tick, { timeout: 10000 });
  const after = await page.evaluate(() => {
    const m = window.migratory;
    return { client: m.welcome.clientId, avatar: m.welcome.avatarId, tick: m.latest.header.tick, own: m.own !== null };
  });
  check(after.client === before.client && after.avatar === before.avatar,
    `the same client and avatar after the move (${JSON.stringify(before)} -> ${JSON.stringify(after)})`);
  check(after.own, "the own avatar is drawn again");
  await page.screenshot({ path: `${out}/7-after-move.png` });
  // While the world was between servers the browser logs each refused connection attempt;
  // nothing else may have gone wrong.
  const unexpected = errors.filter((e) => !/WebSocket connection to .* failed/.test(e));
  check(unexpected.length === 0, `no console errors but refused reconnects (${unexpected.join(" | ")})`);
} finally {
  await browser.close();
}
