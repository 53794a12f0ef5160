"""Recording a distributed job: 'probing record --children -p PID' of a running torchrun job
records every rank that already runs, with its place in the job (processes.rank ...), and
the comparison of ranks (the view rank_deviation, flamegraph --by rank) names the rank made
slower and the function it spends the extra time in.

The job: tests/workloads/torch/ddp_straggler.py, 3 ranks of gloo DDP on CPU, on each torch of
torchenv.py (Debian's torch 1.13 under its torchrun; torch 2.14 in the sid root under
launch.py); rank 1 spends 30 ms of its own CPU time per step in straggler_burn(), and logs how
much it has spent. One job run serves every assertion.
"""
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import time
import xml.etree.ElementTree as ET

import harness
import torchenv
from harness import probing

WORKLOAD = os.path.join(harness.PY_WORKLOADS, "torch", "ddp_straggler.py")
TORCHRUN = "/usr/bin/torchrun"
WORLD, SLOW_RANK, SLOW_MS, FREQ = 3, 1, 30, 199
SVG = "{http://www.w3.org/2000/svg}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_job(tv, ready):
    """Start the job and wait until every rank has done a step; return (torchrun, {rank: pid}).
    A port taken by someone else between free_port() and torchrun's bind makes torchrun exit:
    try again with another."""
    for attempt in range(3):
        for name in os.listdir(ready):
            os.unlink(os.path.join(ready, name))
        log = open(harness.tmp(f"torchrun-{attempt}.log"), "w")
        job = harness.spawn(
            tv.launch(WORLD, WORKLOAD, "--ready-dir", ready, "--slow-rank", SLOW_RANK,
                      "--slow-ms", SLOW_MS, "--seconds", 120, port=free_port()),
            stdout=log, stderr=log, env=tv.env())

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
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_record_children_of_a_running_torchrun_job(tv):
    tv.require()
    ready = harness.tmp("ready")
    os.mkdir(ready)
    job, pids = start_job(tv, ready)
    db = harness.tmp("job.db")
    # Record until rank 1 has spent 3 s of CPU time in straggler_burn since the recorder was
    # launched (a few seconds on an idle machine): enough samples however loaded it is, and
    # more than 1 s of it after the recording started (attaching to a job of 4 processes,
    # their libtorch probed, takes about a second: with 1.5 s, 0.5-0.8 s were left).
    burn_log = os.path.join(ready, "burn.log")
    launched = time.time()
    rec = harness.spawn([harness.PROBING, "record", "--children", "-p", str(job.pid), "-F",
                         str(FREQ), "-o", db], stderr=harness.subprocess.PIPE, text=True)
    harness.wait_for(lambda: rec.poll() is not None or
                     burn_between(burn_log, launched, time.time()) >= 3,
                     timeout=180, interval=0.2, what="rank 1 to burn 3 s of CPU")
    rec.send_signal(signal.SIGINT)
    rec.stderr = rec.communicate(timeout=120)[1]
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
    # (The other ranks wait off-CPU: their few samples make their own deviations noisy, e.g.
    # 0.1 to 0.5 in unsymbolized libtorch frames; only the order says something.)
    assert all(r[2] < deviation for r in top[1:]), top
    (burn_samples,) = con.execute(
        "SELECT SUM(samples) FROM rank_functions WHERE rank = ? AND func = 'straggler_burn'",
        (SLOW_RANK,)).fetchone()
    start, end = (float(con.execute("SELECT value FROM meta WHERE key = ?", (k,)).fetchone()[0])
                  for k in ("start", "end"))
    burnt = burn_between(burn_log, start, end)
    assert burnt > 1, burnt
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
    # The slow rank named: as the rank the others wait for in their collectives when it is
    # (it burns its extra CPU before each step), else as the one furthest from the median.
    subtitle = "".join(root.find(f".//{SVG}text[@id='subtitle']").itertext())
    assert (re.search(rf"rank {SLOW_RANK} entered last in \d+ of \d+ collectives", subtitle)
            or f"furthest from the median: rank {SLOW_RANK}" in subtitle), subtitle
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


# Four ranks and a process without one, with known shares (of each rank's samples):
#   compute    rank 0 .80, rank 1 .70, rank 2 .30, rank 3 .95 -> median (.70 + .80) / 2 = .75
#   allreduce         .20         .30         .10         .05 -> median (.10 + .20) / 2 = .15
#   slow (Python, recursive) only in rank 2: 120 of its 200 samples (once however deep), of
#   which 20 its own; spin (native, in libspin.so) under it: 100.
RANKS = ("@meta frequency 99\n"
         "@process 100 python train.py\n@process 200 python train.py\n"
         "@process 300 python train.py\n@process 400 python train.py\n@process 500 agent\n"
         "@pid 100\nmain;step;compute 80\nmain;step;allreduce 20\n"
         "@pid 200\nmain;step;compute 70\nmain;step;allreduce 30\n"
         "@pid 300\nmain;step;compute 60\nmain;step;allreduce 20\n"
         "main;step;slow (train.py:7);slow (train.py:9);spin [libspin.so] 100\n"
         "main;step;slow (train.py:7) 20\n"
         "@pid 400\nmain;step;compute 95\nmain;step;allreduce 5\n"
         "@pid 500\nmain;poll 10\n")


def test_rank_views_and_panels_by_known_shares():
    import recordings
    db = recordings.make_db(RANKS, name="ranks.db", seconds=2)
    con = sqlite3.connect(db)
    con.execute("UPDATE processes SET rank = pid / 100 - 1, world_size = 4 WHERE pid < 500")
    con.commit()

    def near(a, b):
        return abs(a - b) < 1e-9
    rf = {(r[0], r[1]): r[2:] for r in con.execute(
        "SELECT rank, func, kind, file, samples, self_samples, share, median_share, deviation"
        " FROM rank_functions")}
    assert {rank for rank, _ in rf} == {0, 1, 2, 3}, rf  # not the process without a rank
    kind, path, n, own, share, median, dev = rf[(2, "slow")]
    assert (kind, path, n, own) == ("python", "train.py", 120, 20) and near(share, .6), rf
    assert near(median, 0) and near(dev, .6)
    assert rf[(2, "spin")][:4] == ("native", "libspin.so", 100, 100), rf[(2, "spin")]
    assert rf[(0, "slow")][2:4] == (0, 0) and near(rf[(0, "slow")][4], 0)
    for rank, share in enumerate([.80, .70, .30, .95]):
        assert near(rf[(rank, "compute")][4], share) and near(rf[(rank, "compute")][5], .75)
        assert near(rf[(rank, "main")][6], 0)
    for rank, share in enumerate([.20, .30, .10, .05]):
        assert near(rf[(rank, "allreduce")][5], .15)

    rows = con.execute("SELECT rank, pids, samples, deviation, func FROM rank_deviation").fetchall()
    assert [(r[0], r[1], r[2], r[4]) for r in rows[:3]] == [
        (2, "300", 200, "slow"), (3, "400", 100, "compute"), (1, "200", 100, "allreduce")], rows
    assert [round(r[3], 9) for r in rows] == [.6, .2, .15, .05], rows
    con.close()

    # --by rank: the panels in rank order, the process without a rank last; rank 2 flagged.
    svg = harness.tmp("ranks.svg")
    p = probing("flamegraph", "-i", db, "--by", "rank", "-o", svg)
    assert p.returncode == 0, p.stderr
    root = ET.parse(svg).getroot()
    texts = {t.get("id"): "".join(t.itertext()) for t in root.iter(SVG + "text") if t.get("id")}
    assert [texts[f"pl{k}"] for k in range(5)] == [
        "rank 0 (pid 100)", "rank 1 (pid 200)", "rank 2 (pid 300)", "rank 3 (pid 400)",
        "no rank (pid 500)"], texts
    # Each heading's tooltip holds its label and note uncut (the note is cut to the panel).
    heads = [g.find(SVG + "title").text for g in root.find(f".//{SVG}g[@id='panels']")
             if g.find(SVG + "title") is not None]
    assert heads[2] == "rank 2 (pid 300)\n200 samples \u00b7 slow (train.py): 60%, median rank 0%"
    assert heads[0] == "rank 0 (pid 100)\n100 samples", heads
    assert "furthest from the median: rank 2" in texts["subtitle"], texts["subtitle"]
    # In a browser: a click zooms within its rank's graph only; search gives each rank's
    # share; hover names the rank. Five panels of 300 px (the narrowest), 16 px apart.
    import browser
    r = browser.run_in_svg(svg, r"""
        var inPanel = function (k, n) {
          return T.byName(n).filter(function (g) { return g.getAttribute('data-p') == k; })[0];
        };
        R.before = [T.geom(inPanel(2, 'slow (train.py:7)')), T.geom(inPanel(0, 'compute'))];
        T.click(inPanel(2, 'slow (train.py:7)').querySelector('rect'));
        R.zoomed = [T.geom(inPanel(2, 'slow (train.py:7)')), T.geom(inPanel(0, 'compute')),
                    T.geom(inPanel(2, 'compute'))];
        window.prompt = function () { return 'slow'; };
        T.key('f', true);
        R.m = [0, 1, 2, 3, 4].map(function (k) { return T.text('pm' + k); });
        R.matched = T.text('matched');
        inPanel(0, 'compute').querySelector('rect').dispatchEvent(
          new MouseEvent('mouseover', { bubbles: true }));
        R.details = T.text('details');
    """)
    # Siblings in name order: allreduce, compute, slow.
    x2 = 10 + 2 * (300 + 16)
    assert (r["before"][0]["x"], r["before"][0]["w"]) == (x2 + 80 / 200 * 300, 180), r["before"]
    assert (r["before"][1]["x"], r["before"][1]["w"]) == (10 + 60, 240), r["before"]
    assert (r["zoomed"][0]["x"], r["zoomed"][0]["w"]) == (x2, 300), r["zoomed"]
    assert r["zoomed"][1] == r["before"][1] and not r["zoomed"][2]["visible"], r["zoomed"]
    assert r["m"] == ["0.00%", "0.00%", "60.00%", "0.00%", "0.00%"], r["m"]
    assert r["matched"] == "Matched: 23.53% (120 of 510 samples)", r["matched"]
    assert r["details"] == "rank 0 (pid 100): compute (80 samples, 80.00%)", r["details"]
    # --folded: every line led by its rank; the same counts as --rank N.
    p = probing("flamegraph", "-i", db, "--by", "rank", "--folded")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "rank 2;main;step;slow (train.py:7) 20" in lines and "no rank;main;poll 10" in lines
    for rank in range(4):
        mine = [line.split(";", 1)[1] for line in lines if line.startswith(f"rank {rank};")]
        p = probing("flamegraph", "-i", db, "--rank", rank, "--folded")
        assert sorted(mine) == sorted(p.stdout.splitlines()), (rank, mine)

    # One rank or process: the subtitle names it "rank 2 (pid 300...)".
    for args, want in [(["--rank", "2"], "rank 2 (pid 300)"),
                       (["--pid", "300"], "rank 2 (pid 300, python train.py)"),
                       (["--pid", "500"], "pid 500 (agent)")]:
        p = probing("flamegraph", "-i", db, *args, "-o", svg)
        assert p.returncode == 0, p.stderr
        sub = "".join(ET.parse(svg).getroot().find(f".//{SVG}text[@id='subtitle']").itertext())
        assert f"\u00b7 {want} \u00b7" in sub, (args, sub)

    # Two ranks deviate from their mean alike: drawn, none flagged. Without ranks: refused.
    two = harness.tmp("two.db")
    shutil.copy(db, two)
    con = sqlite3.connect(two)
    con.execute("UPDATE processes SET rank = NULL WHERE pid > 200")
    con.commit()
    con.close()
    p = probing("flamegraph", "-i", two, "--by", "rank", "-o", svg)
    assert p.returncode == 0, p.stderr
    root = ET.parse(svg).getroot()
    assert not [t for t in root.iter(SVG + "text") if "flag" in (t.get("class") or "")]
    assert "furthest" not in "".join(root.find(f".//{SVG}text[@id='subtitle']").itertext())
    for args, code, msg in [(["--by", "thread"], 2, "invalid --by"),
                            (["--by", "rank", "--rank", "1"], 2, "leave out --rank"),
                            (["--by", "rank", "--diff-ranks", "0,1"], 2, "drawn alone")]:
        p = probing("flamegraph", "-i", db, *args, "-o", svg)
        assert p.returncode == code and msg in p.stderr, (args, p.returncode, p.stderr)
    plain = recordings.make_db(name="plain.db")
    out = harness.tmp("plain.svg")
    p = probing("flamegraph", "-i", plain, "--by", "rank", "-o", out)
    assert p.returncode == 1 and "no samples of processes with a rank" in p.stderr, p.stderr
    assert not os.path.exists(out)


def test_children_started_later_get_their_job_identity():
    """Processes started after recording began, as torchrun and srun start ranks (fork, then
    exec with the job in the environment): each gets its rank from its own environment."""
    split = harness.workload("split")
    db = harness.tmp("later.db")
    script = (f"sleep 0.3; RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 GROUP_RANK=1"
              f" TORCHELASTIC_RUN_ID=job7 {split} 1 &"
              f" SLURM_PROCID=2 SLURM_LOCALID=0 SLURM_NTASKS=4 SLURM_NODEID=1 SLURM_JOB_ID=99"
              f" SLURM_STEP_ID=0 {split} 1 & wait")
    p = probing("record", "--children", "-o", db, "--", "/bin/sh", "-c", script)
    assert p.returncode == 0, p.stderr
    con = harness.db(db)
    rows = {r[1:]: r[0] for r in con.execute(
        "SELECT pid, rank, local_rank, world_size, group_rank, job_id, host FROM processes"
        " WHERE command LIKE ?", (split + "%",))}
    host = os.uname().nodename
    assert set(rows) == {(3, 1, 4, 1, "job7", host), (2, 0, 4, 1, "99.0", host)}, rows
    shell = con.execute("SELECT rank, job_id FROM processes WHERE command LIKE '/bin/sh%'")
    assert shell.fetchall() == [(None, None)]
    pids = {key[0]: pid for key, pid in rows.items()}
    assert re.search(rf"rank 2 \(pid {pids[2]}\) +[\d,]+ samples\n +rank 3 \(pid {pids[3]}\)",
                     p.stderr), p.stderr
    assert "ranks of job 99.0 (world size 4)" in p.stderr, p.stderr
    assert "2 of the job's 4 ranks are not among the recorded processes" in p.stderr, p.stderr
