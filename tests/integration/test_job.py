"""A distributed job, not a process (issue 10, live side): backtrace, query and inject of every
rank of a real gloo DDP job (tests/workloads/torch/ddp_job.py), on each torch of torchenv.py
(Debian's torch 1.13 under torchrun on the host; torch 2.14 under python3.14 in Debian
unstable's root, started by launch.py), against the job's own ground truth: the rank and pid
each rank prints, the line where one rank is made to hang, the optimizer steps each rank
has taken."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import time

import harness as h
import torchenv

PY = "/usr/bin/python3.11"
TORCHRUN = "/usr/bin/torchrun"
WORKLOAD = os.path.join(h.PY_WORKLOADS, "torch", "ddp_job.py")
NRANKS = 3


def marked_line(tag):
    """The line of ddp_job.py marked '# @TAG'."""
    with open(WORKLOAD) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# @" + tag):
                return i
    raise AssertionError("no line marked @" + tag)


class Job:
    """ddp_job.py in NRANKS ranks on torch @t (torchrun, or launch.py in the root), its ranks
    ready (READY RANK PID)."""

    def __init__(self, t, *args):
        t.require()
        self.hang_file = h.tmp("hang")
        self.out_path = h.tmp("job.out")
        # torchrun: c10d rendezvous on port 0, the agent picks a free port (tests run side by
        # side); launch.py picks one itself.
        self.proc = h.spawn(t.launch(NRANKS, WORKLOAD, "--hang-file", self.hang_file, *args),
                            stdout=open(self.out_path, "w"), stderr=subprocess.STDOUT,
                            env=t.env(OMP_NUM_THREADS=1))
        self.pid = self.proc.pid
        self.ranks = h.wait_for(self.ready, timeout=240, interval=0.2, what="every rank READY")

    def ready(self):
        with open(self.out_path) as f:
            text = f.read()
        if self.proc.poll() is not None:
            raise AssertionError("torchrun exited %s: %s" % (self.proc.returncode, text[-2000:]))
        ranks = {int(r): int(p) for r, p in re.findall(r"READY (\d+) (\d+)", text)}
        return ranks if len(ranks) == NRANKS else None

    def pids(self):
        return [self.pid] + sorted(self.ranks.values())


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)


def assert_undisturbed(pids):
    """No thread of @pids stopped or traced."""
    for pid in pids:
        for tid in os.listdir("/proc/%d/task" % pid):
            st = proc_status(int(tid)) if os.path.exists("/proc/%s" % tid) else None
            if st is None:
                continue
            assert st["TracerPid"].strip() == "0", "%s traced: %s" % (tid, st["TracerPid"])
            assert st["State"][0] not in "tT", "%s left %s" % (tid, st["State"])


def main_thread(proc):
    return next(t for t in proc["threads"] if t["tid"] == proc["pid"])


@h.params(torchenv.ALL, ids=torchenv.IDS)
@h.timeout(400)
def test_job_backtrace_hung_rank(t):
    """One rank hangs in hang_here(): backtrace --children of torchrun finds every rank by
    its rank, the hung one at its line flagged as the odd one out, the others grouped once
    inside backward (their allreduce waits for it); JSON, snapshot round trip, query
    --children; nothing stopped or traced afterwards."""
    job = Job(t, "--hang-rank", "1")
    hang, backward = marked_line("hang"), marked_line("backward")
    open(job.hang_file, "w").close()
    seen = []

    def hung():
        r = h.probing("backtrace", "-p", job.pid, "--children", "--format", "json")
        assert r.returncode == 0, r.stderr
        procs = json.loads(r.stdout)
        by_rank = {p["rank"]: p for p in procs}
        if set(by_rank) != {None, *range(NRANKS)}:
            return None
        seen[:] = [[f["func"] for f in main_thread(by_rank[k])["frames"]] for k in range(NRANKS)]
        h.log("main threads: %s" % seen)
        leaves = [main_thread(by_rank[k])["frames"][0] for k in range(NRANKS)]
        # The others waiting in their backward (not still on their way to it: a snapshot
        # can catch them in the forward of the step rank 1 never joins, or running in the
        # backward before they block in it).
        ok = leaves[1]["func"] == "hang_here" and all(
            {"train_step", "backward"} <= {f["func"] for f in main_thread(by_rank[k])["frames"]}
            and main_thread(by_rank[k])["wait"] for k in (0, 2))
        return procs if ok else None

    procs = h.wait_for(hung, timeout=120, interval=0.5, what="rank 1 hung, the others waiting")

    # JSON: every process of the job, each with its rank and the documented fields.
    assert [p["pid"] for p in procs] == job.pids()
    keys = {"pid", "ppid", "rank", "local_rank", "world_size", "host", "cmdline", "threads"}
    tkeys = {"tid", "name", "state", "wait", "gil", "frames"}
    fkeys = {"kind", "func", "file", "lineno", "module"}
    for p in procs:
        assert keys <= set(p), sorted(p)
        assert p["status"] == "ok" and p["host"] == os.uname().nodename
        for th in p["threads"]:
            assert tkeys <= set(th), sorted(th)
            assert th["state"] in ("running", "sleeping", "disk wait", "stopped", "zombie",
                                  "idle", "dead", "unknown")
            assert all(fkeys <= set(f) for f in th["frames"])
    by_rank = {p["rank"]: p for p in procs}
    assert by_rank[None]["pid"] == job.pid and by_rank[None]["world_size"] is None
    for k in range(NRANKS):
        p = by_rank[k]
        assert (p["pid"], p["local_rank"], p["world_size"]) == (job.ranks[k], k, NRANKS)
        assert p["ppid"] == job.pid and p["odd_one_out"] == (k == 1)
    hung_main = main_thread(by_rank[1])
    assert (hung_main["frames"][0]["func"], hung_main["frames"][0]["lineno"]) == \
        ("hang_here", hang), hung_main["frames"][:2]
    assert hung_main["frames"][0]["file"] == WORKLOAD
    assert hung_main["state"] == "sleeping" and hung_main["wait"]["class"] == "sleep"
    assert hung_main["gil"] == "no"
    for k in (0, 2):
        fr = main_thread(by_rank[k])["frames"]
        funcs = [f["func"] for f in fr]
        assert "backward" in funcs and funcs.index("backward") < funcs.index("train_step"), \
            funcs
        assert any(f["func"] == "train_step" and f["lineno"] == backward for f in fr), fr
        assert main_thread(by_rank[k])["wait"]["class"] == "lock"
    # Thread names from native start routines: gloo's transport loop in every rank.
    for k in range(NRANKS):
        names = [t["name"] for t in by_rank[k]["threads"]]
        assert "gloo::transport::tcp::Loop::run" in names, names

    # Text: the odd one out named; the waiting ranks' stack printed once, under a header
    # naming both; the hung rank's on its own.
    r = h.probing("backtrace", "-p", job.pid, "--children")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    head = text.splitlines()[0]
    assert head.startswith("Job: %d processes, %d ranks of %d" % (NRANKS + 1, NRANKS, NRANKS)), \
        head
    assert "The odd one out: rank 1 (pid %d)" % job.ranks[1] in text, text[:500]
    waiting = "rank 0 (pid %d), rank 2 (pid %d)" % (job.ranks[0], job.ranks[2])
    train = "train_step (%s:%d)" % (WORKLOAD, backward)
    assert text.count(train) == 1, text
    block = text[text.rindex("\n[", 0, text.index(train)):text.index(train)]
    assert '"MainThread" of ' + waiting in block, block
    hung_line = "hang_here (%s:%d)" % (WORKLOAD, hang)
    block = text[text.rindex("\n[", 0, text.index(hung_line)):text.index(hung_line)]
    assert '1 thread: "MainThread" of rank 1 (pid %d)  <-- the odd one out' % job.ranks[1] \
        in block, block

    # Snapshot: the same processes, ranks and stacks back from the file; SQL on it.
    snap = h.tmp("job.db")
    r = h.probing("backtrace", "-p", job.pid, "--children", "-o", snap)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    r = h.probing("backtrace", "-i", snap, "--format", "json")
    assert r.returncode == 0, r.stderr
    loaded = {p["rank"]: p for p in json.loads(r.stdout)}
    for k in range(NRANKS):
        assert loaded[k]["pid"] == job.ranks[k] and loaded[k]["odd_one_out"] == (k == 1)
        assert main_thread(loaded[k])["frames"] == main_thread(by_rank[k])["frames"]
    r = h.probing("backtrace", "-i", snap)
    assert r.returncode == 0 and train in r.stdout and text.count(train) == 1, r.stderr
    assert "The odd one out: rank 1 (pid %d)" % job.ranks[1] in r.stdout
    con = sqlite3.connect(snap)
    assert con.execute("SELECT value FROM meta WHERE key = 'kind'").fetchone() == ("backtrace",)
    assert con.execute("SELECT rank, pid FROM bt_processes WHERE odd_one_out").fetchall() == \
        [(1, job.ranks[1])]
    assert con.execute("SELECT f.func, f.lineno FROM bt_frames f JOIN bt_processes p"
                       " USING (host, pid) WHERE p.rank = 1 AND f.tid = f.pid AND f.depth = 0"
                       ).fetchall() == [("hang_here", hang)]
    con.close()
    r = h.probing("query", "-i", snap, "--format", "json",
                  "SELECT ranks, processes FROM bt_groups WHERE stack LIKE '%s%%'"
                  % t.backward_leaf)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"ranks": "0,2", "processes": 2}], r.stdout
    r = h.probing("flamegraph", "-i", snap, "-o", h.tmp("f.svg"))
    assert r.returncode == 1 and "backtrace snapshot" in r.stderr, r.stderr

    # query --children: one result with a rank column; live tables of every rank.
    r = h.probing("query", "-p", job.pid, "--children", "--format", "json",
                  "SELECT func, lineno FROM python.backtrace WHERE tid = (SELECT pid FROM "
                  "system.process) AND depth = 0")
    assert r.returncode == 0, r.stderr
    rows = {row["rank"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {None, *range(NRANKS)}, rows
    assert rows[None]["pid"] == job.pid
    assert (rows[1]["pid"], rows[1]["func"], rows[1]["lineno"]) == \
        (job.ranks[1], "hang_here", hang)
    assert rows[0]["func"] == rows[2]["func"] == t.backward_leaf, rows
    # A table only the agent serves: every rank reported, none answers: a failure, said so.
    r = h.probing("query", "-p", job.pid, "--children", "SELECT * FROM python.torch_trace")
    assert r.returncode == 1
    for k in range(NRANKS):
        assert "rank %d (pid %d): python.torch_trace is served by the agent" % (
            k, job.ranks[k]) in r.stderr, r.stderr

    # memory --children: each process under its header, read from /proc.
    r = h.probing("memory", "-p", job.pid, "--children", "--no-python", "-n", "1")
    assert r.returncode == 0, r.stderr
    heads = re.findall(r"^==> (.*) <==$", r.stdout, re.M)
    assert heads == ["pid %d" % job.pid] + ["rank %d (pid %d)" % (k, job.ranks[k])
                                             for k in range(NRANKS)], heads

    # --native holds each thread for a moment: still every rank, and none left stopped.
    r = h.probing("backtrace", "-p", job.pid, "--children", "--native", "--format", "json")
    assert r.returncode == 0, r.stderr
    nat = {p["rank"]: p for p in json.loads(r.stdout)}
    for k in (0, 2):
        fr = main_thread(nat[k])["frames"]
        assert fr[0]["kind"] == "native" and "train_step" in [f["func"] for f in fr], fr[:3]
    assert main_thread(nat[1])["frames"][0]["kind"] == "native"
    assert any(f["func"] == "hang_here" for f in main_thread(nat[1])["frames"])

    assert_undisturbed(job.pids())
    assert job.proc.poll() is None


@h.timeout(60)
def test_job_bad_input():
    """--children of a process without children is that process; a zombie in the list is
    reported as gone, not a failure; a process whose environment cannot be read (as nobody)
    gets rank unknown with a note."""
    sleeper = h.spawn([PY, "-c", "import time; time.sleep(600)"], env={"RANK": "5"})
    zombie = subprocess.Popen(["/bin/true"])
    h.wait_for(lambda: proc_status(zombie.pid)["State"].startswith("Z"), what="a zombie")
    h.wait_for(lambda: "sleep" in h.probing("backtrace", "-p", sleeper.pid).stdout,
               what="the sleeper in sleep")
    try:
        r = h.probing("backtrace", "-p", sleeper.pid, "--children", "--format", "json")
        assert r.returncode == 0, r.stderr
        procs = json.loads(r.stdout)
        assert [(p["pid"], p["rank"]) for p in procs] == [(sleeper.pid, 5)]

        r = h.probing("backtrace", "-p", "%d,%d" % (sleeper.pid, zombie.pid), "--format",
                      "json")
        assert r.returncode == 0, r.stderr
        st = {p["pid"]: p["status"] for p in json.loads(r.stdout)}
        assert st == {sleeper.pid: "ok", zombie.pid: "gone"}, st
        r = h.probing("backtrace", "-p", "%d,%d" % (sleeper.pid, zombie.pid))
        assert r.returncode == 0 and "gone" in r.stdout + r.stderr, r.stdout + r.stderr
    finally:
        zombie.wait()

    # As nobody: a job of one of nobody's processes and one of root's, whose environment
    # and memory are closed to nobody: that one is rank unknown, with a note; the other read.
    theirs = h.spawn(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                      PY, "-c", "import time; time.sleep(600)"], env={"RANK": "4"})
    h.wait_for(lambda: os.path.exists("/proc/%d/exe" % theirs.pid) and
               os.readlink("/proc/%d/exe" % theirs.pid).startswith("/usr/bin/python3"),
               what="nobody's python")
    r = h.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
               h.PROBING, "backtrace", "-p", "%d,%d" % (theirs.pid, sleeper.pid), "--format",
               "json"])
    assert r.returncode == 0, r.stderr
    assert "rank unknown for 1 process (e.g. pid %d): cannot read its environment" % (
        sleeper.pid) in r.stderr, r.stderr
    procs = {p["pid"]: p for p in json.loads(r.stdout)}
    assert (procs[theirs.pid]["rank"], procs[theirs.pid]["status"]) == (4, "ok")
    mine = procs[sleeper.pid]
    assert (mine["rank"], mine["status"]) == (None, "error") and "not allowed" in mine["error"]
    assert sleeper.poll() is None and theirs.poll() is None

    # -i of what is not a snapshot: said so, with what makes one.
    junk = h.tmp("junk.db")
    with open(junk, "w") as f:
        f.write("not a database\n")
    r = h.probing("backtrace", "-i", junk)
    assert r.returncode == 1 and "is not a probing backtrace snapshot" in r.stderr, r.stderr
    r = h.probing("backtrace", "-i", h.tmp("none.db"))
    assert r.returncode == 1 and "probing backtrace -p PID -o" in r.stderr, r.stderr


def live_rows(pid, sql):
    r = h.probing("query", "-p", pid, "--children", "--format", "json", sql)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@h.params(torchenv.ALL, ids=torchenv.IDS)
@h.timeout(400)
def test_job_steps_line_up(t):
    """inject --children --torch into every rank of a job, one rank long before the others:
    the same training step has the same number in python.torch_trace on every rank (steps
    that start together, their optimizer.step within a fraction of the pause between steps),
    and that number is the job's own: the step after ITER optimizer steps is ITER + 1
    (ddp_job.py's StepLR, made before the install, wraps the optimizer's step on the
    instance: those steps are seen too)."""
    pause = 0.3
    job = Job(t, "--hang-rank", "1", "--sleep", pause)
    r = h.probing("inject", "-p", job.ranks[0], "--torch")
    assert r.returncode == 0, r.stderr
    h.probing("config", "-p", job.ranks[0], "torch_every=1", check=True)
    # Rank 0 records 6 steps before the others are injected: theirs start 4 or more later.
    h.wait_for(lambda: live_rows(job.ranks[0], "SELECT step FROM python.torch_trace WHERE "
                                 "stage = 'step' LIMIT 6")[5:], timeout=30, interval=0.2,
               what="rank 0's first recorded steps")
    # Every Python process of the job: the launcher and the other ranks get the agent, rank 0
    # keeps its hooks.
    r = h.probing("inject", "-p", job.pid, "--children", "--torch")
    assert r.returncode == 0, r.stderr
    for k in range(NRANKS):
        assert "==> rank %d (pid %d) <==" % (k, job.ranks[k]) in r.stdout, r.stdout
    assert "==> pid %d <==" % job.pid in r.stdout
    h.probing("config", "-p", job.pid, "--children", "torch_every=1", check=True)
    h.wait_for(lambda: len({row["rank"] for row in live_rows(
        job.pid, "SELECT rank FROM python.torch_trace WHERE stage = 'step' AND step > 0")})
        == NRANKS, timeout=30, interval=0.2, what="steps recorded on every rank")
    time.sleep(3 * pause)
    open(job.hang_file, "w").close()
    h.wait_for(lambda: "hang_here" in h.probing("backtrace", "-p", job.ranks[1]).stdout,
               timeout=30, interval=0.2, what="rank 1 hung")

    rows = live_rows(job.pid, "SELECT step, ts FROM python.torch_trace WHERE stage = 'step'")
    steps = {k: {row["step"]: row["ts"] for row in rows if row["rank"] == k}
             for k in range(NRANKS)}
    assert min(steps[0]) < min(steps[1]) - 3, (min(steps[0]), min(steps[1]))
    common = set(steps[0]) & set(steps[1]) & set(steps[2])
    assert len(common) >= 3, {k: sorted(v) for k, v in steps.items()}
    for s in common:
        ts = [steps[k][s] for k in range(NRANKS)]
        assert max(ts) - min(ts) < pause / 2, (s, ts)
    status = live_rows(job.pid, "SELECT step_source FROM python.torch_status")
    assert [row["step_source"] for row in status if row["rank"] is not None] == \
        ["optimizer_state"] * NRANKS, status
    # The hung rank took ITER optimizer steps: its last step is numbered ITER, and so is
    # every rank's (the others wait inside step ITER + 1's backward, before its optimizer).
    r = h.probing("eval", "-p", ",".join(str(job.ranks[k]) for k in range(NRANKS)), "ITER")
    assert r.returncode == 0, r.stderr
    iters = {int(k): int(v) for k, v in re.findall(r"==> rank (\d) \(pid \d+\) <==\n(\d+)\n",
                                                    r.stdout)}
    n = iters[1]
    assert iters == {k: n for k in range(NRANKS)}, r.stdout
    # With --children the launcher is in too, and has no ITER: its failure says whose it is,
    # and does not fail the command (the ranks answered; issue 20).
    r = h.probing("eval", "-p", job.pid, "--children", "ITER")
    assert r.returncode == 0 and "NameError" in r.stderr, r.stderr
    assert "probing eval: pid %d, not a rank" % job.pid in r.stderr, r.stderr
    assert r.stdout.count("\n%d\n" % n) == NRANKS, r.stdout
    assert [max(steps[k]) for k in range(NRANKS)] == [n] * NRANKS, (n, [max(steps[k]) for k in
                                                                        range(NRANKS)])
    # One timeline of every rank: a process per rank, named by its rank.
    out = h.tmp("job.json")
    r = h.probing("export", "-p", job.pid, "--children", "--format", "chrome", "-o", out)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    named = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert named == {job.ranks[k]: "rank %d/%d (pid %d)" % (k, NRANKS, job.ranks[k])
                     for k in range(NRANKS)}, named
    assert_undisturbed(job.pids())


@h.params(torchenv.ALL, ids=torchenv.IDS)
@h.timeout(360)
def test_job_record_thread_names(t):
    """In a recording, the gloo and c10d threads of every rank (which set no name of their
    own: all 'python3.11', or 'python3.14') are named by the routine they run."""
    job = Job(t, "--hang-rank", "-1", "--sleep", "0")
    rec = h.tmp("rec.db")
    r = h.probing("record", "-p", ",".join(map(str, job.ranks.values())), "-d", "2", "-F",
                  "499", "-o", rec)
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(rec)
    names = {}
    for pid, name in con.execute("SELECT pid, name FROM threads WHERE tid != pid"):
        names.setdefault(pid, set()).add(name)
    con.close()
    routines = {"gloo::transport::tcp::Loop::run", "c10d::ProcessGroupGloo::runLoop"}
    for k in range(NRANKS):
        got = names.get(job.ranks[k], set())
        assert got & routines, (k, got)
        assert t.thread_name not in got, (k, got)
    assert_undisturbed(job.pids())


SCRIPT_RANK = r"""
import os, sys, time
# One write(2) for the whole line: the two ranks share the output file, and print() of
# several items under PYTHONUNBUFFERED writes each item apart (the lines interleaved).
os.write(1, ("READY %s %d\n" % (os.environ["RANK"], os.getpid())).encode())
time.sleep(120)
"""


def _script_job(name, port, extra_env=""):
    """sh NAME: a shell script that starts two Python ranks itself (RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT set by hand, @extra_env too); returns (sh, {rank: pid})."""
    worker = h.tmp("rank.py")
    with open(worker, "w") as f:
        f.write(SCRIPT_RANK)
    script = h.tmp(name)
    with open(script, "w") as f:
        f.write("export MASTER_ADDR=127.0.0.1 MASTER_PORT=%d WORLD_SIZE=2 %s\n"
                "RANK=0 LOCAL_RANK=0 %s %s &\nRANK=1 LOCAL_RANK=1 %s %s &\nwait\n"
                % (port, extra_env, PY, worker, PY, worker))
    out = h.tmp(name + ".out")
    sh = h.spawn(["sh", script], stdout=open(out, "w"), stderr=subprocess.STDOUT)

    def ready():
        text = open(out).read()
        ranks = {int(r): int(p) for r, p in re.findall(r"READY (\d+) (\d+)", text)}
        if len(ranks) == 2:
            return ranks
        if sh.poll() is not None:
            raise AssertionError(f"sh {name} exited {sh.returncode}: {text[-2000:]}")
        return None
    try:
        return sh, h.wait_for(ready, timeout=60, what="both ranks READY")
    except AssertionError:
        h.log(f"{name}: {open(script).read()}\n{name}.out: {open(out).read()[-2000:]}")
        raise


def test_job_launched_by_a_shell_script_is_named_by_its_command():
    """Ranks started by 'sh launch.sh' with RANK set by hand (issue 17): the job's launcher
    is the script, not torchrun, in backtrace's job header and in list --all (the web UI's
    job line); and torchrun's TORCHELASTIC_RUN_ID=none (no --rdzv_id) names no job: the job
    is the rendezvous address, not "none"."""
    sh, ranks = _script_job("launch.sh", 29561)
    r = h.probing("backtrace", "-p", sh.pid, "--children")
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert header.startswith("Job: 3 processes, 2 ranks of 2 (sh "), header
    assert "launch.sh)" in header and "torchrun" not in header, header
    # A job of torchrun's workers without --rdzv_id (as torchrun sets it: RANK with
    # TORCHELASTIC_RUN_ID=none).
    _, tranks = _script_job("torchrun-like.sh", 29562, "TORCHELASTIC_RUN_ID=none")
    r = h.probing("list", "--all", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jobs = {tuple(j["ranks"]): j for j in doc["jobs"]}
    mine = jobs[(ranks[0], ranks[1])]
    assert mine["job"] == "127.0.0.1:29561", mine
    assert mine["launched_by"].startswith("sh ") and \
        mine["launched_by"].endswith("launch.sh"), mine
    other = jobs[(tranks[0], tranks[1])]
    assert other["job"] == "127.0.0.1:29562" and other["launched_by"] == "torchrun", other
    assert "none" not in [j["job"] for j in doc["jobs"]], doc["jobs"]
    assert_undisturbed([sh.pid, *ranks.values()])
