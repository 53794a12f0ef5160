"""Recording a distributed job: 'probing record --children -p PID' of a running torchrun job
records every rank that already runs, with its place in the job (processes.rank ...), and
the comparison of ranks (the view rank_deviation, flamegraph --by rank) names the rank made
slower and the function it spends the extra time in.

The job: tests/workloads/torch/ddp_straggler.py, 3 ranks of gloo DDP on CPU under Debian's
torchrun; rank 1 spends 30 ms of its own CPU time per step in straggler_burn(), and logs how
much it has spent. One job run serves every assertion.
"""
import json
import os
import re
import signal
import socket
import xml.etree.ElementTree as ET

import harness
from harness import probing

WORKLOAD = os.path.join(harness.PY_WORKLOADS, "torch", "ddp_straggler.py")
TORCHRUN = "/usr/bin/torchrun"
WORLD, SLOW_RANK, SLOW_MS, FREQ = 3, 1, 30, 199
SVG = "{http://www.w3.org/2000/svg}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(ready):
    """Start the job and wait until every rank has done a step; return (torchrun, {rank: pid}).
    A port taken by someone else between free_port() and torchrun's bind makes torchrun exit:
    try again with another."""
    for attempt in range(3):
        for name in os.listdir(ready):
            os.unlink(os.path.join(ready, name))
        log = open(harness.tmp(f"torchrun-{attempt}.log"), "w")
        job = harness.spawn(
            [TORCHRUN, "--redirects", "1", "--tee", "1", "--nproc_per_node", str(WORLD),
             "--master_addr", "127.0.0.1", "--master_port", str(free_port()), WORKLOAD,
             "--ready-dir", ready, "--slow-rank", str(SLOW_RANK), "--slow-ms", str(SLOW_MS),
             "--seconds", "120"],
            stdout=log, stderr=log)

        def all_ready():
            if job.poll() is not None:
                return "exited"
            found = [n for n in os.listdir(ready) if re.fullmatch(r"rank\.\d+", n)]
            return len(found) == WORLD
        if harness.wait_for(all_ready, timeout=180, interval=0.2,
                            what="the ranks of the job to start") == "exited":
            continue
        pids = {}
        for r in range(WORLD):
            with open(os.path.join(ready, f"rank.{r}")) as f:
                pid, world = map(int, f.read().split())
            assert world == WORLD
            pids[r] = pid
        return job, pids
    with open(log.name) as f:
        raise AssertionError("torchrun did not start the job: " + f.read()[-2000:])


def burn_between(path, start, end):
    """CPU seconds straggler_burn took between unix times @start and @end, from its log
    (steps are short: the nearest logged step on either side)."""
    rows = []
    with open(path) as f:
        for line in f:
            t, total = map(float, line.split())
            rows.append((t, total))

    def at(when):
        before = [total for t, total in rows if t <= when]
        return before[-1] if before else 0.0
    return at(end) - at(start)


@harness.timeout(400)
def test_record_children_of_a_running_torchrun_job():
    ready = harness.tmp("ready")
    os.mkdir(ready)
    job, pids = start_job(ready)
    db = harness.tmp("job.db")
    rec = probing("record", "--children", "-p", job.pid, "-F", FREQ, "-d", 4, "-o", db,
                  timeout=120)
    assert rec.returncode == 0, rec.stderr
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    con = harness.db(db)

    # Every rank, with its right rank and identity; the agent itself has no rank.
    rows = con.execute("SELECT pid, ppid, rank, local_rank, world_size, group_rank, job_id,"
                       " host FROM processes").fetchall()
    by_pid = {r[0]: r for r in rows}
    for rank, pid in pids.items():
        assert pid in by_pid, (rank, pid, rows)
        _, ppid, r, local, world, group, job_id, host = by_pid[pid]
        assert (ppid, r, local, world, group) == (job.pid, rank, rank, WORLD, 0), by_pid[pid]
        assert job_id and host == os.uname().nodename, by_pid[pid]
    assert by_pid[job.pid][2] is None
    # The summary names them the same way.
    for rank, pid in pids.items():
        assert re.search(rf"rank {rank} \(pid {pid}\) +[\d,]+ samples", rec.stderr), rec.stderr
    # torchrun without --rdzv_id names its job "none": not a name worth showing.
    assert f"ranks of a distributed job (world size {WORLD}):" in rec.stderr, rec.stderr

    # Every rank was sampled, and --rank N selects exactly its samples.
    per_pid = dict(con.execute("SELECT pid, SUM(count) FROM samples GROUP BY pid"))
    for rank, pid in pids.items():
        assert per_pid.get(pid, 0) > 0, (rank, per_pid)
        p = probing("flamegraph", "-i", db, "--rank", rank, "--folded")
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == per_pid[pid]
        burns = [line for line in lines if "straggler_burn (" in line]
        assert bool(burns) == (rank == SLOW_RANK), (rank, burns[:3])

    # Exports name the ranks too: speedscope's thread names.
    sp = harness.tmp("job.speedscope.json")
    p = probing("export", "-i", db, "-f", "speedscope", "-o", sp)
    assert p.returncode == 0, p.stderr
    with open(sp) as f:
        names = [prof["name"] for prof in json.load(f)["profiles"]]
    for rank, pid in pids.items():
        assert any(n.endswith(f" (rank {rank}, pid {pid}, tid {pid})") for n in names), names
    # The agent's threads (those sampled) have no rank.
    assert all("rank" not in n for n in names if f"pid {job.pid}," in n), names

    # The comparison view names the slow rank and the function of its extra time; the
    # samples there are the CPU time the workload says it spent there.
    top = con.execute("SELECT rank, pids, deviation, kind, func, file, share, median_share"
                      " FROM rank_deviation").fetchall()
    assert [r[0] for r in top][0] == SLOW_RANK and len(top) == WORLD, top
    rank, pid_list, deviation, kind, func, path, share, median = top[0]
    assert (pid_list, kind, func) == (str(pids[SLOW_RANK]), "python", "straggler_burn"), top[0]
    assert path == WORKLOAD and median == 0 and deviation == share > 0.3, top[0]
    assert all(r[2] < deviation / 2 for r in top[1:]), top
    (burn_samples,) = con.execute(
        "SELECT SUM(samples) FROM rank_functions WHERE rank = ? AND func = 'straggler_burn'",
        (SLOW_RANK,)).fetchone()
    start, end = (float(con.execute("SELECT value FROM meta WHERE key = ?", (k,)).fetchone()[0])
                  for k in ("start", "end"))
    burnt = burn_between(os.path.join(ready, "burn.log"), start, end)
    assert burnt > 0.5, burnt
    assert abs(burn_samples / FREQ - burnt) < 0.2 * burnt, (burn_samples / FREQ, burnt)

    # One SVG, a graph per rank, each headed by its rank and pid; the slow rank flagged.
    svg = harness.tmp("ranks.svg")
    p = probing("flamegraph", "-i", db, "--by", "rank", "-o", svg)
    assert p.returncode == 0, p.stderr
    root = ET.parse(svg).getroot()
    labels = {t.get("id"): "".join(t.itertext()) for t in root.iter(SVG + "text")
              if re.fullmatch(r"pl\d+", t.get("id") or "")}
    want = [f"rank {r} (pid {pids[r]})" for r in range(WORLD)]
    assert [labels[f"pl{k}"] for k in range(WORLD)] == want, labels
    flagged = [t.get("id") for t in root.iter(SVG + "text") if "flag" in (t.get("class") or "")]
    assert flagged == [f"pl{SLOW_RANK}"], flagged
    assert f"furthest from the median: rank {SLOW_RANK}" in "".join(
        root.find(f".//{SVG}text[@id='subtitle']").itertext())
    # Each panel's samples are its rank's.
    frames = [g for g in root.find(f".//{SVG}g[@id='frames']")]
    for k in range(WORLD):
        (all_,) = [g for g in frames if g.get("data-p") == str(k) and g.get("class") == "rt"]
        assert int(all_.get("data-n")) == per_pid[pids[k]]


def test_children_of_a_process_without_children_is_that_process():
    busy = harness.spawn([harness.workload("split"), "60"])
    db = harness.tmp("one.db")
    p = probing("record", "--children", "-p", busy.pid, "-d", 1, "-o", db)
    assert p.returncode == 0, p.stderr
    con = harness.db(db)
    assert con.execute("SELECT pid, rank FROM processes").fetchall() == [(busy.pid, None)]
    assert con.execute("SELECT COUNT(*) FROM samples WHERE pid != ?",
                       (busy.pid,)).fetchone()[0] == 0
    assert "ranks of" not in p.stderr, p.stderr


def test_children_that_exist_now_and_later():
    """A child and a grandchild running before recording starts, and a child forked during
    it: all are recorded, each in its own function (before, only the later child was)."""
    script = os.path.join(harness.PY_WORKLOADS, "python", "family.py")
    fam = harness.spawn([harness.pythons()[-1][1], script], stdin=harness.subprocess.PIPE,
                        stdout=harness.subprocess.PIPE)
    words = fam.stdout.readline().split()
    assert words[0] == b"READY", words
    parent, a, b = map(int, words[1:])
    db = harness.tmp("family.db")
    rec = harness.spawn([harness.PROBING, "record", "--children", "-p", str(parent), "-d", "4",
                         "-o", db], stderr=harness.subprocess.PIPE)

    def recorded():
        # Through probing, which leaves the recorder's WAL alone (a reader in this process
        # could keep it from being folded in at the end).
        p = probing("query", "-i", db + ".partial", "-f", "csv", "--no-header",
                    "SELECT COUNT(*) FROM processes")
        return p.returncode == 0 and int(p.stdout) >= 3
    harness.wait_for(recorded, timeout=30, interval=0.2,
                     what="the recording of the running processes")
    fam.stdin.write(b"go\n")
    fam.stdin.flush()
    words = fam.stdout.readline().split()
    assert words[0] == b"C", words
    c = int(words[1])
    assert rec.wait(timeout=60) == 0, rec.stderr.read()
    con = harness.db(db)
    rows = dict(con.execute("SELECT pid, ppid FROM processes"))
    assert set(rows) == {parent, a, b, c} and (rows[a], rows[b], rows[c]) == (parent, a, parent)
    want = {parent: "family_parent", a: "family_child", b: "family_grandchild",
            c: "family_late"}
    for pid, func in want.items():
        (n,) = con.execute("SELECT SUM(s.count) FROM samples s JOIN frames f"
                           " ON f.stack_id = s.stack_id WHERE s.pid = ? AND f.func = ?",
                           (pid, func)).fetchone()
        assert n, (pid, func)
