/*
 * The flame graph's interaction: user/report/flamegraph.c embeds this file in every SVG, after
 * the frames and the layout constants C (width, pad, font, fh = frame height, top, bottom,
 * inverted, total samples; wall: weights are nanoseconds of wall-clock time, shown in seconds;
 * panels when several graphs are drawn side by side: each one's left
 * edge x, width w and samples). Every frame is a <g> in #frames with data-o (samples to its
 * left in its graph), data-n (its samples), data-p (its panel, if there are panels), a class
 * (py, na, kn; rt for the root) and a <title> whose first line is its name. Geometry is
 * recomputed from samples, never from rounded pixels. Each panel zooms on its own; search
 * shows the share matched in each panel (#pmN) and over all of them (#matched).
 */
(function () {
"use strict";
var CW = C.font * 0.59;
var frames = [], term = null;
var $ = function (id) { return document.getElementById(id); };
var details = $("details"), matched = $("matched");
var resetBtn = $("reset"), searchBtn = $("search");
var P = C.panels || [{ x: C.pad, w: C.width - 2 * C.pad, total: C.total }];
P.forEach(function (p, k) {
  var l = $("pl" + k);
  p.zoomed = null;
  p.label = C.panels && l ? l.textContent : "";
  p.m = C.panels ? $("pm" + k) : null;
});
function pct(n, total) { return (100 * n / (total || C.total)).toFixed(2) + "%"; }
function count(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
function amount(n) { return C.wall ? (n / 1e9).toFixed(3) + " s" : count(n) + " samples"; }
function shortName(f) {
  if (!f.py) return f.name;
  var p = f.name.indexOf(" (");
  if (p < 0) return f.name;
  var s = f.name.lastIndexOf("/");
  return s > p ? f.name.slice(0, p + 2) + f.name.slice(s + 1) : f.name;
}
function fit(f, w) {
  var max = Math.floor((w - 6) / CW), cps = Array.from(f.label);
  var s = max < 3 ? "" : cps.length <= max ? f.label :
    cps.slice(0, max - 2).join("") + "..";
  if (f.t.textContent !== s) f.t.textContent = s;
}
function place(f, x, w) {
  f.r.setAttribute("x", x.toFixed(2));
  f.r.setAttribute("width", w.toFixed(2));
  f.t.setAttribute("x", (x + 3).toFixed(2));
  fit(f, w);
}
function show(f, on) { f.g.classList.toggle("h", !on); }
var gs = $("frames").getElementsByTagName("g");
for (var i = 0; i < gs.length; i++) {
  var g = gs[i], r = g.getElementsByTagName("rect")[0];
  var y = +r.getAttribute("y");
  var f = { g: g, r: r, t: g.getElementsByTagName("text")[0],
    o: +g.getAttribute("data-o"), n: +g.getAttribute("data-n"),
    d: Math.round(C.inverted ? (y - C.top) / C.fh : (C.bottom - y) / C.fh),
    name: g.getElementsByTagName("title")[0].textContent.split("\n")[0],
    py: g.classList.contains("py"), root: g.classList.contains("rt"),
    p: P[+(g.getAttribute("data-p") || 0)] || P[0] };
  f.label = shortName(f);
  g.setAttribute("data-i", i);
  frames.push(f);
}
function frameOf(ev) {
  var g = ev.target.closest ? ev.target.closest("g[data-i]") : null;
  return g ? frames[+g.getAttribute("data-i")] : null;
}
function resetPanel(p) {
  p.zoomed = null;
  frames.forEach(function (f) {
    if (f.p !== p) return;
    show(f, true);
    f.g.classList.remove("a");
    place(f, p.x + f.o / p.total * p.w, f.n / p.total * p.w);
  });
}
/* The graph as high as its shown frames: rows no shown frame reaches (deep stacks zoomed
   away) are cut out of the image, so that the frames shown are not pushed down; the frame
   of a page holding the image (probing serve) follows. */
var svg = document.documentElement, H = +svg.getAttribute("height");
var W = +svg.getAttribute("width"), bg = svg.querySelector("rect");
function fitHeight() {
  var deepest = 0, cut;
  frames.forEach(function (f) { if (f.d > deepest && !f.g.classList.contains("h")) deepest = f.d; });
  cut = Math.max(0, Math.round((C.bottom - C.top) / C.fh) - deepest) * C.fh;
  $("frames").setAttribute("transform", C.inverted ? "" : "translate(0," + -cut + ")");
  [details, matched].forEach(function (t) { t.setAttribute("y", H - 12 - cut); });
  svg.setAttribute("height", H - cut);
  svg.setAttribute("viewBox", "0 0 " + W + " " + (H - cut));
  if (bg) bg.setAttribute("height", H - cut);
  if (window.frameElement) window.frameElement.style.height = (H - cut + 4) + "px";
}
function syncReset() {
  resetBtn.classList.toggle("on", P.some(function (p) { return p.zoomed; }));
}
function reset() {
  P.forEach(resetPanel);
  syncReset();
  fitHeight();
}
function zoom(z) {
  var p = z.p;
  if (z.root) { resetPanel(p); syncReset(); fitHeight(); return; }
  p.zoomed = z;
  frames.forEach(function (f) {
    if (f.p !== p) return;
    if (f.d < z.d && f.o <= z.o && f.o + f.n >= z.o + z.n) {
      show(f, true);
      f.g.classList.add("a");
      place(f, p.x, p.w);
    } else if (f.d >= z.d && f.o >= z.o && f.o + f.n <= z.o + z.n) {
      show(f, true);
      f.g.classList.remove("a");
      place(f, p.x + (f.o - z.o) / z.n * p.w, f.n / z.n * p.w);
    } else {
      show(f, false);
    }
  });
  syncReset();
  fitHeight();
}
/*
 * Zoom on what is hot: down from the root, the largest child while it holds at least 3/4 of
 * all the time (what is hidden is then a quarter at most: import-time stacks at a process's
 * start, idle threads); the zoom is on the deepest of those that leaves something out (the
 * top of the hot subtree, below the common root chain). A graph of several panels, or one
 * where nothing would be left out, stays whole. Return the
 * frame zoomed on, {name, share}, or null. probing serve's page calls it when the graph
 * loads (window.probingZoomHot).
 */
function zoomHot() {
  if (C.panels) return null;
  var root = frames.filter(function (f) { return f.root; })[0], cur = root, best, to = null;
  if (!root || !root.n) return null;
  for (;;) {
    best = null;
    frames.forEach(function (f) {
      if (f.d === cur.d + 1 && f.o >= cur.o && f.o + f.n <= cur.o + cur.n &&
          (!best || f.n > best.n)) best = f;
    });
    if (!best || best.n < 0.75 * root.n) break;
    /* The top of the subtree: the frame where something is left out, not its callees
       that hold all of its time. */
    if (best.n < cur.n) to = best;
    cur = best;
  }
  if (!to) return null;
  zoom(to);
  return { name: to.name, share: to.n / root.n };
}
window.probingZoomHot = zoomHot;
function search(s) {
  frames.forEach(function (f) { f.g.classList.remove("m"); });
  if (!s) {
    term = null;
    matched.textContent = " ";
    P.forEach(function (p) { if (p.m) p.m.textContent = " "; });
    searchBtn.textContent = "Search";
    return;
  }
  term = s;
  var flags = /[A-Z]/.test(s) ? "" : "i", re;
  try { re = new RegExp(s, flags); }
  catch (e) { re = new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), flags); }
  var hits = frames.filter(function (f) { return !f.root && re.test(f.name); });
  hits.forEach(function (f) { f.g.classList.add("m"); });
  /* A sample is matched once however many of its frames match (recursion): count
     the union of the matching frames' sample ranges, in each panel. */
  var sum = 0;
  P.forEach(function (p) {
    var mine = hits.filter(function (f) { return f.p === p; }), n = 0, end = 0;
    mine.sort(function (a, b) { return a.o - b.o; });
    mine.forEach(function (f) {
      var from = Math.max(f.o, end), to = f.o + f.n;
      if (to > from) { n += to - from; end = to; }
    });
    if (p.m) p.m.textContent = pct(n, p.total);
    sum += n;
  });
  matched.textContent = "Matched: " + pct(sum) + " (" + (C.wall ? amount(sum) : count(sum)) +
    " of " + amount(C.total) + ")";
  searchBtn.textContent = "Reset Search";
}
function ask() {
  var s = window.prompt("Search frames: a regular expression (or text), " +
    "case-insensitive unless it has capitals", term || "");
  if (s !== null) search(s);
}
var box = $("frames");
box.addEventListener("click", function (ev) {
  var f = frameOf(ev);
  if (f) zoom(f);
});
box.addEventListener("mouseover", function (ev) {
  var f = frameOf(ev);
  if (f) details.textContent = (f.p.label ? f.p.label + ": " : "") + f.name + " (" +
    amount(f.n) + ", " + pct(f.n, f.p.total) + ")";
});
box.addEventListener("mouseout", function () { details.textContent = " "; });
resetBtn.addEventListener("click", reset);
searchBtn.addEventListener("click", function () { if (term) search(null); else ask(); });
window.addEventListener("keydown", function (ev) {
  if ((ev.ctrlKey || ev.metaKey) && (ev.key === "f" || ev.key === "F")) {
    ev.preventDefault();
    ask();
  } else if (ev.key === "Escape") {
    search(null);
    reset();
  }
});
})();
