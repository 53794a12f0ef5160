"""A Python target for the injector's kill tests: works until its stdin is closed, checks
every result itself.

    python kill_target.py MODE

Prints "READY <pid>", then "RESULT ok MODE n=<steps>" at the end, or "RESULT fail MODE
<what went wrong>" (exit 1). The calls go through ctypes where an EINTR that leaked into the
process would show (Python itself retries EINTR, PEP 475, and would hide it):
    c_read       exact 4 KiB chunks read() from a pipe a writer thread fills
    c_nanosleep  20 ms nanosleep()s, each at least 20 ms long, none failing
    sleep        20 ms time.sleep()s, each at least 20 ms long
    busy         a fixed pure-Python computation again and again, always the same result
A third thread waits for the end of stdin.
"""
import ctypes
import ctypes.util
import errno
import hashlib
import os
import sys
import threading
import time

MODE = sys.argv[1]
STEP = 0.02
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
done = threading.Event()


class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def fail(msg):
    print("RESULT fail %s %s" % (MODE, msg), flush=True)
    os._exit(1)


def check_elapsed(t0, what):
    el = time.monotonic() - t0
    if el < STEP - 0.0005:
        fail("%s returned after %.4f s < %.3f s" % (what, el, STEP))


def chunk(i):
    return hashlib.sha256(b"chunk%d" % i).digest() * 128


def c_read():
    r, w = os.pipe()

    def writer():
        # Until the process ends: the reader finishes its chunk after the end of stdin.
        i = 0
        while True:
            os.write(w, chunk(i))
            i += 1
            time.sleep(0.005)
    threading.Thread(target=writer, daemon=True).start()
    buf = ctypes.create_string_buffer(4096)
    n = 0
    while not done.is_set():
        got = b""
        while len(got) < 4096:
            rc = libc.read(r, buf, 4096 - len(got))
            if rc <= 0:
                fail("read returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
            got += buf.raw[:rc]
        if got != chunk(n):
            fail("chunk %d differs" % n)
        n += 1
    return n


def c_nanosleep():
    n = 0
    while not done.is_set():
        ts = timespec(0, int(STEP * 1e9))
        t0 = time.monotonic()
        rc = libc.nanosleep(ctypes.byref(ts), None)
        if rc != 0:
            fail("nanosleep returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
        check_elapsed(t0, "nanosleep")
        n += 1
    return n


def sleep():
    n = 0
    while not done.is_set():
        t0 = time.monotonic()
        time.sleep(STEP)
        check_elapsed(t0, "time.sleep")
        n += 1
    return n


def busy():
    def work():
        s = 0
        for i in range(100000):
            s = (s * 31 + i) % 1000000007
        return s
    first = work()
    n = 1
    while not done.is_set():
        if work() != first:
            fail("the computation changed its result")
        n += 1
    return n


def main():
    fn = {"c_read": c_read, "c_nanosleep": c_nanosleep, "sleep": sleep, "busy": busy}[MODE]

    def watch():
        sys.stdin.read()
        done.set()
    threading.Thread(target=watch, daemon=True).start()
    print("READY %d" % os.getpid(), flush=True)
    n = fn()
    print("RESULT ok %s n=%d" % (MODE, n), flush=True)


if __name__ == "__main__":
    main()
