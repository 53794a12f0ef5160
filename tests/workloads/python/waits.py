"""Threads that wait in known ways, for the wait-state tests: two CPU-bound threads that take
turns with the GIL ("spin-0", "spin-1"), one asleep in time.sleep ("sleeper"), one in
threading.Event.wait ("waiter"), one blocked reading a pipe ("reader"). Prints "ready" once
every thread runs, then runs until killed."""
import os
import sys
import threading
import time

event = threading.Event()
r, w = os.pipe()


def spin():
    n = 0
    while True:
        n += 1


def sleeper():
    while True:
        time.sleep(100)


def waiter():
    event.wait()


def reader():
    os.read(r, 1)


threads = [threading.Thread(target=spin, name="spin-0", daemon=True),
           threading.Thread(target=spin, name="spin-1", daemon=True),
           threading.Thread(target=sleeper, name="sleeper", daemon=True),
           threading.Thread(target=waiter, name="waiter", daemon=True),
           threading.Thread(target=reader, name="reader", daemon=True)]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdout.flush()
event.wait()
