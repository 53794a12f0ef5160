"""Ground truth for recording: threads that come and go while recorded.

For SECONDS (argv[1], default 3) starts batches of four threads named "churn-N" that each
spin ~30 ms in short_task and exit. Prints the number of threads started at the end.
"""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3


def short_task():
    t = time.monotonic() + 0.03
    x = 0
    while time.monotonic() < t:
        for i in range(1000): x += i  # @short_task
    return x


def main():
    end = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < end:
        batch = [threading.Thread(target=short_task, name=f"churn-{n + k}") for k in range(4)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        n += len(batch)
    print(n)


main()
