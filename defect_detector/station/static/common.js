// Shared helpers of the station pages: API calls, time formatting, class colours and box drawing. Plain JavaScript.
"use strict";

const Station = (() => {
  const PALETTE = ["#e53935", "#1e88e5", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#d81b60", "#3949ab"];
  const colours = new Map();

  function colour(name) {
    if (!colours.has(name)) colours.set(name, PALETTE[colours.size % PALETTE.length]);
    return colours.get(name);
  }

  function setClassOrder(names) { names.forEach(colour); }

  async function api(path, options = {}) {
    const init = { credentials: "same-origin", cache: "no-store", ...options };
    if (init.body !== undefined && typeof init.body !== "string") {
      init.body = JSON.stringify(init.body);
      init.headers = { "Content-Type": "application/json", ...(init.headers || {}) };
    }
    const response = await fetch(path, init);
    document.getElementById("conn").classList.add("hidden");
    if (response.status === 204) return null;
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error(data.detail || `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function connectionLost() { document.getElementById("conn").classList.remove("hidden"); }

  function fmtTime(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  // Draw calls (boxes xyxy in frame pixels) on a canvas showing the frame region [ox, oy] scaled by `scale`.
  function drawCalls(ctx, calls, { ox = 0, oy = 0, scale = 1, highlight = null, labels = true } = {}) {
    const base = Math.max(2, Math.round(ctx.canvas.width / 400));
    ctx.font = `${Math.max(12, base * 6)}px system-ui, sans-serif`;
    for (const call of calls) {
      const [x1, y1, x2, y2] = call.box.map((v, i) => (v - (i % 2 ? oy : ox)) * scale);
      const c = call.missed ? "#2e8540" : colour(call.class);
      ctx.lineWidth = call.id === highlight ? base * 2 : base;
      ctx.strokeStyle = c;
      ctx.setLineDash(call.missed ? [base * 3, base * 2] : []);
      ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
      ctx.setLineDash([]);
      if (!labels) continue;
      const text = call.missed ? `missed ${call.class}` : `${call.class} ${call.score.toFixed(2)}`;
      const h = Math.max(12, base * 6) + 4;
      const w = ctx.measureText(text).width + 6;
      const ty = y1 - h >= 0 ? y1 - h : Math.min(y2, ctx.canvas.height - h);
      const tx = Math.max(0, Math.min(x1, ctx.canvas.width - w));
      ctx.fillStyle = c;
      ctx.fillRect(tx, ty, w, h);
      ctx.fillStyle = "#fff";
      ctx.fillText(text, tx + 3, ty + h - 4);
    }
  }

  function loadImage(src) {
    return new Promise((resolve, reject) => {
      const img = new Image();
      img.onload = () => resolve(img);
      img.onerror = () => reject(new Error(`cannot load ${src}`));
      img.src = src;
    });
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function localizeTimes(root = document) {
    for (const t of root.querySelectorAll("time[datetime]")) t.textContent = fmtTime(t.getAttribute("datetime"));
  }

  // " · SN0042 (lot L7, order W12)" for a frame whose board's serial, lot or work order is known, else "".
  function traceText(item) {
    const more = [item.lot ? `lot ${item.lot}` : "", item.order ? `order ${item.order}` : ""].filter(Boolean).join(", ");
    if (!item.serial && !more) return "";
    return ` · ${item.serial || "no serial"}${more ? ` (${more})` : ""}`;
  }

  // " · boards: A pass, B fail (2 calls)" for a panel frame, else "".
  function boardsText(boards) {
    if (!boards || !boards.length) return "";
    const one = (b) => `${b.name} ${b.verdict.replace("_", " ")}${b.calls ? ` (${b.calls} call${b.calls === 1 ? "" : "s"})` : ""}`;
    return ` · boards: ${boards.map(one).join(", ")}`;
  }

  const classes = JSON.parse(document.body.dataset.classes || "[]");
  setClassOrder(classes);
  document.addEventListener("DOMContentLoaded", () => localizeTimes());
  return { api, classes, colour, setClassOrder, connectionLost, fmtTime, drawCalls, loadImage, el, localizeTimes, traceText, boardsText };
})();
