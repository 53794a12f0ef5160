"""asyncio tasks: 'probing backtrace --tasks' and the live table python.tasks against task trees
of known shape (tests/workloads/python/task_tree.py): a gather of tasks awaiting each other, a
task blocked on an asyncio.Queue, a task running, a task ready to run, and a second event loop
in a second thread. Read from outside first (no agent), on every interpreter (3.14 and 3.15:
the rewritten _asyncio, its tasks on per-thread lists found through its .AsyncioDebug
offsets); then by the agent, whose view (CPython's own frame.f_lineno, Task methods) must be
the same.
"""
import json
import os
import re

import harness as h
from live_helpers import maps_count
from pystack_common import markers

WORKLOAD = os.path.join(h.PY_WORKLOADS, "python", "task_tree.py")
M = markers(WORKLOAD)
PYTHONS = h.pythons()
STABLE = {"main", "left", "leaf", "right", "busy", "second", "worker", "blocker"}


def _start(exe, *extra):
    out = h.tmp("tree.json")
    p = h.spawn([exe, WORKLOAD, out, *extra], stdout=open(h.tmp("tree.out"), "w"),
                stderr=open(h.tmp("tree.err"), "w"))
    h.wait_for(lambda: os.path.exists(out) or p.poll() is not None, timeout=60,
               what="the task tree")
    assert p.poll() is None, open(h.tmp("tree.err")).read()
    with open(out) as f:
        return p, json.load(f)["loop2_tid"]


def _rows(pid, check=True):
    r = h.probing("query", "-p", pid, "--format", "json", "SELECT * FROM python.tasks")
    if not check:
        return r
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _tasks(rows):
    """{name: task} from python.tasks rows: one entry per task, its frames in depth order."""
    by_id = {}
    for r in rows:
        t = by_id.setdefault(r["task"], dict(r, frames=[]))
        if r["depth"] is not None:
            assert r["depth"] == len(t["frames"]), rows
            t["frames"].append((r["func"], r["file"], r["lineno"]))
    names = {t["task"]: t["name"] for t in by_id.values()}
    out = {}
    for t in by_id.values():
        ids = [int(x) for x in t["awaits"].split(",")] if t["awaits"] else []
        t["awaits_names"] = sorted(names.get(i, "?") for i in ids)
        out[t["name"]] = t
    return out


def _busy_running(rows):
    return any(r["name"] == "busy" and r["state"] == "running" for r in rows)


def _stable_rows(pid):
    """python.tasks, read again while the task 'busy' was caught between two blocking steps
    (it runs 99.9% of the time)."""
    for _ in range(5):
        rows = _rows(pid)
        if _busy_running(rows):
            return rows
    raise AssertionError("'busy' never seen running: %s" % rows)


def _frame(name, line):
    return (name, WORKLOAD, line)


def _check_tree(rows, pid, loop2_tid, pure=False, eager=False):
    t = _tasks(rows)
    if eager:
        # 3.12+ starts loop B's tasks eagerly: create_task() names a task after the factory
        # ran its first step, which for "blocker" never ends: it keeps its default name.
        named = [n for n in t if re.match(r"Task-\d+$", n) and t[n]["thread"] == "loop-2"]
        assert len(named) == 1, sorted(t)
        t["blocker"] = t.pop(named[0])
    assert STABLE <= set(t), sorted(t)
    extra = set(t) - STABLE
    assert all(re.match(r"fresh-\d+$", n) for n in extra), extra
    main = dict(state="waiting", thread="MainThread", tid=pid)
    b = dict(state="waiting", thread="loop-2", tid=loop2_tid)
    want = {
        "main": dict(main, waits_on="_GatheringFuture", awaits=["left", "right"],
                     frames=[_frame("main", M["MAIN_AWAIT"])]),
        "left": dict(main, waits_on="Task", awaits=["leaf"],
                     frames=[_frame("left", M["LEFT_AWAIT"])]),
        "leaf": dict(main, waits_on="Future", awaits=[],
                     frames=["sleep@asyncio/tasks.py", _frame("nap", M["NAP"]),
                             _frame("leaf", M["LEAF_AWAIT"])]),
        "right": dict(main, waits_on="Future", awaits=[],
                      frames=["get@asyncio/queues.py", _frame("helper", M["HELPER"]),
                              _frame("right", M["RIGHT_AWAIT"])]),
        "busy": dict(main, state="running", waits_on=None, awaits=[],
                     frames=[_frame("busy", M["BUSY"])]),
        "second": dict(b, waits_on="Task", awaits=["worker"],
                       frames=[_frame("second", M["SECOND_AWAIT"])]),
        "worker": dict(b, waits_on="Future", awaits=[],
                       frames=["wait@asyncio/locks.py", _frame("worker", M["WORKER_AWAIT"])]),
        "blocker": dict(b, state="running", waits_on=None, awaits=[],
                        frames=[_frame("blocker", M["BLOCKER"])]),
    }
    for n in extra:
        # Created by busy while it blocks its loop: scheduled, its coroutine not started
        # (a frame that has not started shows its def line).
        want[n] = dict(main, state="ready", waits_on=None, awaits=[],
                       frames=[_frame("fresh", M["FRESH"])])
    for name, w in want.items():
        got = t[name]
        if pure and w["state"] == "waiting":
            # The pure-Python Future's __await__ is a generator: the innermost coroutine
            # waits in it.
            w["frames"] = ["__await__@asyncio/futures.py"] + w["frames"]
        for k in ("state", "thread", "tid", "waits_on"):
            assert got[k] == w[k], (name, k, got[k], w[k], got)
        assert got["awaits_names"] == w["awaits"], (name, got)
        assert len(got["frames"]) == len(w["frames"]), (name, got["frames"])
        for g, e in zip(got["frames"], w["frames"]):
            if isinstance(e, str):  # a frame of asyncio itself: its function and file
                func, path = e.split("@")
                assert g[0] == func and g[1].endswith("/" + path) and g[2] > 0, (name, g)
            else:
                assert g == e, (name, g, e)
    # One loop per thread.
    assert len({t[n]["loop"] for n in ("main", "left", "leaf", "right", "busy")}) == 1
    assert len({t[n]["loop"] for n in ("second", "worker", "blocker")}) == 1
    assert t["main"]["loop"] != t["second"]["loop"]
    return t


@h.timeout(120)
@h.params(PYTHONS, ids=[label for label, _ in PYTHONS])
def test_task_tree(py):
    label, exe = py
    p, loop2 = _start(exe)
    # 3.12 and 3.13 name an eagerly started task only after its first step (3.14 names it
    # first: the "blocker" keeps its name).
    eager = 12 <= _minor(label) <= 13
    # From outside: nothing loaded into the process.
    outside = _stable_rows(p.pid)
    _check_tree(outside, p.pid, loop2, eager=eager)
    r = h.probing("backtrace", "-p", p.pid, "--tasks")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert re.search(r"^asyncio event loop 0x[0-9a-f]+ in thread %d \"MainThread\": \d+ tasks$"
                     % p.pid, text, re.M), text
    assert re.search(r"^asyncio event loop 0x[0-9a-f]+ in thread %d \"loop-2\": 3 tasks$"
                     % loop2, text, re.M), text
    # The tree: what a task waits for is printed under it, one level deeper.
    tree = ['    Task "main" waiting on _GatheringFuture: "left", "right"',
            '        main (%s:%d)' % (WORKLOAD, M["MAIN_AWAIT"]),
            '        Task "left" waiting on Task: "leaf"',
            '            left (%s:%d)' % (WORKLOAD, M["LEFT_AWAIT"]),
            '            Task "leaf" waiting on Future']
    assert "\n".join(tree) in text, text
    assert '                nap (%s:%d)\n' % (WORKLOAD, M["NAP"]) in text, text
    assert '    Task "second" waiting on Task: "worker"\n' in text, text
    assert '        Task "worker" waiting on Future\n' in text, text
    assert maps_count(p.pid) == 0, "an outside read loaded something into the target"
    # The agent's view is the same.
    assert h.probing("inject", "-p", p.pid).returncode == 0
    inside = _stable_rows(p.pid)
    t_in = _check_tree(inside, p.pid, loop2, eager=eager)
    t_out = _check_tree(outside, p.pid, loop2, eager=eager)
    for name in STABLE:
        for k in ("task", "loop", "name", "state", "waits_on", "awaits", "frames", "thread",
                  "tid"):
            assert t_in[name][k] == t_out[name][k], (name, k, t_in[name][k], t_out[name][k])
    assert p.poll() is None


def _minor(label):
    """3.X and debian-3.X labels -> X."""
    return int(label.rsplit(".", 1)[1])


@h.timeout(120)
def test_pure_python_tasks_through_the_agent():
    """Without the _asyncio accelerator every task is a pure-Python object: not read from
    outside (said so), read by the agent."""
    label, exe = ([(lb, e) for lb, e in PYTHONS if lb == "3.12"] or PYTHONS[-1:])[0]
    p, loop2 = _start(exe, "--pure")
    r = _rows(p.pid, check=False)
    assert r.returncode == 1 and "only the agent can read it" in r.stderr, r.stderr
    assert "probing inject -p %d" % p.pid in r.stderr, r.stderr
    r = h.probing("backtrace", "-p", p.pid, "--tasks")
    assert r.returncode == 0, r.stderr
    assert re.search(r"asyncio: \d+ pending tasks that only the agent can read", r.stdout)
    assert "pure-Python Task class" in r.stderr, r.stderr
    assert h.probing("inject", "-p", p.pid).returncode == 0
    _check_tree(_stable_rows(p.pid), p.pid, loop2, pure=True,
                eager=label in ("3.12", "3.13"))
    r = h.probing("backtrace", "-p", p.pid, "--tasks")
    assert r.returncode == 0 and "read by the agent" in r.stderr, r.stderr
    assert '    Task "busy" running\n' in r.stdout, r.stdout


def test_tasks_without_asyncio_and_usage():
    exe = PYTHONS[0][1]
    p = h.spawn([exe, "-c", "import time; print('READY', flush=True); time.sleep(60)"],
                stdout=open(h.tmp("plain.out"), "w"))
    h.wait_for(lambda: "READY" in open(h.tmp("plain.out")).read(), what="READY")
    r = h.probing("backtrace", "-p", p.pid, "--tasks")
    assert r.returncode == 0 and "asyncio: not imported in this process" in r.stdout, r.stdout
    assert _rows(p.pid) == []
    r = h.probing("backtrace", "--help")
    assert "--tasks" in r.stdout


ORPHAN = """
import asyncio, threading, time
holder = {}
def run():
    loop = asyncio.new_event_loop()
    fut = loop.create_future()
    async def orphan():
        await fut  # @ORPHAN
    holder.update(loop=loop, fut=fut, task=loop.create_task(orphan(), name="orphan"))
    loop.call_later(0.05, loop.stop)
    loop.run_forever()
t = threading.Thread(target=run, name="gone")
t.start()
t.join()
print('READY', flush=True)
time.sleep(600)
"""


@h.timeout(120)
@h.params(PYTHONS, ids=[label for label, _ in PYTHONS])
def test_task_of_a_thread_that_exited(py):
    """A pending task whose loop's thread exited (3.14+: moved from that thread's list to the
    interpreter's): still read from outside, waiting on its future at its line, with no
    thread (the loop runs nowhere)."""
    label, exe = py
    p = h.spawn([exe, "-c", ORPHAN], stdout=open(h.tmp("orphan.out"), "w"))
    h.wait_for(lambda: "READY" in open(h.tmp("orphan.out")).read(), what="READY")
    line = ORPHAN.split("\n").index("        await fut  # @ORPHAN") + 1
    t = _tasks(_rows(p.pid))
    assert set(t) == {"orphan"}, t
    o = t["orphan"]
    assert (o["state"], o["waits_on"], o["tid"]) == ("waiting", "Future", None), o
    assert o["frames"] == [("orphan", "<string>", line)], o
    assert p.poll() is None


CHURN = """
import asyncio, random
async def short(i):
    await asyncio.sleep(random.random() * 0.005)
    return i
async def main():
    print('READY', flush=True)
    while True:
        await asyncio.gather(*(short(i) for i in range(50)))
asyncio.run(main())
"""


@h.timeout(180)
@h.params(PYTHONS, ids=[label for label, _ in PYTHONS])
def test_tasks_of_a_churning_loop(py):
    """Tasks created and finished nonstop while they are read from outside: every read
    succeeds and gives well-formed rows (a task seen mid-change is left out or cut short,
    never garbage)."""
    label, exe = py
    p = h.spawn([exe, "-c", CHURN], stdout=open(h.tmp("churn.out"), "w"))
    h.wait_for(lambda: "READY" in open(h.tmp("churn.out")).read(), what="READY")
    seen = 0
    for _ in range(20):
        rows = _rows(p.pid)
        for t in _tasks(rows).values():
            assert re.match(r"Task-\d+$", t["name"]), t
            assert t["state"] in ("running", "waiting", "ready"), t
            assert t["tid"] == p.pid and t["thread"] == "MainThread", t
            frames = t["frames"]
            if t["state"] == "running":
                # What the running task calls, then its coroutine (outermost).
                assert frames and frames[-1][0] in ("main", "short"), t
                frames = frames[-1:]
            for func, file, line in frames:
                assert func in ("main", "short", "sleep"), t
                assert file == "<string>" or file.endswith("/asyncio/tasks.py"), t
                assert line is None or line > 0, t
            seen += t["name"] != "Task-1"
    assert seen > 0, "no short-lived task was ever seen"
    for _ in range(5):
        r = h.probing("backtrace", "-p", p.pid, "--tasks")
        assert r.returncode == 0 and "asyncio event loop" in r.stdout, r.stdout + r.stderr
    assert p.poll() is None
