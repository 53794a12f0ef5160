"""A gloo DDP training job on CPU in which one rank is slower by a known amount every step,
for the recording side of distributed jobs (test_record_job.py). Run under torchrun:

    torchrun --redirects 1 --tee 1 --nproc_per_node 3 --master_port PORT \
        ddp_straggler.py --ready-dir DIR [--slow-rank R] [--slow-ms MS] [--seconds S]

Every rank writes DIR/rank.<RANK> holding "PID WORLD_SIZE" once DDP is set up and its first
step is done (its pid as it sees itself), then trains until --seconds have passed since it
was ready (the ranks agree when to stop: rank 0 decides, the others follow through an
all-reduce). The rank --slow-rank spends --slow-ms milliseconds of its own CPU time per step
in straggler_burn(), a pure Python loop: the extra time a comparison of ranks must find
there, in that rank. After each of its steps it appends "UNIX_TIME BURN_CPU" to
DIR/burn.log: when, and how many CPU seconds straggler_burn has taken so far.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ap = argparse.ArgumentParser()
ap.add_argument("--ready-dir", required=True)
ap.add_argument("--slow-rank", type=int, default=-1)
ap.add_argument("--slow-ms", type=float, default=30.0)
ap.add_argument("--seconds", type=float, default=60.0)
args = ap.parse_args()
burnt = 0.0  # CPU seconds straggler_burn has taken


def straggler_burn(ms):
    """Spend @ms milliseconds of this thread's CPU time (not wall time: a busy machine
    stretches the wall time, never the CPU time)."""
    global burnt
    start = time.thread_time()
    end = start + ms / 1000.0
    n = 0
    while time.thread_time() < end:
        n += 1
    burnt += time.thread_time() - start
    return n


def train_step(model, opt, x, y, slow):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()  # DDP all-reduces the gradients here: every rank waits for the slowest
    opt.step()
    if slow:
        straggler_burn(args.slow_ms)
    return loss


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
    slow = rank == args.slow_rank
    burn_log = open(os.path.join(args.ready_dir, "burn.log"), "w") if slow else None
    train_step(model, opt, x, y, slow)
    path = os.path.join(args.ready_dir, "rank.%d" % rank)
    with open(path + ".tmp", "w") as f:
        f.write("%d %d\n" % (os.getpid(), world))
    os.rename(path + ".tmp", path)
    start = time.monotonic()
    go = torch.ones(1)
    while go.item() > 0:
        train_step(model, opt, x, y, slow)
        if burn_log:
            burn_log.write("%.6f %.6f\n" % (time.time(), burnt))
            burn_log.flush()
        go.fill_(1.0 if rank != 0 or time.monotonic() - start < args.seconds else 0.0)
        dist.all_reduce(go, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
