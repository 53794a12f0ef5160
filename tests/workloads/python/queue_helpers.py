"""N helper threads that wait on a queue, woken every 0.5 s by its timeout, as a PyTorch
rank's data loader and checkpoint helpers do: for tests/integration/test_offcpu.py. Each
helper blocks again and again at one place, from one Python chain (helper -> get -> wait).
Prints "READY" once every helper runs; the main thread sleeps.

    python queue_helpers.py [N]
"""
import queue
import sys
import threading
import time


def helper(q):
    while True:
        try:
            q.get(timeout=0.5)  # HELPER_WAIT
        except queue.Empty:
            pass


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    q = queue.Queue()
    for _ in range(n):
        threading.Thread(target=helper, args=(q,), daemon=True).start()
    print("READY", flush=True)
    time.sleep(10**6)


if __name__ == "__main__":
    main()
