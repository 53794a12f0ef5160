"""Threads contending for the GIL, with known lines, for the line-number tests.

    python gil_lines.py SECONDS

Three threads run spin() on CPU: a for loop whose body ends in an if statement, so its
back-edge (where a thread gives up and waits for the GIL) is an instruction without a line
of its own in 3.10 and 3.11. A fourth thread calls short() in a loop. Prints one JSON line,
{"pid", "lines": {function: [every line that has code in it, and its def line]}}, once the
threads run; exits after SECONDS.
"""
import dis
import json
import os
import sys
import threading
import time


def spin(stop):
    xs = [0, 1] * 50
    n = 0
    while not stop:
        for x in xs:
            if x:
                n += 1
    return n


def short(k):
    return k + 1


def caller(stop):
    k = 0
    while not stop:
        k = short(k)
        k = short(k)
    return k


def real_lines(fn):
    code = fn.__code__
    lines = {line for _, line in dis.findlinestarts(code) if line is not None}
    return sorted(lines | {code.co_firstlineno})


sys.setswitchinterval(0.0005)  # the GIL changes hands often: many threads wait for it
stop = []
threads = [threading.Thread(target=spin, args=(stop,), daemon=True) for _ in range(3)]
threads.append(threading.Thread(target=caller, args=(stop,), daemon=True))
for t in threads:
    t.start()
print(json.dumps({"pid": os.getpid(),
                  "lines": {fn.__name__: real_lines(fn) for fn in (spin, short, caller)}}),
      flush=True)
time.sleep(float(sys.argv[1]))
stop.append(True)
