"""probing record on Python workloads with known ground truth (tests/workloads/python/), for
every interpreter on the machine: pyenv 3.8-3.13 and Debian's stripped python3.11.

What "known" means here: the workloads mark their lines ("# @name"), name their threads and
print their thread ids; the tests compare the recorded Python chains, lines, thread
attribution and the native frames under Python frames with that.
"""
import collections
import os
import re
import shutil
import subprocess
import time

import harness as h

PYDIR = os.path.join(h.ROOT, "tests", "workloads", "python")
PYTHONS = h.pythons()
IDS = [label for label, _ in PYTHONS]


def marker(path, name):
    """Line number of '# @name' (or '@name' inside a comment) in @path."""
    pat = re.compile(r"#.*@" + re.escape(name) + r"\b")
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        if pat.search(line):
            return i
    raise AssertionError(f"no marker @{name} in {path}")


def record(py, script, *args, opts=(), freq=499, timeout=120):
    out = h.tmp("rec.db")
    p = h.probing("record", "-F", freq, "-o", out, *opts, "--", py, script, *args,
                  timeout=timeout)
    assert p.returncode == 0, f"record failed ({p.returncode}): {p.stderr}"
    return h.db(out)


def samples(con, where="1", args=()):
    """[(count, tid, thread, [frames root-first as dict])] for each (thread, stack)."""
    frames = {}
    for sid, kind, func, qual, file, line, module in con.execute(
            "SELECT stack_id, kind, func, qualname, file, lineno, module FROM frames "
            "ORDER BY stack_id, depth DESC"):
        frames.setdefault(sid, []).append(dict(kind=kind, func=func, qual=qual, file=file,
                                               line=line, module=module or ""))
    out = []
    for n, tid, thread, sid in con.execute(
            f"SELECT count, tid, thread, stack_id FROM samples WHERE {where}", args):
        out.append((n, tid, thread, frames.get(sid, [])))
    return out


def pychain(frames):
    return [f for f in frames if f["kind"] == "python"]


def version_of(py):
    out = subprocess.run([py, "-c", "import sys; print(sys.version_info[1])"],
                         capture_output=True, text=True).stdout
    return int(out)


@h.params([p for _, p in PYTHONS], IDS)
def test_known_chain_lines_and_split(py):
    script = os.path.join(PYDIR, "split.py")
    con = record(py, script, "4")
    want_lines = {"<module>": marker(script, "call_main"), "main": marker(script, "call_run")}
    a = b = exact = lines_ok = 0
    for n, _, _, frames in samples(con):
        chain = pychain(frames)
        if not chain or chain[-1]["func"] not in ("work_a", "work_b"):
            continue
        leaf = chain[-1]["func"]
        if leaf == "work_a":
            a += n
        else:
            b += n
        names = [f["func"] for f in chain]
        call = marker(script, "call_a" if leaf == "work_a" else "call_b")
        if (names == ["<module>", "main", "run", leaf]
                and chain[0]["line"] == want_lines["<module>"]
                and chain[1]["line"] == want_lines["main"] and chain[2]["line"] == call
                and all(f["file"] == script for f in chain)):
            exact += n
        if chain[-1]["line"] == marker(script, "leaf_a" if leaf == "work_a" else "leaf_b"):
            lines_ok += n
    total = a + b
    assert total > 500, f"only {total} samples in work_a/work_b"
    assert exact >= 0.99 * total, f"exact chain in {exact}/{total} samples"
    assert lines_ok >= 0.99 * total, f"right leaf line in {lines_ok}/{total} samples"
    share = 100.0 * a / total
    assert abs(share - 60) <= 3, f"work_a share {share:.1f}% (want 60 +- 3)"
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta.get("python_versions", "").startswith("3."), meta
    pv = con.execute("SELECT python_version FROM processes").fetchone()[0]
    assert pv and pv.startswith(f"3.{version_of(py)}"), pv


@h.params([p for _, p in PYTHONS], IDS)
def test_threads_attributed(py):
    out = h.tmp("rec.db")
    target = h.spawn([py, os.path.join(PYDIR, "threads.py"), "4"], stdout=subprocess.PIPE,
                     text=True)
    names = {}
    for _ in range(3):
        tid, name = target.stdout.readline().split()
        names[int(tid)] = name
    p = h.probing("record", "-F", 499, "-d", 2, "-p", target.pid, "-o", out)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    own = {"py-alpha": "alpha", "py-beta": "beta", "py-gamma": "gamma"}
    wrong, seen = [], {}
    for n, tid, thread, frames in samples(con):
        if tid not in names:
            continue
        name = names[tid]
        assert thread == name, f"tid {tid}: thread {thread!r}, want {name!r}"
        funcs = [f["func"] for f in pychain(frames)]
        mine = own[name]
        for other in own.values():
            if other != mine and any(f.startswith(other + "_") for f in funcs):
                wrong.append((name, funcs))
        if f"{mine}_loop" in funcs:
            seen[name] = seen.get(name, 0) + n
    assert not wrong, f"samples attributed to the wrong thread: {wrong[:3]}"
    assert set(seen) == set(own), f"threads with their own frames: {seen}"


def nearest_python_above(frames, pred):
    """For a sample (root-first frames) with a frame matching pred: the innermost Python
    frame rootward of the outermost matching frame, and whether only native frames lie
    between them."""
    idx = [i for i, f in enumerate(frames) if pred(f)]
    if not idx:
        return None
    i = idx[0]
    for j in range(i - 1, -1, -1):
        if frames[j]["kind"] == "python":
            return frames[j], all(f["kind"] == "native" for f in frames[j + 1:i])
    return False


def check_library_under_caller(con, thread, module_re, caller, line):
    lib = re.compile(module_re)
    total = good = with_py = all_samples = 0
    bad = collections.Counter()  # what stood above the library where the caller did not
    for n, _, th, frames in samples(con, "thread = ?", (thread,)):
        all_samples += n
        if pychain(frames):
            with_py += n
        r = nearest_python_above(frames, lambda f: f["kind"] == "native"
                                 and lib.search(f["module"]))
        if r is None:
            continue
        total += n
        if r and r[0]["func"] == caller and r[0]["line"] == line and r[1]:
            good += n
        else:
            bad[(r[0]["func"], r[0]["line"], r[1]) if r else "no Python frame above"] += n
    assert total > 50, f"{thread}: only {total} samples in {module_re}"
    assert good >= 0.95 * total, \
        f"{thread}: {module_re} under {caller} in {good}/{total}; else {bad.most_common(5)}"
    # The thread runs with the GIL released while the main thread holds it: its own
    # Python frames must still be found.
    assert with_py >= 0.95 * all_samples, f"{thread}: Python frames in {with_py}/{all_samples}"


@h.params([p for _, p in PYTHONS], IDS)
def test_native_libraries_under_python_caller(py):
    script = os.path.join(PYDIR, "native_calls.py")
    con = record(py, script, "3")
    check_library_under_caller(con, "zlib-worker", r"libz\.so", "do_zlib",
                               marker(script, "zlib_call"))
    check_library_under_caller(con, "hash-worker", r"libcrypto\.so", "do_hash",
                               marker(script, "hash_call"))
    # The GIL holder is sampled too, in its pure-Python loop.
    spin = [n for n, _, th, fr in samples(con, "thread = 'MainThread'")
            if pychain(fr) and pychain(fr)[-1]["func"] == "gil_spin"]
    assert sum(spin) > 100, f"only {sum(spin)} samples in gil_spin"


def test_torch_matmul_under_python_caller():
    py = "/usr/bin/python3"
    r = subprocess.run([py, "-c", "import torch"], capture_output=True)
    assert r.returncode == 0, "Debian's python3-torch is needed (scripts/install-deps.sh)"
    script = os.path.join(PYDIR, "native_calls.py")
    # Record the running model, not the import of torch (its libraries' constructors).
    target = h.spawn([py, script, "8", "--torch"], stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == "ready"
    out = h.tmp("rec.db")
    p = h.probing("record", "-F", 499, "-d", 3, "-p", target.pid, "-o", out)
    assert p.returncode == 0, p.stderr
    con = h.db(out)
    check_library_under_caller(con, "torch-worker", r"libtorch_cpu\.so", "do_matmul",
                               marker(script, "matmul_call"))


def shape_chains(con):
    """Python chains (root-first func names, qualnames, lines) of samples in spin()."""
    out = []
    for n, _, _, frames in samples(con):
        chain = pychain(frames)
        if chain and chain[-1]["func"] == "spin":
            out.append((n, chain))
    return out


@h.params([p for _, p in PYTHONS], IDS)
def test_shapes_names_and_lines(py):
    script = os.path.join(PYDIR, "shapes.py")
    con = record(py, script, "6", "500", opts=("--py-depth", "1024"), timeout=180)
    minor = version_of(py)
    chains = shape_chains(con)
    assert chains, "no samples in spin()"
    spin_line = marker(script, "spin")
    total = sum(n for n, _ in chains)
    assert sum(n for n, c in chains if c[-1]["line"] == spin_line) >= 0.95 * total

    def found(pred):
        return sum(n for n, c in chains if pred(c))

    def tail(c, k):
        return [f["func"] for f in c[-k:]]

    # 500-deep recursion, complete (depth limit 1024): main -> <lambda> -> recurse x 500.
    deep = found(lambda c: tail(c, 502) == ["<lambda>"] + ["recurse"] * 500 + ["spin"]
                 and all(f["line"] == marker(script, "recurse") for f in c[-500:-2]))
    assert deep > 20, f"only {deep} samples with the full 500-deep chain"
    # generator
    assert found(lambda c: tail(c, 3) == ["consume", "produce", "spin"]
                 and c[-2]["line"] == marker(script, "produce")
                 and c[-3]["line"] == marker(script, "consume")) > 20
    # coroutine (asyncio's own frames in between)
    assert found(lambda c: tail(c, 3) == ["amain", "acoro", "spin"]
                 and "run_coro" in [f["func"] for f in c]) > 20
    # lambda
    assert found(lambda c: tail(c, 3) == ["call_lambda", "<lambda>", "spin"]
                 and c[-2]["line"] == marker(script, "lambda")) > 20
    # method: qualified name on 3.11+ (co_qualname), bare name before
    meth = found(lambda c: tail(c, 3) == ["call_method", "method", "spin"])
    assert meth > 20, meth
    if minor >= 11:
        quals = {c[-2]["qual"] for n, c in chains if tail(c, 2) == ["method", "spin"]}
        assert quals == {"Shape.method"}, quals
        lam = {c[-2]["qual"] for n, c in chains if tail(c, 2) == ["<lambda>", "spin"]}
        assert lam == {"call_lambda.<locals>.<lambda>"}, lam
    else:
        assert con.execute("SELECT COUNT(*) FROM frames WHERE qualname IS NOT NULL "
                           "AND kind = 'python'").fetchone()[0] == 0
    # non-ASCII function name
    assert found(lambda c: tail(c, 3) == ["call_unicode", "fünc_ñ", "spin"]
                 and c[-2]["line"] == marker(script, "unicode")) > 20
    # every shape starts at <module> -> main
    assert found(lambda c: [f["func"] for f in c[:2]] == ["<module>", "main"]) >= 0.99 * total


@h.params([p for _, p in PYTHONS], IDS)
def test_deep_recursion_truncated_not_wrong(py):
    script = os.path.join(PYDIR, "shapes.py")
    con = record(py, script, "3", "500", opts=("--py-depth", "64"))
    truncated = dict(con.execute(
        "SELECT s.stack_id, st.truncated FROM samples s JOIN stacks st USING(stack_id)"
    ).fetchall())
    deep = 0
    for n, tid, _, frames in samples(con):
        chain = pychain(frames)
        if not chain or chain[-1]["func"] != "spin":
            continue
        names = [f["func"] for f in chain]
        if names.count("recurse") < 60:
            continue
        deep += n
        # The innermost 64 frames only: spin and 63 x recurse, nothing invented.
        assert names == ["recurse"] * 63 + ["spin"], names[:5]
    assert deep > 20, f"only {deep} deep samples"
    flagged = con.execute(
        "SELECT SUM(s.count) FROM samples s JOIN stacks st USING(stack_id) "
        "WHERE st.truncated & 1").fetchone()[0] or 0
    assert flagged >= deep, (flagged, deep)


@h.params([p for _, p in PYTHONS], IDS)
def test_module_level_loop_non_ascii_file(py):
    src = os.path.join(PYDIR, "module_loop.py")
    script = h.tmp("ünïcødé_wörk.py")
    shutil.copy(src, script)
    con = record(py, script, "2")
    line = marker(src, "module_loop")
    total = good = 0
    for n, _, _, frames in samples(con):
        chain = pychain(frames)
        # The script's own samples: not the interpreter's start-up (site, encodings), which
        # runs before it and takes longer on a loaded machine (30 of 1,025 samples once).
        if not any(f["file"] == script for f in chain):
            continue
        total += n
        if [f["func"] for f in chain] == ["<module>"] and chain[0]["line"] == line \
                and chain[0]["file"] == script:
            good += n
    assert total > 200 and good >= 0.97 * total, f"{good}/{total}"


@h.params([p for _, p in PYTHONS], IDS)
def test_threads_come_and_go(py):
    script = os.path.join(PYDIR, "churn.py")
    truth = h.tmp("names.txt")
    con = record(py, script, "3", truth)
    # The thread spins on these two lines: the loop, and the clock it reads (a system call
    # for a thread's CPU clock, longer on a loaded machine).
    lines = {marker(script, "short_task"), marker(script, "short_task_clock")}
    # Every thread that was sampled carries its own threading name, although most were
    # gone long before the recorder handled their samples (ground truth: the workload's
    # list of native ids and names).
    names = {int(tid): name for tid, name in (ln.split() for ln in open(truth))}
    rows = con.execute("SELECT tid, name FROM threads").fetchall()
    misnamed = [(tid, name, names.get(tid)) for tid, name in rows if names.get(tid) != name]
    assert len(rows) >= 10 and not misnamed, \
        f"{len(misnamed)} of {len(rows)} threads misnamed (tid, recorded, true): {misnamed[:8]}"
    tids, total, good, bad = set(), 0, 0, {}
    for n, tid, thread, frames in samples(con, "thread LIKE 'churn-%'"):
        chain = pychain(frames)
        tids.add(tid)
        total += n
        names = [f["func"] for f in chain]
        if names[-1:] == ["short_task"] and chain[-1]["line"] in lines and \
                names[0] == "_bootstrap":
            good += n
        else:
            key = ";".join(f"{f['func']}:{f['line']}" for f in frames[-6:])
            bad[key] = bad.get(key, 0) + n
    assert len(tids) >= 10, f"only {len(tids)} short-lived threads sampled"
    worst = sorted(bad.items(), key=lambda kv: -kv[1])[:4]
    assert total > 100 and good >= 0.95 * total, f"{good}/{total}; other stacks: {worst}"


@h.params([p for label, p in PYTHONS if label in ("3.12", "debian-3.11")],
          [label for label, p in PYTHONS if label in ("3.12", "debian-3.11")])
def test_a_short_thread_after_a_quiet_spell_is_named(py):
    """A thread that lives 30 ms, started after seconds without a new thread (the name reader
    asleep): the sampler's birth signal wakes the reader in time, every time. Pythons before
    3.14 (which gives the OS thread its name too): only the reader knows the name."""
    script = os.path.join(PYDIR, "late_threads.py")
    truth = h.tmp("names.txt")
    con = record(py, script, "4", "1.5", truth)
    names = {int(tid): name for tid, name in (ln.split() for ln in open(truth))}
    rows = dict(con.execute("SELECT tid, name FROM threads").fetchall())
    late = {tid: name for tid, name in names.items() if name.startswith("late-")}
    assert len(late) == 4, names
    sampled = {tid: rows[tid] for tid in late if tid in rows}
    assert len(sampled) >= 3, f"only {len(sampled)} of 4 short threads sampled: {rows}"
    misnamed = {tid: (rows[tid], late[tid]) for tid in sampled if rows[tid] != late[tid]}
    assert not misnamed, f"(recorded, true) names: {misnamed}"


@h.params([PYTHONS[0][1], PYTHONS[-1][1]], [PYTHONS[0][0], PYTHONS[-1][0]])
def test_forked_workers_threads_named(py):
    """--children with a pool of forked workers whose tasks start short threads: each thread
    has its threading name, also those that ran before the recorder handled the fork."""
    truth = h.tmp("names.txt")
    con = record(py, os.path.join(PYDIR, "forked.py"), "12", truth, opts=("--children",))
    names = {}
    for line in open(truth):
        pid, tid, name = line.split(maxsplit=2)
        names[(int(pid), int(tid))] = name.strip()
    rows = con.execute("SELECT pid, tid, name FROM threads").fetchall()
    misnamed = [(p, t, n, names.get((p, t))) for p, t, n in rows if names.get((p, t)) != n]
    inner = [n for _, _, n in rows if n and n.startswith("inner-")]
    assert len(inner) >= 4 and not misnamed, \
        f"{len(misnamed)} of {len(rows)} threads misnamed (pid, tid, recorded, true): " \
        f"{misnamed[:8]}"
    workers = con.execute("SELECT COUNT(*) FROM processes WHERE end_time IS NOT NULL AND "
                          "python_version IS NOT NULL").fetchone()[0]
    assert workers >= 4, f"{workers} ended Python processes (parent and 3 workers expected)"


def exec_chain_samples(con, first_exe):
    """(spinning, complete, the rest) sample counts of exec_chain.py's spinning program: its
    main thread's samples that show the eval loop (a Python frame, or the eval loop's native
    frame where Python frames are missing) outside the interpreter's own initialization and
    outside the first program (@first_exe's eval loop); complete: under <module> -> spin."""
    spinning = complete = 0
    rest = collections.Counter()
    for n, tid, thread, frames in samples(con, "tid = pid"):
        chain = [f["func"] for f in pychain(frames)]
        native = {f["func"]: f["module"] for f in frames if f["kind"] == "native"}
        if chain and "spin" not in chain:
            continue  # the first program (it never calls spin)
        if not chain:
            if native.get("_PyEval_EvalFrameDefault") in (None, first_exe):
                continue
            if {"pymain_init", "Py_InitializeFromConfig", "Py_InitializeEx"} & set(native):
                continue
        spinning += n
        if chain == ["<module>", "spin"]:
            complete += n
        else:
            rest[tuple(chain) or "native frames only"] += n
    return spinning, complete, rest


@h.params([p for label, p in PYTHONS if label in ("3.12", "3.15")],
          [label for label, p in PYTHONS if label in ("3.12", "3.15")])
def test_python_frames_from_the_start_of_an_execd_program(py):
    """Debian's python3.11 imports torch and multiplies matrices for 0.3 s (a program whose
    first samples take the recorder long to unwind and symbolize), then execs PY (3.15: the
    sid root's, through its wrapper's own five execs) on a script that spins in spin() from
    its first line. The recorder is still busy with the first program when the second
    starts, yet every sample of the spin has its Python frames, <module> -> spin, from its
    first: the interpreter finder (record/pyfinder.c) set the sampler up meanwhile."""
    first = "/usr/bin/python3.11"
    script = os.path.join(PYDIR, "exec_chain.py")
    minor = version_of(py)
    out, err_path, go = h.tmp("rec.db"), h.tmp("rec.err"), h.tmp("go")
    rec = h.spawn([h.PROBING, "record", "-v", "-F", "999", "-o", out, "--", first, script, py,
                   "1", "--torch", "--wait", go], stderr=open(err_path, "w"))
    # The spinning program waits, once done, until the recorder has handled its samples:
    # its frames are named from its memory. The recorder names its interpreter when it
    # handles its exec, before its samples; a second of them takes it well under 3 s.
    h.wait_for(lambda: re.search(r"CPython 3\.%d\.\d+ in" % minor, open(err_path).read()),
               timeout=120, what="the recorder at the exec of the Python 3.%d program" % minor)
    time.sleep(3)
    open(go, "w").close()
    assert rec.wait(timeout=120) == 0, open(err_path).read()[-2000:]
    con = h.db(out)
    spinning, complete, rest = exec_chain_samples(con, first)
    h.log(f"spinning {spinning}, complete {complete}, else {rest.most_common(5)}")
    assert spinning >= 200, (spinning, rest.most_common(5), open(err_path).read()[-1500:])
    assert spinning - complete <= 3, (spinning, complete, rest.most_common(5))


def test_no_python_flag_and_native_program():
    py = PYTHONS[-1][1]
    script = os.path.join(PYDIR, "split.py")
    con = record(py, script, "1", opts=("--no-python",))
    assert con.execute("SELECT COUNT(*) FROM frames WHERE kind = 'python'").fetchone()[0] == 0
    assert con.execute("SELECT COUNT(*) FROM frames WHERE func LIKE '_PyEval_EvalFrame%'"
                       ).fetchone()[0] > 0
    assert con.execute("SELECT python_version FROM processes").fetchone()[0] is None
