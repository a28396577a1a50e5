// The status page: polls /api/fleet every second and draws it. Every value
// from the fleet goes into the page as text (textContent), never as markup.
"use strict";

const STATES = ["training", "waiting", "idle", "ineligible", "stopping", "error", "away"];
const STATE_TEXT = {training: "training", waiting: "waiting to be admitted", idle: "idle, not running",
                    ineligible: "not eligible", stopping: "stopping", error: "error", away: "away"};
const POLL_MS = 1000;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) e.setAttribute(k, v);
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

function num(x, digits) {
  if (x === null || x === undefined) return "–";
  const d = digits === undefined ? (Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : 2) : digits;
  return x.toLocaleString(undefined, {minimumFractionDigits: d, maximumFractionDigits: d});
}

function dur(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  const h = Math.floor(s / 3600), m = Math.round((s - h * 3600) / 60);
  return `${h} h ${m} min`;
}

function bytes(b) {
  if (!b) return "–";
  const units = ["B", "kB", "MB", "GB"];
  let i = 0;
  while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
  return `${b.toFixed(b >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

function clock(t) {
  if (!t) return "–";
  return new Date(t * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", second: "2-digit"});
}

function hm(t) {
  const opts = {hour: "2-digit", minute: "2-digit"};
  if (t % 60) opts.second = "2-digit";
  return new Date(t * 1000).toLocaleTimeString([], opts);
}

// The next of 1, 2, 5 x 10^k at or above x: an axis whose ticks are round.
function nice(x) {
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  return [1, 2, 2.5, 5, 10].map(m => m * p).find(v => v >= x);
}

function card(value, key, attrs) {
  return el("div", Object.assign({class: "card"}, attrs || {}), el("div", {class: "v", text: value}),
            el("div", {class: "k", text: key}));
}

function kpi(value, key, attrs) {
  return el("div", Object.assign({class: "kpi"}, attrs || {}), el("div", {class: "v", text: value}),
            el("div", {class: "k", text: key}));
}

// ---- the night's plot: throughput (area, left axis) and members (steps, right axis)
function plot(job, now) {
  const W = 1000, H = 190, L = 52, R = 40, T = 10, B = 24;
  const pts = job.series || [];
  const marks = (job.changes || []).filter(c => c.time);
  const t1 = now;
  let t0 = pts.length ? pts[0][0] : now - 60;
  if (marks.length) t0 = Math.min(t0, marks[0].time);
  if (t1 - t0 < 60) t0 = t1 - 60;
  const x = t => L + (W - L - R) * (t - t0) / (t1 - t0);
  const rmax = nice(Math.max(1, ...pts.map(p => p[1] || 0)) * 1.05);
  const wmax = Math.max(1, ...pts.map(p => p[2] || 0), job.world || 0) + 1;
  const yr = v => T + (H - T - B) * (1 - v / rmax);
  const yw = v => T + (H - T - B) * (1 - v / wmax);
  const g = svg("svg", {class: "plot", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
                        "aria-label": `throughput and members of job ${job.name} over time`});
  for (let i = 0; i <= 4; i++) {
    const v = rmax * i / 4, y = yr(v);
    g.append(svg("line", {class: "grid", x1: L, x2: W - R, y1: y, y2: y}));
    g.append(svg("text", {x: L - 6, y: y + 4, "text-anchor": "end"}, num(v, v >= 100 ? 0 : 1)));
  }
  for (let i = 0; i <= 4; i++) {
    const w = Math.round(wmax * i / 4);
    g.append(svg("text", {x: W - R + 6, y: yw(w) + 4}, String(w)));
  }
  const span = t1 - t0, step = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800]
    .find(s => span / s <= 8) || 21600;
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step)
    g.append(svg("text", {x: x(t), y: H - 6, "text-anchor": "middle"}, hm(t)));
  const rated = pts.filter(p => p[1] !== null);
  if (rated.length) {
    const line = rated.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${yr(p[1]).toFixed(1)}`).join("");
    g.append(svg("path", {class: "area", d: `${line}L${x(rated[rated.length - 1][0]).toFixed(1)},${yr(0)}` +
                                            `L${x(rated[0][0]).toFixed(1)},${yr(0)}Z`}));
    g.append(svg("path", {class: "rate", d: line}));
  }
  if (pts.length) {
    let d = "";
    pts.forEach((p, i) => {
      const X = x(p[0]).toFixed(1), Y = yw(p[2]).toFixed(1);
      d += i ? `H${X}V${Y}` : `M${X},${Y}`;
    });
    d += `H${x(t1).toFixed(1)}`;
    g.append(svg("path", {class: "world", d}));
  }
  for (const c of marks) {
    const X = x(c.time);
    if (X < L) continue;
    const m = svg("line", {class: `mark ${c.cause}`, x1: X, x2: X, y1: T, y2: H - B});
    m.append(svg("title", {}, changeText(c)));
    g.append(m);
  }
  return el("div", {}, el("div", {class: "plot-key"},
    el("span", {}, el("i", {class: "k-rate"}), "samples/s (left)"),
    el("span", {}, el("i", {class: "k-world"}), "members (right)"),
    el("span", {}, "dashed: membership changes")), g);
}

function changeText(c) {
  const parts = [`generation ${c.generation}: ${c.cause}`, `${c.world} members`];
  if (c.joined_n) parts.push(`+${c.joined_n} joined`);
  if (c.left_n) parts.push(`−${c.left_n} left`);
  if (c.stall_s !== null) parts.push(`stall ${dur(c.stall_s)}`);
  if (c.bytes) parts.push(`${bytes(c.bytes)} of state sent`);
  return parts.join(", ");
}

function who(ids, n) {
  if (!n) return "";
  const shown = ids.slice(0, 2).join(", ");
  return n > 2 ? `${shown} +${n - 2}` : shown;
}

function changesTable(job) {
  const rows = (job.changes || []).slice().reverse();
  const t = el("table", {class: "changes"}, el("tr", {},
    el("th", {text: "time"}), el("th", {class: "n", text: "gen"}), el("th", {text: "cause"}),
    el("th", {class: "n", text: "members"}), el("th", {text: "joined"}), el("th", {text: "left"}),
    el("th", {class: "n", text: "stall"}), el("th", {class: "n", text: "state sent"}),
    el("th", {class: "n", text: "step"})));
  for (const c of rows.slice(0, 12)) {
    t.append(el("tr", {"data-generation": c.generation, "data-cause": c.cause},
      el("td", {text: c.time ? (c.seen ? "≈ " : "") + clock(c.time) : "–",
                title: c.seen ? "when the coordinator saw the record (records carry no time)" : null}),
      el("td", {class: "n", text: c.generation}),
      el("td", {}, el("span", {class: `cause ${c.cause}`, text: c.cause})),
      el("td", {class: "n", text: c.world ?? "–"}),
      el("td", {text: who(c.joined, c.joined_n), title: c.joined.join("\n") || null}),
      el("td", {text: who(c.left, c.left_n), title: c.left.join("\n") || null}),
      el("td", {class: "n", text: c.stall_s === null ? "–" : dur(c.stall_s)}),
      el("td", {class: "n", text: bytes(c.bytes)}),
      el("td", {class: "n", text: c.step ?? "–"})));
  }
  const box = el("div", {}, el("h3", {text: "Membership tonight"}), rows.length ? t :
                 el("p", {class: "muted", text: "No change yet."}));
  const stalls = job.stall_s_total ? ` · ${dur(job.stall_s_total)} stalled in all` : "";
  const counts = Object.entries(job.changes_by_cause || {}).map(([k, v]) => `${v} ${k}`).join(", ");
  if (counts) box.append(el("p", {class: "muted", text: counts + stalls}));
  return box;
}

function wire(bps) {
  return bps === null || bps === undefined ? "–" : (bps ? bytes(bps) : "0 B") + "/s";
}

function memberRow(r) {
  return el("tr", {"data-member": r.id},
    el("td", {class: "n", text: r.rank}), el("td", {text: r.host, title: r.id}),
    el("td", {class: "n", text: r.lag_s === null ? "–" : dur(Math.max(0, r.lag_s))}),
    el("td", {class: "n", text: dur(r.step_s)}), el("td", {class: "n", text: dur(r.boundary_s)}),
    el("td", {class: "n", text: num(r.samples_per_s)}),
    el("td", {class: "n" + (r.straggler ? " warn" : ""), text: r.share ?? "–",
              title: r.straggler || null}),
    el("td", {class: "n", text: wire(r.wire_sent_Bps), title: "bytes per second its MCCL sockets sent"}),
    el("td", {class: "n", text: wire(r.wire_received_Bps), title: "bytes per second its MCCL sockets received"}),
    el("td", {class: "n" + (r.stale ? " warn" : ""), text: r.age_s === null ? "never" : dur(r.age_s)}));
}

function memberTable(rows) {
  const t = el("table", {}, el("tr", {}, el("th", {class: "n", text: "rank"}), el("th", {text: "host"}),
    el("th", {class: "n", text: "holds back", title: "how much longer than the median member the others wait for it, per step"}),
    el("th", {class: "n", text: "step"}), el("th", {class: "n", text: "waits"}),
    el("th", {class: "n", text: "samples/s"}),
    el("th", {class: "n", text: "share", title: "samples of the last step (Job(shares=\"speed\")); a straggler is marked"}),
    el("th", {class: "n", text: "wire out", title: "bytes per second its MCCL sockets sent, every group of the member"}),
    el("th", {class: "n", text: "wire in", title: "bytes per second its MCCL sockets received"}),
    el("th", {class: "n", text: "status age"})));
  rows.forEach(r => t.append(memberRow(r)));
  return t;
}

function jobCard(job, now, open) {
  const c = el("div", {class: "job", "data-job": job.name, "data-state": null, "data-world": job.world,
                       "data-generation": job.generation});
  c.append(el("div", {class: "job-head"}, el("span", {class: "name", text: job.name}),
    el("span", {class: `badge ${job.state.replace(" ", "-")}`, text: job.state}),
    el("span", {class: "muted", text: job.generation >= 0 ?
      `generation ${job.generation} (${job.cause}) · ${job.world} members` : "no generation yet"}),
    job.waiting ? el("span", {class: "muted", text: `· ${job.waiting} waiting to join`}) : null,
    job.end_at !== null ? el("span", {class: "muted", text: job.end_at < 0 ? "· asked to end" :
                                                          `· ends at step ${job.end_at}`}) : null));
  if (job.error) c.append(el("p", {class: "warn", text: job.error}));
  if (job.stopped_by) c.append(el("p", {class: "warn", text: `stopped by: ${job.stopped_by}`}));
  for (const r of job.refused || []) c.append(el("p", {class: "muted", text: `refused ${r.id}: ${r.why}`}));
  const prog = el("div", {class: "kpi"}, el("div", {class: "v", text: job.target ?
      `${num(job.step, 0)} / ${num(job.target, 0)}` : num(job.step, 0)}),
    el("div", {class: "k", text: "step"}));
  if (job.progress !== null) {
    const fill = el("div", {});
    fill.style.width = `${Math.min(100, 100 * job.progress).toFixed(1)}%`;  // CSSOM: allowed by the page's CSP
    prog.append(el("div", {class: "bar"}, fill));
  }
  const age = job.last_step_age_s;
  c.append(el("div", {class: "kpis"}, prog,
    kpi(num(job.samples_per_s), "samples/s"),
    kpi(job.loss === null ? "–" : num(job.loss, 4), "loss"),
    kpi(dur(job.step_s), "per step"),
    kpi(job.eta_s === null ? "–" : dur(job.eta_s), "to the end"),
    kpi(dur(age), "since the step moved", job.state === "running" && age > 30 ? {class: "kpi warn"} : null)));
  c.append(plot(job, now));
  const slow = el("div", {}, el("h3", {text: "Slowest members"}));
  if ((job.slowest || []).length) slow.append(memberTable(job.slowest));
  else slow.append(el("p", {class: "muted", text: job.members.length ? "No member stands out at the step boundary." :
                                                       "No member is training."}));
  c.append(el("div", {class: "cols"}, changesTable(job), slow));
  if (job.members.length) {
    const d = el("details", {id: `members-${job.name}`}, el("summary", {text: `All ${job.members.length} members`}),
                 memberTable(job.members));
    if (open.has(d.id)) d.open = true;
    c.append(d);
  }
  return c;
}

function reasonKey(a) {
  return `${a.shown}\u0000${(a.reason || "").replace(/\d+(\.\d+)?/g, "#")}`;
}

function render(data) {
  const now = data.time;
  const open = new Set([...document.querySelectorAll("details[open]")].map(d => d.id));
  const counts = data.counts || {};
  const rate = data.jobs.reduce((s, j) => s + (j.samples_per_s || 0), 0);
  const running = data.jobs.filter(j => j.state === "running").length;
  document.getElementById("summary").replaceChildren(
    card(`${running} / ${data.jobs.length}`, "jobs running"),
    card(num(rate), "samples/s, all jobs"),
    ...STATES.map(s => card(String(counts[s] || 0), STATE_TEXT[s], {"data-state": s, "data-count": counts[s] || 0})));

  const jobs = document.getElementById("jobs");
  const live = j => (j.state === "running" ? 0 : j.state === "stopped" ? 1 : 2);
  const sorted = data.jobs.slice().sort((a, b) => live(a) - live(b));  // running first, then stopped
  if (data.jobs.length) jobs.replaceChildren(...sorted.map(j => jobCard(j, now, open)));
  else jobs.replaceChildren(el("p", {class: "muted", text: "No job is listed in the store yet."}));

  document.getElementById("machine-total").textContent = `(${data.agents.length})`;
  document.getElementById("legend").replaceChildren(...STATES.map(s =>
    el("span", {"data-state": s, text: `${STATE_TEXT[s]} ${counts[s] || 0}`})));
  const order = a => STATES.indexOf(a.shown) * 1e6;
  const machines = data.agents.slice().sort((a, b) => order(a) - order(b) || (a.host < b.host ? -1 : 1));
  document.getElementById("machines").replaceChildren(...machines.map(a => {
    const why = [`${a.host}: ${STATE_TEXT[a.shown] || a.shown}`, a.reason];
    if (a.job) why.push(`job ${a.job}`);
    if (a.since) why.push(`since ${clock(a.since)}`);
    if (a.pid) why.push(`worker pid ${a.pid}`);
    return el("div", {class: "tile", "data-state": a.shown, "data-host": a.host, title: why.join("\n")},
              a.host, el("small", {text: a.reason || STATE_TEXT[a.shown]}));
  }));
  const groups = new Map();
  for (const a of data.agents.filter(a => a.shown !== "training")) {
    const k = reasonKey(a);
    if (!groups.has(k)) groups.set(k, {state: a.shown, reason: a.reason, hosts: []});
    groups.get(k).hosts.push(a.host);
  }
  const rt = el("table", {}, el("tr", {}, el("th", {text: "state"}), el("th", {text: "reason (one of them)"}),
                                 el("th", {class: "n", text: "machines"}), el("th", {text: "which"})));
  [...groups.values()].sort((a, b) => b.hosts.length - a.hosts.length).forEach(g => rt.append(el("tr", {},
    el("td", {}, el("span", {class: "dot", "data-state": g.state, text: STATE_TEXT[g.state] || g.state})),
    el("td", {text: g.reason}), el("td", {class: "n", text: g.hosts.length}),
    el("td", {text: g.hosts.slice(0, 6).join(", ") + (g.hosts.length > 6 ? ` +${g.hosts.length - 6}` : ""),
              title: g.hosts.join("\n")}))));
  document.getElementById("reasons").replaceChildren(groups.size ? rt :
    el("p", {class: "muted", text: data.agents.length ? "Every machine that reports is training." :
                                     "No machine reports yet (an agent reports with a [fleet] section)."}));

  const co = data.coordinator || {}, st = data.store || {};
  document.getElementById("coordinator").replaceChildren(
    card(dur(co.uptime_s), "up"), card(`${num(co.cpu_percent, 1)} %`, "CPU (of one core)"),
    card(`${num(co.rss_mb, 0)} MB`, "memory"), card(num(st.keys, 0), "store keys"),
    card(`${num(st.read_ms, 1)} ms`, `store read (${st.round_trips || "–"} round trips)`),
    card(num(co.requests_total, 0), "requests served"), card(String(co.viewers ?? "–"), "viewers"),
    card(co.store_error ? "error" : "ok", co.store_error || `store ${st.address || ""}`,
         co.store_error ? {class: "card warn"} : null),
    card(co.version || "–", co.auth ? "mccl · token required" : "mccl · open page"));
}

let lastOk = 0, lastData = null, failing = "";

function showLive() {
  const live = document.getElementById("live");
  if (!lastOk) return;
  const age = (Date.now() - lastOk) / 1000;
  if (age > 5 || failing) {
    live.className = "live bad";
    live.textContent = `no answer from the coordinator for ${dur(age)}${failing ? ` (${failing})` : ""}`;
  } else {
    live.className = "live ok";
    live.textContent = `live · ${clock(lastData.time)}`;
  }
}

async function poll() {
  try {
    const r = await fetch("/api/fleet", {cache: "no-store", credentials: "same-origin"});
    if (r.status === 401) { location.reload(); return; }
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    lastData = await r.json();
    render(lastData);
    lastOk = Date.now();
    failing = "";
    document.body.dataset.updated = String(lastData.time);
  } catch (e) {
    failing = String(e.message || e);
    document.body.dataset.failing = failing;
    if (!lastOk) lastOk = Date.now() - 1;
  }
  showLive();
  setTimeout(poll, POLL_MS);
}

setInterval(showLive, 500);
poll();
