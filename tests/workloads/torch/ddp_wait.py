"""Two DDP ranks (torchrun, gloo on CPU) where rank 1 is slower: before each backward it
computes for SLOW seconds, so rank 0 waits for it in backward (the gradient allreduce), for the
off-CPU test (test_offcpu.py).

    torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 ddp_wait.py STEPS SLOW
"""
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def slow_rank_work(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def main():
    steps, slow = int(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(256, 256))
    x = torch.randn(64, 256)
    dist.barrier()
    for _ in range(steps):
        loss = model(x).sum()
        if rank == 1:
            slow_rank_work(slow)
        loss.backward()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
