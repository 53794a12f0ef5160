"""Why threads wait, read from outside without stopping them (base/taskwait + the GIL from
python/pyproc, through the pystacks test tool's --waits), against a workload whose threads wait
in known ways (tests/workloads/python/waits.py), on every interpreter."""
import os
import subprocess
import time

import harness as h

PYTHONS = h.pythons()
TOOL = os.path.join(h.BUILD, "tests", "tools", "pystacks")
WORKLOAD = os.path.join(h.PY_WORKLOADS, "python", "waits.py")


def _read(pid):
    out = h.run([TOOL, "--waits", str(pid)], check=True).stdout
    gil, threads = None, {}
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "G":
            gil = (int(f[1], 16), int(f[2], 16), int(f[3], 16))
        elif f[0] == "W":
            threads[f[2]] = {"tid": int(f[1]), "state": f[3], "class": f[4], "desc": f[5],
                             "holds": f[6] == "1"}
    return gil, threads


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_waits_of_threads_in_known_ways(exe):
    p = h.spawn([exe, WORKLOAD], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    seen = {name: set() for name in ("spin-0", "spin-1", "sleeper", "waiter", "reader")}
    holders = set()
    for _ in range(40):
        (lo, hi, holder), threads = _read(p.pid)
        assert lo and hi - lo == 208, (lo, hi)  # the GIL struct: 208 bytes on 3.8-3.13
        for name in seen:
            seen[name].add(threads[name]["class"])
        # Who holds the GIL: nobody, or one of the threads that want it, never a thread
        # that released it to wait.
        held = [n for n, t in threads.items() if t["holds"]]
        assert len(held) <= 1, threads
        assert not set(held) & {"sleeper", "waiter", "reader"}, threads
        holders.update(held)
        assert threads["sleeper"]["desc"] in ("clock_nanosleep", "pselect6", "select"), threads
        time.sleep(0.02)
    # Each blocked thread always in its own class (a thread that wakes needs the GIL first,
    # but these never wake).
    assert seen["sleeper"] == {"sleep"}, seen
    assert seen["waiter"] == {"lock"}, seen
    assert seen["reader"] == {"io"}, seen
    # The two spinners hand the GIL to each other: each is seen waiting for it and running.
    for name in ("spin-0", "spin-1"):
        assert "gil" in seen[name], seen
        assert seen[name] <= {"gil", "running"}, seen
    assert holders & {"spin-0", "spin-1"}, holders
