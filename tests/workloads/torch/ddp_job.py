"""A gloo DDP training job on CPU, run by torchrun, with one rank made to hang at a known line:
the ground truth of the job tests (tests/integration/test_job.py).

    torchrun --nproc_per_node N ... ddp_job.py --hang-file PATH [--hang-rank R] [--sleep S]
                                               [--threads N]

Each rank prints "READY RANK PID" once its DistributedDataParallel model exists, then trains
forever: a model of known size (Linear(100, 50), ReLU, Linear(50, 10): 5,560 parameters),
Adam with a StepLR scheduler created before anything could be injected (the scheduler puts
its own `step` on the optimizer instance, torch 1.13), a pause of --sleep seconds per step.
ITER is the number of optimizer steps this rank has completed: the job's own step count.

Once PATH exists (and it has taken 2 optimizer steps), rank --hang-rank stops in hang_here()
(the line marked @hang) at the top of its next iteration, and never trains again; the other
ranks then wait in their backward for the gradients' allreduce, which needs every rank (in
step 2 they would wait in DDP's forward, for its bucket rebuild's broadcast). Tests kill the job. --threads N starts N
Python threads per rank that wait on a queue, as a data loader's would (bench/).
"""
import argparse
import os
import queue
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("--hang-file", required=True)
ap.add_argument("--hang-rank", type=int, default=1)
ap.add_argument("--sleep", type=float, default=0.05)
ap.add_argument("--threads", type=int, default=0)
args = ap.parse_args()

ITER = 0  # optimizer steps completed


def hang_here():
    while True:
        time.sleep(0.2)  # @hang


def train_step(ddp, opt, sched, x, y):
    global ITER
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()  # @backward
    opt.step()
    opt.zero_grad()
    sched.step()
    ITER += 1


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 50), torch.nn.ReLU(),
                                torch.nn.Linear(50, 10))
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000)
    x, y = torch.randn(16, 100), torch.randn(16, 10)
    q = queue.Queue()
    for i in range(args.threads):
        threading.Thread(target=q.get, name="loader-%d" % i, daemon=True).start()
    print("READY %d %d" % (rank, os.getpid()), flush=True)
    while True:
        # Past step 2 (DDP rebuilds its buckets in step 2's forward, with a broadcast):
        # from then on the others can only wait for this rank in their backward.
        if rank == args.hang_rank and ITER >= 2 and os.path.exists(args.hang_file):
            hang_here()  # @call_hang
        train_step(ddp, opt, sched, x, y)  # @train
        time.sleep(args.sleep)


if __name__ == "__main__":
    main()  # @main
