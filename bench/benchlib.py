"""Helpers shared by the benchmark scripts (bench/run.py, bench/bench_*.py)."""
import os
import re
import resource
import shutil
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
WORK = os.path.join(ROOT, "build", "bench", "work")


def run_measured(cmd, env=None, check=True):
    """Run cmd; return (stdout, stderr, CPU seconds of it and its reaped children, wall
    seconds). A failure ends the benchmark, or with check=False returns None."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0 and not check:
        return None
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout, p.stderr, cpu, wall


def work_times(stdout):
    line = [l for l in stdout.splitlines() if re.match(r"^\d+\.\d+ \d+\.\d+$", l)][-1]
    wall, cpu = map(float, line.split())
    return wall, cpu


def calibrate(seconds, cmd=None, probe=2000):
    """Iterations of a fixed-work program (cmd + [N], printing "WALL CPU") for ~seconds."""
    cmd = cmd or [WORK]
    out, _, _, _ = run_measured(cmd + [str(probe)])
    wall, _ = work_times(out)
    return max(100, int(probe * seconds / wall))


def perf_available():
    if not shutil.which("perf"):
        return False
    p = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "true"],
                       capture_output=True)
    return p.returncode == 0


def probing_samples(db):
    import sqlite3
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    total = con.execute("SELECT SUM(count) FROM samples").fetchone()[0] or 0
    complete = con.execute(
        "SELECT SUM(s.count) FROM samples s JOIN frames f ON f.stack_id = s.stack_id "
        "WHERE f.depth = (SELECT MAX(depth) FROM frames g WHERE g.stack_id = s.stack_id) "
        "AND f.func = '_start'").fetchone()[0] or 0
    return total, complete


def perf_samples(data):
    """(samples, samples whose callchain ends in _start, seconds perf script took)."""
    t0 = time.monotonic()
    p = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"],
                       capture_output=True, text=True)
    took = time.monotonic() - t0
    # A sample is a header line (comm, and ip/sym without a call graph), then with a call
    # graph its frames, leaf first, each on a line that starts with a tab.
    total = complete = 0
    last = None
    for line in p.stdout.splitlines():
        if not line.strip():
            continue
        if line.startswith("\t"):
            last = line.split()[-1]
            continue
        if total:
            complete += last == "_start"
        total += 1
        last = None
    if total:
        complete += last == "_start"
    return total, complete, took


def enable_bpf_stats():
    """Turn on the kernel's accounting of BPF run time (kernel.bpf_stats_enabled) for this
    benchmark, restored at exit: probing then stores its sampling program's total run time
    in the recording (meta bpf_run_ns), the exact cost spent inside the sampled context.
    The accounting itself costs two clock reads per run."""
    import atexit
    path = "/proc/sys/kernel/bpf_stats_enabled"
    try:
        with open(path) as f:
            old = f.read().strip()
        with open(path, "w") as f:
            f.write("1")
    except OSError:
        return
    def restore():
        with open(path, "w") as f:
            f.write(old)
    atexit.register(restore)


def bpf_progs(pid):
    """{prog id: (run_time_ns, run_cnt)} of the BPF programs process @pid holds, from its
    descriptors' fdinfo (the times are 0 without kernel.bpf_stats_enabled)."""
    progs = {}
    d = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(d):
        try:
            with open(os.path.join(d, fd)) as f:
                info = f.read()
        except OSError:
            continue
        m = re.search(r"^prog_id:\s*(\d+)", info, re.M)
        ns = re.search(r"^run_time_ns:\s*(\d+)", info, re.M)
        n = re.search(r"^run_cnt:\s*(\d+)", info, re.M)
        if m and ns and n:
            progs[int(m.group(1))] = (int(ns.group(1)), int(n.group(1)))
    return progs


def bpf_prog_names():
    """{prog id: name} of the BPF programs loaded now (bpftool; {} without it)."""
    import json
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                             text=True).stdout
        return {p["id"]: p.get("name", "?") for p in json.loads(out or "[]")}
    except (OSError, ValueError):
        return {}


def bpf_run_seconds(db):
    """Seconds the sampling program ran during the recording @db (0 if not accounted)."""
    import sqlite3
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    row = con.execute("SELECT value FROM meta WHERE key = 'bpf_run_ns'").fetchone()
    return int(row[0]) / 1e9 if row else 0.0


def trap_floor(calls=100000, rounds=3):
    """Microseconds one uprobe trap costs here with a program that returns at once
    (bench/uprobe_floor.c, built if missing), or None if it cannot be measured."""
    floor = os.path.join(ROOT, "build", "bench", "uprobe_floor")
    if not os.path.exists(floor):
        subprocess.run(["make", "-s", "-C", ROOT, "build/bench/uprobe_floor"], check=False)
    try:
        p = subprocess.run([floor, str(calls), str(rounds)], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^TRAP_US ([\d.]+)", p.stdout, re.M)
    return float(m.group(1)) if p.returncode == 0 and m else None
