"""A Python workload with known stacks, for reading Python stacks from outside.

    python py_stacks.py OUT_DIR [--busy]

Starts threads that park at known places, then writes OUT_DIR/truth.json: for every thread its
name, ident (pthread_t), native id and its stack as the interpreter itself sees it
(sys._current_frames), leaf first. Lines marked "# @NAME" below are the ground-truth lines the
tests look up by NAME in this file, independently of that dump.

Threads (all but MainThread are daemons; the names cover every str kind: ASCII, latin-1,
UCS-2 and UCS-4):
  MainThread      <module> -> main -> idle                     sleeps
  sleeper-Ω       Sleeper.run_forever -> <lambda>              sleeps (lambda, method)
  gen-café        gen_consumer -> produce -> block_in_gen      sleeps inside a generator
  asyncio-🐍      run_async -> ... -> amain -> acoro -> block_in_coro   sleeps in a coroutine
  unicode         call_unicode -> fünc_ñ -> Ünï.méthode         sleeps, in a file named mödülé_ü.py
  deep            recurse x 501                                 sleeps 500 calls deep
  ctor            make_objects -> Ctor.__init__                 sleeps in __init__, after the
                  call was specialised (3.13 pushes a hidden _Py_InitCleanup shim frame)
With --busy (for the BPF sampler; these run on CPU):
  busy-gil        spin                                          pure-Python loop, holds the GIL
  busy-nogil      hash_loop                                     hashlib with the GIL released
  sleep-loop      sleep_loop                                    time.sleep(0.0002) in a loop
  and "deep" and "ctor" spin at their leaf instead of sleeping.
"""
import asyncio
import hashlib
import importlib
import json
import os
import sys
import threading
import time

OUT = sys.argv[1]
BUSY = "--busy" in sys.argv
DEPTH = 500
ready = []

UNICODE_MODULE = '''
import time


class Ünï:
    def méthode(self, ev):
        ev.set()
        time.sleep(3600)  # @unicode_leaf


def fünc_ñ(ev):
    Ünï().méthode(ev)  # @unicode_call
'''


def event():
    ev = threading.Event()
    ready.append(ev)
    return ev


class Sleeper:
    def run_forever(self, ev):
        ev.set()
        (lambda: time.sleep(3600))()  # @sleeper_leaf


def block_in_gen(ev):
    ev.set()
    time.sleep(3600)  # @gen_leaf


def produce(ev):
    yield 1
    block_in_gen(ev)  # @gen_produce
    yield 2


def gen_consumer(ev):
    for _ in produce(ev):  # @gen_consumer
        pass


def block_in_coro(ev):
    ev.set()
    time.sleep(3600)  # @coro_leaf


async def acoro(ev):
    await asyncio.sleep(0)
    block_in_coro(ev)  # @coro_acoro


async def amain(ev):
    await acoro(ev)  # @coro_amain


def run_async(ev):
    asyncio.run(amain(ev))


def call_unicode(ev):
    sys.path.insert(0, OUT)
    mod = importlib.import_module("mödülé_ü")
    mod.fünc_ñ(ev)  # @unicode_outer


def spin_bottom():
    x = 0
    while True:  # @deep_spin_while
        x += 1  # @deep_spin_body


def recurse(n, ev):
    if n == 0:
        ev.set()
        if BUSY:
            spin_bottom()  # @deep_spin_call
        time.sleep(3600)  # @deep_leaf
    recurse(n - 1, ev)  # @deep_call


class Ctor:
    def __init__(self, ev):
        if ev is None:
            return
        ev.set()
        x = 0
        while BUSY:  # @ctor_spin_while
            x += 1  # @ctor_spin_body
        time.sleep(3600)  # @ctor_leaf


def make_objects(ev):
    for _ in range(2000):
        Ctor(None)  # warm up: the call gets specialised
    Ctor(ev)  # @ctor_call


def spin(ev):
    ev.set()
    x = 0
    while True:  # @spin_while
        x += 1  # @spin_body


def hash_loop(ev):
    data = b"x" * (32 << 20)
    ev.set()
    while True:  # @hash_while
        hashlib.sha256(data).digest()  # @hash_call


def sleep_loop(ev):
    ev.set()
    while True:  # @sleep_loop_while
        time.sleep(0.0002)  # @sleep_loop_call


def start(name, target, *args):
    t = threading.Thread(target=target, name=name, args=args + (event(),), daemon=True)
    t.start()
    return t


def frames_of(frame):
    out = []
    while frame is not None:
        code = frame.f_code
        out.append({"func": code.co_name, "qualname": getattr(code, "co_qualname", None),
                    "file": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return out


def dump():
    frames = sys._current_frames()
    threads = []
    for t in threading.enumerate():
        threads.append({"name": t.name, "ident": t.ident,
                        "native_id": getattr(t, "native_id", None),
                        "frames": frames_of(frames.get(t.ident))})
    tmp = os.path.join(OUT, "truth.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "version": list(sys.version_info[:3]),
                   "threads": threads}, f, ensure_ascii=False)
    os.rename(tmp, os.path.join(OUT, "truth.json"))


def idle():
    while True:
        time.sleep(3600)  # @main_leaf


def main():
    with open(os.path.join(OUT, "mödülé_ü.py"), "w", encoding="utf-8") as f:
        f.write(UNICODE_MODULE)
    start("sleeper-Ω", Sleeper().run_forever)
    start("gen-café", gen_consumer)
    start("asyncio-🐍", run_async)
    start("unicode", call_unicode)
    start("deep", recurse, DEPTH)
    start("ctor", make_objects)
    if BUSY:
        start("busy-gil", spin)
        start("busy-nogil", hash_loop)
        start("sleep-loop", sleep_loop)
    for ev in ready:
        ev.wait(30)
    time.sleep(0.3)  # let every thread reach its blocking call
    dump()
    idle()  # @main_call


sys.setrecursionlimit(DEPTH + 200)
if BUSY:
    sys.setswitchinterval(0.0002)  # the GIL-waiting threads get their turn sooner
main()  # @module_call
