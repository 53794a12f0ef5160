#!/usr/bin/env python3
"""probing watch's cost to a training job: the step time of a gloo DDP job of RANKS ranks
(tests/workloads/torch/ddp_watch_job.py under torchrun, loopback) unwatched and under
'probing watch' at its default rate, in interleaved rounds; medians of each round's median
step time, and their ratio. Also, for the watched rounds: the watcher's own CPU time (its
utime+stime, polled from /proc: not its children's) as % of one core, its peak resident
memory, and the bytes its segments took per hour. Then --stall-rounds runs where one rank
hangs at a known step (FAULT=hang) under 'watch --stall STALL': the time from the fault
(the job prints it) + the threshold to the stall's declaration (watch_stall.time) and to the
report on disk (latest-report appears). The probes' own time: the watcher's BPF programs'
run time over the second halves (kernel.bpf_stats_enabled), and, over whole runs, its
off-CPU task work (meta off_cpu_resume_ns: stacks taken in the threads as they resume, which
bpf_stats cannot see).

    bench/bench_watch.py [--rounds 6] [--steps 300] [--step-ms 20] [--ranks 3]
                         [--threads N] [--width W] [--stall-rounds 3] [--stall 5]
                         [--against PROBING]
    bench/bench_watch.py --soak SECONDS [--keep 120] [--segment 20] [--every 30] [--ranks 3]

--soak: one watch of a job running for SECONDS (several times --keep), attached to it as a
long watch is (-p TORCHRUN --children): every --every seconds the watcher's CPU over that
interval (% of one core), its resident memory now (VmRSS) and the bytes and files of its
directory; then the first third of the run against the last (medians): flat or not. At the
end, how long 'query -i DIR' and 'flamegraph -i DIR --last 1m' take on what is kept.

--width W makes the job's model W -> W -> 10 (the default 100 -> 50 -> 10 makes steps of a
millisecond or two, where the probes' fixed cost per collective weighs most; W=1024: ~27 ms of
one core a step, one 4 MiB allreduce). Besides the step's wall time, each step's own thread's
CPU time (CLOCK_THREAD_CPUTIME_ID, steal excluded) is compared, watched against unwatched.

--threads N gives each rank N threads in all (idle helpers waiting on a queue, as a PyTorch
rank's data loader, pin-memory and checkpoint threads do). --against PROBING adds, to each
round, a watched run under that other build of probing (an A/B of the watcher's own cost:
its CPU and memory side by side, with their ratio).

Run it on a quiet machine, as root: it is not a test. Steps are timed by the job itself
(forward + backward + optimizer, the sleep between steps excluded).
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sqlite3
import tempfile
import threading
import time

from benchlib import bpf_prog_names, bpf_progs, enable_bpf_stats, trap_floor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
JOB = os.path.join(ROOT, "tests", "workloads", "torch", "ddp_watch_job.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnUsage:
    """Polls a process's own CPU time (utime+stime, not its children's), peak RSS and its
    threads' context switches (each a wake-up, most of them)."""

    def __init__(self, pid):
        self.pid, self.cpu, self.hwm, self.done = pid, 0.0, 0, False
        self.series = []  # (monotonic s, CPU s, context switches)
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()

    def _poll(self):
        tick = os.sysconf("SC_CLK_TCK")
        while not self.done:
            try:
                f = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
                self.cpu = (int(f[11]) + int(f[12])) / tick
                self.series.append((time.monotonic(), self.cpu, self._switches()))
                for line in open(f"/proc/{self.pid}/status"):
                    if line.startswith("VmHWM:"):
                        self.hwm = int(line.split()[1]) * 1024
            except (OSError, ValueError, IndexError):
                return
            time.sleep(0.2)

    def _switches(self):
        """{tid: context switches so far} of its threads now."""
        n = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                for line in open(f"/proc/{self.pid}/task/{tid}/status"):
                    if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        n[tid] = n.get(tid, 0) + int(line.split()[1])
            except OSError:
                pass  # a thread that ended
        return n

    def stop(self):
        self.done = True
        self.t.join()

    def steady(self):
        """CPU s per s over the second half of the run (after the start-up's reading of the
        job's libraries)."""
        return self._rate(1)

    def switches(self):
        """Context switches per s over the second half of the run, of the threads that lived
        through it (the watcher's own: its short-lived helpers are left out)."""
        if len(self.series) < 4:
            return 0.0
        a, b = self.series[len(self.series) // 2], self.series[-1]
        n = sum(b[2][tid] - a[2][tid] for tid in a[2] if tid in b[2])
        return n / max(1e-9, b[0] - a[0])

    def _rate(self, i):
        if len(self.series) < 4:
            return 0.0
        a, b = self.series[len(self.series) // 2], self.series[-1]
        return (b[i] - a[i]) / max(1e-9, b[0] - a[0])


class ProbeTime:
    """The watcher's BPF programs' own run time and runs (kernel.bpf_stats_enabled, turned on
    for the bench and put back at its exit), read from its descriptors' fdinfo every 2 s: the time
    its probes take on the CPUs where they fire, most of it inside the job's threads (the
    sampler's perf events, the scheduler tracepoints, the collectives' uprobes and the task
    works run in the thread they observe). Each run of comm_probe is also a uprobe trap."""

    def __init__(self, pid):
        self.pid, self.done, self.series = pid, False, []  # (monotonic s, {prog id: (ns, n)})
        self.names = {}
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()

    def _poll(self):
        while not self.done:
            try:
                self.series.append((time.monotonic(), bpf_progs(self.pid)))
            except OSError:
                return
            if len(self.series) == 5:  # loaded and attached by now
                self.names = bpf_prog_names()
            for _ in range(10):
                if self.done:
                    return
                time.sleep(0.2)

    def stop(self):
        self.done = True
        self.t.join()

    def second_half(self, a_t, b_t):
        """{program name: (BPF ns, runs)} between the readings nearest to monotonic times
        @a_t and @b_t."""
        if len(self.series) < 2:
            return {}
        a = min(self.series, key=lambda x: abs(x[0] - a_t))[1]
        b = min(self.series, key=lambda x: abs(x[0] - b_t))[1]
        out = {}
        for pid, (bns, bn) in b.items():
            ans, an = a.get(pid, (0, 0))
            ns, n = out.get(self.names.get(pid, "?"), (0, 0))
            out[self.names.get(pid, "?")] = (ns + bns - ans, n + bn - an)
        return out


def job_cmd(args):
    return ["/usr/bin/torchrun", "--nproc_per_node", str(args.ranks), "--master_addr",
            "127.0.0.1", "--master_port", str(free_port()), "--redirects", "1", "--tee", "1",
            JOB]


def one_round(args, watched, tmp, probing=PROBING):
    cmd = job_cmd(args)
    d = os.path.join(tmp, "watch")
    shutil.rmtree(d, ignore_errors=True)
    if watched:
        cmd = [probing, "watch", "-o", d, "--"] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", FAULT="none", STEPS=str(args.steps),
               STEP_MS=str(args.step_ms), THREADS=str(args.threads), WIDTH=str(args.width))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    usage = OwnUsage(p.pid) if watched else None
    probes = ProbeTime(p.pid) if watched else None
    out = p.communicate(timeout=3600)[0]
    wall = time.monotonic() - t0
    if usage:
        usage.stop()
        probes.stop()
    ms = [float(m) for s, m in re.findall(r"STEP rank=\d+ step=(\d+) ms=([\d.]+)", out)
          if int(s) >= 10]
    # The CPU time of each step's own thread (the main thread: what it computes, and what the
    # probes cost it where they run in it: uprobe traps, the BPF of interrupts that land on it,
    # its own blocks' task work), steal time excluded: the part of the step the watch adds on a
    # machine where a rank has its cores, without the wall time's noise of 2 vCPUs shared.
    tms = [float(c) for s, c in re.findall(r"STEP rank=\d+ step=(\d+) .*? tms=([\d.]+)", out)
           if int(s) >= 10]
    # The probes' time per step of a rank, over the second half of the run: the BPF run time
    # and the uprobe traps (comm_probe's runs x the floor) of that half, over the steps all
    # ranks made in it (steps are printed as they end, with their end time).
    per_step = None
    if probes and len(usage.series) >= 4:
        a_t, b_t = usage.series[len(usage.series) // 2][0], usage.series[-1][0]
        progs = probes.second_half(a_t, b_t)
        ends = [float(e) for e in re.findall(r"STEP rank=\d+ step=\d+ ms=[\d.]+ end=([\d.]+)",
                                             out)]
        # monotonic times of this process map onto the job's CLOCK_MONOTONIC stamps
        steps = sum(1 for e in ends if a_t <= e <= b_t)
        if steps and progs:
            per_step = (sum(v[0] for v in progs.values()) / 1e3 / steps,
                        progs.get("comm_probe", (0, 0))[1] / steps,
                        sum(v[1] for v in progs.values()) / steps,
                        {k: (v[0] / 1e3 / steps, v[1] / steps) for k, v in progs.items()},
                        sum(v[0] for v in progs.values()) / 1e9 / max(1e-9, b_t - a_t))
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if watched else 0
    taskwork = task_work_share(d) if watched else 0
    # Each rank's own CPU time per step (all of its threads, sleeps included): what the
    # watcher's probes cost inside the job, without the noise of ranks waiting on each other
    # for the shared cores, which the wall time of a step has.
    cpu_ms = [1000 * float(sec) / int(n)
              for n, sec in re.findall(r"CPU rank=\d+ steps=(\d+) s=([\d.]+)", out)]
    return (statistics.median(ms), wall, size, usage.cpu if usage else 0,
            usage.hwm if usage else 0, usage.steady() if usage else 0,
            usage.switches() if usage else 0, statistics.median(cpu_ms) if cpu_ms else 0,
            per_step, taskwork, statistics.median(tms) if tms else 0)


def task_work_share(d):
    """The off-CPU task work's time (blocks' stacks taken as their threads resume, Linux
    6.18: the kernel calls it directly, so kernel.bpf_stats_enabled misses it) as a share of
    one core over the whole watch: meta off_cpu_resume_ns over duration, from its last
    segment (the meta counts from the watch's start). 0 if none."""
    segs = sorted(f for f in os.listdir(d) if f.startswith("rec-") and f.endswith(".db"))
    if not segs:
        return 0
    con = sqlite3.connect(f"file:{os.path.join(d, segs[-1])}?mode=ro", uri=True)
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN "
                            "('off_cpu_resume_ns', 'duration')"))
    con.close()
    dur = float(meta.get("duration") or 0)
    return int(meta.get("off_cpu_resume_ns") or 0) / 1e9 / dur if dur else 0


def stall_round(args, tmp):
    """(s from fault + threshold to the declaration, s to the report on disk)."""
    d = os.path.join(tmp, "stall")
    shutil.rmtree(d, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", FAULT="hang", FAULT_RANK="1",
               FAULT_STEP="30", STEP_MS="100", THREADS=str(args.threads))
    p = subprocess.Popen([PROBING, "watch", "--stall", str(args.stall), "-o", d, "--"] +
                         job_cmd(args), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    fault, latest = None, os.path.join(d, "latest-report")
    try:
        for line in p.stdout:
            m = re.search(r"FAULT hang rank=\d+ step=\d+ time=([\d.]+)", line)
            if m:
                fault = float(m.group(1))
                break
        deadline = time.time() + args.stall + 60
        while not os.path.exists(latest) and time.time() < deadline:
            time.sleep(0.02)
        on_disk = time.time()
        report = open(latest).read().strip()
        con = sqlite3.connect(report)
        declared = con.execute("SELECT time FROM watch_stall").fetchone()[0]
        con.close()
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return declared - fault - args.stall, on_disk - fault - args.stall


def soak(args):
    """A watch of --soak seconds: its CPU, memory and directory every --every seconds."""
    tmp = tempfile.mkdtemp(prefix="soak-")
    d = os.path.join(tmp, "watch")
    env = dict(os.environ, OMP_NUM_THREADS="1", FAULT="none", STEPS="100000000",
               STEP_MS=str(args.step_ms), THREADS=str(args.threads), WIDTH=str(args.width))
    job = subprocess.Popen(job_cmd(args), env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    w = None
    rows = []
    try:
        time.sleep(15)  # the ranks set up
        w = subprocess.Popen([PROBING, "watch", "-p", str(job.pid), "--children", "-o", d,
                              "--keep", f"{args.keep:g}s", "--segment", f"{args.segment:g}s"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tick = os.sysconf("SC_CLK_TCK")
        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < args.soak:
            time.sleep(args.every)
            f = open(f"/proc/{w.pid}/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(f[11]) + int(f[12])) / tick
            rss = 0
            for line in open(f"/proc/{w.pid}/status"):
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
            files = [x for x in os.listdir(d) if x.startswith("rec-")]
            size = 0
            for x in files:
                try:
                    size += os.path.getsize(os.path.join(d, x))
                except FileNotFoundError:
                    pass
            now = time.monotonic()
            if last:
                pct = 100 * (cpu - last[1]) / (now - last[0])
                rows.append((now - t0, pct, rss, size, len(files)))
                print(f"{now - t0:6.0f} s: watcher CPU {pct:5.2f} %, RSS {rss / 2**20:6.1f} "
                      f"MiB, directory {size / 1e6:6.2f} MB in {len(files)} files",
                      flush=True)
            last = (now, cpu)
        for sql_args in (["query", "-i", d, "SELECT COUNT(*) FROM samples"],
                         ["flamegraph", "-i", d, "--last", "1m", "--folded"]):
            t = time.monotonic()
            r = subprocess.run([PROBING, *sql_args], capture_output=True, text=True)
            print(f"probing {' '.join(sql_args[:2])} DIR {' '.join(sql_args[3:5])}: "
                  f"{time.monotonic() - t:.2f} s, exit {r.returncode}")
    finally:
        if w and w.poll() is None:
            w.send_signal(signal.SIGINT)
            w.wait(timeout=60)
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    k = max(1, len(rows) // 3)
    for name, i, unit, scale in (("CPU", 1, "%", 1), ("RSS", 2, "MiB", 2**20),
                                 ("directory", 3, "MB", 1e6)):
        a = statistics.median(r[i] for r in rows[:k]) / scale
        b = statistics.median(r[i] for r in rows[-k:]) / scale
        print(f"{name}: first third {a:.2f} {unit}, last third {b:.2f} {unit} "
              f"({b / a if a else 0:.2f}x)")
    print(f"load average at end: {os.getloadavg()}")


def compare_per_step(res, i, what):
    """Prints field @i of the rounds (ms per step), unwatched against watched: the medians,
    their ratio, the median of the rounds' paired ratios, and each round's pair."""
    if not all(x[i] for x in res[False] + res[True]):
        return
    u = statistics.median(x[i] for x in res[False])
    w = statistics.median(x[i] for x in res[True])
    paired = statistics.median(b[i] / a[i] for a, b in zip(res[False], res[True]))
    print(f"{what}: unwatched {u:.3f} ms, watched {w:.3f} ms: {100 * (w / u - 1):+.2f}% "
          f"(median of the rounds' ratios {100 * (paired - 1):+.2f}%); rounds: "
          + " / ".join(f"{a[i]:.3f}-{b[i]:.3f}" for a, b in zip(res[False], res[True])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=20)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--stall-rounds", type=int, default=3)
    ap.add_argument("--stall", type=float, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--against", metavar="PROBING")
    ap.add_argument("--soak", type=float, default=0, metavar="SECONDS")
    ap.add_argument("--keep", type=float, default=120)
    ap.add_argument("--segment", type=float, default=20)
    ap.add_argument("--every", type=float, default=30)
    args = ap.parse_args()
    if args.soak:
        return soak(args)
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} CPUs; {args.ranks} "
          f"ranks, {args.threads or 'their own'} threads each")
    enable_bpf_stats()
    res = {False: [], True: [], "B": []}
    kinds = [False, True] + (["B"] if args.against else [])
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                res[kind].append(one_round(args, kind is not False, tmp,
                                           args.against if kind == "B" else PROBING))
                m, wall, size, cpu, hwm, steady, csw, rank_cpu, per_step, tw, tms = res[kind][-1]
                name = {False: "unwatched", True: "watched  ", "B": "against  "}[kind]
                print(f"round {r} {name}: step {m:.3f} ms median, its thread's CPU {tms:.3f} ms, "
                      f"rank CPU {rank_cpu:.3f} ms per step, {wall:.0f} s, segments "
                      f"{size / 1e6:.2f} MB, watcher CPU {cpu:.2f} s ({100 * steady:.2f} % "
                      f"in the second half, {csw:.0f} context switches/s), peak RSS "
                      f"{hwm / 2**20:.0f} MiB" + (f", probes {per_step[0]:.1f} us BPF and "
                                                  f"{per_step[1]:.2f} traps per rank-step"
                                                  if per_step else "")
                      + (f", task work {100 * tw:.2f} % of a core" if tw else ""), flush=True)
        stalls = [stall_round(args, tmp) for _ in range(args.stall_rounds)]
        for i, (dec, disk) in enumerate(stalls):
            print(f"stall round {i}: declared {dec:+.2f} s after fault + threshold, report on "
                  f"disk {disk:+.2f} s after", flush=True)
    if not args.rounds:
        return
    un = statistics.median(x[0] for x in res[False])
    wa = statistics.median(x[0] for x in res[True])
    print(f"step time: unwatched {un:.3f} ms, watched {wa:.3f} ms: {100 * (wa / un - 1):+.2f}%")
    compare_per_step(res, 7, "a rank's CPU per step (median rank)")
    compare_per_step(res, 10, "the step's own thread's CPU time per step (median step of each "
                     "round, medians of the rounds)")
    probe = [x[8] for x in res[True] if x[8]]
    if probe:
        floor = trap_floor(100000, 5)
        us = statistics.median(p[0] for p in probe)
        traps = statistics.median(p[1] for p in probe)
        runs = statistics.median(p[2] for p in probe)
        total = us + traps * (floor or 0)
        # The task work over whole runs (its meta counts from the start) per rank-step.
        tw_step = statistics.median(1e6 * x[9] * x[1] / (args.ranks * args.steps)
                                    for x in res[True] if x[8])
        print(f"the watcher's probes per step of a rank (second halves, medians; all their "
              f"runs, wherever they ran, so at most what the job's threads spent in them): BPF "
              f"{us:.1f} us in {runs:.1f} runs, {traps:.2f} uprobe traps x "
              + (f"{floor:.2f} us (bench/uprobe_floor)" if floor else "? (no uprobe_floor)")
              + f" = {total:.1f} us: {100 * total / 1000 / wa:.3f}% of the watched step "
              f"({wa:.3f} ms); with the task work (whole runs, {tw_step:.1f} us a rank-step, "
              f"interrupts that fell in its runs included) {total + tw_step:.1f} us: "
              f"{100 * (total + tw_step) / 1000 / wa:.3f}%; not counted: the sampling timer's "
              f"interrupts themselves and what the probes do to caches")
        for name in sorted({k for p in probe for k in p[3]}):
            print(f"  {name}: {statistics.median(p[3].get(name, (0, 0))[0] for p in probe):.2f} "
                  f"us in {statistics.median(p[3].get(name, (0, 0))[1] for p in probe):.2f} runs "
                  f"per rank-step")
    per_hour = statistics.median(x[2] / (x[1] / 3600) for x in res[True])
    print(f"segments: {per_hour / 1e6:.1f} MB per hour watched (19 Hz, {args.ranks} ranks; "
          f"bounded by --keep/--max-size)")
    cpu = statistics.median(100 * x[3] / x[1] for x in res[True])
    steady = statistics.median(100 * x[5] for x in res[True])
    hwm = statistics.median(x[4] for x in res[True])
    csw = statistics.median(x[6] for x in res[True])
    print(f"watcher: {cpu:.1f} % of one core over whole runs (start-up included), "
          f"{steady:.2f} % over their second halves ({csw:.0f} context switches/s); peak RSS "
          f"{hwm / 2**20:.0f} MiB")
    if probe:
        bpf = statistics.median(100 * p[4] for p in probe)
        tw = statistics.median(100 * x[9] for x in res[True] if x[8])
        both = statistics.median(100 * (x[5] + x[8][4] + x[9]) for x in res[True] if x[8])
        print(f"its BPF programs (run time where they fire, charged to the tasks they "
              f"interrupt, not to the watcher): {bpf:.2f} % of one core; its task work (blocks' "
              f"stacks taken as their threads resume, in those threads; whole runs): {tw:.2f} "
              f"%; the watcher, its programs and its task work together: {both:.2f} %")
    if args.against:
        b_probe = [x for x in res["B"] if x[8]]
        if b_probe:
            b_bpf = statistics.median(100 * x[8][4] for x in b_probe)
            b_tw = statistics.median(100 * x[9] for x in b_probe)
            b_both = statistics.median(100 * (x[5] + x[8][4] + x[9]) for x in b_probe)
            print(f"against: its BPF programs {b_bpf:.2f} % of one core, its task work "
                  f"{b_tw:.2f} %, the watcher, its programs and its task work together "
                  f"{b_both:.2f} %")
        b_steady = statistics.median(100 * x[5] for x in res["B"])
        b_hwm = statistics.median(x[4] for x in res["B"])
        b_step = statistics.median(x[0] for x in res["B"])
        b_csw = statistics.median(x[6] for x in res["B"])
        print(f"against {args.against}: watcher {b_steady:.2f} % of one core over the second "
              f"halves ({b_csw:.0f} context switches/s), peak RSS {b_hwm / 2**20:.0f} MiB, step {b_step:.3f} ms; this build / "
              f"that one: CPU {steady / b_steady:.2f}x, memory {hwm / b_hwm:.2f}x")
    if stalls:
        print(f"stall -> declared {statistics.median(x[0] for x in stalls):+.2f} s, report on "
              f"disk {statistics.median(x[1] for x in stalls):+.2f} s after fault + threshold "
              f"(median of {len(stalls)}, {args.ranks} ranks)")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
