// tickwire monitoring dashboard: polls api/dashboard and draws what it returns.
// Everything from the server is inserted as text (textContent), never as HTML: client
// names, topics and session ids are chosen by peers.
"use strict";

// ?poll=MS, kept within 100 ms .. 60 s (a link with ?poll=-1 polled back to back).
const POLL_MS = Math.min(
  60000,
  Math.max(100, Number(new URLSearchParams(location.search).get("poll")) || 1000),
);
const KEEP = 300;
const COLORS = ["#2f6fde", "#d9482b", "#2c9a4b", "#8a4bd1", "#c28a00"];
const samples = [];
const queueHistory = [];

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function fmt(n) {
  if (typeof n !== "number") return String(n);
  if (Math.abs(n) >= 1e9) return (n / 1e9).toFixed(2) + "G";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function card(parent, key, label, value, title) {
  const attrs = { class: "card", id: "counter-" + key, "data-value": String(value) };
  if (title) attrs.title = title;
  const c = el("div", attrs);
  c.appendChild(el("div", { class: "label" }, label));
  c.appendChild(el("div", { class: "value" }, fmt(value)));
  parent.appendChild(c);
}

// One SVG line chart: series = [{name, points: [[t, v]...]}].
function chart(parent, id, title, series) {
  const box = el("div", { class: "chart", id: "chart-" + id });
  box.appendChild(el("div", { class: "title" }, title));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 360 110");
  const all = series.flatMap((s) => s.points);
  if (all.length > 1) {
    const t0 = Math.min(...all.map((p) => p[0]));
    const t1 = Math.max(...all.map((p) => p[0]));
    const vmax = Math.max(1e-9, ...all.map((p) => p[1]));
    const x = (t) => 4 + ((t - t0) / Math.max(1, t1 - t0)) * 352;
    const y = (v) => 104 - (v / vmax) * 96;
    series.forEach((s, i) => {
      const line = document.createElementNS(ns, "polyline");
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", COLORS[i % COLORS.length]);
      line.setAttribute("stroke-width", "1.5");
      line.setAttribute("points", s.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" "));
      svg.appendChild(line);
    });
    const top = document.createElementNS(ns, "text");
    top.setAttribute("x", "6");
    top.setAttribute("y", "12");
    top.setAttribute("font-size", "10");
    top.textContent = fmt(vmax);
    svg.appendChild(top);
  }
  box.appendChild(svg);
  const legend = el("div", { class: "legend" });
  series.forEach((s, i) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    const span = el("span", { style: "color:" + COLORS[i % COLORS.length] }, s.name + " " + fmt(last));
    legend.appendChild(span);
  });
  box.appendChild(legend);
  parent.appendChild(box);
}

function table(id, columns, rows, rowClass) {
  const t = document.getElementById(id);
  t.replaceChildren();
  const head = el("tr");
  for (const [, label] of columns) head.appendChild(el("th", {}, label));
  t.appendChild(head);
  for (const r of rows) {
    const tr = el("tr", rowClass ? { class: rowClass(r) } : {});
    for (const [key] of columns) {
      const v = r[key];
      tr.appendChild(el("td", { "data-key": key }, Array.isArray(v) ? v.join(" ") : v === null || v === undefined ? "" : v));
    }
    t.appendChild(tr);
  }
  document.getElementById(id + "-panel").hidden = false;
}

function rates(now) {
  const out = {};
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    const dt = (b.t - a.t) / 1000;
    if (dt <= 0) continue;
    for (const k of Object.keys(b.counters)) {
      const d = b.counters[k] - (a.counters[k] || 0);
      (out[k] = out[k] || []).push([b.t, Math.max(0, d / dt)]);
    }
  }
  return out;
}

function render(d) {
  document.getElementById("kind").textContent = "tickwire " + d.kind;
  document.getElementById("name").textContent = d.name + " · v" + d.version + " · up " + fmt(d.uptime_ms / 1000) + " s";
  const now = Date.now();
  samples.push({ t: now, counters: d.counters });
  while (samples.length > KEEP) samples.shift();

  const cards = document.getElementById("counters");
  cards.replaceChildren();
  // Counters are totals since the start, gauges values now: the label says which
  // (new-user pass: "connections" 6, a total, read as the 1 client connected).
  for (const [k, v] of Object.entries(d.counters)) card(cards, k, k.replace(/_/g, " ") + " (total)", v, "total since the start");
  for (const [k, v] of Object.entries(d.gauges)) card(cards, k, k.replace(/_/g, " ") + " (now)", v, "value now");

  const r = rates(now);
  const rateBox = document.getElementById("rates");
  rateBox.replaceChildren();
  for (const group of d.rate_charts) {
    chart(rateBox, group.join("-"), group.join(", ") + " /s", group.map((k) => ({ name: k, points: r[k] || [] })));
  }

  if (d.latency) {
    document.getElementById("latency-panel").hidden = false;
    document.getElementById("latency-source").textContent = d.latency.source;
    const pts = d.latency.history;
    const box = document.getElementById("latency");
    box.replaceChildren();
    chart(box, "latency", "round trip through the router, µs", [
      { name: "p50", points: pts.map((p) => [p.unix_ms, p.p50_us]) },
      { name: "p99", points: pts.map((p) => [p.unix_ms, p.p99_us]) },
      { name: "p99.9", points: pts.map((p) => [p.unix_ms, p.p999_us]) },
    ]);
    chart(box, "latency-max", "max, µs", [{ name: "max", points: pts.map((p) => [p.unix_ms, p.max_us]) }]);
  }

  if (d.connections) {
    document.getElementById("connections-note").textContent =
      d.connections.shown + " of " + d.connections.total + " shown (most queued first); slow consumers: " + d.connections.slow;
    table("connections", [["id", "id"], ["name", "name"], ["addr", "address"], ["subscriptions", "subs"], ["msgs_in", "msgs in"], ["msgs_out", "msgs out"], ["discards", "discards"], ["egress_pending", "queued bytes"], ["slow", "slow"]],
      d.connections.list, (c) => (c.slow ? "slow" : ""));
  }

  if (d.queues) {
    queueHistory.push({ t: now, depths: Object.fromEntries(d.queues.map((q) => [q.name, q.depth])) });
    while (queueHistory.length > KEEP) queueHistory.shift();
    // The deepest queues, where a backlog shows (new-user pass: the first five by name
    // were drawn, and the two deepest of 18 were not), and how many of how many.
    const CHARTED = 5;
    const deepest = [...d.queues].sort((a, b) => b.depth - a.depth || (a.name < b.name ? -1 : 1));
    const names = deepest.slice(0, CHARTED).map((q) => q.name);
    const qc = document.getElementById("queue-chart");
    qc.replaceChildren();
    if (names.length) {
      const title = d.queues.length > CHARTED
        ? "queue depth (messages): the " + CHARTED + " deepest of " + d.queues.length
        : "queue depth (messages)";
      chart(qc, "queue-depth", title, names.map((n) => ({ name: n, points: queueHistory.map((h) => [h.t, h.depths[n] || 0]) })));
    }
    table("queues", [["name", "queue"], ["depth", "depth"], ["in_flight", "in flight"], ["consumers", "consumers"], ["delivered", "delivered"], ["acked", "acked"], ["dead_lettered", "dead-lettered"]], d.queues);
  }
  if (d.fix_sessions) {
    table("sessions", [["session", "session"], ["role", "role"], ["state", "state"], ["next_sender_seq", "next out seq"], ["next_target_seq", "next in seq"], ["msgs_in", "msgs in"], ["msgs_out", "msgs out"], ["resend_requests_in", "resend req in"], ["resend_requests_out", "resend req out"], ["logons", "logons"], ["disconnects", "disconnects"], ["peer", "peer"]],
      d.fix_sessions, (v) => (v.state === "logged_on" ? "" : "slow"));
  }
  if (d.feed_channels) {
    table("channels", [["channel", "channel"], ["lines", "lines"], ["packets", "packets"], ["messages", "messages"], ["gaps", "gaps"], ["recovered", "recovered"], ["lost", "lost"], ["line_filled", "line filled"], ["duplicates", "duplicates"], ["requests", "re-requests"], ["published", "published"], ["recovering", "recovering"]],
      d.feed_channels, (c) => (c.lost > 0 ? "slow" : ""));
  }
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const res = await fetch("api/dashboard", { cache: "no-store" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    render(await res.json());
    status.textContent = "live · " + new Date().toLocaleTimeString();
    status.className = "status ok";
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  } catch (e) {
    status.textContent = "no answer: " + e.message;
    status.className = "status err";
  }
  setTimeout(poll, POLL_MS);
}

poll();
