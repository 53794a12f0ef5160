"""A data-parallel training job with known collectives, for tests/integration/test_comm.py.

Run under torchrun with gloo on CPU. The model, Linear(100, H) -> ReLU -> Linear(H, 10), has
100*H + H + 10*H + 10 parameters (5,560 at H=50): DDP allreduces all of its float32 gradients
in one bucket per step (under 1 MiB), so every step's allreduce carries exactly 4 bytes per
parameter. Rank LATE_RANK sleeps LATE_MS before every step, so the others wait for it in the
allreduce. After the loop, an explicit dist.barrier().

Environment: STEPS (40), LATE_RANK (1), LATE_MS (50), HIDDEN (50), WAIT_FILE + WAIT_AT
(init, ddp or loop: wait there until WAIT_FILE exists, so that a recorder can attach),
HOLD_FILE (after the loop, wait until it exists before the barrier), P2P (1: after the loop,
rank 0 sends rank 1 a tensor of P2P_NUMEL float32 with tag 7, twice, LATE_MS late each time;
rank 1 receives them).

Prints "rank R pid P params N" once set up and "STEP rank=R step=S bwd_start=NS bwd_end=NS
cpu=NS" per step (time.time_ns() around loss.backward(), the process's CPU time at the end).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = int(os.environ.get("STEPS", "40"))
LATE_RANK = int(os.environ.get("LATE_RANK", "1"))
LATE_MS = float(os.environ.get("LATE_MS", "50"))
HIDDEN = int(os.environ.get("HIDDEN", "50"))


def wait_for_file(name):
    path = os.environ.get(name)
    while path and not os.path.exists(path):
        time.sleep(0.02)


def wait_at(where):
    if os.environ.get("WAIT_AT", "") == where:
        wait_for_file("WAIT_FILE")


def main():
    torch.set_num_threads(1)
    wait_at("init")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wait_at("ddp")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, 10))
    nparams = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(32, 100)
    print(f"rank {rank} pid {os.getpid()} params {nparams}", flush=True)
    wait_at("loop")
    for step in range(STEPS):
        if rank == LATE_RANK:
            time.sleep(LATE_MS / 1000)
        loss = ddp(x).sum()
        t0 = time.time_ns()
        loss.backward()
        t1 = time.time_ns()
        opt.step()
        opt.zero_grad()
        print(f"STEP rank={rank} step={step} bwd_start={t0} bwd_end={t1} "
              f"cpu={time.process_time_ns()}", flush=True)
    if os.environ.get("P2P") == "1" and rank in (0, 1):
        t = torch.ones(int(os.environ.get("P2P_NUMEL", "1000")))
        for _ in range(2):
            if rank == 0:
                time.sleep(LATE_MS / 1000)
                dist.send(t, dst=1, tag=7)
            else:
                dist.recv(t, src=0, tag=7)
    wait_for_file("HOLD_FILE")
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
