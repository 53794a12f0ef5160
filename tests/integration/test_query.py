"""probing query: SQL on recordings in table, CSV and JSON form; errors; read-only."""
import csv
import io
import json
import os
import re
import sqlite3
import sys
import time

import harness
import recordings
from harness import probing

TRICKY = ("SELECT 1 AS i, 2.5 AS r, NULL AS n, 'a,b' AS comma, 'say \"hi\"' AS quote,"
          " 'l1' || char(10) || 'l2' AS nl, 'caf\u00e9' AS u, 3.0 AS whole, -7 AS neg,"
          " 9007199254740993 AS big")


def expected_rows(db, sql):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return cols, cur.fetchall()


def test_table_is_aligned():
    db = recordings.make_db()
    p = probing("query", "-i", db,
                "SELECT thread, SUM(count) AS n FROM samples GROUP BY thread ORDER BY n DESC",
                check=True)
    lines = p.stdout.splitlines()
    assert lines[0].split("|")[0].strip() == "thread"
    assert set(lines[1]) <= {"-", "+"}
    # Every row as wide as the header, the rule under it; numbers right-aligned.
    assert len({len(line) for line in [lines[0]] + lines[2:-1]}) == 1, lines
    assert lines[1] == "------------+-----"
    assert lines[2] == " MainThread | 873"
    assert lines[3] == " loader     | 125"
    assert lines[4] == " NULL       |  42"  # pid 200's thread has no name
    assert lines[-1] == "(3 rows)"


def test_csv_round_trips():
    db = recordings.make_db()
    for sql in (TRICKY, "SELECT * FROM frames ORDER BY stack_id, depth",
                "SELECT * FROM samples ORDER BY pid, tid, stack_id"):
        p = recordings.probing_raw("query", "-i", db, "--format", "csv", sql)
        assert p.returncode == 0
        out = p.stdout.decode()
        # RFC 4180: every record ends in CRLF (a LF inside a quoted field stays a LF).
        assert out.endswith("\r\n") and out.count("\r\n") == len(expected_rows(db, sql)[1]) + 1
        rows = list(csv.reader(io.StringIO(out, newline="")))
        cols, want = expected_rows(db, sql)
        assert rows[0] == cols
        # CSV is text: compare with SQLite's values as CSV writes them (NULL = empty).
        def text(v):
            if v is None:
                return ""
            if isinstance(v, float):
                return repr(v)
            return str(v)
        assert rows[1:] == [[text(v) for v in row] for row in want], sql
    p = recordings.probing_raw("query", "-i", db, "--format", "csv", "--no-header",
                               "SELECT 1 AS x")
    assert p.stdout == b"1\r\n"


def test_json_keeps_types():
    db = recordings.make_db()
    for sql in (TRICKY, "SELECT * FROM frames ORDER BY stack_id, depth",
                "SELECT * FROM meta ORDER BY key"):
        p = probing("query", "-i", db, "-f", "json", sql, check=True)
        got = json.loads(p.stdout)
        cols, want = expected_rows(db, sql)
        assert got == [dict(zip(cols, row)) for row in want], sql
        # Types, not just values: 3.0 stays a float, ints stay ints, NULL is None.
        for obj, row in zip(got, want):
            assert [type(v) for v in obj.values()] == [type(v) for v in row]
    p = probing("query", "-i", db, "-f", "json", "SELECT 1 AS a WHERE 0", check=True)
    assert json.loads(p.stdout) == []


def test_several_statements_run_in_order():
    db = recordings.make_db()
    sql = ("CREATE TEMP VIEW hot AS SELECT stack_id, SUM(count) AS n FROM samples"
           " GROUP BY stack_id;"
           " SELECT MAX(n) AS top FROM hot; SELECT COUNT(*) AS stacks FROM hot")
    p = recordings.probing_raw("query", "-i", db, "-f", "csv", sql)
    assert p.stdout == b"top\r\n500\r\n\r\nstacks\r\n9\r\n"
    p = probing("query", "-i", db, "-f", "json", sql, check=True)
    parts = p.stdout.replace("]\n[", "]\x00[").split("\x00")
    assert [json.loads(x) for x in parts] == [[{"top": 500}], [{"stacks": 9}]]


def test_sql_from_stdin():
    db = recordings.make_db()
    p = recordings.probing_raw("query", "-i", db, "-f", "csv", "-",
                               input="SELECT COUNT(*) AS n\nFROM samples;\n")
    assert p.stdout == b"n\r\n9\r\n"


def test_views_documented_in_help_examples_work():
    """The example of --help runs and finds the hottest leaf function."""
    db = recordings.make_db()
    sql = ("SELECT f.func, SUM(s.count) AS n,"
           " round(100.0 * SUM(s.count) / (SELECT SUM(count) FROM samples), 1) AS pct"
           " FROM samples s JOIN frames f ON f.stack_id = s.stack_id AND f.depth = 0"
           " GROUP BY f.func ORDER BY n DESC LIMIT 10")
    p = probing("query", "-i", db, "-f", "json", sql, check=True)
    top = json.loads(p.stdout)[0]
    assert top == {"func": "at::matmul", "n": 500, "pct": 48.1}
    assert "SUM(s.count)" in probing("query", "--help", check=True).stdout


def test_syntax_error():
    db = recordings.make_db()
    p = probing("query", "-i", db, "SELECT *\nFROM samples\nWHERE count >> > 3")
    assert p.returncode == 1
    assert "syntax error" in p.stderr
    assert "line 3" in p.stderr
    lines = p.stderr.splitlines()
    caret = [i for i, line in enumerate(lines) if line.strip() == "^"]
    assert caret and "WHERE count >> > 3" in lines[caret[0] - 1]
    assert p.stdout == ""


def test_unknown_table_lists_what_there_is():
    db = recordings.make_db()
    p = probing("query", "-i", db, "SELECT * FROM sample")
    assert p.returncode == 1
    assert "no such table: sample" in p.stderr
    for name in ("samples", "frames", "sample_times", "meta", "processes", "threads"):
        assert name in p.stderr, name


def test_queries_cannot_modify_the_recording():
    db = recordings.make_db()
    before = recordings.sha256(db)
    for sql in ("DELETE FROM sample_counts", "DROP VIEW samples",
                "UPDATE meta SET value = 1", "CREATE TABLE x(a)", "PRAGMA journal_mode = WAL",
                "VACUUM", f"ATTACH '{db}' AS again; DELETE FROM again.meta"):
        p = probing("query", "-i", db, sql)
        assert p.returncode == 1, sql
        assert p.stderr, sql
    assert recordings.sha256(db) == before
    assert not os.path.exists(db + "-wal") and not os.path.exists(db + "-journal")
    p = probing("query", "-i", db, "DELETE FROM meta")
    assert "read-only" in p.stderr


def test_bad_inputs():
    db = recordings.make_db()
    p = probing("query", "-i", harness.tmp("none.db"), "SELECT 1")
    assert p.returncode == 1 and "no such file" in p.stderr and "probing record" in p.stderr
    junk = harness.tmp("junk")
    with open(junk, "wb") as f:
        f.write(os.urandom(4096))
    p = probing("query", "-i", junk, "SELECT 1")
    assert p.returncode == 1 and "not a SQLite database" in p.stderr
    other = harness.tmp("other.db")
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    p = probing("query", "-i", other, "SELECT * FROM t")
    assert p.returncode == 1 and "not a probing recording" in p.stderr
    for args, what in ((["--format", "xml", "SELECT 1"], "xml"),
                       (["--bogus", "SELECT 1"], "--bogus"), ([], "no SQL"),
                       (["SELECT", "1"], "one argument"), (["   "], "empty"),
                       (["-f"], "-f")):
        p = probing("query", "-i", db, *args)
        assert p.returncode == 2, args
        assert what in p.stderr, (args, p.stderr)


def test_help():
    p = probing("query", "--help", check=True)
    for word in ("--format", "table", "csv", "json", "--no-header", "-i", "Examples",
                 "-p, --pid PID", "-t, --target", "python.backtrace", "system.threads"):
        assert word in p.stdout, word


def test_live_and_file_are_exclusive():
    p = probing("query", "-i", "x.db", "-p", "1", "SELECT 1")
    assert p.returncode == 2 and "not both" in p.stderr


# ---- nothing done through a query creates or changes a file ---------------------------------
WAL_WRITER = r"""
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
con.execute("INSERT INTO meta VALUES ('late', 1)")
if sys.argv[2] == "killed":
    os._exit(0)  # like a killed recorder: -wal and -shm stay
"""


def snapshot(d):
    """Every file of @d and its content; a -shm file (SQLite's shared memory between the
    readers of a database in WAL mode, which every reader writes its read marks to) by name."""
    return {f: None if f.endswith("-shm") else recordings.sha256(os.path.join(d, f))
            for f in sorted(os.listdir(d))}


def test_queries_cannot_create_or_change_files():
    d = harness.tmp("files")
    os.mkdir(d)
    done = recordings.make_db(name="files/done.db")
    killed = recordings.make_db(name="files/killed.db")
    harness.run([sys.executable, "-c", WAL_WRITER, killed, "killed"], check=True)
    other = os.path.join(d, "other.db")  # a WAL-mode database without its -shm: opening
    harness.run([sys.executable, "-c", WAL_WRITER, recordings.make_db(name="files/other.db"),
                 "closed"], check=True)  # it would make one
    for f in ("done.db.folded", "killed.db.folded", "other.db.folded"):
        os.unlink(os.path.join(d, f))
    assert os.path.exists(killed + "-wal") and not os.path.exists(other + "-shm")
    before = snapshot(d)
    escapes = (f"VACUUM INTO '{d}/copy.db'",
               f"ATTACH '{d}/new.db' AS n; CREATE TABLE n.t(x)",
               f"ATTACH 'file:{d}/uri.db?mode=rwc' AS n; CREATE TABLE n.t(x)",
               f"ATTACH '{other}' AS o; SELECT count(*) FROM o.meta",
               f"SELECT load_extension('{d}/x.so')", "DELETE FROM meta", "VACUUM")
    # Pragmas that write on a writable connection: here they fail or change nothing.
    pragmas = ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode = WAL",
               "PRAGMA wal_checkpoint(TRUNCATE)", "PRAGMA user_version = 7")
    for db in (done, killed):
        for sql in escapes + pragmas:
            p = probing("query", "-i", db, sql)
            if sql in escapes:
                assert p.returncode == 1 and p.stdout == "", (db, sql, p.stdout)
            assert snapshot(d) == before, (db, sql)
        p = probing("query", "-i", db, f"VACUUM INTO '{d}/copy.db'")
        assert "ATTACH and VACUUM INTO are refused" in p.stderr, p.stderr
        # What queries may do: TEMP tables and views, in memory.
        p = probing("query", "-i", db, "-f", "csv", "--no-header",
                    "CREATE TEMP TABLE t AS SELECT * FROM samples; SELECT count(*) > 0 FROM t")
        assert p.returncode == 0 and p.stdout.strip() == "1", p.stderr
    # The killed recorder's last commit is visible: the WAL was read, not folded in.
    p = probing("query", "-i", killed, "-f", "csv", "--no-header",
                "SELECT value FROM meta WHERE key = 'late'")
    assert p.stdout.strip() == "1", p.stderr
    assert snapshot(d) == before


def test_timeout_stops_sql_that_never_ends():
    db = recordings.make_db()
    con = sqlite3.connect(db)
    con.execute("CREATE VIEW forever AS WITH RECURSIVE c(x) AS "
                "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c")
    con.commit()
    con.close()
    start = time.monotonic()
    p = probing("query", "-i", db, "--timeout", "0.5", "SELECT count(*) FROM forever",
                timeout=60)
    assert p.returncode == 1 and "--timeout" in p.stderr and "0.5 s" in p.stderr, p.stderr
    assert time.monotonic() - start < 30
    # Rows printed before the limit stay printed (csv streams).
    p = probing("query", "-i", db, "--timeout", "0.5", "-f", "csv", "--no-header",
                "SELECT x FROM forever", timeout=60)
    assert p.returncode == 1 and p.stdout.startswith("1\n2\n3\n"), p.stderr
    # Without --timeout a recording's query has no limit; with it, quick SQL is unaffected.
    p = probing("query", "-i", db, "--timeout", "5", "SELECT count(*) FROM samples")
    assert p.returncode == 0, p.stderr


def test_sql_may_start_with_a_comment():
    db = recordings.make_db()
    sql = "-- the busiest thread\nSELECT thread FROM samples GROUP BY thread ORDER BY " \
          "SUM(count) DESC LIMIT 1"
    for args in (["-i", db, sql], [sql, "-f", "csv", "-i", db], ["-i", db, "--", sql]):
        p = probing("query", *args)
        assert p.returncode == 0 and "MainThread" in p.stdout, (args, p.stderr)
    p = probing("query", "-i", db, "-- one", "SELECT 2")
    assert p.returncode == 2 and "one argument" in p.stderr
    p = probing("query", "-i", db, "--bogus", "SELECT 2")
    assert p.returncode == 2 and "unknown option '--bogus'" in p.stderr


def test_missing_recording_points_to_partial():
    db = recordings.make_db()
    os.rename(db, harness.tmp("app.db.partial"))
    p = probing("query", "-i", harness.tmp("app.db"), "SELECT 1")
    assert p.returncode == 1 and "app.db.partial" in p.stderr, p.stderr


# ---- live targets: true messages ------------------------------------------------------------
def test_live_query_messages():
    t = harness.spawn(["sleep", "60"])
    p = probing("query", "-p", t.pid, "SELECT * FROM python.backtrace")
    assert p.returncode == 1 and "is not a Python process" in p.stderr, p.stderr
    assert "No such file" not in p.stderr and "--native" not in p.stderr
    p = probing("query", "-p", t.pid, "SELECT name FROM system.threads")
    assert p.returncode == 0 and "sleep" in p.stdout
    # .invalid never resolves (RFC 6761); without a name server the lookup fails as well.
    p = probing("query", "-t", "host.invalid:4242", "SELECT 1")
    assert p.returncode == 1 and "cannot find the host 'host.invalid'" in p.stderr, p.stderr
    assert "route" not in p.stderr
    for bad in ("localhost:http", "localhost:0", "localhost:70000", ":4242"):
        p = probing("query", "-t", bad, "SELECT 1")
        assert p.returncode == 2 and bad in p.stderr, (bad, p.stderr)


def test_live_queries_cannot_create_or_change_files():
    """A live query's database is in memory, and so it stays: ATTACH and VACUUM INTO (which
    would create or change files with the user's SQL, as root) are refused with a clear
    message, and nothing is created; TEMP tables work. ('query -p PID --save FILE' is the
    one way to write a file: test_torch.)"""
    t = harness.spawn(["sleep", "60"])
    d = harness.tmp("live-files")
    os.mkdir(d)
    existing = os.path.join(d, "existing.db")
    con = sqlite3.connect(existing)
    con.execute("CREATE TABLE keep(x)")
    con.execute("INSERT INTO keep VALUES (1)")
    con.commit()
    con.close()
    before = snapshot(d)
    escapes = (f"VACUUM INTO '{d}/copy.db'",
               f"VACUUM system INTO '{d}/system.db'",
               f"ATTACH '{d}/new.db' AS n; CREATE TABLE n.t(x)",
               f"ATTACH 'file:{d}/uri.db?mode=rwc' AS n; CREATE TABLE n.t(x)",
               f"ATTACH '{existing}' AS e; DELETE FROM e.keep",
               "ATTACH ':memory:' AS m",
               f"SELECT load_extension('{d}/x.so')")
    for sql in escapes:
        p = probing("query", "-p", t.pid, sql)
        assert p.returncode == 1 and p.stdout == "", (sql, p.stdout, p.stderr)
        assert snapshot(d) == before, sql
        if "load_extension" not in sql:
            assert "ATTACH and VACUUM INTO are refused" in p.stderr, (sql, p.stderr)
            assert "--save FILE" in p.stderr, p.stderr
    # What live queries may do: TEMP tables and views, in memory; the live tables.
    p = probing("query", "-p", t.pid, "-f", "csv", "--no-header",
                "CREATE TEMP TABLE t AS SELECT * FROM system.threads; "
                "SELECT count(*) > 0 FROM t")
    assert p.returncode == 0 and p.stdout.strip() == "1", p.stdout + p.stderr
    assert snapshot(d) == before
