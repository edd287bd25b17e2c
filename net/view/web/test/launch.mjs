// Debian's Chromium for the browser tests, through playwright-core (never a downloaded
// browser), with the flags this machine's closed network needs.
import { chromium } from "playwright-core";

export function launch() {
  return chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

/** A page whose console errors and uncaught exceptions are collected in `errors`. */
export async function pageWithErrors(browser, errors) {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  return page;
}

/** Ends the test with a failure line on stderr and exit status 1. */
export const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };

/** A passed check says so on stdout; a failed one ends the test. */
export const check = (ok, msg) => { if (!ok) fail(msg); console.log(`ok: ${msg}`); };

/** Resolves after two animation frames: the page draws what an answer brought in the frame
 * after it arrives, so a reading of what is drawn (counts, panels, lanes) waits for the
 * frame under way and the next, whole one. */
export function drawn(page) {
  return page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
}
