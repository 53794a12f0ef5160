"""A job sharded with FSDP2 (torch.distributed.fsdp.fully_shard, torch 2.x) on CPU with gloo,
for tests/integration/test_comm.py. Run by launch.py (or torchrun) in WORLD ranks.

The model, Linear(64, 32) -> ReLU -> Linear(32, 8), has each Linear sharded on its own
(2,080 and 264 parameters, split evenly over the ranks) under a root with no parameters of
its own. Each step all-gathers each Linear's shards in forward and again in backward
(resharded after forward), then reduces each Linear's gradients. Adam, STEPS steps (3).

Prints "rank R pid P world W" once set up and "STEP rank=R step=S loss=L" per step.
"""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

STEPS = int(os.environ.get("STEPS", "3"))


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 8))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 64)
    print(f"rank {rank} pid {os.getpid()} world {world}", flush=True)
    for step in range(STEPS):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"STEP rank={rank} step={step} loss={loss.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
