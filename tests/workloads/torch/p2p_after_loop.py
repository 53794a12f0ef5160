"""A 2-rank gloo job that makes many collectives and then a few send/recv (probing's
collectives probes: gloo's buffer-completion probes are detached from a process after many
collectives with no send/recv, and attached again at its next one).

Each rank: LOOPS all_reduce of one float, then PAIRS times: rank 0 sleeps GAP_MS and sends
1,000 floats to rank 1 (tag 5), rank 1 receives them; a barrier; exit. Prints "rank R pid P"
once set up, "LOOP rank=R done" after the loop and "PAIR rank=R i=I" after each pair.

Environment: LOOPS (2500), PAIRS (3), GAP_MS (300), and torchrun's (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT).
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    loops = int(os.environ.get("LOOPS", "2500"))
    pairs = int(os.environ.get("PAIRS", "3"))
    gap = float(os.environ.get("GAP_MS", "300")) / 1000
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} pid {os.getpid()}", flush=True)
    t = torch.ones(1)
    for _ in range(loops):
        dist.all_reduce(t)
    print(f"LOOP rank={rank} done", flush=True)
    buf = torch.zeros(1000)
    for i in range(pairs):
        if rank == 0:
            time.sleep(gap)
            dist.send(buf, dst=1, tag=5)
        else:
            dist.recv(buf, src=0, tag=5)
        print(f"PAIR rank={rank} i={i}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
