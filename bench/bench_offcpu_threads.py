#!/usr/bin/env python3
"""Cost of record --off-cpu with many threads (issue 17, item 10): PROCS processes of
THREADS threads each (bench/manythreads.py: one computing, PERIODIC waking every 20-80 ms,
the rest idle on an event), recorded at HZ with and without --off-cpu, rounds interleaved
(the order alternates), medians quoted.

For each recording, over a steady window (from WARMUP s after "recording at" to WINDOW s
later):
    recorder   the probing process's CPU time (utime+stime) as % of one core
    bpf        the run time of probing's BPF programs (bpftool, kernel.bpf_stats_enabled set
               for the run and restored), as % of one core: it runs in the context of the
               task it interrupts, so it is charged to the targets and to whatever else runs
    taskwork   the off-CPU task work's time in the target threads (a block's stack taken as
               its thread resumes, Linux 6.18; the kernel calls it directly, so bpf_stats
               miss it): meta off_cpu_resume_ns over the whole recording, % of one core
    rss        the recorder's peak resident memory (MiB)
and over the whole recording (attach to SIGINT):
    on-CPU     samples in state 'running' per second, and per CPU second the targets were
               given (x HZ: 1.0 = every tick that found a target thread on a CPU was kept)

    sudo bench/bench_offcpu_threads.py [--procs 8] [--threads 64] [--periodic 15]
                                       [--hz 99] [--rounds 4] [--window 10] [--warmup 2]
Needs root and 'make all'.
"""
import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
WORKLOAD = os.path.join(ROOT, "bench", "manythreads.py")
PYTHON = "/usr/bin/python3"
TICK = os.sysconf("SC_CLK_TCK")
TMP = tempfile.mkdtemp(prefix="bench-offcpu-threads-")


def cpu_ns(pid):
    """utime + stime of @pid (all its threads) in ns; 0 if it is gone."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(f[11]) + int(f[12])) * 10**9 // TICK


def bpf_progs():
    """{id: run_time_ns} of the BPF programs loaded now (bpftool)."""
    try:
        out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True,
                             text=True, timeout=30).stdout
        return {p["id"]: p.get("run_time_ns", 0) for p in json.loads(out or "[]")}
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return {}


def bpf_run_ns(before):
    """Summed run_time_ns of the BPF programs loaded since @before (bpf_progs()): those of the
    one probing that runs (this bpftool does not list the programs' processes)."""
    return sum(ns for i, ns in bpf_progs().items() if i not in before)


def start_targets(procs, threads, periodic):
    ps = []
    for _ in range(procs):
        p = subprocess.Popen([PYTHON, WORKLOAD, str(threads), str(periodic)],
                             stdout=subprocess.PIPE, text=True)
        ps.append(p)
    for p in ps:
        if p.stdout.readline().strip() != "READY":
            raise SystemExit("the workload did not start")
    return ps


def one(config, pids, hz, warmup, window):
    out = os.path.join(TMP, f"{config}.db")
    args = [PROBING, "record", "-v", "-F", str(hz), "-p", ",".join(map(str, pids)), "-o", out,
            "--force"]
    if config == "offcpu":
        args.insert(2, "--off-cpu")
    before = bpf_progs()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "recording at" not in seen:
        line = p.stderr.readline()
        if not line:
            raise SystemExit(f"{config}: probing failed: {seen}")
        seen += line
    threading.Thread(target=p.stderr.read, daemon=True).start()
    t_attach = time.monotonic()
    targets_attach = sum(cpu_ns(x) for x in pids)
    time.sleep(warmup)
    t0, r0, b0 = time.monotonic(), cpu_ns(p.pid), bpf_run_ns(before)
    time.sleep(window)
    t1, r1, b1 = time.monotonic(), cpu_ns(p.pid), bpf_run_ns(before)
    targets_stop = sum(cpu_ns(x) for x in pids)
    t_stop = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{config}: probing exited with {p.returncode}")
    con = sqlite3.connect(out)
    running = con.execute("SELECT coalesce(sum(count), 0) FROM samples "
                          "WHERE state = 'running'").fetchone()[0]
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    span = t_stop - t_attach
    return {
        "recorder": 100.0 * (r1 - r0) / ((t1 - t0) * 1e9),
        "bpf": 100.0 * (b1 - b0) / ((t1 - t0) * 1e9),
        "taskwork": 100.0 * meta.get("off_cpu_resume_ns", 0) / (meta["duration"] * 1e9),
        "rss": ru.ru_maxrss / 1024.0,
        "oncpu_per_s": running / span,
        "complete": running / max(1e-9, (targets_stop - targets_attach) / 1e9 * hz),
        "targets_cpu": (targets_stop - targets_attach) / 1e9 / span,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--periodic", type=int, default=15)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    a = ap.parse_args()
    if os.geteuid():
        raise SystemExit("bench_offcpu_threads: needs root (BPF)")
    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    stats_was = open(stats_path).read().strip()
    open(stats_path, "w").write("1")
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} CPUs")
    targets = start_targets(a.procs, a.threads, a.periodic)
    pids = [t.pid for t in targets]
    configs = ["on-cpu", "offcpu"]
    got = {c: [] for c in configs}
    try:
        time.sleep(1.0)
        for i in range(a.rounds):
            order = configs if i % 2 == 0 else configs[::-1]
            for c in order:
                r = one(c, pids, a.hz, a.warmup, a.window)
                got[c].append(r)
                print(f"  round {i + 1} {c:7s} recorder {r['recorder']:5.1f} %  bpf "
                      f"{r['bpf']:5.2f} %  task work {r['taskwork']:4.2f} %  rss {r['rss']:6.1f} MiB  on-CPU {r['oncpu_per_s']:6.1f}/s "
                      f"complete {r['complete']:.3f}  targets {r['targets_cpu']:.2f} CPUs",
                      file=sys.stderr, flush=True)
                time.sleep(0.5)
    finally:
        for t in targets:
            t.kill()
            t.wait()
        open(stats_path, "w").write(stats_was)
        shutil.rmtree(TMP, ignore_errors=True)
    med = {c: {k: statistics.median(r[k] for r in got[c]) for k in got[c][0]} for c in configs}
    print(f"\n{a.procs} processes x {a.threads} threads ({a.periodic} periodic, 1 computing) at "
          f"{a.hz} Hz: medians of {a.rounds} interleaved rounds, {a.window:g} s windows")
    print(f"  {'':8s} {'recorder':>9s} {'bpf':>7s} {'taskwork':>9s} {'rss MiB':>8s} "
          f"{'on-CPU/s':>9s} {'complete':>9s} {'targets CPUs':>13s}")
    for c in configs:
        m = med[c]
        print(f"  {c:8s} {m['recorder']:8.1f}% {m['bpf']:6.2f}% {m['taskwork']:8.2f}% "
              f"{m['rss']:8.1f} "
              f"{m['oncpu_per_s']:9.1f} {m['complete']:9.3f} {m['targets_cpu']:13.2f}")
    ratio = med["offcpu"]["oncpu_per_s"] / med["on-cpu"]["oncpu_per_s"]
    print(f"  on-CPU samples with --off-cpu / without: {ratio:.3f} "
          f"(goal: within 2 %); recorder with --off-cpu: {med['offcpu']['recorder']:.1f} % of "
          f"one core (goal: <= 25 %)")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
