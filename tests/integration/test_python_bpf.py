"""The BPF Python walker (bpf/pystack.bpf.h, through tests/bpf/pystack_test.bpf.c and the
pystack-bpf tool) against every interpreter: for threads running on CPU with known stacks,
>= 99% of the samples must give exactly the known chain (function names, the call-site lines
of every caller, the leaf line among the lines the leaf loop can be on). Includes a thread
that runs native code with the GIL released (hashlib) and one that sleeps in a loop, so the
walker must find the *sampled* thread's state, not the GIL holder's. And the BPF walker and
the userspace one on the same stopped memory: identical records."""
import harness as h
import pystack_common as pc

PYTHONS = h.pythons()
SECONDS = 3


def _expected(truth_t, leaf_lines):
    """Root-first [(func, {lines})] from the interpreter's own dump, the leaf line free among
    @leaf_lines (the thread was busy when it dumped)."""
    frames = list(reversed(truth_t["frames"]))
    exp = [(f["func"], {f["line"]}) for f in frames[:-1]]
    exp.append((frames[-1]["func"], set(leaf_lines)))
    return exp


def _matches(stack, exp):
    return len(stack) == len(exp) and all(
        func == ef and line in el for (func, line), (ef, el) in zip(stack, exp))


def _ratio(per_tid, tid, exp, want_truncated=False, want_n=None):
    rows = per_tid.get(tid, [])
    total = sum(r[0] for r in rows)
    good = sum(r[0] for r in rows
               if r[1] == 1 and r[2] == want_truncated and (want_n is None or r[3] == want_n)
               and _matches(r[4], exp))
    bad = sorted((r for r in rows if not (r[1] == 1 and _matches(r[4], exp))),
                 key=lambda r: -r[0])[:3]
    return total, good, bad


def _check(per_tid, tid, exp, name, min_samples, **kw):
    total, good, bad = _ratio(per_tid, tid, exp, **kw)
    assert total >= min_samples, f"{name}: only {total} samples of tid {tid}"
    assert good >= 0.99 * total, (
        f"{name}: {good}/{total} samples match\n  expected {exp[-4:]}\n  most common "
        f"mismatches (count, status, truncated, n, leaf end): "
        f"{[(b[0], b[1], b[2], b[3], b[4][-4:]) for b in bad]}")


def _sample(pid, seconds, need, *args, rounds=4):
    """pystack_bpf, run again (up to @rounds times in all) while a thread of @need
    ({tid: min samples}) has too few samples: a thread that is on CPU only now and then
    (sleep-loop waits for the GIL between sleeps) can starve on a loaded machine. Every
    sample of every round is checked, so more rounds never hide a wrong one."""
    per_tid, summary = {}, None
    for _ in range(rounds):
        got, summary = pc.pystack_bpf(pid, seconds, *args)
        assert summary["lost"] == 0, summary
        for tid, rows in got.items():
            per_tid.setdefault(tid, []).extend(rows)
        if all(sum(r[0] for r in per_tid.get(t, [])) >= n for t, n in need.items()):
            break
        h.log(f"too few samples so far, sampling again: {need}")
    return per_tid, summary


def _threads(truth, markers):
    """(name, tid, expected stack) for the busy threads of the workload."""
    m = markers
    out = []
    for name, leaf in (("busy-gil", ("spin_while", "spin_body")),
                       ("busy-nogil", ("hash_while", "hash_call")),
                       ("sleep-loop", ("sleep_loop_while", "sleep_loop_call")),
                       ("ctor", ("ctor_spin_while", "ctor_spin_body"))):
        t = pc.truth_thread(truth, name)
        out.append((name, pc.native_tid(t), _expected(t, [m[x] for x in leaf])))
    return out


@h.timeout(240)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_bpf_walk_matches_known_stacks(exe):
    p, out, truth = pc.start_workload(exe, busy=True)
    m = pc.markers(pc.WORKLOAD)
    threads = _threads(truth, m)
    deep_t = pc.truth_thread(truth, "deep")
    deep = pc.native_tid(deep_t)
    # deep: 3 bootstrap frames, 501 recurse, spin_bottom (busy at the bottom)
    deep_exp = [(f["func"], {f["line"]}) for f in reversed(deep_t["frames"][1:])]
    deep_exp.append(("spin_bottom", {m["deep_spin_while"], m["deep_spin_body"]}))

    # The sleeping thread is on CPU only between sleeps: few samples, all must be right.
    need = {tid: 5 if name == "sleep-loop" else 150 for name, tid, _ in threads}
    need[deep] = 200
    per_tid, summary = _sample(p.pid, SECONDS, need)
    h.log(f"summary: {summary}")
    for name, tid, exp in threads:
        _check(per_tid, tid, exp, name, need[tid])
    _check(per_tid, deep, deep_exp, "deep", need[deep], want_n=len(deep_exp))

    # Truncation at the limit: the leaf-most 64 frames, flagged truncated, never wrong.
    need = {tid: 1 for _, tid, _ in threads}
    need[deep] = 100
    per_tid, _ = _sample(p.pid, 1.5, need, "--depth", 64)
    _check(per_tid, deep, deep_exp[-64:], "deep (64)", 100, want_truncated=True, want_n=64)
    for name, tid, exp in threads:
        _check(per_tid, tid, exp, name + " (64)", 1)

    # Each lookup path on its own: the TSS slot only, then the py_tstates map only.
    need = {tid: 1 if name == "sleep-loop" else 100 for name, tid, _ in threads}
    for opt in ("--no-map", "--no-tss"):
        per_tid, _ = _sample(p.pid, 1.5, need, opt)
        for name, tid, exp in threads:
            _check(per_tid, tid, exp, f"{name} ({opt})", need[tid])


def _compare_until(pid, rounds, want, *args, runs=4):
    """pystack-bpf --compare, run again (up to @runs times in all) until @want(rows) holds
    (a thread may get few samples on a loaded machine); every round of every run counts."""
    rows, total = [], {"rounds": 0, "equal": 0, "moved": 0, "page": 0}
    for _ in range(runs):
        got, summary = pc.pystack_bpf_compare(pid, rounds, *args)
        rows += got
        for k in total:
            total[k] += summary[k]
        if want(rows):
            break
        h.log(f"--compare {' '.join(map(str, args))}: coverage not reached yet, again")
    return rows, total


@h.timeout(180)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_bpf_and_userspace_walks_identical(exe):
    """The two walkers share their rules (bpf/pywalk.h): given the same memory they must give
    identical output. The BPF walker walks a sample and stops the process (SIGSTOP) before the
    sampled thread runs another user instruction; the userspace walker (pyproc__walk_ex, as
    backtrace uses it) then walks the same thread from outside: the records (code object,
    instruction, entry flag, checksum), the status and the truncation must be the same, on
    every interpreter, for whatever thread the sample hit. At --depth 64 the deep recursion's
    walks are truncated in both."""
    p, out, truth = pc.start_workload(exe, busy=True)
    deep = pc.native_tid(pc.truth_thread(truth, "deep"))
    busy = {pc.native_tid(pc.truth_thread(truth, n)) for n in ("busy-gil", "busy-nogil", "ctor")}

    def covered(depth):
        def want(rows):
            ok = [r for r in rows if r["equal"] and r["bpf"][0] == 1]
            return (any(r["tid"] == deep and r["bpf"][2] == (depth == 64) for r in ok)
                    and any(r["tid"] in busy and r["bpf"][1] > 0 for r in ok))
        return want

    for depth, rounds in ((1024, 120), (64, 40)):
        rows, total = _compare_until(p.pid, rounds, covered(depth), "--depth", depth)
        h.log(f"depth {depth}: {total}")
        bad = [r for r in rows if not r["equal"]]
        assert not bad, (f"depth {depth}: {len(bad)} of {len(rows)} walks differ, e.g. "
                         f"tid {bad[0]['tid']} bpf {bad[0]['bpf']} user {bad[0]['user']}\n"
                         + "\n".join(bad[0]["diff"][:20]))
        # The stop is precise (the thread runs no user code after the sample): a round where
        # its pc or sp moved is not compared, and must stay rare.
        assert total["moved"] <= total["rounds"] // 10, total
        assert total["equal"] == len(rows) >= total["rounds"] * 9 // 10, total
        # From 3.11 on frames lie side by side: most were copied from the innermost one's
        # page, read at once (the deep thread's outer frames are not in it: read one by one).
        if int(dict((e, lb) for lb, e in PYTHONS)[exe].split(".")[-1]) >= 11:
            assert total["page"] > 0, total
        assert covered(depth)(rows), (
            f"depth {depth}: the deep thread ({deep}) or a busy thread ({busy}) was never "
            f"compared: {sorted({(r['tid'], r['bpf']) for r in rows})}")


@h.timeout(120)
def test_bpf_native_thread_has_no_tstate():
    """A thread of a Python process that never ran Python (a C thread spinning in an
    embedding program) is reported PY_NO_TSTATE with no frames, never with another thread's
    stack; the Python threads of the same process still walk."""
    import os
    exe = os.path.join(h.WORKLOADS, "py_embed_dlopen")
    assert os.path.exists(exe), f"{exe} not built (run 'make test')"
    with open(exe + ".libpython") as f:
        libpython = f.read().strip()
    p, out, truth = pc.start_workload(None, busy=True, argv_prefix=[exe, libpython],
                                      env={"PROBING_EMBED_SPIN": "1"})
    spin = [int(t) for t in os.listdir(f"/proc/{p.pid}/task")
            if open(f"/proc/{p.pid}/task/{t}/comm").read().strip() == "native-spin"]
    assert len(spin) == 1, spin
    busy = _threads(truth, pc.markers(pc.WORKLOAD))[:2]
    need = {tid: 50 for _, tid, _ in busy}
    need[spin[0]] = 100
    per_tid, _ = _sample(p.pid, 2, need)
    rows = per_tid.get(spin[0], [])
    assert sum(r[0] for r in rows) >= 100, rows
    assert all(r[1] == 2 and r[3] == 0 for r in rows), rows  # PY_NO_TSTATE
    for name, tid, exp in busy:
        _check(per_tid, tid, exp, name, 50)


@h.timeout(120)
def test_bpf_tss_key_in_second_level_block():
    """The interpreter's TSS key >= 32 (the embedding program created 40 pthread keys first):
    glibc keeps it in a second-level block; both the outside reader and the BPF walker (TSS
    path only, no map) must follow it."""
    import os
    exe = os.path.join(h.WORKLOADS, "py_embed_dlopen")
    assert os.path.exists(exe), f"{exe} not built (run 'make test')"
    with open(exe + ".libpython") as f:
        libpython = f.read().strip()
    p, out, truth = pc.start_workload(None, busy=True, argv_prefix=[exe, libpython],
                                      env={"PROBING_EMBED_KEYS": "40"})
    info = dict(line.split("\t", 1) for line in
                h.run([pc.tool(pc.PYSTACKS), "--info", str(p.pid)], check=True)
                .stdout.splitlines())
    assert int(info["tss_key"]) >= 32, info
    threads = pc.pystacks(p.pid)
    assert all(t["tss_bound"] for t in threads.values()), \
        [(t["name"], t["tss_bound"]) for t in threads.values()]
    busy = _threads(truth, pc.markers(pc.WORKLOAD))[:2]
    per_tid, _ = _sample(p.pid, 2, {tid: 50 for _, tid, _ in busy}, "--no-map")
    for name, tid, exp in busy:
        _check(per_tid, tid, exp, name, 50)
