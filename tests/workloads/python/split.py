"""Ground truth for recording: <module> -> main -> run -> work_a | work_b.

run() spends wall-clock slices of 6 ms in work_a and 4 ms in work_b (a 60/40 split of the
CPU time), for SECONDS (argv[1], default 3). The leaf lines are marked; the loops are one line
each so a sample in a leaf function is on that line unless it is in the call's prologue.
"""
import sys
import time


def work_a(n):
    acc = 0
    for i in range(n): acc = (acc * 31 + i) % 1000003  # @leaf_a
    return acc


def work_b(n):
    acc = 1
    for i in range(n): acc = (acc * 17 + i) % 999983  # @leaf_b
    return acc


def run(seconds):
    now = time.monotonic
    end = now() + seconds
    while now() < end:
        t = now() + 0.006
        while now() < t: work_a(2000)  # @call_a
        t = now() + 0.004
        while now() < t: work_b(2000)  # @call_b


def main():
    run(float(sys.argv[1]) if len(sys.argv) > 1 else 3)  # @call_run


main()  # @call_main
