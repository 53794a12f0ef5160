"""probing export: pprof (decoded here with a small protobuf reader), folded, speedscope."""
import gzip
import json
import os

import harness
import recordings
from harness import probing


# ---- a minimal protobuf reader: just the wire format -----------------------------------------
def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf):
    """{field number: [values]}: ints for varints, bytes for length-delimited fields."""
    out = {}
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            value = bytes(buf[i:i + n])
            i += n
        elif wire == 1:
            value = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wire == 5:
            value = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise AssertionError(f"wire type {wire}")
        out.setdefault(field, []).append(value)
    return out


def packed(values):
    """A repeated varint field: packed (bytes) or not (ints)."""
    out = []
    for v in values:
        if isinstance(v, bytes):
            i = 0
            while i < len(v):
                x, i = varint(v, i)
                out.append(x)
        else:
            out.append(v)
    return out


def one(f, n, default=0):
    return f.get(n, [default])[-1]


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_profile(data):
    p = fields(data)
    strings = [s.decode() for s in p[6]]
    assert strings[0] == ""

    def vt(b):
        f = fields(b)
        return strings[one(f, 1)], strings[one(f, 2)]

    functions = {}
    for b in p.get(5, []):
        f = fields(b)
        functions[one(f, 1)] = {"name": strings[one(f, 2)], "file": strings[one(f, 4)]}
    mappings = {}  # in the order of the message: pprof's main binary is among the first
    for b in p.get(3, []):
        f = fields(b)
        mappings[one(f, 1)] = strings[one(f, 5)]
    locations = {}
    for b in p[4]:
        f = fields(b)
        lines = [fields(x) for x in f.get(4, [])]
        assert len(lines) == 1
        locations[one(f, 1)] = {"function": functions[one(lines[0], 1)],
                                "line": one(lines[0], 2), "mapping": one(f, 2)}
    samples = []
    for b in p[2]:
        f = fields(b)
        labels = {}
        for lb in f.get(3, []):
            lf = fields(lb)
            key = strings[one(lf, 1)]
            labels[key] = strings[one(lf, 2)] if 2 in lf else signed(one(lf, 3))
        samples.append({"locations": [locations[x] for x in packed(f.get(1, []))],
                        "values": [signed(v) for v in packed(f[2])], "labels": labels})
    return {"sample_type": [vt(b) for b in p[1]], "samples": samples,
            "period_type": vt(one(p, 11, b"")), "period": one(p, 12),
            "time_nanos": one(p, 9), "duration_nanos": one(p, 10),
            "mappings": mappings, "comments": [strings[i] for i in packed(p.get(13, []))]}


def frame_label(loc):
    fn = loc["function"]
    if fn["file"] and loc["line"]:
        return f"{fn['name']} ({fn['file']}:{loc['line']})"
    return fn["name"]


# ---- pprof ----------------------------------------------------------------------------------
def test_pprof_decodes_with_the_right_totals():
    db = recordings.make_db(recordings.FOLDED.replace("@meta frequency 99", "@meta frequency 250"))
    out = harness.tmp("prof.pb.gz")
    p = probing("export", "-i", db, "--format", "pprof", "-o", out, check=True)
    assert p.stdout == "" and p.stderr == ""
    with open(out, "rb") as f:
        assert f.read(2) == b"\x1f\x8b", "gzip magic"
    prof = decode_profile(gzip.open(out).read())
    assert prof["sample_type"] == [("samples", "count"), ("cpu", "nanoseconds")]
    assert prof["period_type"] == ("cpu", "nanoseconds")
    assert prof["period"] == 4000000  # 1e9 / 250 Hz
    assert prof["time_nanos"] == 1700000000 * 10**9 and prof["duration_nanos"] == 10**9
    total = recordings.total(recordings.STACKS)
    assert sum(s["values"][0] for s in prof["samples"]) == total
    for s in prof["samples"]:
        assert s["values"][1] == s["values"][0] * 4000000
    # Stacks: leaf first in pprof; root first as folded text they equal the input.
    stacks = {}
    for s in prof["samples"]:
        names = [frame_label(loc) for loc in reversed(s["locations"])]
        kernel = {"entry_SYSCALL_64", "ksys_read"}
        key = ";".join(n + "_[k]" if n in kernel else n for n in names)
        stacks[key] = stacks.get(key, 0) + s["values"][0]
    assert sorted(f"{k} {v}" for k, v in stacks.items()) == sorted(recordings.STACKS)
    # Labels: pid and tid numbers, thread names where the recording has them.
    by_tid = {}
    for s in prof["samples"]:
        by_tid.setdefault((s["labels"]["pid"], s["labels"]["tid"]), set()).add(
            s["labels"].get("thread"))
    assert by_tid == {(100, 100): {"MainThread"}, (100, 101): {"loader"}, (200, 200): {None}}
    # Python functions are named by their qualname.
    names = {loc["function"]["name"] for s in prof["samples"] for loc in s["locations"]}
    assert {"Trainer.step", "<module>", "std::vector<int>::push_back"} <= names
    assert prof["comments"] == ["recorded by probing"]


def test_pprof_filters_and_stdout():
    db = recordings.make_db()
    p = recordings.probing_raw("export", "-i", db, "-f", "pprof", "--tid", "101", "-o", "-")
    assert p.returncode == 0
    prof = decode_profile(gzip.decompress(p.stdout))
    assert sum(s["values"][0] for s in prof["samples"]) == recordings.total(recordings.THREAD_101)


# The executable of the busiest process, then the other's; no frame runs in either: only the
# libraries have samples (a Python linked with libpython, a program busy in libc).
MAPPINGS = ("@exe 100 /opt/py/bin/python3.12\n@process 100 python3.12 train.py\n"
            "@exe 200 /usr/bin/gzip\n@process 200 gzip -9\n"
            "@pid 100\n"
            "memcpy [/lib/x86_64-linux-gnu/libc.so.6];"
            "_PyEval_EvalFrameDefault [/opt/py/lib/libpython3.12.so.1.0] 30\n"
            "deflate [/lib/x86_64-linux-gnu/libz.so.1] 10\n"
            "@pid 200\n"
            "read [/lib/x86_64-linux-gnu/libc.so.6];entry_SYSCALL_64_[k] 5\n")


def pprof_main_binary(mappings):
    """The mapping 'go tool pprof' reports as the profile's file (profile.massageMappings):
    the first one that is neither a shared library nor a pseudo file such as [kernel]."""
    import re
    for m in mappings:
        if m and not re.search(r"([.]so$|[.]so[._][0-9]+)", m) and not m.startswith("["):
            return m
    return mappings[0] if mappings else None


def test_pprof_names_the_executable_first():
    db = recordings.make_db(MAPPINGS)
    libs = {"/lib/x86_64-linux-gnu/libc.so.6", "/opt/py/lib/libpython3.12.so.1.0",
            "/lib/x86_64-linux-gnu/libz.so.1", "[kernel]"}
    # The executables of the processes with samples come first, the busiest one's first.
    for args, exes in (([], ["/opt/py/bin/python3.12", "/usr/bin/gzip"]),
                       (["--pid", "200"], ["/usr/bin/gzip"])):
        out = harness.tmp("m.pb.gz")
        probing("export", "-i", db, "--format", "pprof", "-o", out, *args, check=True)
        mappings = decode_profile(gzip.open(out).read())["mappings"]
        order = [mappings[i] for i in sorted(mappings)]
        assert order[:len(exes)] == exes and set(order[len(exes):]) <= libs, order
        assert pprof_main_binary(order) == exes[0]


# ---- folded ---------------------------------------------------------------------------------
def test_folded_export_equals_flamegraph_folded():
    db = recordings.make_db()
    out = harness.tmp("out.folded")
    probing("export", "-i", db, "--format", "folded", "-o", out, check=True)
    fg = probing("flamegraph", "-i", db, "--folded", check=True).stdout
    assert open(out).read() == fg
    assert fg.splitlines() == recordings.byte_sorted(recordings.STACKS)


# ---- speedscope -----------------------------------------------------------------------------
def test_speedscope():
    folded = recordings.FOLDED
    db = recordings.make_db(folded, seconds=3)  # each stack's count spread over 3 seconds
    out = harness.tmp("prof.speedscope.json")
    probing("export", "-i", db, "--format", "speedscope", "-o", out, check=True)
    doc = json.load(open(out))
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    profiles = {p["name"]: p for p in doc["profiles"]}
    assert set(profiles) == {"MainThread (pid 100, tid 100)", "loader (pid 100, tid 101)",
                             "thread (pid 200, tid 200)"}
    assert doc["profiles"][doc["activeProfileIndex"]]["name"] == "MainThread (pid 100, tid 100)"
    expect = {"MainThread (pid 100, tid 100)": recordings.PROCESS_100,
              "loader (pid 100, tid 101)": recordings.THREAD_101,
              "thread (pid 200, tid 200)": recordings.PROCESS_200}
    for name, prof in profiles.items():
        assert prof["type"] == "sampled" and prof["unit"] == "none"
        assert len(prof["samples"]) == len(prof["weights"])
        assert prof["startValue"] == 0 and prof["endValue"] == sum(prof["weights"])
        assert sum(prof["weights"]) == recordings.total(expect[name])
        # Root-first stacks of frame names; summed they are the input.
        got = {}
        for stack, w in zip(prof["samples"], prof["weights"]):
            names = []
            for i in stack:
                n = frames[i]["name"]
                names.append(n + "_[k]" if n in ("entry_SYSCALL_64", "ksys_read") else n)
            key = ";".join(names)
            got[key] = got.get(key, 0) + w
        assert sorted(f"{k} {v}" for k, v in got.items()) == sorted(expect[name])
    # Time order: one entry per (second, stack); files and lines kept for Python frames.
    main = profiles["MainThread (pid 100, tid 100)"]
    assert len(main["samples"]) == 3 * len(recordings.PROCESS_100)
    step = [f for f in frames if f["name"] == "Trainer.step (/app/train.py:12)"][0]
    assert step["file"] == "/app/train.py" and step["line"] == 12


# ---- errors ---------------------------------------------------------------------------------
def test_export_errors():
    db = recordings.make_db()
    for args, what in ((["-o", "x"], "--format"), (["-f", "pprof"], "-o"),
                       (["-f", "flame", "-o", "x"], "flame"),
                       (["-f", "chrome", "-o", "x", "--pid", "1"], "--pid"),
                       (["-f", "folded", "-o", "x", "--pid", "x"], "--pid"),
                       (["-f", "folded", "-o", "x", "--nope"], "--nope")):
        p = probing("export", "-i", db, *args)
        assert p.returncode == 2, args
        assert what in p.stderr, (args, p.stderr)
    p = probing("export", "-i", harness.tmp("missing.db"), "-f", "pprof", "-o",
                harness.tmp("x.pb.gz"))
    assert p.returncode == 1 and "no such file" in p.stderr
    assert not os.path.exists(harness.tmp("x.pb.gz"))
    p = probing("export", "-i", db, "-f", "speedscope", "-o", "/nonexistent/x.json")
    assert p.returncode == 1 and "cannot write" in p.stderr
    p = probing("export", "-i", db, "-f", "folded", "-o", "/dev/full")
    assert p.returncode == 1 and "No space left" in p.stderr
    p = probing("export", "-i", db, "-f", "pprof", "--pid", "999", "-o", harness.tmp("y"))
    assert p.returncode == 1 and "no samples of process 999" in p.stderr
    assert not os.path.exists(harness.tmp("y"))
    # chrome is the PyTorch timeline: a recording without one says how to get one.
    p = probing("export", "-i", db, "-f", "chrome", "-o", harness.tmp("y"))
    assert p.returncode == 1 and "has no PyTorch trace" in p.stderr, p.stderr
    assert "probing query -p PID --save" in p.stderr
    assert not os.path.exists(harness.tmp("y"))


def test_help_lists_only_what_works():
    p = probing("export", "--help", check=True)
    for word in ("pprof", "folded", "speedscope", "chrome", "--pid", "-o", " -p ", "--force"):
        assert word in p.stdout
    # The docs do not call what works "not implemented".
    doc = open(os.path.join(harness.ROOT, "docs", "export.md")).read()
    assert "not implemented" not in doc and "--format chrome" in doc
    # chrome (and -p) are tested in test_torch.py.


# ---- killed while writing -------------------------------------------------------------------
def writing_to(pid, directory):
    """Does process @pid hold a file of @directory open (its output, being written)?"""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(directory + "/"):
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


def test_killed_while_writing_leaves_no_temporary_file():
    """flamegraph and export killed while their output is open (SIGINT, SIGTERM, SIGHUP, and
    SIGKILL or SIGSEGV, which nothing can catch) leave nothing beside the output, which keeps
    its old content."""
    import signal
    import subprocess
    # Big enough that the output is open for a while (~0.1 s here).
    lines = ["@process 1 x", "@pid 1 1 m"]
    for i in range(6000):
        lines.append(";".join("f%d_%d" % (d, (i >> d) % 7 if d < 10 else i)
                              for d in range(20)) + " 3")
    db = recordings.make_db("\n".join(lines) + "\n", name="big.db")
    out_dir = harness.tmp("out")
    os.mkdir(out_dir)
    cases = [(["flamegraph"], "fg.svg", s) for s in
             (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGSEGV)]
    cases += [(["export", "--format", "speedscope"], "out.json", s) for s in
              (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)]
    for args, name, sig in cases:
        out = os.path.join(out_dir, name)
        with open(out, "w") as f:
            f.write("old")
        for attempt in range(20):
            p = subprocess.Popen([harness.PROBING, *args, "-i", db, "-o", out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            while p.poll() is None and not writing_to(p.pid, out_dir):
                pass
            if p.poll() is None:
                p.send_signal(sig)
            p.communicate(timeout=60)
            if p.returncode != 0:
                break
            with open(out, "w") as f:  # it finished first: again
                f.write("old")
        assert p.returncode != 0, (args, sig, "never caught while writing")
        assert not [f for f in os.listdir(out_dir) if f.startswith(".")], \
            (args, sig, os.listdir(out_dir))
        with open(out) as f:
            assert f.read() == "old", (args, sig)
    # Not killed: complete, and still nothing else there.
    probing("export", "-i", db, "--format", "speedscope", "-o",
            os.path.join(out_dir, "out.json"), check=True)
    assert json.load(open(os.path.join(out_dir, "out.json")))["profiles"]
    assert sorted(os.listdir(out_dir)) == ["fg.svg", "out.json"]


def test_damaged_times_and_depths_are_refused_by_name():
    """A negative ns (which became 1.8e19 in speedscope's weights) and a depth beyond 32 bits
    (4294967297 was printed as 1) are named as they are in the file."""
    import sqlite3
    db = recordings.make_db(seconds=1)
    con = sqlite3.connect(db)
    con.execute("UPDATE sample_counts SET state = 3 WHERE pid = 200")  # off-CPU: by time
    con.execute("UPDATE sample_counts SET ns = -5 WHERE rowid = (SELECT max(rowid) FROM"
                " sample_counts WHERE pid = 200)")
    con.commit()
    con.close()
    out = harness.tmp("neg.json")
    for args in (["export", "--format", "speedscope", "-o", out], ["flamegraph", "-o", out]):
        p = probing(*args, "-i", db)
        assert p.returncode == 1, (args, p.stdout[-500:])
        assert "damaged" in p.stderr and "-5" in p.stderr and "ns" in p.stderr, p.stderr
        assert not os.path.exists(out)
    # Times that add up past 2^64 ns.
    con = sqlite3.connect(db)
    con.execute("UPDATE sample_counts SET ns = 9000000000000000000")
    con.commit()
    con.close()
    p = probing("export", "--format", "speedscope", "-o", out, "-i", db)
    assert p.returncode == 1 and "damaged" in p.stderr and "2^64" in p.stderr, p.stderr

    db = recordings.make_db(name="depth.db")
    con = sqlite3.connect(db)
    con.execute("UPDATE stack_frames SET depth = 4294967297 WHERE depth = 1 AND stack_id ="
                " (SELECT min(stack_id) FROM stack_frames WHERE depth = 1)")
    con.commit()
    con.close()
    p = probing("flamegraph", "-i", db, "--folded")
    assert p.returncode == 1 and "depth 4294967297" in p.stderr, p.stderr
