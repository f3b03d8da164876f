// The live page: polls /api/live twice a second and redraws what changed.
"use strict";

(() => {
  const { api, el, fmtTime, colour, drawCalls, loadImage } = Station;
  const POLL_MS = 500;
  const canvas = document.getElementById("frame");
  const ctx = canvas.getContext("2d");
  let shownId = null;
  let shownKey = "";

  async function showFrame(item) {
    const key = `${item.id}:${item.calls.length}`;
    if (key === shownKey) return;
    let img;
    try {
      img = await loadImage(`/api/inspections/${item.id}/image`);
    } catch (err) {
      return; // the picture was replaced meanwhile; the next poll shows the newer one
    }
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    ctx.drawImage(img, 0, 0);
    drawCalls(ctx, item.calls);
    shownId = item.id;
    shownKey = key;
    canvas.dataset.inspection = String(item.id);
    canvas.dataset.calls = String(item.calls.length);
    document.getElementById("no-frame").classList.add("hidden");
    const meta = `${item.source} · frame ${item.frame} · ${item.name}${Station.traceText(item)} · ${fmtTime(item.time)} · ${item.verdict}`;
    document.getElementById("frame-meta").textContent = meta + Station.boardsText(item.boards);
    const chips = document.getElementById("frame-calls");
    chips.replaceChildren(...item.calls.map((c) => {
      const chip = el("span", `${c.class} ${c.score.toFixed(2)}`, "chip");
      chip.style.background = colour(c.class);
      return chip;
    }));
    if (!item.calls.length) chips.replaceChildren(el("span", "no calls", "muted"));
  }

  function showCounts(data) {
    const fmt = (v) => (v === null || v === undefined ? "–" : String(v));
    const summary = [
      ["frames", data.hour.frames, data.shift.frames],
      ["boards inspected", data.hour.boards, data.shift.boards],
      ["not inspected", data.hour.not_inspected, data.shift.not_inspected],
    ];
    const perBoard = [
      ["calls", data.hour.calls, data.shift.calls],
      ["calls per board", data.hour.calls_per_board, data.shift.calls_per_board],
    ];
    const row = ([name, h, s]) => {
      const tr = el("tr");
      tr.append(el("th", name), el("td", fmt(h)), el("td", fmt(s)));
      return tr;
    };
    document.getElementById("counts-summary").replaceChildren(...summary.map(row));
    const fpy = (c) => (c.first_pass_yield === null ? "–" : `${(100 * c.first_pass_yield).toFixed(1)}% (${c.first_passed} of ${c.first_inspected})`);
    const yields = [
      ["passed", data.hour.passed, data.shift.passed],
      ["passed as suspect", data.hour.pass_suspect, data.shift.pass_suspect],
      ["failed", data.hour.failed, data.shift.failed],
      ["first-pass yield", fpy(data.hour), fpy(data.shift)],
    ];
    document.getElementById("counts-yield").replaceChildren(...yields.map(row));
    document.getElementById("counts-calls").replaceChildren(...perBoard.map(row));
    const kinds = [...new Set([...Object.keys(data.shift.reasons), ...Object.keys(data.hour.reasons)])];
    document.getElementById("counts-reason").replaceChildren(...kinds.map((kind) => {
      const tr = el("tr", null, "reason");
      tr.append(el("th", `· ${kind}`), el("td", fmt(data.hour.reasons[kind] || 0)), el("td", fmt(data.shift.reasons[kind] || 0)));
      return tr;
    }));
    const names = [...new Set([...Object.keys(data.shift.per_class), ...Object.keys(data.hour.per_class)])].sort();
    document.getElementById("counts-class").replaceChildren(...names.map((name) => {
      const tr = el("tr");
      const th = el("th");
      const dot = el("span", "", "sw");
      dot.style.background = colour(name);
      th.append(dot, document.createTextNode(name));
      tr.append(th, el("td", fmt(data.hour.per_class[name] || 0)), el("td", fmt(data.shift.per_class[name] || 0)));
      return tr;
    }));
    document.getElementById("shift").textContent = `shift since ${fmtTime(data.shift_start)}`;
    const q = document.getElementById("queue-link");
    const on = `${data.queue_frames} frame${data.queue_frames === 1 ? "" : "s"}`;
    q.textContent = data.queue ? `${data.queue} call${data.queue === 1 ? "" : "s"} on ${on} waiting for review` : "no calls waiting";
  }

  function svg(tag, attrs) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  }

  function showDrift(points, alerts) {
    const chart = document.getElementById("drift-chart");
    const W = 400, H = 150, PAD = 6;
    const scored = points.filter((p) => p.score !== null);
    const badge = document.getElementById("drift-state");
    const last = points.length ? points[points.length - 1].drift : "off";
    badge.textContent = last;
    badge.className = `badge ${last}`;
    const nodes = [];
    const top = Math.max(1, ...scored.map((p) => p.score)) * 1.1;
    const x = (i) => PAD + (points.length > 1 ? (i / (points.length - 1)) * (W - 2 * PAD) : (W - 2 * PAD) / 2);
    const y = (v) => H - PAD - (v / top) * (H - 2 * PAD);
    const index = new Map(points.map((p, i) => [p.id, i]));
    for (const a of alerts) {
      if (!index.has(a.inspection)) continue;
      const xi = x(index.get(a.inspection));
      const stroke = a.event === "drift" ? (a.severity === "critical" ? "#c62828" : "#c77c02") : "#7b4fd6";
      const line = svg("line", { x1: xi, x2: xi, y1: 0, y2: H, stroke, "stroke-width": 2, "stroke-dasharray": "4 3", class: "event-mark" });
      const title = svg("title", {});
      title.textContent = `${a.event} ${a.severity || ""} at frame ${a.frame}: ${a.cause || a.reason || ""}`;
      line.append(title);
      nodes.push(line);
    }
    let path = "";
    points.forEach((p, i) => {
      if (p.score === null) return;
      path += `${path && points[i - 1] && points[i - 1].score !== null ? "L" : "M"}${x(i).toFixed(1)},${y(p.score).toFixed(1)}`;
    });
    if (path) nodes.push(svg("path", { d: path, fill: "none", stroke: "#1f6feb", "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" }));
    points.forEach((p, i) => {
      if (p.score === null || (p.drift !== "warning" && p.drift !== "critical")) return;
      nodes.push(svg("circle", { cx: x(i), cy: y(p.score), r: 2.5, fill: p.drift === "critical" ? "#c62828" : "#c77c02" }));
    });
    const label = svg("text", { x: W - PAD, y: 14, "text-anchor": "end", "font-size": 11, fill: "#66727f" });
    label.textContent = scored.length ? `max ${Math.max(...scored.map((p) => p.score)).toFixed(2)}, ${points.length} frames` : "no drift scores (monitoring off)";
    nodes.push(label);
    chart.replaceChildren(...nodes);
  }

  function showAlerts(alerts) {
    const body = document.getElementById("alerts");
    if (!alerts.length) {
      const td = el("td", "no events yet", "muted");
      td.colSpan = 7;
      const tr = el("tr");
      tr.append(td);
      body.replaceChildren(tr);
      return;
    }
    body.replaceChildren(...alerts.map((a) => {
      const tr = el("tr", null, `sev-${a.severity || "none"}`);
      const frame = el("td");
      if (a.inspection) {
        const link = el("a", `${a.frame} (${a.source})`);
        link.href = `/api/inspections/${a.inspection}/image`;
        link.target = "_blank";
        frame.append(link);
      } else {
        frame.textContent = `${a.frame} (${a.source})`;
      }
      tr.append(el("td", fmtTime(a.time)), el("td", a.event), el("td", a.severity || "", "sev"), el("td", a.cause || "–"), frame,
        el("td", a.score === null || a.score === undefined ? "" : Number(a.score).toFixed(2)), el("td", a.reason || "", "reason"));
      return tr;
    }));
  }

  function placeholder(body, text, span) {
    const td = el("td", text, "muted");
    td.colSpan = span;
    const tr = el("tr");
    tr.append(td);
    body.replaceChildren(tr);
  }

  function showRefused(frames) {
    const body = document.getElementById("refused");
    if (!frames.length) return placeholder(body, "every frame was inspected", 5);
    body.replaceChildren(...frames.map((f) => {
      const tr = el("tr");
      const pic = el("td");
      if (f.image) {
        const link = el("a", "image");
        link.href = `/api/inspections/${f.id}/image`;
        link.target = "_blank";
        pic.append(link);
      } else {
        pic.textContent = "none";
      }
      tr.append(el("td", fmtTime(f.time)), el("td", `${f.frame} (${f.source})`), el("td", f.name),
        el("td", f.reason || f.reason_kind || "unknown", "reason"), pic);
      return tr;
    }));
  }

  function showDesigns(runs) {
    const list = document.getElementById("designs");
    if (!runs.length) {
      list.replaceChildren(el("li", "no design runs (no golden images)", "muted"));
      return;
    }
    list.replaceChildren(...runs.map((r) => el("li", `${fmtTime(r.started)} · ${r.source} · ${r.line}`)));
  }

  async function poll() {
    try {
      const data = await api("/api/live");
      showCounts(data);
      showDrift(data.drift, data.alerts);
      showAlerts(data.alerts);
      showRefused(data.not_inspected);
      showDesigns(data.designs);
      if (data.latest) await showFrame(data.latest);
    } catch (err) {
      Station.connectionLost();
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
