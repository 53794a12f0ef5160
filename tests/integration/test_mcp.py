"""probing mcp: a scripted MCP client speaking JSON-RPC 2.0 over the server's stdin/stdout:
the handshake, the tools against ground truth (a recording's counts, live processes with
known functions, a real recording of a busy function), eval only when allowed, protocol
errors, a tool whose command crashes, and a server stopped while a tool runs."""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import harness
import recordings
import serve_helpers


class Client:
    def __init__(self, *args, prefix=()):
        self.proc = harness.spawn([*prefix, harness.PROBING, "mcp", *args],
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE,
                                  stderr=open(harness.tmp("mcp.log"), "ab"))
        self.next = 0

    def send_raw(self, line):
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout=120):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "the server did not answer in %d s" % timeout
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), line
        return json.loads(line)

    def request(self, method, params=None, timeout=120):
        self.next += 1
        msg = {"jsonrpc": "2.0", "id": self.next, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_raw(json.dumps(msg))
        r = self.read(timeout)
        assert r["jsonrpc"] == "2.0" and r["id"] == self.next, r
        return r

    def call(self, name, wait=120, **args):
        """(text, is_error) of a tool call that the server accepted."""
        r = self.request("tools/call", {"name": name, "arguments": args}, wait)
        assert "result" in r, r
        content = r["result"]["content"]
        assert len(content) == 1 and content[0]["type"] == "text"
        return content[0]["text"], r["result"]["isError"]

    def handshake(self):
        r = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "test", "version": "1"}})
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        return r["result"]

    def close(self):
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)


def test_handshake_tools_and_protocol_errors():
    c = Client()
    init = c.handshake()
    assert init["protocolVersion"] == "2025-06-18"
    assert init["serverInfo"]["name"] == "probing" and "tools" in init["capabilities"]
    # An older client is answered in its version; an unknown one gets ours.
    assert c.request("initialize", {"protocolVersion": "2024-11-05"})["result"][
        "protocolVersion"] == "2024-11-05"
    assert c.request("initialize", {"protocolVersion": "1999-01-01"})["result"][
        "protocolVersion"] == "2025-06-18"
    tools = c.request("tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["list_processes", "backtrace",
                                          "record_and_summarize", "query"]
    for t in tools:
        assert t["inputSchema"]["type"] == "object" and t["description"]
    assert c.request("ping")["result"] == {}

    # Protocol errors: JSON-RPC's codes, and the server goes on.
    for raw, code in [("not json", -32700), ("[1, 2]", -32600), ('"text"', -32600),
                      ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600),
                      ('{"jsonrpc": "1.0", "id": 7, "method": "ping"}', -32600),
                      ('{"jsonrpc": "2.0", "id": 8, "method": "resources/list"}', -32601)]:
        c.send_raw(raw)
        r = c.read()
        assert r["error"]["code"] == code, (raw, r)
    # A notification is not answered: the next answer is the ping's.
    c.send_raw('{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}')
    c.send_raw('{"jsonrpc": "2.0", "id": "p-1", "method": "ping"}')
    assert c.read() == {"jsonrpc": "2.0", "id": "p-1", "result": {}}
    for params, msg in [({"name": "eval", "arguments": {"pid": 1, "code": "1"}},
                         "--allow-eval"),
                        ({"name": "nope"}, "no tool named 'nope'"),
                        ({"name": "backtrace", "arguments": {}}, "missing argument 'pid'"),
                        ({"name": "backtrace", "arguments": {"pid": "12"}},
                         "'pid' must be an integer"),
                        ({"name": "backtrace", "arguments": {"pid": 1, "bogus": 1}},
                         "takes no argument 'bogus'"),
                        ({"name": "query", "arguments": [1]}, "a JSON object"),
                        ({"arguments": {}}, "params.name")]:
        r = c.request("tools/call", params)
        assert r["error"]["code"] == -32602 and msg in r["error"]["message"], (params, r)
    # What the schema cannot say (one of file and pid) is a tool error the assistant reads.
    text, err = c.call("query", sql="SELECT 1")
    assert err and "give 'file'" in text, text
    text, err = c.call("query", sql="SELECT 1", file="/x.db", pid=1)
    assert err and "not both" in text, text
    assert c.close() == 0


def test_query_and_a_crashing_command():
    db = serve_helpers.job_db()
    c = Client()
    c.handshake()
    text, err = c.call("query", file=db, sql="SELECT pid, rank, SUM(count) AS n FROM samples"
                       " JOIN processes USING (pid) GROUP BY pid ORDER BY pid")
    assert not err
    assert re.search(r"100 \|\s+0 \|\s+520\n.*200 \|\s+1 \|\s+520", text, re.S), text
    text, err = c.call("query", file=db, format="json-compact", sql="SELECT 1 AS a, 'x' AS a")
    assert not err and json.loads(text) == {"columns": ["a", "a"], "rows": [[1, "x"]]}
    text, err = c.call("query", file=db, sql="DELETE FROM sample_counts")
    assert err and "readonly" in text, text
    text, err = c.call("query", file=db, sql="SELECT * FROM sampels")
    assert err and "no such table: sampels" in text and "views:" in text, text
    text, err = c.call("query", file=harness.tmp("none.db"), sql="SELECT 1")
    assert err and "no such file" in text, text
    endless = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
               " SELECT count(*) FROM c")
    t0 = time.monotonic()
    text, err = c.call("query", file=db, sql=endless, timeout=1)
    assert err and "time limit of 1 s" in text and time.monotonic() - t0 < 10, text

    # A command that crashes (here: killed with SIGSEGV while it runs) is a tool error; the
    # server lives on.
    c.next += 1
    c.send_raw(json.dumps({"jsonrpc": "2.0", "id": c.next, "method": "tools/call",
                           "params": {"name": "query",
                                      "arguments": {"file": db, "sql": endless}}}))
    child = harness.wait_for(lambda: serve_helpers.children(c.proc.pid),
                             what="the query command")
    os.kill(child[0], signal.SIGSEGV)
    r = c.read()
    assert r["result"]["isError"] and "killed by signal 11" in r["result"]["content"][0][
        "text"], r
    assert c.request("ping")["result"] == {}
    assert c.close() == 0


ENDLESS = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
           " SELECT count(*) FROM c")


def test_calls_at_once_and_cancelled():
    """Tool calls run at once, each in a thread: while four endless queries run (the most at
    once), a ping is answered, a fifth call is refused as busy and a call reusing the id of
    one in progress is refused; the calls answer in the order they end (matched by id, not
    in the order sent); a cancelled call gets no answer and its command is stopped. A script
    that sends its requests and closes the input gets every answer."""
    db = serve_helpers.job_db()
    c = Client()
    c.handshake()

    def send(rid, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if rid is not None:
            msg["id"] = rid
        if params is not None:
            msg["params"] = params
        c.send_raw(json.dumps(msg))

    def query(rid, timeout, sql=ENDLESS):
        send(rid, "tools/call", {"name": "query",
                                 "arguments": {"file": db, "sql": sql, "timeout": timeout}})

    def commands():
        """{request's time limit: pid} of the query commands running, by their --timeout."""
        out = {}
        for pid in serve_helpers.children(c.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline") as f:
                    argv = f.read().split("\0")
            except OSError:
                continue
            if "query" in argv:
                out[int(argv[argv.index("--timeout") + 1])] = pid
        return out

    # Time limits 300 s (cancelled below), 4 s, 2 s, 301 s (cancelled below).
    for rid, limit in (("a", 300), ("b", 4), ("c", 2), ("d", 301)):
        query(rid, limit)
    harness.wait_for(lambda: len(commands()) == 4, what="four queries running at once")
    running = commands()
    t0 = time.monotonic()
    send(10, "ping")
    assert c.read(timeout=10) == {"jsonrpc": "2.0", "id": 10, "result": {}}
    assert time.monotonic() - t0 < 2, "a ping waited for the calls"
    query("e", 5)
    r = c.read(timeout=10)
    assert r["id"] == "e" and r["error"]["code"] == -32000 and "busy" in r["error"]["message"]
    query("a", 5)
    r = c.read(timeout=10)
    assert r["id"] == "a" and r["error"]["code"] == -32600 and \
        "still in progress" in r["error"]["message"], r
    # Sent b then c: c (2 s) answers first.
    ends = [c.read(timeout=60) for _ in range(2)]
    assert [r["id"] for r in ends] == ["c", "b"], ends
    assert all(r["result"]["isError"] and "time limit" in r["result"]["content"][0]["text"]
               for r in ends), ends
    # Cancelled: its command ends, no answer comes (the next answer is the ping's).
    send(None, "notifications/cancelled", {"requestId": "a", "reason": "test"})
    send(None, "notifications/cancelled", {"requestId": 12345})  # unknown: ignored
    harness.wait_for(lambda: not os.path.exists(f"/proc/{running[300]}/cmdline") or
                     running[300] not in serve_helpers.children(c.proc.pid),
                     timeout=10, what="the cancelled command stopped")
    assert running[301] in commands().values()
    send(None, "notifications/cancelled", {"requestId": "d"})
    harness.wait_for(lambda: not commands(), timeout=10, what="no command left")
    send(11, "ping")
    assert c.read(timeout=10) == {"jsonrpc": "2.0", "id": 11, "result": {}}
    # An id is free again once its call is over; a script that closes its input at once
    # still gets every answer.
    query("a", 5, sql="SELECT 6 * 7 AS x")
    query("f", 5, sql="SELECT 'f' AS y")
    c.proc.stdin.close()
    answers = {}
    for _ in range(2):
        r = c.read(timeout=30)
        answers[r["id"]] = r["result"]["content"][0]["text"]
    assert "42" in answers["a"] and "f" in answers["f"], answers
    assert c.proc.stdout.readline() == b"" and c.proc.wait(timeout=30) == 0


CHILD = """
import time
def mcp_child_waits():
    time.sleep(120)
mcp_child_waits()
"""
PARENT = """
import subprocess, sys, time
def mcp_parent_waits(child):
    print("READY", child.pid, flush=True)
    time.sleep(120)
child = subprocess.Popen([sys.executable, sys.argv[1]])
mcp_parent_waits(child)
"""
BUSY = """
import time
def mcp_busy_target():
    x = 0
    while True:
        x += 1
print("READY", flush=True)
mcp_busy_target()
"""


def script(name, text):
    path = harness.tmp(name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_live_tools():
    child = script("mcp_child.py", CHILD)
    parent = harness.spawn([sys.executable, script("mcp_parent.py", PARENT), child],
                           stdout=subprocess.PIPE,
                           env={"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "mcpjob"})
    line = parent.stdout.readline().split()
    assert line[0] == b"READY"
    child_pid = int(line[1])
    sibling = harness.spawn([sys.executable, child], env={"RANK": "1", "WORLD_SIZE": "2",
                                                          "TORCHELASTIC_RUN_ID": "mcpjob"})
    c = Client("--allow-eval")
    c.handshake()
    assert "eval" in [t["name"] for t in c.request("tools/list")["result"]["tools"]]

    listed = harness.wait_for(lambda: json.loads(c.call("list_processes")[0]) if
                              sibling.pid in [p["pid"] for p in json.loads(
                                  c.call("list_processes")[0])["processes"]] else None,
                              what="the sibling listed")
    job = [j for j in listed["jobs"] if j["job"] == "mcpjob"][0]
    # The parent's child inherited RANK=0: a worker of rank 0, not a rank.
    assert job["ranks"] == [parent.pid, sibling.pid] and job["world_size"] == 2, job
    assert job["workers"] == [child_pid], job
    # Backtrace of the parent: with its child by default, alone with children=false, with
    # its job's other rank with job=true.
    text, err = c.call("backtrace", pid=parent.pid)
    assert not err and "2 processes" in text, text
    assert f"== rank 0 (pid {parent.pid}) ==" in text and "mcp_parent_waits (" in text
    assert f"== rank 0 (pid {child_pid}) ==" in text and "mcp_child_waits (" in text, text
    text, err = c.call("backtrace", pid=parent.pid, children=False)
    assert not err and "mcp_parent_waits (" in text and "mcp_child_waits" not in text
    text, err = c.call("backtrace", pid=parent.pid, job=True, children=False)
    assert f"== rank 1 (pid {sibling.pid}) ==" in text and "mcp_child_waits (" in text, text
    text, err = c.call("backtrace", pid=999999999)
    assert err and "999999999" in text
    # Live tables through query.
    text, err = c.call("query", pid=child_pid, format="json",
                       sql="SELECT func FROM python.backtrace ORDER BY depth")
    assert not err and "mcp_child_waits" in [r["func"] for r in json.loads(text)], text
    # eval, allowed here.
    text, err = c.call("eval", pid=child_pid, code="6 * 7")
    assert not err and text.strip() == "42", text
    text, err = c.call("eval", pid=child_pid, code="1 / 0")
    assert err and "ZeroDivisionError" in text, text
    assert c.close() == 0


@harness.timeout(120)
def test_record_and_summarize():
    busy = harness.spawn([sys.executable, script("busy.py", BUSY)], stdout=subprocess.PIPE)
    assert busy.stdout.readline().strip() == b"READY"
    c = Client()
    c.handshake()
    text, err = c.call("record_and_summarize", pid=busy.pid, seconds=2, frequency=199)
    assert not err, text
    m = re.search(r"The recording is (/tmp/probing-mcp-\w+/pid%d-1\.db)" % busy.pid, text)
    assert m, text
    db = m.group(1)
    # Ground truth: the busy function is the top self function and its loop the hottest
    # Python line; the totals come from the recording itself.
    self_part = text.split("## Where the CPU time goes: self time")[1].split("##")[0]
    top = self_part.splitlines()[3]
    assert top.lstrip().startswith("mcp_busy_target (" + harness.tmp("busy.py")), self_part
    lines = text.split("## Hottest Python lines")[1].split("##")[0]
    assert lines.splitlines()[3].lstrip().startswith(
        "mcp_busy_target (%s:" % harness.tmp("busy.py")), lines
    con = harness.db(db)
    total = con.execute("SELECT SUM(count) FROM samples").fetchone()[0]
    con.close()
    assert total > 20 and ("%d on-CPU samples" % total) in text.split("\n")[0], text
    assert "Python functions by inclusive time" in text and "Busiest threads" in text
    assert "_start" not in text and "NULL" not in text, text
    assert "off_cpu=true also records where threads wait" in text
    text, err = c.call("query", file=db, sql="SELECT COUNT(*) FROM samples")
    assert not err
    assert c.close() == 0
    assert not os.path.exists(db) and not os.path.exists(os.path.dirname(db))
    # Root is needed: as nobody, the recorder says what is missing.
    c = Client(prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    c.handshake()
    text, err = c.call("record_and_summarize", pid=busy.pid, seconds=1)
    assert err and "recording failed" in text and re.search(r"root|CAP_", text), text
    assert c.close() == 0


def test_stopped_while_a_tool_runs():
    busy = harness.spawn([sys.executable, script("busy.py", BUSY)], stdout=subprocess.PIPE)
    assert busy.stdout.readline().strip() == b"READY"
    c = Client()
    c.handshake()
    c.send_raw(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                           "params": {"name": "record_and_summarize",
                                      "arguments": {"pid": busy.pid, "seconds": 300}}}))
    def recorder():
        for pid in serve_helpers.children(c.proc.pid):
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().split("\0")
            if "record" in argv:
                return pid, argv
    rec, argv = harness.wait_for(recorder, what="the recorder")
    rec = [rec]
    out = argv[argv.index("-o") + 1]
    assert out.startswith("/tmp/probing-mcp-")
    harness.wait_for(lambda: os.path.exists(out + ".partial"), what="the recording started")
    t0 = time.monotonic()
    c.proc.send_signal(signal.SIGTERM)
    assert c.proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 15
    assert not os.path.exists(f"/proc/{rec[0]}")
    assert not os.path.exists(os.path.dirname(out))


SDK_DIR = os.path.join(harness.ROOT, "build", "mcp-sdk")
SDK_CLIENT = os.path.join(harness.ROOT, "tests", "integration", "mcp_sdk", "client.mjs")

LOCKED = '''import threading, time
lock = threading.Lock()
def mcp_holds_the_lock():
    with lock:
        print("READY", flush=True)
        time.sleep(3600)
def mcp_waits_for_lock():
    with lock:  # line 8
        pass
threading.Thread(target=mcp_holds_the_lock, daemon=True).start()
time.sleep(0.3)
mcp_waits_for_lock()
'''


def sdk_client(calls, *server_args):
    """Run the official TypeScript SDK's client (mcp_sdk/client.mjs) against probing mcp."""
    if not shutil.which("node"):
        raise harness.Skip("node is not installed (the TypeScript SDK client needs it)")
    if not os.path.exists(os.path.join(SDK_DIR, "node_modules", "@modelcontextprotocol", "sdk")):
        raise harness.Skip("the MCP TypeScript SDK is not installed: "
                           "scripts/install-mcp-sdk.sh (make test runs it)")
    plan = {"command": [harness.PROBING, "mcp", *server_args], "calls": calls}
    p = harness.run(["node", SDK_CLIENT, SDK_DIR, json.dumps(plan)], timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


@harness.timeout(300)
def test_official_typescript_sdk_client():
    """The official TypeScript SDK's Client (npm @modelcontextprotocol/sdk) against the server:
    a record_and_summarize longer than the client's request timeout lives on the progress
    notifications sent every 5 s (resetTimeoutOnProgress), off_cpu=true shows where a
    lock-blocked process waits (the function and its Python line), the summary leads with
    what an assistant can act on (no libbpf lines, no NULL totals, no _start); a query
    without file or pid is a tool error the assistant reads, not a JSON-RPC error."""
    locked = harness.spawn([sys.executable, script("locked.py", LOCKED)], stdout=subprocess.PIPE)
    assert locked.stdout.readline().strip() == b"READY"
    time.sleep(0.5)
    out = sdk_client([
        {"name": "query", "arguments": {"sql": "SELECT 1"}},
        {"name": "record_and_summarize", "arguments": {"pid": locked.pid, "seconds": 2}},
        {"name": "record_and_summarize",
         "arguments": {"pid": locked.pid, "seconds": 16, "off_cpu": True},
         "timeout_ms": 9000, "progress": True},
    ])
    assert out["server"]["name"] == "probing", out["server"]
    tools = {t["name"]: t for t in out["tools"]}
    for name, t in tools.items():
        for arg, schema in t["inputSchema"]["properties"].items():
            assert schema.get("description") or arg in ("pid", "sql", "code", "seconds",
                                                       "timeout", "format"), (name, arg)
    assert "off_cpu" in tools["record_and_summarize"]["inputSchema"]["properties"]

    query, oncpu, offcpu = out["results"]
    harness.log(json.dumps(out["results"], indent=1)[:6000])
    assert "result" in query and query["result"]["isError"] is True, query
    assert "'file'" in query["result"]["content"][0]["text"], query

    assert "result" in oncpu and not oncpu["result"]["isError"], oncpu
    text = oncpu["result"]["content"][0]["text"]
    assert "no on-CPU samples" in text and "Call again with off_cpu=true" in text, text

    # 16 s against a 9 s request timeout: only the progress notifications kept it waiting.
    assert "result" in offcpu, offcpu
    assert offcpu["ms"] > 16000 and len(offcpu["progress"]) >= 3, offcpu
    steps = [p["progress"] for p in offcpu["progress"]]
    assert steps == sorted(set(steps)), steps
    res = offcpu["result"]
    assert not res["isError"], res
    text = res["content"][0]["text"]
    assert "libbpf" not in text and "NULL" not in text.split("## ")[0], text
    assert "__libc_start_main" not in text and "_start " not in text, text
    waits = text.split("## Where threads wait off the CPU")[1].split("## ")[0]
    rows = [r for r in waits.splitlines() if "|" in r][1:]
    # The lock wait of the main thread, at its Python line, about the 16 s recorded.
    lock_rows = [r for r in rows if r.split("|")[0].strip() == "lock"]
    assert lock_rows and ("mcp_waits_for_lock (%s:8)" % harness.tmp("locked.py")) in lock_rows[0], \
        waits
    assert 12 <= float(lock_rows[0].split("|")[-1]) <= 20, lock_rows
    assert any(r.split("|")[0].strip() == "sleep" and "mcp_holds_the_lock" in r
               for r in rows), waits


def test_framing_nul_bytes_and_invalid_utf8():
    """A NUL inside a line spoils that line only; an id of invalid UTF-8 is never echoed raw:
    every answer is one line of valid JSON."""
    c = Client()
    c.handshake()
    fd, pending = c.proc.stdout.fileno(), [b""]

    def line():
        """The next answer line, as bytes (read here: several may come in one read)."""
        while b"\n" not in pending[0]:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "the server did not answer in 60 s"
            chunk = os.read(fd, 65536)
            assert chunk, "the server ended"
            pending[0] += chunk
        one, pending[0] = pending[0].split(b"\n", 1)
        return one

    def read():
        return json.loads(line())
    # Two requests, the first with a NUL inside: the first is refused, the second answered.
    c.proc.stdin.write(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"\x00}\n'
                       b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n')
    c.proc.stdin.flush()
    r = read()
    assert r["id"] is None and r["error"]["code"] == -32700 and "NUL" in r["error"]["message"], r
    assert read() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    # A NUL at the very start, and one just before the line's end.
    c.proc.stdin.write(b'\x00\n{"jsonrpc": "2.0", "id": 3, "method": "ping"}\x00\n'
                       b'{"jsonrpc": "2.0", "id": 4, "method": "ping"}\n')
    c.proc.stdin.flush()
    for _ in range(2):
        r = read()
        assert r["id"] is None and r["error"]["code"] == -32700, r
    assert read() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    # Invalid UTF-8 in the id, and elsewhere: refused with id null, the answer is JSON.
    for raw in (b'{"jsonrpc": "2.0", "id": "a\xff\xfeb", "method": "ping"}',
                b'{"jsonrpc": "2.0", "id": "\xc0\xaf", "method": "ping"}',
                b'{"jsonrpc": "2.0", "id": 5, "method": "pi\xedng"}'):
        c.proc.stdin.write(raw + b"\n")
        c.proc.stdin.flush()
        answer = line()
        answer.decode("utf-8")  # valid UTF-8
        r = json.loads(answer)
        assert r["id"] is None and r["error"]["code"] == -32700, (raw, r)
        assert "UTF-8" in r["error"]["message"], r
    # Valid UTF-8 ids (non-ASCII) still come back as sent.
    c.send_raw(json.dumps({"jsonrpc": "2.0", "id": "caf\u00e9-\U0001f600", "method": "ping"},
                          ensure_ascii=False))
    assert read() == {"jsonrpc": "2.0", "id": "caf\u00e9-\U0001f600", "result": {}}
    assert c.close() == 0
