#!/usr/bin/env python3
"""probing watch's cost to a training job: the step time of a 3-rank gloo DDP job
(tests/workloads/torch/ddp_watch_job.py under torchrun, loopback) unwatched and under
'probing watch' at its default rate, in interleaved rounds; medians of each round's median
step time, and their ratio. Also the watcher's own CPU time per minute watched and the bytes
its segments took per minute.

    bench/bench_watch.py [--rounds 6] [--steps 300] [--step-ms 20] [--ranks 3]

Run it on a quiet machine, as root: it is not a test. Steps are timed by the job itself
(forward + backward + optimizer, the sleep between steps excluded).
"""
import argparse
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
JOB = os.path.join(ROOT, "tests", "workloads", "torch", "ddp_watch_job.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(args, watched, tmp):
    cmd = ["/usr/bin/torchrun", "--nproc_per_node", str(args.ranks), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), "--redirects", "1", "--tee", "1",
           JOB]
    d = os.path.join(tmp, "watch")
    shutil.rmtree(d, ignore_errors=True)
    if watched:
        cmd = [PROBING, "watch", "-o", d, "--"] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", FAULT="none", STEPS=str(args.steps),
               STEP_MS=str(args.step_ms))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600).stdout
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    ms = [float(m) for s, m in re.findall(r"STEP rank=\d+ step=(\d+) ms=([\d.]+)", out)
          if int(s) >= 10]
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) if watched else 0
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return statistics.median(ms), wall, size, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=20)
    ap.add_argument("--ranks", type=int, default=3)
    args = ap.parse_args()
    res = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for watched in ((False, True) if r % 2 == 0 else (True, False)):
                res[watched].append(one_round(args, watched, tmp))
                m, wall, size, _ = res[watched][-1]
                print(f"round {r} {'watched  ' if watched else 'unwatched'}: step {m:.3f} ms "
                      f"median, {wall:.0f} s, segments {size / 1e6:.2f} MB", flush=True)
    un = statistics.median(x[0] for x in res[False])
    wa = statistics.median(x[0] for x in res[True])
    print(f"step time: unwatched {un:.3f} ms, watched {wa:.3f} ms: {100 * (wa / un - 1):+.2f}%")
    per_min = statistics.median(x[2] / (x[1] / 60) for x in res[True])
    print(f"segments: {per_min / 1e6:.2f} MB per minute watched (19 Hz, {args.ranks} ranks)")


if __name__ == "__main__":
    main()
