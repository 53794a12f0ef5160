"""record --off-cpu (issue 11): wall-clock time, on the CPU and off it, with the reason of each
wait, against workloads whose threads spend known shares of their time in known ways
(tests/workloads/python/wallsplit.py, waits.py)."""
import gzip
import json
import os
import re
import subprocess

import harness as h
import test_export

PYDIR = os.path.join(h.PY_WORKLOADS, "python")
SPLIT = os.path.join(PYDIR, "wallsplit.py")
WAITS = os.path.join(PYDIR, "waits.py")
PARTS = {"compute": "compute", "sleeper": "sleep", "waiter": "wait"}
# The interpreters the issue names: the oldest, a recent one, and Debian's stripped 3.11.
PYTHONS = [(label, exe) for label, exe in h.pythons()
           if label in ("3.8", "3.12", "3.14", "3.15", "debian-3.11")]
# Stripped Debian builds (no symbol for take_gil: the GIL is told by its address).
STRIPPED = [(label, exe) for label, exe in h.pythons() if label in ("debian-3.11", "3.14", "3.15")]


def _record(*args, timeout=120, env=None):
    out = h.tmp("off.db")
    p = h.probing("record", "--off-cpu", "-o", out, *args, timeout=timeout, env=env)
    assert p.returncode == 0, f"record failed ({p.returncode}): {p.stderr}"
    return out, p.stderr


def _by_thread_state(con):
    """{(tid, state): ns} over the whole recording."""
    return {(tid, state): ns for tid, state, ns in con.execute(
        "SELECT tid, state, SUM(ns) FROM samples GROUP BY tid, state")}


def _funcs(con, kind="python"):
    """{stack_id: set of Python function names in it}."""
    out = {}
    for sid, func in con.execute("SELECT stack_id, func FROM frames WHERE kind = ?", (kind,)):
        out.setdefault(sid, set()).add(func)
    return out


@h.timeout(180)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_wall_split_of_compute_sleep_and_wait(exe):
    """40/40/20 compute/sleep/Event.wait: the split of the main thread's recorded time between
    the three parts within 5 points of the split it measured itself, each part in its state,
    and the thread's total time equal to the recording's duration within 10%.

    A part is told by its Python function in the stack. On a loaded machine some blocks woken
    from outside the process (time.sleep's timer, Event.wait's timeout) end before the
    recorder's iterator takes their stack: those are counted under the function they wait in
    without callers (docs/design.md), and here given to the part that function says."""
    truth_file = h.tmp("truth.json")
    db, err = _record("-F", "299", "-v", "--", exe, SPLIT, "split", truth_file, "3")
    truth = json.load(open(truth_file))
    con = h.db(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta["off_cpu"] == 1 and meta["off_cpu_mode"] == "sampled", meta
    duration = float(meta["duration"])
    (main_tid,) = con.execute("SELECT tid FROM threads WHERE tid = pid").fetchone()
    funcs = _funcs(con)
    native = _funcs(con, "native")
    part_ns = {p: 0 for p in PARTS.values()}
    part_state = {p: {} for p in PARTS.values()}
    total = unknown = 0
    for sid, state, ns in con.execute(
            "SELECT stack_id, state, SUM(ns) FROM samples WHERE tid = ? GROUP BY stack_id, state",
            (main_tid,)):
        total += ns
        names = funcs.get(sid, set()) & set(PARTS)
        if len(names) == 1:
            part = PARTS[names.pop()]
            part_state[part][state] = part_state[part].get(state, 0) + ns
        elif sid not in funcs and state != "running":
            # A block without its stack: the function it waits in, or was preempted in.
            leaf = " ".join(native.get(sid, ()))
            part = ("sleep" if "nanosleep" in leaf or "select" in leaf else
                    "wait" if "futex" in leaf or "sem_" in leaf else "compute")
            unknown += ns
        else:
            continue  # start-up, the module's loop between the parts
        part_ns[part] += ns
    h.log(f"truth {truth}\nrecorded {part_ns} of {total} ns ({unknown} without a stack), "
          f"duration {duration} s\nstates {part_state}\n{err}")
    # The thread's time is the recording's (it lives from the launch to the end).
    assert abs(total / 1e9 - duration) <= 0.1 * duration, (total, duration)
    parts = sum(part_ns.values())
    measured = sum(truth[p] for p in PARTS.values())
    assert parts >= 0.85 * total, (parts, total)
    for part in PARTS.values():
        share = 100.0 * part_ns[part] / parts
        want = 100.0 * truth[part] / measured
        assert abs(share - want) <= 5, (part, share, want, part_ns, truth)
    # Each part in its state. Computing is running, or waiting for a CPU on a loaded machine:
    # its running time is the CPU time it measured (within 5 points of the parts' time).
    # time.sleep is 'sleep' and Event.wait(timeout) 'lock' (a futex wait), apart from the wait
    # for a CPU once woken and the little Python code around the wait.
    assert set(part_state["compute"]) <= {"running", "runnable"}, part_state
    running = 100.0 * part_state["compute"].get("running", 0) / parts
    assert abs(running - 100.0 * truth["compute_cpu"] / measured) <= 5, (running, truth)
    for part, state in (("sleep", "sleep"), ("wait", "lock")):
        ns = part_state[part]
        assert set(ns) <= {state, "runnable", "running"}, (part, ns)
        assert ns[state] >= 0.5 * sum(ns.values()), (part, ns)
        assert ns.get("running", 0) <= 0.1 * sum(ns.values()), (part, ns)


@h.timeout(120)
@h.params([p for _, p in STRIPPED], ids=[label for label, _ in STRIPPED])
def test_two_cpu_bound_threads_wait_for_the_gil_and_blocked_threads_keep_their_state(exe):
    """waits.py: two Python threads spin (each can run only while it holds the GIL: about
    half its time it waits for it), three block in time.sleep, Event.wait and a pipe read.
    Recorded by pid for 2 s, on Debian's python3.11, 3.14 and 3.15 (no symbols for
    take_gil: the GIL is told by its address)."""
    p = h.spawn([exe, WAITS], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    db, _ = _record("-p", p.pid, "-d", "2")
    con = h.db(db)
    names = dict(con.execute("SELECT tid, name FROM threads WHERE pid = ?", (p.pid,)))
    by = {}
    for (tid, state), ns in _by_thread_state(con).items():
        by.setdefault(names.get(tid), {})[state] = ns
    h.log(json.dumps(by, indent=1))
    for name in ("spin-0", "spin-1"):
        st = by[name]
        total = sum(st.values())
        # Each holds the GIL about half the time it is not waiting for a CPU ('runnable',
        # which a loaded machine adds to either half), and does nothing else.
        gil = st.get("gil", 0) / (st.get("gil", 0) + st.get("running", 0))
        assert 0.25 <= gil <= 0.75 and st["gil"] >= 0.1 * total, (name, st)
        assert (st.get("gil", 0) + st.get("running", 0) + st.get("runnable", 0)) >= 0.97 * total
    for name, state in (("sleeper", "sleep"), ("waiter", "lock"), ("reader", "io")):
        st = by[name]
        assert st.get(state, 0) >= 0.97 * sum(st.values()), (name, st)
        # Blocked the whole 2 s.
        assert 1.8e9 <= st[state] <= 2.2e9, (name, st)


@h.timeout(120)
def test_hung_process_has_rows_for_every_thread_and_a_flame_graph():
    """Every thread blocked: on-CPU sampling sees nothing; --off-cpu -d 2 has each thread's
    2 s in its state, under the Python function it waits in, and flamegraph draws them."""
    exe = dict(h.pythons()).get("3.12") or h.pythons()[-1][1]
    p = h.spawn([exe, SPLIT, "hung"], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    db, err = _record("-p", p.pid, "-d", "2")
    con = h.db(db)
    names = dict(con.execute("SELECT tid, name FROM threads WHERE pid = ?", (p.pid,)))
    assert len(names) == 5, names
    by = {}
    for (tid, state), ns in _by_thread_state(con).items():
        by.setdefault(names[tid], {})[state] = ns
    h.log(json.dumps(by, indent=1) + err)
    want = {"hung-event": "lock", "hung-sleep": "sleep", "hung-read": "io", "hung-lock": "lock"}
    for tid, name in names.items():
        state = want.get(name, "lock")  # the main thread joins hung-event: a lock wait
        assert set(by[name]) == {state}, (name, by[name])
        assert 1.8e9 <= by[name][state] <= 2.2e9, (name, by[name])
    # The stacks were taken while the threads stayed blocked (by the fetcher, a second after
    # the sweep first saw them where threads give them as they resume): each has its Python
    # function.
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta["off_cpu_stacks_iterator"] >= 4, meta
    funcs = _funcs(con)
    for name, func in (("hung-sleep", "sleep"), ("hung-read", "read"), ("hung-event", "wait")):
        tid = next(t for t, n in names.items() if n == name)
        sids = [s for (s,) in con.execute("SELECT stack_id FROM samples WHERE tid = ?", (tid,))]
        assert any(func in funcs.get(s, ()) or "run" in funcs.get(s, ()) for s in sids), \
            (name, [funcs.get(s) for s in sids])
    svg = h.tmp("hung.svg")
    r = h.probing("flamegraph", "-i", db, "-o", svg)
    assert r.returncode == 0, r.stderr
    text = open(svg).read()
    for state in ("lock", "sleep", "io"):
        assert f"[off-CPU: {state}]" in text, state
    # Tooltips in seconds, with the time per state; the subtitle says it is wall-clock time.
    assert re.search(r"<title>\[off-CPU: sleep\]\n(1\.[89]|2\.[01])\d\d s, [\d.]+%\nsleep ", text)
    assert "s of wall-clock time" in text
    r = h.probing("flamegraph", "-i", db, "--state", "io", "--folded", "-o", "-")
    lines = r.stdout.splitlines()
    assert lines and all(line.rsplit(" ", 1)[0].endswith("[off-CPU: io]") for line in lines), lines
    # Exports carry nanoseconds and the state.
    out = h.tmp("hung.pb.gz")
    h.probing("export", "-i", db, "--format", "pprof", "-o", out, check=True)
    prof = test_export.decode_profile(gzip.open(out).read())
    assert prof["sample_type"] == [("samples", "count"), ("wall", "nanoseconds")]
    reader = [s for s in prof["samples"] if s["labels"].get("thread") == "hung-read"]
    assert {s["labels"]["state"] for s in reader} == {"io"}
    assert all(s["locations"][0]["function"]["name"] == "[off-CPU: io]" for s in reader)
    assert 1.8e9 <= sum(s["values"][1] for s in reader) <= 2.2e9
    out = h.tmp("hung.json")
    h.probing("export", "-i", db, "--format", "speedscope", "-o", out, check=True)
    doc = json.load(open(out))
    names = [f["name"] for f in doc["shared"]["frames"]]
    (prof,) = [x for x in doc["profiles"] if x["name"].startswith("hung-sleep")]
    assert prof["unit"] == "nanoseconds" and 1.8e9 <= prof["endValue"] <= 2.2e9
    assert all(names[stack[-1]] == "[off-CPU: sleep]" for stack in prof["samples"])


@h.timeout(60)
def test_blocks_still_going_on_at_the_end_of_a_short_recording_have_their_stacks():
    """A recording shorter than the second the fetcher leaves blocks to their threads (where
    they give their stacks as they resume): the threads of a hung process never resume, and the
    last fetch, at the end, takes their stacks: each thread's time is under its Python function,
    none under the fallback."""
    exe = dict(h.pythons()).get("3.12") or h.pythons()[-1][1]
    p = h.spawn([exe, SPLIT, "hung"], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    db, err = _record("-p", p.pid, "-d", "0.6", "-v")
    con = h.db(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    h.log(err)
    assert meta["off_cpu_blocks_no_stack"] == 0, meta
    assert meta["off_cpu_stacks_iterator"] >= 4, meta
    names = dict(con.execute("SELECT tid, name FROM threads WHERE pid = ?", (p.pid,)))
    funcs = _funcs(con)
    for name, func in (("hung-sleep", "sleep"), ("hung-read", "read"), ("hung-event", "wait")):
        tid = next(t for t, n in names.items() if n == name)
        sids = [s for (s,) in con.execute("SELECT stack_id FROM samples WHERE tid = ?", (tid,))]
        assert sids and all(func in funcs.get(s, ()) or "run" in funcs.get(s, ()) for s in sids), \
            (name, [funcs.get(s) for s in sids])


def test_off_cpu_needs_the_same_privileges_and_says_what_it_keeps():
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", h.PROBING]
    plain = h.run(nobody + ["record", "-d", "1", "-o", "/tmp/x.db", "--", "true"])
    off = h.run(nobody + ["record", "--off-cpu", "-d", "1", "-o", "/tmp/x.db", "--", "true"])
    assert plain.returncode == off.returncode != 0
    assert plain.stderr == off.stderr, (plain.stderr, off.stderr)
    exe = h.pythons()[-1][1]
    for opt, says in (("--no-python", "native frames only"), ("--no-native", "Python frames")):
        out = h.tmp("k.db")
        r = h.probing("record", "--off-cpu", opt, "-d", "1", "-o", out, "--", exe, "-c",
                      "import time; time.sleep(0.5)")
        assert r.returncode == 0 and says in r.stderr, r.stderr
        con = h.db(out)
        assert con.execute("SELECT SUM(ns) FROM samples WHERE state = 'sleep'").fetchone()[0] \
            >= 0.3e9


DDP = os.path.join(h.PY_WORKLOADS, "torch", "ddp_wait.py")


@h.timeout(240)
def test_ddp_rank_waits_for_the_slower_rank_in_backward():
    """torchrun, two gloo ranks on CPU (Debian's python3.11 and torch): rank 1 computes 0.3 s
    more before each of 6 backwards, so rank 0 spends about 1.8 s waiting in backward for the
    gradient allreduce. Recorded from the launcher with --children: that wait is rank 0's
    off-CPU time under the Python frame backward, in a non-running state."""
    steps, slow = 6, 0.3
    db, err = _record("--children", "--", "/usr/bin/torchrun", "--standalone",
                      "--nproc_per_node", "2", "--redirects", "1", "--tee", "1", DDP,
                      str(steps), str(slow), timeout=200)
    con = h.db(db)
    ranks = dict(con.execute("SELECT rank, pid FROM processes WHERE rank IS NOT NULL"))
    assert set(ranks) == {0, 1}, ranks
    funcs = _funcs(con)
    waits, running = {}, 0
    for sid, state, ns in con.execute("SELECT stack_id, state, SUM(ns) FROM samples WHERE pid = ?"
                                      " GROUP BY stack_id, state", (ranks[0],)):
        if "backward" not in funcs.get(sid, ()):
            continue
        if state == "running":
            running += ns
        else:
            waits[state] = waits.get(state, 0) + ns
    h.log(f"rank 0 under backward: waits {waits}, running {running}\n{err}")
    # Waiting, not computing: most of the slower rank's extra 1.8 s, in lock/io waits (the
    # future of the allreduce, gloo's sockets), far more than rank 0's own backward compute.
    blocked = sum(v for s, v in waits.items() if s in ("lock", "io"))
    assert blocked >= 0.6 * steps * slow * 1e9, (waits, running)
    assert blocked > 2 * running, (waits, running)


ZOMBIE_PARENT = r"""
import os, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(0.5)
    os._exit(0)
print(pid, flush=True)
time.sleep(4)           # the child is a zombie from 0.5 s to here
os.waitpid(pid, 0)
time.sleep(0.5)
"""


@h.timeout(120)
def test_zombie_child_has_no_off_cpu_time_after_its_end():
    """A child that exits at 0.5 s and is reaped by its parent only at 4 s (issue 17): a
    zombie waits for nothing, so it has no off-CPU time after its end (it had 3.5 s of 'io'
    under '[unknown]'), its time is about its 0.5 s of life, and its thread was not first
    seen after the process ended."""
    exe = dict(h.pythons()).get("3.12") or h.pythons()[-1][1]
    db, err = _record("--children", "--", exe, "-c", ZOMBIE_PARENT)
    con = h.db(db)
    (parent,) = con.execute("SELECT pid FROM processes WHERE ppid NOT IN"
                            " (SELECT pid FROM processes)").fetchone()
    rows = con.execute("SELECT pid, start_time, end_time FROM processes WHERE ppid = ?",
                       (parent,)).fetchall()
    assert len(rows) == 1, rows
    child, start, end = rows[0]
    h.log(f"child {child}: {start} .. {end}\n" + json.dumps(
        con.execute("SELECT ts, tid, state, ns FROM sample_times WHERE pid = ?"
                    " ORDER BY ts", (child,)).fetchall()) + "\n" + json.dumps(
        con.execute("SELECT * FROM threads WHERE pid = ?", (child,)).fetchall()) + err)
    assert end is not None and 0.3 <= end - start <= 1.5, (start, end)
    after = con.execute("SELECT SUM(ns) FROM sample_times WHERE pid = ? AND ts > ?",
                        (child, int(end))).fetchone()[0]
    assert not after, f"{after} ns of the child after its end"
    (total,) = con.execute("SELECT SUM(ns) FROM samples WHERE pid = ?", (child,)).fetchone()
    assert total and total <= (end - start + 0.3) * 1e9, (total, start, end)
    for tid, first, last in con.execute("SELECT tid, first_seen, last_seen FROM threads"
                                        " WHERE pid = ?", (child,)):
        assert first <= end and last <= end + 0.1, (tid, first, last, end)
    # The parent's own time is unchanged: its 5 s, almost all asleep.
    (ptotal,) = con.execute("SELECT SUM(ns) FROM samples WHERE pid = ?", (parent,)).fetchone()
    assert 4.2e9 <= ptotal <= 5.5e9, ptotal


BLOCKLOOP = os.path.join(PYDIR, "blockloop.py")
# Two builds with symbols and two stripped Debian builds, frame pointers or not.
SITE_PYTHONS = [(label, exe) for label, exe in h.pythons()
                if label in ("3.12", "3.14", "debian-3.11")]


@h.timeout(180)
@h.params([p for _, p in SITE_PYTHONS], ids=[label for label, _ in SITE_PYTHONS])
def test_threads_blocking_in_the_same_place_are_unwound_once(exe):
    """blockloop.py: 4 threads in a loop of queue.get(timeout=20 ms) at a known line, about
    50 blocks a second each, each block's stack taken. Woken by a timer, not by a thread of
    their process: on a kernel with BPF task works (Linux 6.18) the threads give each block's
    stack as they return from it (meta off_cpu_stacks_resume), none is left to the fetcher
    (which takes only blocks that last a second). Their native frames are unwound once per
    thread and place (stacksites.h); the later blocks that pass the checks reuse them: most of
    the blocks' stacks come from a known site (meta off_cpu_stacks_known_site); and every one
    of the pollers' lock stacks is whole: the line of the get, the futex wait below it, the
    thread's entry above it (no truncation bit). The kernel is told the sites, checks them
    where it takes a stack in the thread's own memory (the task work, the wake-up), and sends
    most of those blocks as their site's id, with no copy of the stack (meta
    off_cpu_stacks_site_id): the stacks above are made of those."""
    err = _check_blockloop(exe)
    meta = _check_blockloop.meta
    taken = _taken(meta)
    assert meta["off_cpu_stacks_site_id"] <= meta["off_cpu_stacks_known_site"], meta
    assert meta["off_cpu_stacks_site_lost"] == 0, meta
    if "as their threads resume" in err:
        assert meta["off_cpu_stacks_resume"] >= 0.6 * taken, meta
        assert meta["off_cpu_stacks_iterator"] <= 0.05 * taken, meta
        assert meta["off_cpu_stacks_site_id"] >= 0.6 * taken, meta


@h.timeout(180)
@h.params([p for _, p in SITE_PYTHONS], ids=[label for label, _ in SITE_PYTHONS])
def test_blocks_at_one_site_from_two_lines_keep_their_lines(exe):
    """blockloop.py with RUN 3: each of 4 pollers blocks 3 times at one line (20 ms timeouts),
    then 3 times at another (40 ms), in the same function: the same native stack (a known
    site), other Python frames. A block whose site, Python frames and kernel stack are those
    of its thread's last block reuses that block's stack (meta off_cpu_stacks_memo,
    user/record/blockmemo.h); a block from the other line must not: each poller's lock time
    splits 1:2 between the two lines, and every stack has its line."""
    lines = {}
    for i, text in enumerate(open(BLOCKLOOP), 1):
        for mark in ("BLOCK-HERE", "BLOCK-LONGER"):
            if mark in text:
                lines[mark] = i
    con, meta, taken, err = _record_blocks(exe, BLOCKLOOP, "4", "3", "20", "3")
    h.log(f"stacks taken {taken}, from a known site {meta['off_cpu_stacks_known_site']}, "
          f"the thread's last block's {meta['off_cpu_stacks_memo']}")
    assert taken >= 150, meta
    assert meta["off_cpu_stacks_memo"] <= meta["off_cpu_stacks_known_site"], meta
    # Two blocks of every six follow one at the other line.
    assert meta["off_cpu_stacks_memo"] >= 0.3 * taken, meta
    names = dict(con.execute("SELECT tid, name FROM threads"))
    pollers = [tid for tid, name in names.items() if (name or "").startswith("poller-")]
    assert len(pollers) == 4, names
    for tid in pollers:
        lock = dict(con.execute("SELECT stack_id, SUM(ns) FROM samples WHERE tid = ? AND "
                                "state = 'lock' GROUP BY stack_id", (tid,)))
        at = {mark: 0 for mark in lines}
        for sid, ns in lock.items():
            py = con.execute("SELECT func, lineno FROM frames WHERE stack_id = ? AND "
                             "kind = 'python'", (sid,)).fetchall()
            for mark, line in lines.items():
                if ("poll_queue", line) in py:
                    at[mark] += ns
        total = sum(lock.values())
        h.log(f"poller {tid}: {at} of {total} ns")
        assert at["BLOCK-HERE"] + at["BLOCK-LONGER"] >= 0.9 * total, (tid, at, total)
        ratio = at["BLOCK-LONGER"] / max(at["BLOCK-HERE"], 1)
        assert 1.4 <= ratio <= 2.8, (tid, at, total)


@h.timeout(120)
def test_one_place_reached_from_two_callers_keeps_a_site_for_each():
    """twowaits: 4 threads sleep 10 ms at a time, alternately through wait_via_a and
    wait_via_b, whose frames have one size: every sleep stops at the same instruction with the
    same stack pointer, from two native stacks (SITE_VARIANTS, stacksites.h). Each is learned
    once and kept beside the other, not learned again at each alternation: most blocks' stacks
    come from a known site, most of those as the site's id, with no copy of the stack; and each
    thread's sleep splits about 1:1 between the two callers, each stack whole (no truncation)."""
    con, meta, taken, err = _record_blocks(h.workload("twowaits"), "4", "3")
    h.log(f"stacks taken {taken}, from a known site {meta['off_cpu_stacks_known_site']}, "
          f"as its id {meta['off_cpu_stacks_site_id']}")
    # 4 threads x 3 s x ~90 sleeps a second, most of them seen at 99 Hz.
    assert taken >= 300, meta
    # One site a place: each block after the first two at the other caller was unwound again.
    assert meta["off_cpu_stacks_known_site"] >= 0.8 * taken, meta
    assert meta["off_cpu_stacks_site_lost"] == 0, meta
    if "as their threads resume" in err:
        assert meta["off_cpu_stacks_site_id"] >= 0.7 * taken, meta
    tids = [tid for (tid,) in con.execute(
        "SELECT DISTINCT tid FROM samples WHERE state = 'sleep' AND tid != pid")]
    assert len(tids) == 4, tids
    for tid in tids:
        by_caller = {"wait_via_a": 0, "wait_via_b": 0}
        total = 0
        for sid, ns, trunc in con.execute(
                "SELECT s.stack_id, SUM(s.ns), st.truncated FROM samples s JOIN stacks st "
                "ON st.stack_id = s.stack_id WHERE s.tid = ? AND s.state = 'sleep' "
                "GROUP BY s.stack_id", (tid,)):
            funcs = [f for (f,) in con.execute(
                "SELECT func FROM frames WHERE stack_id = ? ORDER BY depth", (sid,))]
            total += ns
            callers = [f for f in funcs if f in by_caller]
            if len(callers) == 1 and "nap" in funcs and "sleeper" in funcs and not trunc:
                by_caller[callers[0]] += ns
        h.log(f"thread {tid}: {by_caller} of {total} ns")
        assert sum(by_caller.values()) >= 0.9 * total, (tid, by_caller, total)
        ratio = by_caller["wait_via_a"] / max(by_caller["wait_via_b"], 1)
        assert 0.7 <= ratio <= 1.4, (tid, by_caller, total)


@h.timeout(180)
def test_stacks_taken_as_threads_resume_are_whole_while_samples_interrupt_them():
    """256 helpers wait on a queue, woken every 0.5 s: each block's stack is taken by the
    thread as it resumes (the task work), in its own context with interrupts on, while the
    sampler's interrupts (99 Hz a CPU) take samples of the same threads. Every off-CPU second
    of every helper has the one Python chain they block from (wait < get < helper < run <
    _bootstrap_inner < _bootstrap), whole: an interrupt's walk must not overwrite the frames
    the task work is reading (it did, with one scratch a CPU for both: chains cut short, about
    one block in a thousand at this rate)."""
    script = os.path.join(PYDIR, "queue_helpers.py")
    out, err = _record("-F", "99", "-d", "20", "--", "/usr/bin/python3.11", script, "256",
                       timeout=150)
    con = h.db(out)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert int(meta["off_cpu_resume_runs"]) >= 2000, meta
    chains = {}
    for sid, n in con.execute(
            "SELECT stack_id, SUM(count) FROM samples WHERE tid != pid AND state != 'running' "
            "GROUP BY stack_id"):
        chain = tuple(f for (f,) in con.execute(
            "SELECT func FROM frames WHERE stack_id = ? AND kind = 'python' ORDER BY depth",
            (sid,)))
        chains[chain] = chains.get(chain, 0) + n
    h.log(f"chains: {chains}")
    whole = ("wait", "get", "helper", "run", "_bootstrap_inner", "_bootstrap")
    assert chains.get(whole, 0) >= 10000, chains
    # A helper also blocks, now and then, on the queue's mutex another holds, entering
    # 'with self.not_empty:' in get (Condition.__enter__ acquires it): as whole a chain.
    wholes = {whole, ("__enter__",) + whole[1:]}
    # Overwritten walks: a frame not known ('[unknown]': a code object's copy from another
    # frame), a chain cut to its outer frames, a helper's chain not whole. A thread starting
    # (Thread.start's set() in _bootstrap_inner) or with no Python frame yet is not one.
    bad = {c: n for c, n in chains.items() if c not in wholes and c and (
        "[unknown]" in c or "helper" in c or c == whole[len(whole) - len(c):])}
    assert not bad, bad


@h.timeout(120)
def test_blocked_stacks_fetched_while_they_last_where_threads_do_not_give_them():
    """Without the task work (a kernel older than 6.18; PROBING_OFFCPU_NO_RESUME=1 here) the
    recorder's fetcher takes the blocks woken from outside the process while they last, reading
    the threads' memory from outside: the same stacks, as whole, as many; it reads most code
    objects once for several threads' walks, and most frames from one read of the page of the
    innermost."""
    exe = dict(SITE_PYTHONS).get("3.12") or SITE_PYTHONS[0][1]
    err = _check_blockloop(exe, env={"PROBING_OFFCPU_NO_RESUME": "1"}, fetcher=True)
    assert "as their threads resume" not in err, err[-2000:]
    assert _check_blockloop.meta["off_cpu_stacks_resume"] == 0


@h.timeout(120)
def test_blocked_stacks_fetched_by_a_task_iterator_where_the_kernel_refuses_the_syscall_program():
    """On a kernel that does not let a BPF syscall program call kfuncs, the recorder fetches
    blocked threads' stacks with a task iterator over each target's threads instead of one
    program over the sweep's queue (PROBING_OFFCPU_FETCH_ITER=1 takes that path here): the
    same stacks, as whole, as many."""
    exe = dict(SITE_PYTHONS).get("3.12") or SITE_PYTHONS[0][1]
    err = _check_blockloop(exe, env={"PROBING_OFFCPU_FETCH_ITER": "1"}, fetcher=True)
    assert "fetched by a task iterator" in err, err[-2000:]


def _taken(meta):
    return (meta["off_cpu_stacks_sweep"] + meta["off_cpu_stacks_wake"] +
            meta["off_cpu_stacks_iterator"] + meta["off_cpu_stacks_resume"])


def _record_blocks(*args, env=None):
    """Record --off-cpu -F 99 -v -- @args: (the recording, its meta, the blocks' stacks taken,
    the recorder's stderr)."""
    db, err = _record("-F", "99", "-v", "--", *args, env=env)
    con = h.db(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    return con, meta, _taken(meta), err


def _check_blockloop(exe, env=None, fetcher=False):
    """Record blockloop.py (4 pollers, 3 s, 20 ms timeouts) with --off-cpu and check the
    blocks' stacks (the test above); with @fetcher, that the fetcher took most of them. Return
    the recorder's stderr (its meta in _check_blockloop.meta)."""
    line = next(i for i, text in enumerate(open(BLOCKLOOP), 1) if "BLOCK-HERE" in text)
    con, meta, taken, err = _record_blocks(exe, BLOCKLOOP, "4", "3", "20", env=env)
    _check_blockloop.meta = meta
    h.log(f"{err}\nstacks taken {taken}, from a known site {meta['off_cpu_stacks_known_site']}")
    # 4 threads x 3 s x ~50 blocks/s, most of them observed at 99 Hz (a block lasts two periods).
    assert taken >= 200, meta
    assert meta["off_cpu_stacks_known_site"] >= 0.7 * taken, meta
    if fetcher:
        assert meta["off_cpu_stacks_iterator"] >= 100, meta
    # The fetcher's walks of the four threads (the same functions) take code objects'
    # headers read for another thread's walk (bpf/pystack.bpf.h, py_code_cache): 72 % of
    # them on an idle machine, 48 % in a full test run (a header is used only for blocks that
    # began before it was read: the more often the fetcher runs, the fewer threads share).
    if meta["off_cpu_stacks_iterator"] >= 100:
        code = meta["off_cpu_iterator_code_cached"] + meta["off_cpu_iterator_code_read"]
        assert meta["off_cpu_iterator_code_cached"] >= 0.25 * code, meta
        # Its walks copy the outer frames from the one read of the innermost frame's page
        # (from 3.11 a thread's frames lie side by side in its data stack): six Python
        # frames a poller's stack, most of them on that page; the stacks below are whole.
        assert meta["off_cpu_fetch_frames_from_page"] >= 2 * meta["off_cpu_stacks_iterator"], \
            meta
    names = dict(con.execute("SELECT tid, name FROM threads"))
    pollers = [tid for tid, name in names.items() if (name or "").startswith("poller-")]
    assert len(pollers) == 4, names
    trunc = dict(con.execute("SELECT stack_id, truncated FROM stacks"))
    for tid in pollers:
        lock = dict(con.execute("SELECT stack_id, SUM(ns) FROM samples WHERE tid = ? AND "
                                "state = 'lock' GROUP BY stack_id", (tid,)))
        total = sum(lock.values())
        assert total >= 1.5e9, (tid, lock)
        whole = 0
        for sid, ns in lock.items():
            frames = con.execute("SELECT kind, func, lineno FROM frames WHERE stack_id = ? "
                                 "ORDER BY depth", (sid,)).fetchall()
            py = [(f, ln) for kind, f, ln in frames if kind == "python"]
            native = [f for kind, f, _ in frames if kind == "native"]
            if (("poll_queue", line) in py and not trunc[sid] & 2 and
                    any("futex" in f or "sem_" in f or "cond" in f for f in native[:8]) and
                    any("clone" in f or "start_thread" in f for f in native[-3:])):
                whole += ns
            else:
                h.log(f"poller {tid}: stack {sid} ({ns} ns, truncated {trunc[sid]}): {frames}")
        # A block woken from outside the process that ended before its stack was taken is
        # counted under the function it waits in (docs/sql.md): rare here (the blocks are
        # timeouts, taken in the sweep, as the threads resume or by the fetcher).
        assert whole >= 0.9 * total, (tid, whole, total)
    return err


QUIET_JOB = r"""
import sys, threading, time
go = threading.Event()
spin_s, wait_s = float(sys.argv[1]), float(sys.argv[2])
spans = {}

def idle():
    threading.Event().wait(wait_s * 3)     # blocked for the whole run

def released():
    go.wait()                              # blocked, quiet, then woken
    t0 = time.time()
    while time.time() - t0 < spin_s:       # on the CPU (or waiting for it, or the GIL)
        pass
    spans[threading.get_native_id()] = t0

def short():
    time.sleep(0.05)

idlers = [threading.Thread(target=idle, daemon=True) for _ in range(24)]
spinners = [threading.Thread(target=released) for _ in range(2)]
t_start = time.time()
for t in idlers + spinners:
    t.start()
time.sleep(wait_s)
# Threads that end and whose tids (and slots) are taken again by new ones.
for _ in range(40):
    t = threading.Thread(target=short)
    t.start()
    t.join()
print(f"GO {time.time() - t_start:.3f}", file=sys.stderr, flush=True)
go.set()
for t in spinners:
    t.join()
time.sleep(0.5)
"""


@h.timeout(120)
def test_quiet_threads_are_counted_without_reading_them_and_seen_again_once_woken():
    """24 threads blocked all along, 2 blocked for a few seconds and then spinning for 1 s,
    and 40 short-lived threads (50 ms asleep each) started one after another meanwhile. The sweep counts a
    thread blocked in the same block at its last two looks, and still there (its task's
    state and context switches unchanged), without reading it again (quiet): most looks are
    quiet here. The idle threads' time is the recording's, as
    'lock'; the two released ones have at most their wait (until the job says GO) as 'lock'
    and at least 0.8 s of their spin in another state (a quiet thread not seen waking would keep its
    block's state); the short threads have their 50 ms of 'sleep' each (their slots freed at
    their end and taken again)."""
    exe = dict(h.pythons()).get("3.12") or h.pythons()[-1][1]
    db, err = _record("-F", "99", "-v", "--", exe, "-c", QUIET_JOB, "1.0", "2.0")
    go = float(re.search(r"^GO ([\d.]+)", err, re.M).group(1))
    con = h.db(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    h.log(err + json.dumps({k: v for k, v in meta.items() if k.startswith("off_cpu")}))
    assert meta["off_cpu_looks_quiet"] >= 0.5 * meta["off_cpu_looks"], meta
    duration = float(meta["duration"])
    by = _by_thread_state(con)
    names = dict(con.execute("SELECT tid, name FROM threads"))
    (main,) = con.execute("SELECT tid FROM threads WHERE tid = pid").fetchone()
    totals = {}
    for (tid, state), ns in by.items():
        totals.setdefault(tid, {})[state] = ns
    spun = {}
    for tid, st in totals.items():
        if tid == main:
            continue
        total = sum(st.values()) / 1e9
        lock = st.get("lock", 0) / 1e9
        other = total - lock - st.get("sleep", 0) / 1e9
        spun[tid] = (total, lock, other, st)
    # The idle threads: in 'lock' from their start to the end.
    idle = [v for v in spun.values() if v[0] >= 0.8 * duration and v[2] < 0.2]
    assert len(idle) >= 24, (len(idle), duration, len(spun))
    for total, lock, _, st in idle:
        assert lock >= 0.9 * total, st
    # The two released threads: 2 s blocked, then 1 s spinning.
    released = [v for v in spun.values() if v[2] >= 0.8]
    assert len(released) == 2, (released, len(spun))
    for total, lock, other, st in released:
        assert lock <= go + 0.3, (go, st)
        assert 0.8 <= other <= 1.6, st
    # The short threads: 50 ms asleep each, 40 of them.
    short = [v for v in spun.values() if v[0] < 0.5]
    assert len(short) == 40, (len(short), [(tid, names.get(tid), spun.get(tid))
                                           for tid in names if "short" in (names[tid] or "")
                                           and (tid not in spun or spun[tid][0] >= 0.5)])
    slept = sum(v[3].get("sleep", 0) for v in short) / 1e9
    assert 40 * 0.05 * 0.7 <= slept <= 40 * 0.05 * 1.5, slept
