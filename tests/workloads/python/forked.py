"""Ground truth for recording --children: threads in forked worker processes.

A multiprocessing pool of three forked workers runs TASKS (argv[1], default 12) tasks; each
task starts a thread named "inner-N" that spins 20 ms of its own CPU time and ends. Every
thread of every process appends "PID NATIVE_TID NAME" to the file argv[2]: the workers'
main threads and inner threads, and the parent's threads once the pool runs.
"""
import multiprocessing
import os
import sys
import threading
import time

TASKS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
TRUTH = sys.argv[2]


def note(thread):
    line = f"{os.getpid()} {thread.native_id} {thread.name}\n"
    fd = os.open(TRUTH, os.O_WRONLY | os.O_APPEND)
    os.write(fd, line.encode())
    os.close(fd)


def spin():
    note(threading.current_thread())
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass


def worker_start():
    note(threading.current_thread())


def task(i):
    t = threading.Thread(target=spin, name=f"inner-{i}")
    t.start()
    t.join()
    return os.getpid()


if __name__ == "__main__":
    open(TRUTH, "w").close()
    multiprocessing.set_start_method("fork")
    with multiprocessing.Pool(3, initializer=worker_start) as pool:
        for t in threading.enumerate():
            note(t)
        pool.map(task, range(TASKS), chunksize=1)
