// specroute console: fills the server-rendered page from the admin API and keeps it fresh.
// Plain browser JavaScript, no build step; charts by uPlot (uPlot.iife.min.js, see NOTICE).
"use strict";

const POLL_MS = 2000;

// -- helpers ---------------------------------------------------------------------------------
async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { raw: text }; }
  if (!response.ok) {
    const error = new Error((body && body.error && body.error.message) || `HTTP ${response.status}`);
    error.body = body;
    error.status = response.status;
    throw error;
  }
  return body;
}

// Builds an element; strings become text nodes (never HTML), so no value can inject markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fill(id, ...children) {
  const node = document.getElementById(id);
  if (node) node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

const dash = "–";
function num(value, digits = 0) {
  return value === null || value === undefined ? dash : Number(value).toFixed(digits);
}
function pct(value) {
  return value === null || value === undefined ? dash : `${(100 * value).toFixed(1)}%`;
}
function ms(seconds) {
  if (seconds === null || seconds === undefined) return dash;
  const v = 1000 * seconds;
  return v < 10 ? `${v.toFixed(2)} ms` : `${v.toFixed(0)} ms`;
}
function when(ts) {
  return ts ? new Date(ts * 1000).toLocaleTimeString() : dash;
}
function badge(text, kind) {
  return el("span", { class: `badge ${kind}` }, text);
}

// columns: [[heading, row => cell, optional class]]
function table(columns, rows, empty = "nothing yet") {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  return el(
    "table",
    {},
    el("thead", {}, el("tr", {}, columns.map(([head, , cls]) => el("th", { class: cls }, head)))),
    el("tbody", {}, rows.map((row) =>
      el("tr", {}, columns.map(([, cell, cls]) => el("td", { class: cls }, cell(row)))))),
  );
}

function kv(pairs) {
  return el("dl", {}, pairs.flatMap(([key, value]) => [el("dt", {}, key), el("dd", {}, value)]));
}

function setStatus(text, bad = false) {
  const node = document.getElementById("status");
  node.textContent = text;
  node.className = bad ? "status bad" : "status";
}

// uPlot charts keep their instance between polls (a re-created chart would flicker).
const charts = {};
function chart(id, opts, data) {
  const host = document.getElementById(id);
  const width = Math.max(host.clientWidth - 8, 300);
  const existing = charts[id];
  if (existing && existing.series.length === opts.series.length) {
    if (Math.abs(existing.width - width) > 4) existing.setSize({ width, height: existing.height });
    existing.setData(data);
    if (opts.markers) existing.markers = opts.markers;
    existing.redraw();
    return existing;
  }
  if (existing) existing.destroy();
  host.replaceChildren();
  const plot = new uPlot({ width, height: opts.height || 220, ...opts }, data, host);
  plot.markers = opts.markers;
  charts[id] = plot;
  return plot;
}

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563"];

// Vertical lines (current load, break-even) drawn on top of a chart, read from plot.markers.
const markerPlugin = {
  hooks: {
    draw: [(u) => {
      for (const marker of u.markers || []) {
        const x = u.valToPos(marker.x, "x", true);
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = marker.color;
        ctx.setLineDash(marker.dash || []);
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillStyle = marker.color;
        ctx.font = `${12 * devicePixelRatio}px system-ui, sans-serif`;
        ctx.fillText(marker.label, x + 4, u.bbox.top + 14 * devicePixelRatio * (marker.row || 1));
        ctx.restore();
      }
    }],
  },
};

// -- fleet -----------------------------------------------------------------------------------
function health(b) {
  if (b.quarantined) return badge(`quarantined: ${b.quarantined}`, "bad");
  if (!b.healthy) return badge(`ejected${b.last_error ? `: ${b.last_error}` : ""}`, "bad");
  return badge("healthy", "good");
}

function speculation(b) {
  const s = b.speculation || {};
  if (!s.method || s.method === "none") return "none";
  return `${s.method} k=${s.k}${b.draft_version ? ` (${b.draft_version})` : ""}`;
}

function renderBackends(backends) {
  fill("backends", table([
    ["backend", (b) => el("b", {}, b.name)],
    ["pool", (b) => b.pool],
    ["speculation", speculation],
    ["health", health],
    ["in flight", (b) => num(b.inflight), "n"],
    ["running", (b) => num(b.running), "n"],
    ["queue", (b) => num(b.waiting), "n"],
    ["KV use", (b) => pct(b.kv_usage), "n"],
    ["acceptance (window)", (b) => pct(b.window_acceptance), "n"],
  ], backends, "no backends configured"));
}

function renderAcceptance(rows) {
  const classes = [...new Set(rows.map((r) => r.class))].sort();
  const backends = [...new Set(rows.map((r) => r.backend))].sort();
  const cell = (backend, cls) => {
    const row = rows.find((r) => r.backend === backend && r.class === cls);
    if (!row) return dash;
    return el("span", { class: row.below_floor ? "bad" : "" }, pct(row.rate),
      el("small", {}, ` n=${row.samples}`));
  };
  fill("acceptance", table(
    [["backend", (b) => el("b", {}, b)], ...classes.map((c) => [c, (b) => cell(b, c), "n"])],
    backends, "no speculative request measured yet"));
}

// A fitted line in milliseconds; where it would go below zero (extrapolated far from the
// loads it was measured at) it is not drawn.
function lineAt(line, x) {
  const v = line ? 1000 * (line.intercept + line.slope * x) : null;
  return v === null || v < 0 ? null : v;
}

function renderBreakEven(pools) {
  const host = document.getElementById("breakeven");
  if (!pools.length) {
    host.replaceChildren(el("p", { class: "empty" }, "no speculative pool"));
    return;
  }
  // Every card first, so each chart is sized to its own column of the grid.
  for (const pool of pools) {
    if (!document.getElementById(`card-${pool.pool}`)) {
      host.querySelector(".empty")?.remove();
      host.append(el("div", { class: "card", id: `card-${pool.pool}` },
        el("h3", {}, pool.pool), el("div", { class: "kv", id: `be-${pool.pool}-kv` }),
        el("div", { class: "chart", id: `be-${pool.pool}` })));
    }
  }
  for (const pool of pools) {
    const id = `be-${pool.pool}`;
    const above = pool.concurrency >= pool.threshold;
    fill(`${id}-kv`, kv([
      ["break-even", `${num(pool.threshold, 1)} (${pool.mode})`],
      ["configured", num(pool.configured, 0)],
      ["learned", pool.learned === null
        ? `not yet (${pool.samples} speculative, ${pool.reference_samples} plain samples)`
        : num(pool.learned, 1)],
      ["95% interval", pool.interval
        ? `${num(pool.interval[0], 1)} to ${pool.interval[1] >= 4096 ? "no limit seen" : num(pool.interval[1], 1)}`
        : "the data cannot tell yet"],
      ["current concurrency", el("span", {}, num(pool.concurrency), " ",
        above ? badge("past break-even", "bad") : badge("speculation pays", "good"))],
    ]));
    // Up to twice the break-even, but not so far that today's load is a sliver at the left
    // (a learned break-even can sit at its 4096 cap); the figure above gives the value.
    const top = Math.max(Math.min(2 * pool.threshold, Math.max(128, 4 * pool.concurrency)), 8);
    const xs = Array.from({ length: 41 }, (_, i) => 1 + (i * (top - 1)) / 40);
    const series = [{ label: "concurrency" }];
    const data = [xs];
    if (pool.spec_line) {
      series.push({ label: `${pool.pool} TPOT (ms)`, stroke: PALETTE[0], width: 2 });
      data.push(xs.map((x) => lineAt(pool.spec_line, x)));
    }
    if (pool.plain_line) {
      series.push({ label: "plain TPOT (ms)", stroke: PALETTE[6], width: 2, dash: [6, 4] });
      data.push(xs.map((x) => lineAt(pool.plain_line, x)));
    }
    if (data.length === 1) {
      series.push({ label: "no TPOT fit yet", stroke: "#bbb" });
      data.push(xs.map(() => null));
    }
    chart(id, {
      height: 200,
      scales: { x: { time: false } },
      axes: [{ label: "requests in flight per backend" }, { label: "TPOT ms" }],
      series,
      plugins: [markerPlugin],
      markers: [
        { x: pool.threshold, color: "#dc2626", dash: [4, 4], label: "break-even" },
        { x: pool.concurrency, color: "#16a34a", label: "now", row: 2 },
      ],
    }, data);
  }
}

const PRIORITY_BADGE = { critical: "good", standard: "muted", sheddable: "warn" };

// The admission queue: requests predicted to miss their objective wait here for room.
function renderQueue(q) {
  if (!q) return;
  const state = q.enabled ? `${num(q.depth)} of ${num(q.max_depth)} waiting` : "off";
  fill("queue-summary", `${state} · draining ${num(q.drain_per_s, 1)}/s`);
  fill("queue", table([
    ["priority", (r) => badge(r.priority, PRIORITY_BADGE[r.priority] || "muted")],
    ["tenant", (r) => r.tenant || "(open)"],
    ["waiting", (r) => num(r.depth), "n"],
    ["oldest wait", (r) => (r.depth ? ms(r.oldest_wait_s) : "–"), "n"],
    ["dispatched (recent)", (r) => num(r.dispatched_recently), "n"],
    ["wait p50", (r) => (r.wait_p50_s == null ? "–" : ms(r.wait_p50_s)), "n"],
    ["wait p99", (r) => (r.wait_p99_s == null ? "–" : ms(r.wait_p99_s)), "n"],
  ], q.flows, "nothing has queued"));
}

async function refreshFleet() {
  const [fleet, breakEven] = await Promise.all([api("/admin/fleet"), api("/admin/break-even")]);
  renderBackends(fleet.backends);
  renderQueue(fleet.queue);
  renderAcceptance(fleet.acceptance);
  renderBreakEven(breakEven.pools);
}

// -- traffic ---------------------------------------------------------------------------------
function renderRate(series) {
  const pools = Object.keys(series.requests_per_s).sort();
  if (!pools.length) {
    fill("rate-chart", el("p", { class: "empty" }, "no requests in the window"));
    delete charts["rate-chart"];
    return;
  }
  chart("rate-chart", {
    height: 220,
    series: [{}, ...pools.map((pool, i) => ({
      label: pool, stroke: PALETTE[i % PALETTE.length], width: 2, points: { show: false },
      value: (u, v) => (v === null ? dash : v.toFixed(2)),
    }))],
    axes: [{}, { label: "req/s" }],
  }, [series.t, ...pools.map((p) => series.requests_per_s[p])]);
}

function renderTraffic(traffic) {
  document.getElementById("window").textContent =
    `(last ${traffic.window_s / 60} min, this replica: ${traffic.requests} requests)`;
  renderRate(traffic.series);
  fill("traffic", table([
    ["pool", (r) => el("b", {}, r.pool)],
    ["class", (r) => r.class],
    ["requests", (r) => num(r.requests), "n"],
    ["errors", (r) => num(r.errors), "n"],
    ["goodput tok/s", (r) => num(r.goodput_tokens_per_s, 1), "n"],
    ["TTFT p50", (r) => ms(r.ttft_s.p50), "n"],
    ["TTFT p90", (r) => ms(r.ttft_s.p90), "n"],
    ["TTFT p99", (r) => ms(r.ttft_s.p99), "n"],
    ["TPOT p50", (r) => ms(r.tpot_s.p50), "n"],
    ["TPOT p90", (r) => ms(r.tpot_s.p90), "n"],
    ["TPOT p99", (r) => ms(r.tpot_s.p99), "n"],
  ], traffic.by_pool_class, "no requests in the window"));
}

function renderRecent(rows) {
  fill("recent", table([
    ["time", (r) => when(r.ts)],
    ["request", (r) => el("code", {}, r.request_id.slice(0, 12))],
    ["class", (r) => r.label],
    ["backend", (r) => el("b", {}, r.backend)],
    ["pool", (r) => r.pool],
    ["reason", (r) => (r.reason === null
      ? el("span", { class: "empty" }, "(before this page was open)")
      : el("span", { class: "reason" }, r.reason))],
    ["status", (r) => (r.ok ? badge(String(r.status), "good") : badge(String(r.status || r.error || "?"), "bad"))],
    ["load", (r) => num(r.load), "n"],
    ["TTFT", (r) => ms(r.ttft_s), "n"],
    ["TPOT", (r) => ms(r.tpot_s), "n"],
    ["tokens", (r) => num(r.completion_tokens), "n"],
  ], rows, "no requests yet"));
}

async function refreshTraffic() {
  const [traffic, recent] = await Promise.all([
    api("/ui/api/traffic?window_s=300"), api("/ui/api/recent?limit=50")]);
  renderTraffic(traffic);
  renderRecent(recent.requests);
}

// The classifier's features that fired (non-zero, true or named), as short chips.
function features(all) {
  return Object.entries(all)
    .filter(([, v]) => v !== 0 && v !== false && v !== null && v !== "none" && v !== "")
    .map(([k, v]) => el("code", { class: "chip" }, v === true ? k : `${k}=${typeof v === "number" ? +v.toFixed(3) : v}`));
}

function renderExplain(result) {
  const c = result.classification;
  fill("explain-result",
    kv([
      ["chosen", el("b", {}, result.chosen || "none")],
      ["reason", result.reason],
      ["class", `${c.label}${c.overridden ? " (overridden)" : ""}: ${c.reason}`],
      ["features", el("span", { class: "features" }, features(c.features))],
      ["weights", Object.entries(result.weights).map(([k, v]) => `${k} ${v}`).join(" · ")],
    ]),
    table([
      ["#", (r) => r.rank, "n"],
      ["backend", (r) => el("b", {}, r.backend)],
      ["pool", (r) => r.pool],
      ["total", (r) => num(r.total, 3), "n"],
      ["scores", (r) => Object.entries(r.scores).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(" · ")],
      ["why", (r) => el("span", { class: "reason" }, Object.values(r.why).filter(Boolean).join("; "))],
    ], result.candidates),
    Object.keys(result.filtered_out).length
      ? kv(Object.entries(result.filtered_out).map(([b, why]) => [`filtered out: ${b}`, why]))
      : null,
  );
}

function setupTraffic() {
  document.getElementById("explain-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const headers = { "content-type": "application/json" };
    const cls = document.getElementById("explain-class").value;
    if (cls) headers["x-specroute-class"] = cls;
    try {
      const result = await api("/admin/explain", {
        method: "POST", headers, body: document.getElementById("explain-body").value,
      });
      renderExplain(result);
    } catch (err) {
      fill("explain-result", el("p", { class: "message bad" }, err.message));
    }
  });
}

// -- verification ----------------------------------------------------------------------------
const VERDICTS = [["match", "good"], ["diverged_near_tie", "warn"], ["diverged", "bad"], ["error", "muted"]];

const NUMERICS = { numerics_differ: "bad", within_floor: "good", insufficient: "muted" };

// The numerics verdict of a group: its near-tie rate against the model's noise floor.
function numerics(g) {
  const n = g.numerics;
  if (!n) return dash;
  return el("span", { title: n.reason || "" }, badge(n.status, NUMERICS[n.status] || "muted"),
    el("small", {}, ` floor ${pct(n.floor)} (${n.floor_source})`));
}

function labelCounts(g) {
  const entries = Object.entries(g.labeled || {}).filter(([, count]) => count);
  return entries.length ? entries.map(([label, count]) => `${label} ${count}`).join(" · ") : dash;
}

function renderShadow(summary) {
  fill("shadow-meta", kv([
    ["reference pool", summary.reference_pool || "none (shadow verification off)"],
    ["queue", `${summary.queue_depth} waiting, ${summary.concurrency} workers, ${summary.dropped} dropped`],
    ["noise floor", Object.keys(summary.noise_floors || {}).length
      ? Object.entries(summary.noise_floors).map(([model, f]) => `${model}: ${f.description}`).join("; ") : dash],
    ["quarantined", Object.keys(summary.quarantined).length
      ? Object.entries(summary.quarantined).map(([b, why]) => `${b}: ${why}`).join("; ") : "none"],
  ]));
  fill("shadow-groups", table([
    ["backend", (g) => el("b", {}, g.backend)],
    ["pool", (g) => g.pool],
    ["draft", (g) => g.draft_version || dash],
    ["samples", (g) => num(g.samples), "n"],
    ...VERDICTS.map(([name, kind]) => [name.replace("diverged_near_tie", "near-tie"),
      (g) => (g.outcomes[name] ? badge(String(g.outcomes[name]), kind) : "0"), "n"]),
    ["exact match", (g) => pct(g.exact_match_rate), "n"],
    ["equivalent", (g) => pct(g.equivalence_rate), "n"],
    ["drift", (g) => pct(g.drift_rate), "n"],
    ["numerics", numerics],
    ["labels", labelCounts],
  ], summary.groups, "no shadow samples yet"));
}

// Both lines share the common prefix; the continuations start at the same column, where
// the two outputs part.
function aligned(a) {
  const prefix = a.prefix || "";
  const line = (who, text, cls) => el("div", {},
    el("span", { class: "who" }, who), el("span", { class: "same" }, prefix),
    el("span", { class: cls }, text || "(ends)"));
  return el("div", { class: "aligned" },
    line("served", a.primary, "diff-a"), line("reference", a.reference, "diff-b"));
}

// The reference's top-k at the divergence; JSON quoting makes whitespace tokens visible.
function topK(rows) {
  if (!rows || !rows.length) return null;
  return el("div", { class: "topk" }, el("span", { class: "who" }, "top-k"),
    rows.map((t) => el("span", { class: `tok${t.chosen_by ? ` ${t.chosen_by}` : ""}` },
      el("code", {}, JSON.stringify(t.token)), ` ${Number(t.logprob).toFixed(3)}`,
      t.chosen_by ? el("small", {}, ` ${t.chosen_by}`) : null)));
}

function severity(m) {
  const s = m.severity;
  // The served token outside the reference's top-k has no gap of its own: the verdict then
  // judged the top-2 gap, so that is the one shown.
  const known = (v) => v !== null && v !== undefined;
  const gap = known(s.chosen_gap) ? `gap ${Number(s.chosen_gap).toFixed(3)}`
    : known(s.top2_gap) ? `top-2 gap ${Number(s.top2_gap).toFixed(3)} (served token beyond top-k)` : `gap ${dash}`;
  return `${gap} · common prefix ${num(s.common_prefix_tokens)} tokens / ${num(s.common_prefix_chars)} chars`;
}

function labelText(label) {
  if (!label) return [badge("unlabeled", "muted")];
  return [badge(label.label, label.label === "drift" ? "bad" : "good"),
    ` by ${label.by} · ${when(label.ts)}`, label.note ? el("span", { class: "reason" }, ` · ${label.note}`) : null];
}

// Cards are kept between polls (the text never changes, only the label), so a note being
// typed survives a refresh.
const reviewCards = new Map();

function reviewCard(m) {
  const state = el("span", { class: "review-label" }, labelText(m.label));
  const note = el("input", { class: "note", placeholder: "note (optional)", maxlength: "4000", size: "40" });
  const message = el("span", { class: "message" });
  const send = async (label) => {
    const by = document.getElementById("reviewer").value.trim() || "console";
    localStorage.setItem("specroute.reviewer", by);
    try {
      const stored = await api(`/admin/shadow/review/${encodeURIComponent(m.id)}/label`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ label, by, note: note.value }),
      });
      state.replaceChildren(...labelText(stored).filter((c) => c !== null));
      note.value = "";
      message.replaceChildren();
    } catch (err) {
      message.replaceChildren(el("span", { class: "bad" }, `label refused: ${err.message}`));
    }
    document.activeElement.blur();
    await refreshVerification();
  };
  const node = el("div", { class: "mismatch", "data-id": m.id },
    el("div", { class: "mismatch-head" },
      badge(m.outcome.replace("diverged_near_tie", "near-tie"), m.outcome === "diverged" ? "bad" : "warn"),
      el("b", {}, ` ${m.backend}`), ` · ${m.class || dash} · draft ${m.draft_version || dash} · ${when(m.ts)} · `,
      severity(m), el("code", { class: "id" }, ` ${m.id}`)),
    aligned(m.aligned), topK(m.top_logprobs),
    el("div", { class: "row review" }, state, note,
      el("button", { type: "button", "data-label": "noise", onclick: () => send("noise") }, "noise"),
      el("button", { type: "button", class: "danger", "data-label": "drift", onclick: () => send("drift") }, "drift"),
      message));
  return { node, state };
}

// Draws the fetched rows; synchronous, so no other refresh can change the card map half way.
function renderReview(rows, details) {
  for (const d of details) if (!reviewCards.has(d.id)) reviewCards.set(d.id, reviewCard(d));
  const seen = new Set(rows.map((m) => m.id));
  for (const id of reviewCards.keys()) if (!seen.has(id)) reviewCards.delete(id);
  for (const m of rows) {
    const card = reviewCards.get(m.id);
    card.state.replaceChildren(...labelText(m.label).filter((c) => c !== null));
  }
  if (!rows.length) fill("mismatches", el("p", { class: "empty" }, "no mismatches"));
  else fill("mismatches", rows.map((m) => reviewCards.get(m.id).node));
}

// Refreshes overlap (the poll, a label sent, the filter changed); each takes a ticket and only
// the newest one draws, or an older list (another filter) would drop cards the newer one shows.
let verificationTicket = 0;

async function refreshVerification() {
  const ticket = ++verificationTicket;
  const filter = document.getElementById("review-filter").value;
  const [summary, review] = await Promise.all([
    api("/admin/shadow"), api(`/admin/shadow/review?limit=20&label=${encodeURIComponent(filter)}`)]);
  const rows = review.mismatches;
  const details = await Promise.all(rows.filter((m) => !reviewCards.has(m.id)).map((m) =>
    api(`/admin/shadow/review/${encodeURIComponent(m.id)}`)));
  if (ticket !== verificationTicket) return;
  renderShadow(summary);
  // Holding still while a note is typed: a re-ordered list would take the focus away.
  const box = document.getElementById("mismatches");
  if (box.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
  renderReview(rows, details);
}

function setupVerification() {
  const reviewer = document.getElementById("reviewer");
  reviewer.value = localStorage.getItem("specroute.reviewer") || reviewer.value;
  document.getElementById("review-filter").addEventListener("change", () => refreshVerification());
}

// -- canary ----------------------------------------------------------------------------------
// An evidence value: a number, an interval [lo, hi], or a nested record (the checks).
function evidence(value) {
  if (value === null || value === undefined) return dash;
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(3);
  if (Array.isArray(value)) return `[${value.map((v) => Number(v).toFixed(3)).join(", ")}]`;
  if (typeof value === "object") {
    return Object.entries(value).map(([k, v]) =>
      `${k}: ${v === true ? "pass" : v === false ? "fail" : v === null ? "not enough data" : evidence(v)}`).join(" · ");
  }
  return String(value);
}

function renderCanary(c) {
  const buttons = document.querySelectorAll("#canary-buttons button");
  if (!c.configured) {
    fill("canary-summary", el("p", { class: "empty" }, "no canary is configured (the policy's canary section)"));
    buttons.forEach((b) => { b.disabled = true; });
    fill("canary-ramp"); fill("canary-evidence"); fill("canary-history");
    return;
  }
  const finished = c.state === "promoted" || c.state === "rolled_back";
  buttons.forEach((b) => {
    const action = b.dataset.action;
    b.disabled = (finished && action !== "rollback") || (action === "pause" && c.state !== "running")
      || (action === "resume" && c.state !== "paused") || (action === "rollback" && c.state === "rolled_back");
  });
  const kind = { running: "good", paused: "warn", promoted: "good", rolled_back: "bad" }[c.state];
  fill("canary-summary", kv([
    ["canary", el("b", {}, c.name)],
    ["state", badge(c.state, kind)],
    ["share", pct(c.share)],
    ["candidates", c.candidates.join(", ")],
    ["baseline", c.baseline.join(", ")],
    ["classes", c.classes ? c.classes.join(", ") : "all"],
  ]));
  fill("canary-ramp", c.ramp.map((share, i) => el("div", {
    class: `step${i === c.step ? " current" : ""}${i < c.step || c.state === "promoted" ? " done" : ""}`,
  }, el("b", {}, `step ${i + 1}`), el("span", {}, pct(share)))));
  fill("canary-evidence", kv(Object.entries(c.evidence || {}).map(([k, v]) => [k.replaceAll("_", " "), evidence(v)])));
  fill("canary-history", table([
    ["time", (h) => when(h.ts)],
    ["action", (h) => el("b", {}, h.action)],
    ["actor", (h) => h.actor],
    ["from → to", (h) => `${h.from.state} ${pct(h.from.share)} → ${h.to.state} ${pct(h.to.share)}`],
    ["reason", (h) => el("span", { class: "reason" }, h.reason)],
  ], c.history || [], "no transitions yet"));
}

async function refreshCanary() {
  renderCanary(await api("/admin/canary"));
}

function setupCanary() {
  for (const button of document.querySelectorAll("#canary-buttons button")) {
    button.addEventListener("click", async () => {
      const action = button.dataset.action;
      if ((action === "promote" || action === "rollback") && !window.confirm(`${action} the canary?`)) return;
      try {
        const state = await api(`/admin/canary/${action}`, { method: "POST" });
        fill("canary-message", el("span", { class: "good" }, `${action}: canary now ${state.state}`));
      } catch (err) {
        fill("canary-message", el("span", { class: "bad" }, `${action} refused: ${err.message}`));
      }
      await refreshCanary();
    });
  }
}

// -- policy ----------------------------------------------------------------------------------
let activePolicy = null;
let validatedText = null;

function renderPolicy(p) {
  activePolicy = p;
  fill("policy-meta", kv([
    ["digest", el("code", {}, p.digest)],
    ["source", p.source],
    ["previous versions", String(p.history.length)],
  ]));
  fill("policy-history", table([
    ["", (h) => (h === p.history[0] ? "rollback target" : "")],
    ["digest", (h) => el("code", {}, h.digest)],
    ["source", (h) => h.source],
  ], p.history, "no earlier policy: nothing to roll back to"));
  document.getElementById("policy-rollback").disabled = !p.history.length;
  const editor = document.getElementById("policy-editor");
  // Reload the editor only while it holds an unedited copy of the active policy.
  if (!editor.dataset.loaded || editor.value === editor.dataset.original) {
    editor.value = p.text;
    editor.dataset.original = p.text;
    editor.dataset.loaded = "1";
  }
}

async function refreshPolicy() {
  renderPolicy(await api("/admin/policy"));
}

function policyMessage(text, kind, problems = []) {
  fill("policy-message", el("div", { class: kind }, text),
    problems.length ? el("ul", {}, problems.map((p) => el("li", {}, p))) : null);
}

function renderDiff(diff) {
  fill("policy-diff", diff.split("\n").map((line) => el("span", {
    class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "",
  }, `${line}\n`)));
}

function setupPolicy() {
  const editor = document.getElementById("policy-editor");
  const apply = document.getElementById("policy-apply");
  editor.addEventListener("input", () => { apply.disabled = editor.value !== validatedText; });
  document.getElementById("policy-validate").addEventListener("click", async () => {
    const text = editor.value;
    try {
      const result = await api("/admin/policy?dry_run=1", { method: "PUT", body: text });
      validatedText = text;
      apply.disabled = result.unchanged;
      policyMessage(result.unchanged ? "valid; identical to the active policy" : `valid: ${result.digest}`, "good");
      renderDiff(result.diff);
    } catch (err) {
      validatedText = null;
      apply.disabled = true;
      fill("policy-diff");
      policyMessage(`refused: ${err.message}`, "bad", (err.body && err.body.error && err.body.error.problems) || []);
    }
  });
  apply.addEventListener("click", async () => {
    try {
      const result = await api("/admin/policy", { method: "PUT", body: editor.value });
      policyMessage(`applied: policy ${result.digest} in force`, "good");
      editor.dataset.original = editor.value;
      apply.disabled = true;
      fill("policy-diff");
    } catch (err) {
      policyMessage(`refused: ${err.message}`, "bad", (err.body && err.body.error && err.body.error.problems) || []);
    }
    await refreshPolicy();
  });
  document.getElementById("policy-reset").addEventListener("click", () => {
    editor.value = activePolicy ? activePolicy.text : editor.value;
    editor.dataset.original = editor.value;
    apply.disabled = true;
    fill("policy-diff");
    fill("policy-message");
  });
  document.getElementById("policy-rollback").addEventListener("click", async () => {
    if (!window.confirm("Roll back to the previous policy?")) return;
    try {
      const result = await api("/admin/policy/rollback", { method: "POST" });
      policyMessage(`rolled back: policy ${result.digest} in force`, "good");
      editor.dataset.loaded = "";
    } catch (err) {
      policyMessage(`rollback refused: ${err.message}`, "bad");
    }
    await refreshPolicy();
  });
}

// -- the loop --------------------------------------------------------------------------------
const VIEWS = {
  fleet: { refresh: refreshFleet },
  traffic: { refresh: refreshTraffic, setup: setupTraffic },
  verification: { refresh: refreshVerification, setup: setupVerification },
  canary: { refresh: refreshCanary, setup: setupCanary },
  policy: { refresh: refreshPolicy, setup: setupPolicy, every: 10000 },
};

async function tick(view) {
  if (document.hidden) return;
  try {
    await view.refresh();
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (err) {
    if (err.status === 401 || err.status === 403) window.location.href = "/ui/login";
    setStatus(`update failed: ${err.message}`, true);
  }
}

function start() {
  const view = VIEWS[document.body.dataset.view];
  if (!view) return;
  if (view.setup) view.setup();
  tick(view);
  window.setInterval(() => tick(view), view.every || POLL_MS);
}

start();
