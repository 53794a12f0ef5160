"""Ground truth for record --children of a running process: a process with a child and a
grandchild that already run, and a child started later.

The process forks child A, which forks grandchild B; it prints "READY PID A B" once both run.
On a line on stdin it forks child C and prints "C PID". Every process spins in its own
function (family_parent, family_child, family_grandchild, family_late) half of the time, in
slices of 5 ms of CPU time, until killed.
"""
import os
import sys
import time


def spin():
    end = time.thread_time() + 0.005
    while time.thread_time() < end:
        pass
    time.sleep(0.005)


def family_grandchild():
    while True:
        spin()


def family_child(w):
    b = os.fork()
    if not b:
        os.close(w)
        family_grandchild()
    os.write(w, b"%d\n" % b)
    os.close(w)
    while True:
        spin()


def family_late():
    while True:
        spin()


def family_parent():
    r, w = os.pipe()
    a = os.fork()
    if not a:
        os.close(r)
        family_child(w)
    os.close(w)
    b = int(os.read(r, 64))
    print("READY %d %d %d" % (os.getpid(), a, b), flush=True)
    os.set_blocking(0, False)
    while True:
        spin()
        try:
            line = sys.stdin.readline()
        except (BlockingIOError, TypeError):
            line = ""
        if line:
            c = os.fork()
            if not c:
                family_late()
            print("C %d" % c, flush=True)


family_parent()
