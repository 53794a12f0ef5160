/*
 * The flame graph's interaction: user/report/flamegraph.c embeds this file in every SVG, after
 * the frames and the layout constants C (width, pad, font, fh = frame height, top, bottom,
 * inverted, total samples; wall: weights are nanoseconds of wall-clock time, shown in seconds).
 * Every frame is a <g> in #frames with data-o (samples to its left),
 * data-n (its samples), a class (py, na, kn; rt for the root) and a <title> whose first line is
 * its name. Geometry is recomputed from samples, never from rounded pixels.
 */
(function () {
"use strict";
var W = C.width - 2 * C.pad, CW = C.font * 0.59;
var frames = [], zoomed = null, term = null;
var $ = function (id) { return document.getElementById(id); };
var details = $("details"), matched = $("matched");
var resetBtn = $("reset"), searchBtn = $("search");
function pct(n) { return (100 * n / C.total).toFixed(2) + "%"; }
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
    py: g.classList.contains("py"), root: g.classList.contains("rt") };
  f.label = shortName(f);
  g.setAttribute("data-i", i);
  frames.push(f);
}
function frameOf(ev) {
  var g = ev.target.closest ? ev.target.closest("g[data-i]") : null;
  return g ? frames[+g.getAttribute("data-i")] : null;
}
function reset() {
  zoomed = null;
  frames.forEach(function (f) {
    show(f, true);
    f.g.classList.remove("a");
    place(f, C.pad + f.o / C.total * W, f.n / C.total * W);
  });
  resetBtn.classList.remove("on");
}
function zoom(z) {
  if (z.root) { reset(); return; }
  zoomed = z;
  frames.forEach(function (f) {
    if (f.d < z.d && f.o <= z.o && f.o + f.n >= z.o + z.n) {
      show(f, true);
      f.g.classList.add("a");
      place(f, C.pad, W);
    } else if (f.d >= z.d && f.o >= z.o && f.o + f.n <= z.o + z.n) {
      show(f, true);
      f.g.classList.remove("a");
      place(f, C.pad + (f.o - z.o) / z.n * W, f.n / z.n * W);
    } else {
      show(f, false);
    }
  });
  resetBtn.classList.add("on");
}
function search(s) {
  frames.forEach(function (f) { f.g.classList.remove("m"); });
  if (!s) {
    term = null;
    matched.textContent = " ";
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
     the union of the matching frames' sample ranges. */
  hits.sort(function (a, b) { return a.o - b.o; });
  var sum = 0, end = 0;
  hits.forEach(function (f) {
    var from = Math.max(f.o, end), to = f.o + f.n;
    if (to > from) { sum += to - from; end = to; }
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
  if (f) details.textContent = f.name + " (" + amount(f.n) + ", " + pct(f.n) + ")";
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
