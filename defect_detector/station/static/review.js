// The review page: the oldest waiting call, board crop beside golden crop; keys D / 1-9 / F / S / M, Shift+D / Shift+F for
// every waiting call of the frame at once; misses drawn with the mouse.
"use strict";

(() => {
  const { api, el, fmtTime, colour, drawCalls, loadImage } = Station;
  const classes = Station.classes;
  const CROP = 360;
  const state = { item: null, frame: null, golden: null, missed: [], drawing: false, drag: null, box: null, busy: false };
  const $ = (id) => document.getElementById(id);

  // --- who is reviewing: asked once per browser session ---
  function reviewer() { return sessionStorage.getItem("reviewer") || ""; }
  function askReviewer() {
    const dialog = $("who");
    $("who-name").value = reviewer();
    if (!dialog.open) dialog.showModal();
    $("who-name").focus();
  }
  $("who-form").addEventListener("submit", (event) => {
    const name = $("who-name").value.trim();
    if (!name) { event.preventDefault(); return; }
    sessionStorage.setItem("reviewer", name);
    $("reviewer").textContent = name;
    next(); // the next call is leased under this name
  });
  $("change-reviewer").addEventListener("click", askReviewer);

  function toast(text, error = false) {
    const t = $("toast");
    t.textContent = text;
    t.className = `toast show${error ? " error" : ""}`;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { t.className = "toast"; }, 2500);
  }

  // --- the class keys legend and the missed-defect class picker ---
  $("class-keys").replaceChildren(...classes.slice(0, 9).map((name, i) => {
    const li = el("li");
    li.append(el("kbd", i + 1), document.createTextNode(` ${name}`));
    return li;
  }));
  $("missed-class").replaceChildren(...classes.map((name) => { const o = el("option", name); o.value = name; return o; }));

  // --- drawing ---
  function cropRegion(box, width, height) {
    const [x1, y1, x2, y2] = box;
    const side = Math.min(Math.max(64, 3 * Math.max(x2 - x1, y2 - y1)), width, height);
    const cx = (x1 + x2) / 2, cy = (y1 + y2) / 2;
    const ox = Math.min(Math.max(0, cx - side / 2), width - side);
    const oy = Math.min(Math.max(0, cy - side / 2), height - side);
    return { ox, oy, side };
  }

  function drawCrop(canvas, img, call, region) {
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#0e141b";
    ctx.fillRect(0, 0, CROP, CROP);
    if (!img) return;
    ctx.drawImage(img, region.ox, region.oy, region.side, region.side, 0, 0, CROP, CROP);
    drawCalls(ctx, [call], { ox: region.ox, oy: region.oy, scale: CROP / region.side, labels: false });
  }

  function drawFull() {
    const canvas = $("full");
    const ctx = canvas.getContext("2d");
    const { item, frame } = state;
    if (!item) return;
    canvas.width = frame ? frame.naturalWidth : item.inspection.width || 640;
    canvas.height = frame ? frame.naturalHeight : item.inspection.height || 480;
    ctx.fillStyle = "#0e141b";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    if (frame) ctx.drawImage(frame, 0, 0);
    const misses = state.missed.map((m) => ({ ...m, missed: true, score: 1 }));
    drawCalls(ctx, [...item.inspection.calls, ...misses], { highlight: item.call.id });
    if (state.box) {
      const [x1, y1, x2, y2] = state.box;
      ctx.lineWidth = Math.max(2, Math.round(canvas.width / 400));
      ctx.strokeStyle = "#2e8540";
      ctx.setLineDash([6, 4]);
      ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
      ctx.setLineDash([]);
    }
  }

  function show(item) {
    const { call, inspection } = item;
    $("queue-count").textContent = `${item.queue} waiting`;
    const tag = $("call-class");
    tag.textContent = call.class;
    tag.style.background = colour(call.class);
    $("call-score").textContent = call.score.toFixed(3);
    $("call-box").textContent = call.box.map((v) => v.toFixed(1)).join(", ");
    const warning = inspection.design_warning ? ` · warning: ${inspection.design_warning}` : "";
    const taught = inspection.design_taught ? " · taught design" : "";
    $("call-frame").textContent = `${inspection.source} · frame ${inspection.frame} · ${inspection.name}${Station.traceText(inspection)}${taught}${warning}`;
    $("call-board").textContent = (call.board ? `${call.board}` : "–") + Station.boardsText(inspection.boards);
    $("board-waiting").textContent = String(inspection.calls.filter((c) => c.waiting).length);
    $("call-time").textContent = fmtTime(inspection.time);
    $("call-drift").textContent = inspection.score === null ? inspection.drift : `${inspection.drift} (${inspection.score})`;
    const width = inspection.width || (state.frame ? state.frame.naturalWidth : 1);
    const height = inspection.height || (state.frame ? state.frame.naturalHeight : 1);
    const region = cropRegion(call.box, width, height);
    drawCrop($("crop"), state.frame, call, region);
    drawCrop($("golden"), state.golden, call, region);
    $("no-golden").classList.toggle("hidden", Boolean(state.golden));
    drawFull();
    $("item").dataset.call = String(call.id);
  }

  async function next() {
    stopDrawing();
    let item;
    try {
      // the call is leased to this reviewer for a while: a second reviewer gets the next one
      item = await api(reviewer() ? `/api/review/next?reviewer=${encodeURIComponent(reviewer())}` : "/api/review/next");
    } catch (err) {
      toast(err.message, true);
      return;
    }
    state.item = item;
    $("empty").classList.toggle("hidden", Boolean(item));
    $("item").classList.toggle("hidden", !item);
    if (!item) {
      $("queue-count").textContent = "0 waiting";
      document.body.dataset.queue = "empty";
      return;
    }
    document.body.dataset.queue = "busy";
    const id = item.inspection.id;
    const [frame, golden, details] = await Promise.all([
      loadImage(`/api/inspections/${id}/image`).catch(() => null),
      item.inspection.golden ? loadImage(`/api/inspections/${id}/reference`).catch(() => null) : Promise.resolve(null),
      api(`/api/inspections/${id}`).catch(() => ({ missed: [] })),
    ]);
    if (!frame) toast(`inspection ${id}: its frame is not stored; judge the call by its data or skip it`, true);
    Object.assign(state, { frame, golden, missed: details.missed || [] });
    show(item);
    document.body.dataset.shown = String(item.call.id);
  }

  async function verdict(kind, className = null) {
    if (!state.item || state.busy) return;
    if (!reviewer()) { askReviewer(); return; }
    const body = { verdict: kind, reviewer: reviewer(), version: state.item.call.version };
    if (className) body.class = className;
    state.busy = true;
    try {
      const saved = await api(`/api/calls/${state.item.call.id}/verdict`, { method: "POST", body });
      toast(`call ${saved.call}: ${saved.verdict.replace("_", " ")}${saved.class ? ` (${saved.class})` : ""}`);
      await next();
    } catch (err) {
      toast(err.message, true);
      if (err.status === 409) await next(); // another reviewer's verdict came first: show the next call
    } finally {
      state.busy = false;
    }
  }

  // --- the whole board at once: Shift+D / Shift+F give every waiting call of this frame one verdict ---
  async function boardVerdict(kind) {
    if (!state.item || state.busy) return;
    if (!reviewer()) { askReviewer(); return; }
    const id = state.item.inspection.id;
    state.busy = true;
    try {
      const saved = await api(`/api/inspections/${id}/verdict`, { method: "POST", body: { verdict: kind, reviewer: reviewer() } });
      const n = saved.calls.length;
      const left = saved.left ? `; ${saved.left} held by other reviewers` : "";
      toast(`inspection ${id}: ${n} call${n === 1 ? "" : "s"} ${kind.replace("_", " ")}${left}`);
      await next();
    } catch (err) {
      toast(err.message, true);
      if (err.status === 409) await next();
    } finally {
      state.busy = false;
    }
  }

  // --- missed defects: M, drag a box on the whole frame, pick the class (number keys or the list), Enter ---
  function startDrawing() {
    if (!state.item) return;
    state.drawing = true;
    state.box = null;
    document.querySelector(".full").classList.add("drawing");
    $("draw-hint").textContent = "drag a box around the missed defect";
  }
  function stopDrawing() {
    state.drawing = false;
    state.drag = null;
    state.box = null;
    document.querySelector(".full").classList.remove("drawing");
    $("missed-form").classList.add("hidden");
    $("draw-hint").textContent = "calls in colour, this call thick, drawn misses dashed green";
    drawFull();
  }
  function framePoint(event) {
    const canvas = $("full");
    const rect = canvas.getBoundingClientRect();
    const x = ((event.clientX - rect.left) * canvas.width) / rect.width;
    const y = ((event.clientY - rect.top) * canvas.height) / rect.height;
    return [Math.min(Math.max(0, x), canvas.width), Math.min(Math.max(0, y), canvas.height)];
  }
  $("full").addEventListener("mousedown", (event) => {
    if (!state.item) return;
    if (!state.drawing) startDrawing();
    state.drag = framePoint(event);
    event.preventDefault();
  });
  window.addEventListener("mousemove", (event) => {
    if (!state.drag) return;
    const [ax, ay] = state.drag;
    const [bx, by] = framePoint(event);
    state.box = [Math.min(ax, bx), Math.min(ay, by), Math.max(ax, bx), Math.max(ay, by)];
    drawFull();
  });
  window.addEventListener("mouseup", () => {
    if (!state.drag) return;
    state.drag = null;
    const b = state.box;
    if (!b || b[2] - b[0] < 2 || b[3] - b[1] < 2) { state.box = null; drawFull(); return; }
    $("missed-class").value = state.item.call.class;
    $("missed-form").classList.remove("hidden");
    $("draw-hint").textContent = "pick the class (number keys), Enter saves, Esc cancels";
  });

  async function saveMissed() {
    if (!state.box || state.busy) return;
    if (!reviewer()) { askReviewer(); return; }
    const id = state.item.inspection.id;
    const body = { box: state.box.map((v) => Math.round(v * 10) / 10), class: $("missed-class").value, reviewer: reviewer() };
    state.busy = true;
    try {
      const saved = await api(`/api/inspections/${id}/missed`, { method: "POST", body });
      state.missed.push(saved);
      toast(`missed ${saved.class} saved on inspection ${id}`);
      stopDrawing();
    } catch (err) {
      toast(err.message, true);
    } finally {
      state.busy = false;
    }
  }

  for (const button of document.querySelectorAll("[data-action]")) {
    button.addEventListener("click", () => {
      const action = button.dataset.action;
      if (action === "draw") startDrawing();
      else if (action.startsWith("board-")) boardVerdict(action.slice(6));
      else verdict(action);
    });
  }
  $("missed-save").addEventListener("click", saveMissed);
  $("missed-cancel").addEventListener("click", stopDrawing);

  document.addEventListener("keydown", (event) => {
    if ($("who").open || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target instanceof HTMLInputElement) return;
    const key = event.key.toLowerCase();
    const digit = /^[1-9]$/.test(key) ? Number(key) - 1 : -1;
    if (state.drawing) {
      if (key === "escape") stopDrawing();
      else if (key === "enter") { event.preventDefault(); saveMissed(); }
      else if (digit >= 0 && digit < classes.length) $("missed-class").value = classes[digit];
      return;
    }
    if (event.target instanceof HTMLSelectElement) return;
    if (event.shiftKey && key === "d") boardVerdict("defect");
    else if (event.shiftKey && key === "f") boardVerdict("false_call");
    else if (key === "d") verdict("defect");
    else if (key === "f") verdict("false_call");
    else if (key === "s") verdict("skip");
    else if (key === "m") startDrawing();
    else if (digit >= 0 && digit < classes.length) verdict("defect", classes[digit]);
    else return;
    event.preventDefault();
  });

  $("reviewer").textContent = reviewer() || "?";
  if (!reviewer()) askReviewer(); // the queue is shown once the name is given
  else next();
})();
