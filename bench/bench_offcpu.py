#!/usr/bin/env python3
"""Cost of record --off-cpu for the target, side by side with on-CPU recording and libbpf-tools'
offcputime, on a context-switch-heavy ping-pong and on a training step.

The machine this was written on is shared (2 vCPUs, load averages of 5-20 from other work), so
wall-clock rates swing by tens of percent between seconds. The load-robust metric is the
target's CPU time per unit of work, which includes what the tracer runs in its context
(sched_waking hooks, interrupts taken while it runs):

    pingpong   bench/pingpong.c pinned to one CPU (taskset -c 1): two threads hand a token
               through a pipe and a condition variable with WORK_NS of spinning each
               (default 5 us: ~100k switches/s); CPU = the threads' schedstat run time,
               work = rounds (a counter in /dev/shm)
    train      tests/workloads/torch/torch_train.py --size bench on Debian's python3
               (python3-torch): CPU = the process's utime+stime, work = steps ("STEP" lines)

Windows are paired: for each pair one window without a tracer and one with it (order
alternating), the tracer started and attached before its window begins; configurations are
interleaved pair by pair; the table gives the median of the per-pair ratios (CPU per unit of
work with / without) and its quartiles. Bytes per second: the recording's size over its
duration, from one extra run of each probing configuration per target.

    sudo bench/bench_offcpu.py [--pairs N] [--window S] [--train-window S]
                               [--targets pingpong,train] [--work-ns NS]
Needs root, 'make bench-build', and for offcputime the Debian package libbpf-tools.
"""
import argparse
import faulthandler
import mmap
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
PINGPONG = os.path.join(ROOT, "build", "bench", "pingpong")
TRAIN = os.path.join(ROOT, "tests", "workloads", "torch", "torch_train.py")
OFFCPUTIME = shutil.which("offcputime") or "/usr/sbin/offcputime"
TMP = tempfile.mkdtemp(prefix="bench-offcpu-")


class PingPong:
    unit = "round"

    def __init__(self, work_ns):
        shm = f"/dev/shm/bench-offcpu-pp.{os.getpid()}"
        self.p = subprocess.Popen(["taskset", "-c", "1", PINGPONG, shm, str(work_ns)])
        time.sleep(0.5)
        self.f = open(shm, "rb")
        self.m = mmap.mmap(self.f.fileno(), 8, access=mmap.ACCESS_READ)
        self.shm = shm
        self.pid = self.p.pid

    def read(self):
        """(CPU ns of the threads, units of work done)."""
        cpu = 0
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                cpu += int(open(f"/proc/{self.pid}/task/{tid}/schedstat").read().split()[0])
            except OSError:
                pass
        return cpu, struct.unpack("Q", self.m[:8])[0]

    def stop(self):
        self.p.kill()
        self.p.wait()
        os.unlink(self.shm)


class Train:
    unit = "step"

    def __init__(self):
        self.p = subprocess.Popen(["/usr/bin/python3", TRAIN, "--size", "bench", "--seconds",
                                   "100000"], stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().startswith("READY")
        self.pid = self.p.pid
        self.steps = 0
        threading.Thread(target=self._count, daemon=True).start()
        while self.steps < 3:
            time.sleep(0.1)

    def _count(self):
        for line in self.p.stdout:
            if line.startswith("STEP"):
                self.steps += 1

    def read(self):
        f = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(f[11]) + int(f[12])) * 10**9 // tick, self.steps

    def stop(self):
        self.p.kill()
        self.p.wait()


def start_tracer(config, pid, out):
    """Start a tracer on @pid; return its Popen once attached."""
    if config == "offcputime":
        p = subprocess.Popen([OFFCPUTIME, "-p", str(pid)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(2.0)  # BPF load and attach; it prints nothing until it ends
        return p
    args = [PROBING, "record", "-v", "-p", str(pid), "-o", out, "--force"]
    if config == "probing-offcpu":
        args.insert(2, "--off-cpu")
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = ""
    while "recording at" not in seen:  # "probing: recording at 99 Hz into ..." once attached
        line = p.stderr.readline()
        if not line:
            raise SystemExit(f"{config} failed: {seen}")
        seen += line
    threading.Thread(target=p.stderr.read, daemon=True).start()
    time.sleep(0.3)
    return p


def stop_tracer(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def window(target, seconds):
    c0, w0 = target.read()
    time.sleep(seconds)
    c1, w1 = target.read()
    return (c1 - c0) / max(1, w1 - w0), (w1 - w0) / seconds


def bytes_per_second(target, config, seconds):
    out = os.path.join(TMP, f"{config}.db")
    args = [PROBING, "record", "-p", str(target.pid), "-d", str(seconds), "-o", out, "--force"]
    if config == "probing-offcpu":
        args.insert(2, "--off-cpu")
    subprocess.run(args, check=True, capture_output=True)
    return os.path.getsize(out) / seconds


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 4:
        return xs[0], xs[-1]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def bench(name, target, configs, pairs, seconds):
    ratios = {c: [] for c in configs}
    rates = []
    for i in range(pairs):
        for c in configs:
            out = os.path.join(TMP, f"{c}.db")
            if (i + configs.index(c)) % 2:
                off, rate = window(target, seconds)
                p = start_tracer(c, target.pid, out)
                on, _ = window(target, seconds)
                stop_tracer(p)
            else:
                p = start_tracer(c, target.pid, out)
                on, _ = window(target, seconds)
                stop_tracer(p)
                time.sleep(0.3)
                off, rate = window(target, seconds)
            ratios[c].append(on / off)
            rates.append(rate)
            print(f"  {name} pair {i + 1} {c}: x{on / off:.3f}", file=sys.stderr, flush=True)
    sizes = {c: bytes_per_second(target, c, 5) for c in configs if c.startswith("probing")}
    print(f"\n{name}: CPU time per {target.unit} with the tracer / without, median of {pairs} "
          f"paired {seconds:g} s windows (quartiles); {statistics.median(rates):,.0f} "
          f"{target.unit}s/s without")
    for c in configs:
        med = statistics.median(ratios[c])
        lo, hi = quartiles(ratios[c])
        size = f"{sizes[c] / 1024:8.1f} KiB/s stored" if c in sizes else ""
        print(f"  {c:16s} {100 * (med - 1):+6.1f} %   ({100 * (lo - 1):+.1f} .. "
              f"{100 * (hi - 1):+.1f})   {size}")


def main():
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--window", type=float, default=1.0, help="seconds (pingpong)")
    ap.add_argument("--train-window", type=float, default=3.0, help="seconds (train)")
    ap.add_argument("--work-ns", type=int, default=5000)
    ap.add_argument("--targets", default="pingpong,train")
    a = ap.parse_args()
    configs = ["probing", "probing-offcpu"]
    if os.path.exists(OFFCPUTIME):
        configs.append("offcputime")
    else:
        print("offcputime not found (apt-get install libbpf-tools): left out", file=sys.stderr)
    print(f"load average at start: {os.getloadavg()}")
    for name in a.targets.split(","):
        target = PingPong(a.work_ns) if name == "pingpong" else Train()
        try:
            bench(name, target, configs, a.pairs,
                  a.window if name == "pingpong" else a.train_window)
        finally:
            target.stop()
    print(f"load average at end: {os.getloadavg()}")
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
