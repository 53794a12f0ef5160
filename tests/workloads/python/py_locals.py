"""A Python workload with known local variables, for reading them from outside.

    python py_locals.py OUT_DIR MAX_REPR            threads parked with known locals
    python py_locals.py OUT_DIR MAX_REPR --mutate   threads rewriting their locals nonstop

Parked mode starts threads that stop (sleeping) in functions whose locals cover every kind of
simple value, then writes OUT_DIR/truth.json: for every thread (name, native id) its frames,
leaf first, each with its function name, parameter / cell / free variable names, and every
bound local variable as the interpreter itself sees it (frame.f_locals) with what probing
must show for it: type(v).__name__ and the expected repr (computed here with repr(), cut to
MAX_REPR characters as pyproc__frame_locals documents; None where only the type is shown).
MainThread parks at module level: its <module> frame has no fast locals, and its namespace
(the module's globals minus dunder names, modules, functions, builtins and classes) is in
truth["module_namespace"]. The "class-body" thread parks inside a class statement: its
namespace is in that frame's "namespace".

Mutate mode starts threads that reassign locals of every type and size in a tight loop and
call short-lived functions (frames come and go), while the main thread rewrites module
globals; OUT_DIR/ready is written once they run. For stress tests: nothing may crash or hang.
"""
import json
import os
import random
import sys
import threading
import time
import types

OUT = sys.argv[1]
MAXR = int(sys.argv[2])
MUTATE = "--mutate" in sys.argv
MIN = 16
INT_MAX_DIGITS = 2000  # 30-bit digits pyrepr converts

if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)

ready = []


# ---- expected reprs (the contract of pyproc__frame_locals) -----------------------------------
def cut(v, mx):
    mx = max(mx, MIN)
    r = repr(v)
    if len(r) <= mx:
        return r
    best = None
    for n in range(0, min(len(v), mx + 1)):
        rn = repr(v[:n])
        if len(rn) + 3 <= mx:
            best = rn + "..."
    return best


def int_expect(v, mx):
    if (abs(v).bit_length() + 29) // 30 > INT_MAX_DIGITS:
        return None
    mx = max(mx, MIN)
    r = repr(v)
    if len(r) <= mx:
        return r
    digits = str(abs(v))
    neg = 1 if v < 0 else 0
    tail = f"...({len(digits)} digits)"
    keep = mx - len(tail) - neg if mx > len(tail) + neg + 1 else 1
    return ("-" if neg else "") + digits[:keep] + tail


def expect(v):
    t = type(v)
    if v is None or v is True or v is False or v is Ellipsis or v is NotImplemented:
        return repr(v)
    if t is int:
        return int_expect(v, MAXR)
    if t is float:
        return repr(v)
    if t is str or t is bytes:
        return cut(v, MAXR)
    if t in (tuple, list, dict, set, frozenset):
        return f"<{t.__name__} of {len(v)}>"
    return None


def describe(items):
    return [{"name": k, "type": type(v).__name__, "repr": expect(v)} for k, v in items]


def is_definition(v):
    return type(v) in (types.ModuleType, types.FunctionType, types.BuiltinFunctionType) or \
        isinstance(v, type)


def namespace(d):
    return describe([(k, v) for k, v in list(d.items())
                     if isinstance(k, str) and not k.startswith("__") and
                     not is_definition(v)])


# ---- parked threads ---------------------------------------------------------------------------
class Plain:
    pass


class Slotted:
    __slots__ = ("x",)


class MyInt(int):
    pass


def event():
    ev = threading.Event()
    ready.append(ev)
    return ev


def park_simple(ev, a, b=2, *rest, kw_only="k", captured_arg=None, **options):
    small, zero, negative = 7, 0, -42
    i63, i64, neg_big = 2 ** 63 - 1, 2 ** 64, -(2 ** 100)
    huge = 10 ** 5000 + 1          # cut: leading digits + "...(5001 digits)"
    too_big = 1 << 70000           # over PYREPR_INT_MAX_DIGITS: no repr
    tenth, big_f, tiny_f = 0.1, 1e300, 5e-324
    nan, inf, ninf, nzero = float("nan"), float("inf"), float("-inf"), -0.0
    e16, e_5, third = 1e16, 1e-05, 1 / 3
    ascii_s, latin1, ucs2, ucs4 = "hello", "café ÿ", "Ωmega ☃", "🐍 snake 𝄞"
    quotes, escapes, nonprint = "it's \"q\"", "tab\tnl\n\\ \x00\x7f", "\xa0\xad\u2028\U000e0001"
    long_ascii, long_ucs4 = "x" * 500, "🐍" * 300
    empty_s, empty_b = "", b""
    raw, long_b = b"\x00\xff'ab\"\\", bytes(range(256)) * 2
    yes, no, nothing, dots, notimpl = True, False, None, ..., NotImplemented
    tup, lst, dct, st, fst = (1, 2, 3), [1, [2]], {"a": 1, "b": 2}, {1, 2, 3, 4}, frozenset()
    obj, slotted, myint = Plain(), Slotted(), MyInt(5)
    func, cls, mod = park_simple, Plain, sys
    shared = "seen by inner"       # a cell: captured below

    def inner():
        return shared, captured_arg

    gone = 1
    del gone                       # unbound again
    ev.set()
    time.sleep(3600)
    later = 1                      # unbound while parked
    return later, inner


def park_closure(ev):
    outer_value = ["outer", 1]

    def inner_fn(ev2):
        local_in_inner = 3.5
        ev2.set()
        time.sleep(3600)
        return outer_value

    inner_fn(ev)


def park_gen(ev):
    def produce(n):
        state = "in generator"
        for step in range(n):
            if step == 1:
                ev.set()
                time.sleep(3600)
            yield step

    for item in produce(3):
        pass


def park_class_body(ev):
    class Parked:
        attr = 5
        label = "class body"
        ev.set()                   # ev is a free variable of the class body: not a local
        time.sleep(3600)
    return Parked


def start(name, target, *args, **kw):
    t = threading.Thread(target=target, name=name, args=(event(),) + args, kwargs=kw,
                         daemon=True)
    t.start()
    return t


def code_info(code):
    n = code.co_argcount + code.co_kwonlyargcount + \
        bool(code.co_flags & 0x4) + bool(code.co_flags & 0x8)
    return {"params": list(code.co_varnames[:n]), "cellvars": list(code.co_cellvars),
            "freevars": list(code.co_freevars), "optimized": bool(code.co_flags & 0x1)}


def frames_of(frame):
    out = []
    while frame is not None:
        code = frame.f_code
        info = {"func": code.co_name}
        info.update(code_info(code))
        loc = list(frame.f_locals.items())
        if info["optimized"]:
            info["locals"] = describe(loc)
        else:
            # Module level and class bodies: no fast locals; the namespace is f_locals.
            info["locals"] = []
            info["namespace"] = namespace(frame.f_locals)
        out.append(info)
        frame = frame.f_back
    return out


def dump():
    frames = sys._current_frames()
    threads = []
    for t in threading.enumerate():
        if t is threading.main_thread():
            threads.append({"name": t.name, "native_id": getattr(t, "native_id", None),
                            "frames": None})
            continue
        threads.append({"name": t.name, "native_id": getattr(t, "native_id", None),
                        "frames": frames_of(frames.get(t.ident))})
    truth = {"pid": os.getpid(), "version": list(sys.version_info[:3]), "max_repr": MAXR,
             "threads": threads, "module_namespace": namespace(globals())}
    tmp = os.path.join(OUT, "truth.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(truth, f, ensure_ascii=True)
    os.rename(tmp, os.path.join(OUT, "truth.json"))


def parked():
    start("simple", park_simple, 1, 2, 3, 4, captured_arg="cap", extra=1)
    start("closure", park_closure)
    start("gen", park_gen)
    start("class-body", park_class_body)
    for ev in ready:
        ev.wait(30)
    time.sleep(0.3)  # let every thread reach its sleep
    dump()


# ---- mutating threads -------------------------------------------------------------------------
def churn(depth, rng):
    local_list = [rng.random() for _ in range(rng.randrange(5))]
    if depth:
        return churn(depth - 1, rng) + len(local_list)
    return len(local_list)


def mutator(ev, seed):
    rng = random.Random(seed)
    x, s, b, f, big = 0, "", b"", 0.0, 1
    lst, dct, obj = [], {}, None
    ev.set()
    while True:
        x = rng.randrange(-2 ** 200, 2 ** 200)
        s = "".join(chr(rng.randrange(0x110000)) for _ in range(rng.randrange(0, 120)))
        b = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
        f = rng.random() * 10.0 ** rng.randrange(-300, 300)
        big = big * 7 if big.bit_length() < 80000 else 1
        lst.append(x)
        if len(lst) > 2000:
            lst = []
        dct[x] = s
        if len(dct) > 700:
            dct = {}
        obj = Plain() if obj is None else None
        tmp = (x, s)
        del tmp
        churn(rng.randrange(8), rng)
        captured = s

        def closure():
            return captured

        closure()


def mutate():
    for i in range(3):
        start(f"mutator-{i}", mutator, i)
    for ev in ready:
        ev.wait(30)
    with open(os.path.join(OUT, "ready"), "w") as f:
        f.write(str(os.getpid()))


# ---- module level -----------------------------------------------------------------------------
epoch = 3
loss = 0.25
run_name = "résumé"
history = [0.9, 0.5, 0.25]
# A C type made from a spec (a heap type from 3.10): its tp_name is "re.Pattern", its
# __name__ "Pattern".
pattern = __import__("re").compile("p+")

if MUTATE:
    mutate()
    step = 0
    while True:  # the <module> frame's namespace changes under the reader
        step += 1
        globals()[f"g{step % 97}"] = "v" * (step % 50)
        if step % 1000 == 0:
            for k in [k for k in globals() if k.startswith("g") and k[1:].isdigit()]:
                del globals()[k]
else:
    parked()
    while True:
        time.sleep(3600)  # @module_park
