"""Target of test_debug: a loop that keeps printing while a debugger comes and goes.

Prints "READY PID", then "tick I V C" about 20 times a second, where V = work(I) = 3 * I + 1
and C the CPU time (microseconds, of this thread) 20000 calls of a small function took, until
the file STOPFILE (argv[1]) exists; then "DONE N" (N ticks) and exits 0. The debugger test
stops at the line marked @BREAK (inside work(), with the locals i and total bound) from a
DAP client; C tells whether the thread runs under a trace function (several times slower).
"""
import os
import sys
import time

STOP = sys.argv[1]


def work(i):
    total = 3 * i + 1
    return total  # @BREAK


def small(x):
    return x + 1


def cost():
    t0 = time.thread_time()
    x = 0
    for _ in range(20000):
        x = small(x)
    return int((time.thread_time() - t0) * 1e6)


def main():
    print("READY %d" % os.getpid(), flush=True)
    i = 0
    while not os.path.exists(STOP):
        v = work(i)
        print("tick %d %d %d" % (i, v, cost()), flush=True)
        i += 1
        time.sleep(0.05)
    print("DONE %d" % i, flush=True)


main()
