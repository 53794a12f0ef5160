#!/usr/bin/env python3
"""Python sampling benchmark (issue: CPython stacks in record), side by side in one run.

A fixed amount of CPU-bound Python work (bench/pywork.py) runs:
  - alone (baseline),
  - under `probing record` at 99 and 999 Hz (Python + native stacks),
  - under Austin at 100 and 1000 Hz, if an austin binary is given ($AUSTIN or on PATH; build
    it yourself from https://github.com/P403n1x87/austin outside this repository),
  - under `perf record --call-graph dwarf` at 99 and 999 Hz (if perf works),
in interleaved rounds; the work reports its own time, so the slowdown is the median of the
paired runs. For probing it also reports the recorder's CPU time per sample, the share of
samples taken while the script runs whose Python stack is complete (reaches <module>) —
the goal is 100% — and the share of all samples whose native stack reaches _start.

    bench/bench_python.py [--rounds N] [--seconds S] [--python PATH]...

With several --python (e.g. pyenv's 3.12 and the sid root's 3.14: build/sidroot/python3.14,
made by tests/integration/sidroot.py), every interpreter's configurations run in the same
interleaved rounds and are reported side by side, each against its own baseline.
"""
import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (PROBING, ROOT, bpf_run_seconds, calibrate, enable_bpf_stats,  # noqa
                      perf_available, run_measured, work_times)

PYWORK = os.path.join(ROOT, "bench", "pywork.py")


def python_completeness(db):
    """(samples taken while the script ran, of which with a complete Python stack).

    While the script runs, every sample is under pywork.py's <module> -> main -> ...; such a
    sample is recognised by a Python frame of pywork.py or, should the Python walk have
    failed, by an eval-loop frame left unfolded in its native stack (a failure, counted).
    Samples of the interpreter's own start-up and shutdown (exec, ld.so, imports before
    the script) have no script frame to find and are not counted; nor are samples inside
    the interpreter's initialization (pymain_init, Py_Initialize*), which run Python code
    (frozen importlib, site) before the recorder could have found the interpreter.
    """
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    total = complete = 0
    rows = con.execute(
        "SELECT s.count, (SELECT group_concat(func, ';') FROM (SELECT func FROM frames f "
        "WHERE f.stack_id = s.stack_id AND f.kind = 'python' ORDER BY depth DESC)), "
        "EXISTS (SELECT 1 FROM frames f WHERE f.stack_id = s.stack_id AND f.kind = 'python' "
        "AND f.file LIKE '%pywork.py'), "
        "EXISTS (SELECT 1 FROM frames f WHERE f.stack_id = s.stack_id AND f.kind = 'native' "
        "AND f.func = '_PyEval_EvalFrameDefault'), "
        "EXISTS (SELECT 1 FROM frames f WHERE f.stack_id = s.stack_id AND f.kind = 'native' "
        "AND f.func IN ('pymain_init', 'Py_InitializeFromConfig', 'Py_InitializeEx')) "
        "FROM samples s WHERE s.thread = 'MainThread' OR s.tid = s.pid").fetchall()
    for n, chain, in_script, eval_unfolded, initializing in rows:
        names = chain.split(";") if chain else []
        if not (in_script or (eval_unfolded and not names and not initializing)):
            continue
        total += n
        # Inside main()'s loop everything runs under <module> -> main -> descend...
        if names[:2] == ["<module>", "main"] and "[unknown]" not in names:
            complete += n
    return total, complete


def native_completeness(db):
    """(samples, of which the native stack reaches _start): the interpreter's main thread
    starts there, so every other root is a native unwind that stopped early."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    return con.execute(
        "SELECT SUM(s.count), SUM(CASE WHEN f.kind = 'native' AND f.func = '_start' "
        "THEN s.count ELSE 0 END) FROM samples s JOIN frames f ON f.stack_id = s.stack_id "
        "AND f.depth = (SELECT MAX(depth) FROM frames g WHERE g.stack_id = s.stack_id)"
    ).fetchone()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--python", action="append",
                    help="interpreter (repeat to compare; default pyenv's 3.12)")
    args = ap.parse_args()
    pys = []
    for py in args.python or [os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3.12")]:
        pys.append(py if os.path.exists(py) else "/usr/bin/python3")
    austin = os.environ.get("AUSTIN") or shutil.which("austin")
    have_perf = perf_available()
    iters = {py: calibrate(args.seconds, [py, PYWORK], probe=500) for py in pys}
    tmp = tempfile.mkdtemp(prefix="probing-bench-py-")
    configs = [("baseline", None)]
    for hz in (99, 999):
        configs.append((f"probing {hz} Hz", hz))
        if austin:
            configs.append((f"austin {hz + 1} Hz", hz + 1))
        if have_perf:
            configs.append((f"perf dwarf {hz} Hz", hz))
            # The floor: the same timer interrupt, recording only the instruction pointer.
            configs.append((f"perf ip-only {hz} Hz", hz))
    enable_bpf_stats()
    res = {(py, name): {"wall": [], "cpu": [], "samples": [], "complete": [], "failed": 0,
                        "bpf": [], "native": []} for py in pys for name, _ in configs}
    for py in pys:
        print(f"python: {py} bench/pywork.py {iters[py]} iterations "
              f"(~{args.seconds:.0f} s), {args.rounds} interleaved rounds", flush=True)
    if not austin:
        print("  (no Austin: set AUSTIN=/path/to/austin to compare with it)")
    for rnd in range(args.rounds):
        for py in pys:
            for name, hz in configs:
                run_config(py, iters[py], name, hz, res[(py, name)], tmp, austin)
        print(f"  round {rnd + 1}/{args.rounds} done", flush=True)
    for py in pys:
        report(py, configs, {name: res[(py, name)] for name, _ in configs})
    shutil.rmtree(tmp, ignore_errors=True)


def run_config(py, iters, name, hz, r, tmp, austin):
    """One run of configuration @name on interpreter @py, its results appended to @r."""
    work = [py, PYWORK, str(iters)]
    if name == "baseline":
        out, _, _, _ = run_measured(work)
        r["wall"].append(work_times(out)[0])
    elif name.startswith("probing"):
        db = os.path.join(tmp, "p.db")
        out, _, cpu, _ = run_measured([PROBING, "record", "-F", str(hz), "-o", db,
                                       "--"] + work)
        w, c = work_times(out)
        r["wall"].append(w)
        r["cpu"].append(cpu - c)
        n, comp = python_completeness(db)
        total = sqlite3.connect(db).execute(
            "SELECT SUM(count) FROM samples").fetchone()[0] or 1
        r["samples"].append(total)
        r["complete"].append((n, comp))
        r["native"].append(native_completeness(db))
        r["bpf"].append(100.0 * bpf_run_seconds(db) / w)
    elif name.startswith("austin"):
        outf = os.path.join(tmp, "a.austin")
        got = run_measured([austin, "-i", str(1000000 // hz), "-o", outf] + work,
                           check=False)
        if got is None:  # Austin sometimes misses the process it started
            r["failed"] += 1
            return
        out, _, cpu, _ = got
        w, c = work_times(out)
        r["wall"].append(w)
        r["cpu"].append(cpu - c)
        with open(outf, errors="replace") as f:
            r["samples"].append(sum(1 for line in f if line and line[0] == "P"))
    else:
        data = os.path.join(tmp, "perf.data")
        cg = ["--call-graph", "dwarf"] if "dwarf" in name else []
        out, _, cpu, _ = run_measured(["perf", "record", "-q", "-e", "cpu-clock", "-F",
                                       str(hz)] + cg + ["-o", data, "--"] + work)
        w, c = work_times(out)
        r["wall"].append(w)
        r["cpu"].append(cpu - c)


def report(py, configs, res):
    base = statistics.median(res["baseline"]["wall"])
    print()
    print(py)
    print(f"{'configuration':<20} {'slowdown':>9} {'tool CPU':>9} {'CPU/sample':>11} "
          f"{'complete Python stacks':>23} {'native to _start':>17}")
    print(f"{'baseline':<20} {'(' + format(base, '.2f') + ' s)':>9}")
    for name, hz in configs[1:]:
        r = res[name]
        if not r["wall"]:
            print(f"{name:<20} (every run failed)")
            continue
        slow = 100.0 * (statistics.median(r["wall"]) - base) / base
        cpu = statistics.median(r["cpu"])
        per = ""
        if r["samples"] and statistics.median(r["samples"]):
            per = f"{1e6 * cpu / statistics.median(r['samples']):.1f}us"
        comp = ""
        if r["complete"]:
            n = sum(a for a, _ in r["complete"])
            c = sum(b for _, b in r["complete"])
            comp = f"{100.0 * c / max(1, n):.2f}% of {n}"
        if r["native"]:
            n = sum(a or 0 for a, _ in r["native"])
            comp += f" {100.0 * sum(b or 0 for _, b in r['native']) / max(1, n):>16.2f}%"
        failed = f"  ({r['failed']} runs failed)" if r["failed"] else ""
        if r["bpf"] and any(r["bpf"]):
            failed += f"  BPF in target {statistics.median(r['bpf']):.2f}%"
        print(f"{name:<20} {slow:>8.2f}% {cpu:>8.2f}s {per:>11} {comp:>23}{failed}")


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("bench_python.py needs root (it records with BPF)")
    main()
