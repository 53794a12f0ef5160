"""probing backtrace and python.backtrace without the agent: every thread's stack of a running
process read from outside, against what the process's own interpreter says
(tests/workloads/py_stacks.py dumps sys._current_frames to truth.json), for every
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
        target = h.spawn(["/usr/bin/python3", os.path.join(h.ROOT, "tests/workloads",
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
