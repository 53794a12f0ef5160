"""Shared helpers of the live-diagnosis tests (test_inject, test_eval, test_repl, test_live)."""
import hashlib
import os
import re
import subprocess
import time

import harness

TARGET = os.path.join(harness.PY_WORKLOADS, "live", "live_target.py")
LIVESQL = os.path.join(harness.BUILD, "tests", "tools", "livesql")


class Target:
    """A live_target.py process: started, READY awaited, its RESULT line checked."""

    def __init__(self, mode, seconds=1.0, token="tok", python="/usr/bin/python3", env=None,
                 wrapper=None):
        self.mode = mode
        self.token = token
        self.out_path = harness.tmp("target-%s-%d.out" % (mode, id(self)))
        self.err_path = self.out_path[:-4] + ".err"
        cmd = [python, TARGET, mode, str(seconds), token]
        if wrapper:
            cmd = wrapper + cmd
        self.out = open(self.out_path, "w")
        self.err = open(self.err_path, "w")
        self.proc = harness.spawn(cmd, stdout=self.out, stderr=self.err, env=env)
        self.pid = self.proc.pid

    def wait_ready(self, timeout=30):
        def ready():
            with open(self.out_path) as f:
                m = re.search(r"^READY (\d+)$", f.read(), re.M)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError("target %s exited early: %s %s" % (
                    self.mode, self.stdout(), self.stderr()))
            return None
        # The pid printed is the Python process's as it sees itself: with a wrapper (sh,
        # unshare) it is another process, maybe in another pid namespace; find it by its
        # command line among the wrapper's descendants.
        printed = harness.wait_for(ready, timeout=timeout, what="target READY")
        self.pid = printed
        if self.proc.pid != printed:
            self.pid = find_descendant(self.proc.pid, TARGET) or printed
        return self

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def finish(self, timeout=60):
        """Wait for the end; return (n, sum) from the RESULT line; fail on anything else."""
        self.proc.wait(timeout=timeout)
        out, err = self.stdout(), self.stderr()
        m = re.search(r"^RESULT ok (\S+) n=(\S+) sum=(\S+)$", out, re.M)
        assert m, "target %s did not finish its work: rc=%s\nstdout: %s\nstderr: %s" % (
            self.mode, self.proc.returncode, out[-2000:], err[-2000:])
        assert self.proc.returncode == 0, "target exit status %s" % self.proc.returncode
        assert "Traceback" not in err and "Warning" not in err, "target stderr: %s" % err
        return int(m.group(2)), m.group(3)


def find_descendant(pid, needle):
    """The first process under PID (depth first) whose command line contains NEEDLE."""
    todo = [pid]
    while todo:
        p = todo.pop(0)
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                cmd = f.read().decode(errors="replace")
            if needle in cmd and p != pid:
                return p
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return None


def expected_sum(mode, n):
    """The checksum a target of MODE must print after n steps (None: only n > 0 matters)."""
    if mode == "busy":
        s = 0
        for i in range(200000):
            s = (s * 31 + i) % 1000000007
        return str(s)
    if mode in ("read", "c_read"):
        h = hashlib.sha256()
        for i in range(n):
            h.update(hashlib.sha256(b"chunk%d" % i).digest() * (4096 // 32))
        return h.hexdigest()[:16]
    return str(n)


def maps_count(pid, needle="libprobing-agent"):
    with open("/proc/%d/maps" % pid) as f:
        paths = {line.split()[-1] if "(deleted)" not in line else line.split()[-2]
                 for line in f if needle in line}
    return len(paths)


def _tracer(status_path):
    """TracerPid of a /proc status file."""
    with open(status_path) as f:
        return int(re.search(r"^TracerPid:\s*(\d+)", f.read(), re.M).group(1))


def _state(stat_path):
    """The state letter of a /proc stat file."""
    with open(stat_path) as f:
        s = f.read()
    return s[s.rindex(")") + 2]


def tracer_of(pid):
    return _tracer("/proc/%d/status" % pid)


def state_of(pid):
    return _state("/proc/%d/stat" % pid)


def threads_of(pid):
    """{tid: (tracer pid, state letter)} of every thread of @pid that is still there."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            out[int(tid)] = (_tracer("/proc/%d/task/%s/status" % (pid, tid)),
                             _state("/proc/%d/task/%s/stat" % (pid, tid)))
        except (FileNotFoundError, ProcessLookupError):
            continue  # that thread ended meanwhile
    return out


def held_by(pid, tracer):
    """The thread of @pid that @tracer traces (the injector holds one, not always the main
    thread: one at a safe point), or None."""
    return next((tid for tid, (tp, _) in threads_of(pid).items() if tp == tracer), None)


def runs_free(pid):
    """No thread of @pid is traced or stopped."""
    return all(tp == 0 and st not in "tT" for tp, st in threads_of(pid).values())


def livesql(target, sql, timeout=60, extra=()):
    assert os.path.exists(LIVESQL), "livesql not built (run 'make test')"
    return harness.run([LIVESQL, *extra, str(target), sql], timeout=timeout)


def rows(p):
    """Rows printed by livesql (one JSON array per line)."""
    import json
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def held_ms(stderr):
    m = re.search(r"thread stopped ([0-9.]+) ms", stderr)
    return float(m.group(1)) if m else None


def wait_exit(p, timeout):
    t0 = time.monotonic()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0
