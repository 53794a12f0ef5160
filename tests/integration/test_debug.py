"""probing debug: debugpy started in a running process, driven by a scripted DAP client.

The client does what VS Code does when it attaches (initialize, attach, setBreakpoints,
configurationDone), stops at a known line of a loop that was running before probing came,
reads the stack and the locals, continues and disconnects; the target must keep printing
its output and end normally. Debian 12 ships debugpy (python3-debugpy) for its Python 3.11:
the sessions run on that interpreter and on the pyenv 3.11 (same version: Debian's copy is
used), the other versions get the clear refusals.
"""
import os
import re
import socket
import subprocess
import time

import harness
import sidroot
from dap_client import DAP
from live_helpers import maps_count
from pystack_common import markers

LOOP = os.path.join(harness.PY_WORKLOADS, "python", "debug_loop.py")
BREAK = markers(LOOP)["BREAK"]
PYENV_311 = [exe for label, exe in harness.pythons() if label == "3.11"]
DEBIAN_311 = "/usr/bin/python3.11"
EMBED = os.path.join(harness.WORKLOADS, "py_embed_dlopen")
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


class Loop:
    """A debug_loop.py process: its output in a file, stopped through its stop file."""

    count = 0

    def __init__(self, cmd, env=None):
        Loop.count += 1
        self.stop = harness.tmp("stop-%d" % Loop.count)
        self.out_path = harness.tmp("loop-%d.out" % Loop.count)
        self.err_path = harness.tmp("loop-%d.err" % Loop.count)
        self.proc = harness.spawn(cmd + [LOOP, self.stop], env=env,
                                  stdout=open(self.out_path, "w"),
                                  stderr=open(self.err_path, "w"))
        harness.wait_for(lambda: "READY" in self.out() or self.proc.poll() is not None,
                         timeout=30, what="the loop's READY")
        assert self.proc.poll() is None, "loop exited: " + self.err()
        self.pid = int(re.search(r"READY (\d+)", self.out()).group(1))

    def out(self):
        with open(self.out_path) as f:
            return f.read()

    def err(self):
        with open(self.err_path) as f:
            return f.read()

    def ticks(self):
        return [(int(a), int(b)) for a, b in re.findall(r"^tick (\d+) (\d+) \d+$", self.out(),
                                                        re.M)]

    def cost(self, first, n=10):
        """Least CPU time of 20000 small calls over the @n ticks from tick @first on: load
        on the machine only adds to it (steal time of a VM, caches shared with other tests),
        so the least of several is the cost of the calls themselves."""
        harness.wait_for(lambda: len(self.ticks()) >= first + n, timeout=60,
                         what="%d ticks" % (first + n))
        costs = [int(c) for c in re.findall(r"^tick \d+ \d+ (\d+)$", self.out(), re.M)]
        return min(costs[first:first + n])

    def finish(self):
        open(self.stop, "w").close()
        self.proc.wait(timeout=30)
        done = re.search(r"^DONE (\d+)$", self.out(), re.M)
        assert self.proc.returncode == 0 and done, (self.proc.returncode, self.err(),
                                                    self.out()[-300:])
        n = int(done.group(1))
        assert "Traceback" not in self.err(), self.err()
        return n

    def modules(self):
        """The debugger modules loaded in the target, and whether breakpoint() is intact."""
        p = harness.probing("eval", "-p", self.pid,
                            "import sys; print(sorted(m for m in sys.modules if 'pydev' in m "
                            "or 'debugpy' in m), sys.breakpointhook is sys.__breakpointhook__)")
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()


def _check_threading(loop):
    """threading as the program sees it: its main thread is the real one, alive, and no
    agent thread is registered (pydevd registers a Dummy for every thread it saw; on
    sys.monitoring, 3.12+, for the thread that runs this very eval too, while it runs: the
    agent takes it out after each request, so that one is left out here)."""
    p = harness.probing("eval", "-p", loop.pid,
                        "import threading as t; m = t.main_thread(); "
                        "print(m.native_id, m.is_alive(), "
                        "[x.name for x in t.enumerate() if isinstance(x, t._DummyThread) "
                        "and x.ident != t.get_ident()])")
    assert p.stdout == "%d True []\n" % loop.pid, p.stdout + p.stderr


def _variants():
    out = []
    if PYENV_311:
        out.append(("3.11", ([PYENV_311[0]], None)))
        # pydevd without its compiled speedups (what happens when they cannot load).
        out.append(("3.11-no-cython", ([PYENV_311[0]], {"PYDEVD_USE_CYTHON": "NO"})))
        # A program embedding Python, without a python on its PATH: sys.executable is ''.
        lib = os.path.join(os.path.dirname(os.path.dirname(PYENV_311[0])), "lib",
                           "libpython3.11.so.1.0")
        out.append(("embedded-3.11", ([EMBED, lib], {"PATH": "/nonexistent"})))
    if os.path.exists(DEBIAN_311):
        out.append(("debian-3.11", ([DEBIAN_311], None)))
    # Debian unstable's 3.14 and 3.15 with its python3-debugpy, in the container root
    # (sidroot.py): the process inside, probing and the DAP client outside.
    for label, exe in harness.pythons():
        if label in ("3.14", "3.15") and sidroot.has_debugpy():
            out.append((label, ([exe], None)))
    return out


VARIANTS = _variants()


def _attach_port(stdout):
    m = re.search(r"is listening in process \d+ on 127\.0\.0\.1:(\d+)\.", stdout)
    return int(m.group(1)) if m else None


@harness.timeout(180)
@harness.params([v for _, v in VARIANTS], ids=[k for k, _ in VARIANTS])
def test_debug_dap_session(variant):
    cmd, env = variant
    if cmd[0] == EMBED:
        assert os.path.exists(EMBED), "py_embed_dlopen not built (run 'make test')"
    loop = Loop(cmd, env=env)
    untraced = loop.cost(0)
    # --wait: the command returns once a client is attached.
    out = open(harness.tmp("debug.out"), "w+")
    err = open(harness.tmp("debug.err"), "w+")
    dbg = harness.spawn([harness.PROBING, "debug", "-p", str(loop.pid), "--listen",
                         "127.0.0.1:0", "--wait"], stdout=out, stderr=err)
    port = harness.wait_for(lambda: _attach_port(open(out.name).read()) or
                            (dbg.poll() is not None and -1), timeout=120,
                            what="probing debug's address")
    text = open(out.name).read()
    assert port > 0, "probing debug failed: %s %s" % (text, open(err.name).read())
    assert '"request": "attach"' in text and '"port": %d' % port in text, text
    assert dbg.poll() is None, "--wait returned before a client attached"

    dap = DAP("127.0.0.1", port)
    dap.request("initialize", clientID="probing-test", adapterID="debugpy", pathFormat="path",
                linesStartAt1=True, columnsStartAt1=True)
    attach = dap.send("attach", justMyCode=False)
    dap.event("initialized")
    bps = dap.request("setBreakpoints", source={"path": LOOP}, breakpoints=[{"line": BREAK}])
    assert bps["breakpoints"][0]["verified"], bps
    dap.request("configurationDone")
    assert dap.response(attach)["success"]
    dbg.wait(timeout=30)
    assert dbg.returncode == 0 and "A DAP client is attached" in open(out.name).read()
    # The program's main thread is still threading's main thread (bpo-37416: the agent
    # imported threading for debugpy when the program had not).
    _check_threading(loop)
    assert loop.modules().endswith("] False"), "breakpoint() does not go to debugpy"
    if env and "PYDEVD_USE_CYTHON" in env:
        p = harness.probing("eval", "-p", loop.pid, "__import__('_pydevd_bundle.pydevd_"
                            "trace_dispatch').pydevd_trace_dispatch.USING_CYTHON")
        assert p.stdout == "False\n", p.stdout + p.stderr

    stopped = dap.event("stopped", timeout=60)["body"]
    assert stopped["reason"] == "breakpoint", stopped
    frames = dap.request("stackTrace", threadId=stopped["threadId"])["stackFrames"]
    assert [f["name"] for f in frames[:2]] == ["work", "main"], frames
    assert frames[0]["line"] == BREAK and frames[0]["source"]["path"] == LOOP, frames[0]
    scopes = dap.request("scopes", frameId=frames[0]["id"])["scopes"]
    local = [s for s in scopes if s["name"] == "Locals"][0]
    values = {v["name"]: v["value"] for v in
              dap.request("variables", variablesReference=local["variablesReference"])[
                  "variables"]}
    i, total = int(values["i"]), int(values["total"])
    assert total == 3 * i + 1, values
    # Really stopped: tick i is not printed while the thread waits at the breakpoint; the
    # agent (a thread the debugger does not trace) still answers.
    time.sleep(0.5)
    assert (i, total) not in loop.ticks() and len(loop.ticks()) == i, (i, loop.ticks()[-3:])
    p = harness.probing("eval", "-p", loop.pid, "6 * 7")
    assert p.returncode == 0 and p.stdout == "42\n", p.stdout + p.stderr

    dap.request("setBreakpoints", source={"path": LOOP}, breakpoints=[])
    dap.request("continue", threadId=stopped["threadId"])
    dap.request("disconnect")
    dap.close()
    # The loop goes on: tick i with the value seen in the debugger, then many more.
    harness.wait_for(lambda: len(loop.ticks()) > i + 20, timeout=30, what="ticks after")
    assert loop.ticks()[i] == (i, total)

    # Again: the listener is reported, not started twice; it cannot move.
    p = harness.probing("debug", "-p", loop.pid)
    assert p.returncode == 0 and "already listening" in p.stdout, p.stdout + p.stderr
    assert "127.0.0.1:%d" % port in p.stdout, p.stdout
    p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:1")
    assert p.returncode == 1 and "cannot move" in p.stderr, p.stderr
    # Debugging slows the traced thread down (CPU time of the same calls, not wall time),
    # client or not, 8 to 20 times; --stop gives the program its speed back, and nothing
    # listens. The bounds leave room for a loaded machine (after/untraced was 1.8 once under
    # a full CI run with medians).
    traced = loop.cost(len(loop.ticks()))
    p = harness.probing("debug", "-p", loop.pid, "--stop")
    assert p.returncode == 0 and "debugpy stopped" in p.stdout, p.stdout + p.stderr
    assert "no thread is traced" in p.stdout, p.stdout
    assert loop.modules().endswith("] True"), "breakpoint() not given back"
    after = loop.cost(len(loop.ticks()) + 2)
    if os.path.basename(cmd[0]) in ("python3.14", "python3.15"):
        # debugpy on sys.monitoring (PEP 669): only the lines with breakpoints cost much;
        # tracing made the loop 1.1-1.3 times slower on a loaded machine.
        assert after < 2.5 * untraced, (untraced, traced, after)
    else:
        assert traced > 4 * untraced and traced > 4 * after and after < 2.5 * untraced, \
            (untraced, traced, after)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "debugpy still listens"
    p = harness.probing("debug", "-p", loop.pid, "--stop")
    assert p.returncode == 0 and "nothing to stop" in p.stdout, p.stdout + p.stderr
    if os.path.basename(cmd[0]) in ("python3.14", "python3.15"):
        # debugpy 1.8 listens once per process: a second start is refused, clearly.
        p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:0")
        assert p.returncode == 1 and "listens only once per process" in p.stderr, \
            p.stdout + p.stderr
        assert loop.finish() > i + 20
        return
    # And debugging starts again: a new listener, a client stops the loop again.
    p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:0")
    port2 = _attach_port(p.stdout)
    assert p.returncode == 0 and port2, p.stdout + p.stderr
    dap = DAP("127.0.0.1", port2)
    dap.request("initialize", clientID="probing-test", adapterID="debugpy", pathFormat="path")
    attach = dap.send("attach", justMyCode=False)
    dap.event("initialized")
    dap.request("setBreakpoints", source={"path": LOOP}, breakpoints=[{"line": BREAK}])
    dap.request("configurationDone")
    assert dap.response(attach)["success"]
    stopped = dap.event("stopped", timeout=60)["body"]
    dap.request("setBreakpoints", source={"path": LOOP}, breakpoints=[])
    dap.request("continue", threadId=stopped["threadId"])
    dap.request("disconnect")
    dap.close()
    p = harness.probing("debug", "-p", loop.pid, "--stop")
    assert p.returncode == 0 and "debugpy stopped" in p.stdout, p.stdout + p.stderr
    n = loop.finish()
    assert n > i + 20


@harness.timeout(180)
def test_debug_refusals_leave_the_target_as_it_was():
    pythons = dict(harness.pythons())
    # No debugpy for the other versions: what is missing and how to install it.
    for label in ("3.8", "3.9", "3.10", "3.12", "3.13"):
        if label not in pythons:
            continue
        loop = Loop([pythons[label]])
        p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:0")
        assert p.returncode == 1, (label, p.stdout, p.stderr)
        assert "debugpy is not importable in this process (Python %s" % label in p.stderr, \
            p.stderr
        assert "built for Python 3.11 only" in p.stderr, p.stderr
        assert "%s -m pip install debugpy" % pythons[label] in p.stderr, p.stderr
        assert loop.modules() == "[] True", loop.modules()
        assert loop.finish() > 0

    # A debugpy the process can import but too old for its Python (Debian's 1.6 on 3.12:
    # it would load and never stop at a breakpoint).
    if "3.12" in pythons:
        loop = Loop([pythons["3.12"]], env={"PYTHONPATH": "/usr/lib/python3/dist-packages"})
        p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:0")
        assert p.returncode == 1 and "is too old for Python 3.12" in p.stderr, p.stderr
        assert "needs debugpy 1.8.0 or later" in p.stderr, p.stderr
        assert loop.modules() == "[] True", loop.modules()
        assert loop.finish() > 0

    loop = Loop([DEBIAN_311])
    # A port in use: refused before debugpy is even imported.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:%d" % busy)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "cannot listen on 127.0.0.1:%d" % busy in p.stderr, p.stderr
    assert "Address already in use" in p.stderr and "choose another port" in p.stderr
    assert loop.modules() == "[] True", loop.modules()
    # Another user: refused, with the agent running or not.
    for _ in range(2):
        p = harness.run(NOBODY + [harness.PROBING, "debug", "-p", str(loop.pid)])
        assert p.returncode == 1 and "permission denied" in p.stderr, p.stderr
    assert loop.modules() == "[] True", loop.modules()
    assert loop.finish() > 0

    # Not a loopback address: a usage error, nothing loaded into the target.
    loop = Loop([DEBIAN_311])
    for addr in ("0.0.0.0:0", "10.1.2.3:5678", "[::]:0", "example.com:5678"):
        p = harness.probing("debug", "-p", loop.pid, "--listen", addr)
        assert p.returncode == 2 and "not a loopback address" in p.stderr, (addr, p.stderr)
        assert "--allow-remote" in p.stderr
    assert maps_count(loop.pid) == 0
    for bad in (["--listen", "99999"], ["--listen", "x:y:z"], ["--python", "python3"], []):
        p = harness.probing("debug", "-p", loop.pid, *bad) if bad else \
            harness.probing("debug")
        assert p.returncode == 2, (bad, p.stderr)
    assert maps_count(loop.pid) == 0
    assert loop.finish() > 0

    # Not a Python process.
    sleeper = harness.spawn(["sleep", "30"])
    p = harness.probing("debug", "-p", sleeper.pid)
    assert p.returncode == 1 and "is not a Python process" in p.stderr, p.stderr

    # A process that started debugpy itself: not ours to report, say so.
    code = ("import debugpy, sys, time\n"
            "debugpy.listen(('127.0.0.1', 0))\n"
            "print('READY', flush=True)\n"
            "time.sleep(60)\n")
    own = harness.spawn([DEBIAN_311, "-c", code], stdout=subprocess.PIPE)
    assert own.stdout.readline().strip() == b"READY"
    p = harness.probing("debug", "-p", own.pid, "--listen", "127.0.0.1:0")
    assert p.returncode == 1 and "started by the program itself" in p.stderr, p.stderr

    p = harness.probing("debug", "--help")
    assert p.returncode == 0 and "launch.json" in p.stdout and "--allow-remote" in p.stdout


@harness.timeout(120)
def test_debug_after_an_eval_imported_threading():
    """The program never imported threading, an earlier 'probing eval' did, from the agent's
    thread (Python <= 3.12 then takes the agent's thread for the main one, bpo-37416): debug
    puts the real main thread back, and the program still exits normally."""
    loop = Loop([DEBIAN_311])
    p = harness.probing("eval", "-p", loop.pid, "import threading")
    assert p.returncode == 0, p.stderr
    p = harness.probing("eval", "-p", loop.pid,
                        "__import__('threading').main_thread().native_id")
    assert p.returncode == 0 and p.stdout.strip() != str(loop.pid), p.stdout  # the agent's
    p = harness.probing("debug", "-p", loop.pid, "--listen", "127.0.0.1:0")
    assert p.returncode == 0, p.stdout + p.stderr
    _check_threading(loop)
    p = harness.probing("debug", "-p", loop.pid, "--stop")
    assert p.returncode == 0 and "debugpy stopped" in p.stdout, p.stdout + p.stderr
    assert loop.finish() > 0
