"""Target of test_eval's print test: prints without pause, each line from many writes.

Prints "READY PID", then lines "I x x ... x" (I = 0, 1, ..., then 50 x's: print() writes each
argument, the separators and the end one by one) until the file argv[1] exists; then
"DONE N" (N lines) and exits 0.
"""
import os
import sys

STOP = sys.argv[1]
XS = ["x"] * 50


def main():
    print("READY %d" % os.getpid(), flush=True)
    i = 0
    while not os.path.exists(STOP):
        print(i, *XS)
        i += 1
    print("DONE %d" % i, flush=True)


main()
