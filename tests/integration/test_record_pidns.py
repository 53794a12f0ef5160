"""probing record across PID namespaces, made with unshare(1) (no container runtime needed).

Inside a namespace (a container) the recorder numbers pids as the namespace does, like its
/proc; the kernel's numbers differ. From the host, a process in a container is recorded
under its host pid, with the numbers it sees itself in processes.ns_pid and threads.ns_tid.
Ground truth: the workloads print their thread ids as they see them (gettid,
threading.get_native_id) with the thread names.
"""
import os
import subprocess

import harness as h

PY = h.pythons()[-1][1] if h.pythons() else "python3"
THREADS_PY = os.path.join(h.PY_WORKLOADS, "python", "threads.py")
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def names_of(path):
    """{tid: name} from "TID NAME" lines."""
    return {int(t): n for t, n in (line.split() for line in open(path) if line.strip())}


def per_thread(con):
    """{tid: (thread name, samples)}."""
    return {tid: (name, n) for tid, name, n in con.execute(
        "SELECT tid, thread, SUM(count) FROM samples GROUP BY tid")}


def test_record_inside_a_pid_namespace():
    """`unshare -p -f --mount-proc probing record --children -- sh -c 'python ...'`: the
    child the shell starts is followed and sampled with its Python frames, under the tids
    it printed itself (the namespace's), with its threading names."""
    out, truth = h.tmp("ns.db"), h.tmp("tids.txt")
    p = h.run(UNSHARE + [h.PROBING, "record", "-F", "499", "--children", "-o", out, "--",
                         "/bin/sh", "-c", f"{PY} {THREADS_PY} 1.5 > {truth}; true"],
              timeout=60)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    names, seen = names_of(truth), per_thread(con)
    assert len(names) == 3, names
    for tid, name in names.items():
        assert tid in seen and seen[tid][0] == name and seen[tid][1] > 10, \
            f"tid {tid} ({name}): {seen.get(tid)}; recorded: {seen}"
    funcs = {f for (f,) in con.execute("SELECT DISTINCT func FROM frames WHERE kind='python'")}
    assert {"alpha_work", "beta_work", "gamma_work"} <= funcs, funcs
    procs = con.execute("SELECT pid, ppid, command, ns_pid FROM processes").fetchall()
    shell = [r for r in procs if r[2] and r[2].startswith("/bin/sh -c")]
    python = [r for r in procs if r[2] and THREADS_PY in r[2] and not r[2].startswith("/bin/sh")]
    assert len(shell) == 1 and len(python) == 1, procs
    assert python[0][1] == shell[0][0], f"the python's parent is not the shell: {procs}"
    assert all(r[3] is None for r in procs), f"ns_pid set in the recorder's own namespace: {procs}"


def test_record_pid_inside_a_pid_namespace():
    """`record -p PID` inside a namespace: PID is the namespace's."""
    out, truth = h.tmp("ns.db"), h.tmp("tids.txt")
    script = (f"{h.workload('threads')} 5 > {truth} & sleep 0.3; "
              f"{h.PROBING} record -F 499 -d 1.5 -p $! -o {out}")
    p = h.run(UNSHARE + ["/bin/sh", "-c", script], timeout=60)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    names, seen = names_of(truth), per_thread(con)
    for tid, name in names.items():
        assert tid in seen and seen[tid][0] == name and seen[tid][1] > 10, \
            f"tid {tid} ({name}): {seen.get(tid)}; recorded: {seen}"


def test_record_container_from_the_host():
    """`record -p HOSTPID` of a process in its own PID namespace: stored under the host
    pid; its own pid (1) and tids in ns_pid and ns_tid; its Python thread names, which
    Python keys by the tids it sees, are found."""
    target = h.spawn(UNSHARE + [PY, THREADS_PY, "4"], stdout=subprocess.PIPE, text=True)
    names = {}
    for _ in range(3):
        tid, name = target.stdout.readline().split()
        names[int(tid)] = name
    kids = open(f"/proc/{target.pid}/task/{target.pid}/children").read().split()
    assert len(kids) == 1, kids
    pid = int(kids[0])
    out = h.tmp("host.db")
    p = h.probing("record", "-F", 499, "-d", 1.5, "-p", pid, "-o", out)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    row = con.execute("SELECT pid, ns_pid FROM processes").fetchall()
    assert row == [(pid, 1)], row
    threads = {ns_tid: (tid, name) for tid, name, ns_tid in con.execute(
        "SELECT tid, name, ns_tid FROM threads WHERE pid = ?", (pid,))}
    seen = per_thread(con)
    for ns_tid, name in names.items():
        assert ns_tid in threads, f"no thread with ns_tid {ns_tid}: {threads}"
        tid, recorded = threads[ns_tid]
        assert recorded == name and tid != ns_tid and seen[tid][1] > 10, \
            f"ns tid {ns_tid} ({name}): recorded as tid {tid} {recorded!r}, {seen.get(tid)}"
