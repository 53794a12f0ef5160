"""Ground truth for recording: <module> -> main -> run -> work_a | work_b.

run() spends slices of 6 ms of the thread's CPU time in work_a and 4 ms in work_b (a 60/40
split of CPU time however busy the machine is), for SECONDS (argv[1], default 3). The leaf lines are marked; the loops are one line
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
    now, cpu = time.monotonic, time.thread_time
    end = now() + seconds
    while now() < end:
        t = cpu() + 0.006
        while cpu() < t: work_a(2000)  # @call_a
        t = cpu() + 0.004
        while cpu() < t: work_b(2000)  # @call_b


def main():
    run(float(sys.argv[1]) if len(sys.argv) > 1 else 3)  # @call_run


main()  # @call_main
