"""probing backtrace and python.backtrace without the agent: every thread's stack of a running
process read from outside, against what the process's own interpreter says
(tests/workloads/python/py_stacks.py dumps sys._current_frames to truth.json), for every
interpreter; --native against known native frames; the target is never disturbed."""
import json
import os
import re
import subprocess
import time

import harness as h
import pystack_common as pc

PYTHONS = h.pythons()
IDS = [label for label, _ in PYTHONS]


def parse(out):
    """{tid: {"name", "state", "frames": [(func, file, line, module)]}} from backtrace."""
    threads, cur = {}, None
    head = re.compile(r'^Thread (\d+) "(.*)" \(([^)]*)\)')
    pyf = re.compile(r"^    (.+) \((.+):(\d+)\)$")
    natf = re.compile(r"^    (.+?)(?: \((.+):(\d+)\))? \[(.+)\]$")
    for line in out.splitlines():
        m = head.match(line)
        if m:
            cur = threads[int(m.group(1))] = {"name": m.group(2), "state": m.group(3),
                                               "frames": []}
            continue
        if cur is None or not line.startswith("    "):
            continue
        m = natf.match(line)
        if m:
            cur["frames"].append((m.group(1), m.group(2), int(m.group(3) or 0), m.group(4)))
            continue
        m = pyf.match(line)
        if m:
            cur["frames"].append((m.group(1), m.group(2), int(m.group(3)), None))
    return threads


def expected(truth_t, version):
    # backtrace prints the qualified name where the interpreter has one (3.11+).
    return [((f["qualname"] if version >= (3, 11) else f["func"]), f["file"], f["line"])
            for f in truth_t["frames"]]


@h.timeout(120)
@h.params([p for _, p in PYTHONS], IDS)
def test_backtrace_matches_interpreter(exe):
    p, out, truth = pc.start_workload(exe)
    version = tuple(truth["version"])
    r = h.probing("backtrace", "-p", p.pid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Process {p.pid}: "), r.stdout[:200]
    assert f"Python {version[0]}.{version[1]}" in r.stdout
    threads = parse(r.stdout)
    by_name = {t["name"]: (tid, t) for tid, t in threads.items()}
    for t in truth["threads"]:
        assert t["name"] in by_name, f"thread {t['name']!r} missing: {list(by_name)}"
        tid, ours = by_name[t["name"]]
        assert tid == pc.native_tid(t)
        if t["name"] == "MainThread":
            continue  # it dumped the truth from a different place than where it sleeps
        got = [(f, fi, ln) for f, fi, ln, mod in ours["frames"]]
        assert got == expected(t, version), f"{t['name']}: {got} != {expected(t, version)}"
        assert ours["state"] == "sleeping", ours["state"]


@h.timeout(120)
@h.params([p for _, p in PYTHONS], IDS)
def test_python_backtrace_table_without_agent(exe):
    p, out, truth = pc.start_workload(exe)
    version = tuple(truth["version"])
    r = h.probing("query", "-p", p.pid, "--format", "json",
                  "SELECT thread, tid, depth, func, file, lineno, kind FROM python.backtrace "
                  "ORDER BY tid, depth")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert all(row["kind"] == "python" for row in rows)
    for t in truth["threads"]:
        if t["name"] == "MainThread":
            continue
        mine = [(x["func"], x["file"], x["lineno"]) for x in rows if x["thread"] == t["name"]]
        assert mine == [(f["func"], f["file"], f["line"]) for f in t["frames"]], t["name"]
        assert {x["tid"] for x in rows if x["thread"] == t["name"]} == {pc.native_tid(t)}
    # The agent was not loaded to answer.
    assert "libprobing-agent" not in open(f"/proc/{p.pid}/maps").read()


@h.params([p for _, p in PYTHONS], IDS)
def test_native_frames_merged(exe):
    # A thread sleeping in time.sleep: libc's clock_nanosleep sits under the Python caller.
    script = h.tmp("sleeper.py")
    with open(script, "w") as f:
        f.write("import sys, time\n"
                "def nap():\n"
                "    while True:\n"
                "        time.sleep(30)  # nap line\n"
                "print('ready', flush=True)\n"
                "nap()\n")
    target = h.spawn([exe, script], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    r = h.probing("backtrace", "-p", target.pid, "--native")
    assert r.returncode == 0, r.stderr
    frames = parse(r.stdout)[target.pid]["frames"]
    names = [f[0] for f in frames]
    assert "nap" in names and "<module>" in names, names
    i = names.index("nap")
    leafward = [f for f in frames[:i]]
    assert leafward and all(f[3] is not None for f in leafward), frames  # native only
    # time.sleep: clock_nanosleep (3.11+), select (3.8-3.10)
    assert any("nanosleep" in f[0] or "select" in f[0] for f in leafward), leafward
    assert frames[i][2] == 4, frames[i]
    assert names[-1] in ("_start", "__libc_start_main_impl") or "_start" in names, names


def test_native_process():
    target = h.spawn([h.workload("deep"), "30"])
    time.sleep(0.3)
    r = h.probing("backtrace", "-p", target.pid)
    assert r.returncode == 0, r.stderr
    frames = parse(r.stdout)[target.pid]["frames"]
    names = [f[0] for f in frames]
    assert names.count("recurse") == 48 and "main" in names, names


def test_target_not_disturbed():
    # A target checking its own sleeps and reads (ctypes: an EINTR would be seen) while
    # backtrace --native holds each of its threads, many times.
    for mode in ("c_nanosleep", "c_epoll", "c_read", "sleep", "threads"):
        target = h.spawn(["/usr/bin/python3", os.path.join(h.PY_WORKLOADS, "live",
                                                           "live_target.py"), mode, "6"],
                         stdout=subprocess.PIPE, text=True)
        assert target.stdout.readline().startswith("READY")
        for _ in range(15):
            r = h.probing("backtrace", "-p", target.pid, "--native")
            assert r.returncode == 0, r.stderr
        out, _ = target.communicate(timeout=60)
        assert target.returncode == 0 and "RESULT ok" in out, (mode, out)


def test_bad_input():
    r = h.probing("backtrace", "-p", "999999")
    assert r.returncode == 1 and "no such process" in r.stderr
    r = h.probing("backtrace")
    assert r.returncode == 2 and "-p PID" in r.stderr
    r = h.probing("backtrace", "-p", "abc")
    assert r.returncode == 2
    r = h.probing("backtrace", "--bogus")
    assert r.returncode == 2 and "--bogus" in r.stderr
    r = h.probing("backtrace", "--help")
    assert r.returncode == 0 and "--native" in r.stdout
    # Another user may not read a root process's stacks.
    target = h.spawn(["/bin/sleep", "30"])
    r = h.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", h.PROBING,
               "backtrace", "-p", str(target.pid), "--native"])
    assert r.returncode == 1, r.stdout
    assert "Traceback" not in r.stderr and r.stderr.strip()


LOCALS_WORKLOAD = os.path.join(h.PY_WORKLOADS, "python", "py_locals.py")


def start_locals(exe, max_repr):
    """tests/workloads/python/py_locals.py: threads parked with known locals, and truth.json."""
    out = h.tmp("locals")
    os.makedirs(out, exist_ok=True)
    p = h.spawn([exe, LOCALS_WORKLOAD, out, str(max_repr)])
    done = os.path.join(out, "truth.json")
    h.wait_for(lambda: os.path.exists(done) or p.poll() is not None, timeout=60,
               what="the locals workload")
    assert p.poll() is None, f"workload exited {p.returncode}"
    with open(done, encoding="utf-8") as f:
        return p, json.load(f)


def parse_locals(out):
    """{thread name: [(func, {name: repr})]} of the Python frames, innermost first."""
    threads, cur = {}, None
    head = re.compile(r'^Thread \d+ "(.*)" \(')
    frame = re.compile(r"^    (\S.*) \((.+):(\d+)\)$")
    var = re.compile(r"^        (\S+) = (.*)$")
    for line in out.splitlines():
        m = head.match(line)
        if m:
            cur = threads[m.group(1)] = []
            continue
        m = var.match(line)
        if m and cur:
            cur[-1][1][m.group(1)] = m.group(2)
            continue
        m = frame.match(line)
        if m and cur is not None:
            cur.append((m.group(1).rsplit(".", 1)[-1], {}))
    return threads


def check_vars(where, got, want, full):
    """@want: truth.json locals; outside, values without a repr show as <type object at 0x..>;
    with @full (the agent), every value has its full repr."""
    names = [v["name"] for v in want]
    assert sorted(got) == sorted(names), f"{where}: names {sorted(got)} != {sorted(names)}"
    for v in want:
        r = got[v["name"]]
        if v["repr"] is not None:
            if full and v["type"] in ("tuple", "list", "dict", "set", "frozenset"):
                continue  # checked in the caller with the real repr
            if full and r != v["repr"] and v["type"] in ("str", "bytes", "int"):
                # cut at the agent's limit, not MAX_REPR: the full repr starts the same way
                assert r.startswith(v["repr"].rstrip(".")[:40]), (where, v, r)
                continue
            assert r == v["repr"], f"{where}: {v['name']} = {r}, interpreter says {v['repr']}"
        elif not full:
            assert re.fullmatch(r"<%s object at 0x[0-9a-f]+>" % re.escape(v["type"]), r), \
                (where, v, r)


@h.timeout(180)
@h.params([p for _, p in PYTHONS], IDS)
def test_backtrace_locals(exe):
    max_repr = 200
    p, truth = start_locals(exe, max_repr)
    try:
        r = h.probing("backtrace", "-p", p.pid, "--locals")
        assert r.returncode == 0, r.stderr
        threads = parse_locals(r.stdout)
        for t in truth["threads"]:
            if t["frames"] is None:
                continue
            ours = threads.get(t["name"])
            assert ours is not None, f"thread {t['name']} missing: {list(threads)}"
            assert [f for f, _ in ours] == [f["func"] for f in t["frames"]], (t["name"], ours)
            for depth, (tf, (_, got)) in enumerate(zip(t["frames"], ours)):
                want = tf["locals"] if tf["optimized"] else tf["namespace"]
                check_vars(f"{t['name']} frame {depth}", got, want, full=False)
        # The main thread parks at module level: its frame shows the module's data.
        main = threads["MainThread"]
        assert main[-1][0] == "<module>", main
        check_vars("<module>", main[-1][1], truth["module_namespace"], full=False)
        assert "r\\xe9sum\\xe9" not in r.stdout and "'résumé'" in r.stdout

        # With the agent: full reprs, computed by the process itself.
        r = h.probing("inject", "-p", p.pid)
        assert r.returncode == 0, r.stderr
        r = h.probing("backtrace", "-p", p.pid, "--locals")
        assert r.returncode == 0, r.stderr
        simple = [f for f in parse_locals(r.stdout)["simple"] if f[0] == "park_simple"][0][1]
        want = [f for t in truth["threads"] if t["name"] == "simple"
                for f in t["frames"] if f["func"] == "park_simple"][0]["locals"]
        check_vars("park_simple (agent)", simple, want, full=True)
        assert re.fullmatch(r"<__main__\.Plain object at 0x[0-9a-f]+>", simple["obj"]), simple
        assert simple["myint"] == "5" and simple["tup"] == "(1, 2, 3)", simple
        assert simple["lst"] == "[1, [2]]" and simple["dct"] == "{'a': 1, 'b': 2}", simple
        assert simple["cls"] == "<class '__main__.Plain'>", simple
        assert simple["too_big"].endswith("..."), simple["too_big"][-20:]
        # --inject loads the agent only when asked; it goes with --locals.
        r = h.probing("backtrace", "-p", p.pid, "--inject")
        assert r.returncode == 2 and "--locals" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()


GIL_HOG = r'''
import re, sys, time
marker = "m" * 3
def hog(n):
    text = "a" * n + "b"
    print("ready", flush=True)
    return re.match(r"(a+)+$", text)  # exponential backtracking, the GIL held throughout
if sys.stdin.readline():
    hog(48)
'''


@h.timeout(60)
def test_backtrace_locals_gil_held():
    """The agent cannot take the GIL: within about a second, the outside view, exit 0."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", GIL_HOG], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        r = h.probing("inject", "-p", p.pid)
        assert r.returncode == 0, r.stderr
        q = h.probing("query", "-p", p.pid, "--format", "csv",
                      "SELECT name, repr FROM python.locals WHERE func = '<module>'")
        assert q.returncode == 0, q.stderr
        assert q.stdout == "name,repr\nmarker,'mmm'\n", q.stdout  # python.locals (agent)
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline() == "ready\n"
        time.sleep(0.2)
        t0 = time.monotonic()
        r = h.probing("backtrace", "-p", p.pid, "--locals")
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        assert "did not get the GIL" in r.stderr and "read from outside" in r.stderr, r.stderr
        hog = [f for fs in parse_locals(r.stdout).values() for f in fs if f[0] == "hog"]
        assert hog and hog[0][1]["n"] == "48", r.stdout
        assert hog[0][1]["text"] == repr("a" * 48 + "b"), hog
        assert took < 10, took
    finally:
        p.kill()
        p.wait()
