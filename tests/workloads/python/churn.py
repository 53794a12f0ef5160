"""Ground truth for recording: threads that come and go while recorded.

For SECONDS (argv[1], default 3) starts batches of four threads named "churn-N" that each
spin in short_task for 30 ms of their own CPU time (longer on a loaded machine, as for any
program) and exit. Prints the number of threads started at the end; with a
file name as argv[2], also writes one "NATIVE_TID NAME" line per thread there (the main
thread included), the ground truth of which thread had which name.
"""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
TRUTH = sys.argv[2] if len(sys.argv) > 2 else None
seen = []  # (native id, name) of every thread, appended by the thread itself


def short_task():
    me = threading.current_thread()
    seen.append((threading.get_native_id(), me.name))
    t = time.thread_time() + 0.03
    x = 0
    while time.thread_time() < t:  # @short_task_clock
        for i in range(1000): x += i  # @short_task
    return x


def main():
    seen.append((threading.get_native_id(), threading.current_thread().name))
    end = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < end:
        batch = [threading.Thread(target=short_task, name=f"churn-{n + k}") for k in range(4)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        n += len(batch)
    if TRUTH:
        with open(TRUTH, "w") as f:
            f.writelines(f"{tid} {name}\n" for tid, name in seen)
    print(n)


main()
