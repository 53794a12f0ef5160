"""`probing serve` for the tests: start it, read its URL, make requests with or without the
token; recordings with known contents to serve."""
import http.client
import json
import os
import select
import sqlite3
import subprocess
import urllib.parse

import harness
import recordings

# Two ranks of one job over 4 seconds (folded2db spreads each count over them): rank 0
# computes, rank 1 waits in allreduce and reads; thread 101 of rank 0 loads data.
JOB = ("@process 100 python train.py --rank 0\n@process 200 python train.py --rank 1\n"
       "@meta frequency 99\n"
       "@pid 100 100 MainThread\n"
       "_start;main;train (/app/train.py:10);step (/app/train.py:20);compute 400\n"
       "_start;main;train (/app/train.py:10);step (/app/train.py:20);allreduce 80\n"
       "@pid 100 101 loader\n"
       "start_thread;load (/app/data.py:5);read 40\n"
       "@pid 200 200 MainThread\n"
       "_start;main;train (/app/train.py:10);step (/app/train.py:20);compute 120\n"
       "_start;main;train (/app/train.py:10);step (/app/train.py:20);allreduce 360\n"
       "_start;main;train (/app/train.py:10);io 40\n")


def job_db(name="job.db", seconds=4, start=1700000000):
    """The JOB recording with ranks, its seconds starting at meta start = @start."""
    path = recordings.make_db(JOB, name=name, seconds=seconds)
    con = sqlite3.connect(path)
    con.execute("UPDATE processes SET rank = pid / 100 - 1, world_size = 2")
    con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('start', ?)", (start + 0.25,))
    con.commit()
    con.close()
    return path


def per_second(path):
    """{second since the start: samples} of a recording, read with sqlite3 (ground truth)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0 = int(float(con.execute("SELECT value FROM meta WHERE key = 'start'").fetchone()[0]))
    rows = con.execute("SELECT ts - ?, SUM(count) FROM sample_counts GROUP BY ts", (t0,))
    out = dict(rows.fetchall())
    con.close()
    return out


def children(parent):
    """Pids of the child processes of @parent."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        out.append(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    return out


class Server:
    """probing serve ARGS, its URL from the first stdout line."""

    def __init__(self, *args, env=None):
        self.proc = harness.spawn([harness.PROBING, "serve", *map(str, args)], env=env,
                                  stdout=subprocess.PIPE, stderr=open(harness.tmp("serve.log"),
                                                                      "ab"))
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        assert ready, "probing serve printed no URL in 20 s: " + self.log()
        self.url = self.proc.stdout.readline().decode().strip()
        assert self.url.startswith("http://"), f"first line {self.url!r}: {self.log()}"
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port
        self.token = urllib.parse.parse_qs(u.query)["token"][0]
        self.base = f"http://{u.netloc}"

    def log(self):
        with open(harness.tmp("serve.log"), errors="replace") as f:
            return f.read()[-3000:]

    def request(self, method, path, body=None, token=True, headers=None, timeout=60):
        """(status, headers dict with lower-case names, body bytes)."""
        h = dict(headers or {})
        if token is True:
            h["Authorization"] = "Bearer " + self.token
        elif token:
            h["Authorization"] = "Bearer " + token
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body.encode() if isinstance(body, str) else body,
                      headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def json(self, method, path, body=None, **kw):
        status, headers, data = self.request(method, path, body, **kw)
        assert headers.get("content-type", "").startswith("application/json"), (status, data)
        return status, json.loads(data)

    def query(self, src, sql, **params):
        q = urllib.parse.urlencode(dict(src=src, **params))
        return self.json("POST", "/api/query?" + q, sql)

    def children(self):
        """Pids of the server's child processes (the commands it runs)."""
        return children(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=20)
