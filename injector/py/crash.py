"""probing agent: crash capture (probing inject --crash, probing run --crash).

The fatal-signal side is in C (injector/agent_crash.c). This helper installs it (the
"crash.install" request) and the exception side: sys.excepthook and threading.excepthook.
On an uncaught exception (KeyboardInterrupt and SystemExit aside) the hook writes the
traceback, innermost frame first, with each frame's local variables (full reprs, computed
here), to a JSON file and runs ``probing crashdump``, which reads every thread's stacks from
outside and writes the crash file; then it calls the hook it replaced, so that what is
printed and the exit status stay as they were.

Exceptions of several threads at about the same time (a burst: each raised while another's
capture was running or waiting) are captured together: one capture runs at a time, and the
next one writes the file with every exception of the burst (one crash row each), so that
none is lost; the summary of each is printed once.
"""
import _thread
import json
import os
import sys

import probing_agent as agent

_state = {
    "bin": None,    # absolute path of probing
    "file": None,   # the crash file as given ("%p": the pid)
    "sys": None,    # the sys.excepthook we replaced
    "thr": None,    # the threading.excepthook we replaced
}
_busy = _thread.allocate_lock()   # one capture at a time
_lock = _thread.allocate_lock()   # guards _burst
_burst = {
    "docs": [],     # the exceptions of the burst in progress (crash.py's JSON documents)
    "active": 0,    # hooks between their exception and the end of their capture
    "owner": None,  # the thread ident running a capture
}

MAX_FRAMES = 256
MAX_LOCALS = 200
TIMEOUT_S = 60
# How long a hook waits for the captures before it: a few of them, each at most TIMEOUT_S.
WAIT_S = 3 * TIMEOUT_S


def _frames(tb):
    """The traceback's frames, innermost first: (frame, line)."""
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    out.reverse()
    return out[:MAX_FRAMES]


def _describe(exc_type, exc, tb, thread_name, tid):
    limit = agent.setting("locals_max_repr")
    frames = []
    for f, line in _frames(tb):
        co = f.f_code
        local = []
        try:
            for name, value in agent._frame_vars(f)[:MAX_LOCALS]:
                local.append({"name": str(name), "type": type(value).__name__,
                              "repr": agent._short_repr(value, limit)})
        except Exception as e:  # noqa: BLE001 - a frame's namespace is user data
            local.append({"name": "?", "type": None, "repr": "<locals unreadable: %s>" % e})
        frames.append({"func": co.co_name, "qualname": getattr(co, "co_qualname", None),
                       "file": co.co_filename, "line": line, "locals": local})
    try:
        message = str(exc)
    except Exception as e:  # noqa: BLE001
        message = "<str() failed: %s>" % type(e).__name__
    name = getattr(exc_type, "__qualname__", None) or getattr(exc_type, "__name__", "?")
    mod = getattr(exc_type, "__module__", None)
    if mod and mod != "builtins":
        name = "%s.%s" % (mod, name)
    return {"type": name, "message": message, "thread": thread_name, "tid": tid,
            "frames": frames}


def _run_capture(docs):
    """Run probing crashdump with every exception of @docs; never raises."""
    import subprocess
    import tempfile
    paths = []
    try:
        for doc in docs:
            fd, path = tempfile.mkstemp(prefix="probing-exc-", suffix=".json")
            paths.append(path)
            with os.fdopen(fd, "w") as out:
                json.dump(doc, out)
        pid = os.getpid()
        tid = _thread.get_native_id() if hasattr(_thread, "get_native_id") else pid
        target = _state["file"].replace("%p", str(pid))
        cmd = [_state["bin"], "crashdump", "-p", str(pid), "--tid", str(tid)]
        for path in paths:
            cmd += ["--exception", path]
        sys.stderr.flush()
        subprocess.run(cmd + ["-o", target], stdin=subprocess.DEVNULL, stdout=2,
                       timeout=TIMEOUT_S, check=False)
    except BaseException as e:  # noqa: B902 - the program's own hook must still run
        try:
            sys.stderr.write("probing: crash capture failed: %s: %s\n" % (type(e).__name__, e))
        except BaseException:  # noqa: B902
            pass
    finally:
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass


def _capture(exc_type, exc, tb, thread_name):
    """Write the crash file for this exception (and the others of its burst); never raises."""
    if _state["bin"] is None or issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
        return
    me = _thread.get_ident()
    if _burst["owner"] == me:
        return  # raised inside our own capture
    try:
        tid = _thread.get_native_id() if hasattr(_thread, "get_native_id") else os.getpid()
        doc = _describe(exc_type, exc, tb, thread_name, tid)
        doc["reported"] = False
    except BaseException as e:  # noqa: B902
        try:
            sys.stderr.write("probing: crash capture failed: %s: %s\n" % (type(e).__name__, e))
        except BaseException:  # noqa: B902
            pass
        return
    with _lock:
        _burst["active"] += 1
        _burst["docs"].append(doc)
    try:
        if not _busy.acquire(True, WAIT_S):
            sys.stderr.write("probing: the uncaught exception %s in thread %d was not "
                             "captured: the captures before it took more than %d s\n"
                             % (doc["type"], tid, WAIT_S))
            return
        try:
            _burst["owner"] = me
            with _lock:
                docs = list(_burst["docs"]) if not doc.get("captured") else None
            if docs:
                _run_capture([{k: v for k, v in d.items() if k != "captured"}
                              for d in docs])
                with _lock:
                    for d in docs:
                        d["captured"] = d["reported"] = True
        finally:
            _burst["owner"] = None
            _busy.release()
    finally:
        with _lock:
            _burst["active"] -= 1
            if not _burst["active"]:
                del _burst["docs"][:]


def _sys_hook(exc_type, exc, tb):
    _capture(exc_type, exc, tb, "MainThread")
    prev = _state["sys"] or sys.__excepthook__
    prev(exc_type, exc, tb)


def _thread_hook(args):
    name = getattr(args.thread, "name", None) if args.thread is not None else None
    if args.exc_type is not SystemExit:
        _capture(args.exc_type, args.exc_value, args.exc_traceback, name or "thread")
    prev = _state["thr"]
    if prev is not None:
        prev(args)


def _hook_threading(threading):
    if hasattr(threading, "excepthook") and threading.excepthook is not _thread_hook:
        _state["thr"] = threading.excepthook
        threading.excepthook = _thread_hook


class _ThreadingLoader:
    """Wraps the loader of 'threading' when the program imports it after we installed: our
    hook goes in as soon as the module has run. (Importing threading ourselves, on the
    agent's thread, would make that thread its main thread.)"""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _hook_threading(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _ThreadingFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "threading":
            return None
        try:
            sys.meta_path.remove(_ThreadingFinder)
        except ValueError:
            pass
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThreadingLoader(spec.loader)
                return spec
        return None


def _install_hooks():
    """Put our hooks in front of the ones in place (once); return their names."""
    if sys.excepthook is not _sys_hook:
        _state["sys"] = sys.excepthook
        sys.excepthook = _sys_hook
    threading = sys.modules.get("threading")
    if threading is not None:
        _hook_threading(threading)
    elif _ThreadingFinder not in sys.meta_path:
        sys.meta_path.insert(0, _ThreadingFinder)
    return ["sys.excepthook", "threading.excepthook"]


def _k_install(args):
    file, binary = args.get("file"), args.get("bin")
    if not isinstance(file, str) or not isinstance(binary, str) or not file or not binary:
        raise ValueError("crash.install needs 'file' and 'bin'")
    rc, text, now = agent._native("crash", binary, file)
    if rc < 0:
        raise RuntimeError(text)
    _state["bin"] = binary
    _state["file"] = os.path.abspath(file)  # as the C side resolved it: this process's cwd
    hooks = _install_hooks()
    return {"installed": True, "already": rc == 1, "was": text if rc == 1 else None,
            "file": now, "hooks": hooks,
            "signals": ["SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL"]}


agent.register_kind("crash.install", _k_install,
                    "capture every thread's stacks into a file on a crash")
