"""Helpers for the integration tests: run probing and workloads, read recordings.

Every test gets a fresh temporary directory (harness.tmp()); processes started through
harness.spawn() are killed when the test ends, so a failing test leaves nothing behind.
"""
import glob
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time

import sidroot

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build")
PROBING = os.path.join(BUILD, "probing")
AGENT = os.path.join(BUILD, "libprobing-agent.so")
WORKLOADS = os.path.join(BUILD, "workloads")          # compiled workloads
PY_WORKLOADS = os.path.join(ROOT, "tests", "workloads")  # workload sources: python/, live/...

_tmp = None
_procs = []
_log = []


class Skip(Exception):
    """Raised by a test that cannot run on this machine (say why): runner.py prints SKIP."""


# ---- test lifecycle (called by runner.py) ---------------------------------------------------
# Every process a test starts, however it starts it (spawn, run, subprocess directly; the
# ranks a launcher forks; a job left behind by a watcher the test killed), inherits this
# variable from the runner's environment; end_test kills whatever still carries it.
MARK = "PROBING_TEST_MARK"


def begin_test(tmpdir):
    global _tmp
    _tmp = tmpdir
    _procs.clear()
    _log.clear()
    os.environ[MARK] = tmpdir


def _marked_pids(mark):
    want = f"{MARK}={mark}".encode()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def end_test():
    for p in _procs:
        # The group too when its leader has ended (a launcher killed by the test leaves its
        # ranks in the group).
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if p.poll() is None:
                p.kill()
        p.wait()
    _procs.clear()
    mark = os.environ.pop(MARK, None)
    for _ in range(3):
        left = _marked_pids(mark) if mark else []
        if not left:
            break
        log(f"killed {len(left)} processes the test left running: {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def test_log():
    """What the test's commands printed, for the failure report."""
    return "".join(_log[-40:])


def log(text):
    _log.append(text if text.endswith("\n") else text + "\n")


def tmp(name=""):
    return os.path.join(_tmp, name) if name else _tmp


# ---- decorators -----------------------------------------------------------------------------
def timeout(seconds):
    """Limit a test's run time (default 300 s)."""
    def deco(fn):
        fn._timeout = seconds
        return fn
    return deco


def params(values, ids=None):
    """Run a test once per value: test_x[id]."""
    def deco(fn):
        fn._params = [(ids[i] if ids else str(v), v) for i, v in enumerate(values)]
        return fn
    return deco


# ---- processes ------------------------------------------------------------------------------
def run(cmd, timeout=120, check=False, env=None, input=None, cwd=None):
    """Run a command to completion; return CompletedProcess with text stdout/stderr."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                       input=input, cwd=cwd, errors="replace")
    log(f"$ {' '.join(map(str, cmd))}  -> {p.returncode}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd[0]} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p


def probing(*args, timeout=120, check=False, env=None, input=None):
    """Run build/probing with ARGS."""
    return run([PROBING, *map(str, args)], timeout=timeout, check=check, env=env, input=input)


def spawn(cmd, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw):
    """Start a background process (its own process group), killed at the end of the test."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    p = subprocess.Popen(cmd, env=full_env, stdout=stdout, stderr=stderr,
                         start_new_session=True, **kw)
    _procs.append(p)
    return p


def wait_for(pred, timeout=10.0, interval=0.02, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def workload(name):
    """Path of a compiled workload; fail clearly if it was not built."""
    path = os.path.join(WORKLOADS, name)
    assert os.path.exists(path), f"workload {name} not built (run 'make test')"
    return path


# ---- interpreters ---------------------------------------------------------------------------
def py_minors():
    """The CPython 3 minor versions probing supports: PY_MINOR_MIN..PY_MINOR_MAX, read from
    pyoffsets/pyoffsets.h, the one place that says so."""
    with open(os.path.join(ROOT, "pyoffsets", "pyoffsets.h")) as f:
        text = f.read()
    lo, hi = (int(re.search(rf"^#define PY_MINOR_{w}\s+(\d+)$", text, re.M).group(1))
              for w in ("MIN", "MAX"))
    return range(lo, hi + 1)


def pythons():
    """Every supported CPython (py_minors) on the machine: pyenv builds, Debian unstable's
    python3.14 and python3.15 in the root of scripts/install-sidroot.sh (run there as in a
    container: sidroot.py), and Debian's python3.11, last.

    Returns [(label, path)], e.g. ("3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12").
    """
    out = []
    roots = []
    minors = py_minors()
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for d in sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.*"))):
        m = re.match(r"3\.(\d+)\.\d+$", os.path.basename(d))
        if m and int(m.group(1)) in minors:
            exe = os.path.join(d, "bin", f"python3.{m.group(1)}")
            if os.path.exists(exe):
                roots.append((f"3.{m.group(1)}", exe, int(m.group(1))))
    roots.sort(key=lambda r: r[2])
    out = [(label, exe) for label, exe, _ in roots]
    have = {label for label, _ in out}
    for minor in sidroot.MINORS:
        if minor in minors and f"3.{minor}" not in have and sidroot.available():
            out.append((f"3.{minor}", sidroot.python(minor)))
    if os.path.exists("/usr/bin/python3.11"):
        out.append(("debian-3.11", "/usr/bin/python3.11"))
    return out


# ---- recordings -----------------------------------------------------------------------------
def db(path):
    """Open a recording read-only."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return con


def stacks(con, pid=None, tid=None):
    """[(count, [frame func names root-first], stack_id)] for every stack in the recording."""
    where, args = [], []
    if pid is not None:
        where.append("pid = ?")
        args.append(pid)
    if tid is not None:
        where.append("tid = ?")
        args.append(tid)
    q = "SELECT stack_id, SUM(count) FROM samples"
    if where:
        q += " WHERE " + " AND ".join(where)
    q += " GROUP BY stack_id"
    counts = dict(con.execute(q, args).fetchall())
    frames = {}
    for sid, depth, func in con.execute(
            "SELECT stack_id, depth, func FROM frames ORDER BY stack_id, depth DESC"):
        if sid in counts:
            frames.setdefault(sid, []).append(func)
    return [(n, frames.get(sid, []), sid) for sid, n in counts.items()]


def total_samples(con, **kw):
    return sum(n for n, _, _ in stacks(con, **kw))
