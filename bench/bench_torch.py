#!/usr/bin/env python3
"""Training-step slowdown of the PyTorch hooks (probing inject --torch), paired in one process.

One training process (tests/workloads/torch/torch_train.py, a small transformer on CPU, Debian's
torch) prints the start and end of every step. The hooks are switched between three states
in turn, every PHASE seconds, through the real commands (inject --torch / --torch=off,
config torch_every=N):

    off        no hooks
    full       every step recorded (torch_every=1)
    default    the default sampling (torch_every's default)

For each round the mean step time of each state is computed (the mean, not the median: with
sampling only one step in N is slower, and the cost is the average), and the ratios to the
'off' phase of the same round; the table prints the medians over rounds. Steps that overlap
a switch are left out.

    sudo bench/bench_torch.py [--rounds N] [--phase S] [--size tiny|bench]
Needs root (ptrace) and 'make' done (build/probing, build/libprobing-agent.so).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "torch", "torch_train.py")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch


def probing(*args):
    p = subprocess.run([PROBING, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("probing %s failed: %s" % (" ".join(map(str, args)), p.stderr))
    return p.stdout


def default_every(pid):
    out = probing("config", "-p", pid)
    m = re.search(r"^torch_every\s+\S+\s+(\d+)", out, re.M)
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phase", type=float, default=4.0, help="seconds per state and round")
    ap.add_argument("--size", default="bench", choices=("tiny", "bench"))
    args = ap.parse_args()
    if not os.path.exists(PROBING):
        raise SystemExit("build/probing is missing: run make first")
    total = args.rounds * 3 * args.phase + 20
    proc = subprocess.Popen([PYTHON, WORKLOAD, "--size", args.size, "--seconds", str(total)],
                            stdout=subprocess.PIPE, text=True)
    steps = []
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            if line.startswith("READY"):
                ready.set()
            elif line.startswith("STEP"):
                _, a, b, c = line.split()
                steps.append((float(a), float(b), float(c)))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    try:
        ready.wait(30)
        while len(steps) < 5:  # torch imported, model built, first steps done
            time.sleep(0.2)
        pid = proc.pid
        probing("inject", "-p", pid)
        every = default_every(pid)
        phases = []  # (state, round, start, end)
        for r in range(args.rounds):
            for state in ("off", "full", "default"):
                if state == "off":
                    probing("inject", "-p", pid, "--torch=off")
                else:
                    probing("config", "-p", pid, "torch_every=%d" % (1 if state == "full"
                                                                      else every))
                    probing("inject", "-p", pid, "--torch=off")  # a fresh start each phase
                    probing("inject", "-p", pid, "--torch")
                t0 = time.perf_counter()  # CLOCK_MONOTONIC, as the workload's perf_counter
                time.sleep(args.phase)
                phases.append((state, r, t0, time.perf_counter()))
        probing("inject", "-p", pid, "--torch=off")
    finally:
        proc.kill()
        proc.wait()
    per = {}
    for state, r, a, b in phases:
        inside = [(e - s, c) for s, e, c in steps if s >= a and e <= b]
        if inside:
            per.setdefault(r, {})[state] = (statistics.mean(x[0] for x in inside),
                                            statistics.mean(x[1] for x in inside), len(inside))
    rounds = [v for v in per.values() if len(v) == 3]
    if not rounds:
        raise SystemExit("no complete round measured")

    def med(state, k):
        return statistics.median(v[state][k] for v in rounds)

    def ratio(state, k):
        return statistics.median(v[state][k] / v["off"][k] for v in rounds)

    print("torch hooks: %s model (tests/workloads/torch/torch_train.py --size %s), %d rounds of "
          "%.0f s per state, ~%d steps per phase, %d CPUs, load %.1f" % (
              args.size, args.size, len(rounds), args.phase, med("off", 2), os.cpu_count(),
              os.getloadavg()[0]))
    print("  %-30s %11s %9s %11s %9s" % ("", "wall/step", "vs off", "CPU/step", "vs off"))
    print("  %-30s %8.2f ms %9s %8.2f ms %9s" % ("no hooks", med("off", 0) * 1e3, "-",
                                                  med("off", 1) * 1e3, "-"))
    for state, label in (("full", "every step (torch_every=1)"),
                         ("default", "default (torch_every=%d)" % every)):
        print("  %-30s %8.2f ms %+8.1f%% %8.2f ms %+8.1f%%" % (
            label, med(state, 0) * 1e3, (ratio(state, 0) - 1) * 100, med(state, 1) * 1e3,
            (ratio(state, 1) - 1) * 100))
    print("  (means per phase; ratios: median over rounds of each round's state/off. CPU: the")
    print("   training thread's CPU time, which other jobs on a busy machine do not inflate)")
    cost = ratio("default", 1) - 1
    print("goal: <= 2%% at the default sampling (CPU): %s (%+.1f%%)" % (
        "met" if cost <= 0.02 else "NOT met", cost * 100))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
