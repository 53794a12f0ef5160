#!/usr/bin/env python3
"""probing benchmarks: ratios measured side by side in one run (run as root: make bench).

Native sampling (issue: record):
  - target slowdown while recorded at 99 and 999 Hz, probing vs `perf record --call-graph
    dwarf` at the same frequency, as medians of interleaved runs of a fixed-work program
    (bench/work.c, -O2, no frame pointers);
  - recorder CPU time per second of recording and per sample;
  - bytes stored per sample (recording file vs perf.data);
  - share of samples whose stack reaches _start (complete) for both;
  - post-processing: end of recording to flame graph (probing flamegraph vs perf script).

    bench/run.py [--rounds N] [--seconds S] [--only native,flamegraph,python,...]
Other sections (Python, injection, torch) live in their own scripts under bench/ and are
called from here when present.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (PROBING, ROOT, WORK, bpf_run_seconds, calibrate, enable_bpf_stats,
                      perf_available, perf_samples, probing_samples, run_measured, work_times)


def section_native(args):
    iters = calibrate(args.seconds)
    tmp = tempfile.mkdtemp(prefix="probing-bench-")
    have_perf = perf_available()
    configs = [("baseline", None)]
    for hz in (99, 999):
        configs.append((f"probing {hz} Hz", hz))
        if have_perf:
            configs.append((f"perf dwarf {hz} Hz", hz))
            # The floor: the same timer interrupt, recording only the instruction pointer.
            configs.append((f"perf ip-only {hz} Hz", hz))
    res = {name: {"wall": [], "rec_cpu": [], "bytes": [], "samples": [], "complete": [],
                  "post": [], "rec_wall": [], "bpf": []} for name, _ in configs}
    print(f"native: bench/work {iters} iterations (~{args.seconds:.0f} s), "
          f"{args.rounds} interleaved rounds, {os.cpu_count()} CPUs; 'perf ip-only' is the "
          "cost of the timer interrupt alone (the floor)", flush=True)
    for r in range(args.rounds):
        for name, hz in configs:
            r_ = res[name]
            if name == "baseline":
                out, _, cpu, wall = run_measured([WORK, str(iters)])
                w, c = work_times(out)
                r_["wall"].append(w)
                continue
            if name.startswith("probing"):
                db = os.path.join(tmp, "p.db")
                out, err, cpu, wall = run_measured(
                    [PROBING, "record", "-F", str(hz), "-o", db, "--", WORK, str(iters)])
                w, c = work_times(out)
                r_["wall"].append(w)
                r_["rec_cpu"].append(cpu - c)
                r_["rec_wall"].append(w)
                total, complete = probing_samples(db)
                r_["samples"].append(total)
                r_["complete"].append(complete)
                r_["bytes"].append(os.path.getsize(db))
                r_["bpf"].append(100.0 * bpf_run_seconds(db) / w)
                t0 = time.monotonic()
                subprocess.run([PROBING, "flamegraph", "-i", db, "-o",
                                os.path.join(tmp, "p.svg")], capture_output=True)
                r_["post"].append(time.monotonic() - t0)
            else:
                data = os.path.join(tmp, "perf.data")
                cg = ["--call-graph", "dwarf"] if "dwarf" in name else []
                out, err, cpu, wall = run_measured(
                    ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz)] + cg +
                    ["-o", data, "--", WORK, str(iters)])
                w, c = work_times(out)
                r_["wall"].append(w)
                r_["rec_cpu"].append(cpu - c)
                r_["rec_wall"].append(w)
                total, complete, took = perf_samples(data)
                r_["samples"].append(total)
                r_["complete"].append(complete)
                r_["bytes"].append(os.path.getsize(data))
                r_["post"].append(took)
        print(f"  round {r + 1}/{args.rounds} done", flush=True)
    base = statistics.median(res["baseline"]["wall"])
    print()
    print(f"{'configuration':<20} {'slowdown':>9} {'recorder CPU':>13} {'CPU/sample':>11} "
          f"{'bytes/sample':>13} {'complete':>9} {'to flamegraph':>14}")
    for name, hz in configs:
        r_ = res[name]
        med = statistics.median(r_["wall"])
        slow = 100.0 * (med - base) / base
        if name == "baseline":
            print(f"{name:<20} {'(' + format(base, '.3f') + ' s)':>9}")
            continue
        samples = statistics.median(r_["samples"]) or 1
        cpu = statistics.median(r_["rec_cpu"])
        secs = statistics.median(r_["rec_wall"])
        complete = ("-" if "ip-only" in name else
                    f"{100.0 * sum(r_['complete']) / max(1, sum(r_['samples'])):.1f}%")
        print(f"{name:<20} {slow:>8.2f}% {100 * cpu / secs:>12.2f}% "
              f"{1e6 * cpu / samples:>9.1f}us {statistics.median(r_['bytes']) / samples:>13.1f} "
              f"{complete:>9} {statistics.median(r_['post']):>13.3f}s")
    bpf = {n: res[n]["bpf"] for n, _ in configs if res[n]["bpf"] and any(res[n]["bpf"])}
    if bpf:
        print("\nprobing's BPF program, run inside the sampled target (kernel accounting, "
              "every sample incl. other processes'): " +
              ", ".join(f"{statistics.median(v):.2f}% of the target's time at {n[8:]}"
                        for n, v in bpf.items()))
    if have_perf:
        print()
        for hz in (99, 999):
            p_, f_ = res[f"probing {hz} Hz"], res[f"perf dwarf {hz} Hz"]
            bp = statistics.median(p_["bytes"]) / (statistics.median(p_["samples"]) or 1)
            bf = statistics.median(f_["bytes"]) / (statistics.median(f_["samples"]) or 1)
            print(f"{hz} Hz: probing stores {100 * bp / bf:.2f}% of perf's bytes per sample; "
                  f"recorder CPU {statistics.median(p_['rec_cpu']):.3f}s vs perf "
                  f"{statistics.median(f_['rec_cpu']):.3f}s")
    else:
        print("(perf not available: install linux-perf for the side-by-side columns)")
    shutil.rmtree(tmp, ignore_errors=True)


def section_flamegraph(args):
    """End of recording to flame graph for 1 M samples (bench/flamegraph_1m.sh)."""
    print("flamegraph: 1 M samples, 20k distinct stacks (synthetic recording)", flush=True)
    subprocess.run(["bash", os.path.join(ROOT, "bench", "flamegraph_1m.sh")])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--only", default="", help="sections to run, comma-separated")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    if os.geteuid() != 0:
        raise SystemExit("bench/run.py needs root (it records with BPF and perf)")
    enable_bpf_stats()
    sections = [("native", section_native), ("flamegraph", section_flamegraph)]
    for name, fn in sections:
        if only and name not in only:
            continue
        print(f"\n== {name} ==", flush=True)
        fn(args)
    # Other benchmark scripts (bench/bench_*.py) report their own sections.
    for script in sorted(os.listdir(os.path.dirname(os.path.abspath(__file__)))):
        if script.startswith("bench_") and script.endswith(".py"):
            name = script[6:-3]
            if only and name not in only:
                continue
            print(f"\n== {name} ==", flush=True)
            subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), script)])


if __name__ == "__main__":
    main()
