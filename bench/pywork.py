"""A fixed amount of CPU-bound Python work through a call tree of known shape, for the
benchmarks. Prints its own wall-clock and CPU time in seconds: "WALL CPU".

    python pywork.py [ITERATIONS]
"""
import sys
import time


def leaf_sum(n):
    s = 0
    for i in range(n):
        s += i * 3
    return s


def leaf_str(n):
    return len("".join(str(i % 10) for i in range(n)))


def descend(depth, n):
    if depth == 0:
        return leaf_sum(n) + leaf_str(n // 4)
    return descend(depth - 1, n) + 1


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    t0, c0 = time.monotonic(), time.process_time()
    for _ in range(iters):
        descend(20, 2000)
    print(f"{time.monotonic() - t0:.6f} {time.process_time() - c0:.6f}", flush=True)


main()
