"""Names read from a target, or from a recording, are data: a thread name, co_name,
co_filename, a local variable's name, a command line or a library path holding a newline, an
escape sequence, ';', a bidi override or invalid UTF-8 must reach every text output escaped
(no control character, valid UTF-8, no forged line or frame), and JSON, SVG and pprof must
stay well-formed. One workload (tests/workloads/python/hostile_names.py) and one recording of it
serve every output."""
import gzip
import json
import os
import re
import shutil
import sqlite3
import subprocess
import xml.etree.ElementTree as ET

import harness as h
from test_export import decode_profile

WORKLOAD = os.path.join(h.PY_WORKLOADS, "python", "hostile_names.py")
PYTHON = "/usr/bin/python3"  # Debian's 3.11: present wherever the tests run
ARG = "arg\x1b]0;cmd\x07\nThread 1 \"fake\""

# What the workload names things (keep in sync with tests/workloads/python/hostile_names.py).
NAME = "spin\x1b]0;pwned\x07;semi\nThread 1 \"fake\" (running)\n    forged (f.py:1)\u202e\udcff"
FILE = "/tmp/x\x1b[2J\n    forged (g.py:2)\udcfe.py"
THREAD = "T\x1b]0;pwned\x07\nThread 1 \"fake\" (running)\udcfd"
LOCAL = "val\x1b[1mue\nforged = 1"

# Code points that must not reach a terminal raw (escape.h, text_escape).
HIDDEN = {0x61C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E,
          0x2066, 0x2067, 0x2068, 0x2069}


def shown(s):
    """@s as text_escape shows it (the reference implementation, in Python): str with lone
    surrogates stands for what the target's UTF-8 encoder wrote for them (surrogatepass)."""
    out = []
    data = s.encode("utf-8", "surrogatepass")
    i = 0
    while i < len(data):
        b = data[i]
        if b < 0x80:
            out.append({0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}.get(
                b, f"\\x{b:02x}" if b < 0x20 or b == 0x7F else chr(b)))
            i += 1
            continue
        for n in (4, 3, 2):
            try:
                c = data[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(c) == 1:
                break
        else:
            out.append(f"\\x{b:02x}")
            i += 1
            continue
        cp = ord(c)
        out.append(f"\\u{cp:04x}" if 0x80 <= cp <= 0x9F or cp in HIDDEN else c)
        i += n
    return "".join(out)


def as_stored(s):
    """@s as JSON output carries it and as a recording or snapshot stores it: the target's
    bytes, each byte of invalid UTF-8 as U+FFFD."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def assert_inert(data, what):
    """@data (bytes) is valid UTF-8 without a control character (but line ends) or a hidden
    code point: safe to print on a terminal."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AssertionError(f"{what}: not UTF-8 at {e.start}: {data[e.start - 40:e.start + 20]!r}")
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
           or ord(c) in HIDDEN]
    assert not bad, f"{what}: raw {bad[:5]!r} in {text[:300]!r}"
    return text


def run_bytes(*args):
    p = subprocess.run([h.PROBING, *map(str, args)], capture_output=True, timeout=120)
    h.log(f"$ probing {' '.join(map(repr, map(str, args)))}  -> {p.returncode}\n"
          f"{p.stdout[-1500:]!r}\n{p.stderr[-1500:]!r}")
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert_inert(p.stderr, f"stderr of {args[0]}")
    return p.stdout


def start(seconds):
    target = h.spawn([PYTHON, WORKLOAD, str(seconds), ARG], stdout=subprocess.PIPE)
    tid = int(target.stdout.readline())
    return target, tid


@h.timeout(120)
def test_live_outputs_escape_target_names():
    target, tid = start(60)
    # backtrace: every name on one line of its own, as text_escape shows it.
    for extra in ([], ["--locals"]):
        out = assert_inert(run_bytes("backtrace", "-p", target.pid, *extra), "backtrace")
        lines = out.splitlines()
        heads = [ln for ln in lines if ln.startswith("Thread ")]
        assert len(heads) == len(os.listdir(f"/proc/{target.pid}/task")), heads
        assert not [ln for ln in lines if ln.lstrip().startswith("forged")], out
        assert f'Thread {tid} "{shown(THREAD)}" (' in out, out
        assert f"    {shown(NAME)} ({shown(FILE)}:6)" in lines, out
        assert lines[0] == f"Process {target.pid}: {PYTHON} {WORKLOAD} 60 {shown(ARG)}"
        if extra:
            assert f"        {shown(LOCAL)} = 'v\\x1b[2J'" in lines, out
    # python.backtrace read from outside (no agent): the table escapes, JSON keeps the data.
    sql = f"SELECT thread, func, file, lineno FROM python.backtrace WHERE tid = {tid}"
    out = assert_inert(run_bytes("query", "-p", target.pid, sql), "query table")
    # (The rows travel as JSON from the reader: invalid UTF-8 is U+FFFD by then.)
    assert shown(as_stored(NAME)) in out and shown(as_stored(THREAD)) in out, out
    rows = json.loads(run_bytes("query", "-p", target.pid, "--format", "json", sql))
    assert rows[0]["thread"] == as_stored(THREAD)
    assert (rows[0]["func"], rows[0]["file"]) == (as_stored(NAME), as_stored(FILE)), rows[0]
    assert rows[0]["lineno"] == 6, rows[0]


@h.timeout(180)
def test_recording_outputs_escape_names():
    target, tid = start(60)
    rec = h.tmp("hostile.db")
    run_bytes("record", "-p", target.pid, "-d", "2", "-o", rec)
    snap = h.tmp("hostile-snap.db")
    run_bytes("backtrace", "-p", target.pid, "-o", snap)
    target.kill()
    # What probing writes is text any SQLite reader decodes (Python's sqlite3 refuses a row
    # whose text is not UTF-8): the names' invalid bytes are U+FFFD there.
    for db, threads, frames in ((rec, "threads", "frames"), (snap, "bt_threads", "bt_frames")):
        with sqlite3.connect(db) as con:
            for (table,) in con.execute("SELECT name FROM sqlite_master"
                                        " WHERE type IN ('table', 'view')").fetchall():
                con.execute(f'SELECT * FROM "{table}"').fetchall()
            assert as_stored(THREAD) in {n for (n,) in con.execute(
                f"SELECT name FROM {threads}")}, db
            funcs = set(con.execute(f"SELECT func, file FROM {frames} WHERE kind = 'python'"))
            assert (as_stored(NAME), as_stored(FILE)) in funcs, (db, funcs)
    # A crafted recording too: invalid UTF-8 and escapes in a library path and the command.
    crafted = h.tmp("crafted.db")
    shutil.copy(rec, crafted)
    with sqlite3.connect(crafted) as con:
        con.execute("UPDATE frame_defs SET module = CAST(X'2f6c69622f1b5d303b7807ff0a2e736f'"
                    " AS TEXT) WHERE kind = 'native'")
        con.execute("UPDATE processes SET command = CAST(X'1b5b324a0a66ff' AS TEXT)")
    for db in (rec, crafted):
        folded = assert_inert(run_bytes("flamegraph", "-i", db, "--folded"), "folded")
        ours = 0
        for line in folded.splitlines():
            assert re.fullmatch(r"\S.* \d+", line), line
            frames = line.rsplit(" ", 1)[0].split(";")
            assert not [f for f in frames if f.startswith("    forged")], line
            # The hostile frame is one frame: its ';' are ':' and its newlines escaped.
            ours += sum(f == shown(as_stored(NAME)).replace(";", ":") + " (" + shown(as_stored(FILE)) + ":6)"
                        for f in frames)
        assert ours, folded

        svg = h.tmp("g.svg")
        run_bytes("flamegraph", "-i", db, "-o", svg, "--pid", target.pid)
        with open(svg, "rb") as f:
            data = f.read()
        assert_inert(data, "svg")
        root = ET.fromstring(data)
        titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
        assert any(t.startswith(shown(as_stored(NAME)) + " (") for t in titles), titles[:20]

        doc = json.loads(assert_inert(run_bytes("export", "-i", db, "--format", "speedscope", "-o", "-"),
                                      "speedscope"))
        names = [f["name"] for f in doc["shared"]["frames"]]
        assert f"{shown(as_stored(NAME))} ({shown(as_stored(FILE))}:6)" in names, names

        pb = h.tmp("p.pb.gz")
        run_bytes("export", "-i", db, "--format", "pprof", "-o", pb)
        with open(pb, "rb") as f:
            raw = gzip.decompress(f.read())
        prof = decode_profile(raw)  # decodes every string as strict UTF-8
        for s in prof["samples"]:
            for loc in s["locations"]:
                assert_inert(loc["function"]["name"].encode(), "pprof function")
                assert_inert(loc["function"]["file"].encode(), "pprof file")
        assert any(loc["function"]["name"] == shown(as_stored(NAME))
                   for s in prof["samples"] for loc in s["locations"])
        for m in prof["mappings"].values():
            assert_inert(m.encode(), "pprof mapping")

        sql = ("SELECT DISTINCT p.command, f.func, f.file, f.module FROM samples s"
               " JOIN frames f USING (stack_id) JOIN processes p USING (pid)")
        out = assert_inert(run_bytes("query", "-i", db, sql), "query table")
        assert shown(as_stored(NAME)) in out, out
        rows = json.loads(run_bytes("query", "-i", db, "--format", "json", sql))
        assert as_stored(NAME) in {r["func"] for r in rows}
    # The crafted library path and command, escaped where they show.
    assert "/lib/\\x1b]0;x\\x07\\xff\\n.so" in out, out
    assert "\\x1b[2J\\nf\\xff" in out, out
