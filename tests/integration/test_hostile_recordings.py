"""Recording files made by an attacker (a recording may come from anyone): views, virtual
tables and generated columns in place of probing's tables, pragmas and functions that reach
the whole process, stacks that claim more frames than the file holds, a 150,000-frame stack,
duplicated ids, a snapshot of 40,000 threads, and views that merge would have copied. Each is
refused with what is wrong with the file, or read in time and memory in proportion to it."""
import json
import os
import resource
import sqlite3
import subprocess
import time

import harness
import recordings
import serve_helpers
from harness import probing

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"


def limited(args, gib=1.0, timeout=60):
    """Run probing @args with at most @gib GiB of address space; the CompletedProcess."""
    limit = int(gib * (1 << 30))

    def setlimit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    p = subprocess.run([harness.PROBING, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, preexec_fn=setlimit)
    harness.log(f"$ probing {' '.join(map(str, args))}  -> {p.returncode}\n{p.stderr[-2000:]}")
    return p


def rewrite(db, *sql):
    con = sqlite3.connect(db)
    con.executescript(";\n".join(sql))
    con.commit()
    con.close()


def test_views_in_place_of_tables_are_refused():
    """An endless view named stack_frames made flamegraph and export run forever (filling
    /var/tmp); a virtual table or a generated column in a probing table is refused too."""
    cases = {
        "stack_frames": ("ALTER TABLE stack_frames RENAME TO sf",
                         "CREATE VIEW stack_frames AS " + ENDLESS +
                         " SELECT 1 AS stack_id, x AS depth, 1 AS frame_id FROM c"),
        "sample_counts": ("ALTER TABLE sample_counts RENAME TO sc",
                          "CREATE VIEW sample_counts AS SELECT ts, pid, tid, stack_id,"
                          " count * 1000 AS count, state, ns FROM sc"),
        "frame_defs": ("ALTER TABLE frame_defs RENAME TO fd",
                       "CREATE VIRTUAL TABLE frame_defs USING fts5(id, kind, func)"),
    }
    for table, sql in cases.items():
        db = recordings.make_db(name=f"view-{table}.db")
        rewrite(db, *sql)
        out = harness.tmp(f"{table}.svg")
        for args in (["flamegraph", "-o", out], ["export", "-f", "speedscope", "-o", out],
                     ["query", "SELECT count(*) FROM frames"]):
            t0 = time.monotonic()
            p = probing(args[0], "-i", db, *args[1:], timeout=60)
            assert p.returncode == 1, (table, args, p.stdout[-300:])
            assert f"its '{table}' is a " in p.stderr, (table, p.stderr)
            assert "view" in p.stderr or "virtual table" in p.stderr
            assert time.monotonic() - t0 < 30
            assert not os.path.exists(out)
    # A generated column: counts computed by the file.
    db = recordings.make_db(name="generated.db")
    rewrite(db, "ALTER TABLE sample_counts RENAME TO sc",
            "CREATE TABLE sample_counts(ts INTEGER, pid INTEGER, tid INTEGER,"
            " stack_id INTEGER, raw INTEGER, state INTEGER, ns INTEGER,"
            " count INTEGER AS (raw * 1000))",
            "INSERT INTO sample_counts(ts, pid, tid, stack_id, raw, state, ns)"
            " SELECT ts, pid, tid, stack_id, count, state, ns FROM sc")
    p = probing("flamegraph", "-i", db, "--folded")
    assert p.returncode == 1 and "generated column ('count')" in p.stderr, p.stderr
    # serve refuses it before it listens.
    p = probing("serve", "-i", db, timeout=30)
    assert p.returncode == 1 and "generated column" in p.stderr and not p.stdout


def test_queries_cannot_move_temp_files_or_read_pointers():
    """PRAGMA temp_store_directory (a 364 MB file grew where it pointed, as root) and
    fts3_tokenizer() (a heap pointer) are refused: by probing query and /api/query."""
    db = recordings.make_db()
    d = harness.tmp("elsewhere")
    os.mkdir(d)
    for sql in (f"PRAGMA temp_store_directory = '{d}'", f"PRAGMA data_store_directory = '{d}'",
                "PRAGMA temp_store_directory",
                "SELECT hex(fts3_tokenizer('simple'))",
                "SELECT fts3_tokenizer('x', X'0000000000000000')"):
        p = probing("query", "-i", db, sql)
        assert p.returncode == 1 and "not authorized" in p.stderr, (sql, p.stdout, p.stderr)
    s = serve_helpers.Server("-i", db)
    try:
        for sql in (f"PRAGMA temp_store_directory = '{d}'",
                    "SELECT hex(fts3_tokenizer('simple'))"):
            status, r = s.query("f0", sql)
            assert status == 400 and "not authorized" in r["error"], (sql, r)
        # Ordinary pragmas still work.
        status, r = s.query("f0", "PRAGMA table_info(meta)")
        assert status == 200, r
    finally:
        assert s.stop() == 0
    assert os.listdir(d) == []


def test_stacks_claiming_more_frames_than_the_file_holds():
    """300 stacks claiming 1,000,000 frames each (a small file) took flamegraph to 1.18 GB
    before it said "damaged": the claim is checked against the file first."""
    db = recordings.make_db()
    rewrite(db, "WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM n"
                " WHERE value < 300) INSERT INTO stacks(stack_id, nframes, truncated)"
                " SELECT 1000 + value, 1000000, 0 FROM n")
    for args in (["flamegraph", "--folded"], ["export", "-f", "folded", "-o", "-"]):
        p = limited([args[0], "-i", db, *args[1:]], gib=0.5)
        assert p.returncode == 1, (args, p.stderr)
        assert "damaged" in p.stderr and "stacks claim 300000" in p.stderr, p.stderr
        assert "stack_frames holds" in p.stderr


def test_duplicate_ids_are_named():
    """frame_defs and stacks without their primary key, an id twice: exit 1 with no message
    before."""
    db = recordings.make_db(name="dupf.db")
    rewrite(db, "ALTER TABLE frame_defs RENAME TO fd",
            "CREATE TABLE frame_defs(id INTEGER, kind TEXT, func TEXT, qualname TEXT,"
            " file TEXT, lineno INTEGER, module TEXT)",
            "INSERT INTO frame_defs SELECT * FROM fd",
            "INSERT INTO frame_defs SELECT * FROM fd WHERE id = 3")
    for args in (["flamegraph", "--folded"], ["export", "-f", "folded", "-o", "-"]):
        p = probing(args[0], "-i", db, *args[1:])
        assert p.returncode == 1 and "frame_defs has the id 3 more than once" in p.stderr, \
            p.stderr
    db = recordings.make_db(name="dups.db")
    rewrite(db, "ALTER TABLE stacks RENAME TO st",
            "CREATE TABLE stacks(stack_id INTEGER, nframes INTEGER, truncated INTEGER)",
            "INSERT INTO stacks SELECT * FROM st",
            "INSERT INTO stacks SELECT * FROM st WHERE stack_id = 2")
    p = probing("flamegraph", "-i", db, "--folded")
    assert p.returncode == 1 and "stacks has the stack_id 2 more than once" in p.stderr, \
        p.stderr


def test_a_stack_of_150000_frames():
    """One stack of 150,000 frames crashed flamegraph (SIGSEGV: recursion per frame)."""
    frames = ["f%d" % i for i in range(150000)]
    folded = ("@process 1 deep\n@pid 1 1 main\n" + ";".join(frames) + " 5\n"
              "f0;f1;other 3\n")
    db = recordings.make_db(folded, name="deep.db")
    p = probing("flamegraph", "-i", db, "--folded", timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    assert sorted(p.stdout.splitlines()) == sorted([";".join(frames) + " 5", "f0;f1;other 3"])
    out = harness.tmp("deep.svg")
    p = probing("flamegraph", "-i", db, "-o", out, "--min-width", "0.0001", timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    with open(out) as f:
        svg = f.read()
    assert ">f149999<" in svg or "f149999" in svg


SNAPSHOT_SCHEMA_ROWS = 40000


def test_snapshot_of_40000_threads_groups_in_proportion():
    """backtrace -i grouped threads in quadratic time and memory (40k threads: 6.3 s, 3.1 GB);
    now in a hash map: 40,000 distinct stacks in well under 1 GiB."""
    src = harness.tmp("one.db")
    p = probing("backtrace", "-p", os.getpid(), "-o", src)
    assert p.returncode == 0, p.stderr
    con = sqlite3.connect(src)
    host, pid = con.execute("SELECT host, pid FROM bt_processes").fetchone()
    con.execute("DELETE FROM bt_frames")
    con.execute("DELETE FROM bt_threads")
    series = ("WITH RECURSIVE t(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM t"
              " WHERE value < ?), d(value) AS (VALUES (0), (1), (2)) ")
    con.execute(series + "INSERT INTO bt_threads(host, pid, tid, name, python, truncated)"
                " SELECT ?, ?, value, 'worker-' || value, 1, 0 FROM t",
                (SNAPSHOT_SCHEMA_ROWS, host, pid))
    # Each thread its own stack: three frames, the leaf's line its tid.
    con.execute(series + "INSERT INTO bt_frames(host, pid, tid, depth, kind, func, file,"
                " lineno) SELECT ?, ?, t.value, d.value, 'python', 'f' || d.value,"
                " '/app/x.py', CASE d.value WHEN 0 THEN t.value ELSE d.value END FROM t, d",
                (SNAPSHOT_SCHEMA_ROWS, host, pid))
    con.commit()
    con.close()
    p = limited(["backtrace", "-i", src, "--format", "json"], gib=1.0, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    doc = json.loads(p.stdout)
    threads = [t for proc in doc for t in proc["threads"]]
    assert len(threads) == SNAPSHOT_SCHEMA_ROWS
    # Each thread alone in its group (its leaf's line is its tid): 40,000 groups.
    assert len({t["group"] for t in threads}) == SNAPSHOT_SCHEMA_ROWS
    assert {t["frames"][0]["lineno"] for t in threads} == set(range(1, 40001))


def test_merge_writes_probings_own_views():
    """merge copied the first input's views: a samples view that multiplied counts and
    renamed threads survived into the merged file."""
    a = recordings.make_db(name="a.db")
    b = recordings.make_db(name="b.db")
    rewrite(a, "DROP VIEW samples",
            "CREATE VIEW samples AS SELECT c.pid AS pid, c.tid AS tid, 'evil' AS thread,"
            " c.stack_id AS stack_id, SUM(c.count) * 1000 AS count, SUM(c.ns) AS ns,"
            " 'running' AS state FROM sample_counts c GROUP BY c.pid, c.tid, c.stack_id",
            "CREATE VIEW extra AS SELECT 1", "UPDATE processes SET host = 'node-a'")
    rewrite(b, "UPDATE processes SET host = 'node-b'")
    out = harness.tmp("merged.db")
    p = probing("merge", "-o", out, a, b)
    assert p.returncode == 0, p.stderr
    con = sqlite3.connect(out)
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert "extra" not in names and {"samples", "frames", "sample_times"} <= names, names
    assert con.execute("SELECT count(*) FROM samples WHERE thread = 'evil'").fetchone()[0] == 0
    total = con.execute("SELECT SUM(count) FROM samples").fetchone()[0]
    assert total == 2 * recordings.total(recordings.STACKS), total
    # The view is probing's own text: that of a recording it wrote.
    fresh = sqlite3.connect(b)
    assert con.execute("SELECT sql FROM sqlite_master WHERE name = 'samples'").fetchone() == \
        fresh.execute("SELECT sql FROM sqlite_master WHERE name = 'samples'").fetchone()
    con.close()
    fresh.close()
