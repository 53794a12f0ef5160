"""A process that crashes in a known way, at known lines, with known local variables (for
tests/integration/test_crash.py).

    crash_target.py MODE [GO_FILE]

Starts a thread "sleeper-1" that waits (local 'waiting_for'), prints "ready", waits for
GO_FILE to exist if one is given (time to inject), then:
  segv        SIGSEGV in C code: ctypes.string_at(0) from crash_here() (locals depth, note,
              secret = 4242)
  abort       os.abort() from abort_here() (locals reason, count = 17)
  thread_exc  a thread "worker-1" raises ValueError("bad batch 7") in fail_batch() (locals
              batch = 7, items); the main thread joins it and exits 0 ("main done")
  main_exc    KeyError('missing-key') raised in lookup() (local key) in the main thread
  segv2       the main thread and a thread "crasher-2" both fault at once, in libc's
              strlen(NULL) called from crash_in_libc() (local note), without the GIL
"""
import ctypes
import os
import sys
import threading
import time


def sleeper(ev):
    waiting_for = "the crash"
    ev.wait()  # LINE_SLEEPER
    return waiting_for


def crash_here(depth, note):
    secret = 4242
    ctypes.string_at(0)  # LINE_SEGV
    return secret


def crash_in_libc(note):
    libc = ctypes.CDLL(None)  # its functions run without the GIL: both threads get there
    libc.strlen(None)  # LINE_SEGV2
    return note


def abort_here(reason):
    count = 17
    os.abort()  # LINE_ABORT
    return count


def fail_batch(batch):
    items = [batch] * 3
    raise ValueError("bad batch %d" % batch)  # LINE_THREAD_EXC
    return items


def lookup(key):
    table = {"a": 1}
    return table[key]  # LINE_MAIN_EXC


def main():
    mode = sys.argv[1]
    go = sys.argv[2] if len(sys.argv) > 2 else None
    ev = threading.Event()
    t = threading.Thread(target=sleeper, args=(ev,), name="sleeper-1", daemon=True)
    t.start()
    print("ready", flush=True)
    while go and not os.path.exists(go):
        time.sleep(0.01)
    if mode == "segv":
        crash_here(3, "boom")  # LINE_CALL_SEGV
    elif mode == "abort":
        abort_here("on purpose")
    elif mode == "thread_exc":
        w = threading.Thread(target=fail_batch, args=(7,), name="worker-1")
        w.start()
        w.join()  # LINE_JOIN
        print("main done", flush=True)
    elif mode == "main_exc":
        lookup("missing-key")
    elif mode == "segv2":
        both = threading.Barrier(2)
        c = threading.Thread(target=lambda: (both.wait(), crash_in_libc("other")),
                             name="crasher-2")
        c.start()
        both.wait()
        crash_in_libc("boom")


if __name__ == "__main__":
    main()
