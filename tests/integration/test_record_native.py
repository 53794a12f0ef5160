"""probing record on native workloads with known ground truth (tests/workloads/native/).

The workloads are built -O2 without frame pointers, so every complete chain proves DWARF
unwinding from the copied stack.
"""
import hashlib
import os
import signal
import sqlite3
import subprocess
import time

import harness as h


def record(args, *cmd, freq=999, timeout=60):
    out = h.tmp("rec.db")
    p = h.probing("record", "-F", freq, "-o", out, *args, *(("--",) + cmd if cmd else ()),
                  timeout=timeout)
    assert p.returncode == 0, f"record failed ({p.returncode}): {p.stderr}"
    return out


def leaf_counts(con):
    counts = {}
    for n, chain, _ in h.stacks(con):
        if chain:
            counts[chain[-1]] = counts.get(chain[-1], 0) + n
    return counts


def test_split_60_40():
    db = record([], h.workload("split"), "4")
    con = h.db(db)
    c = leaf_counts(con)
    a, b = c.get("leaf_a", 0), c.get("leaf_b", 0)
    assert a + b > 1000, f"too few samples in the leaves: {c}"
    share = 100.0 * a / (a + b)
    assert abs(share - 60) <= 3, f"leaf_a share {share:.1f}% (want 60 +- 3): {c}"
    # Both leaves are called from main, in the workload's own binary.
    for n, chain, _ in h.stacks(con):
        if chain and chain[-1] in ("leaf_a", "leaf_b"):
            assert chain[-2] == "main", chain


def test_deep_recursion_complete_chains():
    db = record([], h.workload("deep"), "3")
    con = h.db(db)
    total = complete = 0
    for n, chain, _ in h.stacks(con):
        if not chain or chain[-1] != "deep_leaf":
            continue
        total += n
        # root first: _start, libc start frames, main, 48 x recurse, deep_leaf
        i = chain.index("main") if "main" in chain else -1
        if (chain[0] == "_start" and i >= 0 and chain[i + 1:-1] == ["recurse"] * 48):
            complete += n
    assert total > 500, f"only {total} samples in deep_leaf"
    assert complete >= 0.995 * total, f"{complete}/{total} samples carry the whole chain"


def test_complete_chains_from_the_first_samples():
    """A launched process is recorded from exec on, before ld.so has mapped its libraries:
    samples taken while libc appears must still unwind through it to _start (the maps are
    re-read, and the stack unwound again, when an unwind stops at an address in no known
    module). Short runs (0.3 s of CPU time, whatever the load), so that start-up is a large
    share of the samples."""
    for run in range(6):
        db = record([], h.workload("deep"), "0.3", "cpu")
        con = h.db(db)
        total = bad = 0
        worst = None
        for n, chain, _ in h.stacks(con):
            if not chain or chain[-1] != "deep_leaf":
                continue
            total += n
            if chain[0] != "_start" or "main" not in chain:
                bad += n
                worst = chain[:4]
        assert total > 100, f"run {run}: only {total} samples in deep_leaf"
        assert bad <= 1, f"run {run}: {bad}/{total} deep_leaf samples stop early: {worst}..."


def test_shared_library_function():
    db = record([], h.workload("shared"), "2")
    con = h.db(db)
    rows = con.execute(
        "SELECT module, SUM(count) FROM samples JOIN frames USING(stack_id) "
        "WHERE depth = 0 AND func = 'shared_leaf' GROUP BY module").fetchall()
    assert len(rows) == 1, rows
    module, n = rows[0]
    assert module.endswith("/libwlshared.so"), module
    total = h.total_samples(con)
    assert n >= 0.95 * total, f"{n}/{total} samples in shared_leaf"
    # Caller is main of the executable.
    callers = con.execute(
        "SELECT f1.func, f1.module FROM samples s JOIN frames f0 ON f0.stack_id = s.stack_id "
        "AND f0.depth = 0 JOIN frames f1 ON f1.stack_id = s.stack_id AND f1.depth = 1 "
        "WHERE f0.func = 'shared_leaf' GROUP BY 1, 2").fetchall()
    assert [c[0] for c in callers] == ["main"], callers
    assert callers[0][1].endswith("/workloads/shared"), callers


def test_inlined_function_is_its_own_frame():
    db = record([], h.workload("inlined"), "2")
    con = h.db(db)
    src = os.path.join(h.ROOT, "tests/workloads/native/inlined.c")
    hot_line = [i + 1 for i, l in enumerate(open(src)) if "HOT_INLINE_LINE" in l][0]
    total = hot = 0
    for n, chain, sid in h.stacks(con):
        total += n
        if chain[-3:] == ["main", "outer_work", "hot_inline"]:
            hot += n
    assert hot >= 0.9 * total, f"{hot}/{total} samples in hot_inline <- outer_work <- main"
    lines = dict(con.execute(
        "SELECT lineno, SUM(count) FROM samples JOIN frames USING(stack_id) "
        "WHERE depth = 0 AND func = 'hot_inline' GROUP BY lineno").fetchall())
    # The loop body and its header share the samples; the body line must be among them.
    assert hot_line in lines, f"line {hot_line} not in {lines}"
    files = {r[0] for r in con.execute(
        "SELECT DISTINCT file FROM frames WHERE func IN ('hot_inline', 'outer_work')")}
    assert files == {src} or all(f.endswith("inlined.c") for f in files), files


def test_cpp_template_demangled():
    db = record([], h.workload("templ"), "2")
    con = h.db(db)
    c = leaf_counts(con)
    wi = c.get("wl::Worker<int>::spin(int)", 0)
    wd = c.get("wl::Worker<double>::spin(int)", 0)
    assert wi > 100 and wd > 100, c
    assert wi + wd >= 0.95 * sum(c.values()), c


def test_threads_attributed_per_thread():
    out = h.tmp("rec.db")
    target = h.spawn([h.workload("threads"), "3"], stdout=subprocess.PIPE, text=True)
    names = {}
    for _ in range(3):
        tid, name = target.stdout.readline().split()
        names[int(tid)] = name
    p = h.probing("record", "-F", 999, "-d", 2, "-p", target.pid, "-o", out)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    want = {"wl-alpha": "alpha_work", "wl-beta": "beta_work", "wl-gamma": "gamma_work"}
    seen = {}
    for tid, thread, n, leaf in con.execute(
            "SELECT s.tid, s.thread, s.count, "
            "(SELECT group_concat(func, ';') FROM frames f WHERE f.stack_id = s.stack_id) "
            "FROM samples s"):
        if tid not in names:
            continue
        assert thread == names[tid], f"tid {tid} named {thread!r}, expected {names[tid]!r}"
        work = want[names[tid]]
        funcs = leaf.split(";")
        wrong = [w for w in want.values() if w != work and w in funcs]
        assert not wrong, f"thread {names[tid]} has a sample in {wrong}: {funcs}"
        if work in funcs:
            seen[names[tid]] = seen.get(names[tid], 0) + n
    assert set(seen) == set(want), f"threads with samples in their own work: {seen}"
    assert all(v > 150 for v in seen.values()), seen


def test_dlopen_mid_run():
    plugin = h.workload("libwlplugin.so")
    db = record([], h.workload("dlopen"), plugin, "1", "2")
    con = h.db(db)
    rows = con.execute(
        "SELECT module, SUM(count) FROM samples JOIN frames USING(stack_id) "
        "WHERE func = 'plugin_work' GROUP BY module").fetchall()
    assert rows and rows[0][0] == plugin, rows
    # (absolute counts depend on how much CPU the machine gives the workload)
    assert rows[0][1] > 300, f"only {rows[0][1]} samples in plugin_work"
    # A leaf without a name: none but in the vDSO's local functions (x86's vread_pvclock,
    # called by __vdso_clock_gettime: its image has no symbol for them, as perf finds too),
    # which a VM whose clock is read slowly samples often (31 of ~3,000 once, under load).
    unknown = con.execute(
        "SELECT SUM(count) FROM samples s JOIN frames f USING(stack_id) "
        "WHERE f.depth = 0 AND f.func LIKE '[%' AND NOT (f.module = '[vdso]' AND "
        "(SELECT c.func FROM frames c WHERE c.stack_id = s.stack_id AND c.depth = 1) "
        "LIKE '\\_\\_vdso\\_%' ESCAPE '\\')").fetchone()[0] or 0
    assert unknown <= 0.01 * h.total_samples(con), f"{unknown} samples with an unknown leaf"


def test_plt_stubs_named():
    """A sample in a PLT stub is named after the function it jumps to, as perf and objdump
    name it: the plt workload calls plt_step() of libwlplt.so through its PLT in a loop, so
    0.4-3 % of its samples are in the stub (where this guest delivers the timer's interrupt
    decides how many land on a two-instruction stub), each under call_loop. The bar is a
    count, not a share: enough samples in the stub that a wrong name would be seen."""
    db = record(["-d", 3], h.workload("plt"), "3")
    con = h.db(db)
    leaves = {}
    for n, chain, _ in h.stacks(con):
        if chain and chain[-1].endswith("@plt") or chain and chain[-1] == "[plt]":
            key = (chain[-1], chain[-2] if len(chain) > 1 else None)
            leaves[key] = leaves.get(key, 0) + n
    total = h.total_samples(con)
    stub = leaves.get(("plt_step@plt", "call_loop"), 0)
    assert stub >= 10, f"{stub}/{total} samples in plt_step@plt: {leaves}"
    # The only other stub on the loop is wl_now's clock_gettime@plt; the unnamed PLT0 (the
    # lazy binder's entry) runs once per function.
    other = {k: v for k, v in leaves.items()
             if k not in (("plt_step@plt", "call_loop"), ("clock_gettime@plt", "wl_now"))}
    assert sum(other.values()) <= 2, other


def test_kernel_stacks():
    db = record(["--kernel"], "/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "count=3000")
    con = h.db(db)
    kinds = dict(con.execute(
        "SELECT kind, COUNT(*) FROM frames GROUP BY kind").fetchall())
    assert kinds.get("kernel", 0) > 0, kinds
    # Kernel frames sit below (leafward of) the user frames: depth 0 is kernel when present.
    bad = con.execute(
        "SELECT COUNT(*) FROM frames k JOIN frames u ON u.stack_id = k.stack_id "
        "WHERE k.kind = 'kernel' AND u.kind = 'native' AND u.depth < k.depth").fetchone()[0]
    assert bad == 0, f"{bad} native frames leafward of kernel frames"


def test_target_exits_mid_recording():
    """A target that exits 3 s in: the recording ends with it (not at -d 30) and keeps its
    samples and its end. (1.5 s was once shorter than the recorder's start on a loaded
    machine: "exited before recording started".)"""
    target = h.spawn([h.workload("split"), "3"])
    time.sleep(0.2)
    out = h.tmp("rec.db")
    t0 = time.monotonic()
    p = h.probing("record", "-F", 499, "-d", 30, "-p", target.pid, "-o", out)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert took < 8, f"record kept going {took:.1f}s after the target exited"
    con = h.db(out)
    assert h.total_samples(con) > 300
    end = con.execute("SELECT end_time FROM processes WHERE pid = ?", (target.pid,)).fetchone()
    assert end and end[0], "the process's end time was not recorded"
    assert "recorded" in p.stderr, p.stderr


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def cpu_seconds(pid):
    """User + system CPU time of process @pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def partial_samples(path):
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        return con.execute("SELECT SUM(count) FROM samples").fetchone()[0] or 0
    except sqlite3.Error:
        return 0


def test_sigkill_of_recorder_leaves_readable_file():
    target = h.spawn([h.workload("split"), "30"])
    out = h.tmp("rec.db")
    partial = out + ".partial"
    with open(out, "w") as f:
        f.write("an older recording")
    rec = h.spawn([h.PROBING, "record", "-F", "999", "-p", str(target.pid), "-o", out])
    # From the first flush on, every second the target spends on a CPU is in the file
    # (999 samples each), but for the last second before the kill (flushed once a second).
    h.wait_for(lambda: partial_samples(partial) > 0, timeout=20, what="a first flush")
    t0, c0 = time.monotonic(), cpu_seconds(target.pid)
    time.sleep(2.5)
    t1, c1 = time.monotonic(), cpu_seconds(target.pid)
    rec.send_signal(signal.SIGKILL)
    rec.wait()
    # The recording in progress is OUT.partial; OUT is replaced only once it is complete.
    assert open(out).read() == "an older recording"
    before = {s: sha256(partial + s) for s in ("", "-wal")}
    # A new recording does not reuse or overwrite the killed one's data.
    p = h.probing("record", "-d", 1, "-p", target.pid, "-o", out)
    assert p.returncode == 1 and "rec.db.partial already exists" in p.stderr, p.stderr
    assert {s: sha256(partial + s) for s in ("", "-wal")} == before
    con = sqlite3.connect(f"file:{partial}?mode=ro", uri=True)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    n = con.execute("SELECT SUM(count) FROM samples").fetchone()[0] or 0
    cpu = c1 - c0
    flushed_cpu = cpu - cpu / (t1 - t0) * 1.0  # the CPU time of all but the last second
    assert cpu > 0.2, f"the target hardly ran ({cpu:.2f} s of CPU): machine overloaded?"
    assert n >= 0.8 * 999 * flushed_cpu, f"only {n} samples survived ({cpu:.2f} s of CPU)"
    frames = con.execute("SELECT COUNT(*) FROM frames").fetchone()[0]
    assert frames > 0


def test_sigint_saves_everything():
    target = h.spawn([h.workload("split"), "30"])
    out = h.tmp("rec.db")
    rec = h.spawn([h.PROBING, "record", "-F", "999", "-p", str(target.pid), "-o", out],
                  stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=20)
    assert rec.returncode == 0, err
    assert not os.path.exists(out + "-wal") or os.path.getsize(out + "-wal") == 0
    con = h.db(out)
    n = h.total_samples(con)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert int(meta["samples"]) == n, (meta["samples"], n)
    assert n >= 500, n
    assert target.poll() is None, "the target must keep running after recording"


# ---- bad input ------------------------------------------------------------------------------
def bad(*args, code=1, want=()):
    p = h.probing("record", *args)
    assert p.returncode == code, f"exit {p.returncode}, want {code}: {p.stderr}"
    assert p.stdout == "", f"stdout must stay empty: {p.stdout!r}"
    for w in want:
        assert w in p.stderr, f"{w!r} not in: {p.stderr}"
    assert "Traceback" not in p.stderr and "Assertion" not in p.stderr
    return p


def test_bad_pid_does_not_exist():
    bad("-p", "999999", "-o", h.tmp("x.db"), want=("no such process: 999999",))
    assert not os.path.exists(h.tmp("x.db"))


def test_bad_pid_zombie_or_exiting():
    # A child that exited but was not reaped is a zombie: nothing to record.
    z = subprocess.Popen(["/bin/true"])
    h.wait_for(lambda: open(f"/proc/{z.pid}/stat").read().split(")")[-1].split()[0] == "Z",
               what="zombie")
    bad("-p", z.pid, "-o", h.tmp("x.db"), want=("exited",))
    z.wait()
    # A process that exits while the recorder starts: a clear message, or an empty recording.
    for _ in range(3):
        t = subprocess.Popen(["/bin/sleep", "0.05"])
        p = h.probing("record", "-p", t.pid, "-o", h.tmp("y.db"), "-d", 5)
        t.wait()
        assert p.returncode in (0, 1), p.stderr
        if p.returncode == 1:
            assert "exited" in p.stderr or "no such process" in p.stderr, p.stderr
        else:
            assert "recorded" in p.stderr


def test_bad_kernel_thread():
    # A kernel thread has no user space: refused, unless its kernel stacks are wanted.
    bad("-p", "2", "-o", h.tmp("x.db"), "-d", "0.3", want=("kernel thread", "--kernel"))
    assert not os.path.exists(h.tmp("x.db"))
    p = h.probing("record", "-p", "2", "--kernel", "-d", "0.3", "-o", h.tmp("k.db"))
    assert p.returncode == 0, p.stderr
    n = h.total_samples(h.db(h.tmp("k.db")))
    assert n > 0 or "did not run on a CPU" in p.stderr, p.stderr


def test_bad_pid_and_command():
    target = h.spawn([h.workload("split"), "10"])
    bad("-p", target.pid, "-o", h.tmp("x.db"), "--", "/bin/true", code=2,
        want=("not both", "-d SECONDS"))
    assert not os.path.exists(h.tmp("x.db")) and target.poll() is None


def test_no_samples_says_why():
    # A live target that sleeps the whole time: an empty recording, and the reason.
    sleeper = h.spawn(["sleep", "30"])
    p = h.probing("record", "-p", sleeper.pid, "-d", "0.5", "-o", h.tmp("idle.db"))
    assert p.returncode == 0, p.stderr
    assert "did not run on a CPU" in p.stderr and "sleeping" in p.stderr, p.stderr
    # A command that is gone within a sampling period. /bin/true runs about a millisecond (more
    # on a loaded machine, exec included): at 1 Hz a tick catches it rarely, and it runs until
    # one recording is empty, and that one must say why.
    for _ in range(10):
        p = h.probing("record", "-F", "1", "-o", h.tmp("short.db"), "--", "/bin/true")
        assert p.returncode == 0, p.stderr
        if "recorded 0 samples" in p.stderr:
            break
    assert "exited after" in p.stderr and "sampling period" in p.stderr, p.stderr


def test_bad_not_root():
    p = h.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
               h.PROBING, "record", "-p", "1", "-o", "/tmp/never.db"])
    assert p.returncode == 1, p.stderr
    for cap in ("CAP_BPF", "CAP_PERFMON", "sudo"):
        assert cap in p.stderr, p.stderr


def test_bad_flags_and_values():
    bad("--bogus", code=2, want=("unknown option '--bogus'", "--help"))
    bad("-F", "0", "-p", "1", code=2, want=("frequency",))
    bad("-F", "1000000", "-p", "1", code=2, want=("frequency",))
    bad("-F", "abc", "-p", "1", code=2, want=("frequency",))
    bad("-d", "-3", "-p", "1", code=2, want=("duration",))
    bad("--stack-size", "1K", "-p", "1", code=2, want=("stack size",))
    bad("--stack-size", "1M", "-p", "1", code=2, want=("stack size",))
    bad("-p", "12abc", code=2, want=("not a PID",))
    bad(code=2, want=("say what to record",))
    bad("-p", code=2, want=("needs a value",))


def test_bad_output_path():
    target = h.spawn([h.workload("split"), "10"])
    bad("-p", target.pid, "-o", "/nonexistent/dir/x.db", want=("/nonexistent/dir/x.db",))
    bad("-p", target.pid, "-o", h.tmp(), want=("directory",))
    assert target.poll() is None


def test_bad_command():
    bad("-o", h.tmp("x.db"), "--", "/no/such/program", want=("cannot run", "/no/such/program"))
    assert not os.path.exists(h.tmp("x.db"))


def test_help():
    p = h.probing("record", "--help")
    assert p.returncode == 0 and "Usage: probing record" in p.stdout
    for opt in ("-p", "-F", "-d", "-o", "--stack-size", "--kernel", "--children"):
        assert opt in p.stdout


def test_children_followed():
    # The shell starts two workloads after recording began; --children records them too.
    split, deep = h.workload("split"), h.workload("deep")
    db = record(["--children"], "/bin/sh", "-c", f"sleep 0.3; {split} 1.5 & {deep} 1.5; wait")
    con = h.db(db)
    cmds = {r[0] for r in con.execute("SELECT command FROM processes")}
    assert any(c.startswith(split) for c in cmds) and any(c.startswith(deep) for c in cmds), cmds
    leaves = leaf_counts(con)
    assert leaves.get("deep_leaf", 0) > 200 and leaves.get("leaf_a", 0) > 100, leaves
    # Without --children only the shell itself is recorded.
    db = record([], "/bin/sh", "-c", f"{split} 0.5; true")
    leaves = leaf_counts(h.db(db))
    assert "leaf_a" not in leaves, leaves
    procs = h.db(db).execute("SELECT COUNT(*) FROM processes").fetchone()[0]
    assert procs == 1, procs


def test_children_churn_ground_truth():
    """Threads and processes that come and go within milliseconds, with --children: every
    process has its row (command, parent, end time after its last act), every thread its
    own name, although most are gone before the recorder handles their samples."""
    truth = h.tmp("truth.txt")
    db = record(["--children"], h.workload("churn"), "2", truth)
    con = h.db(db)
    names, last_act = {}, {}
    for line in open(truth):
        f = line.split()
        if f[0] == "T":
            names[(int(f[1]), int(f[2]))] = f[3]
        else:
            last_act[int(f[1])] = float(f[2])
    main = min(last_act)
    procs = {pid: (ppid, cmd, end) for pid, ppid, cmd, end in con.execute(
        "SELECT pid, ppid, command, end_time FROM processes")}
    sampled = {pid for (pid,) in con.execute("SELECT DISTINCT pid FROM sample_counts")}
    assert len(last_act) >= 6, f"only {len(last_act)} processes: the workload barely ran"
    assert not sampled - set(procs), f"sampled pids without a row: {sampled - set(procs)}"
    assert not set(last_act) - set(procs), f"followed processes without a row: " \
        f"{set(last_act) - set(procs)}"
    end = dict(con.execute("SELECT key, value FROM meta"))["end"]
    # Each process ended after its last act (mode 1: after its last thread, not its leader).
    bad_end = {pid: (procs[pid][2], t) for pid, t in last_act.items()
               if procs[pid][2] is None or not t - 0.005 <= procs[pid][2] <= end + 0.005}
    assert not bad_end, f"processes without a right end_time (end_time, last act): {bad_end}"
    for pid in last_act:
        if pid == main:
            continue
        ppid, cmd, _ = procs[pid]
        assert ppid == main, f"process {pid}: ppid {ppid}, want {main}"
        exec_round = [n for (p, t), n in names.items() if p == pid and n.startswith("exec-")]
        if exec_round:  # the exec'd command line, even when it was gone within milliseconds
            assert f"--exec-child {exec_round[0][5:]} " in (cmd or ""), (pid, cmd)
        else:
            assert cmd and cmd.startswith(h.workload("churn")), (pid, cmd)
    rows = con.execute("SELECT pid, tid, name FROM threads").fetchall()
    misnamed = [(p, t, n, names.get((p, t))) for p, t, n in rows if names.get((p, t)) != n]
    assert len(rows) >= 20 and not misnamed, \
        f"{len(misnamed)} of {len(rows)} threads misnamed (pid, tid, recorded, true): " \
        f"{misnamed[:8]}"
    # Forked children that never exec'd are unwound with their parent's view of the memory
    # maps (most are gone before the recorder could read theirs): each sample has its
    # native stack, and the right one.
    execd = {p for (p, _), n in names.items() if n.startswith("exec-")}
    forked = set(last_act) - {main} - execd
    chains = {}
    for sid, func in con.execute("SELECT stack_id, func FROM frames ORDER BY stack_id, depth DESC"):
        chains.setdefault(sid, []).append(func)
    total = spin = 0
    no_stack, wrong = [], []
    for pid, tid, sid, n in con.execute(
            "SELECT pid, tid, stack_id, SUM(count) FROM samples GROUP BY pid, tid, stack_id"):
        if pid not in forked:
            continue
        chain, name = chains.get(sid, []), names.get((pid, tid), "")
        total += n
        if not chain or chain[0].startswith("[unknown"):
            no_stack.append((n, name, chain, pid))
        elif "spin" in chain:
            i = chain.index("spin")
            want = ("_start", ["main", "child"]) if name.startswith("proc-") else \
                ("clone3", ["start_thread", "thread_main"])
            if chain[0] == want[0] and chain[i - 2:i] == want[1]:
                spin += n
            else:
                wrong.append((n, name, chain))
    assert total > 100, f"only {total} samples of forked children"
    # A child whose main thread leaves first (mode 1: pthread_exit while its two threads
    # spin) has a sample or two without a user stack as its threads exit (its leader gone):
    # seen in mode 1 only, at most 2 a child in 6 runs (and 10 in 859 samples once, over the
    # 1 % the others are held to). Bounded per such child; every other child's are held to 1 %.
    leaders_left = {pid for (pid, tid), n in names.items()
                    if pid == tid and n.startswith("proc-") and int(n[5:]) % 3 == 1}
    exiting = [x for x in no_stack if x[3] in leaders_left]
    no_stack = [x for x in no_stack if x[3] not in leaders_left]
    assert sum(n for n, *_ in exiting) <= 3 * len(leaders_left), \
        f"{sum(n for n, *_ in exiting)} samples of {len(leaders_left)} children whose leader " \
        f"left first have no native stack: {exiting[:5]}"
    assert sum(n for n, *_ in no_stack) <= max(1, total // 100), \
        f"{sum(n for n, *_ in no_stack)} of {total} samples of forked children have no " \
        f"native stack: {no_stack[:5]}"
    # Most of the children's time is their spin; the rest is fork's return in the child,
    # thread creation and exit (libgcc_s loaded by pthread_exit in mode 1), which take longer
    # where entering the kernel costs more: 75-79 % in spin on a VM with page-table isolation
    # on (2 vCPUs, idle), 80-90 % on others. A sample misplaced under the parent's view of the
    # memory would fall outside spin, or under wrong callers (wrong).
    assert not wrong and spin >= 0.6 * total, \
        f"{spin} of {total} samples of forked children in spin with its callers; wrong: " \
        f"{wrong[:5]}"


def test_children_dlopen_after_fork():
    """A forked child unwound with its parent's view loads a library of its own: its
    samples there are resolved from its own maps, read when an address falls outside the
    parent's (plugin_work in libwlplugin.so, which the parent never maps)."""
    plugin = h.workload("libwlplugin.so")
    db = record(["--children"], h.workload("dlopen"), plugin, "0.3", "0.7", "fork")
    con = h.db(db)
    parent = con.execute("SELECT MIN(pid) FROM processes").fetchone()[0]
    n = bad = 0
    for count, chain, _ in h.stacks(con):
        if chain and chain[-1] == "plugin_work":
            n += count
            if chain[0] != "_start" or chain[-2:] != ["main", "plugin_work"]:
                bad += count
    pids = {p for (p,) in con.execute(
        "SELECT DISTINCT pid FROM samples JOIN frames USING(stack_id) "
        "WHERE func = 'plugin_work'")}
    assert n > 50 and parent not in pids and len(pids) == 1, (n, pids, parent)
    assert bad <= 1, f"{bad} of {n} samples in plugin_work without their callers"
    child = pids.pop()
    unknown = con.execute(
        "SELECT SUM(count) FROM samples JOIN frames USING(stack_id) "
        "WHERE pid = ? AND func LIKE '[unknown%'", (child,)).fetchone()[0] or 0
    assert unknown <= 1, f"{unknown} samples of the child with an unknown frame"


def test_several_pids():
    a = h.spawn([h.workload("split"), "5"])
    b = h.spawn([h.workload("deep"), "5"])
    out = h.tmp("rec.db")
    p = h.probing("record", "-F", 499, "-d", 1.5, "-p", f"{a.pid},{b.pid}", "-o", out)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    per_pid = dict(con.execute("SELECT pid, SUM(count) FROM samples GROUP BY pid").fetchall())
    assert set(per_pid) == {a.pid, b.pid}, per_pid
    assert all(n > 100 for n in per_pid.values()), per_pid


def test_bpf_run_time_in_meta_when_accounted():
    """With kernel.bpf_stats_enabled=1 the sampling program's run time is stored; without,
    nothing is (no made-up zero). The target runs for 1 s of its own CPU time, not of wall
    time: ~999 samples however busy the machine is."""
    path = "/proc/sys/kernel/bpf_stats_enabled"
    old = open(path).read().strip()
    try:
        open(path, "w").write("1")
        con = h.db(record([], h.workload("split"), "1", "cpu"))
        meta = dict(con.execute("SELECT key, value FROM meta"))
        samples = int(meta["samples"])
        assert int(meta["bpf_runs"]) >= samples > 500, meta
        ns = int(meta["bpf_run_ns"])
        assert 0 < ns < 1e9, ns  # well under a second for ~1 s of samples
        open(path, "w").write("0")
        con = h.db(record([], h.workload("split"), "0.3"))
        keys = {k for (k,) in con.execute("SELECT key FROM meta")}
        assert "bpf_run_ns" not in keys and "bpf_runs" not in keys, keys
    finally:
        open(path, "w").write(old)
