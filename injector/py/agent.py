"""probing agent: the Python side of libprobing-agent.so, running inside the target.

The C side loads this file as the module ``probing_agent`` on the first request that needs
Python, then every other embedded helper (injector/py/NAME.py) as ``probing_NAME``, then calls
``_init``. Each request runs on the agent's own thread with the GIL held:
``handle(kind, body) -> bytes``.

Extending the agent (no C change needed): drop a file injector/py/NAME.py and, at import,

    import probing_agent as agent
    agent.register_kind("torch.install", fn)           # fn(args: dict) -> dict
    agent.register_kind("mytool.report", fn, interruptible=True)   # read-only: may be stopped
    agent.register_table("python", "torch_trace", [("step", "INTEGER", "doc"), ...], rows_fn)
    agent.register_setting("torch.sample_every", 1, "doc", parse=agent.parse_int)

Kinds become ``probing`` requests, tables appear in ``probing query -p PID`` (python.NAME),
settings in ``probing config -p PID``. Keep imports cheap and lazy: this code runs inside a
user's job, must never raise out of a handler, and must not create threading.Thread objects
or call threading.current_thread() (that registers a _DummyThread in the target).

A request whose client goes away (or cancels) is stopped by a KeyboardInterrupt raised in
the agent's thread, but only inside ``with interruptible():`` sections (the user code of
eval; the whole of kinds registered with interruptible=True): an exception at an arbitrary
bytecode of code that changes state (the helpers' import, a setting and its on_change, hooks
being installed) would leave that state half changed.

Written for CPython 3.8-3.15.
"""
import _thread
import codeop
import gc
import io
import json
import os
import sys
import time
import traceback

VERSION = "0.1.0"

_kinds = {}
_tables = {}
_settings = {}
_native = None
_info = {}


# ---- registries --------------------------------------------------------------------------
def register_kind(name, fn, doc="", interruptible=False):
    """Serve request kind NAME: fn(args: dict) -> dict, merged into the JSON reply.

    interruptible=True: fn may be stopped at any bytecode (KeyboardInterrupt) when its client
    goes away; only for code that leaves nothing half changed when stopped (read-only code).
    Otherwise fn runs to its end, and may open interruptible() sections itself.
    """
    _kinds[name] = (fn, doc, interruptible)


def register_table(schema, name, columns, rows, doc=""):
    """Serve the live table SCHEMA.NAME.

    columns: [(column, sqltype, doc)]; rows(): an iterable of sequences in column order
    (JSON-serializable values: None, bool, int, float, str). Computed only when a query
    reads the table, and stopped (KeyboardInterrupt) if the query's client goes away: rows()
    must only read. The one definition of the table's columns: in a helper of injector/py/,
    pass SCHEMA, NAME and COLUMNS as literals (COLUMNS may be a module-level name bound to
    one), which the build reads (scripts/gen-live-tables.py) so that the C side knows the
    table without the agent.
    """
    cols = [(c[0], c[1] if len(c) > 1 else "", c[2] if len(c) > 2 else "") for c in columns]
    _tables[(schema, name)] = (cols, rows, doc)


def parse_int(text, lo=None, hi=None):
    v = int(str(text).strip(), 0)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError("must be between %s and %s" % (lo, hi))
    return v


def parse_bool(text):
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def register_setting(name, default, doc, parse=str, on_change=None):
    """A run-time setting shown and changed by 'probing config -p PID name=value'.

    parse(text) -> value raises ValueError for bad input; on_change(value) is called after
    a change is accepted.
    """
    _settings[name] = {"value": default, "default": default, "doc": doc, "parse": parse,
                       "on_change": on_change}


def setting(name):
    return _settings[name]["value"]


def instances(cls):
    """Every object the collector tracks whose type is CLS or a subclass, as a list.

    Filtered in C (the agent's native side) with the GIL held throughout: a Python loop over
    gc.get_objects() lets other threads run while that list references every object, which
    torch reports on the program's stderr when C++ frees a tensor meanwhile ("Deallocating
    Tensor that still has live PyObject references"). No user code runs (type checks only).
    """
    if not isinstance(cls, type):
        raise TypeError("instances() needs a class")
    if _native is None:
        raise RuntimeError("the agent's native side is not available")
    return _native("instances", gc.get_objects, cls)


class interruptible(object):
    """``with interruptible():`` code that the request's client may interrupt: when it goes
    away or cancels, KeyboardInterrupt is raised in the code of the block (the watchdog, in
    the C side). Entering the block raises it at once when the request was cancelled before.
    Leaving it drops an interrupt that came too late to be raised inside."""

    def __enter__(self):
        _native("interruptible")
        return self

    def __exit__(self, *exc):
        _native("uninterruptible")
        return False


def _drop_interrupt():
    """Called by the C side only, on the agent's thread, right after it sent it a
    KeyboardInterrupt again (see drop_sent_interrupt in agent.c): run until that interrupt
    is raised, and swallow it. Raising it is what lowers the interpreter's flag for it."""
    try:
        for _ in range(1000000):  # it is raised at the first check of the eval breaker
            pass
    except KeyboardInterrupt:
        pass


# ---- output capture ------------------------------------------------------------------------
class _Sink(object):
    """What one capture's thread writes to sys.stdout (or sys.stderr): a buffer of at most
    @limit characters, cut beyond."""

    def __init__(self, limit):
        self.owner = _thread.get_ident()
        self._buf = io.StringIO()
        self._limit = limit
        self._cut = False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        room = self._limit - self._buf.tell()
        if room <= 0:
            self._cut = True
            return len(s)
        if len(s) > room:
            self._cut = True
        self._buf.write(s[:room])
        return len(s)

    def wrote(self):
        """Whether the capture's thread wrote anything."""
        return self._buf.tell() > 0 or self._cut

    def text(self):
        v = self._buf.getvalue()
        if self._cut:
            v += "\n[output truncated at %d characters: see 'probing config' output_limit]\n" % (
                self._limit)
        return v


class _ThreadStream(object):
    """Stands in for sys.stdout/sys.stderr while the agent runs user code: writes made by the
    agent's thread that runs it go to its _Sink, everyone else's (the target's own threads,
    which may run while user code releases the GIL, and another worker of the agent, while
    one is stuck in a call: agent.c) to the original stream, untouched. Without a sink (the
    capture is over) every write goes to the original stream."""

    def __init__(self):
        self._sink = None
        self._orig = None

    def _mine(self):
        """The sink of the calling thread's capture, or None: its writes go to the original."""
        sink = self._sink
        return sink if sink is not None and _thread.get_ident() == sink.owner else None

    def write(self, s):
        sink = self._mine()
        if sink is None:
            return self._orig.write(s)
        return sink.write(s)

    def writelines(self, lines):
        for s in lines:
            self.write(s)

    def flush(self):
        if self._mine() is None and self._orig is not None:
            return self._orig.flush()

    def isatty(self):
        if self._mine() is None and self._orig is not None:
            return self._orig.isatty()
        return False

    def __getattr__(self, name):
        if name in ("_sink", "_orig"):
            raise AttributeError(name)
        return getattr(self._orig, name)


class _Streams(object):
    """The objects a capture puts in sys: stdout, stderr and displayhook. They are never
    freed: CPython before 3.14 holds sys.stdout by a borrowed reference for the whole of a
    print() (one write per argument, the end, the flush) and sys.displayhook for its call,
    so a thread of the target in the middle of a print when a capture ends would write to a
    freed object. Once a capture is over they forward everything to the original streams
    and hook and wait in _idle_streams for the next capture (as many as ever ran at once)."""

    def __init__(self):
        self.out = _ThreadStream()
        self.err = _ThreadStream()
        self.hook = self._display  # one bound method, kept: what sys.displayhook holds
        self._saved_hook = None

    def install(self, out, err):
        """Put them in sys, the calling thread's output going to the sinks @out and @err."""
        self.out._orig, self.err._orig = sys.stdout, sys.stderr
        self._saved_hook = sys.displayhook
        self.out._sink, self.err._sink = out, err
        sys.stdout, sys.stderr = self.out, self.err
        sys.displayhook = self.hook

    def uninstall(self):
        """Put back what they replaced, where they are still in place (user code may have
        replaced them itself); from now on they forward everything."""
        if sys.stdout is self.out:
            sys.stdout = self.out._orig
        if sys.stderr is self.err:
            sys.stderr = self.err._orig
        if sys.displayhook is self.hook:
            sys.displayhook = self._saved_hook
        self.out._sink = self.err._sink = None

    def _display(self, value):
        sink = self.out._mine()
        if sink is None:
            return self._saved_hook(value)
        if value is not None:
            sink.write(_repr(value) + "\n")


_idle_streams = []


class _Capture(object):
    """``with _Capture(limit) as cap:`` what the calling thread writes to sys.stdout and
    sys.stderr (and the values the REPL's displayhook shows) goes to cap.out and cap.err
    (_Sink), at most @limit characters each; the other threads' output is untouched."""

    def __init__(self, limit):
        self.out = _Sink(limit)
        self.err = _Sink(limit)
        self._streams = None

    def __enter__(self):
        self._streams = _idle_streams.pop() if _idle_streams else _Streams()
        self._streams.install(self.out, self.err)
        return self

    def __exit__(self, *exc):
        st, self._streams = self._streams, None
        st.uninstall()
        _idle_streams.append(st)
        return False


def _repr(value):
    try:
        r = repr(value)
    except BaseException as e:  # noqa: B902 - a broken __repr__ must not break the agent
        r = "<repr() failed: %s: %s>" % (type(e).__name__, e)
    limit = setting("repr_limit")
    if len(r) > limit:
        r = r[:limit] + "...[%d more characters]" % (len(r) - limit)
    return r


def _user_traceback(e):
    """The traceback of E without the agent's own frames (they mean nothing to the user)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__", "").startswith("probing_"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


# ---- request kinds -----------------------------------------------------------------------
def _main_globals():
    main = sys.modules.get("__main__")
    return main.__dict__ if main is not None else {}


def _split_last_expression(code):
    """CODE compiled as (statements, last expression): "import gc; len(gc.get_objects())"
    gives the import and the len(), whose value eval prints, as Python's prompt and notebooks
    do. Either may be None (no statements before; no expression last). A SyntaxError is
    raised as compile() raises it."""
    try:
        return None, compile(code, "<probing>", "eval")
    except SyntaxError:
        pass
    import ast  # only for code with statements: the agent's start stays light
    tree = ast.parse(code, "<probing>", "exec")
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return compile(tree, "<probing>", "exec"), None
    last = ast.Expression(tree.body.pop().value)
    return (compile(tree, "<probing>", "exec") if tree.body else None,
            compile(last, "<probing>", "eval"))


def _k_eval(args):
    """Run CODE in __main__: an expression's repr, or what statements print.

    mode "eval" (probing eval): statements run with their output captured; an expression last
    gives its repr (None included, unless the code printed something: print(...) is no
    answer). mode "repl": code.interact-like: incomplete input gives
    more=True, expression statements print their value (not None).
    """
    code = args.get("code", "")
    mode = args.get("mode", "eval")
    g = _main_globals()
    value = None
    exc = None
    more = False
    cap = _Capture(setting("output_limit"))
    # Only the user's code may be interrupted: never the capture's setup or tear-down.
    with cap:
        try:
            with interruptible():
                if mode == "repl":
                    c = codeop.compile_command(code, "<probing>", "single")
                    if c is None:
                        more = True
                    else:
                        exec(c, g)
                else:
                    body, last = _split_last_expression(code)
                    if body is not None:
                        exec(body, g)
                    if last is not None:
                        v = eval(last, g)
                        # print(...) is an expression too: its None is no answer.
                        if v is not None or not (cap.out.wrote() or cap.err.wrote()):
                            value = _repr(v)
        except BaseException as e:  # noqa: B902 - SystemExit must not end the target
            exc = _user_traceback(e)
    return {"value": value, "stdout": cap.out.text(), "stderr": cap.err.text(),
            "exception": exc, "more": more}


def _k_status(args):
    return {
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "argv": list(sys.argv) if hasattr(sys, "argv") else [],
        "since": _info.get("since"),
        "socket": _info.get("socket"),
        "agent": VERSION,
        "kinds": sorted(_kinds),
        "tables": ["%s.%s" % k for k in sorted(_tables)],
        "threads": len(sys._current_frames()) - 1,
    }


def _k_tables(args):
    out = []
    for (schema, name), (cols, _, doc) in sorted(_tables.items()):
        out.append({"schema": schema, "name": name, "doc": doc,
                    "columns": [[c, t, d] for c, t, d in cols]})
    return {"tables": out}


def _k_rows(args):
    key = tuple(args.get("table", "").split(".", 1))
    if key not in _tables:
        raise KeyError("no live table %s" % ".".join(key))
    cols, rows, _ = _tables[key]
    return {"columns": [c[0] for c in cols], "rows": [list(r) for r in rows()]}


def _k_config(args):
    changes = args.get("set") or {}
    errors = []
    for name, text in changes.items():
        s = _settings.get(name)
        if s is None:
            errors.append("unknown setting '%s' (known: %s)" % (name, ", ".join(sorted(_settings))))
            continue
        try:
            value = s["parse"](text)
        except (ValueError, TypeError) as e:
            errors.append("%s: bad value %r: %s" % (name, text, e))
            continue
        s["value"] = value
        if s["on_change"] is not None:
            s["on_change"](value)
    return {"settings": [{"name": n, "value": s["value"], "default": s["default"],
                          "doc": s["doc"]} for n, s in sorted(_settings.items())],
            "errors": errors}


def _type_attr(t, name):
    """t.NAME read without running a metaclass's __getattribute__."""
    try:
        v = type.__getattribute__(t, name)
        return v if isinstance(v, str) else None
    except Exception:  # noqa: BLE001
        return None


def _objects_by_type():
    """[(type name, module, count, total sys.getsizeof)] for the objects the collector tracks
    and the objects they refer to directly (strings, numbers...). The GIL is held while
    counting; memory_max_objects bounds the work."""
    limit = setting("memory_max_objects")
    seen = set()
    stats = {}
    budget = [limit]

    def count(o):
        i = id(o)
        if i in seen:
            return
        seen.add(i)
        t = type(o)
        try:
            size = sys.getsizeof(o)
        except Exception:  # noqa: BLE001 - objects with a broken __sizeof__
            size = 0
        s = stats.get(t)
        if s is None:
            stats[t] = [1, size]
        else:
            s[0] += 1
            s[1] += size
        budget[0] -= 1

    # Only exact types and the type slots are looked at: isinstance() or getattr() on
    # arbitrary objects would run their __getattribute__/__class__ code (some warn, some
    # import things).
    containers = (dict, list, tuple, set, frozenset)
    tracked = gc.get_objects()
    seen.add(id(tracked))
    truncated = False
    for o in tracked:
        if budget[0] <= 0:
            truncated = True
            break
        count(o)
        if type(o) in containers:
            for r in gc.get_referents(o):
                if not gc.is_tracked(r):
                    count(r)
    del tracked
    rows = [(_type_attr(t, "__name__"), _type_attr(t, "__module__"), c, s)
            for t, (c, s) in stats.items()]
    rows.sort(key=lambda r: -r[3])
    return rows, truncated


def _cuda_memory():
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "torch is not imported in this process"
    cuda = getattr(torch, "cuda", None)
    # Never initialize CUDA ourselves: that would allocate a context on the GPU.
    if cuda is None or not cuda.is_initialized():
        return None, "CUDA is not initialized in this process"
    out = []
    for d in range(cuda.device_count()):
        out.append({"device": d, "name": cuda.get_device_name(d),
                    "allocated": cuda.memory_allocated(d),
                    "reserved": cuda.memory_reserved(d),
                    "max_allocated": cuda.max_memory_allocated(d),
                    "max_reserved": cuda.max_memory_reserved(d)})
    return out, None


def _k_memory(args):
    top = int(args.get("top") or setting("memory_top"))
    rows, truncated = _objects_by_type()
    cuda, why = _cuda_memory()
    return {"objects": [list(r) for r in rows[:top]], "types": len(rows),
            "total_objects": sum(r[2] for r in rows), "total_size": sum(r[3] for r in rows),
            "truncated": truncated, "gc_counts": list(gc.get_count()), "cuda": cuda,
            "cuda_note": why}


# ---- live tables -------------------------------------------------------------------------
def _thread_names():
    """{ident: (name, native_id, daemon)} from threading, without creating dummies."""
    out = {}
    threading = sys.modules.get("threading")
    if threading is None:
        return out
    for ident, t in list(getattr(threading, "_active", {}).items()):
        out[ident] = (t.name, getattr(t, "native_id", None), t.daemon)
    return out


def _all_frames():
    """(thread name, tid, depth, frame) of every thread's stack but the agent's, innermost
    frame first, backtrace_max_depth frames per thread at most."""
    names = _thread_names()
    me = _thread.get_ident()
    maxdepth = setting("backtrace_max_depth")
    for ident, f in sorted(sys._current_frames().items()):
        if ident == me:
            continue
        name, tid, _ = names.get(ident, ("thread-%d" % ident, None, None))
        depth = 0
        while f is not None and depth < maxdepth:
            yield name, tid, depth, f
            f = f.f_back
            depth += 1


def _backtrace_rows():
    for name, tid, depth, f in _all_frames():
        co = f.f_code
        yield (name, tid, depth, co.co_name, co.co_filename, f.f_lineno, "python",
               getattr(co, "co_qualname", None))


def _short_repr(value, limit):
    """repr(value) cut to @limit characters; a failing __repr__ gives a note, not an error."""
    try:
        text = repr(value)
    except Exception as e:  # user code: anything can happen
        return "<repr failed: %s: %s>" % (type(e).__name__, e)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text


def _frame_vars(f):
    """(name, value) of a frame's local variables, as 'probing backtrace --locals' shows them:
    parameters and locals of a function; for module-level and class-body frames the
    namespace's data (no dunders, imports or definitions), 1000 entries at most."""
    co = f.f_code
    if co.co_flags & 0x1:  # CO_OPTIMIZED: a function frame
        return list(f.f_locals.items())
    out = []
    skip = (type(sys), type(_frame_vars), type(len), type)
    for name, value in f.f_locals.items():
        if name.startswith("__") or isinstance(value, skip):
            continue
        out.append((name, value))
        if len(out) >= 1000:
            break
    return out


def _locals_rows():
    limit = setting("locals_max_repr")
    for name, tid, depth, f in _all_frames():
        func = f.f_code.co_name
        for var, value in _frame_vars(f):
            yield (name, tid, depth, func, var, type(value).__name__, _short_repr(value, limit))


def _threads_rows():
    names = _thread_names()
    me = _thread.get_ident()
    main = getattr(sys.modules.get("threading"), "main_thread", None)
    main_ident = main().ident if main else None
    for ident, f in sorted(sys._current_frames().items()):
        if ident == me:
            continue
        name, tid, daemon = names.get(ident, ("thread-%d" % ident, None, None))
        yield (ident, tid, name, daemon, ident == main_ident,
               f.f_code.co_name if f is not None else None,
               f.f_code.co_filename if f is not None else None,
               f.f_lineno if f is not None else None)


def _modules_rows():
    for name, mod in sorted(list(sys.modules.items()), key=lambda kv: str(kv[0])):
        if mod is None:
            continue
        # Read the module's namespace directly: getattr() could run a lazy module's
        # __getattr__ (PEP 562), which may import things or warn inside the user's job.
        try:
            d = object.__getattribute__(mod, "__dict__")
        except Exception:  # noqa: BLE001
            d = {}
        f = d.get("__file__") if type(d) is dict else None
        v = d.get("__version__") if type(d) is dict else None
        yield (str(name), f if type(f) is str else None, v if type(v) is str else None)


def _objects_rows():
    rows, _ = _objects_by_type()
    return rows


def _settings_rows():
    for n, s in sorted(_settings.items()):
        yield (n, json.dumps(s["value"]), json.dumps(s["default"]), s["doc"])


# ---- dispatcher --------------------------------------------------------------------------
def _drop_own_dummy():
    """A debugger that traces every thread (pydevd on sys.monitoring, Python 3.12+) registers
    the agent's thread in threading as a Dummy when a request runs Python code on it: take
    it out again, so the program never finds the agent's threads among its own."""
    th = sys.modules.get("threading")
    if th is None or "pydevd" not in sys.modules:
        return
    import _thread

    me = _thread.get_ident()
    with th._active_limbo_lock:
        if isinstance(th._active.get(me), th._DummyThread):
            del th._active[me]


def handle(kind, body):
    """Called by the C side for every Python request. Never raises: returns the frame type
    (b"R" result, b"X" failure) followed by a JSON object."""
    try:
        name = kind.decode("utf-8", "replace")
        entry = _kinds.get(name)
        if entry is None:
            raise KeyError("unknown request kind '%s' (known: %s)" % (name, ", ".join(sorted(_kinds))))
        args = json.loads(body.decode("utf-8")) if body else {}
        if not isinstance(args, dict):
            raise TypeError("the request body must be a JSON object")
        fn, _, can_stop = entry
        if can_stop:
            with interruptible():
                reply = fn(args)
        else:
            reply = fn(args)
        _drop_own_dummy()
        return b"R" + json.dumps(reply, default=_repr).encode("utf-8", "replace")
    except BaseException as e:  # noqa: B902 - nothing may escape into the C side
        try:
            msg = {"error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()}
            return b"X" + json.dumps(msg, default=repr).encode("utf-8", "replace")
        except BaseException:  # noqa: B902
            return b"X{\"error\": \"internal error in the probing agent\"}"


def _at_exit():
    # Interpreter finalization begins: the C side must never call into Python again.
    if _native is not None:
        _native("stop")


def _init(native, info):
    global _native, _info
    _native = native
    _info = json.loads(info.decode("utf-8"))
    import atexit
    atexit.register(_at_exit)


register_setting("output_limit", 1 << 20,
                 "largest stdout/stderr text returned by eval/repl (characters)",
                 parse=lambda t: parse_int(t, 1024, 1 << 30))
register_setting("repr_limit", 1 << 16, "longest repr() of an eval/repl value (characters)",
                 parse=lambda t: parse_int(t, 80, 1 << 30))
register_setting("memory_top", 25, "object types listed by 'probing memory'",
                 parse=lambda t: parse_int(t, 1, 100000))
register_setting("memory_max_objects", 5000000,
                 "stop counting objects for 'probing memory' after this many (the GIL is held "
                 "while counting)", parse=lambda t: parse_int(t, 1000, 1 << 40))
register_setting("locals_max_repr", 4096,
                 "longest repr() of a local variable in python.locals (characters)",
                 parse=lambda t: parse_int(t, 16, 1 << 24))
register_setting("backtrace_max_depth", 1024, "deepest Python stack returned per thread",
                 parse=lambda t: parse_int(t, 1, 1 << 20))

register_kind("eval", _k_eval, "run Python code in __main__")  # interruptible inside
register_kind("status", _k_status, "the process and the agent", interruptible=True)
register_kind("tables", _k_tables, "the live tables this agent serves", interruptible=True)
register_kind("rows", _k_rows, "the rows of one live table", interruptible=True)
register_kind("config", _k_config, "show or change settings")
register_kind("memory", _k_memory, "Python objects by type, CUDA memory", interruptible=True)

register_table("python", "backtrace", [
    ("thread", "TEXT", "thread name (threading), or thread-IDENT"),
    ("tid", "INTEGER", "native thread id (Thread.native_id), NULL if unknown"),
    ("depth", "INTEGER", "0 = innermost frame"),
    ("func", "TEXT", "function name (co_name)"),
    ("file", "TEXT", "source file (co_filename)"),
    ("lineno", "INTEGER", "current line"),
    ("kind", "TEXT", "'python'"),
    ("qualname", "TEXT", "qualified name (co_qualname, 3.11+: Thread.run), as backtrace shows; "
     "NULL before 3.11"),
], _backtrace_rows, "Python stack of every thread but the agent's (sys._current_frames)")
register_table("python", "locals", [
    ("thread", "TEXT", "thread name (threading), or thread-IDENT"),
    ("tid", "INTEGER", "native thread id (Thread.native_id), NULL if unknown"),
    ("depth", "INTEGER", "the frame, as in python.backtrace: 0 = innermost"),
    ("func", "TEXT", "function name (co_name)"),
    ("name", "TEXT", "variable name"),
    ("type", "TEXT", "type(value).__name__"),
    ("repr", "TEXT", "repr(value), cut to the locals_max_repr setting"),
], _locals_rows, "local variables of every frame of python.backtrace, with full reprs")
register_table("python", "threads", [
    ("ident", "INTEGER", "threading ident (pthread_t)"),
    ("tid", "INTEGER", "native thread id, NULL if unknown"),
    ("name", "TEXT", "thread name"),
    ("daemon", "INTEGER", "1 for daemon threads, NULL if not a threading.Thread"),
    ("is_main", "INTEGER", "1 for the main thread"),
    ("func", "TEXT", "innermost function"),
    ("file", "TEXT", "its file"),
    ("lineno", "INTEGER", "its line"),
], _threads_rows, "threads running Python code")
register_table("python", "modules", [
    ("name", "TEXT", "key in sys.modules"),
    ("file", "TEXT", "__file__, NULL for built-in modules"),
    ("version", "TEXT", "__version__ if the module has one"),
], _modules_rows, "imported modules")
register_table("python", "objects", [
    ("type", "TEXT", "type name"),
    ("module", "TEXT", "the type's module"),
    ("count", "INTEGER", "live objects of that type"),
    ("size", "INTEGER", "their total sys.getsizeof, bytes"),
], _objects_rows, "live objects by type (gc-tracked objects and what they refer to)")
register_table("python", "settings", [
    ("name", "TEXT", "setting"),
    ("value", "TEXT", "current value (JSON)"),
    ("default", "TEXT", "default value (JSON)"),
    ("doc", "TEXT", "what it does"),
], _settings_rows, "the agent's settings (probing config)")
