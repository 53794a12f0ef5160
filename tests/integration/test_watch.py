"""probing watch (issue 19): a real 3-rank gloo DDP job (tests/workloads/torch/ddp_watch_job.py,
Debian's python3.11 with python3-torch 1.13, torchrun on loopback) watched from its start.

Ground truth comes from the job itself: each rank prints its pid, and the faulty rank prints
the moment it goes wrong (FAULT ... time=); the line where a hung rank sleeps for good is the
one marked HANG_LINE in the workload.
"""
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import time

import harness

TORCHRUN = "/usr/bin/torchrun"
JOB = os.path.join(harness.PY_WORKLOADS, "torch", "ddp_watch_job.py")
NRANKS = 3


def hang_line():
    with open(JOB) as f:
        for n, line in enumerate(f, 1):
            if "# HANG_LINE" in line:
                return n
    raise AssertionError("no HANG_LINE in the workload")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(monitor=None):
    """torchrun's command line; @monitor: its --monitor_interval (s) if not the default 5."""
    return [TORCHRUN, "--nproc_per_node", str(NRANKS), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), "--redirects", "1", "--tee", "1",
            *(("--monitor_interval", str(monitor)) if monitor else ()), JOB]


class Watch:
    """probing watch -o DIR [ARGS] -- torchrun ...: its output in a file, read as it grows.
    With attach: torchrun started first, on its own, and once its ranks are set up, probing
    watch -p TORCHRUN_PID --children -o DIR [ARGS] (a watch of a job already running)."""

    def __init__(self, args, attach=False, monitor=None, **env):
        self.dir = harness.tmp("watch")
        self.out_path = harness.tmp("watch.out")
        self.err_path = harness.tmp("watch.err")
        self.job_path = harness.tmp("job.out")
        env = {"OMP_NUM_THREADS": "1", **{k: str(v) for k, v in env.items()}}
        self.attach = attach
        self.job = None
        if attach:
            self.job = harness.spawn(torchrun(monitor), env=env, stdout=open(self.job_path, "w"),
                                     stderr=subprocess.STDOUT)
            self.ranks()
            cmd = [harness.PROBING, "watch", "-p", str(self.job.pid), "--children", "-o",
                   self.dir, *map(str, args)]
        else:
            open(self.job_path, "w").close()
            cmd = [harness.PROBING, "watch", "-o", self.dir, *map(str, args), "--",
                   *torchrun(monitor)]
        self.p = harness.spawn(cmd, env=env, stdout=open(self.out_path, "w"),
                               stderr=open(self.err_path, "w"))

    def out(self):
        """The watch's output and the job's (the job's alone until an attached watch runs)."""
        with open(self.job_path) as f:
            job = f.read()
        if not os.path.exists(self.out_path):
            return job
        with open(self.out_path) as f:
            return f.read() + job

    def watch_out(self):
        """The watch's output alone."""
        with open(self.out_path) as f:
            return f.read()

    def err(self):
        if not os.path.exists(self.err_path):
            return ""
        with open(self.err_path) as f:
            return f.read()

    def ranks(self):
        """{rank: pid} once every rank is set up."""
        def started():
            if self.job and self.job.poll() is not None:
                raise AssertionError("the job exited: " + self.out()[-2000:])
            if not self.job and self.p.poll() is not None:
                raise AssertionError("the watch exited: " + self.err()[-2000:])
            r = {int(a): int(b) for a, b in re.findall(r"rank (\d+) pid (\d+)", self.out())}
            return r if len(r) == NRANKS else None
        return harness.wait_for(started, timeout=120, what="3 ranks set up")

    def fault(self):
        """(rank, unix time) of the job's fault, once it printed it."""
        m = harness.wait_for(lambda: re.search(r"FAULT \w+ rank=(\d+) step=\d+ time=([\d.]+)",
                                               self.out()), timeout=120, what="the fault")
        return int(m.group(1)), float(m.group(2))

    def report(self, timeout=60):
        """The first report's path, and when it appeared (unix time)."""
        latest = os.path.join(self.dir, "latest-report")
        harness.wait_for(lambda: os.path.exists(latest), timeout=timeout, interval=0.05,
                         what="a report")
        t = time.time()
        with open(latest) as f:
            return f.read().strip(), t

    def stop(self):
        if self.job and self.job.poll() is None:
            self.job.send_signal(signal.SIGTERM)
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
        harness.log(self.out()[-4000:] + self.err()[-3000:])


def query(path, sql):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql)]
    finally:
        con.close()


def traced_or_stopped(pid):
    """The threads of @pid that are stopped or traced (a watch must leave none)."""
    bad = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            st = f.read()
        state = re.search(r"State:\s+(\S)", st).group(1)
        tracer = int(re.search(r"TracerPid:\s+(\d+)", st).group(1))
        if state in "tT" or tracer:
            bad.append((tid, state, tracer))
    return bad


@harness.timeout(240)
def test_watch_hung_rank_is_the_culprit():
    """One rank stops for good at a known line: within the threshold + 2 s a stall names it
    and that line as the culprit, and the others with the allreduce and seq they wait in.
    The report reads as a snapshot (backtrace -i) and as a recording (flamegraph -i, query
    -i). Killed with SIGKILL afterwards, the watch leaves the ranks running, untraced."""
    stall = 5
    w = Watch(["--stall", stall, "--segment", "10s"], FAULT="hang", FAULT_RANK=1,
              FAULT_STEP=30, STEP_MS=100)
    try:
        pids = w.ranks()
        rank, fault_time = w.fault()
        report, seen = w.report()
        out = w.out()
        assert re.search(r"probing watch: stall at [\d:]+: allreduce in flight on rank [02]",
                         out), out[-3000:]
        line = hang_line()
        culprit = (f"rank 1 (pid {pids[1]}) has been in hang_here "
                   f"({JOB}:{line}) for ")
        assert culprit in out, out[-3000:]
        # Its locals, read from outside: the step it hung at and the local it made.
        assert re.search(re.escape(culprit) + r"[\d.]+ s, blocked in clock_nanosleep \(sleep\); "
                         r"its locals there: step=30, shard='shard-6'\n", out), out[-3000:]
        m = re.search(r"the other 2 ranks wait in allreduce seq (\d+) of group \S+, entered "
                      r"[\d.]+ s ago: rank 0 \(pid (\d+)\), rank 2 \(pid (\d+)\)", out)
        assert m and int(m.group(2)) == pids[0] and int(m.group(3)) == pids[2], out[-3000:]
        seq = int(m.group(1))

        st = query(report, "SELECT * FROM watch_stall")
        assert len(st) == 1 and st[0]["kind"] == "culprit", st
        assert st[0]["culprit_pid"] == pids[1] and st[0]["culprit_rank"] == 1, st
        declared_in_time(st[0], fault_time, stall, seen, w)
        ranks = {r["rank"]: r for r in query(report, "SELECT * FROM watch_ranks")}
        assert set(ranks) == {0, 1, 2}, ranks
        assert ranks[1]["op"] is None and ranks[1]["func"] == "hang_here", ranks[1]
        assert ranks[1]["lineno"] == line and ranks[1]["file"] == JOB, ranks[1]
        assert ranks[1]["locals"] == "step=30, shard='shard-6'", ranks[1]
        # Every frame's locals are in the snapshot (bt_locals), hang_here's among them.
        loc = query(report, "SELECT l.name, l.repr FROM bt_locals l JOIN bt_frames f USING "
                    "(host, pid, tid, depth) WHERE f.func = 'hang_here' AND l.pid = "
                    f"{pids[1]}")
        assert {(x["name"], x["repr"]) for x in loc} == {("step", "30"),
                                                         ("shard", "'shard-6'")}, loc
        for r in (0, 2):
            assert ranks[r]["op"] == "allreduce" and ranks[r]["seq"] == seq, ranks[r]
        # The collectives of the last minutes: every rank's allreduce up to seq - 1, and
        # the two ranks that wait, in seq, not completed.
        rows = query(report, "SELECT rank, seq, ns FROM collectives WHERE op = 'allreduce'")
        for r in range(NRANKS):
            assert any(x["rank"] == r and x["seq"] == seq - 1 and x["ns"] is not None
                       for x in rows), (r, seq)
        waiting = {x["rank"] for x in rows if x["seq"] == seq and x["ns"] is None}
        assert waiting == {0, 2}, rows[-6:]

        bt = harness.probing("backtrace", "-i", report, check=True).stdout
        assert f"The odd one out: rank 1 (pid {pids[1]})" in bt, bt[:2000]
        assert f"hang_here ({JOB}:{line})" in bt, bt[:3000]
        folded = harness.probing("flamegraph", "-i", report, "--folded", "--pid", pids[1],
                                 check=True).stdout
        assert f"hang_here ({JOB}:{line})" in folded, folded[:2000]
        segs = [f for f in os.listdir(w.dir) if re.fullmatch(r"rec-\d+-\d+-\d+\.db", f)]
        assert segs, os.listdir(w.dir)
        q = harness.probing("query", "-i", os.path.join(w.dir, sorted(segs)[0]),
                            "SELECT count(*) AS n FROM samples", "-f", "csv", check=True)
        assert int(q.stdout.split()[-1]) > 0, q.stdout

        # The watch killed at any instant leaves the job as it was.
        w.p.send_signal(signal.SIGKILL)
        w.p.wait(timeout=30)
        time.sleep(0.5)
        for r in (0, 2):
            os.kill(pids[r], 0)  # alive
            assert traced_or_stopped(pids[r]) == [], (r, traced_or_stopped(pids[r]))
    finally:
        w.stop()


def declared_in_time(stall_row, fault_time, stall, seen, w):
    """The stall was declared (watch_stall.time: when its capture began) within the threshold
    + 2 s of the fault: the others enter the next allreduce within a step (100 ms) of it. The
    report then takes the time its snapshot and copy take, which a loaded machine stretches
    (seconds with a load of 30 on 2 cores): that time is measured by bench/bench_watch.py,
    not asserted here; it is logged."""
    harness.log(f"stall declared {stall_row['time'] - fault_time:.2f} s after the fault, "
                f"report on disk {seen - fault_time:.2f} s after it")
    # Not before (a stall from records not handled yet); the others may enter their
    # allreduce a little before the faulty rank prints its fault (descheduled in between).
    assert stall - 1 <= stall_row["time"] - fault_time <= stall + 2, \
        (stall_row["time"] - fault_time, w.watch_out(), w.err()[-3000:])


def segment_collectives(w):
    """{rank: completed collectives} in the segment the watch writes now."""
    assert w.p.poll() is None, w.err()[-2000:]
    for f in os.listdir(w.dir) if os.path.isdir(w.dir) else []:
        if f.startswith("rec-") and f.endswith(".db.partial"):
            try:
                rows = query(os.path.join(w.dir, f), "SELECT rank, count(*) AS n FROM "
                             "collectives WHERE ns IS NOT NULL GROUP BY rank")
            except sqlite3.Error:
                return {}
            return {r["rank"]: r["n"] for r in rows}
    return {}


@harness.timeout(300)
def test_watch_attached_to_running_job():
    """probing watch -p TORCHRUN --children on a job already running: its ranks are found
    (torchrun's children), their collectives followed from then on, and a rank that then
    stops for good at a known line is the culprit within the threshold + 2 s, the others
    waiting in their allreduce."""
    stall = 5
    fault = harness.tmp("fault")
    w = Watch(["--stall", stall, "--segment", "10s"], attach=True, FAULT="hang", FAULT_RANK=1,
              FAULT_STEP=0, FAULT_FILE=fault, STEP_MS=100)
    try:
        pids = w.ranks()
        # The watch follows the collectives of every rank before the fault.
        harness.wait_for(lambda: len(segment_collectives(w)) == NRANKS, timeout=120,
                         interval=0.5, what="the collectives of 3 ranks in the segment")
        assert w.p.poll() is None, w.err()[-2000:]
        open(fault, "w").close()
        rank, fault_time = w.fault()
        assert rank == 1
        report, seen = w.report()
        out = w.out()
        assert re.search(r"probing watch: stall at [\d:]+: allreduce in flight on rank [02]",
                         out), out[-3000:]
        line = hang_line()
        assert f"rank 1 (pid {pids[1]}) has been in hang_here ({JOB}:{line}) for " in out, \
            out[-3000:]
        m = re.search(r"the other 2 ranks wait in allreduce seq (\d+) of group \S+, entered "
                      r"[\d.]+ s ago: rank 0 \(pid (\d+)\), rank 2 \(pid (\d+)\)", out)
        assert m and int(m.group(2)) == pids[0] and int(m.group(3)) == pids[2], out[-3000:]
        st = query(report, "SELECT * FROM watch_stall")
        assert len(st) == 1 and st[0]["kind"] == "culprit", st
        assert st[0]["culprit_pid"] == pids[1] and st[0]["culprit_rank"] == 1, st
        declared_in_time(st[0], fault_time, stall, seen, w)
        ranks = {r["rank"]: r for r in query(report, "SELECT * FROM watch_ranks")}
        assert set(ranks) == {0, 1, 2}, ranks
        assert ranks[1]["func"] == "hang_here" and ranks[1]["lineno"] == line, ranks[1]
        # The snapshot has every rank and the launcher (the process given with -p).
        have = {r["pid"] for r in query(report, "SELECT DISTINCT pid FROM bt_threads")}
        assert set(pids.values()) | {w.job.pid} <= have, (have, pids, w.job.pid)
    finally:
        w.stop()


def marked_line(mark):
    with open(JOB) as f:
        for n, line in enumerate(f, 1):
            if f"# {mark}" in line:
                return n
    raise AssertionError(f"no {mark} in the workload")


@harness.timeout(240)
def test_watch_mismatch_broadcast_vs_allreduce():
    """Rank 1 calls broadcast while ranks 0 and 2 call all_reduce, at the same step (real
    gloo: each waits for the others in its own collective, the same seq): a mismatch naming
    each rank's collective and the line of the job that called it."""
    stall = 5
    w = Watch(["--stall", stall, "--segment", "10s"], FAULT="mismatch", FAULT_RANK=1,
              FAULT_STEP=20, STEP_MS=100)
    try:
        pids = w.ranks()
        rank, fault_time = w.fault()
        report, seen = w.report()
        out = w.watch_out()
        st = query(report, "SELECT * FROM watch_stall")
        assert len(st) == 1 and st[0]["kind"] == "mismatch", (st, out)
        declared_in_time(st[0], fault_time, stall, seen, w)
        assert "a mismatch: the ranks are in different collectives" in out, out
        m = re.search(r"2 ranks wait in allreduce seq (\d+) of group \S+, entered [\d.]+ s ago: "
                      rf"rank 0 \(pid {pids[0]}\), rank 2 \(pid {pids[2]}\)", out)
        assert m, out
        seq = int(m.group(1))
        assert re.search(rf"1 rank waits in broadcast seq {seq} of group \S+, entered [\d.]+ s "
                         rf"ago: rank 1 \(pid {pids[1]}\)", out), out
        bline, aline = marked_line("BROADCAST_LINE"), marked_line("ALLREDUCE_LINE")
        assert (f"rank 1 (pid {pids[1]}) calls broadcast seq {seq} of group 0 from main "
                f"({JOB}:{bline})") in out, out
        for r in (0, 2):
            assert (f"rank {r} (pid {pids[r]}) calls allreduce seq {seq} of group 0 from main "
                    f"({JOB}:{aline})") in out, out
        ranks = {r["rank"]: r for r in query(report, "SELECT * FROM watch_ranks")}
        assert ranks[1]["op"] == "broadcast" and ranks[1]["seq"] == seq, ranks[1]
        assert ranks[1]["lineno"] == bline, ranks[1]
        for r in (0, 2):
            assert ranks[r]["op"] == "allreduce" and ranks[r]["seq"] == seq, ranks[r]
            assert ranks[r]["lineno"] == aline, ranks[r]
    finally:
        w.stop()


@harness.timeout(300)
def test_watch_on_stall_and_recovery():
    """--on-stall runs its command at a stall with the report and the diagnosis in its
    environment, at most once per --on-stall-interval (a second stall within it: not run,
    said). Rank 1 stalls (sleeping in hang_for) for longer than the threshold, then
    resumes: the watch says it recovered and notes it in the stall's report."""
    stall = 4
    fault = harness.tmp("fault")
    hooks = harness.tmp("hooks")
    os.mkdir(hooks)
    open(fault, "w").close()
    cmd = f"env | grep ^PROBING_WATCH_ > {hooks}/$$.env"
    w = Watch(["--stall", stall, "--segment", "10s", "--on-stall", cmd,
               "--on-stall-interval", "1h"], FAULT="resume", FAULT_RANK=1, FAULT_STEP=20,
              FAULT_FILE=fault, STEP_MS=100)
    try:
        pids = w.ranks()
        rank, fault_time = w.fault()
        report, seen = w.report()
        envs = harness.wait_for(lambda: [f for f in os.listdir(hooks) if f.endswith(".env")],
                                timeout=30, what="the --on-stall command's output")
        time.sleep(0.5)  # it is written
        with open(os.path.join(hooks, envs[0])) as f:
            env = dict(line.split("=", 1) for line in f.read().split("\n") if "=" in line
                       and line.startswith("PROBING_WATCH_"))
        assert env["PROBING_WATCH_REPORT"] == report, env
        assert env["PROBING_WATCH_KIND"] == "culprit", env
        assert env["PROBING_WATCH_CULPRIT_PID"] == str(pids[1]), env
        assert env["PROBING_WATCH_CULPRIT_RANK"] == "1", env
        assert env["PROBING_WATCH_REASON"].startswith("allreduce in flight on rank"), env
        # The diagnosis's first line (env prints a multi-line value over several lines).
        assert env["PROBING_WATCH_DIAGNOSIS"].startswith(
            f"rank 1 (pid {pids[1]}) has been in hang_for ({JOB}:"
            f"{marked_line('RESUME_LINE')})"), env

        # It resumes: recovered, said and noted in the report.
        os.unlink(fault)
        harness.wait_for(lambda: "RESUMED rank=1" in w.out(), timeout=30, what="the resume")
        m = harness.wait_for(lambda: re.search(r"probing watch: recovered at [\d:]+, after "
                                               r"(\d+) s: collectives complete again; noted "
                                               r"in (\S+)", w.watch_out()),
                             timeout=30, what="the recovery")
        assert m.group(2) == report and int(m.group(1)) >= 0, m.group(0)
        st = query(report, "SELECT time, recovered_at FROM watch_stall")[0]
        assert st["recovered_at"] is not None and st["recovered_at"] > st["time"], st

        # A second stall within --on-stall-interval: a report, the command not run again.
        open(fault, "w").close()
        harness.wait_for(lambda: len(re.findall(r"probing watch: stall at", w.watch_out())) == 2,
                         timeout=60, what="a second stall")
        harness.wait_for(lambda: "--on-stall: not run, it ran" in w.err(), timeout=30,
                         what="the skipped command said")
        assert len([f for f in os.listdir(hooks) if f.endswith(".env")]) == 1, os.listdir(hooks)
        os.unlink(fault)
    finally:
        w.stop()


@harness.timeout(300)
def test_watch_wait_under_threshold_is_no_stall():
    """Rank 1 sleeps (in hang_for) a little less than the threshold, three times: the other
    ranks wait in their allreduce for ~0.3 s under it, and the watch, which reads the kernel's
    records only every half second, must see each allreduce complete before it judges (it
    reads everything recorded so far before declaring). Ground truth: rank 0's own time for
    each faulted step (its allreduce wait, and a little compute). A wait that came out over
    the threshold minus 0.1 s on a loaded machine proves nothing (a stall then is right):
    such trials are left out, and at least two must count."""
    stall = 3.0
    fault = harness.tmp("fault")
    w = Watch(["--stall", stall], FAULT="resume", FAULT_RANK=1, FAULT_STEP=15,
              FAULT_FILE=fault, STEP_MS=100)
    counted = 0
    try:
        w.ranks()
        for trial in range(3):
            stalls = len(re.findall(r"probing watch: stall at", w.watch_out()))
            faults = len(re.findall(r"FAULT resume rank=1", w.out()))
            open(fault, "w").close()
            m = harness.wait_for(
                lambda: re.findall(r"FAULT resume rank=1 step=(\d+) time=([\d.]+)",
                                   w.out())[faults:], timeout=60, what="the fault")
            step, fault_time = int(m[0][0]), float(m[0][1])
            time.sleep(max(0.0, fault_time + stall - 0.35 - time.time()))
            os.unlink(fault)
            done = harness.wait_for(
                lambda: re.search(rf"STEP rank=0 step={step} ms=([\d.]+)", w.out()),
                timeout=30, what="rank 0's faulted step")
            time.sleep(1.5)  # past the threshold, were the wait still running
            waited = float(done.group(1)) / 1000
            stalled = len(re.findall(r"probing watch: stall at", w.watch_out())) > stalls
            harness.log(f"trial {trial}: rank 0 waited {waited:.2f} s, stall: {stalled}")
            if waited < stall - 0.1:
                assert not stalled, (waited, w.watch_out()[-3000:])
                counted += 1
        assert counted >= 2, f"only {counted} trials under the threshold"
    finally:
        w.stop()


@harness.timeout(240)
def test_watch_rank_killed_by_sigsegv():
    """A rank killed by SIGSEGV in the job's first seconds of steps: a stall at once naming
    its death and signal (the first death, not the ranks torchrun kills after it), with the
    other ranks' stacks in the report. The exit is handled ahead of the samples that wait
    (the watch reads libtorch for the first of them then), so it is not late."""
    # Steps of 1.5 s: the others learn of the death at their next allreduce (a connection
    # reset) up to 1.5 s after it and wait, and torchrun kills them at its next check of
    # its workers: every 5 s by default, which once in a while came within 0.1 s of the
    # death (before the watch's snapshot: 2 of 11 runs here). Every 30 s: the others are
    # there for the watch to read, as in a job whose launcher is slower than the watch.
    w = Watch(["-v", "--segment", "10s"], monitor=30, FAULT="segv", FAULT_RANK=2,
              FAULT_STEP=2, STEP_MS=1500)
    try:
        pids = w.ranks()
        rank, fault_time = w.fault()
        report, seen = w.report()
        out = w.out()
        assert re.search(rf"stall at [\d:]+: rank 2 \(pid {pids[2]}\) killed by SIGSEGV", out), \
            out[-3000:]
        assert f"rank 2 (pid {pids[2]}) died: killed by SIGSEGV" in out, out[-3000:]
        st = query(report, "SELECT * FROM watch_stall")[0]
        assert st["kind"] == "dead-rank" and st["culprit_pid"] == pids[2], st
        assert st["culprit_rank"] == 2, st
        dead = query(report, f"SELECT * FROM watch_ranks WHERE pid = {pids[2]}")[0]
        assert dead["alive"] == 0 and dead["exit_status"] & 0x7f == signal.SIGSEGV, dead
        # Declared within 2 s of its end (the kernel's time of its exit: after its core
        # dump, which takes seconds of its own after the fault); the report's writing time
        # is logged (bench/bench_watch.py measures it).
        ranks = query(report, "SELECT pid, rank, alive, exit_status, exit_time FROM watch_ranks")
        harness.log(f"death declared {st['time'] - dead['exit_time']:.2f} s after the exit, "
                    f"report on disk {seen - dead['exit_time']:.2f} s after it; fault at "
                    f"{fault_time:.2f}, ranks {ranks}\n" +
                    "\n".join(x for x in w.err().splitlines() if re.search(
                        r"symbols|snapshot|report written|exited", x)))
        assert fault_time <= dead["exit_time"] and st["time"] - dead["exit_time"] < 2, \
            (fault_time, dead["exit_time"], st["time"], w.err()[-5000:])
        # The other ranks' stacks: read before torchrun tears the job down.
        have = {r["pid"] for r in query(report, "SELECT DISTINCT pid FROM bt_threads")}
        assert {pids[0], pids[1]} <= have, have
    finally:
        w.stop()


@harness.timeout(300)
def test_watch_healthy_job_and_bounds():
    """A healthy job with slow, steady steps watched for a minute: no stall. Meanwhile the
    segments keep to --keep (20 s, several times shorter than the run) and --max-size."""
    keep, seg, max_size = 20, 4, 3 << 20
    w = Watch(["--keep", f"{keep}s", "--segment", f"{seg}s", "--max-size", max_size,
               "--stall-floor", 5], FAULT="none", STEP_MS=300)
    try:
        w.ranks()
        end = time.time() + 60
        worst_age, worst_bytes = 0, 0
        while time.time() < end:
            assert w.p.poll() is None, w.err()[-2000:]
            now = time.time()
            files = [os.path.join(w.dir, f) for f in os.listdir(w.dir) if f.startswith("rec-")]
            done = [f for f in files if f.endswith(".db")]
            # A complete segment ended at its file's last change: none older than keep
            # (pruned once a second).
            if done:
                worst_age = max(worst_age, now - min(os.path.getmtime(f) for f in done))
            size = 0
            for f in files:
                try:
                    size += os.path.getsize(f)
                except FileNotFoundError:
                    pass
            worst_bytes = max(worst_bytes, size)
            time.sleep(1)
        assert worst_age <= keep + 2, worst_age
        assert worst_bytes <= max_size, worst_bytes
        assert "stall" not in w.out(), w.out()[-3000:]
        assert not os.path.exists(os.path.join(w.dir, "latest-report"))
        # On demand: a report, and no stall in it.
        d = harness.probing("watch", "--dump", w.dir, check=True)
        report = d.stdout.strip()
        st = query(report, "SELECT reason, kind FROM watch_stall")[0]
        assert st["reason"].startswith("asked for"), st
        assert "probing watch: report at" in w.out(), w.out()[-2000:]
    finally:
        w.stop()


@harness.timeout(300)
def test_watch_max_size_bounds_the_directory():
    """--max-size 1M with a job that writes several times that in the run (fast steps: many
    collectives) and a --keep that never binds: the segments never take more than 1M
    together (and a tenth: docs/watch.md), the oldest go first, and a new segment starts when the current one reaches a
    quarter of the size (not at every second once all of them together do)."""
    max_size, seg, run = 1 << 20, 4, 60
    w = Watch(["--keep", "1h", "--segment", f"{seg}s", "--max-size", "1M", "--stall-floor", 30],
              FAULT="none", STEP_MS=5)
    try:
        w.ranks()
        end = time.time() + run
        worst, seen = 0, {}
        while time.time() < end:
            assert w.p.poll() is None, w.err()[-2000:]
            size, listing = 0, []
            for f in os.listdir(w.dir):
                if not f.startswith("rec-"):
                    continue
                try:
                    n = os.path.getsize(os.path.join(w.dir, f))
                except FileNotFoundError:
                    continue
                size += n
                listing.append((f, n))
                name = f.split(".db")[0]
                seen[name] = max(seen.get(name, 0), n)
            if size > worst:
                worst, worst_listing = size, sorted(listing)
            time.sleep(0.5)
        written = sum(seen.values())
        harness.log(f"{len(seen)} segments, {written} bytes written, at most {worst} kept")
        assert written > 2 * max_size, (written, seen)
        # Within a tenth: the segment being written grows past its quarter while the
        # watch's loop is late (a load of 20-30 on 2 cores: 3-9% seen over 1M).
        assert worst <= max_size * 1.1, (worst, worst_listing)
        # Rotated by time (every 4 s) or at a quarter of the size (about 100 KB/s here: every
        # 2.5 s or so): not at every second.
        assert len(seen) <= run * 0.75, len(seen)
        kept = {f.split(".db")[0] for f in os.listdir(w.dir) if f.startswith("rec-")}
        # The newest are kept (a segment begun since the loop's last look is among them).
        names = sorted(set(seen) | kept, key=lambda n: int(n.rsplit("-", 1)[1]))
        kept = sorted(kept, key=lambda n: int(n.rsplit("-", 1)[1]))
        assert kept == names[-len(kept):], (kept, names)
        assert "stall" not in w.watch_out(), w.watch_out()
    finally:
        w.stop()


@harness.timeout(180)
def test_watch_single_process_and_native():
    """Without collectives there is no pace to judge a stall by: a single Python process that
    only sleeps gets no stall, a report on demand (where it is: no rank in a collective), and
    a program without Python that fails is a stall at its death, its status said."""
    d = harness.tmp("single")
    script = harness.tmp("single.py")
    with open(script, "w") as f:
        f.write("import time\n\ndef idle():\n    while True:\n        time.sleep(0.2)\n\nidle()\n")
    out, err = harness.tmp("single.out"), harness.tmp("single.err")
    p = harness.spawn([harness.PROBING, "watch", "-o", d, "--stall-floor", "2", "--", "python3",
                       script], stdout=open(out, "w"), stderr=open(err, "w"))
    try:
        harness.wait_for(lambda: os.path.exists(os.path.join(d, "watch.lock")) and
                         "watching" in open(err).read(), timeout=60, what="the watch")
        time.sleep(6)  # three times the floor: no stall
        assert p.poll() is None, open(err).read()
        assert "stall" not in open(out).read(), open(out).read()
        report = harness.probing("watch", "--dump", d, check=True).stdout.strip()
        st = query(report, "SELECT reason, kind, diagnosis FROM watch_stall")[0]
        assert st["kind"] == "no-progress", st
        assert re.search(rf"pid \d+ has been in idle \({re.escape(script)}:5\)", st["diagnosis"]), st
        # A report merges with other nodes' reports: alone, it is this node's job again
        # (the host on every row); with itself or with a recording it is refused, nothing
        # written.
        merged = harness.tmp("merged.db")
        m = harness.probing("merge", report, "-o", merged)
        assert m.returncode == 0, m.stderr
        host = socket.gethostname()
        assert f"probing merge: the job, from the watch reports of 1 node merged ({host}: " \
            "no-progress)" in m.stdout, m.stdout
        assert query(merged, "SELECT kind, host FROM watch_stall") == \
            [{"kind": "no-progress", "host": None}]
        assert [r["host"] for r in query(merged, "SELECT host FROM watch_node_stalls")] == [host]
        assert [r["host"] for r in query(merged, "SELECT host FROM watch_ranks")] == [host]
        os.unlink(merged)
        # A report from anyone: its text reaches the terminal escaped, one line per rank.
        evil = harness.tmp("evil.db")
        shutil.copy(report, evil)
        con = sqlite3.connect(evil)
        con.execute("UPDATE watch_ranks SET func = 'f\x1b[2J', wait = 'in x\nFAKE LINE', "
                    "state = 'S', label = 'z'")
        con.execute("UPDATE meta SET value = 'h\x07\nFAKE' WHERE key = 'host'")
        con.commit()
        con.close()
        m = harness.probing("merge", evil, "-o", merged)
        assert m.returncode == 0, m.stderr
        assert "\x1b" not in m.stdout and "\x07" not in m.stdout, m.stdout
        assert not re.search(r"^\s*FAKE", m.stdout, re.M), m.stdout
        os.unlink(merged)
        m = harness.probing("merge", report, report, "-o", merged)
        assert m.returncode == 1 and "are the same file" in m.stderr, m.stderr
        rec = harness.tmp("one.db")
        harness.probing("record", "-o", rec, "--", "python3", "-c", "import time; "
                        "time.sleep(0.3)", check=True)
        m = harness.probing("merge", report, rec, "-o", merged)
        assert m.returncode == 1 and re.search(r"cannot merge \S+, a watch report, with \S+, "
                                               r"a recording", m.stderr), m.stderr
        assert not os.path.exists(merged)
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    d2 = harness.tmp("native")
    p = harness.probing("watch", "-o", d2, "--", "sh", "-c", "sleep 2; exit 3", timeout=60)
    assert p.returncode == 0, p.stderr
    assert re.search(r"probing watch: stall at [\d:]+: pid (\d+) exited with status 3", p.stdout), \
        p.stdout
    assert re.search(r"pid \d+ died: exited with status 3", p.stdout), p.stdout
    with open(os.path.join(d2, "latest-report")) as f:
        st = query(f.read().strip(), "SELECT kind, culprit_pid FROM watch_stall")[0]
    assert st["kind"] == "dead-rank" and st["culprit_pid"], st


def test_watch_bad_input():
    """Clear messages and exit status 2 or 1, nothing started."""
    p = harness.probing("watch", "-p", "1")
    assert p.returncode == 2 and "-o DIR" in p.stderr, p.stderr
    p = harness.probing("watch", "-o", harness.tmp("d"))
    assert p.returncode == 2 and "-p PID, or -- COMMAND" in p.stderr, p.stderr
    p = harness.probing("watch", "-o", harness.tmp("d"), "--keep", "soon", "--", "true")
    assert p.returncode == 2 and "--keep 'soon'" in p.stderr, p.stderr
    f = harness.tmp("file")
    open(f, "w").close()
    p = harness.probing("watch", "-o", f, "--", "true")
    assert p.returncode == 1 and "is not a directory" in p.stderr, p.stderr
    p = harness.probing("watch", "--dump", harness.tmp())
    assert p.returncode == 1 and "no watch runs in" in p.stderr, p.stderr
    p = harness.probing("watch", "-o", harness.tmp("d2"), "-p", "999999999")
    assert p.returncode in (1, 2) and "999999999" in p.stderr, p.stderr
    # A second watch on a directory in use is refused.
    d = harness.tmp("busy")
    first = harness.spawn([harness.PROBING, "watch", "-o", d, "--", "sleep", "30"])
    harness.wait_for(lambda: os.path.exists(os.path.join(d, "watch.lock")) and
                     open(os.path.join(d, "watch.lock")).read().strip(), timeout=30,
                     what="the first watch")
    p = harness.probing("watch", "-o", d, "--", "true")
    assert p.returncode == 1 and "another watch" in p.stderr, p.stderr
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=30) == 0


@harness.timeout(300)
def test_watch_reports_of_two_nodes_merged():
    """A torchrun --nnodes 2 job, one rank per node (two network namespaces, a veth pair),
    one watch per node. Rank 1 stops for good at HANG_LINE: node a's watch sees its rank wait
    in an allreduce (all-waiting, the peer not on the node), node b's sees its rank away from
    collectives (no-progress); neither can name a culprit. Their reports merged: rank 1, on
    node-b, at HANG_LINE, is the culprit, and rank 0 on node-a waits in the allreduce's seq."""
    from test_merge import TwoNodes
    d = harness.tmp("nodes")
    os.makedirs(d)
    env = "OMP_NUM_THREADS=1 FAULT=hang FAULT_RANK=1 FAULT_STEP=20 STEP_MS=100"
    reports = {}
    with TwoNodes() as nodes:
        hosts = nodes.write_hosts(os.path.join(d, "hosts"))
        port = nodes.free_port("a")
        procs = {}
        for n in "ab":
            procs[n] = nodes.torchrun(n, hosts, port, f"watch -o {d}/watch-{n} --stall 5", JOB,
                                      env=env)
        logs = {n: harness.tmp(f"{n}.log") for n in "ab"}

        def both_reports():
            for n in "ab":
                assert procs[n].poll() is None, open(logs[n]).read()[-3000:]
            latest = [os.path.join(d, f"watch-{n}", "latest-report") for n in "ab"]
            return all(os.path.exists(p) for p in latest)
        try:
            harness.wait_for(both_reports, timeout=200, interval=0.2, what="both nodes' reports")
            time.sleep(1)  # the second report's line printed
            for n in "ab":
                with open(os.path.join(d, f"watch-{n}", "latest-report")) as f:
                    reports[n] = f.read().strip()
        finally:
            for n in "ab":
                # The watch is the first process of the node's PID namespace: when it ends,
                # the kernel ends torchrun and the rank with it.
                try:
                    init = int(open(f"/proc/{procs[n].pid}/task/{procs[n].pid}/children")
                               .read().split()[0])
                    os.kill(init, signal.SIGINT)
                except (OSError, ValueError, IndexError):
                    pass
            for n in "ab":
                try:
                    procs[n].wait(timeout=60)
                except subprocess.TimeoutExpired:
                    procs[n].kill()
                harness.log(open(logs[n]).read()[-3000:])
    out = {n: open(logs[n]).read() for n in "ab"}
    pids = {}  # rank -> (node, pid)
    for n in "ab":
        for r, pid in re.findall(r"rank (\d+) pid (\d+)", out[n]):
            pids[int(r)] = (n, int(pid))
    assert sorted(pids) == [0, 1], pids
    a0, b1 = pids[0][0], pids[1][0]
    assert a0 != b1, pids
    kinds = {n: query(reports[n], "SELECT kind FROM watch_stall")[0]["kind"] for n in "ab"}
    assert kinds[a0] == "all-waiting" and kinds[b1] == "no-progress", kinds
    assert "the ranks they wait for are not on this node (world size 2, 1 here)" in out[a0]

    job = os.path.join(d, "job.db")
    m = harness.probing("merge", reports["a"], reports["b"], "-o", job)
    assert m.returncode == 0, m.stderr
    harness.log(m.stdout + m.stderr)
    assert "merged 2 watch reports" in m.stderr and "node-a,node-b" in m.stderr, m.stderr
    line = hang_line()
    culprit = (f"rank 1 (pid {pids[1][1]}, node-{b1}) has been in hang_here ({JOB}:{line}) "
               "for ")
    assert culprit in m.stdout, m.stdout
    assert "its locals there: step=20, shard='shard-4'" in m.stdout, m.stdout
    w = re.search(r"the other 1 rank waits in allreduce seq (\d+) of group \S+, entered "
                  r"[\d.]+ s ago: rank 0 \(pid (\d+), node-(\w)\)", m.stdout)
    assert w and int(w.group(2)) == pids[0][1] and w.group(3) == a0, m.stdout
    st = query(job, "SELECT * FROM watch_stall")
    assert len(st) == 1 and st[0]["kind"] == "culprit", st
    assert (st[0]["culprit_rank"], st[0]["culprit_pid"], st[0]["host"]) == \
        (1, pids[1][1], f"node-{b1}"), st
    assert st[0]["reason"].startswith("the watch reports of 2 nodes merged"), st
    nodes_rows = query(job, "SELECT host, kind FROM watch_node_stalls ORDER BY host")
    assert nodes_rows == [{"host": f"node-{n}", "kind": kinds[n]} for n in "ab"], nodes_rows
    ranks = {r["rank"]: r for r in query(job, "SELECT * FROM watch_ranks")}
    assert ranks[1]["host"] == f"node-{b1}" and ranks[1]["lineno"] == line, ranks[1]
    assert ranks[0]["op"] == "allreduce" and ranks[0]["seq"] == int(w.group(1)), ranks[0]
    # The merged report reads as a recording and as a snapshot of both nodes.
    folded = harness.probing("flamegraph", "-i", job, "--folded", "--rank", 1,
                             check=True).stdout
    assert f"hang_here ({JOB}:{line})" in folded, folded[:2000]
    bt = harness.probing("backtrace", "-i", job, check=True).stdout
    assert "node-a" in bt and "node-b" in bt and f"hang_here ({JOB}:{line})" in bt, bt[:3000]
    # A merged report merges again: the same diagnosis.
    again = os.path.join(d, "again.db")
    one = os.path.join(d, "one.db")
    assert harness.probing("merge", reports[a0], "-o", one).returncode == 0
    m2 = harness.probing("merge", one, reports[b1], "-o", again)
    assert m2.returncode == 0, m2.stderr
    assert culprit in m2.stdout, m2.stdout


def folded_total(text, func=None):
    """The weights of folded stacks ("a;b;c N" lines), of stacks through @func if given."""
    n = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if func is None or re.search(rf"(^|;){func}[ (]", stack):
            n += int(count)
    return n


@harness.timeout(240)
def test_watch_directory_read_as_one_recording():
    """flamegraph, query and export -i DIR read what a watch keeps as one recording, while it
    runs and after, and --last N the last N seconds of it. Ground truth: a program in phase_a
    for 8 s, then in phase_b for 8 s, watched with 3-second segments: every segment alone
    is a complete recording; the directory holds the samples of all of them, phase_a's and
    phase_b's at their lines; its last 4 s only phase_b's; each segment's threads last seen
    no earlier than their last sample in it. Files that are not the watch's
    (an earlier watch's, a file made to look like a segment, a link) are left out."""
    script = os.path.join(harness.PY_WORKLOADS, "python", "two_phases.py")
    lines = {}
    with open(script) as f:
        for n, text in enumerate(f, 1):
            m = re.search(r"# (PHASE_[AB])_LINE", text)
            if m:
                lines[m.group(1)[-1].lower()] = n
    d, out = harness.tmp("phases"), harness.tmp("phases.out")
    p = harness.spawn([harness.PROBING, "watch", "-o", d, "--segment", "3s", "-F", "49", "--",
                       "/usr/bin/python3", script, "8", "8"], stdout=open(out, "w"),
                      stderr=subprocess.STDOUT)
    try:
        harness.wait_for(lambda: "PHASE b" in open(out).read(), timeout=60, what="phase_b")
        time.sleep(2)
        # While it runs: the segment being written (.partial) is read with the others.
        q = harness.probing("query", "-i", d, "-f", "json", "SELECT (SELECT value FROM meta "
                            "WHERE key = 'window_files') AS files, SUM(count) AS n FROM samples")
        assert q.returncode == 0, q.stderr
        running = __import__("json").loads(q.stdout)[0]
        names = [f for f in os.listdir(d) if f.startswith("rec-")]
        assert any(f.endswith(".partial") for f in names), names
        assert running["files"] >= 3 and running["n"] > 0, (running, names)
        assert p.wait(timeout=60) == 0, open(out).read()[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
    segs = sorted(os.path.join(d, f) for f in os.listdir(d) if re.match(r"rec-.*\.db$", f))
    assert len(segs) >= 5, segs
    per_file, per_file_folded = 0, 0
    for s in segs:
        # Each segment alone is complete: every stack's frames are in it. The last may have
        # no sample, when the program ended just after it began: said, with exit 1.
        n = query(s, "SELECT COALESCE(SUM(count), 0) AS n FROM sample_counts")[0]["n"]
        fg = harness.probing("flamegraph", "-i", s, "--folded")
        if n == 0 and s == segs[-1]:
            assert fg.returncode == 1 and "has no samples" in fg.stderr, (s, fg.stderr)
            continue
        assert fg.returncode == 0, (s, fg.stderr)
        per_file_folded += folded_total(fg.stdout)
        per_file += n
        # Its threads' rows say when they were last seen, no earlier than their last sample
        # in it (a thread seen at every tick has its row written every 10 s, and when a
        # segment ends).
        stale = query(s, "SELECT t.tid, t.last_seen, MAX(s.ts) AS last FROM threads t "
                      "JOIN sample_times s USING (pid, tid) GROUP BY t.pid, t.tid "
                      "HAVING t.last_seen < MAX(s.ts)")
        assert not stale, (s, stale)
    q = harness.probing("query", "-i", d, "-f", "json", "SELECT SUM(count) AS n, "
                        "(SELECT value FROM meta WHERE key = 'window_files') AS files, "
                        "MAX(ts) AS last FROM sample_times")
    assert q.returncode == 0, q.stderr
    whole = __import__("json").loads(q.stdout)[0]
    assert whole["n"] == per_file and whole["files"] == len(segs), (whole, per_file, segs)
    fg = harness.probing("flamegraph", "-i", d, "--folded")
    assert fg.returncode == 0, fg.stderr
    for ph in "ab":
        assert re.search(rf"phase_{ph} \(\S*two_phases.py:{lines[ph]}\)", fg.stdout), \
            fg.stdout[-3000:]
    assert folded_total(fg.stdout) == per_file_folded  # weights: time (--off-cpu)
    # The last 4 seconds: phase_b only (it ran for the last 8), 4 seconds at most.
    last = harness.probing("query", "-i", d, "--last", "4s", "-f", "json",
                           "SELECT COUNT(DISTINCT ts) AS secs, MAX(ts) AS last, "
                           "MIN(ts) AS first FROM sample_times")
    assert last.returncode == 0, last.stderr
    span = __import__("json").loads(last.stdout)[0]
    assert span["last"] == whole["last"] and span["first"] >= whole["last"] - 3, (span, whole)
    assert 3 <= span["secs"] <= 4, span
    fg4 = harness.probing("flamegraph", "-i", d, "--last", "4s", "--folded", "--no-lines")
    assert fg4.returncode == 0, fg4.stderr
    assert folded_total(fg4.stdout, "phase_b") > 0.8 * folded_total(fg4.stdout), fg4.stdout
    assert folded_total(fg4.stdout, "phase_a") == 0, fg4.stdout
    ex = harness.probing("export", "-i", d, "--last", "4s", "--format", "folded", "-o", "-")
    assert ex.returncode == 0, ex.stderr
    assert folded_total(ex.stdout) == folded_total(fg4.stdout), (ex.stdout, fg4.stdout)

    # What is not the watch's is left out, and said.
    d2 = harness.tmp("phases2")
    shutil.copytree(d, d2)
    older = os.path.join(d2, "rec-19700101-000000-1.db")
    shutil.copy(segs[0], older)
    con = sqlite3.connect(older)
    con.execute("UPDATE meta SET value = 'another' WHERE key = 'watch_id'")
    con.commit()
    con.close()
    os.utime(older, (1e9, 1e9))
    evil = os.path.join(d2, "rec-20990101-000000-9.db")
    shutil.copy(segs[-1], evil)
    con = sqlite3.connect(evil)
    con.executescript("DROP TABLE sample_counts; CREATE VIEW sample_counts AS WITH RECURSIVE "
                      "r(ts) AS (SELECT 1 UNION ALL SELECT ts + 1 FROM r) SELECT ts, 1 AS pid, "
                      "1 AS tid, 1 AS stack_id, 1000 AS count, 0 AS state, 0 AS ns FROM r")
    con.close()
    os.symlink("/etc/passwd", os.path.join(d2, "rec-link.db"))
    q = harness.probing("query", "-i", d2, "-f", "json", "SELECT SUM(count) AS n FROM samples",
                        timeout=60)
    assert q.returncode == 0, q.stderr
    assert __import__("json").loads(q.stdout)[0]["n"] == per_file, (q.stdout, per_file)
    assert "1 segment of an earlier watch left out" in q.stderr, q.stderr
    assert re.search(r"rec-20990101-000000-9.db is not a recording probing can read: its "
                     r"'sample_counts' is a view", q.stderr), q.stderr
    assert "rec-20990101-000000-9.db is left out" in q.stderr, q.stderr
    empty = harness.tmp("nothing")
    os.mkdir(empty)
    q = harness.probing("flamegraph", "-i", empty, "--folded")
    assert q.returncode == 1 and "holds no recording to read" in q.stderr, q.stderr
    q = harness.probing("query", "-i", d, "--last", "soon", "SELECT 1")
    assert q.returncode == 2 and "invalid --last 'soon'" in q.stderr, q.stderr


@harness.timeout(240)
def test_watch_torch_steps_without_collectives():
    """A training process without collectives, whose PyTorch hooks are in (probing inject
    --torch): its steps are its progress. Paused before its first step (no hooks yet): no
    stall; with the hooks in, training steadily: no stall; stopped for good at a known line
    (torch_train.py's pause, reading stdin): a stall within the threshold (3 s, the floor:
    a step takes about 15 ms) and the poll (1 s) + 2 s, naming that line; let go: recovered."""
    script = os.path.join(harness.PY_WORKLOADS, "torch", "torch_train.py")
    with open(script) as f:
        line = next(n for n, text in enumerate(f, 1) if "sys.stdin.readline()" in text)
    out = harness.tmp("train.out")
    # 1,000 steps after the pause at 400: several polls of the hooks (1 s) before it ends (at
    # 5 ms a step, 200 steps were over between two polls and the recovery was never seen).
    train = harness.spawn(["/usr/bin/python3", script, "--steps", "1400", "--pause-at", "0,400"],
                          stdin=subprocess.PIPE, stdout=open(out, "w"),
                          stderr=subprocess.STDOUT, env={"OMP_NUM_THREADS": "1"})
    d, wout, werr = harness.tmp("steps"), harness.tmp("steps.out"), harness.tmp("steps.err")
    w = None
    try:
        harness.wait_for(lambda: "PAUSE 0" in open(out).read(), timeout=90, what="PAUSE 0")
        w = harness.spawn([harness.PROBING, "watch", "-p", str(train.pid), "-o", d,
                           "--stall-floor", "3"], stdout=open(wout, "w"), stderr=open(werr, "w"))
        harness.wait_for(lambda: "watching" in open(werr).read(), timeout=60, what="the watch")
        time.sleep(5)  # paused, no hooks: nothing to judge by
        assert "stall" not in open(wout).read(), open(wout).read()
        harness.probing("inject", "-p", str(train.pid), "--torch", check=True)
        # The watch asks a process without the agent again after 10 s (STEPS_RETRY_S): the
        # hooks are found while still paused, and every step after is seen.
        time.sleep(12)
        train.stdin.write(b"go\n")
        train.stdin.flush()
        harness.wait_for(lambda: "PAUSE 400" in open(out).read(), timeout=120, what="PAUSE 400")
        paused = time.time()
        assert "stall" not in open(wout).read(), open(wout).read()  # steady steps
        m = harness.wait_for(lambda: re.search(r"probing watch: stall at [\d:]+: no training "
                                               r"step for (\d+) s \(threshold (\d+) s; at step "
                                               r"(\d+)", open(wout).read()),
                             timeout=60, interval=0.05, what="the stall")
        declared = time.time()
        thr = int(m.group(2))
        assert thr == 3, m.group(0)
        assert declared - paused <= thr + 1 + 2, (declared - paused, open(wout).read())
        report = harness.wait_for(lambda: os.path.exists(os.path.join(d, "latest-report")) and
                                  open(os.path.join(d, "latest-report")).read().strip(),
                                  timeout=60, what="the report")
        st = query(report, "SELECT kind, reason, diagnosis FROM watch_stall")[0]
        assert st["kind"] == "no-progress", st
        # Away since its last step: about the time it took to declare the stall.
        m = re.search(rf"pause \({re.escape(script)}:{line}\) for ([\d.]+) s", st["diagnosis"])
        assert m and thr - 0.5 <= float(m.group(1)) <= thr + 3, st
        train.stdin.write(b"go\n")
        train.stdin.flush()
        harness.wait_for(lambda: "recovered at" in open(wout).read(), timeout=30,
                         what="the recovery")
        assert "training steps move again" in open(wout).read(), open(wout).read()
        train.stdin.close()
        assert train.wait(timeout=120) == 0, open(out).read()[-2000:]
        assert w.wait(timeout=60) == 0, open(werr).read()[-2000:]
    finally:
        if train.poll() is None:
            train.kill()
        if w and w.poll() is None:
            w.send_signal(signal.SIGINT)
            w.wait(timeout=60)
        harness.log(open(wout).read()[-3000:] + open(werr).read()[-3000:])
