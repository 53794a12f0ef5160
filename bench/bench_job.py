#!/usr/bin/env python3
"""Backtrace of a job: how long 'probing backtrace -p TORCHRUN --children' takes on a real
gloo DDP job of N ranks with T extra Python threads each (issue 10: 8 ranks x 20 threads
should answer in well under a second), for each output (text, JSON, snapshot) and with
--native, side by side in interleaved rounds; medians and the slowest, and the CPU time
probing itself used (on a loaded machine the wall time is mostly waiting for a CPU).

    bench/bench_job.py [--ranks 8] [--threads 20] [--rounds 10]

The job is tests/workloads/torch/ddp_job.py under torchrun (Debian's python3.11 with
python3-torch), one rank hung as in the tests, the others waiting in backward. Afterwards
every thread of the job is checked: none stopped or traced.
"""
import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "torch", "ddp_job.py")


def wait_ready(path, n, proc, timeout=300):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit("torchrun exited: " + open(path).read()[-2000:])
        ranks = dict(re.findall(r"READY (\d+) (\d+)", open(path).read()))
        if len(ranks) == n:
            return {int(k): int(v) for k, v in ranks.items()}
        time.sleep(0.5)
    raise SystemExit("the job did not start in %d s" % timeout)


def timed(args):
    """(wall seconds, CPU seconds of probing, stdout) of one probing command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([PROBING, *args], capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit("probing %s failed: %s" % (" ".join(args), p.stderr[-1000:]))
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, p.stdout


def undisturbed(pids):
    bad = []
    for pid in pids:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                st = open("/proc/%d/task/%s/status" % (pid, tid)).read()
            except OSError:
                continue
            tracer = re.search(r"TracerPid:\s+(\d+)", st).group(1)
            state = re.search(r"State:\s+(\S)", st).group(1)
            if tracer != "0" or state in "tT":
                bad.append((pid, tid, state, tracer))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-job-")
    hang, out = os.path.join(tmp, "hang"), os.path.join(tmp, "job.out")
    job = subprocess.Popen(["/usr/bin/torchrun", "--nproc_per_node", str(a.ranks),
                            "--redirects", "1", "--tee", "1", "--rdzv_backend", "c10d",
                            "--rdzv_endpoint", "127.0.0.1:0", WORKLOAD, "--hang-file", hang,
                            "--hang-rank", "1", "--threads", str(a.threads)],
                           stdout=open(out, "w"), stderr=subprocess.STDOUT,
                           start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        ranks = wait_ready(out, a.ranks, job)
        open(hang, "w").close()
        time.sleep(2)
        pids = [job.pid] + sorted(ranks.values())
        _, _, js = timed(["backtrace", "-p", str(job.pid), "--children", "--format", "json"])
        procs = json.loads(js)
        nthreads = sum(len(p["threads"]) for p in procs)
        snap = os.path.join(tmp, "snap.db")
        variants = {
            "text": ["backtrace", "-p", str(job.pid), "--children"],
            "json": ["backtrace", "-p", str(job.pid), "--children", "--format", "json"],
            "snapshot (-o)": ["backtrace", "-p", str(job.pid), "--children", "-o", snap,
                              "--force"],
            "text --native": ["backtrace", "-p", str(job.pid), "--children", "--native"],
        }
        times = {k: [] for k in variants}
        cpus = {k: [] for k in variants}
        for _ in range(a.rounds):
            for k, args in variants.items():  # interleaved: load hits every variant alike
                wall, cpu, _ = timed(args)
                times[k].append(wall)
                cpus[k].append(cpu)
        _, _, loaded = timed(["backtrace", "-i", snap])
        bad = undisturbed(pids)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    print("job: %d processes (%d ranks + torchrun), %d threads; %d rounds; load average %s"
          % (len(procs), a.ranks, nthreads, a.rounds, os.getloadavg()[0]))
    print("%-16s %12s %10s %10s %14s" % ("backtrace", "median ms", "min ms", "max ms",
                                         "CPU median ms"))
    for k, v in times.items():
        print("%-16s %12.1f %10.1f %10.1f %14.1f" % (k, 1e3 * statistics.median(v), 1e3 * min(v),
                                                   1e3 * max(v),
                                                   1e3 * statistics.median(cpus[k])))
    print("snapshot read back (-i): %s" % loaded.splitlines()[0])
    print("threads left stopped or traced: %d" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
