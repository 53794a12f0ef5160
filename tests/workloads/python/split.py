"""Ground truth for recording: <module> -> main -> run -> work_a | work_b.

run() spends slices of 6k ms of the thread's CPU time in work_a and 4k ms in work_b (a 60/40
split of CPU time however busy the machine is), for SECONDS (argv[1], default 3). k is drawn
anew for each cycle, between 0.5 and 2 (seeded: the same sequence each run): a cycle of fixed
length beats with a sampling period close to it (10 ms of CPU time and 97 or 99 Hz), and the
samples then fall on one phase of the cycle for long stretches (work_a 52-66 % of the
samples in 8 s runs of a fixed 10 ms cycle on an idle machine, 78-98 % in full test runs;
58-61 % with k drawn). The leaf lines are marked; the loops are one line each so a sample in
a leaf function is on that line unless it is in the call's prologue.
"""
import random
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
    draw = random.Random(7).uniform
    while now() < end:
        k = draw(0.5, 2.0)
        t = cpu() + 0.006 * k
        while cpu() < t: work_a(2000)  # @call_a
        t = cpu() + 0.004 * k
        while cpu() < t: work_b(2000)  # @call_b


def main():
    run(float(sys.argv[1]) if len(sys.argv) > 1 else 3)  # @call_run


main()  # @call_main
