// etcdlock ui: the page's script. Plain JavaScript, no build step, nothing
// fetched from elsewhere. Every string from etcd goes in as text, never as
// HTML.
"use strict";

const allowBreak = document.body.dataset.allowBreak === "true";
const state = { offset: 0, limit: 50, filter: "", matched: 0, loading: false, again: false, sharded: false };
const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function secs(s) {
  if (s === undefined || s === null) return "";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + Math.floor(s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function showError(msg) {
  const e = $("error");
  e.textContent = msg || "";
  e.hidden = !msg;
}

// kindText names a lock's kind from its first entry.
function kindText(lock) {
  const e = lock.holder || lock.waiters[0];
  if (!e) return "";
  if (e.kind === "semaphore" && e.size) return "semaphore " + e.size;
  if (e.kind === "rwmutex") return "read-write";
  return e.kind;
}

function entry(lock, e, holder) {
  const span = el("span", "entry " + (holder ? "holder" : "waiter"));
  span.dataset.token = e.token;
  span.appendChild(el("span", "who", e.identity || "(no identity)"));
  span.appendChild(el("span", "tok", " #" + e.token));
  if (e.mode) span.appendChild(el("span", "tok", " " + e.mode));
  if (e.value) span.appendChild(el("span", "tok", " " + JSON.stringify(e.value)));
  if (holder && allowBreak) {
    const b = el("button", "break", "break");
    b.type = "button";
    b.addEventListener("click", () => breakGrant(lock.name, e));
    span.appendChild(b);
  }
  let meta = "lease " + e.lease;
  if (e.lease_ttl_left !== undefined) meta += e.lease_ttl_left >= 0 ? " (" + e.lease_ttl_left + "s left)" : " (gone)";
  if (holder && e.held_seconds !== undefined) meta += " · held " + secs(e.held_seconds);
  if (e.in_queue_seconds !== undefined) meta += " · " + (holder ? "in queue " : "waiting ") + secs(e.in_queue_seconds);
  span.appendChild(el("span", "meta", meta));
  return span;
}

function row(lock) {
  const tr = el("tr");
  tr.dataset.name = lock.name;
  tr.appendChild(el("td", "name", lock.name));
  if (state.sharded) tr.appendChild(el("td", "cluster", lock.cluster ? lock.cluster + " · slot " + lock.slot : ""));
  tr.appendChild(el("td", "kind", kindText(lock)));
  const election = lock.holder && lock.holder.kind === "election";
  const h = el("td", "holders");
  if (lock.holders.length === 0) h.appendChild(el("span", "free", "free"));
  if (election && lock.holder) h.appendChild(el("span", "meta", "leader: "));
  for (const e of lock.holders) h.appendChild(entry(lock, e, true));
  const w = el("td", "waiters");
  if (election && lock.waiters.length) w.appendChild(el("span", "meta", "candidates: "));
  for (const e of lock.waiters) w.appendChild(entry(lock, e, false));
  tr.appendChild(h);
  tr.appendChild(w);
  return tr;
}

function render(data) {
  showError(data.error || "");
  state.sharded = !!data.sharded;
  $("cluster-col").hidden = !state.sharded;
  const body = $("locks").tBodies[0];
  body.replaceChildren(...data.locks.map(row));
  state.matched = data.matched;
  const first = data.matched ? data.offset + 1 : 0;
  const last = data.offset + data.locks.length;
  $("count").textContent = first + "–" + last + " of " + data.matched +
    (state.filter ? " matching (" + data.names + " in all)" : " names") + " · revision " + data.revision;
  $("prev").disabled = data.offset === 0;
  $("next").disabled = last >= data.matched;
  const empty = $("empty");
  empty.hidden = data.locks.length > 0;
  if (!data.loaded) empty.textContent = "Loading…";
  else if (data.names === 0) empty.textContent = "No locks under prefix \"" + data.prefix + "\" (etcd keys " + data.key_prefix + ").";
  else empty.textContent = "No name contains \"" + state.filter + "\".";
}

async function load() {
  if (state.loading) { state.again = true; return; }
  state.loading = true;
  try {
    const q = new URLSearchParams({ offset: state.offset, limit: state.limit, filter: state.filter });
    const resp = await fetch("/api/locks?" + q);
    const data = await resp.json();
    if (!resp.ok) showError(data.error || resp.statusText);
    else render(data);
  } catch (err) {
    showError("cannot reach etcdlock ui: " + err);
  } finally {
    state.loading = false;
    if (state.again) { state.again = false; load(); }
  }
}

let loadTimer = null;
function scheduleLoad() {
  if (loadTimer === null) loadTimer = setTimeout(() => { loadTimer = null; load(); }, 150);
}

function addEvents(events) {
  const ol = $("timeline");
  for (const ev of events) {
    const li = el("li", "k-" + ev.kind);
    li.dataset.kind = ev.kind;
    li.dataset.token = ev.token;
    const t = new Date(ev.at).toLocaleTimeString();
    if (ev.kind === "moving" || ev.kind === "moved") {
      li.textContent = t + " " + ev.name + " " + (ev.detail || ev.kind);
    } else {
      li.textContent = t + " " + ev.kind + " " + ev.name + " #" + ev.token + " " + (ev.identity || "") +
        (ev.cluster ? " @" + ev.cluster : "");
    }
    ol.prepend(li);
  }
  while (ol.children.length > 200) ol.lastChild.remove();
}

async function loadTimeline() {
  try {
    const resp = await fetch("/api/timeline");
    const data = await resp.json();
    $("timeline").replaceChildren();
    addEvents(data.events || []);
  } catch (err) { /* the stream's error shows */ }
}

function polyline(values, most, cls) {
  const n = values.length;
  const pts = values.map((v, i) => (i * 300 / (n - 1)).toFixed(1) + "," + (88 - (v / most) * 84).toFixed(1));
  const p = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  p.setAttribute("points", pts.join(" "));
  p.setAttribute("fill", "none");
  p.setAttribute("stroke", cls === "g" ? "#1a7f37" : "#9a6700");
  p.setAttribute("stroke-width", "1");
  p.setAttribute("vector-effect", "non-scaling-stroke");
  return p;
}

async function loadChart() {
  try {
    const resp = await fetch("/api/chart");
    const c = await resp.json();
    const most = Math.max(1, ...c.grants, ...c.waiters);
    $("chart").replaceChildren(polyline(c.grants, most, "g"), polyline(c.waiters, most, "w"));
    $("ymax").textContent = most;
    const n = c.grants.length;
    $("gnow").textContent = "(now " + c.grants[n - 2] + ")";
    $("wnow").textContent = "(now " + c.waiters[n - 1] + ")";
  } catch (err) { /* the stream's error shows */ }
}

async function breakGrant(name, e) {
  if (!confirm("Break the grant of \"" + name + "\" held by " + e.identity + " (token " + e.token + ", lease " + e.lease +
    ")?\nIts holder loses the lock and the next waiter is granted.")) return;
  try {
    const resp = await fetch("/api/break", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: name, token: e.token }),
    });
    const data = await resp.json();
    showError(resp.ok ? "" : "break: " + data.error);
  } catch (err) {
    showError("break: " + err);
  }
  scheduleLoad();
}

function connect() {
  const es = new EventSource("/api/stream");
  es.onopen = () => { $("live").textContent = "live"; $("live").className = "live on"; load(); loadTimeline(); };
  es.onerror = () => { $("live").textContent = "reconnecting…"; $("live").className = "live"; };
  es.addEventListener("change", (m) => {
    const c = JSON.parse(m.data);
    if (c.error) showError(c.error);
    scheduleLoad();
  });
  es.addEventListener("timeline", (m) => addEvents(JSON.parse(m.data).events || []));
  es.addEventListener("resync", () => { load(); loadTimeline(); });
}

let filterTimer = null;
$("filter").addEventListener("input", () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => { state.filter = $("filter").value; state.offset = 0; load(); }, 150);
});
$("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); load(); });
$("next").addEventListener("click", () => { if (state.offset + state.limit < state.matched) { state.offset += state.limit; load(); } });

load();
loadChart();
setInterval(loadChart, 2000);
connect();
