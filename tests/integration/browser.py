"""Headless Chromium for the flame graph tests: run JavaScript in an SVG, take screenshots.

run_in_svg() copies the SVG, appends a <script> that drives the page the way a user would
(clicks, key presses; window.prompt answered by the test) and stores what it saw as JSON in
a <text id="test-result"> element; 'chromium --dump-dom' prints the DOM after the page has
loaded and its scripts ran, and the JSON is read back from it.
"""
import html
import json
import os
import re
import shutil

import harness

# Without the networking flags Chromium waits for the network on this closed machine.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("chromium is not installed (scripts/install-deps.sh installs it)")


def _run(args, timeout=90):
    profile = harness.tmp(f"chromium-profile-{len(os.listdir(harness.tmp()))}")
    return harness.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                       timeout=timeout)


# Helpers every test script gets: frames by name, geometry, events.
PRELUDE = r"""
var T = {};
T.frames = function () { return Array.from(document.querySelectorAll('#frames > g')); };
T.name = function (g) { return g.querySelector('title').textContent.split('\n')[0]; };
T.byName = function (n) { return T.frames().filter(function (g) { return T.name(g) === n; }); };
T.geom = function (g) {
  var r = g.querySelector('rect');
  return { name: T.name(g), x: +r.getAttribute('x'), w: +r.getAttribute('width'),
           y: +r.getAttribute('y'), visible: getComputedStyle(g).display !== 'none',
           label: g.querySelector('text').textContent, cls: g.getAttribute('class') };
};
T.all = function () { return T.frames().map(T.geom); };
T.click = function (el) { el.dispatchEvent(new MouseEvent('click', { bubbles: true })); };
T.key = function (key, ctrl) {
  window.dispatchEvent(new KeyboardEvent('keydown', { key: key, ctrlKey: !!ctrl, bubbles: true }));
};
T.text = function (id) { return document.getElementById(id).textContent; };
"""


def run_in_svg(svg_path, script):
    """Run @script (JavaScript; it sets R.<key> = value) after the SVG's own script.

    Returns the dict R."""
    with open(svg_path, encoding="utf-8") as f:
        svg = f.read()
    assert svg.rstrip().endswith("</svg>"), "not an SVG document"
    test_js = ("<script type=\"text/ecmascript\"><![CDATA[\n(function () {\nvar R = {};\n" +
               PRELUDE + "try {\n" + script +
               "\n} catch (e) { R.error = String(e) + '\\n' + e.stack; }\n"
               "var t = document.createElementNS('http://www.w3.org/2000/svg', 'text');\n"
               "t.setAttribute('id', 'test-result');\n"
               "t.textContent = JSON.stringify(R);\n"
               "document.documentElement.appendChild(t);\n})();\n]]></script>\n")
    idx = svg.rstrip().rfind("</svg>")
    page = harness.tmp("page-" + os.path.basename(svg_path))
    with open(page, "w", encoding="utf-8") as f:
        f.write(svg[:idx] + test_js + svg[idx:])
    p = _run(["--dump-dom", "file://" + page])
    m = re.search(r'<text id="test-result">(.*?)</text>', p.stdout, re.S)
    assert m, f"the page did not run the test script (exit {p.returncode}): {p.stderr[-800:]}"
    result = json.loads(html.unescape(m.group(1)))
    assert "error" not in result, "test script failed: " + result["error"]
    return result


def screenshot(svg_path, png_path, width, height):
    """Render @svg_path at width x height into @png_path; return the PNG's size (w, h)."""
    p = _run(["--screenshot=" + png_path, f"--window-size={width},{height}",
              "file://" + os.path.abspath(svg_path)])
    assert os.path.exists(png_path), f"no screenshot: {p.stderr[-800:]}"
    with open(png_path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
