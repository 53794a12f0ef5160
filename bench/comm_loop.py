"""The workload of bench/bench_comm.py's per-call cost: a gloo process group doing all_reduce
of one float in a loop; one rank, or with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set one
rank of a group (the bench starts each). Prints "pid PID" once warm, then per round of ROUND_S
seconds "ROUND END_UNIX_S CALLS WALL_US_PER_CALL CPU_US_PER_CALL" (CPU: the process's, its
gloo threads included)."""
import os
import socket
import time

import torch
import torch.distributed as dist

if "WORLD_SIZE" not in os.environ:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]), RANK="0",
                      WORLD_SIZE="1")
    s.close()
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]))
x = torch.ones(1)
for _ in range(200):
    dist.all_reduce(x)
print("pid", os.getpid(), flush=True)
end = time.monotonic() + float(os.environ.get("DURATION", "60"))
round_s = float(os.environ.get("ROUND_S", "0.5"))
while time.monotonic() < end:
    n = 0
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    while time.perf_counter_ns() - t0 < round_s * 1e9:
        for _ in range(50):
            dist.all_reduce(x)
        n += 50
    c, t = time.process_time_ns(), time.perf_counter_ns()
    print("ROUND %.6f %d %.3f %.3f" % (time.time(), n, (t - t0) / n / 1e3, (c - c0) / n / 1e3),
          flush=True)
