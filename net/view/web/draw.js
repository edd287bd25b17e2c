// Drawing shared by the live and the replay viewer: the canvas, the camera (a world point
// at the canvas centre and a zoom in mm per CSS pixel), the terrain and zones, boids and
// avatars.

import { ZONE_TOWN } from "./protocol.js";

export const canvas = document.getElementById("view");
// Opaque: the background is painted every frame, and an opaque canvas composites for less
// (side by side in net/bench/replay_playback.sh, headless Chromium, 4x: 40.5-44.3 frames
// per second against 37.3-41.9 with alpha).
export const ctx = canvas.getContext("2d", { alpha: false });
export const camera = { x_mm: 0, y_mm: 0, mmPerPx: 200, follow: true };

export function toScreen(x_mm, y_mm) {
  return [(x_mm - camera.x_mm) / camera.mmPerPx + canvas.width / 2 / devicePixelRatio, (y_mm - camera.y_mm) / camera.mmPerPx + canvas.height / 2 / devicePixelRatio];
}

/** [k, ox, oy] with a world point's screen position x_mm * k + ox, y_mm * k + oy (what
 * `toScreen` computes, without an array per point: for drawing thousands). */
export function screenTransform() {
  const k = 1 / camera.mmPerPx;
  return [k, canvas.width / 2 / devicePixelRatio - camera.x_mm * k, canvas.height / 2 / devicePixelRatio - camera.y_mm * k];
}

export function toWorld(px, py) {
  return [(px - canvas.width / 2 / devicePixelRatio) * camera.mmPerPx + camera.x_mm, (py - canvas.height / 2 / devicePixelRatio) * camera.mmPerPx + camera.y_mm];
}

export function circle(x_mm, y_mm, r_mm, stroke, fill = null, dash = []) {
  const [x, y] = toScreen(x_mm, y_mm);
  ctx.beginPath();
  ctx.setLineDash(dash);
  ctx.arc(x, y, r_mm / camera.mmPerPx, 0, Math.PI * 2);
  if (fill) { ctx.fillStyle = fill; ctx.fill(); }
  if (stroke) { ctx.strokeStyle = stroke; ctx.lineWidth = 1.5; ctx.stroke(); }
  ctx.setLineDash([]);
}

// A boid is one small filled triangle with its corners computed here; avatars are kept
// until `flushEntities`, so they are drawn above every boid. Measured side by side with
// net/bench/viewer_frames.sh, since folded into replay_playback.sh (5,032 entities, headless Chromium, software rendering), draw
// time per frame, median: this 5.7-6.0 ms; save/translate/rotate/restore per boid 9.3 ms;
// setTransform per boid 7.0 ms; a 64-heading sprite sheet 18-20 ms; one Path2D for all
// boids 55 ms.
const avatars = [];

/** Zoomed out past this (mm per CSS pixel), a boid is a 3-px square: a filled path costs
 * Chromium's software raster far more than a rectangle, and at that scale thousands of
 * boids are on screen. Side by side (net/bench/replay_playback.sh, the default world's
 * 5,032 entities on screen, 4x): triangles 35-39 frames/s with the renderer's main thread
 * 99% busy, squares 57-58 frames/s at 87%. */
export const BOID_SQUARE_MM_PER_PX_MIN = 600;

/** A boid at screen (x, y), pointing along its velocity (in `colour`: a flash marks the
 * boids a cast reached). */
export function drawBoid(x, y, vx, vy, colour = "#dfe9ef") {
  if (camera.mmPerPx > BOID_SQUARE_MM_PER_PX_MIN) {
    ctx.fillStyle = colour;
    ctx.fillRect(x - 1.5, y - 1.5, 3, 3);
    return;
  }
  const len = Math.hypot(vx, vy);
  const c = len > 0 ? vx / len : 1, s = len > 0 ? vy / len : 0;
  ctx.beginPath();
  ctx.moveTo(x + 5 * c, y + 5 * s);
  ctx.lineTo(x - 3 * c - 2.5 * s, y - 3 * s + 2.5 * c);
  ctx.lineTo(x - 3 * c + 2.5 * s, y - 3 * s - 2.5 * c);
  ctx.closePath();
  ctx.fillStyle = colour;
  ctx.fill();
}

/** An avatar at screen (x, y); the client's own one larger and yellow; `label` (a
 * player's name) above it (drawn at the next flush, above the boids). */
export function drawAvatar(x, y, own = false, label = null) {
  avatars.push([x, y, own, label]);
}

/** Draws the avatars added since the last flush, above the boids. */
export function flushEntities() {
  for (const [x, y, own] of avatars) {
    ctx.beginPath();
    ctx.arc(x, y, own ? 7 : 5, 0, Math.PI * 2);
    ctx.fillStyle = own ? "#ffe27a" : "#e07070";
    ctx.fill();
    ctx.strokeStyle = "#000a";
    ctx.lineWidth = 1;
    ctx.stroke();
  }
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "center";
  ctx.lineWidth = 3;
  ctx.strokeStyle = "#000c";
  for (const [x, y, own, label] of avatars) {
    if (!label) continue;
    ctx.strokeText(label, x, y - 10);
    ctx.fillStyle = own ? "#ffe27a" : "#f4d0d0";
    ctx.fillText(label, x, y - 10);
  }
  ctx.textAlign = "start";
  avatars.length = 0;
}

/** Sizes the canvas to the window, clears it and draws the terrain and the zones.
 * Returns whether the terrain was drawn. */
export function drawBackground(terrain, zones) {
  const dpr = devicePixelRatio || 1;
  if (canvas.width !== Math.round(innerWidth * dpr) || canvas.height !== Math.round(innerHeight * dpr)) {
    canvas.width = Math.round(innerWidth * dpr);
    canvas.height = Math.round(innerHeight * dpr);
  }
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#0b1a24";
  ctx.fillRect(0, 0, innerWidth, innerHeight);
  if (terrain) {
    const [x0, y0] = toScreen(0, 0);
    const size = terrain.worldSizeMm / camera.mmPerPx;
    ctx.imageSmoothingEnabled = camera.mmPerPx > terrain.worldSizeMm / terrain.cells;
    ctx.drawImage(terrain.image, x0, y0, size, size);
  }
  for (const z of zones ?? []) {
    if (z.kind === ZONE_TOWN) circle(z.x_mm, z.y_mm, z.radius_mm, "#f0c060", "#f0c06018");
    else circle(z.x_mm, z.y_mm, z.radius_mm, "#70e090", "#70e09018", [6, 4]);
  }
  return Boolean(terrain);
}
