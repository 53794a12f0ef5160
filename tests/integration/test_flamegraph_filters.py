"""probing flamegraph --rank, --from/--to, --state and the differential graphs (--diff,
--diff-ranks), on recordings with known contents: the folded output is checked line by line
against the stacks that went in."""
import os
import sqlite3

import harness
import recordings
from harness import probing

# Two ranks of one job, 3 seconds each (folded2db spreads every count over the seconds):
# rank 0 computes more, rank 1 waits in allreduce more and also does I/O.
JOB = ("@process 100 python train.py\n@process 200 python train.py\n@meta frequency 99\n"
       "@pid 100\nmain;step;compute 60\nmain;step;allreduce 30\n"
       "@pid 200\nmain;step;compute 30\nmain;step;allreduce 90\nmain;io 30\n")


def job_db(name="job.db", seconds=3):
    path = recordings.make_db(JOB, name=name, seconds=seconds)
    con = sqlite3.connect(path)
    con.execute("UPDATE processes SET rank = pid / 100 - 1, world_size = 2")
    con.commit()
    con.close()
    return path


def folded(*args):
    p = probing("flamegraph", "--folded", *args)
    assert p.returncode == 0, p.stderr
    return sorted(p.stdout.splitlines())


def test_rank_filter():
    db = job_db()
    assert folded("-i", db, "--rank", "0") == ["main;step;allreduce 30", "main;step;compute 60"]
    assert folded("-i", db, "--rank", "1") == ["main;io 30", "main;step;allreduce 90",
                                               "main;step;compute 30"]
    p = probing("flamegraph", "-i", db, "--rank", "7")
    assert p.returncode == 1
    assert "no samples of rank 7" in p.stderr and "ranks 0, 1" in p.stderr


def test_time_range():
    db = job_db(seconds=3)
    con = sqlite3.connect(db)
    # The ground truth: what the recording holds per second (meta start is the first second).
    per_sec = dict(con.execute("SELECT ts - (SELECT MIN(ts) FROM sample_counts), SUM(count)"
                               " FROM sample_counts GROUP BY ts").fetchall())
    start = con.execute("SELECT value FROM meta WHERE key = 'start'").fetchone()
    con.close()
    assert start is None or int(float(start[0])) == 1700000000
    assert sorted(per_sec) == [0, 1, 2] and sum(per_sec.values()) == 240

    def total(*args):
        return sum(int(line.rsplit(" ", 1)[1]) for line in folded("-i", db, *args))
    assert total("--from", "1", "--to", "2") == per_sec[1]
    assert total("--from", "0.5", "--to", "1.5") == per_sec[0] + per_sec[1]
    assert total("--from", "2") == per_sec[2]
    assert total("--to", "1") == per_sec[0]
    p = probing("flamegraph", "-i", db, "--from", "5")
    assert p.returncode == 1 and "span 0 s to 3 s" in p.stderr
    p = probing("flamegraph", "-i", db, "--from", "3", "--to", "2")
    assert p.returncode == 2 and "--to must be later than --from" in p.stderr


def test_diff_ranks_and_files():
    db = job_db()
    # Rank 0 is the baseline, rank 1 is drawn: "stack BASELINE COUNT" (difffolded).
    assert folded("-i", db, "--diff-ranks", "0,1") == [
        "main;io 0 30", "main;step;allreduce 30 90", "main;step;compute 60 30"]
    assert folded("-i", db, "--diff-ranks", "1,0") == [
        "main;io 30 0", "main;step;allreduce 90 30", "main;step;compute 30 60"]
    # Two files: the same stacks, another count.
    other = recordings.make_db("main;step;compute 10\nmain;step;allreduce 10\n", name="o.db")
    assert folded("-i", other, "--diff", db) == [
        "main;io 30 0", "main;step;allreduce 120 10", "main;step;compute 90 10"]
    # The SVG: rank 1 vs rank 0: allreduce's self share grew 33.3% -> 60% (red), compute's
    # fell 66.7% -> 20% (the largest change: full blue).
    out = harness.tmp("diff.svg")
    p = probing("flamegraph", "-i", db, "--diff-ranks", "0,1", "-o", out)
    assert p.returncode == 0, p.stderr
    svg = open(out).read()
    assert "baseline: rank 0" in svg and "rank 1" in svg
    compute = svg[svg.index("<title>compute\n"):]
    assert "baseline: 60 samples, 66.67%" in compute.split("</title>")[0]
    assert 'fill="rgb(35,35,255)"' in compute.split("</g>")[0]
    allreduce = svg[svg.index("<title>allreduce\n"):].split("</g>")[0]
    assert 'fill="rgb(255,' in allreduce


def test_diff_usage_errors():
    db = job_db()
    for args, msg in [(["--diff-ranks", "1"], "expected two ranks"),
                      (["--diff-ranks", "a,b"], "expected two ranks"),
                      (["--rank", "0", "--diff-ranks", "0,1"], "not both"),
                      (["--state", "napping"], "unknown --state"),
                      (["--rank", "-1"], "invalid --rank")]:
        p = probing("flamegraph", "-i", db, *args)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)
    p = probing("flamegraph", "-i", db, "--diff-ranks", "0,5")
    assert p.returncode == 1 and "no samples of rank 5" in p.stderr
    p = probing("flamegraph", "-i", db, "--diff", harness.tmp("missing.db"))
    assert p.returncode == 1 and "no such file" in p.stderr
    p = probing("flamegraph", "-i", db, "--state", "lock")
    assert p.returncode == 1 and "no thread states" in p.stderr
    assert not os.path.exists(db + "-wal")
