#!/usr/bin/env python3
"""Injection benchmark: probing's ptrace injector side by side with gdb doing the same dlopen.

    sudo bench/bench_inject.py [-n TARGETS] [--python PATH]

For each method, N fresh single-threaded Python targets are started. Measured:
  - latency from the command's start to the first eval answer (probing: 'probing eval -p
    PID 1', which injects; gdb: 'gdb -p PID -batch -ex "call (void*)dlopen(AGENT, 2)"', then
    the same eval without injection),
  - the time the target was stopped, as the target itself saw it: the longest gap between
    two turns of a loop that only reads the clock (an upper bound: it includes the
    scheduler's noise, shown as the gap seen with nobody touching the target), and probing's
    own account of how long it held the thread,
  - targets harmed: died, or could not answer afterwards,
  - 'query -p' round trip on live tables (open + query + close, in one process, and as a
    whole command including process start-up), with tests/tools/livesql.
Goals (docs/live.md): inject + first answer < 50 ms median, stop < 5 ms, query < 5 ms.
Needs root, gdb, and a build (make; make build/tests/tools/livesql).
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
AGENT = os.path.join(ROOT, "build", "libprobing-agent.so")
LIVESQL = os.path.join(ROOT, "build", "tests", "tools", "livesql")
INJECTLIB = os.path.join(ROOT, "build", "tests", "tools", "injectlib")

TARGET = r"""
import sys, time
maxgap = 0.0
def reset():
    global maxgap
    maxgap = 0.0
    return True
print("READY", flush=True)
last = time.monotonic()
while True:
    time.sleep(0.0005)
    now = time.monotonic()
    if now - last > maxgap:
        maxgap = now - last
    last = now
"""


# For the stop measurement: a thread that never blocks, polling the clock (gdb's failure
# to restart an interrupted system call cannot kill this one, so its stop can be measured).
TARGET_BUSY = r"""
import time
maxgap = 0.0
def reset():
    global maxgap
    maxgap = 0.0
    return True
print("READY", flush=True)
last = time.monotonic()
while True:
    now = time.monotonic()
    if now - last > maxgap:
        maxgap = now - last
    last = now
"""


def start_target(python):
    p = subprocess.Popen([python, "-c", TARGET], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "READY" not in line:
        raise SystemExit("target did not start: %s" % p.stderr.read())
    time.sleep(0.05)
    return p


def ask(pid, code):
    """An eval through an agent that is already there (never injects)."""
    return subprocess.run([PROBING, "eval", "--no-inject", "-p", str(pid), code],
                          capture_output=True, text=True, timeout=60)


def run_probing(python):
    p = start_target(python)
    t0 = time.monotonic()
    r = subprocess.run([PROBING, "-v", "eval", "-p", str(p.pid), "reset()"],
                       capture_output=True, text=True, timeout=60)
    lat = (time.monotonic() - t0) * 1000
    ok = r.returncode == 0 and r.stdout.strip() == "True"
    m = re.search(r"thread stopped ([0-9.]+) ms", r.stderr)
    held = float(m.group(1)) if m else None
    res = {"latency": lat, "ok": ok, "held": held}
    time.sleep(0.05)
    g = ask(p.pid, "maxgap * 1000")
    res["harmed"] = not ok or p.poll() is not None or g.returncode != 0
    p.kill()
    p.wait()
    return res


def run_gdb(python):
    p = start_target(python)
    t0 = time.monotonic()
    g = subprocess.run(["gdb", "-q", "-nx", "-p", str(p.pid), "-batch", "-ex",
                        'call (void*)dlopen("%s", 2)' % AGENT],
                       capture_output=True, text=True, timeout=120)
    r = ask(p.pid, "reset()")
    lat = (time.monotonic() - t0) * 1000
    ok = r.returncode == 0 and r.stdout.strip() == "True"
    time.sleep(0.05)
    alive = p.poll() is None
    g2 = ask(p.pid, "maxgap * 1000") if alive else None
    harmed = not alive or not ok or g2 is None or g2.returncode != 0
    err = ""
    if not alive:
        err = p.stderr.read().strip().splitlines()[-1:] or ["died"]
        err = err[0]
    elif "Couldn't" in g.stderr or "error" in g.stderr.lower():
        err = [line for line in g.stderr.splitlines() if "Couldn't" in line or "rror" in line][:1]
        err = err[0] if err else ""
    p.kill()
    p.wait()
    return {"latency": lat, "ok": ok, "harmed": harmed, "err": err}


def stop_gap(python, method):
    """The stop as the target itself sees it. The target starts with the agent preloaded
    (as 'probing run' does) so that its gap can be reset and read without an injection;
    then METHOD (probing's injector, or gdb) dlopens another library into it. Returns
    (gap during the injection, gap before it with nobody touching, ok), gap None if the
    target died or stopped answering."""
    lib = "/lib/x86_64-linux-gnu/libexpat.so.1"
    env = dict(os.environ, PROBING="1", LD_PRELOAD=AGENT)
    p = subprocess.Popen([python, "-c", TARGET_BUSY], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    if "READY" not in p.stdout.readline():
        raise SystemExit("target did not start")
    time.sleep(0.05)
    ask(p.pid, "reset()")
    time.sleep(0.1)
    before = ask(p.pid, "maxgap * 1000")
    ask(p.pid, "reset()")
    if method == "probing":
        # The injector's own code (user/inject), with a library other than the agent.
        r = subprocess.run([INJECTLIB, str(p.pid), lib], capture_output=True, text=True,
                           timeout=60)
        ok = r.returncode == 0
        m = re.search(r"held ([0-9.]+) ms", r.stdout)
        if m:
            HELD.append(float(m.group(1)))
    else:
        r = subprocess.run(["gdb", "-q", "-nx", "-p", str(p.pid), "-batch", "-ex",
                            'call (void*)dlopen("%s", 2)' % lib],
                           capture_output=True, text=True, timeout=120)
        ok = True
    time.sleep(0.05)
    alive = p.poll() is None
    after = ask(p.pid, "maxgap * 1000") if alive else None
    p.kill()
    p.wait()
    if not alive or after is None or after.returncode != 0:
        return None, float(before.stdout or 0), ok
    return float(after.stdout), float(before.stdout or 0), ok


HELD = []  # probing's own hold times in the stop measurements


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def p90(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[int(len(xs) * 0.9) - 1] if xs else float("nan")


def query_bench(python):
    p = start_target(python)
    subprocess.run([PROBING, "inject", "-p", str(p.pid)], capture_output=True, timeout=60)
    sql = "SELECT count(*) FROM python.backtrace"
    r = subprocess.run([LIVESQL, "-n", "300", str(p.pid), sql], capture_output=True,
                       text=True, timeout=120)
    m = re.search(r"median ([0-9.]+) ms, min ([0-9.]+) ms, max ([0-9.]+) ms", r.stderr)
    inproc = float(m.group(1)) if m else float("nan")
    walls = []
    for _ in range(50):
        t0 = time.monotonic()
        subprocess.run([LIVESQL, str(p.pid), sql], capture_output=True, timeout=60)
        walls.append((time.monotonic() - t0) * 1000)
    sys_only = subprocess.run([LIVESQL, "-n", "300", str(p.pid),
                               "SELECT count(*) FROM system.threads"], capture_output=True,
                              text=True, timeout=120)
    m2 = re.search(r"median ([0-9.]+) ms", sys_only.stderr)
    p.kill()
    p.wait()
    return inproc, statistics.median(walls), float(m2.group(1)) if m2 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20, help="targets per method (default 20)")
    ap.add_argument("--python", default="/usr/bin/python3")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (ptrace of other processes, gdb)")
    for f in (PROBING, AGENT, LIVESQL, INJECTLIB):
        if not os.path.exists(f):
            raise SystemExit("%s missing: run 'make all test-tools' first" % f)
    pyver = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                           capture_output=True, text=True).stdout.strip()
    print("probing injection benchmark: %d targets per method, Python %s (%s), Linux %s, %s"
          % (args.n, pyver, args.python, platform.release(), platform.machine()))
    print("(single-threaded targets; takes about a minute)\n")

    pr = [run_probing(args.python) for _ in range(args.n)]
    gd = [run_gdb(args.python) for _ in range(args.n)]
    pgap = [stop_gap(args.python, "probing") for _ in range(args.n)]
    ggap = [stop_gap(args.python, "gdb") for _ in range(args.n)]
    inproc, wall, sysq = query_bench(args.python)

    def row(name, a, b, unit="ms", ratio=True):
        r = ("%.1fx" % (b / a)) if ratio and a and a == a and b == b and a > 0 else "-"
        fa = ("%.2f %s" % (a, unit)) if a == a else "-"
        fb = ("%.2f %s" % (b, unit)) if b == b else "-"
        print("  %-46s %14s %14s %10s" % (name, fa, fb, r))

    print("  %-46s %14s %14s %10s" % ("", "probing", "gdb", "gdb/probing"))
    row("inject + first eval answer, median", med(x["latency"] for x in pr),
        med(x["latency"] for x in gd))
    row("inject + first eval answer, p90", p90([x["latency"] for x in pr]),
        p90([x["latency"] for x in gd]))
    row("target stopped (gap the target saw), median", med(g[0] for g in pgap if g[0]),
        med(g[0] for g in ggap if g[0]))
    row("target stopped (gap the target saw), max", max([g[0] for g in pgap if g[0]] or [0]),
        max([g[0] for g in ggap if g[0]] or [0]))
    row("  (same targets, gap with nobody touching)", med(g[1] for g in pgap),
        med(g[1] for g in ggap), ratio=False)
    held = [x["held"] for x in pr if x["held"] is not None] + HELD
    print("  %-46s %14s %14s" % ("probing's own hold of one thread, median",
                                 "%.2f ms" % med(held), "all threads"))
    print("  %-46s %14s" % ("probing's own hold of one thread, max", "%.2f ms" % max(held)))
    harmed_p = sum(1 for x in pr if x["harmed"]) + sum(1 for g in pgap if g[0] is None)
    harmed_g = sum(1 for x in gd if x["harmed"]) + sum(1 for g in ggap if g[0] is None)
    print("  %-46s %14s %14s" % ("targets harmed (died or stopped answering)",
                                 "%d/%d" % (harmed_p, 2 * args.n),
                                 "%d/%d" % (harmed_g, 2 * args.n)))
    errs = sorted({x["err"] for x in gd if x.get("err")})
    for e in errs[:3]:
        print("      gdb said/target died with: %s" % e)
    print()
    print("  query -p round trip (live tables, python.backtrace via the agent):")
    print("    open + query + close in one process, median   %8.3f ms" % inproc)
    print("    same on system.threads (/proc only), median    %8.3f ms" % sysq)
    print("    as a whole command (process start-up), median %8.3f ms" % wall)
    print()
    lat = med(x["latency"] for x in pr)
    stop = med(g[0] for g in pgap if g[0])
    print("goals: inject + first answer < 50 ms: %s (%.1f ms); stop < 5 ms: %s (%.2f ms); "
          "query < 5 ms: %s (%.2f ms)" % ("met" if lat < 50 else "MISSED", lat,
                                          "met" if stop < 5 else "MISSED", stop,
                                          "met" if inproc < 5 else "MISSED", inproc))


if __name__ == "__main__":
    sys.exit(main())
