// trunner dashboard: live group pages from server-sent events, confirmations for actions.
// Everything from Redis is put into the page as text (textContent), never as HTML.
"use strict";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function when(seconds) {
  if (!seconds) return "-";
  const d = new Date(seconds * 1000);
  return isNaN(d.getTime()) ? "?" : d.toISOString().replace("T", " ").slice(0, 19);
}

function ms(seconds) {
  return seconds === null || seconds === undefined ? "-" : (seconds * 1000).toFixed(1);
}

function fill(tbody, rows, columns, emptyText) {
  const fresh = document.createDocumentFragment();
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of columns(row)) {
      if (cell instanceof Node) {
        const td = el("td");
        td.appendChild(cell);
        tr.appendChild(td);
      } else {
        tr.appendChild(el("td", cell));
      }
    }
    fresh.appendChild(tr);
  }
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", emptyText, "note");
    td.colSpan = 8;
    tr.appendChild(td);
    fresh.appendChild(tr);
  }
  tbody.replaceChildren(fresh);
}

// A small form posting one action (the server checks the CSRF token and the origin).
function actionForm(root, action, fields, label, question) {
  const form = el("form", null, "act");
  form.method = "post";
  form.action = root.dataset.act + action;
  const all = Object.assign({ csrf: root.dataset.csrf }, fields);
  for (const [name, value] of Object.entries(all)) {
    const input = el("input");
    input.type = "hidden";
    input.name = name;
    input.value = value;
    form.appendChild(input);
  }
  const button = el("button", label);
  button.type = "submit";
  button.dataset.confirm = question;
  form.appendChild(button);
  return form;
}

function chart(svg, times, values) {
  const NS = "http://www.w3.org/2000/svg";
  const width = 600, height = 140, pad = 4;
  const points = [];
  const end = times.length ? times[times.length - 1] : 0;
  const span = 300;
  let top = 0;
  for (const v of values) if (v !== null && v > top) top = v;
  top = top > 0 ? top * 1.15 : 1;
  for (let i = 0; i < times.length; i++) {
    if (values[i] === null) continue;
    const x = width - ((end - times[i]) / span) * width;
    const y = height - pad - (values[i] / top) * (height - 2 * pad);
    points.push(x.toFixed(1) + "," + y.toFixed(1));
  }
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", points.join(" "));
  line.setAttribute("class", "line");
  const label = document.createElementNS(NS, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "14");
  label.setAttribute("class", "axis");
  label.textContent = "max " + (top / 1.15).toPrecision(3) + " · last 5 min";
  svg.replaceChildren(line, label);
}

function render(root, s) {
  const canAct = root.dataset.readOnly !== "yes";
  const counts = s.counts || {};
  for (const key of ["queue", "pending", "delayed", "dead", "quarantined", "workflows"]) {
    const node = document.getElementById("count-" + key);
    if (node) node.textContent = key in counts ? String(counts[key]) : "?";
  }
  const lanes = document.getElementById("lanes");
  if (lanes && s.lanes) {
    const entries = Object.entries(s.lanes);
    lanes.hidden = entries.length < 2;
    lanes.textContent = "by lane: " + entries.map(([lane, n]) => lane + " " + n).join(", ");
  }
  const paused = document.getElementById("paused");
  if (paused && "paused_since" in s) {
    paused.hidden = !s.paused_since;
    paused.title = s.paused_since ? "paused since " + when(s.paused_since) : "";
  }
  const stale = document.getElementById("dead-stale");
  if (stale && "dead" in counts) stale.hidden = stale.dataset.shown === String(counts.dead);
  const errors = document.getElementById("errors");
  errors.replaceChildren(
    ...Object.entries(s.errors || {}).map(([part, why]) => el("li", part + " unreadable: " + why))
  );
  fill(document.getElementById("instances"), s.instances || [], (i) => [
    i.id, i.host, i.pid, i.capacity, i.in_flight, when(i.last_seen), i.leader ? "leader" : "",
  ], "no live instance");
  const timings = s.timings || { tasks: [] };
  const windowNote = document.getElementById("window");
  windowNote.textContent = s.timings
    ? "(window of " + Math.round(timings.window) + " s, " + timings.throughput.toFixed(1) + " tasks/s)"
    : "";
  fill(document.getElementById("timings"), timings.tasks, (t) => [
    t.name, t.count, ms(t.average), ms(t.p50), ms(t.p95), ms(t.p99),
  ], "no task finished in this window");
  fill(document.getElementById("running"), s.running || [], (r) => [
    r.id, r.task || "?", r.instance || "-", r.attempt || "-",
    r.progress === null || r.progress === undefined
      ? "-" : Math.round(r.progress * 100) + "%" + (r.message ? " " + r.message : ""),
    when(r.started_at),
    canAct ? actionForm(root, "cancel", { id: r.id }, "Cancel", "Cancel running task " + r.id + "?") : "",
  ], "nothing running");
  fill(document.getElementById("delayed"), s.delayed_tasks || [], (d) => [
    d.id, d.task || "(" + d.problem + ")", when(d.due_at), d.attempt || "-",
    canAct ? actionForm(root, "cancel", { id: d.id }, "Cancel", "Cancel delayed task " + d.id + "?") : "",
  ], "no delayed task");
  fill(document.getElementById("workflows"), s.workflows || [], (w) => {
    const link = el("a", w.id);
    link.href = root.dataset.workflows + encodeURIComponent(w.id);
    if (w.problem) return [link, "unreadable: " + w.problem, "?", "?", "?", "?", when(w.dispatched_at), ""];
    return [
      link, w.name || "", w.state, w.ended + "/" + w.steps, w.live, w.failed, when(w.dispatched_at),
      canAct ? actionForm(root, "cancel-workflow", { id: w.id }, "Cancel", "Cancel workflow " + w.id + "?") : "",
    ];
  }, "no live workflow");
  const oldest = document.getElementById("workflows-oldest");
  if (oldest) {
    const at = s.oldest_workflow_at;
    oldest.textContent = at ? "the oldest dispatched " + Math.max(0, Math.round((s.at || at) - at)) + " s ago" : "";
  }
  const series = s.series || { t: [], throughput: [], pickup: [] };
  chart(document.getElementById("chart-throughput"), series.t, series.throughput);
  chart(document.getElementById("chart-pickup"), series.t, series.pickup);
  const last = (list) => { for (let i = list.length - 1; i >= 0; i--) if (list[i] !== null) return list[i]; return null; };
  const tp = last(series.throughput), pk = last(series.pickup);
  document.getElementById("now-throughput").textContent = tp === null ? "" : "now " + tp.toFixed(1);
  document.getElementById("now-pickup").textContent = pk === null ? "(nothing waits)" : "now " + pk.toFixed(2);
  root.dataset.version = String(s.version);
}

function watch(root) {
  const live = document.getElementById("live");
  const source = new EventSource(root.dataset.events);
  source.addEventListener("snapshot", (event) => {
    let snapshot;
    try {
      snapshot = JSON.parse(event.data);
    } catch (e) {
      live.textContent = "unreadable update";
      return;
    }
    render(root, snapshot);
    live.textContent = "live";
    live.className = "live on";
  });
  source.addEventListener("error", () => {
    live.textContent = "reconnecting";
    live.className = "live off";
  });
}

document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = (button && button.dataset.confirm) || (event.target.dataset && event.target.dataset.confirm);
  if (question && !window.confirm(question)) event.preventDefault();
});

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("group");
  if (root) watch(root);
});
