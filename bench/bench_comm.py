#!/usr/bin/env python3
"""Cost of recording collectives (record's uprobes on gloo, issue 12), side by side.

1. Per probed call: a gloo group (one rank, or --ranks N) doing all_reduce of one float in a
   loop as fast as it can (bench/comm_loop.py, Debian's torch). Interleaved phases of PHASE
   seconds: no recorder, `record -p PIDS --no-comm`, `record -p PIDS` (collectives on), and
   with PROBING_BEFORE=/path/to/an/older/build/probing that build's `record` too. For each
   round, the loop's CPU and wall time per all_reduce in each state; the added cost per call
   is the round's (on - no-comm) difference, median over rounds. The loop's own CPU time,
   which other jobs on a busy machine inflate less than wall time, is the number to trust;
   wall time and calls/s are shown as well. With bpftool, the time comm_probe ran per call
   (kernel.bpf_stats_enabled, turned on for the run) and the recorder's CPU; the stacks copied
   (meta comm_stack_copies) against the calls recorded.
2. A DDP step: a 3-rank gloo DDP job under torchrun (tests/workloads/torch/ddp_comm_job.py,
   no late rank, --hidden wide: 222,010 parameters by default, one gradient allreduce a
   step) recorded by `record -p RANKS [--no-comm]` in interleaved phases. Per phase the
   median step time (rank 0's backward starts, one step apart) and the ranks' CPU per step;
   the table gives medians over rounds of the on/no-comm ratio.
3. With part 1, the floor: what one uprobe trap costs on this machine with a program that
   returns at once (bench/uprobe_floor.c, run once per round between the phases), and the
   target time per call it implies: the probes' hits per call times that floor, plus their
   program's run time per call. Unlike the loop's CPU time, both are measured where they are
   spent, so other jobs on the machine move them much less.

    sudo [PROBING_BEFORE=OLD/build/probing] bench/bench_comm.py [--rounds N] [--phase S]
        [--only call|ddp] [--ranks N]
Needs root and 'make' done (build/probing).
"""
import argparse
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import bpf_prog_names, bpf_progs, trap_floor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.environ.get("PROBING_BIN", os.path.join(ROOT, "build", "probing"))
BEFORE = os.environ.get("PROBING_BEFORE")  # another build of probing, to compare
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


def comm_bpf_ns(rec_pid):
    """(run_time_ns, run_cnt) of the comm_probe programs the recorder @rec_pid holds (found by
    its descriptors' fdinfo), summed; (0, 0) without bpftool or kernel.bpf_stats_enabled."""
    try:
        progs = bpf_progs(rec_pid)
    except OSError:
        return 0, 0
    names = bpf_prog_names()
    ns = cnt = 0
    for prog, (run_ns, runs) in progs.items():
        if names.get(prog) == "comm_probe":
            ns += run_ns
            cnt += runs
    return ns, cnt


def record_phase(pids, state, seconds, tmp):
    """Run one phase in @state ('off', 'nocomm', or a recording with collectives: 'comm', or
    'before' with PROBING_BEFORE's binary); return (start, end, extra): the unix time window
    that counts and, for a recording, what it cost outside the target."""
    if state == "off":
        t0 = time.time()
        time.sleep(seconds)
        return t0, time.time(), {}
    binary = BEFORE if state == "before" else PROBING
    try:  # again each time: another benchmark on the machine may have restored it
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
    except OSError:
        pass
    db = os.path.join(tmp, "b.db")
    args = [binary, "record", "-o", db, "-p", ",".join(map(str, pids)),
            "-d", str(seconds + SETTLE + 0.5)] + (["--no-comm"] if state == "nocomm" else [])
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(SETTLE)
    b0, t0 = comm_bpf_ns(p.pid), time.time()
    time.sleep(seconds)
    b1, t1 = comm_bpf_ns(p.pid), time.time()
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read()
    if status != 0:
        raise SystemExit("record failed: " + err[-2000:])
    if state in ("comm", "before") and "collective calls" not in err:
        raise SystemExit("record saw no collectives: " + err[-2000:])
    m = re.search(r"over ([\d.]+) s ->", err)
    lost = re.search(r"(\d+) events of collective calls were lost", err)
    extra = {"bpf_ns": b1[0] - b0[0], "bpf_runs": b1[1] - b0[1],
             "rec_cpu": (ru.ru_utime + ru.ru_stime) / float(m.group(1)) if m else 0.0,
             "lost": int(lost.group(1)) if lost else 0}
    if state in ("comm", "before"):
        con = sqlite3.connect(db)
        md = dict(con.execute("SELECT key, value FROM meta"))
        extra["rows"] = int(md.get("collectives", 0))
        extra["copies"] = int(md.get("comm_stack_copies", -1))
        con.close()
    os.unlink(db)
    return t0, t1, extra


def start_loop(args, port, rank, duration):
    env = dict(os.environ, DURATION=str(duration), OMP_NUM_THREADS="1")
    if args.ranks > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(args.ranks))
    return subprocess.Popen([PYTHON, LOOP], stdout=subprocess.PIPE, text=True, env=env)


def per_call(args, tmp):
    states = ["off", "nocomm"] + (["before"] if BEFORE else []) + ["comm"]
    duration = 3 * args.rounds * len(states) * (args.phase + SETTLE + 3) + 120  # killed after
    port = free_port()
    procs = [start_loop(args, port, rank, duration) for rank in range(args.ranks)]
    outs = [Lines(p) for p in procs]
    phases, loads, floors = [], [], []
    try:
        pids = [int(o.wait(r"^pid (\d+)")[0].group(1)) for o in outs]
        for r in range(args.rounds):
            floors.append(trap_floor())
            for state in states:
                loads.append(os.getloadavg()[0])
                phases.append((r, state) + record_phase(pids, state, args.phase, tmp))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    rounds = [[tuple(map(float, l.split()[1:])) for l in o.lines if l.startswith("ROUND")]
              for o in outs]
    per, best = {}, {}
    for r, state, a, b, extra in phases:
        # A round of the loop ends at its timestamp and lasted ROUND_S (0.5 s); the ranks'
        # medians, then their mean.
        walls, cpus, calls = [], [], 0
        for rs in rounds:
            inside = [x for x in rs if x[0] - 0.5 >= a and x[0] <= b]
            if not inside:
                break
            walls.append(statistics.median(x[2] for x in inside))
            cpus.append(statistics.median(x[3] for x in inside))
            calls += sum(x[1] for x in inside) * (b - a) / (0.5 * len(inside))
        else:
            per.setdefault(r, {})[state] = dict(extra, wall=statistics.mean(walls),
                                                cpu=statistics.mean(cpus), calls=calls,
                                                secs=b - a)
            best.setdefault(state, []).extend(
                x[3] for rs in rounds for x in rs if x[0] - 0.5 >= a and x[0] <= b)
    full = [v for v in per.values() if len(v) == len(states)]
    if not full:
        raise SystemExit("no complete round measured")

    def med(state, f):
        return statistics.median(f(v[state]) for v in full)

    print("per call: all_reduce of 1 float, %d-rank gloo group (bench/comm_loop.py), %d rounds "
          "of %.0f s per state, interleaved; %d CPUs, load average %.1f-%.1f (shared machine)"
          % (args.ranks, len(full), args.phase, os.cpu_count(), min(loads), max(loads)))
    print("  %-28s %9s %10s %10s %10s %9s %6s %9s %8s" % (
        "", "calls/s", "wall/call", "CPU/call", "+CPU/call", "BPF/call", "hits", "recorder",
        "lost"))
    labels = {"off": "no recorder", "nocomm": "record --no-comm",
              "before": "record (before: %s)" % os.path.basename(os.path.dirname(
                  os.path.dirname(BEFORE))) if BEFORE else "",
              "comm": "record (collectives on)"}
    for state in states:
        row = "  %-28s %9.0f %7.2f us %7.2f us" % (
            labels[state], med(state, lambda v: v["calls"] / v["secs"] / args.ranks),
            med(state, lambda v: v["wall"]), med(state, lambda v: v["cpu"]))
        if state in ("comm", "before"):
            row += " %+7.2f us %6.2f us %6.2f %8.0f%% %8d" % (
                statistics.median(v[state]["cpu"] - v["nocomm"]["cpu"] for v in full),
                med(state, lambda v: v["bpf_ns"] / 1e3 / max(v["calls"], 1)),
                med(state, lambda v: v["bpf_runs"] / max(v["calls"], 1)),
                med(state, lambda v: v["rec_cpu"] * 100),
                med(state, lambda v: v["lost"]))
        elif state == "nocomm":
            row += " %10s %9s %6s %8.0f%%" % ("", "", "", med(state, lambda v: v["rec_cpu"] * 100))
        print(row)
    # On a busy machine the loop's quietest 0.5 s rounds tell its own cost best: the lowest
    # tenth of each state's rounds.
    low = {st: statistics.median(sorted(v)[:max(1, len(v) // 10)]) for st, v in best.items()}
    print("  quietest tenth of the loop's rounds, CPU/call: " + ", ".join(
        "%s %.2f us" % (labels[st].split(" (")[0] if st not in ("before", "comm")
                        else st, low[st]) for st in states if st in low) +
          "; collectives' probes: %+.2f us" % (low["comm"] - low["nocomm"]) +
          (" (before: %+.2f us)" % (low["before"] - low["nocomm"]) if "before" in low else ""))
    floors = [f for f in floors if f is not None]
    if floors:
        floor = statistics.median(floors)
        print("  uprobe trap floor (bench/uprobe_floor, empty program, push emulated): "
              "%.2f us a hit (rounds %s)" % (floor, " ".join("%.2f" % f for f in floors)))
        for state in ("before", "comm"):
            if state in states:
                print("  %s: target time per call = hits x floor + BPF/call = "
                      "%.2f x %.2f + %.2f = %.2f us" % (
                          state, med(state, lambda v: v["bpf_runs"] / max(v["calls"], 1)),
                          floor, med(state, lambda v: v["bpf_ns"] / 1e3 / max(v["calls"], 1)),
                          med(state, lambda v: (v["bpf_runs"] * floor * 1e3 + v["bpf_ns"])
                              / 1e3 / max(v["calls"], 1))))
    for state in ("before", "comm"):
        if state in states:
            print("  %s: stacks copied %s of %s calls per recording" % (
                labels[state], "/".join(str(v[state].get("copies", "?")) for v in full),
                "/".join(str(v[state].get("rows", "?")) for v in full)))
    print("  (wall and CPU per call: the loop's, medians over its 0.5 s rounds inside each phase,")
    print("   mean over ranks, median over rounds; +CPU/call: median over rounds of that round's")
    print("   record minus --no-comm; BPF/call: comm_probe's run time (kernel.bpf_stats_enabled)")
    print("   per call; hits: its runs per call, one per uprobe trap; recorder: its CPU in % of one")
    print("   core)")
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
    for r, state, a, b, _ in phases:
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
    ap.add_argument("--ranks", type=int, default=1, help="ranks of the per-call loop's group")
    ap.add_argument("--hidden", type=int, default=2000,
                    help="the DDP model's hidden width (parameters: 111 x HIDDEN + 10)")
    args = ap.parse_args()
    if not os.path.exists(PROBING):
        raise SystemExit("build/probing is missing: run make first")
    if os.geteuid() != 0:
        raise SystemExit("bench_comm.py needs root (record loads BPF programs)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from benchlib import enable_bpf_stats
    enable_bpf_stats()
    with tempfile.TemporaryDirectory(prefix="bench-comm-") as tmp:
        if args.only in (None, "call"):
            per_call(args, tmp)
        if args.only in (None, "ddp"):
            ddp_step(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
