"""Target of test_debug: a loop that keeps printing while a debugger comes and goes.

Prints "READY PID", then "tick I V" about 20 times a second, where V = work(I) = 3 * I + 1,
until the file STOPFILE (argv[1]) exists; then "DONE N" (N ticks) and exits 0. The
debugger test stops at the line marked @BREAK (inside work(), with the locals i and total
bound) from a DAP client.
"""
import os
import sys
import time

STOP = sys.argv[1]


def work(i):
    total = 3 * i + 1
    return total  # @BREAK


def main():
    print("READY %d" % os.getpid(), flush=True)
    i = 0
    while not os.path.exists(STOP):
        v = work(i)
        print("tick %d %d" % (i, v), flush=True)
        i += 1
        time.sleep(0.05)
    print("DONE %d" % i, flush=True)


main()
