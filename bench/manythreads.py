"""A process shaped like a PyTorch rank's threads, for bench_offcpu_threads.py: THREADS threads
in all, of which the main thread computes without pause, PERIODIC threads wake every 20-80 ms
for about 1 ms of work (data loaders, heartbeats, a progress reporter), and the rest wait on
an event that never comes (idle pool workers). Prints "READY" once every thread runs.

    python manythreads.py [THREADS] [PERIODIC]
"""
import random
import sys
import threading
import time


def compute(n):
    s = 0
    for i in range(n):
        s += i * 3
    return s


def periodic(seed):
    rnd = random.Random(seed)
    while True:
        time.sleep(rnd.uniform(0.02, 0.08))
        compute(3000)


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    nperiodic = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    never = threading.Event()
    for i in range(threads - 1):
        if i < nperiodic:
            t = threading.Thread(target=periodic, args=(i,), daemon=True, name=f"periodic-{i}")
        else:
            t = threading.Thread(target=never.wait, daemon=True, name=f"idle-{i}")
        t.start()
    print("READY", flush=True)
    while True:
        compute(100000)


if __name__ == "__main__":
    main()
