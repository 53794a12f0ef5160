#!/usr/bin/env python3
"""Native unwinding benchmark: the cached .eh_frame rules (native/cfirule.c) against libdwfl,
side by side in one run.

Each workload runs on its own, and is recorded at 999 Hz for --seconds at a time, in
interleaved rounds, once as probing unwinds (the rules where every frame's rule is simple,
libdwfl for the rest) and once with PROBING_UNWIND_LIBDWFL=1 (every stack by libdwfl).
Reported per configuration, medians over the rounds: the time dwproc__unwind took per stack
(meta.native_unwind_ns over the stacks unwound), the recorder's CPU time per sample
(meta.recorder_cpu: unwinding, Python stacks, symbols, SQLite), the share of stacks the rules
unwound, and the share of samples whose native stack is complete; then the ratios.

    bench/bench_unwind.py [--rounds N] [--seconds S] [--python PATH]...

Workloads: build/workloads/deep (C, -O2 without frame pointers, 48 frames of recursion),
tests/workloads/python/deep_threads.py under each --python (default: Debian's
/usr/bin/python3 and, where the Debian unstable root is installed, its python3.14, built
with frame pointers: build/sidroot/python3.14).
"""
import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import PROBING, ROOT  # noqa: E402

DEEP_PY = os.path.join(ROOT, "tests", "workloads", "python", "deep_threads.py")
CONFIGS = (("rules", {}), ("libdwfl", {"PROBING_UNWIND_LIBDWFL": "1"}))


def meta(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    m = dict(con.execute("SELECT key, value FROM meta").fetchall())
    con.close()
    return m


def record(pid, seconds, env, out):
    p = subprocess.run([PROBING, "record", "-F", "999", "-d", str(seconds), "-p", str(pid),
                        "-o", out], env={**os.environ, **env}, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"probing record failed: {p.stderr.strip()}")
    m = meta(out)
    fast, slow = int(m["native_unwinds_by_rules"]), int(m["native_unwinds_by_libdwfl"])
    samples = int(m["samples"])
    return {"us_per_stack": int(m["native_unwind_ns"]) / 1e3 / max(fast + slow, 1),
            "us_per_sample": float(m["recorder_cpu"]) * 1e6 / max(samples, 1),
            "by_rules": 100.0 * fast / max(fast + slow, 1),
            "complete": 100.0 * int(m["complete_native_stacks"]) / max(samples, 1),
            "samples": samples}


def bench(name, cmd, ready, rounds, seconds, tmp):
    """Interleaved rounds of both configurations on one running workload."""
    runs = {c: [] for c, _ in CONFIGS}
    wl = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        if wl.stdout.readline().strip() != ready:
            sys.exit(f"{name}: the workload did not start")
        for r in range(rounds):
            order = CONFIGS if r % 2 == 0 else CONFIGS[::-1]
            for c, env in order:
                runs[c].append(record(wl.pid, seconds, env, os.path.join(tmp, f"{c}{r}.db")))
    finally:
        wl.kill()
        wl.wait()
    med = {c: {k: statistics.median(x[k] for x in runs[c]) for k in runs[c][0]} for c in runs}
    print(f"\n{name}  ({rounds} rounds of {seconds} s each way, medians)")
    print(f"  {'':10} {'us/stack':>9} {'us/sample':>10} {'by rules':>9} {'complete':>9} "
          f"{'samples':>8}")
    for c, _ in CONFIGS:
        m = med[c]
        print(f"  {c:10} {m['us_per_stack']:9.1f} {m['us_per_sample']:10.1f} "
              f"{m['by_rules']:8.1f}% {m['complete']:8.1f}% {m['samples']:8.0f}")
    a, b = med["rules"], med["libdwfl"]
    print(f"  rules/libdwfl: unwinding {a['us_per_stack'] / b['us_per_stack']:.2f}x, "
          f"recorder per sample {a['us_per_sample'] / b['us_per_sample']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--python", action="append")
    a = ap.parse_args()
    pythons = a.python or ["/usr/bin/python3"] + [
        p for p in [os.path.join(ROOT, "build", "sidroot", "python3.14")] if os.path.exists(p)]
    span = str(a.rounds * 2 * (a.seconds + 2) + 30)
    with tempfile.TemporaryDirectory(prefix="bench-unwind-") as tmp:
        print(f"probing {PROBING}; {os.cpu_count()} CPUs; load average "
              f"{os.getloadavg()[0]:.2f} at the start")
        deep = os.path.join(ROOT, "build", "workloads", "deep")
        bench("deep (C, 48 frames of recursion, no frame pointers)",
              ["sh", "-c", f'echo ready; exec {deep} {span}'], "ready", a.rounds, a.seconds, tmp)
        for py in pythons:
            bench(f"deep_threads.py, {py} (3 threads, 40 Python calls deep)",
                  [py, DEEP_PY, span, "40"], "ready", a.rounds, a.seconds, tmp)


if __name__ == "__main__":
    main()
