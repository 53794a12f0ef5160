"""Ground truth for recording: short threads started one at a time after long quiet spells.

COUNT times (argv[1], default 3): sleeps QUIET seconds (argv[2], default 1.5: longer than a
thread-name reader keeps looking after a thread's birth), then starts one thread named
"late-N" that spins in short_task for 30 ms of its own CPU time and exits, and waits for it.
With a file name as argv[3], writes one "NATIVE_TID NAME" line per thread there (the main
thread included): the ground truth of which thread had which name.
"""
import sys
import threading
import time

COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 3
QUIET = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
TRUTH = sys.argv[3] if len(sys.argv) > 3 else None
seen = [(threading.get_native_id(), threading.current_thread().name)]


def short_task():
    seen.append((threading.get_native_id(), threading.current_thread().name))
    t = time.thread_time() + 0.03
    x = 0
    while time.thread_time() < t:
        for i in range(1000): x += i  # @late_task
    return x


for n in range(COUNT):
    time.sleep(QUIET)
    t = threading.Thread(target=short_task, name=f"late-{n}")
    t.start()
    t.join()
if TRUTH:
    with open(TRUTH, "w") as f:
        f.writelines(f"{tid} {name}\n" for tid, name in seen)
