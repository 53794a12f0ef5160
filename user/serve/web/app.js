/*
 * probing serve: the page. Vanilla JavaScript, no library. Everything shown comes from the
 * server's JSON API (docs/serve.md); text from recordings and processes is only ever put in
 * the page as text (textContent), never as markup. SPDX-License-Identifier: MIT
 */
(function () {
"use strict";

var $ = function (id) { return document.getElementById(id); };
var SVGNS = "http://www.w3.org/2000/svg";
var files = [];

/* An element with attributes and children (strings become text nodes). */
function el(tag, attrs, kids) {
  var e = tag.indexOf("svg:") === 0 ? document.createElementNS(SVGNS, tag.slice(4))
                                    : document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) {
    if (k === "text") e.textContent = attrs[k];
    else if (k === "cls") e.setAttribute("class", attrs[k]);
    else e.setAttribute(k, attrs[k]);
  });
  (kids || []).forEach(function (c) {
    e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  });
  return e;
}

function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
function show(e, on) { e.hidden = !on; }
/* The commands' messages start with "probing: " on every line: not needed here. */
function tidy(msg) { return String(msg).replace(/^probing( [a-z]+)?: /gm, "").trim(); }
function num(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

function qs(params) {
  return Object.keys(params).filter(function (k) {
    return params[k] !== "" && params[k] !== null && params[k] !== undefined;
  }).map(function (k) {
    return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]);
  }).join("&");
}

/* GET or POST an API URL; resolve with its JSON or text, reject with the server's message. */
function api(path, params, body, opts) {
  opts = opts || {};
  var init = { method: body === undefined ? "GET" : "POST", signal: opts.signal,
               credentials: "same-origin" };
  if (body !== undefined) init.body = body;
  return fetch(path + "?" + qs(params || {}), init).then(function (r) {
    var type = r.headers.get("Content-Type") || "";
    var read = opts.blob ? r.blob() : type.indexOf("json") >= 0 && !opts.text ? r.json()
                                    : r.text();
    return read.then(function (data) {
      if (r.ok || opts.any) return data;
      if (r.status === 401) throw new Error("This page's token is not valid any more: open " +
                                            "the URL that probing serve printed.");
      throw new Error(data && data.error ? data.error : (data instanceof Blob ? r.statusText
                                                                             : data));
    });
  });
}

/* Run SQL on a source ("f0", "p1234"): resolve with its results [{columns, rows}...]. */
function sql(src, text, extra) {
  var params = Object.assign({ src: src }, extra || {});
  return api("/api/query", params, text, { any: true }).then(function (r) {
    if (!r.ok) throw new Error(r.error || "the query failed");
    return r.results;
  });
}

/* ---- tabs -------------------------------------------------------------------------------- */

var tabs = ["flame", "sql", "live"], started = {};
function route() {
  var t = (location.hash || "#flame").slice(1);
  if (tabs.indexOf(t) < 0) t = "flame";
  tabs.forEach(function (x) {
    show($("tab-" + x), x === t);
    $("nav-" + x).classList.toggle("on", x === t);
  });
  if (!started[t]) {
    started[t] = true;
    ({ flame: startFlame, sql: startSql, live: startLive })[t]();
  }
}

/* ---- charts ------------------------------------------------------------------------------ */

var COLOURS = ["#2a6fd0", "#e0632b", "#2e9d58", "#a347b8", "#c9a227", "#d0406a", "#3aa6b8",
               "#7a5a3a"];

/* A line chart of @series [{name, points: [[x, y]...]}] in a new SVG element, legend right. */
function lineChart(title, series, xlabel, ylabel) {
  var W = 620, H = 260, L = 56, R = 170, T = 26, B = 34;
  var svg = el("svg:svg", { cls: "chart", width: W, height: H, viewBox: "0 0 " + W + " " + H });
  var xs = [], ys = [0];
  series.forEach(function (s) { s.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
  svg.appendChild(el("svg:text", { x: L, y: 16, text: title }));
  if (!xs.length) {
    svg.appendChild(el("svg:text", { x: L, y: H / 2, text: "no rows yet" }));
    return svg;
  }
  var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y1 = Math.max.apply(null, ys);
  if (x1 === x0) x1 = x0 + 1;
  if (!(y1 > 0)) y1 = 1;
  var X = function (v) { return L + (v - x0) / (x1 - x0) * (W - L - R); };
  var Y = function (v) { return H - B - v / y1 * (H - T - B); };
  for (var i = 0; i <= 4; i++) {
    var v = y1 * i / 4;
    svg.appendChild(el("svg:line", { cls: "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
    svg.appendChild(el("svg:text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end",
                                     text: (v * 1000).toPrecision(3) }));
  }
  svg.appendChild(el("svg:line", { cls: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.appendChild(el("svg:text", { x: L, y: H - B + 14, text: String(x0) }));
  svg.appendChild(el("svg:text", { x: W - R, y: H - B + 14, "text-anchor": "end", text: String(x1) }));
  svg.appendChild(el("svg:text", { x: (L + W - R) / 2, y: H - B + 14, "text-anchor": "middle",
                                   text: xlabel }));
  svg.appendChild(el("svg:text", { x: 4, y: T - 6, text: ylabel }));
  series.forEach(function (s, k) {
    var colour = COLOURS[k % COLOURS.length];
    var d = s.points.map(function (p, j) {
      return (j ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1);
    }).join("");
    svg.appendChild(el("svg:path", { cls: "line", d: d, stroke: colour }, [
      el("svg:title", { text: s.name })]));
    s.points.forEach(function (p) {
      svg.appendChild(el("svg:circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.2, fill: colour }, [
        el("svg:title", { text: s.name + ": step " + p[0] + ", " + (p[1] * 1000).toFixed(2) +
                                " ms" })]));
    });
    var ly = T + 4 + k * 16;
    svg.appendChild(el("svg:rect", { x: W - R + 14, y: ly, width: 10, height: 10, fill: colour }));
    svg.appendChild(el("svg:text", { x: W - R + 28, y: ly + 9, text: s.name.length > 24 ?
      s.name.slice(0, 11) + "…" + s.name.slice(-11) : s.name }, [
      el("svg:title", { text: s.name })]));
  });
  return svg;
}

/* Rows [[x, name, y]...] as series, one per name, in order of first appearance. */
function bySeries(rows) {
  var map = {}, list = [];
  rows.forEach(function (r) {
    if (!map[r[1]]) { map[r[1]] = { name: String(r[1]), points: [] }; list.push(map[r[1]]); }
    map[r[1]].points.push([r[0], r[2]]);
  });
  return list;
}

var TORCH_SQL =
  "-- time per step: the root module's forward and backward, the optimizer step\n" +
  "SELECT step, stage, SUM(duration) FROM python.torch_trace\n" +
  " WHERE depth = 0 OR stage = 'step' GROUP BY step, stage ORDER BY step;\n" +
  "-- the busiest modules under the root, forward + backward per step\n" +
  "WITH top AS (SELECT module FROM python.torch_trace WHERE depth = 1\n" +
  "             GROUP BY module ORDER BY SUM(duration) DESC LIMIT 6)\n" +
  "SELECT step, module, SUM(duration) FROM python.torch_trace\n" +
  " WHERE depth = 1 AND module IN top GROUP BY step, module ORDER BY step;";

/* Fill @box with the PyTorch charts of source @src; resolve false when there is no trace. */
function torchCharts(box, src) {
  clear(box);
  return sql(src, TORCH_SQL, { timeout: 20 }).then(function (res) {
    var steps = bySeries(res[0].rows), mods = bySeries(res[1].rows);
    var total = {};
    res[0].rows.forEach(function (r) { total[r[0]] = (total[r[0]] || 0) + r[2]; });
    steps.unshift({ name: "total", points: Object.keys(total).map(function (k) {
      return [+k, total[k]];
    }).sort(function (a, b) { return a[0] - b[0]; }) });
    box.appendChild(lineChart("Step time (ms)", steps, "step", "ms"));
    box.appendChild(lineChart("Busiest modules, forward + backward (ms)", mods, "step", "ms"));
    box.appendChild(el("p", {}, [el("a", { id: "torch-chrome-" + src,
      href: "/api/chrome?" + qs({ src: src }), download: "torch-trace-" + src + ".json",
      text: "Download the Chrome/Perfetto trace" }),
      " — open it in ui.perfetto.dev or chrome://tracing"]));
    return true;
  });
}

/* ---- flame graph page -------------------------------------------------------------------- */

var fg = { range: null, seconds: [], t0: 0 };

function option(value, text) { return el("option", { value: value, text: text }); }

function fillSelect(sel, opts, keep) {
  var old = keep ? sel.value : "";
  clear(sel);
  opts.forEach(function (o) { sel.appendChild(option(o[0], o[1])); });
  if (keep && opts.some(function (o) { return String(o[0]) === old; })) sel.value = old;
}

function fgSrc() { return "f" + $("fg-file").value; }

/* The recording's processes, ranks, threads, states: the filters' choices. */
function loadRecording() {
  var f = $("fg-file").value;
  fg.range = null;
  $("fg-summary").textContent = "";
  var q = "SELECT p.pid, p.rank, p.command, SUM(s.count) AS n FROM samples s" +
          " LEFT JOIN processes p ON p.pid = s.pid GROUP BY s.pid ORDER BY n DESC LIMIT 1000;" +
          "SELECT pid, tid, thread, SUM(count) AS n FROM samples GROUP BY pid, tid" +
          " ORDER BY n DESC LIMIT 2000;" +
          "SELECT key, value FROM meta;" +
          "SELECT count(*) FROM sqlite_master WHERE name = 'torch_trace';";
  return sql("f" + f, q).then(function (res) {
    var procs = res[0].rows, meta = {};
    fg.threads = res[1].rows;
    res[2].rows.forEach(function (r) { meta[r[0]] = r[1]; });
    fg.start = meta.start !== undefined ? +meta.start : null;
    fg.duration = meta.duration !== undefined ? +meta.duration : null;
    fillSelect($("fg-pid"), [["", "all processes"]].concat(procs.map(function (p) {
      return [p[0], "pid " + p[0] + (p[1] !== null ? " · rank " + p[1] : "") + " · " +
              String(p[2] || "?").slice(0, 60) + " (" + num(p[3]) + ")"];
    })));
    var ranks = procs.filter(function (p) { return p[1] !== null; }).map(function (p) {
      return p[1]; }).sort(function (a, b) { return a - b; }).filter(function (r, i, a) {
      return a.indexOf(r) === i; });
    show($("fg-rank-box"), ranks.length > 0);
    fillSelect($("fg-rank"), [["", "all ranks"]].concat(ranks.map(function (r) {
      return [r, "rank " + r]; })));
    var diffs = [["", "nothing"]];
    ranks.forEach(function (r) { diffs.push(["r" + r, "rank " + r + " (baseline)"]); });
    files.forEach(function (x, i) {
      if (String(i) !== f) diffs.push(["f" + i, x.name + " (baseline)"]);
    });
    fillSelect($("fg-diff"), diffs);
    fillThreads();
    var total = procs.reduce(function (a, p) { return a + p[3]; }, 0);
    $("fg-summary").textContent = num(total) + " samples" +
      (meta.frequency ? " at " + meta.frequency + " Hz" : "") +
      (meta.duration ? " over " + (+meta.duration).toFixed(1) + " s" : "") +
      " · " + procs.length + " process" + (procs.length === 1 ? "" : "es") +
      (meta.host ? " · " + meta.host : "") + " · " + files[f].path;
    show($("fg-torch"), res[3].rows[0][0] > 0);
    if (res[3].rows[0][0] > 0)
      torchCharts($("fg-torch").querySelector(".torch"), "f" + f).catch(function (e) {
        $("fg-torch").querySelector(".torch").textContent = tidy(e.message); });
    return refresh(true);
  }).catch(function (e) { fgError(e.message); });
}

function fillThreads() {
  var pid = $("fg-pid").value;
  var ts = (fg.threads || []).filter(function (t) { return !pid || String(t[0]) === pid; });
  fillSelect($("fg-tid"), [["", "all threads"]].concat(ts.map(function (t) {
    return [t[1], (pid ? "" : "pid " + t[0] + " · ") + "tid " + t[1] +
            (t[2] ? " · " + t[2] : "") + " (" + num(t[3]) + ")"];
  })), true);
}

function filters() {
  return { f: $("fg-file").value, pid: $("fg-pid").value, tid: $("fg-tid").value,
           rank: $("fg-rank").value, state: $("fg-state").value };
}

function fgError(msg) {
  $("fg-error").textContent = tidy(msg);
  show($("fg-error"), !!msg);
}

/* Redraw: the time line (when the filters changed) and the flame graph. */
function refresh(timeline) {
  fgError("");
  var p = timeline ? loadTimeline() : Promise.resolve();
  return p.then(drawFlame);
}

function drawFlame() {
  var p = filters(), d = $("fg-diff").value, frame = $("fg-frame");
  if (fg.range) { p.from = fg.range[0]; p.to = fg.range[1]; }
  if (d.charAt(0) === "f") p.diff = d.slice(1);
  if (d.charAt(0) === "r") {
    if (p.rank === "") {
      /* Rank "all": draw the first other rank against the baseline, and say so. */
      var other = Array.prototype.map.call($("fg-rank").options, function (o) {
        return o.value; }).filter(function (v) { return v !== "" && v !== d.slice(1); })[0];
      if (other === undefined) {
        fgError("There is no other rank to compare with rank " + d.slice(1) + ".");
        show(frame, false);
        return;
      }
      $("fg-rank").value = other;
      p.rank = other;
    }
    p.diff_ranks = d.slice(1) + "," + p.rank;
    delete p.rank;
  }
  if ($("fg-inverted").checked) p.inverted = 1;
  p.width = Math.max(400, Math.min(4000, frame.parentNode.clientWidth - 4));
  show(frame, true);
  frame.dataset.loading = "1";
  frame.src = "/api/flamegraph?" + qs(p);
}

/* The flame graph frame loaded: an SVG, or the command's message (shown on the page). */
function flameLoaded() {
  var frame = $("fg-frame"), doc = frame.contentDocument;
  delete frame.dataset.loading;
  if (!doc || !doc.documentElement) {
    fgError("the flame graph could not be loaded");
    show(frame, false);
    return;
  }
  if (doc.contentType !== "image/svg+xml") {
    fgError(doc.body ? doc.body.textContent : "the flame graph could not be drawn");
    show(frame, false);
    return;
  }
  frame.style.height = (+doc.documentElement.getAttribute("height") + 4) + "px";
  /* Start on what is hot: import-time stacks at the start and idle threads (a quarter of
     the time at most) must not push the frames that matter below the fold. */
  var hot = !$("fg-inverted").checked && frame.contentWindow.probingZoomHot ?
    frame.contentWindow.probingZoomHot() : null;
  $("fg-zoom").textContent = hot ? "Zoomed on what is hot: " + hot.name + " (" +
    (100 * hot.share).toFixed(1) + "% of the time); Reset Zoom (or a click on the bottom " +
    "frame) shows everything." : "";
  show($("fg-zoom"), !!hot);
  frame.dataset.ready = "1";
}

function loadTimeline() {
  var p = filters();
  return api("/api/timeline", p).then(function (t) {
    fg.seconds = t.seconds;
    fg.t0 = t.t0;
    if (t.states && !$("fg-state").options.length) {
      return sql(fgSrc(), "SELECT DISTINCT state FROM samples ORDER BY 1").then(function (r) {
        fillSelect($("fg-state"), [["", "every state"]].concat(r[0].rows.map(function (x) {
          return [x[0], String(x[0])]; })));
        show($("fg-state-box"), true);
        drawTimeline();
      });
    }
    show($("fg-state-box"), !!t.states);
    drawTimeline();
  });
}

/* Bars of samples per second; the selected range highlighted. */
function drawTimeline() {
  var svg = $("tl-svg"), W = svg.clientWidth || 800, H = 90, B = 14;
  var secs = fg.seconds, n = secs.length ? secs[secs.length - 1][0] + 1 : 1;
  var lo = secs.length ? Math.min(0, secs[0][0]) : 0, span = Math.max(1, n - lo);
  /* The recording's own span (meta start and duration), not whole seconds around it. */
  if (fg.start > 0 && fg.duration > 0 && fg.t0 > 0) {
    lo = fg.start - fg.t0;
    span = fg.duration;
  }
  var max = secs.reduce(function (a, s) { return Math.max(a, s[1]); }, 1);
  clear(svg);
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  fg.scale = { lo: lo, span: span, W: W };
  secs.forEach(function (s) {
    var a = Math.max(s[0], lo), b = Math.min(s[0] + 1, lo + span);
    if (b <= a) return;
    var x = (a - lo) / span * W, w = Math.max(1, (b - a) / span * W - 1), h = s[1] / max * (H - B - 4);
    var out = fg.range && (s[0] + 1 <= fg.range[0] || s[0] >= fg.range[1]);
    svg.appendChild(el("svg:rect", { cls: out ? "bar out" : "bar", x: x.toFixed(1),
      y: (H - B - h).toFixed(1), width: w.toFixed(1), height: h.toFixed(1) }, [
      el("svg:title", { text: s[0] + " s: " + num(s[1]) + " samples" })]));
  });
  if (fg.range) {
    var a = (fg.range[0] - lo) / span * W, b = (fg.range[1] - lo) / span * W;
    svg.appendChild(el("svg:rect", { cls: "sel", x: a, y: 0, width: Math.max(1, b - a),
                                     height: H - B }));
  }
  var step = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].filter(function (s) {
    return span / s <= 8; })[0] || Math.ceil(span / 8);
  for (var t = Math.ceil(lo / step) * step; t <= lo + span + 1e-9; t += step) {
    svg.appendChild(el("svg:text", { x: Math.min(W - 24, (t - lo) / span * W), y: H - 2,
                                     text: t + " s" }));
  }
  svg.dataset.span = lo.toFixed(3) + "," + (lo + span).toFixed(3);
  $("tl-range").textContent = fg.range ? "showing " + fg.range[0] + " s to " + fg.range[1] +
                                         " s" : "";
  show($("tl-clear"), !!fg.range);
}

/* Drag on the time line: select whole seconds, then redraw the flame graph. */
function timelineDrag() {
  var svg = $("tl-svg"), start = null, box = null;
  function sec(ev) {
    var r = svg.getBoundingClientRect(), s = fg.scale;
    return s.lo + Math.max(0, Math.min(1, (ev.clientX - r.left) / r.width)) * s.span;
  }
  svg.addEventListener("mousedown", function (ev) {
    start = sec(ev);
    box = el("svg:rect", { cls: "sel", y: 0, height: 76 });
    svg.appendChild(box);
    ev.preventDefault();
  });
  window.addEventListener("mousemove", function (ev) {
    if (start === null) return;
    var s = fg.scale, a = Math.min(start, sec(ev)), b = Math.max(start, sec(ev));
    box.setAttribute("x", (a - s.lo) / s.span * s.W);
    box.setAttribute("width", Math.max(1, (b - a) / s.span * s.W));
  });
  window.addEventListener("mouseup", function (ev) {
    if (start === null) return;
    var a = Math.min(start, sec(ev)), b = Math.max(start, sec(ev));
    start = null;
    a = Math.floor(a);
    b = Math.max(a + 1, Math.ceil(b));
    fg.range = [a, b];
    drawTimeline();
    drawFlame();
  });
  $("tl-clear").addEventListener("click", function () {
    fg.range = null;
    drawTimeline();
    drawFlame();
  });
}

function startFlame() {
  show($("fg-none"), !files.length);
  show($("fg-controls"), files.length > 0);
  show($("timeline"), files.length > 0);
  show($("fg-frame"), files.length > 0);
  if (!files.length) return;
  fillSelect($("fg-file"), files.map(function (f, i) { return [i, f.name]; }));
  $("fg-file").addEventListener("change", loadRecording);
  $("fg-pid").addEventListener("change", function () { fillThreads(); refresh(true); });
  ["fg-tid", "fg-rank", "fg-state"].forEach(function (id) {
    $(id).addEventListener("change", function () { refresh(true); });
  });
  ["fg-diff", "fg-inverted"].forEach(function (id) {
    $(id).addEventListener("change", function () { refresh(false); });
  });
  $("fg-frame").addEventListener("load", flameLoaded);
  timelineDrag();
  loadRecording();
}

/* ---- SQL page ---------------------------------------------------------------------------- */

var running = null;

function sqlSource() {
  var v = $("sql-src").value;
  return v === "pid" ? "p" + $("sql-pid").value : v;
}

function renderResults(out, r) {
  var LIMIT = 1000;
  clear(out);
  r.results.forEach(function (res) {
    var table = el("table", { cls: "grid" });
    table.appendChild(el("tr", {}, res.columns.map(function (c) { return el("th", { text: c }); })));
    res.rows.slice(0, LIMIT).forEach(function (row) {
      table.appendChild(el("tr", {}, row.map(function (v) {
        if (v === null) return el("td", { cls: "null", text: "NULL" });
        return el("td", { cls: typeof v === "number" ? "num" : "", text: String(v) });
      })));
    });
    var n = res.rows.length;
    out.appendChild(el("div", { cls: "result" }, [table, el("p", { cls: "note",
      text: num(n) + " row" + (n === 1 ? "" : "s") + (n > LIMIT ? ", the first " + num(LIMIT) +
            " shown (Download CSV for all)" : "") })]));
  });
}

function runQuery() {
  if (running) return;
  var id = "q" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  var ctl = new AbortController(), t0 = performance.now();
  running = { id: id, ctl: ctl };
  $("sql-run").disabled = true;
  $("sql-cancel").disabled = false;
  show($("sql-error"), false);
  $("sql-status").textContent = "running…";
  api("/api/query", { src: sqlSource(), timeout: $("sql-timeout").value, id: id },
      $("sql-text").value, { signal: ctl.signal, any: true }).then(function (r) {
    if (r.error && !r.results) throw new Error(r.error);
    renderResults($("sql-results"), r);
    var ms = (performance.now() - t0).toFixed(0) + " ms";
    if (!r.ok) {
      $("sql-error").textContent = tidy(r.error || "the query failed");
      show($("sql-error"), true);
      $("sql-status").textContent = (r.cancelled ? "cancelled" : r.timed_out ? "stopped: time limit"
                                                                          : "failed") + " after " + ms;
    } else {
      $("sql-status").textContent = "done in " + ms + (r.truncated ? " · the result was cut " +
        "at 4 MiB: Download CSV for all of it" : "");
    }
  }).catch(function (e) {
    $("sql-error").textContent = e.name === "AbortError" ? "cancelled" : tidy(e.message);
    show($("sql-error"), true);
    $("sql-status").textContent = "";
  }).then(function () {
    running = null;
    $("sql-run").disabled = false;
    $("sql-cancel").disabled = true;
  });
}

function cancelQuery() {
  if (!running) return;
  var r = running;
  $("sql-status").textContent = "cancelling…";
  api("/api/cancel", { id: r.id }, "").catch(function () { r.ctl.abort(); });
}

function downloadCsv() {
  show($("sql-error"), false);
  $("sql-status").textContent = "preparing CSV…";
  api("/api/query", { src: sqlSource(), timeout: $("sql-timeout").value, format: "csv" },
      $("sql-text").value, { blob: true }).then(function (blob) {
    var a = el("a", { href: URL.createObjectURL(blob), download: "query.csv", id: "sql-csv-link" });
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    $("sql-status").textContent = "CSV downloaded (" + num(blob.size) + " bytes)";
  }).catch(function (e) {
    $("sql-error").textContent = tidy(e.message);
    show($("sql-error"), true);
    $("sql-status").textContent = "";
  });
}

function startSql() {
  fillSelect($("sql-src"), files.map(function (f, i) { return ["f" + i, f.name]; }).concat(
    [["pid", "a live process (its live tables)"]]));
  $("sql-src").addEventListener("change", function () {
    show($("sql-pid-box"), $("sql-src").value === "pid");
  });
  show($("sql-pid-box"), !files.length);
  $("sql-text").value = files.length
    ? "-- the functions most often running (leaf frames)\n" +
      "SELECT f.func, SUM(s.count) AS samples\n" +
      "FROM samples s JOIN frames f ON f.stack_id = s.stack_id AND f.depth = 0\n" +
      "GROUP BY f.func ORDER BY samples DESC LIMIT 20"
    : "SELECT * FROM python.backtrace ORDER BY tid, depth";
  $("sql-run").addEventListener("click", runQuery);
  $("sql-cancel").addEventListener("click", cancelQuery);
  $("sql-csv").addEventListener("click", downloadCsv);
  $("sql-text").addEventListener("keydown", function (ev) {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); runQuery(); }
  });
}

/* ---- live page --------------------------------------------------------------------------- */

var live = { pid: null, procs: [] };

function procLabel(p) {
  return (p.launcher ? "launcher" : p.rank === null ? "pid " + p.pid :
          "rank " + p.rank + (p.worker ? " worker" : ""));
}

/* "rank 1 · pid 4101", "launcher · pid 4100", or just "pid 4101" (said once). */
function procTitle(p) {
  var l = procLabel(p);
  return l === "pid " + p.pid ? l : l + " · pid " + p.pid;
}

function loadProcesses() {
  $("live-status").textContent = "reading /proc…";
  return api("/api/processes").then(function (r) {
    var t = clear($("live-procs")), jobs = {};
    live.procs = r.processes;
    r.jobs.forEach(function (j) { jobs[j.job] = j; });
    t.appendChild(el("tr", {}, ["pid", "rank", "agent", "user", "command", ""].map(function (h) {
      return el("th", { text: h }); })));
    var last = null;
    r.processes.forEach(function (p) {
      if (p.job !== last && p.job !== null) {
        var j = jobs[p.job];
        var btn = el("button", { text: "Backtraces of all " + j.ranks.length + " ranks" });
        btn.addEventListener("click", function () { showJob(j); });
        t.appendChild(el("tr", { cls: "job" }, [el("th", { colspan: 6 }, [
          "job " + p.job + (j.launched_by ? " (" + j.launched_by + ")" : "") +
          (j.world_size !== null ? " · world size " + j.world_size : "") + "  ", btn])]));
      } else if (p.job === null && last !== null) {
        t.appendChild(el("tr", { cls: "job" }, [el("th", { colspan: 6, text: "not in a job" })]));
      }
      last = p.job;
      var open = el("button", { text: "Backtrace" });
      open.addEventListener("click", function () { showProcess(p); });
      t.appendChild(el("tr", { id: "proc-" + p.pid, cls: p.pid === live.pid ? "sel" : "" }, [
        el("td", { cls: "num", text: String(p.pid) }),
        el("td", { text: p.launcher ? "launcher" : p.rank === null ? "" :
                         p.worker ? p.rank + " · worker" : String(p.rank) }),
        el("td", { text: p.agent ? "yes" : "no" }),
        el("td", { text: p.uid === null ? "" : String(p.uid) }),
        el("td", { text: p.command }), el("td", {}, [open])]));
    });
    $("live-status").textContent = r.processes.length + " Python process" +
      (r.processes.length === 1 ? "" : "es") + " you may inspect, " + r.jobs.length + " job" +
      (r.jobs.length === 1 ? "" : "s") + " · " + new Date().toLocaleTimeString();
  }).catch(function (e) { $("live-status").textContent = tidy(e.message); });
}

function backtrace(pid) {
  return api("/api/backtrace", { pid: pid, native: $("bt-native").checked ? 1 : "" }, undefined,
             { text: true });
}

function btBlock(text, error) {
  return el("pre", { cls: error ? "bt error" : "bt", text: text });
}

function refreshBacktrace() {
  var out = clear($("bt-out")), t0 = performance.now();
  if (live.job) return showJob(live.job);
  $("bt-status").textContent = "reading…";
  return backtrace(live.pid).then(function (text) {
    out.appendChild(btBlock(text));
    $("bt-status").textContent = "read in " + (performance.now() - t0).toFixed(0) + " ms at " +
                                 new Date().toLocaleTimeString();
  }).catch(function (e) {
    out.appendChild(btBlock(tidy(e.message), true));
    $("bt-status").textContent = "";
  });
}

function selectRow(pid) {
  Array.prototype.forEach.call(document.querySelectorAll("#live-procs tr"), function (tr) {
    tr.classList.toggle("sel", tr.id === "proc-" + pid);
  });
}

function showProcess(p) {
  live.pid = p.pid;
  live.job = null;
  selectRow(p.pid);
  show($("live-detail"), true);
  $("live-title").textContent = procTitle(p) + " · " + p.command.slice(0, 100);
  refreshBacktrace();
  var box = clear($("live-torch").querySelector(".torch"));
  show($("live-torch"), false);
  if (!p.agent) return;
  /* PyTorch's steps only where torch is imported; where it is not hooked, say so. */
  sql("p" + p.pid, "SELECT count(*) FROM python.modules WHERE name = 'torch'", { timeout: 10 })
    .then(function (res) {
      if (live.pid !== p.pid || !res[0].rows[0][0]) return; /* no torch: nothing to offer */
      show($("live-torch"), true);
      return torchCharts(box, "p" + p.pid).catch(function () {
        box.appendChild(el("p", { cls: "note", text: "This process has imported torch, but " +
          "no PyTorch steps were recorded: install the hooks with probing inject -p " +
          p.pid + " --torch" }));
      });
    }).catch(function (e) {
      show($("live-torch"), true);
      box.appendChild(el("p", { cls: "note", text: "Cannot tell whether this process uses " +
        "PyTorch: " + tidy(e.message) }));
    });
}

/* A job's ranks side by side, each one's backtrace read at the same moment. */
function showJob(j) {
  live.job = j;
  live.pid = null;
  selectRow(null);
  show($("live-detail"), true);
  show($("live-torch"), false);
  $("live-title").textContent = "job " + j.job + ": every rank's backtrace";
  var out = clear($("bt-out")), grid = el("div", { cls: "ranks" });
  out.appendChild(grid);
  $("bt-status").textContent = "reading " + j.ranks.length + " processes…";
  return Promise.all(j.ranks.map(function (pid) {
    var p = live.procs.filter(function (x) { return x.pid === pid; })[0] || { pid: pid, rank: null };
    var col = el("div", {}, [el("h3", { text: procTitle(p) })]);
    grid.appendChild(col);
    return backtrace(pid).then(function (text) { col.appendChild(btBlock(text)); },
      function (e) { col.appendChild(btBlock(tidy(e.message), true)); });
  })).then(function () {
    $("bt-status").textContent = "read at " + new Date().toLocaleTimeString();
  });
}

function startLive() {
  $("live-refresh").addEventListener("click", loadProcesses);
  $("bt-refresh").addEventListener("click", refreshBacktrace);
  loadProcesses();
}

/* ---- start ------------------------------------------------------------------------------- */

api("/api/files").then(function (r) {
  files = r.files;
  $("version").textContent = "probing " + r.version;
  window.addEventListener("hashchange", route);
  route();
}).catch(function (e) {
  document.body.appendChild(el("pre", { cls: "error", text: tidy(e.message) }));
});
})();
