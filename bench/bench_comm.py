#!/usr/bin/env python3
"""Cost of recording collectives (record's uprobes on gloo, issue 12), side by side.

1. Per probed call: a one-rank gloo group doing all_reduce of one float in a loop
   (bench/comm_loop.py, Debian's torch). Interleaved phases of PHASE seconds: no recorder,
   `record -p PID --no-comm`, `record -p PID` (collectives on). For each round, the loop's
   CPU and wall time per all_reduce in each state; the added cost per call is the round's
   (on - no-comm) difference, median over rounds. The loop's own CPU time, which other jobs on
   a busy machine do not inflate, is the number to trust; wall time is shown as well.
2. A DDP step: a 3-rank gloo DDP job under torchrun (tests/workloads/torch/ddp_comm_job.py,
   no late rank, --hidden wide: 222,010 parameters by default, one gradient allreduce a
   step) recorded by `record -p RANKS [--no-comm]` in interleaved phases. Per phase the
   median step time (rank 0's backward starts, one step apart) and the ranks' CPU per step;
   the table gives medians over rounds of the on/no-comm ratio.

    sudo bench/bench_comm.py [--rounds N] [--phase S]
Needs root and 'make' done (build/probing).
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.environ.get("PROBING_BIN", os.path.join(ROOT, "build", "probing"))
PYTHON = "/usr/bin/python3"
LOOP = os.path.join(ROOT, "bench", "comm_loop.py")
DDP = os.path.join(ROOT, "tests", "workloads", "torch", "ddp_comm_job.py")
SETTLE = 1.0  # s after a recorder starts before its phase counts (BPF load, attach)


class Lines:
    """The lines of a child's stdout, collected by a thread."""

    def __init__(self, proc):
        self.lines = []
        self.proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait(self, pattern, count=1, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [m for m in map(re.compile(pattern).search, list(self.lines)) if m]
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                raise SystemExit("the workload exited: " + "".join(self.lines[-20:]))
            time.sleep(0.1)
        raise SystemExit("timed out waiting for %r" % pattern)


def record_phase(pids, state, seconds, tmp):
    """Run one phase in @state ('off', 'nocomm', 'comm'); return its (start, end) unix time
    window that counts."""
    if state == "off":
        t0 = time.time()
        time.sleep(seconds)
        return t0, time.time()
    args = [PROBING, "record", "-o", os.path.join(tmp, "b.db"), "-p", ",".join(map(str, pids)),
            "-d", str(seconds + SETTLE)] + (["--no-comm"] if state == "nocomm" else [])
    t0 = time.time()
    p = subprocess.run(args, capture_output=True, text=True)
    t1 = time.time()
    if p.returncode != 0:
        raise SystemExit("record failed: " + p.stderr[-2000:])
    if state == "comm" and "collective calls" not in p.stderr:
        raise SystemExit("record saw no collectives: " + p.stderr[-2000:])
    return t0 + SETTLE, t1 - 0.3  # the end: after the samples were saved and probes removed


def per_call(args, tmp):
    env = dict(os.environ, DURATION=str(args.rounds * 3 * (args.phase + SETTLE + 2) + 30),
               OMP_NUM_THREADS="1")
    proc = subprocess.Popen([PYTHON, LOOP], stdout=subprocess.PIPE, text=True, env=env)
    out = Lines(proc)
    try:
        pid = int(out.wait(r"^pid (\d+)")[0].group(1))
        phases = []
        for r in range(args.rounds):
            for state in ("off", "nocomm", "comm"):
                phases.append((r, state) + record_phase([pid], state, args.phase, tmp))
    finally:
        proc.kill()
        proc.wait()
    rounds = [tuple(map(float, l.split()[1:])) for l in out.lines if l.startswith("ROUND")]
    per = {}
    for r, state, a, b in phases:
        # A round of the loop ends at its timestamp and lasted ROUND_S (0.5 s).
        inside = [x for x in rounds if x[0] - 0.5 >= a and x[0] <= b]
        if inside:
            per.setdefault(r, {})[state] = (statistics.median(x[2] for x in inside),
                                            statistics.median(x[3] for x in inside),
                                            sum(x[1] for x in inside))
    full = [v for v in per.values() if len(v) == 3]
    if not full:
        raise SystemExit("no complete round measured")

    def med(state, k):
        return statistics.median(v[state][k] for v in full)

    def diff(state, k):
        return statistics.median(v[state][k] - v["nocomm"][k] for v in full)

    print("per call: all_reduce of 1 float, one-rank gloo group (bench/comm_loop.py), %d rounds "
          "of %.0f s per state, %d CPUs, load %.1f" % (len(full), args.phase, os.cpu_count(),
                                                      os.getloadavg()[0]))
    print("  %-34s %12s %12s" % ("", "wall/call", "CPU/call"))
    for state, label in (("off", "no recorder"), ("nocomm", "record --no-comm"),
                         ("comm", "record (collectives on)")):
        print("  %-34s %9.2f us %9.2f us" % (label, med(state, 0), med(state, 1)))
    print("  %-34s %+9.2f us %+9.2f us" % ("collectives' probes, per call", diff("comm", 0),
                                             diff("comm", 1)))
    print("  (medians over the loop's 0.5 s rounds inside each phase, then over rounds; the")
    print("   added cost: median over rounds of each round's on - no-comm)")
    sys.stdout.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_step(args, tmp):
    env = dict(os.environ, STEPS="1000000", LATE_MS="0", OMP_NUM_THREADS="1",
               HIDDEN=str(args.hidden))
    proc = subprocess.Popen(["/usr/bin/torchrun", "--nproc_per_node", "3", "--master_addr",
                             "127.0.0.1", "--master_port", str(free_port()), "--redirects", "1",
                             "--tee", "1", DDP], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    out = Lines(proc)
    try:
        ranks = {int(m.group(2)): int(m.group(1)) for m in
                 out.wait(r"rank (\d+) pid (\d+) params", 3)}
        out.wait(r"STEP rank=0 step=20 ", 1)
        phases = []
        for r in range(args.rounds):
            for state in ("nocomm", "comm"):
                phases.append((r, state) + record_phase(list(ranks), state, args.phase, tmp))
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    steps = {}
    for rank, step, a, cpu in re.findall(r"STEP rank=(\d+) step=(\d+) bwd_start=(\d+) "
                                         r"bwd_end=\d+ cpu=(\d+)", "".join(out.lines)):
        steps.setdefault(int(rank), []).append((int(a) / 1e9, int(cpu) / 1e9))
    per = {}
    for r, state, a, b in phases:
        walls, cpus = [], []
        for rank, ss in steps.items():
            inside = [(s1[0] - s0[0], s1[1] - s0[1]) for s0, s1 in zip(ss, ss[1:])
                      if s0[0] >= a and s1[0] <= b]
            if rank == 0:
                walls = [w for w, _ in inside]
            cpus += [c for _, c in inside]
        if walls:
            per.setdefault(r, {})[state] = (statistics.median(walls), statistics.median(cpus),
                                            len(walls))
    full = [v for v in per.values() if len(v) == 2]
    if not full:
        raise SystemExit("no complete round measured")

    def med(state, k):
        return statistics.median(v[state][k] for v in full)

    def ratio(k):
        return statistics.median(v["comm"][k] / v["nocomm"][k] for v in full)

    spread = [v["comm"][0] / v["nocomm"][0] for v in full]
    print("DDP step: 3 ranks, gloo, %d parameters (tests/workloads/torch/ddp_comm_job.py "
          "HIDDEN=%d), %d rounds of %.0f s per state, ~%d steps per phase" % (
              111 * args.hidden + 10, args.hidden, len(full), args.phase, med("nocomm", 2)))
    print("  %-34s %12s %12s" % ("", "wall/step", "CPU/step"))
    print("  %-34s %9.2f ms %9.2f ms" % ("record --no-comm", med("nocomm", 0) * 1e3,
                                          med("nocomm", 1) * 1e3))
    print("  %-34s %9.2f ms %9.2f ms" % ("record (collectives on)", med("comm", 0) * 1e3,
                                          med("comm", 1) * 1e3))
    print("  %-34s %+10.1f%% %+10.1f%%" % ("on vs --no-comm (median ratio)",
                                            (ratio(0) - 1) * 100, (ratio(1) - 1) * 100))
    print("  (wall: rank 0's step; CPU: each rank's process per step; per-round wall ratios "
          "%s)" % " ".join("%.3f" % x for x in spread))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--phase", type=float, default=4.0, help="seconds per state and round")
    ap.add_argument("--only", choices=("call", "ddp"), help="one part only")
    ap.add_argument("--hidden", type=int, default=2000,
                    help="the DDP model's hidden width (parameters: 111 x HIDDEN + 10)")
    args = ap.parse_args()
    if not os.path.exists(PROBING):
        raise SystemExit("build/probing is missing: run make first")
    if os.geteuid() != 0:
        raise SystemExit("bench_comm.py needs root (record loads BPF programs)")
    with tempfile.TemporaryDirectory(prefix="bench-comm-") as tmp:
        if args.only in (None, "call"):
            per_call(args, tmp)
        if args.only in (None, "ddp"):
            ddp_step(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
