"""probing serve's pages in a real browser: Debian's chromium, headless, driven over the
DevTools pipe (cdp.py) with real mouse events. Each step is checked against ground truth
(the recording's counts, the PyTorch hooks' rows) and leaves a screenshot in
build/test-artifacts/serve/ to look at."""
import json
import os
import re
import shutil
import sqlite3
import sys

import cdp
import harness
import recordings
import serve_helpers
import test_torch
import torchenv
from serve_helpers import Server

ARTIFACTS = os.path.join(harness.BUILD, "test-artifacts", "serve")


def shot(b, name):
    path = b.screenshot(harness.tmp(name))
    os.makedirs(ARTIFACTS, exist_ok=True)
    shutil.copy(path, os.path.join(ARTIFACTS, name))


# The flame graph's frames, read inside its frame: name -> {x, w, n, fill, visible}.
FRAMES_JS = """(function () {
  var f = document.getElementById('fg-frame'), d = f.contentDocument, out = {};
  if (!d || !f.dataset.ready) return null;
  d.querySelectorAll('#frames > g').forEach(function (g) {
    var r = g.querySelector('rect'), name = g.querySelector('title').textContent.split('\\n')[0];
    if (out[name]) return;
    out[name] = { x: +r.getAttribute('x'), w: +r.getAttribute('width'), y: +r.getAttribute('y'),
                  n: +g.getAttribute('data-n'), fill: r.getAttribute('fill'),
                  visible: getComputedStyle(g).display !== 'none' };
  });
  return out;
})()"""


def wait_flame(b, src_part):
    """Wait for the flame graph whose URL holds @src_part; return its frames."""
    b.wait("(function () { var f = document.getElementById('fg-frame');"
           " return f.dataset.ready === '1' && !f.dataset.loading &&"
           f" f.src.indexOf({json.dumps(src_part)}) >= 0; }})()",
           what="flame graph " + src_part)
    return b.eval(FRAMES_JS)


def choose(b, select_id, value):
    """Pick @value in a <select> as a user would (the change event included)."""
    b.eval(f"""(function () {{ var s = document.getElementById({json.dumps(select_id)});
      s.value = {json.dumps(str(value))};
      s.dispatchEvent(new Event('change', {{bubbles: true}})); }})()""")


@harness.timeout(120)
def test_browser_recording_pages():
    db = serve_helpers.job_db()
    secs = serve_helpers.per_second(db)
    # Recorded from second 0.25 for 3.5 s: samples in seconds 0 to 3.
    con = sqlite3.connect(db)
    con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('duration', 3.5)")
    con.commit()
    con.close()
    other = recordings.make_db("_start;main;compute 10\n", name="other.db")
    s = Server("-i", db, other)
    with cdp.Browser(width=1280, height=900) as b:
        b.goto(s.url)
        # The token went into a cookie; the address bar no longer shows it.
        assert b.eval("location.href") == s.base + "/"
        frames = wait_flame(b, "f=0")
        assert frames["all"]["n"] == 1040 and frames["compute"]["n"] == 520
        assert b.eval("document.getElementById('fg-summary').textContent").startswith(
            "1,040 samples at 99 Hz")
        # The time line: a bar per second, as many samples as the recording has.
        bars = b.eval("Array.from(document.querySelectorAll('#tl-svg rect.bar')).map("
                      "function (r) { return r.querySelector('title').textContent; })")
        assert bars == ["%d s: %s samples" % (t, format(n, ",")) for t, n in sorted(secs.items())]
        # Drawn over the recording's own span, 0.25 s to 3.75 s, not 0 to 4 s.
        assert b.eval("document.getElementById('tl-svg').dataset.span") == "0.250,3.750"
        ticks = b.eval("Array.from(document.querySelectorAll('#tl-svg text')).map("
                       "function (t) { return t.textContent; })")
        assert ticks == ["1 s", "2 s", "3 s"], ticks
        shot(b, "flame.png")

        # Click a frame: it fills the width, what is not under it is hidden.
        box = b.eval("""(function () {
          var f = document.getElementById('fg-frame'), d = f.contentDocument;
          var g = Array.from(d.querySelectorAll('#frames > g')).filter(function (g) {
            return g.querySelector('title').textContent.split('\\n')[0] === 'allreduce'; })[0];
          var r = g.querySelector('rect').getBoundingClientRect(), o = f.getBoundingClientRect();
          f.scrollIntoView();
          o = f.getBoundingClientRect();
          return [o.left + r.left + r.width / 2, o.top + r.top + r.height / 2];
        })()""")
        b.click_at(*box)
        b.wait("document.getElementById('fg-frame').contentDocument"
               ".getElementById('reset').classList.contains('on')", what="the zoom")
        frames = b.eval(FRAMES_JS)
        width = frames["all"]["w"]
        assert abs(frames["allreduce"]["w"] - width) < 0.5, frames["allreduce"]
        assert frames["allreduce"]["x"] == frames["all"]["x"]
        assert not frames["compute"]["visible"] and frames["step (/app/train.py:20)"]["visible"]
        shot(b, "flame-zoom.png")

        # Drag over seconds 1-2 of the time line: the graph of that second only.
        r = b.eval("(function () { var s = document.getElementById('tl-svg');"
                   " s.scrollIntoView(); var r = s.getBoundingClientRect();"
                   " return [r.left, r.top, r.width, r.height]; })()")
        x = lambda t: r[0] + (t - 0.25) / 3.5 * r[2]
        b.drag(x(1.2), r[1] + 40, x(1.8), r[1] + 40)
        frames = wait_flame(b, "from=1&to=2")
        assert frames["all"]["n"] == secs[1], (frames["all"], secs)
        assert b.eval("document.getElementById('tl-range').textContent") == \
            "showing 1 s to 2 s"
        assert b.eval("document.querySelectorAll('#tl-svg rect.bar.out').length") == 3
        shot(b, "flame-range.png")
        b.click("#tl-clear")
        frames = wait_flame(b, "f=0&width")
        assert frames["all"]["n"] == 1040

        # Rank 1 compared with rank 0: compute's self share fell most (blue), allreduce's
        # grew as much (red). Rank is "all": the other rank is chosen, not an error.
        choose(b, "fg-diff", "r0")
        frames = wait_flame(b, "diff_ranks=0%2C1")
        assert b.eval("document.getElementById('fg-rank').value") == "1"
        assert b.eval("document.getElementById('fg-error').hidden")
        assert frames["all"]["n"] == 520
        assert frames["compute"]["fill"] == "rgb(35,35,255)", frames["compute"]
        assert frames["allreduce"]["fill"] == "rgb(255,35,35)", frames["allreduce"]
        sub = b.eval("document.getElementById('fg-frame').contentDocument"
                     ".getElementById('subtitle').textContent")
        assert "rank 1" in sub and "baseline: rank 0" in sub, sub
        shot(b, "flame-diff.png")
        # A filter that selects nothing: the command's reason, on the page.
        choose(b, "fg-diff", "")
        b.eval("document.getElementById('fg-rank').appendChild(new Option('rank 9', '9'))")
        choose(b, "fg-rank", 9)
        b.wait("!document.getElementById('fg-error').hidden", what="the error")
        err = b.eval("document.getElementById('fg-error').textContent")
        assert "no samples of rank 9" in err and "ranks 0, 1" in err, err
        assert b.eval("getComputedStyle(document.getElementById('fg-frame')).display") == "none"

        # SQL: a query, its table; an error inline; CSV; a query cancelled.
        b.click("#nav-sql")
        b.wait("!document.getElementById('tab-sql').hidden")
        b.eval("document.getElementById('sql-text').value = 'SELECT thread, SUM(count) AS n"
               " FROM samples GROUP BY thread ORDER BY n DESC'")
        b.click("#sql-run")
        b.wait("document.querySelectorAll('#sql-results table').length === 1")
        cells = b.eval("Array.from(document.querySelectorAll('#sql-results tr')).map("
                       "function (tr) { return Array.from(tr.children).map("
                       "function (c) { return c.textContent; }); })")
        assert cells == [["thread", "n"], ["MainThread", "1000"], ["loader", "40"]], cells
        shot(b, "sql.png")
        b.eval("document.getElementById('sql-text').value = 'SELECT * FROM sampels'")
        b.click("#sql-run")
        b.wait("!document.getElementById('sql-error').hidden")
        err = b.eval("document.getElementById('sql-error').textContent")
        assert "no such table: sampels" in err and \
            re.search(r"views: [^;]*\bframes\b", err), err
        shot(b, "sql-error.png")
        b.eval("document.getElementById('sql-text').value = 'SELECT * FROM processes'")
        b.click("#sql-csv")
        b.wait("/CSV downloaded/.test(document.getElementById('sql-status').textContent)")
        csv = recordings.probing_raw("query", "-i", db, "-f", "csv", "SELECT * FROM processes")
        assert b.eval("document.getElementById('sql-status').textContent") == \
            "CSV downloaded (%d bytes)" % len(csv.stdout)
        b.eval("document.getElementById('sql-text').value = 'WITH RECURSIVE c(x) AS (SELECT 1"
               " UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c'")
        b.click("#sql-run")
        harness.wait_for(lambda: s.children(), what="the query running")
        b.click("#sql-cancel")
        b.wait("/^cancelled/.test(document.getElementById('sql-status').textContent)",
               what="the cancelled query")
        assert b.eval("document.getElementById('sql-error').textContent") == \
            "the query was cancelled"
        harness.wait_for(lambda: not s.children(), what="the query's process gone")
        assert not [m for m in b.console if "exception" in m], b.console
    assert s.stop() == 0


SLEEPER = """
import time
def rank_one_waits_here():
    print("READY", flush=True)
    time.sleep(120)
rank_one_waits_here()
"""


@harness.timeout(180)
def test_browser_live_page():
    job = {"TORCHELASTIC_RUN_ID": "browser-job", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29600"}
    # Rank 0 trains with the PyTorch hooks (every step), paused after 6 steps.
    os.environ.update(dict(job, RANK="0", LOCAL_RANK="0"))
    try:
        t = test_torch.Train(torchenv.HOST, "--steps", 6, "--pause-at", "0,6")
    finally:
        for k in list(job) + ["RANK", "LOCAL_RANK"]:
            os.environ.pop(k, None)
    t.wait_line("PAUSE 0")
    test_torch.inject(t.pid)
    test_torch.config(t.pid, "torch_every=1")
    test_torch.inject(t.pid, "--torch")
    t.go("PAUSE 6")
    rows = test_torch.rows(t.pid)
    total = {}
    for r in rows:
        if r["depth"] == 0 or r["stage"] == "step":
            total[r["step"]] = total.get(r["step"], 0) + r["duration"]
    assert sorted(total) == [1, 2, 3, 4, 5, 6]
    # Rank 1: a plain Python process of the same job.
    script = harness.tmp("rank1.py")
    with open(script, "w") as f:
        f.write(SLEEPER)
    r1 = harness.spawn([sys.executable, script], env=dict(job, RANK="1", LOCAL_RANK="1"),
                       stdout=harness.subprocess.PIPE)
    assert r1.stdout.readline().strip() == b"READY"

    # The same rows saved into a file: its page shows the same charts.
    saved = harness.tmp("steps.db")
    p = harness.probing("query", "-p", t.pid, "--save", saved)
    assert p.returncode == 0, p.stderr
    s = Server("-i", saved)
    with cdp.Browser(width=1280, height=1000) as b:
        b.goto(s.url)
        b.wait("!document.getElementById('fg-torch').hidden &&"
               " document.querySelectorAll('#fg-torch circle').length === 24 + 6 *"
               " document.querySelectorAll('#fg-torch svg.chart')[1]"
               ".querySelectorAll('path.line').length", what="the saved trace's charts")
        tips = b.eval("Array.from(document.querySelectorAll('#fg-torch svg.chart')[0]"
                      ".querySelectorAll('circle title')).map(function (t) {"
                      " return t.textContent; })")
        for step, secs in total.items():
            assert "total: step %d, %.2f ms" % (step, secs * 1000) in tips, (step, tips[:8])
        # A file of PyTorch rows only has no samples to draw: said on the page.
        b.wait("!document.getElementById('fg-error').hidden")
        assert "has no samples" in b.eval("document.getElementById('fg-error').textContent")
        assert b.eval("getComputedStyle(document.getElementById('fg-frame')).display") == "none"
        href = b.eval("document.getElementById('torch-chrome-f0').getAttribute('href')")
        trace = b.eval(f"fetch({json.dumps(href)}).then(function (r) {{ return r.json(); }})")
        assert len([e for e in trace["traceEvents"] if e["ph"] == "X" and
                    e["tid"] != test_torch.STEPS_TID]) == len(rows)
        b.eval("document.getElementById('fg-torch').scrollIntoView()")
        shot(b, "saved-torch.png")
        b.click("#nav-live")
        b.wait(f"document.getElementById('proc-{t.pid}') !== null &&"
               f" document.getElementById('proc-{r1.pid}') !== null", what="both ranks listed")
        head = b.eval("Array.from(document.querySelectorAll('#live-procs tr.job')).map("
                      "function (tr) { return tr.textContent; })")
        assert [h for h in head if "job browser-job (torchrun) · world size 2" in h], head
        # The job's launcher: the process that started both ranks (this test's runner).
        launcher = b.eval(f"document.getElementById('proc-{os.getpid()}').children[1]"
                          ".textContent")
        assert launcher == "launcher", launcher
        b.click(f"#proc-{t.pid} button")
        b.wait("document.querySelector('#bt-out pre.bt') !== null", what="the backtrace")
        bt = b.eval("document.querySelector('#bt-out pre').textContent")
        assert f"Process {t.pid}:" in bt and "pause (" in bt and "torch_train.py" in bt, bt
        # The step chart: total, forward, backward and step, 6 points each.
        b.wait("document.querySelectorAll('#live-torch svg.chart').length === 2 &&"
               " document.querySelectorAll('#live-torch svg.chart')[0]"
               ".querySelectorAll('circle').length === 24", what="the PyTorch charts")
        tips = b.eval("Array.from(document.querySelectorAll('#live-torch svg.chart')[0]"
                      ".querySelectorAll('circle title')).map(function (t) {"
                      " return t.textContent; })")
        for step, secs in total.items():
            assert "total: step %d, %.2f ms" % (step, secs * 1000) in tips, (step, tips[:8])
        mods = b.eval("document.querySelectorAll('#live-torch svg.chart')[1]"
                      ".querySelectorAll('path.line').length")
        assert mods >= 3, mods
        b.eval("window.scrollTo(0, 0)")
        shot(b, "live.png")
        b.eval("document.getElementById('live-torch').scrollIntoView()")
        shot(b, "live-torch.png")
        # The Chrome trace, one click away: the same rows as complete events.
        href = b.eval(f"document.getElementById('torch-chrome-p{t.pid}').getAttribute('href')")
        assert href == f"/api/chrome?src=p{t.pid}"
        trace = b.eval(f"fetch({json.dumps(href)}).then(function (r) {{ return r.json(); }})")
        events = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] != test_torch.STEPS_TID]
        assert len(events) == len(rows), (len(events), len(rows))
        # Refreshing the backtrace reads it again.
        before = b.eval("document.getElementById('bt-status').textContent")
        b.click("#bt-refresh")
        b.wait(f"document.getElementById('bt-status').textContent !== {json.dumps(before)} &&"
               " /^read in/.test(document.getElementById('bt-status').textContent)")
        # The job's ranks side by side.
        b.click(f"#proc-{t.pid}")  # a row click does nothing; the job's button does
        b.eval("Array.from(document.querySelectorAll('#live-procs tr.job button'))"
               ".filter(function (x) { return /all 2 ranks/.test(x.textContent); })[0].click()")
        b.wait("document.querySelectorAll('.ranks pre.bt').length === 2", what="two backtraces")
        cols = b.eval("Array.from(document.querySelectorAll('.ranks > div')).map("
                      "function (d) { return d.textContent; })")
        assert cols[0].startswith(f"rank 0 · pid {t.pid}") and "pause (" in cols[0], cols
        assert cols[1].startswith(f"rank 1 · pid {r1.pid}") and "rank_one_waits_here (" in cols[1]
        # The ranks share the page's width (before: 560 px each, a third of it empty).
        widths = b.eval("[document.querySelector('.ranks').getBoundingClientRect().width].concat("
                        "Array.from(document.querySelectorAll('.ranks > div')).map("
                        "function (d) { return d.getBoundingClientRect().width; }))")
        assert sum(widths[1:]) > 0.95 * widths[0] and widths[0] > 1200, widths
        shot(b, "live-job.png")
        assert not [m for m in b.console if "exception" in m], b.console
    assert s.stop() == 0
    t.go()
    t.result()


@harness.timeout(120)
def test_browser_flame_starts_on_what_is_hot():
    """Import-time stacks at a process's start (60 frames deep, 10% of the time) do not push
    the frames that matter below the fold (issue 20 item 10): the graph starts zoomed on the
    hottest subtree below the common root chain (train, 90%), the import tower is hidden and
    the image is only as high as the frames shown, the page says so; Reset Zoom shows
    everything again at full height."""
    chain = "_start;__libc_start_main;main;Py_RunMain;<module> (/app/train.py:1)"
    imports = ";".join("_find_and_load (<frozen importlib._bootstrap>:%d)" % (1000 + i)
                       for i in range(60))
    db = recordings.make_db(
        f"{chain};{imports};exec_module 100\n"
        f"{chain};train (/app/train.py:10);step (/app/train.py:20);matmul 600\n"
        f"{chain};train (/app/train.py:10);step (/app/train.py:20);forward 300\n",
        name="imports.db")
    s = Server("-i", db)
    with cdp.Browser(width=1280, height=900) as b:
        b.goto(s.url)
        frames = wait_flame(b, "f=0")
        assert frames["all"]["n"] == 1000
        train = frames["train (/app/train.py:10)"]
        assert train["visible"] and abs(train["w"] - frames["all"]["w"]) < 0.5, train
        assert not frames["exec_module"]["visible"]
        note = b.eval("document.getElementById('fg-zoom').textContent")
        assert "train (/app/train.py:10)" in note and "90.0%" in note, note
        # As high as the frames shown: 9 rows (root to matmul), not 66; on the first screen.
        height = b.eval("document.getElementById('fg-frame').getBoundingClientRect().height")
        top = b.eval("document.getElementById('fg-frame').getBoundingClientRect().top")
        assert height < 400 and top + height < 900, (top, height)
        matmul = frames["matmul"]
        assert matmul["visible"]
        shot(b, "flame-hot.png")
        # Reset Zoom: everything, the import tower too, at full height.
        b.eval("document.getElementById('fg-frame').contentDocument"
               ".getElementById('reset').dispatchEvent(new MouseEvent('click'))")
        frames = b.eval(FRAMES_JS)
        assert frames["exec_module"]["visible"]
        assert frames["train (/app/train.py:10)"]["w"] < 0.95 * frames["all"]["w"]
        full = b.eval("document.getElementById('fg-frame').getBoundingClientRect().height")
        assert full > 66 * 16, full
        shot(b, "flame-hot-reset.png")
