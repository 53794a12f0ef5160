"""Busy in phase_a for A seconds, then in phase_b for B seconds (argv: A B), on the CPU
the whole time. Prints 'PHASE b time=T' (unix seconds) when phase_b begins, then 'DONE'."""
import sys
import time


def phase_a(until):
    n = 0
    while time.time() < until:
        n += 1  # PHASE_A_LINE
    return n


def phase_b(until):
    n = 0
    while time.time() < until:
        n += 1  # PHASE_B_LINE
    return n


def main():
    a, b = float(sys.argv[1]), float(sys.argv[2])
    phase_a(time.time() + a)
    print(f"PHASE b time={time.time():.3f}", flush=True)
    phase_b(time.time() + b)
    print("DONE", flush=True)


main()
