"""Complete native stacks: every sample's stack reaches its thread's outermost frame, and a
stack that does not is flagged (stacks.truncated bit 2), with meta.complete_native_stacks
counting exactly the others.

Ground truth is independent of the flag: a stack reaches the outermost frame when its root
frame is _start (the main thread) or clone3/clone (any other thread). The workloads spend
their time where unwinding used to stop early while the stack was still counted complete:
PLT stubs (tests/workloads/native/plt.c, and libpython 3.8's own calls) and deep Python
stacks, 20 KiB of C stack on Python 3.8-3.10 (tests/workloads/python/deep_threads.py).

Every recording here runs with PROBING_UNWIND_CHECK: each stack unwound by the cached
.eh_frame rules (native/cfirule.h) is unwound by libdwfl too, and none may differ.
"""
import os
import re
import subprocess

import harness as h

PYTHONS = h.pythons()
IDS = [label for label, _ in PYTHONS]
DEEP = os.path.join(h.ROOT, "tests", "workloads", "python", "deep_threads.py")
MAIN_ROOTS = ("_start",)
THREAD_ROOTS = ("clone3", "clone")


def record_running(cmd, ready, want, opts=()):
    """Start @cmd, wait until it prints @ready, then record it 2 s at a time until @want
    samples (the CPUs may be busy with other work), at most 5 times; check each recording
    (check_complete_flags). Returns (samples, of which reaching the outermost frame, the
    recordings)."""
    target = h.spawn(cmd, stdout=subprocess.PIPE, text=True)
    assert target.stdout.readline().strip() == ready, "the workload did not start"
    total = reached = 0
    cons = []
    for i in range(5):
        out = h.tmp(f"rec{i}.db")
        differ = h.tmp(f"rec{i}.differ")
        p = h.probing("record", "-F", 999, "-d", 2, "-p", target.pid, "-o", out, *opts,
                      env={"PROBING_UNWIND_CHECK": differ})
        assert p.returncode == 0, p.stderr
        cons.append(h.db(out))
        check_unwinds(cons[-1], differ)
        n, r = check_complete_flags(cons[-1], target.pid)
        total += n
        reached += r
        if total >= want:
            break
    assert total >= want, f"only {total} samples in 5 recordings"
    return total, reached, [(con, target.pid) for con in cons]


def unwind_counts(con):
    """(by the rules, by libdwfl, differing) of a recording made with PROBING_UNWIND_CHECK."""
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    return tuple(int(meta[k]) for k in ("native_unwinds_by_rules", "native_unwinds_by_libdwfl",
                                        "native_unwinds_differ"))


def check_unwinds(con, differ):
    """No stack the rules unwound differs from libdwfl's unwind of it (each difference is
    noted in the file @differ)."""
    fast, slow, diff = unwind_counts(con)
    notes = open(differ).read() if os.path.exists(differ) else ""
    assert diff == 0 and not notes, f"{diff} of {fast} unwinds differ from libdwfl's: {notes[:2000]}"


def check_unwinds_split(recordings, stubs_by_libdwfl=False):
    """The stacks libdwfl unwound are among those the rules cannot: a sample in a lazy PLT
    stub (.plt: its CFA is an expression of rip), always the innermost frame (a stub jumps,
    it calls nothing); every other stack is unwound by the rules. A stub of .plt.sec (built
    with -fcf-protection, pyenv's Pythons) has a simple rule (CFA rsp + 8): only with
    @stubs_by_libdwfl is every stub's stack libdwfl's. Returns (by the rules, by libdwfl)."""
    fast = slow = 0
    for con, _ in recordings:
        f, s, _ = unwind_counts(con)
        total, stub = con.execute(
            "SELECT SUM(s.count), SUM(CASE WHEN f.func LIKE '%@plt' OR f.func = '[plt]' "
            "THEN s.count ELSE 0 END) FROM samples s JOIN frames f ON f.stack_id = s.stack_id "
            "AND f.depth = 0").fetchone()
        assert s <= stub + 2 + total // 500, (f, s, stub, total)
        assert not stubs_by_libdwfl or stub <= s, (f, s, stub, total)
        fast += f
        slow += s
    return fast, slow


def check_complete_flags(con, pid):
    """Every stack is flagged exactly when it does not reach its thread's outermost frame,
    and meta counts the unflagged samples. Returns (samples, of which reaching it)."""
    roots = dict(con.execute(
        "SELECT stack_id, func FROM frames f WHERE kind = 'native' AND depth = "
        "(SELECT MAX(depth) FROM frames g WHERE g.stack_id = f.stack_id)").fetchall())
    total = reached = unflagged = 0
    wrong = []
    for n, tid, sid, trunc in con.execute(
            "SELECT s.count, s.tid, s.stack_id, st.truncated FROM samples s "
            "JOIN stacks st USING(stack_id) WHERE s.pid = ?", (pid,)):
        # glibc's own name for it where its debug information names it (Debian unstable's
        # libc is stripped: its libc6-dbg names clone3 __GI___clone3).
        root = re.sub(r"^__GI___", "", roots.get(sid) or "")
        ok = root in (MAIN_ROOTS if tid == pid else THREAD_ROOTS)
        flagged = bool(trunc & 2)
        total += n
        reached += n if ok else 0
        unflagged += 0 if flagged else n
        if ok == flagged:
            wrong.append((tid == pid, roots.get(sid, "(a Python frame)"), trunc, n))
    assert not wrong, f"(main thread, root, truncated, samples) flagged wrongly: {wrong[:5]}"
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert int(meta["complete_native_stacks"]) == unflagged, (meta["complete_native_stacks"],
                                                              unflagged)
    return total, reached


def test_plt_stubs_unwind_to_the_outermost_frame():
    """A sample in a PLT stub unwinds through it (its CFI needs rip as a register)."""
    total, reached, recs = record_running([h.workload("plt"), "30"], "ready", 500)
    assert reached >= 0.995 * total, f"{reached}/{total} samples reach _start or clone3"
    # A stub's CFA is an expression of rip (rsp + 8, or + 16 past the lazy binder's push):
    # those stacks (a share that depends on where the guest's timer lands) are libdwfl's.
    fast, slow = check_unwinds_split(recs, stubs_by_libdwfl=True)
    assert fast, (fast, slow)


def test_frame_pointer_epilogues_unwind_to_the_outermost_frame():
    """A sample in an epilogue past `pop %rbp` or `leave` unwinds on into a caller whose CFA
    is rbp + 16, though the CFI still says rbp is saved below the stack pointer (outside the
    copy): 94-95 % of the samples reached _start or clone3 before, the others leaf-only."""
    total, reached, recs = record_running([h.workload("fpret"), "30"], "ready", 500)
    assert reached >= 0.995 * total, f"{reached}/{total} samples reach _start or clone3"
    # Epilogues included, every frame has a simple rule: all by the rules.
    check_unwinds_split(recs)
    # Most samples are in the two short functions, below the loop that calls them.
    inner = sum(n for con, pid in recs for n, chain, _ in h.stacks(con, pid=pid)
                if chain[-2:] in (["call_loop", "fp_leave"], ["fp_leave", "fp_pop"]))
    assert inner >= 0.5 * total, f"only {inner}/{total} samples in fp_leave or fp_pop"


def whole_python_chains(recordings):
    """Samples in leaf() with all 41 descend frames above it, of all @recordings."""
    return sum(n for con, pid in recordings for n, chain, _ in h.stacks(con, pid=pid)
               if "leaf" in chain and chain.count("descend") == 41)


@h.params([p for _, p in PYTHONS], IDS)
def test_python_threads_unwind_to_the_outermost_frame(py):
    total, reached, recs = record_running([py, DEEP, "30", "40"], "ready", 400)
    # Debian's 3.14 and 3.15, built with frame pointers, reached 98.9-99.5 % while samples
    # in an epilogue past `leave` or `pop %rbp` stopped there (docs/python-internals.md).
    assert reached >= 0.995 * total, f"{reached}/{total} samples reach _start or clone3"
    # The Python frames are all there too.
    deep = whole_python_chains(recs)
    assert deep >= 0.95 * total, f"{deep}/{total} samples with the whole Python chain"
    check_unwinds_split(recs)


def test_stack_deeper_than_the_copy_is_flagged():
    """With --stack-size 8K, Python 3.8's 20 KiB deep stacks cannot be unwound to the end:
    each is flagged, none counted complete; the Python frames are still all there."""
    py = [p for label, p in PYTHONS if label == "3.8"]
    assert py, "pyenv Python 3.8 is needed"
    total, reached, recs = record_running([py[0], DEEP, "30", "40"], "ready", 200,
                                          opts=("--stack-size", "8K"))
    assert reached <= 0.05 * total, f"{reached}/{total} samples reach the root with 8 KiB"
    deep = whole_python_chains(recs)
    assert deep >= 0.95 * total, f"{deep}/{total} samples with the whole Python chain"


def test_no_native_stacks_are_not_complete():
    """--no-native keeps only the running function: no stack is counted complete."""
    total, reached, _ = record_running([h.workload("plt"), "30"], "ready", 100,
                                       opts=("--no-native",))
    assert reached == 0, f"{reached}/{total} samples reach the root without unwinding"
