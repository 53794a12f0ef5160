"""A target for the live-diagnosis tests: does known work and checks every result.

    python live_target.py MODE SECONDS TOKEN

Prints "READY <pid>" once its work has started, then works for about SECONDS (or a fixed
amount of work for "busy"), and ends with one line:
    RESULT ok MODE n=<count> sum=<checksum>
or  RESULT fail MODE <what went wrong>
(exit status 0 / 1). Globals an eval can read: TOKEN, MODE, counter.

The modes block in a given system call most of the time, so an injection catches a thread
there; the c_* modes make the call through ctypes, so an EINTR that leaked into the process
is seen (Python itself retries EINTR, PEP 475, which would hide it).
"""
import ctypes
import ctypes.util
import errno
import hashlib
import os
import select
import sys
import threading
import time

MODE = sys.argv[1]
SECONDS = float(sys.argv[2])
TOKEN = sys.argv[3] if len(sys.argv) > 3 else ""
counter = 0
STEP = 0.02
BUSY_WORK = 200000
READ_CHUNK = 4096
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def fail(msg):
    print("RESULT fail %s %s" % (MODE, msg), flush=True)
    sys.exit(1)


def ready():
    print("READY %d" % os.getpid(), flush=True)


def pattern(i):
    """The i-th chunk the writer sends: deterministic bytes."""
    return hashlib.sha256(b"chunk%d" % i).digest() * (READ_CHUNK // 32)


def busy_sum(n, s=0, start=0):
    for i in range(start, n):
        s = (s * 31 + i) % 1000000007
    return s


def timed_loop(step):
    """Call step() until SECONDS passed; return how many times it ran."""
    global counter
    end = time.monotonic() + SECONDS
    ready()
    while time.monotonic() < end:
        step()
        counter += 1
    return counter


def check_elapsed(t0, want, what):
    el = time.monotonic() - t0
    if el < want - 0.001:
        fail("%s returned after %.4f s < %.4f s" % (what, el, want))


def m_sleep():
    def step():
        t0 = time.monotonic()
        time.sleep(STEP)
        check_elapsed(t0, STEP, "time.sleep")
    n = timed_loop(step)
    return n, n


def m_c_nanosleep():
    def step():
        ts = timespec(0, int(STEP * 1e9))
        t0 = time.monotonic()
        rc = libc.nanosleep(ctypes.byref(ts), None)
        if rc != 0:
            fail("nanosleep returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
        check_elapsed(t0, STEP, "nanosleep")
    n = timed_loop(step)
    return n, n


def m_c_poll():
    def step():
        t0 = time.monotonic()
        rc = libc.poll(None, 0, int(STEP * 1000))
        if rc != 0:
            fail("poll returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
        check_elapsed(t0, STEP, "poll")
    n = timed_loop(step)
    return n, n


def m_c_epoll():
    epfd = libc.epoll_create1(0)
    if epfd < 0:
        fail("epoll_create1 failed")
    events = ctypes.create_string_buffer(64)

    def step():
        t0 = time.monotonic()
        rc = libc.epoll_wait(epfd, events, 1, int(STEP * 1000))
        if rc != 0:
            fail("epoll_wait returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
        check_elapsed(t0, STEP, "epoll_wait")
    n = timed_loop(step)
    return n, n


def m_c_futex():
    word = ctypes.c_int(0)
    SYS_futex, FUTEX_WAIT_PRIVATE = 202, 128

    def step():
        ts = timespec(0, int(STEP * 1e9))
        t0 = time.monotonic()
        rc = libc.syscall(SYS_futex, ctypes.byref(word), FUTEX_WAIT_PRIVATE, 0,
                          ctypes.byref(ts), None, 0)
        e = ctypes.get_errno()
        if rc != -1 or e != errno.ETIMEDOUT:
            fail("futex wait returned %d errno %s" % (rc, errno.errorcode.get(e)))
        check_elapsed(t0, STEP, "futex wait")
    n = timed_loop(step)
    return n, n


def m_select():
    r, w = os.pipe()

    def step():
        t0 = time.monotonic()
        got = select.select([r], [], [], STEP)
        if got != ([], [], []):
            fail("select returned %r" % (got,))
        check_elapsed(t0, STEP, "select")
    n = timed_loop(step)
    return n, n


def m_poll():
    r, w = os.pipe()
    p = select.poll()
    p.register(r, select.POLLIN)

    def step():
        t0 = time.monotonic()
        got = p.poll(STEP * 1000)
        if got:
            fail("poll returned %r" % (got,))
        check_elapsed(t0, STEP, "select.poll")
    n = timed_loop(step)
    return n, n


def m_event():
    ev = threading.Event()
    stop = [False]

    def setter():
        while not stop[0]:
            time.sleep(0.005)
            ev.set()
    threading.Thread(target=setter, name="setter", daemon=True).start()

    def step():
        if ev.wait() is not True:
            fail("Event.wait() returned without the event")
        ev.clear()
    n = timed_loop(step)
    stop[0] = True
    return n, n


def m_event_timeout():
    ev = threading.Event()

    def step():
        t0 = time.monotonic()
        if ev.wait(STEP) is not False:
            fail("Event.wait(timeout) returned True: nobody set it")
        check_elapsed(t0, STEP, "Event.wait(timeout)")
    n = timed_loop(step)
    return n, n


def _reader(read):
    """Read exact chunks from a pipe fed by a writer thread; check every byte."""
    global counter
    r, w = os.pipe()
    total = max(4, int(SECONDS / 0.01))

    def writer():
        for i in range(total):
            time.sleep(0.01)
            os.write(w, pattern(i))
        os.close(w)
    threading.Thread(target=writer, name="writer", daemon=True).start()
    ready()
    h = hashlib.sha256()
    for i in range(total):
        want = pattern(i)
        got = b""
        while len(got) < READ_CHUNK:
            part = read(r, READ_CHUNK - len(got))
            if not part:
                fail("unexpected end of the pipe at chunk %d" % i)
            got += part
        if got != want:
            fail("chunk %d differs" % i)
        h.update(got)
        counter += 1
    return total, h.hexdigest()[:16]


def m_read():
    return _reader(os.read)


def m_c_read():
    buf = ctypes.create_string_buffer(READ_CHUNK)

    def read(fd, n):
        rc = libc.read(fd, buf, n)
        if rc < 0:
            fail("read returned %d errno %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
        return buf.raw[:rc]
    return _reader(read)


def m_busy():
    """Pure Python work, never blocking: the same computation again and again until
    SECONDS passed; every round must give the same checksum."""
    first = [None]

    def step():
        s = busy_sum(BUSY_WORK)
        if first[0] is None:
            first[0] = s
        elif s != first[0]:
            fail("busy round gave %s, the first gave %s" % (s, first[0]))
    n = timed_loop(step)
    return n, first[0]


def m_hold_gil():
    # A C call made through PyDLL keeps the GIL (unlike CDLL): the target holds the GIL
    # for SECONDS and no other thread can run Python.
    ready()
    ctypes.PyDLL(None).sleep(int(SECONDS))
    return 1, 1


def m_threads():
    """Named threads in known functions, for python.backtrace."""
    stop = threading.Event()

    def sleeper_fn():
        while not stop.is_set():
            time.sleep(0.01)

    def waiter_fn():
        stop.wait()
    threading.Thread(target=sleeper_fn, name="sleeper", daemon=True).start()
    threading.Thread(target=waiter_fn, name="waiter", daemon=True).start()
    n = timed_loop(lambda: time.sleep(STEP))
    stop.set()
    return n, n


def main():
    fn = globals().get("m_" + MODE)
    if fn is None:
        fail("unknown mode")
    n, s = fn()
    print("RESULT ok %s n=%s sum=%s" % (MODE, n, s), flush=True)


if __name__ == "__main__":
    main()
