"""Ground truth for recording: three busy Python threads with distinct stacks and names.

Thread "py-alpha" runs alpha_loop -> alpha_work, "py-beta" beta_loop -> beta_work,
"py-gamma" gamma_loop -> gamma_work; the main thread waits. Prints "TID NAME" for each
thread (threading.get_native_id) once all run, then runs SECONDS (argv[1], default 3).
"""
import sys
import threading
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
end = time.monotonic() + SECONDS
started = threading.Barrier(4)
print_lock = threading.Lock()


def announce(name):
    with print_lock:
        print(threading.get_native_id(), name, flush=True)


def alpha_work():
    return sum(i * i for i in range(1000))


def beta_work():
    return sum(i * 3 for i in range(1000))


def gamma_work():
    return sum(i ^ 5 for i in range(1000))


def alpha_loop():
    announce("py-alpha")
    started.wait()
    while time.monotonic() < end:
        alpha_work()


def beta_loop():
    announce("py-beta")
    started.wait()
    while time.monotonic() < end:
        beta_work()


def gamma_loop():
    announce("py-gamma")
    started.wait()
    while time.monotonic() < end:
        gamma_work()


threads = [threading.Thread(target=f, name=n)
           for f, n in ((alpha_loop, "py-alpha"), (beta_loop, "py-beta"),
                        (gamma_loop, "py-gamma"))]
for t in threads:
    t.start()
started.wait()
for t in threads:
    t.join()
