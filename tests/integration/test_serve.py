"""probing serve over HTTP: the token on every request, the JSON API against recordings with
known contents, bad input (a taken port, unreadable files, malformed requests, endless
queries) and proof that nothing is written to a recording. The pages themselves are driven
in a browser by test_serve_browser.py."""
import json
import os
import re
import socket
import sqlite3
import sys
import threading
import time

import harness
import recordings
import serve_helpers
from serve_helpers import Server


def test_token_on_every_request():
    db = serve_helpers.job_db()
    s = Server("-i", db)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[0-9a-f]{32}", s.url), s.url
    wrong = "0" * 32 if s.token != "0" * 32 else "1" * 32
    for method, path in [("GET", "/"), ("GET", "/app.js"), ("GET", "/style.css"),
                         ("GET", "/api/files"), ("POST", "/api/query?src=f0"),
                         ("GET", "/api/flamegraph?f=0"), ("GET", "/api/processes"),
                         ("GET", "/api/backtrace?pid=1"), ("GET", "/nonexistent"),
                         ("DELETE", "/api/files")]:
        for token in (None, wrong, s.token[:-1], s.token + "0"):
            status, _, body = s.request(method, path, body="SELECT 1", token=token)
            assert status == 401, (method, path, token, status, body)
            assert b"token" in body
    # The token in the URL of the page: a cookie for the page's own requests, and the URL
    # without it.
    status, headers, _ = s.get("/?token=" + s.token, token=None)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"probing_token_{s.port}={s.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, headers, body = s.get("/", token=None,
                                  headers={"Cookie": f"probing_token_{s.port}={s.token}"})
    assert status == 200 and b"<script src=\"/app.js\">" in body
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
    # Another server's cookie is not this one's.
    status, _, _ = s.get("/", token=None, headers={"Cookie": f"probing_token_1={s.token}"})
    assert status == 401
    status, _, _ = s.get("/api/files?token=" + s.token, token=None)
    assert status == 200
    assert s.stop() == 0


def test_token_exact_and_bearer_scheme_any_case():
    """The token must be exactly the token (a NUL after it in the URL does not end it); the
    Authorization scheme is case-insensitive (RFC 7235 2.1)."""
    db = serve_helpers.job_db()
    s = Server("-i", db)
    for suffix in ("%00", "%00x", "%00" + s.token, "%20"):
        status, _, body = s.get(f"/api/files?token={s.token}{suffix}", token=None)
        assert status == 401, (suffix, status, body)
    status, _, _ = s.get("/api/files?token=%00" + s.token, token=None)
    assert status == 401
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        status, _, body = s.get("/api/files", token=None,
                                headers={"Authorization": f"{scheme} {s.token}"})
        assert status == 200, (scheme, status, body)
    for bad in (f"Basic {s.token}", f"Bearer{s.token}", f"Bearerx {s.token}",
                f"bearer {s.token}x", "bearer "):
        status, _, _ = s.get("/api/files", token=None, headers={"Authorization": bad})
        assert status == 401, bad
    assert s.stop() == 0


IDLE_CONNECTIONS = r"""
import os, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
os.setgid(65534)
os.setuid(65534)  # nobody: another local user, without the token
held = []
for i in range(n):
    c = socket.socket()
    c.bind(("127.0.0.%d" % (1 + i % 4), 0))  # spread over 127.0.0.1-4
    c.settimeout(5)
    try:
        c.connect(("127.0.0.1", port))
        held.append(c)
    except OSError:
        pass
print(len(held), flush=True)
while True:  # keep them open, and open new ones as the server closes old ones
    time.sleep(0.5)
    for i, c in enumerate(held):
        c.setblocking(False)
        try:
            gone = c.recv(4096) == b""
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        if gone:
            c.close()
            c = socket.socket()
            c.bind(("127.0.0.%d" % (1 + i % 4), 0))
            c.settimeout(5)
            try:
                c.connect(("127.0.0.1", port))
            except OSError:
                pass
            held[i] = c
"""


def test_idle_connections_never_lock_the_owner_out():
    """Idle connections without the token, from another user (nobody, over 127.0.0.1-4) and
    from the owner's own user, never keep a token holder's request out; each idle one is
    told it timed out and closed within seconds."""
    import subprocess
    db = serve_helpers.job_db()
    s = Server("-i", db)
    script = harness.tmp("idle.py")
    with open(script, "w") as f:
        f.write(IDLE_CONNECTIONS)
    os.chmod(harness.tmp(), 0o755)
    nobody = harness.spawn([sys.executable, script, str(s.port), "120"],
                           stdout=subprocess.PIPE)
    try:
        ready = nobody.stdout.readline()
        assert int(ready) >= 64, ready
        mine = [socket.create_connection((s.host, s.port)) for _ in range(40)]
        for _ in range(4):
            t0 = time.monotonic()
            status, _, body = s.get("/api/files", timeout=20)
            took = time.monotonic() - t0
            assert status == 200 and b"job.db" in body, (status, body)
            assert took < 2, took
            time.sleep(1)
        # An idle connection is answered "timed out" and closed, within seconds.
        c = socket.create_connection((s.host, s.port))
        c.settimeout(20)
        t0 = time.monotonic()
        data = b""
        while True:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        assert b" 408 " in data.split(b"\r\n")[0] and b"timed out" in data, data
        assert time.monotonic() - t0 < 10
        c.close()
        for c in mine:
            c.close()
        # A request without the token still gets its 401 at once.
        status, _, body = s.get("/api/files", token=None)
        assert status == 401 and b"token" in body
    finally:
        nobody.kill()
        nobody.wait()
    assert s.stop() == 0


def test_json_api_against_ground_truth():
    db = serve_helpers.job_db()
    other = recordings.make_db("main;compute 10\nmain;allreduce 30\n", name="other.db")
    s = Server("-i", db, other)
    status, files = s.json("GET", "/api/files")
    assert status == 200
    assert [f["path"] for f in files["files"]] == [db, other]
    assert [f["src"] for f in files["files"]] == ["f0", "f1"]

    # SQL: several statements, column order and duplicate names kept, types kept.
    status, r = s.query("f0", "SELECT pid, rank, rank AS pid FROM processes ORDER BY pid;"
                              "SELECT 'x' AS a, NULL AS b, 2.5 AS c")
    assert status == 200 and r["ok"], r
    assert r["results"][0] == {"columns": ["pid", "rank", "pid"],
                               "rows": [[100, 0, 0], [200, 1, 1]]}
    assert r["results"][1] == {"columns": ["a", "b", "c"], "rows": [["x", None, 2.5]]}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    truth = con.execute("SELECT f.func, SUM(s.count) FROM samples s JOIN frames f"
                        " ON f.stack_id = s.stack_id AND f.depth = 0 GROUP BY f.func"
                        " ORDER BY 2 DESC, 1").fetchall()
    con.close()
    status, r = s.query("f0", "SELECT f.func, SUM(s.count) FROM samples s JOIN frames f"
                              " ON f.stack_id = s.stack_id AND f.depth = 0 GROUP BY f.func"
                              " ORDER BY 2 DESC, 1")
    assert [tuple(x) for x in r["results"][0]["rows"]] == truth
    # CSV: what 'probing query -f csv' prints, as a download.
    sql = "SELECT pid, tid, thread, SUM(count) AS n FROM samples GROUP BY pid, tid"
    status, headers, body = s.request("POST", "/api/query?src=f0&format=csv", sql)
    assert status == 200 and headers["content-type"].startswith("text/csv")
    assert headers["content-disposition"] == 'attachment; filename="query.csv"'
    assert body == recordings.probing_raw("query", "-i", db, "-f", "csv", sql).stdout

    # Errors inline, with the command's explanation.
    status, r = s.query("f0", "SELECT * FROM sample")
    assert status == 400 and not r["ok"]
    assert "no such table: sample" in r["error"] and \
        re.search(r"views: [^;]*\bframes\b", r["error"]), r["error"]
    status, r = s.query("f0", "SELEC 1")
    assert status == 400 and "syntax error" in r["error"]

    # The flame graph: SVG with its own policy, filters applied by the command.
    status, headers, svg = s.get("/api/flamegraph?f=0&rank=1")
    assert status == 200 and headers["content-type"] == "image/svg+xml", svg[:300]
    assert "script-src 'unsafe-inline'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "SAMEORIGIN"
    assert re.search(rb'<g class="rt" data-o="0" data-n="520">', svg), svg[:2000]
    status, headers, svg = s.get("/api/flamegraph?f=0&diff_ranks=0,1")
    assert status == 200 and b"baseline: rank 0" in svg
    status, headers, svg = s.get("/api/flamegraph?f=1&diff=0")
    assert status == 200 and b"baseline: " + db.encode() in svg, svg[:1500]
    status, headers, body = s.get("/api/flamegraph?f=0&rank=7")
    assert status == 400 and headers["content-type"].startswith("text/plain")
    assert b"no samples of rank 7" in body and b"ranks 0, 1" in body
    # A time range: only the samples of that second.
    secs = serve_helpers.per_second(db)
    assert sorted(secs) == [0, 1, 2, 3]
    status, _, svg = s.get("/api/flamegraph?f=0&from=2&to=3")
    assert re.search(rb'<g class="rt" data-o="0" data-n="%d">' % secs[2], svg)

    # The time line: samples per second since the start, per filter.
    status, t = s.json("GET", "/api/timeline?f=0")
    assert status == 200 and t["t0"] == 1700000000 and t["states"] is False
    assert {x[0]: x[1] for x in t["seconds"]} == secs
    status, t = s.json("GET", "/api/timeline?f=0&pid=100&tid=101")
    assert sum(x[1] for x in t["seconds"]) == 40
    status, t = s.json("GET", "/api/timeline?f=0&rank=1")
    assert sum(x[1] for x in t["seconds"]) == 520

    # Malformed requests: a clear error, nothing run.
    for method, path, body, code, msg in [
            ("POST", "/api/query?src=f9", "SELECT 1", 400, "invalid src"),
            ("POST", "/api/query?src=x0", "SELECT 1", 400, "invalid src"),
            ("POST", "/api/query?src=f0&bogus=1", "SELECT 1", 400, "unknown parameter 'bogus'"),
            ("POST", "/api/query?src=f0", "  \n", 400, "the SQL is empty"),
            ("POST", "/api/query?src=f0&timeout=0", "SELECT 1", 400, "invalid timeout"),
            ("POST", "/api/query?src=f0&format=xml", "SELECT 1", 400, "invalid format"),
            ("POST", "/api/query?src=f0&id=a/b", "SELECT 1", 400, "invalid id"),
            ("GET", "/api/query?src=f0", None, 405, "POST"),
            ("GET", "/api/flamegraph", None, 400, "which recording"),
            ("GET", "/api/flamegraph?f=0&pid=abc", None, 400, "invalid pid"),
            ("GET", "/api/flamegraph?f=0&from=-1", None, 400, "invalid from"),
            ("GET", "/api/flamegraph?f=0&state=a;b", None, 400, "invalid state"),
            ("GET", "/api/backtrace", None, 400, "which process"),
            ("POST", "/api/cancel?id=nothing", "", 404, "no query with id"),
            ("GET", "/api/../../etc/passwd", None, 404, "no such page"),
            ("GET", "/index.html", None, 404, "no such page")]:
        status, r = s.json(method, path, body)
        assert status == code and msg in r["error"], (path, status, r)
    status, headers, body = s.request("POST", "/api/query?src=f0", "SELECT 1" + " " * (1 << 20))
    assert status == 413 and b"larger than 1 MiB" in body
    assert s.stop() == 0


def test_thread_states_when_the_recording_has_them():
    """Off-CPU recordings have states other than running: the time line says so and the filters
    work."""
    db = serve_helpers.job_db()
    con = sqlite3.connect(db)
    con.executescript("UPDATE sample_counts SET state = 3 WHERE pid = 200")  # lock
    con.close()
    plain = serve_helpers.job_db(name="plain.db")
    s = Server("-i", db, plain)
    status, t = s.json("GET", "/api/timeline?f=0")
    assert status == 200 and t["states"] is True
    status, t = s.json("GET", "/api/timeline?f=0&state=lock")
    assert sum(x[1] for x in t["seconds"]) == 520
    status, _, svg = s.get("/api/flamegraph?f=0&state=running")
    # A recording with off-CPU states is weighed by time: 520 samples of 1/99 s each, in ns.
    assert status == 200 and b'<g class="rt" data-o="0" data-n="5252525200">' in svg
    status, t = s.json("GET", "/api/timeline?f=1")
    assert t["states"] is False
    status, _, body = s.get("/api/flamegraph?f=1&state=lock")
    assert status == 400 and b"no thread states" in body
    status, r = s.json("GET", "/api/timeline?f=0&state=napping")
    assert status == 400 and "unknown state" in r["error"]
    assert s.stop() == 0


def test_query_time_limit_and_cancel():
    db = serve_helpers.job_db()
    s = Server("-i", db)
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)" \
              " SELECT count(*) FROM c"
    t0 = time.monotonic()
    status, r = s.query("f0", endless, timeout=1)
    took = time.monotonic() - t0
    assert status == 400 and r["timed_out"] and not r["cancelled"], r
    assert "longer than the time limit of 1 s" in r["error"]
    assert 0.9 < took < 10, took

    # Cancelled from another request (the page's Cancel button), by its id.
    result = {}

    def run():
        result["r"] = s.query("f0", endless, timeout=60, id="q-cancel-me")
    th = threading.Thread(target=run)
    th.start()
    harness.wait_for(lambda: s.children(), timeout=10, what="the query's child process")
    time.sleep(0.2)
    t0 = time.monotonic()
    status, r = s.json("POST", "/api/cancel?id=q-cancel-me", "")
    assert status == 200 and r == {"cancelled": True}
    th.join(20)
    assert not th.is_alive() and time.monotonic() - t0 < 5
    status, r = result["r"]
    assert status == 400 and r["cancelled"] and r["error"] == "the query was cancelled", r
    harness.wait_for(lambda: not s.children(), timeout=10, what="no child left")

    # A client that goes away: its query is stopped too.
    c = socket.create_connection((s.host, s.port))
    body = endless.encode()
    c.sendall(b"POST /api/query?src=f0&timeout=600 HTTP/1.1\r\nHost: x\r\n"
              b"Authorization: Bearer " + s.token.encode() + b"\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    harness.wait_for(lambda: s.children(), timeout=10, what="the query's child process")
    c.close()
    harness.wait_for(lambda: not s.children(), timeout=10,
                     what="the query stopped after its client left")
    assert s.stop() == 0


def test_never_writes_to_a_recording():
    db = serve_helpers.job_db()
    before = recordings.sha256(db)
    def listing():
        return sorted(f for f in os.listdir(os.path.dirname(db)) if f != "serve.log")
    files = listing()
    mtime = os.stat(db).st_mtime_ns
    s = Server("-i", db)
    for sql, msg in [("DELETE FROM sample_counts", "readonly"),
                     ("CREATE TABLE t(a)", "readonly"),
                     ("UPDATE meta SET value = 1", "readonly"),
                     ("ATTACH '%s' AS x" % harness.tmp("new.db"), "cannot reach other files"),
                     ("VACUUM INTO '%s'" % harness.tmp("copy.db"), "cannot reach other files"),
                     ("PRAGMA journal_mode = WAL", None)]:
        status, r = s.query("f0", sql)
        if msg:
            assert status == 400 and msg in r["error"], (sql, r)
    status, r = s.query("f0", "CREATE TEMP TABLE t AS SELECT * FROM samples;"
                              "SELECT count(*) FROM t")
    assert status == 200 and r["results"][0]["rows"][0][0] > 0
    for path in ("/api/flamegraph?f=0", "/api/timeline?f=0", "/api/flamegraph?f=0&rank=0"):
        assert s.get(path)[0] == 200
    assert s.stop() == 0
    assert recordings.sha256(db) == before and os.stat(db).st_mtime_ns == mtime
    assert listing() == files


def test_bad_start():
    db = serve_helpers.job_db()
    # A taken port: a clear error, nothing on stdout.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    p = harness.probing("serve", "-i", db, "--listen", f"127.0.0.1:{port}", timeout=20)
    assert p.returncode == 1 and p.stdout == ""
    assert "the port is taken" in p.stderr and "--listen 127.0.0.1:0" in p.stderr, p.stderr
    taken.close()
    text = harness.tmp("notes.txt")
    with open(text, "w") as f:
        f.write("not a recording at all, just text\n")
    for args, code, msg in [
            (["-i", harness.tmp("missing.db")], 1, "no such file"),
            (["-i", text], 1, "not a probing recording"),
            (["-i", harness.tmp()], 1, "it is a directory"),
            (["-i", db, "--listen", "99999"], 2, "the port must be a number"),
            (["-i", db, "--listen", "[::1"], 2, "is not [IPV6]:PORT"),
            (["-i", db, "--listen", "no.such.host.invalid:0"], 1, "does not resolve"),
            (["--bogus"], 2, "--bogus")]:
        p = harness.probing("serve", *args, timeout=20)
        assert p.returncode == code and msg in p.stderr and p.stdout == "", (args, p.stderr)
    if os.geteuid() != 0:
        return
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    # Ports below 1024 need root: as nobody.
    p = harness.run([*nobody, harness.PROBING, "serve", "--listen", "127.0.0.1:1"], timeout=20)
    assert p.returncode == 1 and "ports below 1024 need root" in p.stderr, p.stderr
    # A recording nobody may read (in a directory it may enter).
    os.chmod(harness.tmp(), 0o755)
    os.chmod(db, 0o600)
    p = harness.run([*nobody, harness.PROBING, "serve", "-i", db], timeout=20)
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert f"cannot read the recording {db}: Permission denied" in p.stderr, p.stderr


LIVE_SCRIPT = """
import os, sys, time
def serve_test_waiting_here():
    print("READY", flush=True)
    time.sleep(120)
serve_test_waiting_here()
"""


def test_live_processes_and_backtrace():
    script = harness.tmp("live_worker.py")
    with open(script, "w") as f:
        f.write(LIVE_SCRIPT)
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29555", "TORCHELASTIC_RUN_ID": "serve-test-job"}
    w = harness.spawn([sys.executable, script], env=env, stdout=harness.subprocess.PIPE)
    assert w.stdout.readline().strip() == b"READY"
    s = Server()
    status, r = s.json("GET", "/api/processes")
    assert status == 200
    me = [p for p in r["processes"] if p["pid"] == w.pid]
    assert me, [p["pid"] for p in r["processes"]]
    me = me[0]
    assert me["rank"] == 3 and me["local_rank"] == 1 and me["world_size"] == 4
    assert me["job"] == "serve-test-job" and me["launched_by"] == "torchrun"
    assert me["agent"] is False and me["uid"] == os.geteuid()
    assert script in me["command"]
    job = [j for j in r["jobs"] if j["job"] == "serve-test-job"][0]
    assert job["ranks"] == [w.pid] and job["world_size"] == 4
    status, headers, text = s.get(f"/api/backtrace?pid={w.pid}")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert b"serve_test_waiting_here (" + script.encode() in text, text
    status, headers, text = s.get("/api/backtrace?pid=999999999")
    assert status == 400 and b"999999999" in text
    assert s.stop() == 0


def test_list_all_leaves_out_tools_that_read_libpython():
    """probing record maps the target's libpython as data to read its symbols: that makes it
    no Python process (it was listed as one: a libpython mapping was enough)."""
    py = [exe for label, exe in harness.pythons() if label in ("3.11", "3.12", "3.10")]
    if not py:
        return
    script = harness.tmp("sleeper.py")
    with open(script, "w") as f:
        f.write(LIVE_SCRIPT)
    w = harness.spawn([py[0], script], stdout=harness.subprocess.PIPE)
    assert w.stdout.readline().strip() == b"READY"
    rec = harness.spawn([harness.PROBING, "record", "-p", str(w.pid), "-d", "60", "-o",
                         harness.tmp("rec.db")])

    def libpython_mapped():
        with open(f"/proc/{rec.pid}/maps") as f:
            return "libpython3" in f.read()
    harness.wait_for(libpython_mapped, timeout=30, what="the recorder reading libpython")
    p = harness.probing("list", "--all", "--format", "json")
    assert p.returncode == 0, p.stderr
    pids = [x["pid"] for x in json.loads(p.stdout)["processes"]]
    assert w.pid in pids and rec.pid not in pids, (w.pid, rec.pid, pids)
