"""A data-parallel job that stalls on purpose, for tests/integration/test_watch.py.

Run under torchrun with gloo on CPU: a small DDP model, one gradient allreduce per step,
STEP_MS of sleep per step (a steady pace). At step FAULT_STEP, rank FAULT_RANK does FAULT:
  hang     - calls hang_here(step), which sleeps for good at the line marked HANG_LINE: the other
             ranks wait in the next allreduce
  segv     - kills itself with SIGSEGV: the others, told by gloo at their next allreduce,
             wait in peer_lost() until torchrun stops them
  mismatch - calls dist.broadcast while the others call dist.all_reduce (the same seq)
  none     - nothing (a healthy job)

With FAULT_FILE set, the faulty rank does its fault at the first step from FAULT_STEP on
where that file exists (a test that attaches to a running job says when); a mismatch needs
every rank at the same step, and takes FAULT_STEP only.
  resume   - (FAULT_FILE only) sleeps in hang_for until the file is gone, then goes on (and
             again each time the file is there)

Environment: STEPS (1000000), STEP_MS (100), FAULT (none), FAULT_RANK (1), FAULT_STEP (20),
FAULT_FILE (none), THREADS (0: with N, each rank starts threads until it has N in all, which
wait as a data loader's or a checkpointer's helpers do: on a queue, woken every 0.5 s), WIDTH
(0: the model is 100 -> 50 -> 10, a step of a millisecond or two; with W, W -> W -> 10 on a
batch of 32 x W, a longer step: W=1024 is ~27 ms of one core here, one 4 MiB allreduce).
Prints "rank R pid P" once set up and "STEP rank=R step=S ms=M end=T tms=C" per step (M: the
step's wall time without its STEP_MS sleep, T: CLOCK_MONOTONIC at its end, C: the CPU time the
step's own thread spent in it, for bench/bench_watch.py),
and at the end "CPU rank=R steps=N
s=X": the process's CPU time (all of its threads) over its last N steps, sleeps included.
"""
import os
import queue
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "1000000"))
STEP_MS = float(os.environ.get("STEP_MS", "100"))
FAULT = os.environ.get("FAULT", "none")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "20"))
FAULT_FILE = os.environ.get("FAULT_FILE")
THREADS = int(os.environ.get("THREADS", "0"))
WIDTH = int(os.environ.get("WIDTH", "0"))


def helper(q):
    while True:
        try:
            q.get(timeout=0.5)
        except queue.Empty:
            pass


def start_helpers():
    q = queue.Queue()
    while len(os.listdir("/proc/self/task")) < THREADS:
        threading.Thread(target=helper, args=(q,), daemon=True).start()


def hang_here(step):
    shard = f"shard-{step % 8}"  # a local a report shows: "step=30, shard='shard-6'"
    while True:
        time.sleep(1)  # HANG_LINE


def hang_for(path):
    while os.path.exists(path):
        time.sleep(0.05)  # RESUME_LINE


def peer_lost(rank, err):
    """gloo on loopback tells the others of a dead peer at once (a connection reset): they
    wait here, as NCCL ranks would wait in their collective, until torchrun stops them
    (SIGTERM), so that a watch finds them alive when it reads the job after the death."""
    print(f"PEER LOST rank={rank}: {str(err).splitlines()[0]}", flush=True)
    time.sleep(120)  # PEER_LOST_LINE
    raise err


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    win, hid = (WIDTH, WIDTH) if WIDTH else (100, 50)
    model = torch.nn.Sequential(torch.nn.Linear(win, hid), torch.nn.ReLU(),
                                torch.nn.Linear(hid, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(32, win)
    start_helpers()
    print(f"rank {rank} pid {os.getpid()}", flush=True)
    faulted = False
    cpu0 = None
    for step in range(STEPS):
        if step == 10:
            cpu0 = time.process_time()
        due = step == FAULT_STEP if not FAULT_FILE else (
            step >= FAULT_STEP and not faulted and os.path.exists(FAULT_FILE))
        if FAULT == "resume":
            due = step >= FAULT_STEP and os.path.exists(FAULT_FILE)  # each time it is there
        if due and rank == FAULT_RANK and FAULT != "mismatch":
            faulted = True
            print(f"FAULT {FAULT} rank={rank} step={step} time={time.time()}", flush=True)
            if FAULT == "hang":
                hang_here(step)
            elif FAULT == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif FAULT == "resume":
                hang_for(FAULT_FILE)
                print(f"RESUMED rank={rank} time={time.time()}", flush=True)
        if step == FAULT_STEP and FAULT == "mismatch":
            t = torch.ones(10)
            if rank == FAULT_RANK:
                print(f"FAULT {FAULT} rank={rank} step={step} time={time.time()}", flush=True)
                dist.broadcast(t, src=0)  # BROADCAST_LINE
            else:
                dist.all_reduce(t)  # ALLREDUCE_LINE
        time.sleep(STEP_MS / 1000)
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            loss = ddp(x).sum()
            loss.backward()
        except RuntimeError as e:
            peer_lost(rank, e)
        opt.step()
        opt.zero_grad()
        ms = (time.perf_counter() - t0) * 1000
        tms = (time.thread_time() - c0) * 1000
        print(f"STEP rank={rank} step={step} ms={ms:.3f} end={time.monotonic():.3f} "
              f"tms={tms:.3f}", flush=True)
    if cpu0 is not None:
        print(f"CPU rank={rank} steps={STEPS - 10} s={time.process_time() - cpu0:.4f}",
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
