"""probing debug: debugpy started inside a running process, for VS Code or any DAP client.

Request kinds (served by the agent, called by 'probing debug'):

  debug.start  {"host": H, "port": P, "python": PATH or null, "main_ident": N or null}
      find debugpy (the process's own, importable from its sys.path; else Debian's
      python3-debugpy when it is built for this interpreter's version), check that H:P can be
      bound, and start debugpy listening there. Answers {"host", "port", "debugpy", "path",
      "source", "adapter_python", "already", "connected", "notes"} or {"error", "hint"}.
  debug.status {}
      {"listening", "host", "port", "connected", ...}: is a DAP client attached?
  debug.stop {}
      pydevd.stoptrace(), then every thread's trace function removed: the program runs at
      its own speed again; a later debug.start starts debugpy afresh.

debugpy serves one address at a time: a second debug.start reports the listener running.
Nothing of debugpy is imported before every check passed; a failed import removes the
modules it imported; a failed start and debug.stop restore sys.breakpointhook (pydevd
replaces it at import).
"""
import os
import sys
import time

import probing_agent as agent

DEBIAN_DIST = "/usr/lib/python3/dist-packages"

_session = None  # what debug.start started: host, port, since, debugpy version, ...
_saved_hook = None  # sys.breakpointhook before debugpy was imported


class _Refused(Exception):
    """A clear refusal: what went wrong (str) and what to do (hint)."""

    def __init__(self, msg, hint=""):
        Exception.__init__(self, msg)
        self.hint = hint


def _version():
    return "%d.%d.%d" % sys.version_info[:3]


def _interpreter():
    """How to name this interpreter in advice: its executable when it is one."""
    exe = sys.executable or ""
    if exe and os.path.basename(exe).startswith("python"):
        return exe
    return "python%d.%d" % sys.version_info[:2]


def _debian_tags():
    """The CPython versions Debian's python3-debugpy is built for, as cache tags
    ('cpython-311'), from its compiled pydevd speedups; else from /usr/bin/python3."""
    import glob
    import re

    tags = set()
    for f in glob.glob(os.path.join(DEBIAN_DIST, "_pydevd_bundle", "pydevd_cython.cpython-*.so")):
        m = re.match(r"cpython-3\d+", os.path.basename(f).split(".")[1])
        if m:
            tags.add(m.group(0))
    if not tags:
        try:
            target = os.path.basename(os.path.realpath("/usr/bin/python3"))
            if target.startswith("python3."):
                tags.add("cpython-3" + target[len("python3."):])
        except OSError:
            pass
    return tags


def _find_debugpy():
    """(extra sys.path entry or None, where it comes from) for importing debugpy, or raise
    _Refused saying what is missing."""
    import importlib.util

    if sys.implementation.name != "cpython":
        raise _Refused("this process runs %s, not CPython" % sys.implementation.name)
    try:
        spec = importlib.util.find_spec("debugpy")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        return None, "the process's own (from its sys.path)"
    here = os.path.join(DEBIAN_DIST, "debugpy", "__init__.py")
    tag = sys.implementation.cache_tag
    if os.path.exists(here):
        tags = _debian_tags()
        if tag in tags:
            return DEBIAN_DIST, "Debian's python3-debugpy (%s)" % DEBIAN_DIST
        built = ", ".join(sorted("Python 3.%s" % t[9:] for t in tags)) or "?"
        raise _Refused(
            "debugpy is not importable in this process (Python %s, %s) and Debian's "
            "python3-debugpy in %s is built for %s only" % (_version(), _interpreter(),
                                                            DEBIAN_DIST, built),
            "install debugpy for this interpreter ('%s -m pip install debugpy', or into "
            "the program's virtual environment), then run probing debug again"
            % _interpreter())
    raise _Refused(
        "debugpy is not installed: it is not importable in this process (Python %s, %s) "
        "and Debian's python3-debugpy is not installed" % (_version(), _interpreter()),
        "install it: 'apt-get install python3-debugpy' (for Debian's own python3) or "
        "'%s -m pip install debugpy'" % _interpreter())


def _check_address(host, port):
    """Refuse an address debugpy could not listen on, before anything is imported. Port 0
    (any free port) always works."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise _Refused("cannot resolve the host '%s': %s" % (host, e.strerror or e),
                       "give an IP address, e.g. --listen 127.0.0.1:%d" % port)
    if port == 0:
        return
    fam, typ, proto, _, addr = infos[0]
    s = socket.socket(fam, typ, proto)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as debugpy's adapter does
        s.bind(addr)
    except OSError as e:
        raise _Refused("cannot listen on %s:%d in process %d: %s" % (
            host, port, os.getpid(), e.strerror or e),
            "choose another port (--listen %s:PORT, or port 0 for any free one)" % host)
    finally:
        s.close()


def _adapter_python(requested):
    """The Python executable debugpy runs its adapter with (a separate process)."""
    if requested:
        if not (os.path.isfile(requested) and os.access(requested, os.X_OK)):
            raise _Refused("--python %s: not an executable file (in the process's mount "
                           "namespace)" % requested)
        return requested
    exe = sys.executable or ""
    if exe and os.path.basename(exe).startswith("python") and os.access(exe, os.X_OK):
        return exe
    # An embedding program: sys.executable is that program, not a Python interpreter.
    name = "python%d.%d" % sys.version_info[:2]
    for d in (sys.base_exec_prefix, sys.exec_prefix, sys.base_prefix):
        cand = os.path.join(d or "/usr", "bin", name)
        if os.access(cand, os.X_OK):
            return cand
    raise _Refused(
        "this process embeds Python (sys.executable is %r, not a Python interpreter) and "
        "no %s was found in %s/bin to run debugpy's adapter with" % (
            exe, name, sys.base_exec_prefix),
        "give a Python %d.%d executable with --python PATH" % sys.version_info[:2])


# The first debugpy release that debugs each Python version: older ones load but never stop
# at a breakpoint (seen with Debian's 1.6.3 on 3.12 and 3.13). debugpy#1401 (1.8.0 supports
# 3.12), debugpy#1689 (1.8.7 supports 3.13).
_MIN_DEBUGPY = {(3, 12): (1, 8, 0), (3, 13): (1, 8, 7)}


def _check_version(debugpy, source):
    import re

    v = str(getattr(debugpy, "__version__", "0"))
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v)
    have = tuple(int(x or 0) for x in m.groups()) if m else (0, 0, 0)
    need = None
    for pyv, dv in sorted(_MIN_DEBUGPY.items()):
        if sys.version_info[:2] >= pyv:
            need = dv
    if need and have < need:
        raise _Refused(
            "debugpy %s (%s, %s) is too old for Python %s: it loads but never stops at a "
            "breakpoint; Python %d.%d needs debugpy %s or later" % (
                v, source, os.path.dirname(os.path.dirname(debugpy.__file__)), _version(),
                sys.version_info[0], sys.version_info[1], ".".join(map(str, need))),
            "upgrade it: '%s -m pip install -U debugpy'" % _interpreter())


def _foreign_debugger():
    """Is a debugger (pydevd, debugpy) already tracing this process without us?"""
    const = sys.modules.get("_pydevd_bundle.pydevd_constants")
    get = getattr(const, "get_global_debugger", None)
    try:
        return get is not None and get() is not None
    except Exception:  # noqa: BLE001
        return False


def _import_threading(main_ident):
    """Import threading and make sure its main thread is the program's own.

    Up to 3.12, threading names "main thread" whichever thread imports it first (bpo-37416):
    imported by the agent's thread (now, or by an earlier 'probing eval'), the program's own
    main thread becomes a "Dummy" thread and hangs in threading._shutdown() at exit, and
    debugpy shows the agent's thread as MainThread. 3.13 asks _thread for the main thread's
    ident. Like debugpy's own attach-to-PID, point threading's main thread object at the real
    main thread, whose ident probing read from outside (_PyRuntime.main_thread: @main_ident)
    — only when the object stands for the agent's thread, which is our doing."""
    if sys.version_info >= (3, 13):
        import threading

        # The ident is the main thread's, but its native id is that of the thread that
        # imported threading (_MainThread.__init__ asks the current thread).
        main = threading._main_thread
        if main_ident and main.ident == main_ident and getattr(main, "_native_id", 0) and \
                main._native_id != os.getpid() and threading.get_ident() != main_ident:
            main._native_id = os.getpid()
        return
    if "threading" not in sys.modules and not main_ident:
        raise _Refused("this program has not imported the threading module, which debugpy "
                       "needs, and probing could not read which thread is its main thread "
                       "(importing threading from another thread would make Python take that "
                       "thread for the main one, bpo-37416)")
    import _thread
    import threading

    me = _thread.get_ident()
    main = threading._main_thread
    if not main_ident or main.ident != me or main_ident == me:
        return
    lock = _thread.allocate_lock()
    lock.acquire()
    with threading._active_limbo_lock:
        if threading._active.get(me) is main:
            del threading._active[me]
        old = main._tstate_lock  # bound to the agent's thread state: released when it ends
        main._tstate_lock = lock
        main._ident = main_ident
        main._is_stopped = False
        if hasattr(main, "_native_id"):
            main._native_id = os.getpid()
        # Replaces the Dummy thread the real main thread may have been given meanwhile.
        threading._active[main_ident] = main
    locks = getattr(threading, "_shutdown_locks", None)
    if locks is not None:
        with threading._shutdown_locks_lock:
            locks.discard(old)
            locks.add(lock)


def _import_debugpy(extra, source):
    """Import debugpy and the parts listen() needs, with @extra on sys.path meanwhile (after
    the process's own entries). On failure the modules imported are removed again and
    sys.breakpointhook restored (pydevd replaces it at import)."""
    before = set(sys.modules)
    hook = sys.breakpointhook
    added = extra is not None and extra not in sys.path
    if added:
        sys.path.append(extra)
    try:
        import debugpy

        _check_version(debugpy, source)
        import debugpy.server.api  # noqa: F401 - imports pydevd while the path is there
        return debugpy
    except BaseException:
        for name in set(sys.modules) - before:
            sys.modules.pop(name, None)
        sys.breakpointhook = hook
        raise
    finally:
        if added:
            try:
                sys.path.remove(extra)
            except ValueError:
                pass


def _name_os_thread(name):
    """Name the calling thread in /proc (comm): the threads pydevd starts from it inherit
    the name, and must not pass for the agent's own probing-* threads."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - a name is a courtesy
        pass


def _in_thread(fn, name, timeout):
    """Run fn() on a short-lived thread of its own: pydevd calls threading.current_thread(),
    which must not name the agent's thread. Its result, or its exception in "error"."""
    import threading

    out = {}

    def run():
        _name_os_thread(b"debugpy")
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 - reported to the caller
            out["error"] = e

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()
    t.join(timeout)
    agent._drop_own_dummy()  # pydevd registered the agent's thread while it waited
    if t.is_alive():
        out["timeout"] = True
    return out


def _listen(debugpy, host, port, python):
    """debugpy.configure + listen; (host, port) it listens on."""

    def start():
        debugpy.configure(python=python, subProcess=False)
        return debugpy.listen((host, port))

    out = _in_thread(start, "probing-debugpy-start", 60)
    if out.get("timeout"):
        raise _Refused("debugpy did not start within 60 s (its adapter, a separate %s "
                       "process, did not answer)" % python)
    if "error" in out:
        e = out["error"]
        msg = str(e)
        if "Address already in use" in msg or "Errno 98" in msg:
            raise _Refused("cannot listen on %s:%d: the port is in use" % (host, port),
                           "choose another port (--listen %s:PORT, or 0 for any free one)"
                           % host)
        raise _Refused("debugpy failed to start: %s: %s" % (type(e).__name__, msg))
    return out["value"]


def _connected():
    api = sys.modules.get("debugpy.server.api")
    try:
        return bool(api is not None and api.is_client_connected())
    except Exception:  # noqa: BLE001
        return False


def _describe(already):
    d = dict(_session)
    d["already"] = already
    d["connected"] = _connected()
    return d


def _restore_hook():
    """sys.breakpointhook as it was before debugpy, unless the program changed it since."""
    global _saved_hook
    if _saved_hook is not None and getattr(sys.breakpointhook, "__module__", "") in (
            "pydevd", "debugpy._vendored.force_pydevd"):
        sys.breakpointhook = _saved_hook
    _saved_hook = None


def _check_listens_again(debugpy):
    """debugpy from 1.8 listens once per process: after 'probing debug --stop', its listen()
    refuses a second call (upstream: a second one hangs the debuggee). Say so up front."""
    api = sys.modules.get("debugpy.server.api")
    if api is not None and getattr(getattr(api, "listen", None), "called", False):
        raise _Refused(
            "debugpy %s was started in this process before and stopped: it listens only "
            "once per process (its listen() refuses a second call)" % getattr(
                debugpy, "__version__", "?"),
            "debug a new run of the program, or leave debugpy listening (do not --stop it) "
            "to attach again later")


def _k_start(args):
    global _session, _saved_hook
    host = str(args.get("host") or "127.0.0.1")
    port = int(args.get("port", 5678))
    cap = agent._Capture(agent.setting("output_limit"))
    try:
        if _session is not None:
            return _describe(True)
        if _foreign_debugger():
            raise _Refused("a debugger (debugpy/pydevd) already runs in this process, started "
                           "by the program itself, not by probing",
                           "attach to the address the program's debugpy.listen() chose")
        extra, source = _find_debugpy()
        python = _adapter_python(args.get("python"))
        _check_address(host, port)
        with cap:
            _import_threading(args.get("main_ident"))
            if _saved_hook is None:
                _saved_hook = sys.breakpointhook
            try:
                debugpy = _import_debugpy(extra, source)
            except _Refused:
                raise
            except Exception as e:  # noqa: BLE001
                raise _Refused("debugpy (%s) cannot be loaded in Python %s: %s: %s" % (
                    source, _version(), type(e).__name__, e),
                    "install a debugpy that supports Python %d.%d" % sys.version_info[:2])
            if _foreign_debugger():
                raise _Refused("a debugger already runs in this process")
            _check_listens_again(debugpy)
            h, p = _listen(debugpy, host, port, python)
        _session = {"host": h, "port": p, "since": time.time(),
                    "debugpy": getattr(debugpy, "__version__", "?"),
                    "path": os.path.dirname(os.path.dirname(debugpy.__file__)),
                    "source": source, "adapter_python": python,
                    "python": _version(), "executable": sys.executable}
        reply = _describe(False)
    except _Refused as e:
        if _session is None:
            _restore_hook()
        reply = {"error": str(e), "hint": e.hint}
    notes = (cap.out.text() + cap.err.text()).strip()
    reply["notes"] = notes
    return reply


def _clear_all_traces():
    """Remove the trace function of every thread (pydevd set one on each when it attached;
    its stoptrace() clears only the calling thread's, leaving every other thread slowed down
    by a trace function that no longer does anything). True if done for every thread."""
    import threading

    if hasattr(threading, "settrace_all_threads"):  # 3.12+
        threading.settrace_all_threads(None)
        return True
    threading.settrace(None)
    try:
        import ctypes

        api = ctypes.pythonapi
        api.PyInterpreterState_Main.restype = ctypes.c_void_p
        api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
        api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
        api.PyThreadState_Next.restype = ctypes.c_void_p
        api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
        # 3.9-3.11: what 3.12's settrace_all_threads() calls for each thread state (the
        # GIL is held: ctypes.pythonapi keeps it).
        settrace = api._PyEval_SetTrace
        settrace.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        settrace.restype = ctypes.c_int
    except (ImportError, AttributeError):
        return False
    ts = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Main())
    n = 0
    while ts and n < 100000:
        settrace(ts, None, None)
        ts = api.PyThreadState_Next(ts)
        n += 1
    return True


def _k_stop(args):
    """Stop what debug.start started: pydevd's threads and its connection (the adapter
    exits with it; an attached client is disconnected), and every thread's trace function."""
    global _session
    if _session is None:
        return {"stopped": False, "foreign": _foreign_debugger()}
    pydevd = sys.modules.get("pydevd")
    out = _in_thread(pydevd.stoptrace, "probing-debugpy-stop", 30) if pydevd else {}
    if "error" in out:
        e = out["error"]
        return {"error": "pydevd.stoptrace() failed: %s: %s" % (type(e).__name__, e)}
    if out.get("timeout"):
        return {"error": "pydevd did not stop within 30 s"}
    complete = _clear_all_traces()
    _restore_hook()
    old, _session = _session, None
    return {"stopped": True, "host": old["host"], "port": old["port"],
            "all_threads": complete}


def _k_status(args):
    if _session is None:
        return {"listening": False, "foreign": _foreign_debugger()}
    d = _describe(True)
    d["listening"] = True
    return d


agent.register_kind("debug.start", _k_start, "start debugpy listening for a DAP client")
agent.register_kind("debug.status", _k_status, "is debugpy listening, is a client attached")
agent.register_kind("debug.stop", _k_stop, "stop debugpy: no listener, no trace functions")
