"""One worker of a two-node gloo DDP job (tests/integration/test_merge.py), run by torchrun
on each "node" (a network, UTS, PID and mount namespace of its own).

    ddp_nodes.py SECONDS OUTDIR

Each rank: one all_reduce over the nodes' link (rank + 1 summed: 3.0 with two ranks), SECONDS
of CPU time in node_work, one DDP forward and backward, a barrier; then it writes its ground
truth to OUTDIR/rank<RANK>.txt: "HOST RANK LOCAL_RANK WORLD_SIZE PID SUM", the host and pid as
it sees them, and waits in hold_here (at the line marked "# hold") until OUTDIR/release
exists; a last barrier, and it exits.
"""
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def node_work(seconds):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    return n


def hold_here(release):
    while not os.path.exists(release):
        time.sleep(0.05)  # hold


def main():
    seconds, outdir = float(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    node_work(seconds)
    model(torch.ones(2, 8)).sum().backward()
    dist.barrier()
    truth = os.path.join(outdir, f"rank{rank}.txt")
    with open(truth + ".tmp", "w") as f:
        f.write(f"{socket.gethostname()} {rank} {os.environ['LOCAL_RANK']} "
                f"{os.environ['WORLD_SIZE']} {os.getpid()} {total.item()}\n")
    os.rename(truth + ".tmp", truth)
    hold_here(os.path.join(outdir, "release"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
