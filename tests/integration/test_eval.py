"""probing eval: Python code run inside a target, results and errors as a user sees them."""
import concurrent.futures
import json
import os
import re
import socket
import struct
import subprocess
import time

import harness
from live_helpers import Target, maps_count, tracer_of

PY = "/usr/bin/python3"


def _finish(t):
    n, s = t.finish()
    assert n > 0


def test_eval_expression_statements_and_globals():
    t = Target("sleep", seconds=3, token="glob").wait_ready()
    # An expression: its repr; the script's globals are visible (runs in __main__).
    p = harness.probing("eval", "-p", t.pid, "TOKEN + '!'")
    assert p.returncode == 0 and p.stdout == "'glob!'\n", p.stdout + p.stderr
    p = harness.probing("eval", "-p", t.pid, "None")
    assert p.stdout == "None\n"
    # Statements: what they print, on the right stream; definitions persist in __main__.
    p = harness.probing("eval", "-p", t.pid,
                        "import sys\nprint('out', 1)\nprint('err', 2, file=sys.stderr)\n"
                        "probe_defined = 42")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "out 1\n" and p.stderr == "err 2\n", (p.stdout, p.stderr)
    p = harness.probing("eval", "-p", t.pid, "probe_defined * 2")
    assert p.stdout == "84\n"
    # The global form, and code from stdin.
    p = harness.probing("-t", t.pid, "eval", "MODE")
    assert p.stdout == "'sleep'\n", p.stdout + p.stderr
    p = harness.probing("eval", "-p", t.pid, "-", input="x = 6\nprint(x * 7)\n")
    assert p.stdout == "42\n", p.stdout + p.stderr
    _finish(t)


def test_eval_exceptions_and_syntax_errors():
    t = Target("sleep", seconds=3).wait_ready()
    p = harness.probing("eval", "-p", t.pid, "1/0")
    assert p.returncode == 1
    assert "Traceback (most recent call last)" in p.stderr
    assert "ZeroDivisionError: division by zero" in p.stderr
    assert "probing_agent" not in p.stderr and "<probing:" not in p.stderr, p.stderr
    assert p.stdout == ""
    p = harness.probing("eval", "-p", t.pid, "def f(:")
    assert p.returncode == 1 and "SyntaxError" in p.stderr, p.stderr
    p = harness.probing("eval", "-p", t.pid, "print('partial'); raise KeyError('k')")
    assert p.returncode == 1 and p.stdout == "partial\n" and "KeyError: 'k'" in p.stderr
    # exit() / SystemExit in eval ends the eval, never the target.
    p = harness.probing("eval", "-p", t.pid, "import sys; sys.exit(3)")
    assert p.returncode == 1 and "SystemExit: 3" in p.stderr
    p = harness.probing("eval", "-p", t.pid, "raise KeyboardInterrupt")
    assert p.returncode == 1 and "KeyboardInterrupt" in p.stderr
    # A __repr__ that fails.
    p = harness.probing("eval", "-p", t.pid,
                        "type('B', (), {'__repr__': lambda s: 1/0})()")
    assert p.returncode == 0 and "repr() failed: ZeroDivisionError" in p.stdout, p.stdout
    # Usage errors.
    assert harness.probing("eval", "-p", t.pid).returncode == 2
    assert harness.probing("eval", "1").returncode == 2
    assert harness.probing("eval", "-p", t.pid, "1", "2").returncode == 2
    p = harness.probing("eval", "--help")
    assert p.returncode == 0 and "Examples" in p.stdout
    _finish(t)


def test_eval_does_not_capture_other_threads_output():
    """While eval'd code runs (and lets the GIL go), the target's own threads keep printing
    to their own stdout, not into the eval's output."""
    code = ("import threading, time, sys\n"
            "def chatter():\n"
            "    while True:\n"
            "        print('chatter', flush=True); time.sleep(0.01)\n"
            "threading.Thread(target=chatter, daemon=True).start()\n"
            "print('READY', flush=True)\n"
            "time.sleep(30)\n")
    out = open(harness.tmp("chatter.out"), "w")
    p = harness.spawn([PY, "-c", code], stdout=out)
    harness.wait_for(lambda: "READY" in open(harness.tmp("chatter.out")).read(), what="READY")
    r = harness.probing("eval", "-p", p.pid,
                        "import time\nfor i in range(3):\n    print('mine', i)\n"
                        "    time.sleep(0.05)")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "mine 0\nmine 1\nmine 2\n", r.stdout
    before = open(harness.tmp("chatter.out")).read().count("chatter")
    time.sleep(0.2)
    after = open(harness.tmp("chatter.out")).read().count("chatter")
    assert after > before, "the target's own prints stopped"
    assert "mine" not in open(harness.tmp("chatter.out")).read()


@harness.timeout(60)
def test_eval_target_holding_the_gil():
    """The target holds the GIL in a C call that never releases it (ctypes.PyDLL): the
    injection still works (it needs no GIL), and eval gives up with the 'looks hung'
    advice instead of waiting for ever."""
    t = Target("hold_gil", seconds=20).wait_ready()
    t0 = time.monotonic()
    p = harness.probing("eval", "--timeout", "1", "-p", t.pid, "1+1", timeout=30)
    took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    assert "did not get the GIL within 1.0 s" in p.stderr and "looks hung" in p.stderr
    assert "probing backtrace -p %d" % t.pid in p.stderr, p.stderr
    assert took < 10, took
    assert maps_count(t.pid) == 1 and tracer_of(t.pid) == 0
    # The agent answers what needs no GIL.
    p = harness.probing("inject", "-p", t.pid)
    assert p.returncode == 0 and "already running" in p.stdout, p.stdout + p.stderr
    p = harness.probing("list")
    assert re.search(r"^%d\s.*3\.\d+\.\d+" % t.pid, p.stdout, re.M), p.stdout
    # Two more impatient clients: both told the same, neither blocks the other.
    for _ in range(2):
        p = harness.probing("eval", "--timeout", "0.5", "-p", t.pid, "2", timeout=30)
        assert p.returncode == 1 and "looks hung" in p.stderr


@harness.timeout(60)
def test_eval_interrupted_when_client_leaves():
    """Code that would run for ever is interrupted (KeyboardInterrupt in the agent's thread
    only) when its client goes away; the agent then serves the next request."""
    t = Target("sleep", seconds=6).wait_ready()
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid),
                          "import time\nwhile True: time.sleep(0.01)"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    p.kill()
    p.wait()
    r = harness.probing("eval", "-p", t.pid, "TOKEN", timeout=20)
    assert r.returncode == 0 and r.stdout == "'tok'\n", r.stdout + r.stderr
    # A pure-Python busy loop is interrupted too (it lets the GIL go every 5 ms).
    p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid), "while True: pass"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    p.kill()
    p.wait()
    r = harness.probing("eval", "-p", t.pid, "counter > 0", timeout=20)
    assert r.stdout == "True\n", r.stdout + r.stderr
    _finish(t)


@harness.timeout(90)
def test_eval_blocked_in_c_leaves_the_agent_serving():
    """An eval blocked in C (time.sleep(600): an interrupt is raised only when the call
    returns) whose client gave up (killed, or its own --timeout) must not leave the agent
    unusable (issue 17: every later eval and live query failed after 5 s with 'looks hung'
    while the target was fine): the next eval and a live query are answered at once, by a
    fresh worker, while the stuck one stays where it is; the target is undisturbed."""
    t = Target("sleep", seconds=8).wait_ready()
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid),
                          "import time; time.sleep(600)"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    p.kill()
    p.wait()
    t0 = time.monotonic()
    r = harness.probing("eval", "-p", t.pid, "1+1", timeout=20)
    took = time.monotonic() - t0
    assert r.returncode == 0 and r.stdout == "2\n", r.stdout + r.stderr
    assert took < 3, took
    # The eval's output is its own, not the stuck one's.
    r = harness.probing("eval", "-p", t.pid, "x = 1; print('mine')", timeout=20)
    assert r.returncode == 0 and r.stdout == "mine\n", r.stdout + r.stderr
    t0 = time.monotonic()
    r = harness.probing("query", "-p", t.pid, "--format", "json",
                        "SELECT COUNT(*) AS n FROM python.threads", timeout=20)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["n"] >= 1, r.stdout + r.stderr
    assert time.monotonic() - t0 < 3
    # Two more stuck the same way: still served.
    for _ in range(2):
        p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid),
                              "import time; time.sleep(600)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        p.kill()
        p.wait()
    r = harness.probing("eval", "-p", t.pid, "TOKEN", timeout=20)
    assert r.returncode == 0 and r.stdout == "'tok'\n", r.stdout + r.stderr
    assert maps_count(t.pid) == 1 and tracer_of(t.pid) == 0
    _finish(t)


@harness.timeout(120)
def test_eval_every_worker_stuck_says_so():
    """Eight evals blocked in C with their clients gone use up the agent's workers: the next
    request is refused at once, saying what the workers run and since when and that they free
    themselves when their calls return, instead of waiting 5 s for a GIL that is free."""
    t = Target("sleep", seconds=30).wait_ready()
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    for _ in range(8):
        p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid),
                              "import time; time.sleep(600)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Long enough to be running (a previous stuck one is retired 0.5 s after its
        # interrupt, and this one waits for that), then gone.
        time.sleep(1.2)
        p.kill()
        p.wait()
    time.sleep(1)
    t0 = time.monotonic()
    r = harness.probing("eval", "-p", t.pid, "1+1", timeout=20)
    assert r.returncode == 1, r.stdout + r.stderr
    assert time.monotonic() - t0 < 3
    assert "its 8 workers are each stuck in a request whose client left" in r.stderr, r.stderr
    assert r.stderr.count("'eval' for ") == 8, r.stderr
    assert "free again once its call returns" in r.stderr, r.stderr
    # What needs no worker is still answered.
    r = harness.probing("inject", "-p", t.pid)
    assert r.returncode == 0 and "already running" in r.stdout, r.stdout + r.stderr
    assert tracer_of(t.pid) == 0
    _finish(t)


# A program that calls a function under a trace function, over and over (as a debugger or a
# coverage tool makes it do), and counts the calls in n.
TRACED = ("import sys, time\n"
          "def f():\n"
          "    return 1\n"
          "n = 0\n"
          "print('READY', flush=True)\n"
          "while True:\n"
          "    sys.settrace(lambda *a: None)\n"
          "    f()\n"
          "    sys.settrace(None)\n"
          "    n += 1\n"
          "    time.sleep(0.005)\n")


@harness.timeout(60)
def test_eval_leaves_traced_code_running():
    """Requests (each enters and leaves an interruptible section), an interrupted one too,
    leave the program's traced calls running on Python 3.11: the agent cleared a pending
    interrupt with PyThreadState_SetAsyncExc(ident, NULL), which left the interpreter's eval
    breaker set for good, and then every call under a trace function spun for ever in its
    first instruction (a debugger or coverage tool hung after one 'probing eval')."""
    proc = harness.spawn([PY, "-c", TRACED], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"READY"

    def calls():
        p = harness.probing("eval", "-p", proc.pid, "n", timeout=20)
        assert p.returncode == 0, p.stderr
        return int(p.stdout)

    def going_on(what):
        n = calls()
        harness.wait_for(lambda: calls() > n + 20, timeout=10,
                         what="traced calls after " + what)

    going_on("an eval")
    p = harness.probing("query", "-p", proc.pid, "SELECT count(*) FROM python.modules")
    assert p.returncode == 0, p.stderr
    going_on("a live query")
    # Interrupted: the watchdog raises KeyboardInterrupt in the agent's thread.
    p = subprocess.Popen([harness.PROBING, "eval", "-p", str(proc.pid), "while True: pass"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    p.kill()
    p.wait()
    going_on("an interrupted eval")
    assert proc.poll() is None


def _vanish_after_gil(pid, code, after):
    """Send an eval request over the agent's socket, wait for the G frame (the request got the
    GIL and starts: the first one loads the helpers now), wait AFTER seconds and hang up."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect("\0probing-%d" % pid)
    payload = b"eval\0" + json.dumps({"code": code}).encode()
    s.sendall(struct.pack("<I", len(payload) + 1) + b"Q" + payload)
    hdr = b""
    while len(hdr) < 5:
        chunk = s.recv(5 - len(hdr))
        assert chunk, "the agent closed the connection"
        hdr += chunk
    assert hdr[4:5] == b"G", hdr
    time.sleep(after)
    s.close()


def _agent_usable(t):
    """Later evals answer, with every helper loaded; the target works on, unharmed."""
    p = harness.probing("eval", "-p", t.pid, "TOKEN", timeout=20)
    assert p.returncode == 0 and p.stdout == "'%s'\n" % t.token, (p.stdout, p.stderr)
    counter = int(harness.probing("eval", "-p", t.pid, "counter").stdout)
    p = harness.probing("eval", "-p", t.pid,
                        "sorted(m for m in __import__('sys').modules "
                        "if m.startswith('probing_'))")
    pydir = os.path.join(harness.ROOT, "injector", "py")  # every helper, embedded at build
    helpers = sorted("probing_" + f[:-3] for f in os.listdir(pydir) if f.endswith(".py"))
    assert p.stdout == "%r\n" % helpers, (p.stdout, p.stderr)
    p = harness.probing("config", "-p", t.pid)
    assert p.returncode == 0 and "output_limit" in p.stdout and "torch_every" in p.stdout, \
        p.stdout + p.stderr
    harness.wait_for(lambda: int(harness.probing("eval", "-p", t.pid, "counter").stdout) >
                     counter, what="the target's work going on")
    assert t.proc.poll() is None and tracer_of(t.pid) == 0
    assert "Traceback" not in t.stderr() and "Warning" not in t.stderr(), t.stderr()


@harness.timeout(180)
def test_eval_client_killed_at_any_instant():
    """A client that vanishes at any instant of any request never breaks the agent, above
    all during the first request, which loads the helpers: that load is never interrupted
    (it used to be: KeyboardInterrupt in the helper's import, and every later request failed
    with "probing_agent: "). Kills swept over the first request of fresh agents (hanging up
    right after the GIL came; SIGKILL of 'probing eval' after a delay), then over later
    requests of one agent; each target works on unharmed."""
    def first_request(sweep):
        how, delay = sweep
        t = Target("sleep", seconds=60, token="t%d" % (delay * 1000)).wait_ready()
        assert harness.probing("inject", "-p", t.pid).returncode == 0
        if how == "after G":
            _vanish_after_gil(t.pid, "TOKEN", delay)
        else:
            p = subprocess.Popen([harness.PROBING, "eval", "-p", str(t.pid), "TOKEN"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            p.kill()
            p.wait()
        _agent_usable(t)
        t.proc.kill()

    sweeps = [("after G", d / 1000) for d in (0, 1, 2, 4, 8, 16)] + \
        [("SIGKILL", d / 1000) for d in range(0, 60, 5)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(first_request, sweeps))  # re-raises the first failure
    # Later requests: code that runs ~30 ms, a settings change, a live query.
    t = Target("sleep", seconds=60).wait_ready()
    assert harness.probing("eval", "-p", t.pid, "1").returncode == 0
    for d in range(0, 50, 5):
        for args in (["eval", "-p", str(t.pid), "x = sum(i * i for i in range(300000))"],
                     ["config", "-p", str(t.pid), "repr_limit=%d" % (1000 + d)],
                     ["query", "-p", str(t.pid), "SELECT count(*) FROM python.modules"]):
            p = subprocess.Popen([harness.PROBING] + args, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            time.sleep(d / 1000)
            p.kill()
            p.wait()
        _vanish_after_gil(t.pid, "while True: pass", d / 1000)
    _agent_usable(t)


STORM_PYTHONS = [(label, exe) for label, exe in harness.pythons()
                 if label in ("3.8", "3.11", "3.13", "debian-3.11", "3.14")]


@harness.timeout(120)
@harness.params(STORM_PYTHONS, ids=[label for label, _ in STORM_PYTHONS])
def test_eval_while_the_target_prints_without_pause(py):
    """The target's main thread prints all the time (each line 102 writes) while eval'd code
    runs long enough to let the GIL go to it many times, 40 times over. CPython before 3.14
    holds sys.stdout by a borrowed reference for a whole print(): when a capture ended in
    the middle of one, the rest of the line went to a freed stream (a RecursionError, or a
    segmentation fault, within the first 10 evals). Ground truth: every eval answers, the
    target prints every line whole and in order, ends with 0, and none of its lines is in
    an eval's output."""
    label, exe = py
    stop, out = harness.tmp("storm.stop"), harness.tmp("storm-%s.out" % label)
    script = os.path.join(harness.PY_WORKLOADS, "python", "print_storm.py")
    err = harness.tmp("storm-%s.err" % label)
    p = harness.spawn([exe, script, stop], stdout=open(out, "w"), stderr=open(err, "w"))
    try:
        harness.wait_for(lambda: open(out).read(6) == "READY ", what="READY")
        for i in range(40):
            r = harness.probing("eval", "-p", p.pid,
                                "print('mine', %d)\nsum(i for i in range(300000))" % i)
            assert r.returncode == 0, (i, r.stderr, open(err).read()[-2000:])
            assert r.stdout == "mine %d\n44999850000\n" % i, (i, r.stdout[:300])
            assert p.poll() is None, (i, p.returncode, open(err).read()[-2000:])
        open(stop, "w").close()
        assert p.wait(timeout=30) == 0, open(err).read()[-2000:]
    finally:
        if p.poll() is None:
            p.kill()
    lines = open(out).read().splitlines()
    assert lines[0] == "READY %d" % p.pid and lines[-1] == "DONE %d" % (len(lines) - 2), \
        (lines[0], lines[-1], len(lines))
    bad = [(n, t) for n, t in enumerate(lines[1:-1]) if t != "%d %s" % (n, " ".join("x" * 50))]
    assert not bad, bad[:3]
    assert open(err).read() == ""


def test_eval_output_limits():
    t = Target("sleep", seconds=3).wait_ready()
    p = harness.probing("eval", "-p", t.pid, "print('x' * 3000000)")
    assert p.returncode == 0
    assert len(p.stdout) < 1100000 and "output truncated" in p.stdout
    p = harness.probing("eval", "-p", t.pid, "'y' * 200000")
    assert "more characters" in p.stdout and len(p.stdout) < 70000
    _finish(t)


@harness.params(harness.pythons(), ids=[label for label, _ in harness.pythons()])
def test_eval_every_python(py):
    label, exe = py
    t = Target("c_nanosleep", seconds=1.5, python=exe, token=label).wait_ready()
    p = harness.probing("eval", "-p", t.pid,
                        "import sys\nprint(sys.version_info[:2], TOKEN)\n"
                        "def f():\n    return [i * i for i in range(5)]\nprint(f())")
    assert p.returncode == 0, p.stderr
    major, minor = label.split("-")[-1].split(".")
    assert p.stdout == "(%s, %s) %s\n[0, 1, 4, 9, 16]\n" % (major, minor, label), p.stdout
    p = harness.probing("eval", "-p", t.pid, "undefined_name")
    assert p.returncode == 1 and "NameError" in p.stderr
    n, _ = t.finish()
    assert n > 0
