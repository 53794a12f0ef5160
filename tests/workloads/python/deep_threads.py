"""Ground truth for complete stacks: the main thread and two threads ("deep-1", "deep-2")
each descend DEPTH (argv[2], default 40) Python calls, every fourth one through a C function
calling back into Python (map), then spin in leaf() calling builtins. Every sample's native
stack starts at _start (main thread) or clone3/clone (the other threads); on Python 3.8-3.10
each Python call also takes C stack (about 0.5 KiB), so such a stack is about 20 KiB deep.

Prints "ready" once every thread is in leaf(), then runs SECONDS (argv[1], default 3).
"""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 40
end = time.monotonic() + SECONDS
arrived = threading.Barrier(3, action=lambda: print("ready", flush=True))


def leaf():
    arrived.wait()
    x = 0
    while time.monotonic() < end:
        for i in range(200):
            x += len(str(i)) + abs(-i)
    return x


def descend(n):
    if n == 0:
        return leaf()
    if n % 4 == 0:
        return sum(map(descend, [n - 1]))
    return descend(n - 1)


threads = [threading.Thread(target=descend, args=(DEPTH,), name=f"deep-{i}") for i in (1, 2)]
for t in threads:
    t.start()
descend(DEPTH)
for t in threads:
    t.join()
