"""Threads that block again and again in the same place, as a data loader's or a pin-memory
thread's do: N pollers, each in a loop of queue.get with a short timeout (a futex wait that
times out), nothing ever put. The main thread sleeps. Runs for SECONDS, then prints the number
of timeouts each poller had. With RUN, each poller takes turns: RUN gets at the first line
(TIMEOUT_MS), then RUN at the second (twice TIMEOUT_MS), from the same function: the same
native stack, other Python lines.

usage: blockloop.py THREADS SECONDS TIMEOUT_MS [RUN]"""
import queue
import sys
import threading
import time


def poll_queue(q, timeout, deadline, counts, i, run):
    while time.monotonic() < deadline:
        for _ in range(max(run, 1)):
            try:
                q.get(timeout=timeout)  # BLOCK-HERE
            except queue.Empty:
                counts[i] += 1
        for _ in range(run):
            try:
                q.get(timeout=2 * timeout)  # BLOCK-LONGER
            except queue.Empty:
                counts[i] += 1


def main():
    n, seconds, timeout_ms = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    run = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    deadline = time.monotonic() + seconds
    counts = [0] * n
    threads = [threading.Thread(target=poll_queue, name=f"poller-{i}",
                                args=(queue.Queue(), timeout_ms / 1000, deadline, counts, i, run))
               for i in range(n)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        time.sleep(0.05)
    for t in threads:
        t.join()
    print(" ".join(map(str, counts)), flush=True)


main()
