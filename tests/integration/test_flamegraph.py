"""probing flamegraph: folded stacks and the SVG against recordings with known stacks, every
bad input, and the SVG's behaviour in a real browser (headless Chromium)."""
import os
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET

import browser
import harness
import recordings
from harness import probing

SVG_NS = "{http://www.w3.org/2000/svg}"
INNER = 1180  # default width 1200 minus two 10 px margins


def folded_lines(stdout):
    assert stdout.endswith("\n"), "folded output must end with a newline"
    return stdout[:-1].split("\n")


# ---- folded stacks ------------------------------------------------------------------------
def test_folded_equals_input():
    db = recordings.make_db()
    p = probing("flamegraph", "-i", db, "--folded", check=True)
    assert folded_lines(p.stdout) == recordings.byte_sorted(recordings.STACKS)
    assert p.stderr == ""


def test_folded_sums_threads_and_seconds():
    folded = ("@pid 7 7\nmain;a 5\nmain;b 1\n"
              "@pid 7 8\nmain;a 6\n"
              "@pid 9\nmain;a 1\nmain 2\n")
    db = recordings.make_db(folded, seconds=7)  # counts spread over 7 seconds
    p = probing("flamegraph", "-i", db, "--folded", check=True)
    assert folded_lines(p.stdout) == ["main 2", "main;a 12", "main;b 1"]


def test_folded_pid_and_tid_filters():
    db = recordings.make_db()
    p = probing("flamegraph", "-i", db, "--folded", "--pid", "200", check=True)
    assert folded_lines(p.stdout) == recordings.byte_sorted(recordings.PROCESS_200)
    p = probing("flamegraph", "-i", db, "--folded", "--tid", "101", check=True)
    assert folded_lines(p.stdout) == recordings.byte_sorted(recordings.THREAD_101)
    p = probing("flamegraph", "-i", db, "--folded", "--pid", "100", "--tid", "100", check=True)
    assert folded_lines(p.stdout) == recordings.byte_sorted(recordings.PROCESS_100)


def test_folded_matches_the_public_views():
    """The folded output agrees with what SQL over the samples/frames views says."""
    db = recordings.make_db()
    con = harness.db(db)
    total = sum(n for (n,) in con.execute("SELECT count FROM samples"))
    p = probing("flamegraph", "-i", db, "--folded", check=True)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in folded_lines(p.stdout)) == total
    assert total == recordings.total(recordings.STACKS)


# ---- the SVG --------------------------------------------------------------------------------
def parse_svg(text):
    root = ET.fromstring(text.encode())
    frames = []
    for g in root.iter(SVG_NS + "g"):
        if g.get("data-n") is None:
            continue
        rect = g.find(SVG_NS + "rect")
        frames.append({
            "name": g.find(SVG_NS + "title").text.split("\n")[0],
            "title": g.find(SVG_NS + "title").text,
            "cls": g.get("class"), "o": int(g.get("data-o")), "n": int(g.get("data-n")),
            "x": float(rect.get("x")), "w": float(rect.get("width")),
            "y": float(rect.get("y")), "label": g.find(SVG_NS + "text").text or "",
        })
    return root, frames


def test_svg_is_well_formed_and_proportional():
    db = recordings.make_db()
    p = probing("flamegraph", "-i", db, check=True)  # SVG on stdout by default
    root, frames = parse_svg(p.stdout)
    total = recordings.total(recordings.STACKS)
    names = {f["name"] for f in frames}
    # Names come back intact through the XML escaping.
    for name in ("std::vector<int>::push_back", "<module> (/app/train.py:50)",
                 "decode \"quoted\" & <tag> 'x' caf\u00e9", "ksys_read",
                 "cv::resize(cv::Mat const&, int, int)"):
        assert name in names, name
    rootf = [f for f in frames if f["cls"] == "rt"]
    assert len(rootf) == 1 and rootf[0]["n"] == total and rootf[0]["w"] == INNER
    for f in frames:
        # Width and position proportional to samples (2 decimals in the file).
        assert abs(f["w"] - f["n"] / total * INNER) < 0.006, f
        assert abs(f["x"] - (10 + f["o"] / total * INNER)) < 0.006, f
        assert f"{f['n']:,} sample" in f["title"]
        # Inside a parent one row below.
        if f["cls"] != "rt":
            assert any(g["y"] == f["y"] + 16 and g["o"] <= f["o"] and
                       f["o"] + f["n"] <= g["o"] + g["n"] for g in frames), f
    kinds = {f["name"]: f["cls"] for f in frames}
    assert kinds["Trainer.step (/app/train.py:12)"] == "py"
    assert kinds["ksys_read"] == "kn"
    assert kinds["at::matmul"] == "na"
    title = root.find(SVG_NS + "text")
    assert title.get("id") == "title" and title.text == "Flame Graph"


def test_svg_siblings_in_name_order():
    folded = "main;zeta 1\nmain;Alpha 1\nmain;beta 1\nmain;_under 1\n"
    p = probing("flamegraph", "-i", recordings.make_db(folded), check=True)
    _, frames = parse_svg(p.stdout)
    row = sorted((f for f in frames if f["y"] == min(f["y"] for f in frames)),
                 key=lambda f: f["x"])
    assert [f["name"] for f in row] == ["Alpha", "_under", "beta", "zeta"]


def test_svg_options():
    db = recordings.make_db()
    p = probing("flamegraph", "-i", db, "--title", "Run <3> & \"co\"", "--width", "1600",
                "--inverted", "--pid", "100", check=True)
    root, frames = parse_svg(p.stdout)
    assert root.get("width") == "1600"
    assert root.find(SVG_NS + "text").text == "Run <3> & \"co\""
    sub = [t for t in root.iter(SVG_NS + "text") if t.get("id") == "subtitle"][0].text
    assert "pid 100 (python train.py --epochs 3)" in sub and "99 Hz" in sub
    rootf = [f for f in frames if f["cls"] == "rt"][0]
    assert rootf["y"] == min(f["y"] for f in frames), "inverted: the root is on top"
    assert rootf["n"] == recordings.total(recordings.PROCESS_100 + recordings.THREAD_101)
    assert all(f["w"] <= 1580 for f in frames)
    assert "start_thread" in {f["name"] for f in frames}
    assert "deflate" not in {f["name"] for f in frames}


def test_svg_min_width_drops_narrow_frames_only():
    folded = "main;big 9990\nmain;tiny;deeper 10\n"  # tiny: 0.1% of 1180 px = 1.18 px
    db = recordings.make_db(folded)
    _, frames = parse_svg(probing("flamegraph", "-i", db, check=True).stdout)
    assert "tiny" in {f["name"] for f in frames}
    _, frames = parse_svg(probing("flamegraph", "-i", db, "--min-width", "2", check=True).stdout)
    assert "tiny" not in {f["name"] for f in frames}
    assert [f["n"] for f in frames if f["name"] == "main"] == [10000]


# ---- bad input ------------------------------------------------------------------------------
def test_missing_recording():
    p = probing("flamegraph", "-i", harness.tmp("nope.db"))
    assert p.returncode == 1
    assert "no such file" in p.stderr and "probing record" in p.stderr
    assert p.stdout == ""


def test_default_input_is_probing_db():
    db = recordings.make_db(name="probing.db")
    p = harness.run([harness.PROBING, "flamegraph", "--folded"], cwd=os.path.dirname(db))
    assert p.returncode == 0 and p.stdout.startswith("_start;")
    p = harness.run([harness.PROBING, "flamegraph"], cwd="/")
    assert p.returncode == 1 and "probing.db: no such file" in p.stderr


def test_not_a_sqlite_file():
    path = harness.tmp("junk.db")
    with open(path, "w") as f:
        f.write("just text, long enough to look like a file and not like a database\n" * 10)
    p = probing("flamegraph", "-i", path)
    assert p.returncode == 1 and "not a SQLite database" in p.stderr
    empty = harness.tmp("empty.db")
    open(empty, "w").close()
    p = probing("flamegraph", "-i", empty)
    assert p.returncode == 1 and "empty" in p.stderr
    p = probing("flamegraph", "-i", harness.tmp())
    assert p.returncode == 1 and "directory" in p.stderr


def test_sqlite_file_that_is_not_a_recording():
    path = harness.tmp("other.db")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE samples(x)")
    con.commit()
    con.close()
    before = recordings.sha256(path)
    p = probing("flamegraph", "-i", path)
    assert p.returncode == 1 and "not a probing recording" in p.stderr
    assert recordings.sha256(path) == before


def test_unwritable_output():
    db = recordings.make_db()
    for bad in ("/nonexistent/dir/out.svg", "/proc/out.svg", harness.tmp()):
        p = probing("flamegraph", "-i", db, "-o", bad)
        assert p.returncode == 1, bad
        assert "cannot write" in p.stderr, p.stderr
    p = probing("flamegraph", "-i", db, "-o", "/dev/full")
    assert p.returncode == 1 and "No space left" in p.stderr
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")


def test_output_is_replaced_only_when_complete():
    db = recordings.make_db()
    out = harness.tmp("out.svg")
    with open(out, "w") as f:
        f.write("previous")
    # A failure (here: the input) leaves the old file as it was.
    p = probing("flamegraph", "-i", harness.tmp("missing.db"), "-o", out)
    assert p.returncode == 1
    assert open(out).read() == "previous"
    p = probing("flamegraph", "-i", db, "-o", out, check=True)
    assert p.stdout == ""
    assert open(out).read().startswith("<?xml")
    # No temporary files left behind; the mode follows the umask as for a new file.
    assert not [n for n in os.listdir(harness.tmp()) if n.startswith(".")]
    assert os.stat(out).st_mode & 0o777 == 0o644
    # Special files are written in place, not replaced.
    p = probing("flamegraph", "-i", db, "-o", "/dev/null", check=True)
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_usage_errors():
    db = recordings.make_db()
    for args, what in ((["--frobnicate"], "--frobnicate"), (["-x"], "-x"),
                       (["--pid", "abc"], "--pid"), (["--pid", "0"], "--pid"),
                       (["--tid", "-3"], "--tid"), (["--width", "10"], "--width"),
                       (["--min-width", "nan"], "--min-width"), (["extra"], "extra"),
                       (["-o"], "-o")):
        p = probing("flamegraph", "-i", db, *args)
        assert p.returncode == 2, args
        assert what in p.stderr and "--help" in p.stderr, p.stderr
        assert p.stdout == ""


def test_pid_without_samples():
    db = recordings.make_db()
    p = probing("flamegraph", "-i", db, "--pid", "4242")
    assert p.returncode == 1
    assert "no samples of process 4242" in p.stderr
    assert "100 python train.py" in p.stderr and "200 gzip" in p.stderr
    p = probing("flamegraph", "-i", db, "--tid", "4242", "--folded")
    assert p.returncode == 1 and "101 loader" in p.stderr


def test_empty_recording():
    db = recordings.make_db("@meta note nothing\n")
    p = probing("flamegraph", "-i", db)
    assert p.returncode == 1 and "has no samples" in p.stderr and p.stdout == ""


def test_help():
    p = probing("flamegraph", "--help", check=True)
    for word in ("--folded", "--pid", "--tid", "--title", "-o", "-i", "Examples"):
        assert word in p.stdout
    assert p.stderr == ""


# ---- a recorder that was killed -------------------------------------------------------------
KILLED_WRITER = r"""
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
# What a flush does: a new stack and its counts, in one transaction.
con.execute("BEGIN")
fid = con.execute("INSERT INTO frame_defs(kind, func) VALUES ('native', 'late_frame')").lastrowid
sid = con.execute("SELECT max(stack_id) + 1 FROM stacks").fetchone()[0]
con.execute("INSERT INTO stacks VALUES (?, 2, 0)", (sid,))
main = con.execute("SELECT id FROM frame_defs WHERE func = 'main'").fetchone()[0]
con.execute("INSERT INTO stack_frames VALUES (?, 0, ?), (?, 1, ?)", (sid, fid, sid, main))
con.execute("INSERT INTO sample_counts (ts, pid, tid, stack_id, count) VALUES (1700000001, 1, 1, ?, 77)", (sid,))
con.execute("COMMIT")
# A transaction that never commits must stay invisible.
con.execute("BEGIN")
con.execute("INSERT INTO sample_counts (ts, pid, tid, stack_id, count) VALUES (1700000002, 1, 1, ?, 1000)", (sid,))
os._exit(0)  # SIGKILL-like: no checkpoint, no close; -wal and -shm stay
"""


def test_recording_of_a_killed_recorder():
    db = recordings.make_db("main;work 10\n")
    harness.run([sys.executable, "-c", KILLED_WRITER, db], check=True)
    assert os.path.exists(db + "-wal") and os.path.getsize(db + "-wal") > 0
    assert os.path.exists(db + "-shm")
    before = {s: recordings.sha256(db + s) for s in ("", "-wal")}
    p = probing("flamegraph", "-i", db, "--folded", check=True)
    assert folded_lines(p.stdout) == ["main;late_frame 77", "main;work 10"]
    p = probing("flamegraph", "-i", db, "-o", harness.tmp("k.svg"), check=True)
    # Nothing was written back: the database and its WAL are byte for byte the same.
    assert {s: recordings.sha256(db + s) for s in ("", "-wal")} == before
    assert os.path.exists(db + "-wal")


# ---- in a browser ---------------------------------------------------------------------------
def svg_of(folded, *args):
    db = recordings.make_db(folded, name=f"b{len(os.listdir(harness.tmp()))}.db")
    out = harness.tmp(os.path.basename(db) + ".svg")
    probing("flamegraph", "-i", db, "-o", out, *args, check=True)
    return out


def by_name(frames, name):
    found = [f for f in frames if f["name"] == name]
    assert len(found) == 1, (name, found)
    return found[0]


@harness.timeout(180)
def test_browser_zoom_and_reset():
    svg = svg_of(recordings.FOLDED)
    total = recordings.total(recordings.STACKS)
    r = browser.run_in_svg(svg, r"""
        R.before = T.all();
        T.click(T.byName('Trainer.step (/app/train.py:12)')[0].querySelector('rect'));
        R.zoomed = T.all();
        R.resetVisible = getComputedStyle(document.getElementById('reset')).opacity;
        T.click(document.getElementById('reset'));
        R.after = T.all();
        R.resetHidden = getComputedStyle(document.getElementById('reset')).opacity;
        T.click(T.byName('worker (/app/data.py:40)')[0]);
        T.key('Escape');
        R.escaped = T.all();
    """)
    before = r["before"]
    step = by_name(before, "Trainer.step (/app/train.py:12)")
    assert abs(step["w"] - 700 / total * INNER) < 0.01
    assert all(f["visible"] for f in before)
    z = r["zoomed"]
    zs = by_name(z, "Trainer.step (/app/train.py:12)")
    assert zs["visible"] and zs["w"] == INNER and zs["x"] == 10
    assert zs["label"] == "Trainer.step (train.py:12)"
    fwd, bwd = by_name(z, "forward (/app/model.py:8)"), by_name(z, "backward (/app/model.py:20)")
    assert abs(fwd["w"] - 500 / 700 * INNER) < 0.01 and abs(bwd["w"] - 200 / 700 * INNER) < 0.01
    assert bwd["x"] == 10 and abs(fwd["x"] - (10 + 200 / 700 * INNER)) < 0.01
    # Siblings and unrelated frames hidden; ancestors full width and marked.
    for name in ("load (/app/data.py:5)", "Trainer.log (/app/train.py:70)", "start_thread",
                 "deflate", "print"):
        assert not by_name(z, name)["visible"], name
    for name in ("train (/app/train.py:30)", "<module> (/app/train.py:50)", "all"):
        f = by_name(z, name)
        assert f["visible"] and f["w"] == INNER and " a" in f["cls"] + " ", f
    assert r["resetVisible"] == "1" and r["resetHidden"] == "0"
    # Reset (and Escape) restore the original geometry exactly.
    assert r["after"] == before
    assert r["escaped"] == before


@harness.timeout(180)
def test_browser_search():
    svg = svg_of(recordings.FOLDED)
    r = browser.run_in_svg(svg, r"""
        window.prompt = function () { return 'forward|backward'; };
        T.key('f', true);
        R.m1 = T.text('matched');
        R.hl1 = T.frames().filter(function (g) { return g.classList.contains('m'); }).map(T.name);
        R.button = T.text('search');
        T.click(document.getElementById('search'));  // now "Reset Search"
        R.m2 = T.text('matched');
        R.hl2 = document.querySelectorAll('#frames g.m').length;
        window.prompt = function () { return 'FORWARD'; };  // capitals: case-sensitive
        T.click(document.getElementById('search'));
        R.m3 = T.text('matched');
        T.click(document.getElementById('search'));
        window.prompt = function () { return 'vector<int>'; };
        T.click(document.getElementById('search'));
        R.m4 = T.text('matched');
        T.click(document.getElementById('search'));
        window.prompt = function () { return '(unclosed'; };  // not a regex: plain text
        T.click(document.getElementById('search'));
        R.m5 = T.text('matched');
        T.click(document.getElementById('search'));
        window.prompt = function () { return null; };  // cancelled
        T.click(document.getElementById('search'));
        R.m6 = T.text('matched');
        var f = T.byName('deflate')[0];
        f.querySelector('rect').dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
        R.details = T.text('details');
    """)
    assert r["m1"] == "Matched: 67.31% (700 of 1,040 samples)"
    assert sorted(r["hl1"]) == ["backward (/app/model.py:20)", "forward (/app/model.py:8)"]
    assert r["button"] == "Reset Search"
    assert r["m2"].strip() == "" and r["hl2"] == 0
    assert r["m3"] == "Matched: 0.00% (0 of 1,040 samples)"
    assert r["m4"] == "Matched: 19.23% (200 of 1,040 samples)"
    assert r["m5"] == "Matched: 0.00% (0 of 1,040 samples)"
    assert r["m6"].strip() == ""
    assert r["details"] == "deflate (42 samples, 4.04%)"


@harness.timeout(180)
def test_browser_search_counts_recursion_once():
    folded = ("main;walk (t.py:1);walk (t.py:1);walk (t.py:1);leaf 30\n"
              "main;walk (t.py:1);other 10\n"
              "main;idle 60\n")
    r = browser.run_in_svg(svg_of(folded), r"""
        window.prompt = function () { return 'walk'; };
        T.click(document.getElementById('search'));
        R.m = T.text('matched');
        R.n = document.querySelectorAll('#frames g.m').length;
        T.click(T.byName('idle')[0]);
        R.zoomedMatched = T.text('matched');
    """)
    assert r["m"] == "Matched: 40.00% (40 of 100 samples)"
    assert r["n"] == 3
    assert r["zoomedMatched"] == r["m"]


@harness.timeout(180)
def test_browser_screenshot_of_a_realistic_profile():
    gen = os.path.join(harness.ROOT, "bench", "gen_folded.py")
    folded = subprocess.run([sys.executable, gen, "--stacks", "3000", "--samples", "200000"],
                            capture_output=True, text=True, check=True).stdout
    svg = svg_of(folded, "--title", "train.py, rank 0")
    root, frames = parse_svg(open(svg).read())
    height = int(root.get("height"))
    png = harness.tmp("flamegraph.png")
    assert browser.screenshot(svg, png, 1200, height) == (1200, height)
    assert os.path.getsize(png) > 20000  # drawn, not blank
    # Keep a copy to look at when asked to (make test leaves it in build/).
    keep = os.path.join(harness.BUILD, "tests", "flamegraph-screenshot.png")
    os.makedirs(os.path.dirname(keep), exist_ok=True)
    with open(png, "rb") as src, open(keep, "wb") as dst:
        dst.write(src.read())


BUSY_WRITER = r"""
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode = WAL")
con.execute("BEGIN IMMEDIATE")  # a flush in progress: the write lock is held
sid = con.execute("SELECT max(stack_id) FROM stacks").fetchone()[0]
con.execute("INSERT INTO sample_counts (ts, pid, tid, stack_id, count) VALUES (1700000005, 1, 1, ?, 500)", (sid,))
open(sys.argv[2], "w").close()
time.sleep(60)
"""


@harness.timeout(60)
def test_reading_while_the_recorder_writes():
    db = recordings.make_db("main;work 10\n")
    ready = harness.tmp("ready")
    harness.spawn([sys.executable, "-c", BUSY_WRITER, db, ready])
    harness.wait_for(lambda: os.path.exists(ready), timeout=20, what="the writer")
    # Readers do not wait for the writer (WAL) and see the last committed state.
    p = probing("flamegraph", "-i", db, "--folded", timeout=10, check=True)
    assert folded_lines(p.stdout) == ["main;work 10"]
    p = probing("query", "-i", db, "-f", "csv", "--no-header", "SELECT SUM(count) FROM samples",
                timeout=10, check=True)
    assert p.stdout.strip() == "10"


@harness.timeout(180)
def test_browser_inverted_zoom():
    svg = svg_of("main;a;x 30\nmain;a;y 10\nmain;b 60\n", "--inverted")
    r = browser.run_in_svg(svg, r"""
        R.before = T.all();
        T.click(T.byName('a')[0]);
        R.zoomed = T.all();
    """)
    before = {f["name"]: f for f in r["before"]}
    assert before["all"]["y"] < before["main"]["y"] < before["a"]["y"] < before["x"]["y"]
    z = {f["name"]: f for f in r["zoomed"]}
    assert z["a"]["w"] == INNER and z["a"]["y"] == before["a"]["y"]
    assert abs(z["x"]["w"] - 0.75 * INNER) < 0.01 and abs(z["y"]["w"] - 0.25 * INNER) < 0.01
    assert not z["b"]["visible"] and z["main"]["visible"] and z["main"]["w"] == INNER
