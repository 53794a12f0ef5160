"""A thread whose every name is hostile, for tests/integration/test_hostile_names.py.

    python hostile_names.py SECONDS [ARGS...]

A thread named THREAD (its kernel name COMM, set with prctl) runs, on CPU for SECONDS, a
function named NAME from a file named FILE (co_name, co_qualname and co_filename), with a
local variable named LOCAL; the thread's native id is printed once it runs. The names hold
newlines that would forge output lines, escape sequences that would drive a terminal, ';'
(the folded-stack separator), a bidi override and lone surrogates (invalid UTF-8 once the
interpreter encodes them). The loop is on line 6 of FILE. co_name is an instance of a str
subclass (code.replace keeps it so): a name is read from any str, not only an exact one.
"""
import ctypes
import sys
import threading
import time

NAME = "spin\x1b]0;pwned\x07;semi\nThread 1 \"fake\" (running)\n    forged (f.py:1)\u202e\udcff"
FILE = "/tmp/x\x1b[2J\n    forged (g.py:2)\udcfe.py"
THREAD = "T\x1b]0;pwned\x07\nThread 1 \"fake\" (running)\udcfd"
LOCAL = "val\x1b[1mue\nforged = 1"
COMM = b"C\x1b]0;pw\x07\n\xff"

SOURCE = ("def spin(ev, seconds):\n"
          "    value = 'v\\x1b[2J'\n"
          "    ev.set()\n"
          "    end = time.time() + seconds\n"
          "    n = 0\n"
          "    while time.time() < end: n += 1\n"
          "    return n\n")
ns = {"time": time}
exec(compile(SOURCE, FILE, "exec"), ns)
spin = ns["spin"]


class Name(str):
    pass


names = {"co_name": Name(NAME), "co_varnames": ("ev", "seconds", LOCAL, "end", "n")}
if sys.version_info >= (3, 11):
    names["co_qualname"] = NAME
spin.__code__ = spin.__code__.replace(**names)
assert type(spin.__code__.co_name) is Name


def run(ev):
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(COMM), 0, 0, 0)  # PR_SET_NAME
    spin(ev, float(sys.argv[1]))


ready = threading.Event()
t = threading.Thread(target=run, args=(ready,), name=THREAD, daemon=True)
t.start()
ready.wait()
print(t.native_id, flush=True)
t.join()
