"""A minimal torchrun for one node: start N ranks of a training script with the environment
torchrun gives its workers, wait for them, and stop them all if one fails.

    python3 launch.py --nproc_per_node N [--master_port P] SCRIPT [ARGS...]

Debian unstable's torch 2.14 torchrun cannot start a job on this machine: its rendezvous's
TCPStore asks for libuv, which that build lacks, and neither the static nor the c10d rendezvous
honours USE_LIBUV=0. The ranks themselves can (dist.init_process_group's env:// does), so the
job tests start them with this instead: the same shape as torchrun's (one Python launcher
process whose children are the ranks), the same variables (MASTER_ADDR 127.0.0.1,
MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
ROLE_WORLD_SIZE, TORCHELASTIC_RUN_ID), plus USE_LIBUV=0. Loopback only. Like torchrun's
agent, it has imported torch.

The ranks' output goes to this process's stdout and stderr as it comes (torchrun --tee
without the prefixes). Exit status: 0 when every rank exits 0, else the first failing rank's
status (128 + signal for a signal); SIGTERM and SIGINT are passed on to every rank.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

# torchrun's agent is torch itself: a tool that reaches every Python process of the job
# (inject --children --torch) finds torch imported in the launcher too.
import torch  # noqa: F401


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc_per_node", type=int, required=True)
    ap.add_argument("--master_port", type=int, default=0)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    n = a.nproc_per_node
    port = a.master_port or free_port()
    ranks = []
    for rank in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   GROUP_RANK="0", ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(n),
                   TORCHELASTIC_RUN_ID="none", USE_LIBUV="0")
        ranks.append(subprocess.Popen([sys.executable, "-u", a.script, *a.args], env=env))

    def stop(signum, frame):
        for p in ranks:
            if p.poll() is None:
                p.send_signal(signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    status = 0
    while any(p.poll() is None for p in ranks):
        failed = [p for p in ranks if p.returncode not in (None, 0)]
        if failed and not status:
            rc = failed[0].returncode
            status = 128 - rc if rc < 0 else rc
            print("launch: rank %d exited with %d: stopping the others" % (
                ranks.index(failed[0]), rc), file=sys.stderr, flush=True)
            stop(signal.SIGTERM, None)
        time.sleep(0.05)
    if not status:
        for p in ranks:
            if p.returncode:
                status = 128 - p.returncode if p.returncode < 0 else p.returncode
                break
    return status


if __name__ == "__main__":
    sys.exit(main())
