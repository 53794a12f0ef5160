"""Wall-clock ground truth for record --off-cpu.

split OUT SECONDS: the main thread repeats compute 40 ms, time.sleep 40 ms, Event.wait 20 ms
(an event nobody sets: a timed futex wait) for SECONDS, measuring the wall time each part
really took (time.perf_counter) and the CPU time computing took (time.thread_time: on a loaded
machine computing also waits for a CPU); writes {"compute": s, "sleep": s, "wait": s,
"compute_cpu": s, "total": s} as JSON to OUT at the end.

hung: every thread blocked for good (the main thread joins a thread waiting on an Event, one
asleep, one reading a pipe nobody writes, one on a Lock held by the main thread); prints
"ready" with the threads' names, then stays so until killed.
"""
import json
import os
import sys
import threading
import time


def compute(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def sleeper(seconds):
    time.sleep(seconds)


def waiter(event, seconds):
    event.wait(seconds)


def split(out, seconds):
    event = threading.Event()
    spent = {"compute": 0.0, "sleep": 0.0, "wait": 0.0, "compute_cpu": 0.0}
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a, cpu = time.perf_counter(), time.thread_time()
        compute(0.04)
        b = time.perf_counter()
        spent["compute_cpu"] += time.thread_time() - cpu
        sleeper(0.04)
        c = time.perf_counter()
        waiter(event, 0.02)
        d = time.perf_counter()
        spent["compute"] += b - a
        spent["sleep"] += c - b
        spent["wait"] += d - c
    spent["total"] = time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump(spent, f)


def hung():
    event = threading.Event()
    lock = threading.Lock()
    lock.acquire()
    r, _w = os.pipe()
    threads = [threading.Thread(target=event.wait, name="hung-event", daemon=True),
               threading.Thread(target=time.sleep, args=(1000,), name="hung-sleep", daemon=True),
               threading.Thread(target=os.read, args=(r, 1), name="hung-read", daemon=True),
               threading.Thread(target=lock.acquire, name="hung-lock", daemon=True)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    threads[0].join()


if __name__ == "__main__":
    if sys.argv[1] == "split":
        split(sys.argv[2], float(sys.argv[3]))
    else:
        hung()
