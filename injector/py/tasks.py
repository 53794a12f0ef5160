"""python.tasks from inside the process: every pending asyncio task of every event loop.

The same rows probing reads from outside (user/python/pytasks.c) when the agent is not
loaded; the agent's view also covers tasks that cannot be read from outside (the pure-Python
asyncio.tasks._PyTask, used when the _asyncio accelerator is missing; and on 3.14+ every
task, which the rewritten _asyncio keeps in per-thread linked lists).

Nothing of the event loops runs here: the task registries are copied with single C calls
(list() of a set, dict.copy(): atomic under the GIL, so no "Set changed size during
iteration"), and only C getters and plain attributes are read (no Task methods a subclass
could override, no __getattr__ of a loop class).
"""
import sys
import types

import probing_agent as agent

MAX_DEPTH = 64  # coroutines per task, as the outside reader


def _attrs(obj):
    try:
        d = object.__getattribute__(obj, "__dict__")
        return d if type(d) is dict else {}
    except Exception:  # noqa: BLE001 - no __dict__
        return {}


_C_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _plain_attr(obj, name):
    """obj.NAME when it is an instance attribute or a C-level getter, else None: no property
    or __getattr__ of the object's class (user code) runs."""
    for cls in type(obj).__mro__:
        desc = cls.__dict__.get(name)
        if desc is not None and hasattr(desc, "__get__") and \
                not isinstance(desc, _C_DESCRIPTORS):
            return None
    try:
        return object.__getattribute__(obj, name)
    except AttributeError:
        return None


def _running_loops():
    """3.14+: the event loops running in some thread, found as the `self` of each
    BaseEventLoop.run_forever frame (frame.f_locals is a C proxy from 3.13 on: nothing of
    the loop runs). A loop whose run_forever is not Python (uvloop) is not found."""
    loops = []
    for f in sys._current_frames().values():
        depth = 0
        while f is not None and depth < 1024:
            code = f.f_code
            if code.co_name == "run_forever" and \
                    code.co_filename.endswith("asyncio/base_events.py"):
                loop = f.f_locals.get("self")
                if loop is not None and all(loop is not x for x in loops):
                    loops.append(loop)
            f = f.f_back
            depth += 1
    return loops


def _registered(tmod, loops):
    """Every task the asyncio.tasks registries hold (3.8-3.11: _all_tasks; 3.12+:
    _scheduled_tasks and _eager_tasks; 3.14+: the C tasks in the _asyncio module's
    per-thread lists, asked for each running loop with _asyncio.all_tasks, a C function),
    without iterating a WeakSet in Python."""
    d = _attrs(tmod)
    out = []
    if sys.version_info >= (3, 14):
        casyncio = sys.modules.get("_asyncio")
        for loop in loops if casyncio is not None else ():
            try:
                out.extend(list(casyncio.all_tasks(loop)))
            except Exception:  # noqa: BLE001 - a loop closing under us
                pass
    for reg in ("_all_tasks", "_scheduled_tasks"):
        ws = d.get(reg)
        data = _plain_attr(ws, "data") if ws is not None else None
        if type(data) is set:
            out.extend(ref() for ref in list(data))
    eager = d.get("_eager_tasks")
    if type(eager) is set:
        out.extend(list(eager))
    seen = set()
    for t in out:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            yield t


def _base(tmod, task):
    """The asyncio Task class whose methods and getters serve @task (C or pure Python)."""
    d = _attrs(tmod)
    for name in ("_CTask", "_PyTask"):
        cls = d.get(name)
        if isinstance(cls, type) and isinstance(task, cls):
            return cls
    return None


def _field(base, obj, name):
    """obj.NAME as class @base defines it (a C getter, or an instance attribute), without a
    subclass's __getattribute__."""
    for cls in base.__mro__:
        desc = cls.__dict__.get(name)
        if desc is not None and hasattr(desc, "__get__"):
            return desc.__get__(obj, base)
    return _attrs(obj).get(name)


def _chain(coro, frames):
    """[(func, file, line)], innermost first: the coroutine, what it awaits, ... For the task
    running now (@frames: its thread's current frame), the thread's frames from the top down
    to the coroutine's."""
    top = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
    if frames is not None and top is not None:
        out = []
        f = frames
        while f is not None and len(out) < 1024:
            out.append(f)
            if f is top:
                return [(x.f_code.co_name, x.f_code.co_filename, x.f_lineno)
                        for x in out[:MAX_DEPTH]]
            f = f.f_back
    out = []
    while isinstance(coro, (types.CoroutineType, types.GeneratorType)) and len(out) < MAX_DEPTH:
        if isinstance(coro, types.CoroutineType):
            f, nxt = coro.cr_frame, coro.cr_await
        else:
            f, nxt = coro.gi_frame, coro.gi_yieldfrom
        if f is None:
            break
        out.append((f.f_code.co_name, f.f_code.co_filename, f.f_lineno))
        coro = nxt
    return out[::-1]


def _tasks_rows():
    tmod = sys.modules.get("asyncio.tasks")
    if tmod is None:
        return
    current = _attrs(tmod).get("_current_tasks")
    current = current.copy() if type(current) is dict else {}
    loops = _running_loops() if sys.version_info >= (3, 14) else []
    casyncio = sys.modules.get("_asyncio")
    for loop in loops if casyncio is not None else ():
        # 3.14+: the C tasks running now are in the thread states, not in _current_tasks.
        try:
            task = casyncio.current_task(loop)
        except Exception:  # noqa: BLE001
            task = None
        if task is not None:
            current.setdefault(loop, task)
    frames = sys._current_frames()
    names = agent._thread_names()
    rows = []
    for t in _registered(tmod, loops):
        base = _base(tmod, t)
        if base is None:
            continue
        if base.done(t):
            continue
        loop = base.get_loop(t)
        ident = _plain_attr(loop, "_thread_id")
        thread, tid = None, None
        if type(ident) is int:
            thread, tid, _ = names.get(ident, (None, None, None))
        waiter = _field(base, t, "_fut_waiter")
        running = current.get(loop) is t
        state = "running" if running else "waiting" if waiter is not None else "ready"
        waits_on, awaits = None, []
        if waiter is not None:
            waits_on = type(waiter).__name__
            if _base(tmod, waiter) is not None:
                awaits = [waiter]
            else:
                kids = _plain_attr(waiter, "_children")
                if type(kids) is list:
                    awaits = [k for k in kids if _base(tmod, k) is not None]
        chain = _chain(base.get_coro(t), frames.get(ident) if running else None)
        common = [thread, tid, id(loop), id(t), base.get_name(t), state, waits_on,
                  ",".join(str(id(a)) for a in awaits) or None]
        if not chain:
            rows.append(common + [None, None, None, None])
        for depth, (func, file, line) in enumerate(chain):
            rows.append(common + [depth, func, file, line])
    # As the outside reader orders them: by the thread running the loop (main first), loop,
    # task; a task's rows stay together, innermost first.
    rows.sort(key=lambda r: (r[1] is None, r[1] or 0, r[2], r[3], r[8] or 0))
    return rows


agent.register_table("python", "tasks", [
    ("thread", "TEXT"), ("tid", "INTEGER"), ("loop", "INTEGER"), ("task", "INTEGER"),
    ("name", "TEXT"), ("state", "TEXT"), ("waits_on", "TEXT"), ("awaits", "TEXT"),
    ("depth", "INTEGER"), ("func", "TEXT"), ("file", "TEXT"), ("lineno", "INTEGER"),
], _tasks_rows, "pending asyncio tasks and their coroutine chains (docs/sql.md)")
