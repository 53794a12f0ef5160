#!/usr/bin/env python3
"""Benchmark: what `probing serve` and `probing mcp` add to the commands they run.

On the 1 M-sample recording of bench/flamegraph_1m.sh (made if missing), interleaved rounds,
medians: the flame graph by the command and through the server, the samples per second
(read in the server), a small query by the command, through the server and through an MCP
tools/call.

    bench/bench_serve.py [--rounds 7]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROBING = os.path.join(ROOT, "build", "probing")
DB = os.path.join(ROOT, "bench", "out", "1m.db")


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    rounds = ap.parse_args().rounds
    if not os.path.exists(DB):
        subprocess.run([os.path.join(ROOT, "bench", "flamegraph_1m.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    srv = subprocess.Popen([PROBING, "serve", "-i", DB], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
    url = urllib.parse.urlsplit(srv.stdout.readline().decode().strip())
    token = urllib.parse.parse_qs(url.query)["token"][0]
    mcp = subprocess.Popen([PROBING, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def get(method, path, body=None):
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
        c.request(method, path, body=body, headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        data = r.read()
        assert r.status == 200, (path, r.status, data[:300])
        c.close()
        return data

    n = [0]

    def mcp_call(sql):
        n[0] += 1
        mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n[0], "method": "tools/call",
                                    "params": {"name": "query", "arguments": {
                                        "file": DB, "sql": sql}}}).encode() + b"\n")
        mcp.stdin.flush()
        r = json.loads(mcp.stdout.readline())
        assert not r["result"]["isError"], r

    sql = "SELECT COUNT(*) FROM processes"
    cases = {
        "flamegraph: command": lambda: subprocess.run(
            [PROBING, "flamegraph", "-i", DB, "-o", "/dev/null"], check=True),
        "flamegraph: served": lambda: get("GET", "/api/flamegraph?f=0"),
        "samples per second: served": lambda: get("GET", "/api/timeline?f=0"),
        "small query: command": lambda: subprocess.run(
            [PROBING, "query", "-i", DB, "-f", "json-compact", sql], check=True,
            stdout=subprocess.DEVNULL),
        "small query: served": lambda: get("POST", "/api/query?src=f0", sql),
        "small query: mcp tools/call": lambda: mcp_call(sql),
    }
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            times[k].append(timed(fn))
    srv.terminate()
    mcp.stdin.close()
    srv.wait()
    mcp.wait()
    print(f"{rounds} interleaved rounds on {DB}, medians:")
    for k, v in times.items():
        print(f"  {k:32s} {statistics.median(v) * 1000:8.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
