// agentgym view: the page. Everything a record holds is shown as text (textContent, never HTML), and the page
// talks only to the server that sent it (the Content-Security-Policy says so too).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const CHART_KEYS = ["success_rate", "eval_success_rate", "reward_mean", "valid_action_frac", "entropy", "grad_norm",
  "explained_variance", "turn_signal_auc", "kl", "zero_std_group_frac"];
// gen: bumped by every source pick, so an answer that arrives after the user picked another source is dropped
const state = { sources: [], source: null, cursors: [0], cursor: 0, next: null, filters: {}, compare: "", gen: 0 };

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") node.className = v;
    else if (k === "title") node.title = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value, null, 1);
}

async function api(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) query.set(k, v);
  const resp = await fetch(`${path}?${query}`, { credentials: "same-origin" });
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
  return body;
}

function status(message, isError) {
  const s = document.getElementById("status");
  s.textContent = message;
  s.className = isError ? "error" : "";
}

// -- sources ------------------------------------------------------------------------------------------------------
async function loadSources() {
  const { sources } = await api("api/sources");
  state.sources = sources;
  const nav = document.getElementById("sources");
  nav.replaceChildren(...sources.map((s) => el("button", {
    type: "button", "data-source": s.id, title: s.label,
    onclick: () => selectSource(s.id),
  }, s.label, el("br"), el("span", { class: "kind" }, `${s.kind}${s.run !== null ? " · run " + s.run : ""}`))));
  const compare = document.getElementById("compare");
  compare.replaceChildren(el("option", { value: "" }, "nothing"),
    ...sources.map((s) => el("option", { value: s.id }, s.label)));
  const first = sources.find((s) => s.kind === "metrics") || sources.find((s) => s.kind !== "records") || sources[0];
  if (first) await selectSource(first.id);
}

function sourceById(id) { return state.sources.find((s) => s.id === id); }

// "compare with" a source of episodes: a column of its result on the same task, and the two episodes side by side
// (a metrics file instead overlays its curves on the plots)
function comparesEpisodes() {
  const other = sourceById(state.compare);
  return Boolean(other) && other.kind !== "metrics";
}

async function selectSource(id, filters) {
  const gen = ++state.gen;
  state.source = id;
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("on", b.dataset.source === id);
  const src = sourceById(id);
  const metrics = document.getElementById("metrics");
  document.getElementById("detail").replaceChildren();
  metrics.hidden = src.kind !== "metrics";
  if (src.kind === "metrics") {
    await drawMetrics(src);
    if (gen !== state.gen) return;
    const rollouts = state.sources.find((s) => s.kind === "rollouts" && s.run === src.run);
    if (!rollouts) {
      document.querySelector("#episodes tbody").replaceChildren();
      document.getElementById("pageinfo").textContent = "this run logged no episodes (log_rollouts_every = 0)";
      return;
    }
    state.source = rollouts.id;
  }
  setFilters(filters || {});
  await loadPage(0, true);
}

// -- filters and paging -------------------------------------------------------------------------------------------
function readFilters() {
  const form = document.getElementById("filters");
  const out = {};
  for (const input of form.querySelectorAll("input, select")) if (input.value !== "") out[input.name] = input.value;
  return out;
}

function setFilters(filters) {
  const form = document.getElementById("filters");
  for (const input of form.querySelectorAll("input, select")) input.value = filters[input.name] ?? "";
  state.filters = { ...filters };
}

async function loadPage(cursor, fresh) {
  if (fresh) state.cursors = [cursor];
  state.cursor = cursor;
  status("loading…");
  const gen = state.gen, source = state.source;
  let page;
  try {
    page = await api("api/page", { source, cursor, n: 50, ...state.filters });
  } catch (e) {
    status(e.message, true);
    return;
  }
  if (gen !== state.gen || source !== state.source) return;  // the user moved on
  state.next = page.next;
  renderRows(page.items);
  const ix = page.index;
  const indexed = ix.done ? `${ix.lines} lines` : `indexing: ${ix.lines} lines so far (${Math.round(100 * ix.scanned / Math.max(ix.size, 1))}%)`;
  document.getElementById("pageinfo").textContent =
    `${page.items.length} shown · ${indexed}${page.eof ? " · end of file" : ""}`;
  document.getElementById("prev").disabled = state.cursors.length < 2;
  document.getElementById("next").disabled = page.next === null;
  status(sourceById(state.source)?.label || "");
}

function cell(value, cls) { return el("td", cls ? { class: cls } : {}, value === null || value === undefined ? "" : String(value)); }

function renderRows(items) {
  const body = document.querySelector("#episodes tbody");
  const comparing = comparesEpisodes();
  document.getElementById("cmphead").hidden = !comparing;
  body.replaceChildren(...items.map((item) => {
    const ok = item.success === null ? "" : item.success ? "yes" : "no";
    const row = el("tr", { "data-offset": String(item.offset), onclick: () => openRecord(state.source, item, row) },
      cell(item.line ?? "…"), cell(item.env), cell(item.task), cell(item.agent), cell(item.group),
      cell(item.iteration), cell(ok, ok), cell(item.reward === null ? "" : Number(item.reward).toFixed(3)),
      cell(item.turns));
    if (item.error) row.append(el("td", { class: "error" }, item.error));
    if (comparing) row.append(el("td", { class: "cmp" }, "…"));
    return row;
  }));
  if (comparing) for (const [i, item] of items.entries()) fillCompareCell(body.children[i].querySelector(".cmp"), item);
}

async function fillCompareCell(td, item) {
  if (!item.task) { td.textContent = ""; return; }
  const { item: other, complete } = await api("api/match", { source: state.compare, task: item.task, seed: item.seed ?? "" });
  td.textContent = other === null ? (complete ? "not run" : "not in its first 64 MB") : other.success === null ? "?" : other.success ? "yes" : "no";
  td.className = `cmp ${other && other.success !== null ? (other.success ? "yes" : "no") : ""}`;
}

// -- one record -----------------------------------------------------------------------------------------------------
async function openRecord(source, item, row) {
  for (const r of document.querySelectorAll("#episodes tbody tr")) r.classList.toggle("on", r === row);
  const detail = document.getElementById("detail");
  detail.replaceChildren(el("p", {}, "loading…"));
  try {
    const views = [await recordView(source, item.offset)];
    if (comparesEpisodes() && item.task) {
      const { item: other } = await api("api/match", { source: state.compare, task: item.task, seed: item.seed ?? "" });
      views.push(other ? await recordView(state.compare, other.offset) : el("div", { class: "episode" }, "not run on the other side"));
    }
    const buttons = el("div", { class: "buttons" },
      el("button", { type: "button", id: "siblings", onclick: () => showSiblings(source, item.offset) }, "Show its group side by side"),
      el("button", { type: "button", onclick: () => showFull(source, item.offset) }, "Load long texts whole"));
    detail.replaceChildren(buttons, views.length > 1 ? el("div", { class: "side" }, ...views) : views[0]);
  } catch (e) {
    detail.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

async function showFull(source, offset) {
  const detail = document.getElementById("detail");
  detail.replaceChildren(await recordView(source, offset, true));
}

async function showSiblings(source, offset) {
  const detail = document.getElementById("detail");
  const { group, items } = await api("api/siblings", { source, offset });
  const views = [];
  for (const item of items.slice(0, 16)) views.push(await recordView(source, item.offset));
  detail.replaceChildren(el("h2", {}, `group ${group ?? "(none)"}: ${items.length} episodes`), el("div", { class: "side", id: "group" }, ...views));
}

async function recordView(source, offset, full) {
  const { record, altered, clipped, line } = await api("api/record", { source, offset, full: full ? 1 : "" });
  const r = record;
  const ok = typeof r.success === "boolean" ? r.success : successOf(r);
  const box = el("div", { class: "episode", "data-offset": String(offset) },
    el("h2", {}, `${r.env_id ?? ""} · task ${r.task_id ?? "?"}${line !== null ? " · line " + line : ""}`),
    el("div", { class: "meta" }, [
      r.agent ? `agent ${r.agent}` : null, r.seed !== undefined ? `seed ${r.seed}` : null,
      r.group_id !== undefined && r.group_id !== null ? `group ${r.group_id}` : null,
      r.iteration !== undefined ? `iteration ${r.iteration}` : null,
      ok === null ? null : ok ? "success" : "failure",
      r.return !== undefined ? `return ${fmt(r.return)}` : null,
    ].filter(Boolean).join(" · ")));
  if (altered) box.append(el("p", { class: "error" }, `checksum: ${altered}`));
  if (clipped) box.append(el("p", { class: "meta" }, `${clipped} long texts cut (Load long texts whole shows them)`));
  if (r.error) box.append(el("p", { class: "error" }, `error: ${text(r.error)}`));
  const first = r.initial_observation;
  if (Array.isArray(first) && first.length) box.append(el("div", { class: "turn" }, el("h3", {}, "reset"), messages(first)));
  const turns = Array.isArray(r.turns) ? r.turns : [];
  turns.forEach((t, i) => box.append(turnView(t, i)));
  const rest = Object.fromEntries(Object.entries(r).filter(([k]) => !["turns", "initial_observation"].includes(k)));
  box.append(el("details", {}, el("summary", {}, "all fields"), el("pre", {}, text(rest))));
  return box;
}

function successOf(r) {
  const turns = Array.isArray(r.turns) ? r.turns : [];
  const info = turns.length ? turns[turns.length - 1].info : null;
  return info && typeof info.success === "boolean" ? info.success : null;
}

function fmt(x) { return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(4)) : text(x); }

function messages(list) {
  return el("div", {}, ...list.map((m) => el("div", { class: "msg" },
    el("span", { class: "role" }, text(m && m.role)), el("pre", {}, text(m && typeof m === "object" ? m.content ?? m : m)))));
}

// The <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks of an action, read leniently (an unreadable one
// is left to the action's own text).
function toolCalls(action) {
  const out = [];
  for (const m of String(action ?? "").matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)) {
    try {
      const call = JSON.parse(m[1]);
      if (call && typeof call.name === "string") out.push({ name: call.name, arguments: typeof call.arguments === "object" && call.arguments ? call.arguments : {} });
    } catch (e) { /* not JSON: the action text shows it as written */ }
  }
  return out.slice(0, 20);
}

function kv(obj) {
  const rows = Object.entries(obj || {}).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, fmt(v))));
  return el("table", { class: "kv" }, el("tbody", {}, ...rows));
}

const SIGNALS = ["success", "won", "correct", "progress", "action_valid", "parse_error", "action_truncated", "answer"];

function turnView(t, i) {
  const info = (t && typeof t.info === "object" && t.info) || {};
  const box = el("div", { class: "turn", "data-turn": String(i) }, el("h3", {}, `turn ${i + 1} · reward ${fmt(t.reward)}`));
  if (Array.isArray(t.observation_before)) box.append(el("div", { class: "meta" }, "saw:"), messages(t.observation_before));
  box.append(el("div", { class: "role" }, "action"), el("pre", { class: "action" }, text(t.action)));
  const parseError = t.parse_error ?? info.parse_error;
  if (parseError) box.append(el("p", { class: "error" }, `parse error: ${text(parseError)}`));
  const valid = t.action_valid ?? info.action_valid;
  if (valid === false) box.append(el("p", { class: "error" }, "invalid action"));
  for (const call of toolCalls(t.action)) box.append(el("div", { class: "role" }, `tool call: ${call.name}`), kv(call.arguments));
  const components = t.reward_components ?? info.reward_components;
  if (components && Object.keys(components).length) box.append(el("div", { class: "role" }, "reward components"), kv(components));
  const named = t.signals && typeof t.signals === "object" ? Object.entries(t.signals) : SIGNALS.map((k) => [k, t[k] ?? info[k]]);
  const signals = Object.fromEntries(named.filter(([, v]) => v !== undefined && v !== null));
  if (t.scored_reward !== undefined) signals.scorer = t.scored_reward;
  if (Object.keys(signals).length) box.append(el("div", { class: "role" }, "verified signals"), kv(signals));
  if (Array.isArray(t.tokens) && Array.isArray(t.advantages)) {
    box.append(el("div", { class: "role" }, "advantage per token"), tokens(t.tokens, t.advantages));
    for (const [name, adv] of Object.entries(t.advantages_by || {})) {
      box.append(el("div", { class: "role" }, `advantage per token: ${name}`), tokens(t.tokens, adv));
    }
  }
  if (Array.isArray(t.observation) && t.observation.length) box.append(el("div", { class: "role" }, "env reply"), messages(t.observation));
  return box;
}

function tokens(toks, adv) {
  const finite = adv.filter((a) => typeof a === "number");
  const top = Math.max(1e-9, ...finite.map((a) => Math.abs(a)));
  return el("div", { class: "tokens" }, ...toks.map((tok, i) => {
    const a = adv[i];
    const span = el("span", { class: "tok", title: `${JSON.stringify(tok)}: ${typeof a === "number" ? a.toFixed(4) : "none"}`, "data-adv": String(a) }, text(tok));
    if (typeof a === "number" && a !== 0) span.style.backgroundColor = `rgba(var(${a > 0 ? "--pos" : "--neg"}), ${(0.12 + 0.6 * Math.abs(a) / top).toFixed(3)})`;
    return span;
  }));
}

// -- metrics ---------------------------------------------------------------------------------------------------------
async function drawMetrics(src) {
  const box = document.getElementById("metrics");
  const { series } = await api("api/metrics", { source: src.id });
  const other = sourceById(state.compare);
  const theirs = other && other.kind === "metrics" && other.id !== src.id ? (await api("api/metrics", { source: other.id })).series : null;
  const keys = CHART_KEYS.filter((k) => series[k] && series[k].some((v) => v !== null));
  box.replaceChildren(...keys.map((k) => chart(k, points(series, k), theirs ? points(theirs, k) : [], src)));
  if (theirs) box.prepend(el("p", { class: "meta legend" }, `blue: ${src.label} · orange: ${other.label}`));
  if (!keys.length) box.replaceChildren(el("p", { class: "meta" }, "no diagnostics to plot"));
}

function points(series, key) {
  const xs = series.iteration || [], ys = series[key] || [];
  return xs.map((x, i) => [x, ys[i]]).filter(([x, y]) => typeof x === "number" && typeof y === "number");
}

function chart(name, pts, other, src) {
  const W = 260, H = 120, P = 24;
  const wrap = el("div", { class: "chart", "data-metric": name }, el("h4", {}, name));
  if (!pts.length) return wrap;
  const all = pts.concat(other);
  const [x0, x1] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
  const [y0, y1] = [Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1]))];
  const sx = (x) => P + (W - 2 * P) * (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0));
  const sy = (y) => H - P + (2 * P - H) * (y1 === y0 ? 0.5 : (y - y0) / (y1 - y0));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("role", "img");
  const line = (a, b, c, d) => { const l = document.createElementNS(SVG, "line"); l.setAttribute("x1", a); l.setAttribute("y1", b); l.setAttribute("x2", c); l.setAttribute("y2", d); l.setAttribute("class", "axis"); return l; };
  svg.append(line(P, H - P, W - P, H - P), line(P, P, P, H - P));
  const path = document.createElementNS(SVG, "polyline");
  path.setAttribute("points", pts.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "));
  path.setAttribute("class", "curve");
  svg.append(path);
  if (other.length) {
    const theirs = document.createElementNS(SVG, "polyline");
    theirs.setAttribute("points", other.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "));
    theirs.setAttribute("class", "curve other");
    svg.append(theirs);
  }
  for (const [x, y] of pts) {
    const c = document.createElementNS(SVG, "circle");
    c.setAttribute("cx", sx(x)); c.setAttribute("cy", sy(y)); c.setAttribute("r", 3); c.setAttribute("fill", "#0969da");
    c.setAttribute("data-iteration", x);
    const t = document.createElementNS(SVG, "title"); t.textContent = `iteration ${x}: ${y}`; c.append(t);
    c.addEventListener("click", () => openIteration(src, x));
    svg.append(c);
  }
  const label = (s, xx, yy) => { const t = document.createElementNS(SVG, "text"); t.textContent = s; t.setAttribute("x", xx); t.setAttribute("y", yy); t.setAttribute("font-size", "10"); return t; };
  const digits = y1 > y0 ? Math.min(6, Math.max(0, Math.ceil(-Math.log10(y1 - y0)) + 1)) : 2;
  svg.append(label(y1.toFixed(digits), 2, P - 8), label(y0.toFixed(digits), 2, H - P + 12), label(String(x0), P, H - 2),
    label(String(x1), W - P - 10, H - 2));
  wrap.append(svg);
  return wrap;
}

async function openIteration(src, iteration) {
  const rollouts = state.sources.find((s) => s.kind === "rollouts" && s.run === src.run);
  if (!rollouts) { status("this run logged no episodes", true); return; }
  state.source = rollouts.id;
  setFilters({ iteration: String(iteration) });
  await loadPage(0, true);
}

// -- playing by hand ------------------------------------------------------------------------------------------------
const play = { session: null };

async function post(path, body) {
  const resp = await fetch(path, { method: "POST", credentials: "same-origin",
    headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const answer = await resp.json();
  if (!resp.ok) throw new Error(answer.error || `HTTP ${resp.status}`);
  return answer;
}

function showPlay(on) {
  document.getElementById("play").hidden = !on;
  document.getElementById("layout").hidden = on;
}

function renderPlay(view, note) {
  const stateLine = [`${view.env_id}`, `seed ${view.seed}`, view.task_id ? `task ${view.task_id}` : null,
    `turn ${view.turn} of ${view.max_turns}`, `return ${fmt(view.total_reward)}`,
    view.done ? (view.success ? "success" : "episode over") : null, note || null].filter(Boolean).join(" · ");
  document.getElementById("playstate").textContent = stateLine;
  const log = document.getElementById("playlog");
  const first = view.messages.slice(0, view.messages.length - view.turns.reduce((n, t) => n + 1 + (t.observation || []).length, 0));
  const parts = [el("div", { class: "turn" }, el("h3", {}, "reset"), messages(first))];
  view.turns.forEach((t, i) => parts.push(turnView(t, i)));
  if (view.error) parts.push(el("p", { class: "error", id: "playerror" }, view.error));
  if (view.message) parts.push(el("p", { class: "meta" }, view.message));
  log.replaceChildren(...parts);
  document.getElementById("playinput").hidden = false;
  document.getElementById("playsend").disabled = view.done;
  document.getElementById("playundo").disabled = !view.can_undo;
}

async function playCall(path, body, note) {
  try {
    const answer = await post(path, { session: play.session, ...body });
    renderPlay(answer.view, note ? note(answer) : null);
    return answer;
  } catch (e) {
    status(e.message, true);
    return null;
  }
}

async function setupPlay() {
  let envs;
  try { ({ envs } = await api("api/play/envs")); } catch (e) { return; }  // this server does not offer playing
  const toggle = document.getElementById("playtoggle");
  toggle.hidden = false;
  toggle.addEventListener("click", () => showPlay(true));
  document.getElementById("playback").addEventListener("click", () => showPlay(false));
  document.getElementById("playenv").replaceChildren(...envs.map((e) => el("option", { value: e }, e)));
  document.getElementById("playstart").addEventListener("click", async () => {
    if (play.session) await post("api/play/close", { session: play.session }).catch(() => null);
    const seed = document.getElementById("playseed").value;
    try {
      const answer = await post("api/play/new", { env_id: document.getElementById("playenv").value, seed: seed === "" ? null : Number(seed) });
      play.session = answer.session;
      renderPlay(answer.view);
    } catch (e) { status(e.message, true); }
  });
  document.getElementById("playsend").addEventListener("click", async () => {
    const box = document.getElementById("playaction");
    if (await playCall("api/play/step", { action: box.value })) box.value = "";
  });
  document.getElementById("playundo").addEventListener("click", () => playCall("api/play/undo", {}));
  document.getElementById("playreset").addEventListener("click", () => playCall("api/play/reset", { seed: document.getElementById("playseed").value === "" ? null : Number(document.getElementById("playseed").value) }));
  document.getElementById("playsave").addEventListener("click", () => playCall("api/play/save", {}, (a) => `saved to ${a.saved.path}`));
}

// -- wiring -----------------------------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("filters").addEventListener("submit", (e) => { e.preventDefault(); state.filters = readFilters(); loadPage(0, true); });
  document.getElementById("clear").addEventListener("click", () => { setFilters({}); loadPage(0, true); });
  document.getElementById("first").addEventListener("click", () => loadPage(0, true));
  document.getElementById("next").addEventListener("click", () => { if (state.next !== null) { state.cursors.push(state.next); loadPage(state.next); } });
  document.getElementById("prev").addEventListener("click", () => { if (state.cursors.length > 1) { state.cursors.pop(); loadPage(state.cursors[state.cursors.length - 1]); } });
  document.getElementById("go").addEventListener("click", async () => {
    try {
      const { cursor } = await api("api/line", { source: state.source, line: document.getElementById("jump").value });
      state.cursors.push(cursor);
      await loadPage(cursor);
    } catch (e) { status(e.message, true); }
  });
  document.getElementById("compare").addEventListener("change", async (e) => {
    state.compare = e.target.value;
    const shown = sourceById(state.source);
    const metrics = state.sources.find((s) => s.kind === "metrics" && shown && s.run === shown.run && s.run !== null);
    if (!document.getElementById("metrics").hidden && metrics) await drawMetrics(metrics);
    if (state.source) await loadPage(state.cursor);
  });
  loadSources().catch((e) => status(e.message, true));
  setupPlay();
});
