"""The injector SIGKILLed at any instant while it borrows or holds a thread of a target: the
target never notices (no crash, no stopped or traced thread, no EINTR, no changed register,
no sleep cut short or made longer, no lost signal).

A borrowed call returns through a trampoline in the target that restores the thread by
itself when nobody takes over (injector/trampoline.h). Kills come two ways:
  - at every named point of the procedure ($PROBING_INJECT_TEST_POINT: the injector kills
    itself there), on targets sitting in each kind of system call;
  - at random instants, over a call made long enough to be hit in its middle (a library
    whose constructor takes 20 ms and uses the vector registers).
The targets check their own results: tests/workloads/native/blocker.c (C, one thread) and
tests/workloads/live/kill_target.py (Python, several threads, ctypes where EINTR would show).
"""
import itertools
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import harness
from live_helpers import tracer_of, state_of

INJECTLIB = os.path.join(harness.BUILD, "tests", "tools", "injectlib")
KILL_TARGET = os.path.join(harness.PY_WORKLOADS, "live", "kill_target.py")
PY = "/usr/bin/python3"
POINTS = ["stopped", "installed", "staged", "started", "masked", "running", "parked", "taken",
          "fp-restored", "mask-restored", "regs-restored"]
# A call killed in its middle still runs to its end (20 ms), waits up to 50 ms for the
# injector that is gone, then restores the thread: let it, before the next kill.
SETTLE = 0.09


class Victim:
    """A target that works until its stdin is closed, then prints its verdict."""

    def __init__(self, cmd, mode):
        self.mode = mode
        self.proc = harness.spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), "%s: %r" % (cmd, line)
        self.pid = self.proc.pid
        self.fed = 0
        self.stop = threading.Event()
        self.feeder = None
        if mode == "read":
            self.feeder = threading.Thread(target=self._feed, daemon=True)
            self.feeder.start()

    def _feed(self):
        while not self.stop.is_set():
            try:
                self.proc.stdin.write(chr(ord("a") + self.fed % 26))
                self.proc.stdin.flush()
            except BrokenPipeError:
                return  # it died: finish() says so
            self.fed += 1
            time.sleep(0.004)

    def finish(self):
        self.stop.set()
        if self.feeder:
            self.feeder.join()
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(timeout=30)
        assert "RESULT ok %s" % self.mode in out and self.proc.returncode == 0, \
            "%s: rc=%s %s" % (self.mode, self.proc.returncode, out[-500:])
        if self.feeder:
            assert "n=%d" % self.fed in out, (self.fed, out[-200:])
        return out


def blocker(mode):
    return Victim([harness.workload("blocker"), mode, "0"], mode)


def pytarget(mode, python=PY):
    return Victim([python, KILL_TARGET, mode], mode)


_libs = itertools.count()


def fresh_lib():
    """A new copy of the slow library (a copy, so that dlopen loads it again)."""
    path = harness.tmp("slow-%d.so" % next(_libs))
    shutil.copy(harness.workload("libslowctor.so"), path)
    return path


def mapped(pid, path):
    with open("/proc/%d/maps" % pid) as f:
        return path in f.read()


def let_go(pid, v=None, what=""):
    """The kernel detached the dead tracer's thread: nothing stays traced or stopped (and
    the target @v is alive)."""
    if v is not None and v.proc.poll() is not None:
        raise AssertionError("target %s died (exit status %s) after %s" % (
            v.mode, v.proc.returncode, what))
    harness.wait_for(lambda: tracer_of(pid) == 0, timeout=5, what="no tracer")
    assert state_of(pid) not in "tT", "target %d left stopped" % pid


def inject(pid, lib, env=None):
    return subprocess.Popen([INJECTLIB, str(pid), lib], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))


def kill_sweep(v, kills, rng, outcomes, lock, errors):
    """@kills injections of @v, each SIGKILLed after a random delay within the time a whole
    injection takes (measured first, the median of three: a loaded machine stretches it, and
    the first, cold, can take several times the others, which would leave most kills after
    the injection finished)."""
    spans = []
    for _ in range(3):
        t0 = time.monotonic()
        p = inject(v.pid, fresh_lib())
        p.communicate(timeout=30)
        spans.append(time.monotonic() - t0)
        time.sleep(SETTLE)
    span = sorted(spans)[1]
    for _ in range(kills):
        lib = fresh_lib()
        p = inject(v.pid, lib)
        delay = rng.uniform(0.0, span)
        time.sleep(delay)
        p.kill()
        p.communicate(timeout=30)
        time.sleep(SETTLE)
        try:
            let_go(v.pid, v, "the injector was killed after %.1f ms" % (delay * 1000))
        except AssertionError as e:
            with lock:
                errors.append(str(e))
            return
        if p.returncode == 0:
            what = "finished first"
        elif p.returncode > 0:
            what = "failed first"  # e.g. no safe thread in time: nothing was touched
        else:
            what = "killed in or after the call" if mapped(v.pid, lib) else \
                "killed before the call"
        with lock:
            outcomes[what] = outcomes.get(what, 0) + 1


@harness.timeout(180)
def test_inject_killed_at_every_point_and_instant():
    """Named points (11 x 10 targets), then 126 kills at random instants; each target is
    injected normally at the end and checks everything it did meanwhile."""
    victims = [blocker(m) for m in ("nanosleep", "futex", "poll", "epoll", "read", "vector")]
    victims += [pytarget(m) for m in ("c_read", "c_nanosleep", "sleep", "busy")]
    t0 = time.monotonic()
    for point in POINTS:
        runs = [(v, inject(v.pid, fresh_lib(), {"PROBING_INJECT_TEST_POINT": point}))
                for v in victims]
        for v, p in runs:
            err = p.communicate(timeout=30)[1]
            # Killed there; or, a thread slow to park, it restored itself before we came.
            assert p.returncode in (-signal.SIGKILL, 0), (point, v.mode, p.returncode, err)
            if p.returncode:
                assert "test point %s" % point in err, err
            let_go(v.pid, v, "a kill at " + point)
        time.sleep(SETTLE)
    harness.log("named points: %.1f s" % (time.monotonic() - t0))
    # Random instants. Not the epoll target: a call that returns EINTR when stopped
    # (epoll_wait...) does so as soon as the thread is stopped, and a kill in the few
    # microseconds before the injector rewinds it lets that EINTR through (docs/live.md).
    t0 = time.monotonic()
    rng = random.Random(20260824)
    outcomes, lock, errors = {}, threading.Lock(), []
    sweeps = [threading.Thread(target=kill_sweep, args=(v, 14, random.Random(rng.random()),
                                                        outcomes, lock, errors))
              for v in victims if v.mode != "epoll"]
    for t in sweeps:
        t.start()
    for t in sweeps:
        t.join()
    assert not errors, errors
    kills = sum(outcomes.values())
    harness.log("random kills: %s in %.1f s" % (outcomes, time.monotonic() - t0))
    assert kills == 126, outcomes
    # The kills must hit the borrowed call itself, not only its edges (about half do).
    assert outcomes.get("killed in or after the call", 0) >= 20, outcomes
    for v in victims:
        lib = fresh_lib()
        r = harness.run([INJECTLIB, str(v.pid), lib])
        assert r.returncode == 0 and mapped(v.pid, lib), r.stderr
    for v in victims:
        v.finish()


@harness.timeout(120)
def test_probing_inject_killed_at_random_instants():
    """`probing inject` (the real agent) killed at random instants in fresh Python targets of
    every version: each target goes on, and an eval answers afterwards."""
    rng = random.Random(7)
    pythons = [exe for _, exe in harness.pythons()]
    for i in range(14):
        v = pytarget(["sleep", "c_read", "busy"][i % 3], pythons[i % len(pythons)])
        p = subprocess.Popen([harness.PROBING, "inject", "-p", str(v.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.05))
        p.kill()
        p.wait()
        let_go(v.pid)
        time.sleep(SETTLE)
        r = harness.probing("eval", "-p", v.pid, "6 * 7", timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "42", r.stdout + r.stderr
        v.finish()


def _sigread(mode, how):
    """blocker sigread-MODE: a SIGUSR1 comes while it is blocked in read() (and, unless
    @how is "native", while the injector holds it); then one byte, then end of file.
    Return what the target saw."""
    v = Victim([harness.workload("blocker"), "sigread-" + mode, "0"], "sigread-" + mode)
    time.sleep(0.1)
    if how == "native":
        os.kill(v.pid, signal.SIGUSR1)
    elif how == "killed":
        # Killed with the call set up: the signal stays pending until the thread, done with
        # the call and with nobody coming for it, restores itself.
        p = inject(v.pid, fresh_lib(), {"PROBING_INJECT_TEST_POINT": "masked:300"})
        assert p.stderr.readline().strip() == "probing: test point masked"
        os.kill(v.pid, signal.SIGUSR1)
        p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL
    else:
        # The injector alive: the thread is held (stopped) when the signal comes.
        p = inject(v.pid, fresh_lib(), {"PROBING_INJECT_DELAY_MS": "300"})
        harness.wait_for(lambda: tracer_of(v.pid) == p.pid and state_of(v.pid) == "t",
                         what="thread held")
        os.kill(v.pid, signal.SIGUSR1)
        p.communicate(timeout=30)
        assert p.returncode == 0
    let_go(v.pid)
    time.sleep(0.2)
    v.proc.stdin.write("x")
    v.proc.stdin.flush()
    time.sleep(0.05)
    out = v.finish()
    return [line for line in out.splitlines() if line.startswith("read ")]


def _longsleep(how):
    """blocker longsleep 1.0, the injector arriving after 0.3 s: how long the sleep took."""
    v = Victim([harness.workload("blocker"), "longsleep", "1.0"], "longsleep")
    time.sleep(0.3)
    if how != "native":
        env = {"PROBING_INJECT_TEST_POINT": "running"} if how == "killed" else None
        p = inject(v.pid, fresh_lib(), env)
        p.communicate(timeout=30)
        assert p.returncode == (-signal.SIGKILL if how == "killed" else 0)
        let_go(v.pid)
    out = v.finish()
    return float(out.split("SLEPT ")[1].split()[0])


@harness.timeout(120)
def test_killed_injector_keeps_signal_and_restart_semantics():
    """What a thread interrupted in a system call sees is what it would have seen without
    us, whether the injector finishes or is killed: a signal that arrives meanwhile makes
    read() return EINTR only when its handler lacks SA_RESTART, as the kernel decides; a
    nanosleep resumes with its remaining time (restart_syscall), not from the start; Python's
    Ctrl-C still ends a time.sleep() at once."""
    want = {"intr": ["read rc=-1 errno=EINTR handled=1", "read rc=1 errno=0 handled=1",
                     "read rc=0 errno=0 handled=1"],
            "restart": ["read rc=1 errno=0 handled=1", "read rc=0 errno=0 handled=1"]}
    for mode in ("intr", "restart"):
        for how in ("native", "alive", "killed"):
            got = _sigread(mode, how)
            assert got == want[mode], "sigread-%s %s: %s" % (mode, how, got)
    for how in ("native", "alive", "killed"):
        slept = _longsleep(how)
        harness.log("longsleep 1.0 s, %s: %.4f s" % (how, slept))
        # Restarted from the beginning it would take 1.3 s.
        assert 1.0 <= slept < 1.15, (how, slept)
    code = ("import sys, time\nprint('READY', flush=True)\nt0 = time.monotonic()\n"
            "try:\n    time.sleep(30)\n    print('SLEPT')\nexcept KeyboardInterrupt:\n"
            "    print('INTERRUPTED %.2f' % (time.monotonic() - t0), flush=True)\n")
    for exe in (PY, harness.pythons()[0][1]):
        p = harness.spawn([exe, "-c", code], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "READY"
        time.sleep(0.2)
        inj = inject(p.pid, fresh_lib(), {"PROBING_INJECT_TEST_POINT": "masked:300"})
        assert inj.stderr.readline().strip() == "probing: test point masked"
        os.kill(p.pid, signal.SIGINT)
        inj.communicate(timeout=30)
        out = p.stdout.readline()
        p.wait(timeout=30)
        assert out.startswith("INTERRUPTED") and float(out.split()[1]) < 2, (exe, out)


@harness.timeout(120)
def test_backtrace_native_killed():
    """`probing backtrace --native` holds each thread for a moment: killed while it holds
    one (named points) or at random instants, it leaves every target as it was."""
    victims = [blocker(m) for m in ("nanosleep", "futex", "read", "vector", "epoll")]
    victims += [pytarget(m) for m in ("c_read", "sleep")]
    for point in ("held", "released"):
        runs = [(v, subprocess.Popen([harness.PROBING, "backtrace", "--native", "-p",
                                      str(v.pid)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, PROBING_INJECT_TEST_POINT=point)))
                for v in victims]
        for v, p in runs:
            err = p.communicate(timeout=60)[1]
            assert p.returncode == -signal.SIGKILL and "test point %s" % point in err, err
            let_go(v.pid)
    rng = random.Random(3)
    for i in range(36):
        v = victims[i % 4] if i % 2 else victims[5 + i % 2]  # not the epoll one (above)
        p = subprocess.Popen([harness.PROBING, "backtrace", "--native", "-p", str(v.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, 0.25))
        p.kill()
        p.wait()
        let_go(v.pid)
    for v in victims:
        r = harness.probing("backtrace", "--native", "-p", v.pid, timeout=60)
        assert r.returncode == 0, r.stderr
        v.finish()
