"""The first hour of a new user (issue 20): the habits users bring from py-spy, the messages
that must lead to the right command, the examples that must run.

Each test runs real workloads (tests/workloads/) and checks what probing prints and writes
against what the workload is known to do.
"""
import gzip
import json
import os
import pty
import subprocess

import harness as h
import recordings

THREADS_PY = os.path.join(h.PY_WORKLOADS, "python", "threads.py")


def start_threads(seconds=30):
    """tests/workloads/python/threads.py running, its three named threads announced."""
    p = h.spawn(["/usr/bin/python3", THREADS_PY, str(seconds)], stdout=subprocess.PIPE)
    for _ in range(3):
        p.stdout.readline()
    return p


def run_on_tty(args, timeout=60):
    """Run probing ARGS with stdout on a pseudo-terminal; return (status, stdout, stderr)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.run([h.PROBING, *args], stdout=slave, stderr=subprocess.PIPE,
                           timeout=timeout, text=True)
    finally:
        os.close(slave)
    out = b""
    os.set_blocking(master, False)
    try:
        while True:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            out += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(master)
    h.log(f"$ probing {' '.join(args)} (stdout a terminal) -> {p.returncode}\n{p.stderr}")
    return p.returncode, out.decode(errors="replace"), p.stderr


# ---- item 1: record -o x.svg ----------------------------------------------------------------
def test_record_output_named_svg_is_a_flame_graph():
    """py-spy's 'record -o x.svg': an SVG flame graph of the workload's threads, the
    recording kept beside it as x.db and named on stderr with the command that redraws it."""
    target = start_threads()
    svg, rec = h.tmp("x.svg"), h.tmp("x.db")
    p = h.probing("record", "-p", target.pid, "-d", "2", "-F", "199", "-o", svg)
    assert p.returncode == 0, p.stderr
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    assert text.lstrip().startswith("<?xml") or text.lstrip().startswith("<svg"), text[:200]
    for func in ("alpha_work", "beta_work", "gamma_work"):
        assert func in text, f"{func} not in the flame graph"
    con = h.db(rec)
    assert h.total_samples(con, pid=target.pid) > 0
    assert f"probing flamegraph -i {rec} -o {svg}" in p.stderr, p.stderr


@h.params([(".folded", "folded"), (".pb.gz", "pprof"), (".json", "speedscope")],
          ids=["folded", "pprof", "speedscope"])
def test_record_output_named_for_a_format(case):
    """.folded, .pb.gz and .json outputs get folded stacks, pprof and speedscope."""
    ext, kind = case
    target = start_threads()
    out, rec = h.tmp("y" + ext), h.tmp("y.db")
    p = h.probing("record", "-p", target.pid, "-d", "1.5", "-F", "199", "-o", out)
    assert p.returncode == 0, p.stderr
    assert os.path.exists(rec), "the recording is not kept beside the output"
    data = open(out, "rb").read()
    if kind == "folded":
        lines = data.decode().splitlines()
        assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
        assert any("alpha_work" in line for line in lines)
    elif kind == "pprof":
        raw = gzip.decompress(data)
        assert b"alpha_work" in raw
    else:
        doc = json.loads(data)
        assert "speedscope" in doc["$schema"]
        assert any(f["name"].startswith("alpha_work") for f in doc["shared"]["frames"])


def test_record_output_refuses_to_replace_the_recording_beside_it():
    """-o x.svg with an x.db already there: refused before recording, x.db untouched, and the
    message gives the two commands to run instead."""
    target = start_threads()
    rec = h.tmp("x.db")
    with open(rec, "wb") as f:
        f.write(b"precious")
    p = h.probing("record", "-p", target.pid, "-d", "1", "-o", h.tmp("x.svg"))
    assert p.returncode == 2, p.stderr
    assert open(rec, "rb").read() == b"precious"
    assert not os.path.exists(h.tmp("x.svg"))
    assert f"probing flamegraph -i NEW.db -o {h.tmp('x.svg')}" in p.stderr, p.stderr


def test_flamegraph_refuses_svg_on_a_terminal():
    """flamegraph without -o and stdout a terminal: refused as export refuses binary output;
    --folded (text) still prints there, and a pipe still gets the SVG."""
    db = recordings.make_db()
    rc, out, err = run_on_tty(["flamegraph", "-i", db])
    assert rc == 2, (rc, err)
    assert "<svg" not in out and "-o FILE.svg" in err, err
    rc, out, err = run_on_tty(["flamegraph", "-i", db, "--folded"])
    assert rc == 0 and "deflate" in out, err
    p = h.probing("flamegraph", "-i", db)
    assert p.returncode == 0 and "<svg" in p.stdout
