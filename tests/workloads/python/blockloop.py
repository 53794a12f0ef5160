"""Threads that block again and again in the same place, as a data loader's or a pin-memory
thread's do: N pollers, each in a loop of queue.get with a short timeout (a futex wait that
times out), nothing ever put. The main thread sleeps. Runs for SECONDS, then prints the number
of timeouts each poller had.

usage: blockloop.py THREADS SECONDS TIMEOUT_MS"""
import queue
import sys
import threading
import time


def poll_queue(q, timeout, deadline, counts, i):
    while time.monotonic() < deadline:
        try:
            q.get(timeout=timeout)  # BLOCK-HERE
        except queue.Empty:
            counts[i] += 1


def main():
    n, seconds, timeout_ms = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    deadline = time.monotonic() + seconds
    counts = [0] * n
    threads = [threading.Thread(target=poll_queue, name=f"poller-{i}",
                                args=(queue.Queue(), timeout_ms / 1000, deadline, counts, i))
               for i in range(n)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        time.sleep(0.05)
    for t in threads:
        t.join()
    print(" ".join(map(str, counts)), flush=True)


main()
