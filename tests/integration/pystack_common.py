"""Shared helpers for the Python-stack tests (test_python_*.py): the py_stacks.py workload,
its ground truth, and the pystacks / pystack-bpf test tools."""
import json
import os
import re
import subprocess

import harness as h

WORKLOAD = os.path.join(h.PY_WORKLOADS, "python", "py_stacks.py")
TOOLS = os.path.join(h.BUILD, "tests", "tools")
PYSTACKS = os.path.join(TOOLS, "pystacks")
PYSTACK_BPF = os.path.join(TOOLS, "pystack-bpf")


def tool(path):
    assert os.path.exists(path), f"{path} not built (run 'make test')"
    return path


def markers(path):
    """{NAME: line} for every '# @NAME' comment in a source file."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"# @(\w+)\s*$", line)
            if m:
                out[m.group(1)] = i
    return out


def start_workload(exe, busy=False, argv_prefix=None, env=None):
    """Start py_stacks.py under @exe; return (Popen, out_dir, truth)."""
    out = h.tmp("out")
    os.makedirs(out, exist_ok=True)
    cmd = (argv_prefix or [exe]) + [WORKLOAD, out] + (["--busy"] if busy else [])
    err = open(h.tmp("workload.err"), "w")
    p = h.spawn(cmd, stderr=err, env=env)
    truth_path = os.path.join(out, "truth.json")
    h.wait_for(lambda: os.path.exists(truth_path) or p.poll() is not None, timeout=60,
               what="the workload's truth.json")
    if p.poll() is not None:
        with open(h.tmp("workload.err")) as f:
            raise AssertionError(f"workload exited {p.returncode}: {f.read()[-2000:]}")
    with open(truth_path, encoding="utf-8") as f:
        truth = json.load(f)
    return p, out, truth


def truth_thread(truth, name):
    for t in truth["threads"]:
        if t["name"] == name:
            return t
    raise AssertionError(f"thread {name!r} not in the workload's truth: "
                         f"{[t['name'] for t in truth['threads']]}")


def pystacks(pid, *args, check=True, exe=None):
    """Run pystacks --raw (or @exe, a build of it); return {tid: {name, truncated, tss_bound,
    frames: [...]}}; with --locals each frame has "locals" (and "locals_error")."""
    p = h.run([tool(exe or PYSTACKS), "--raw", *map(str, args), str(pid)], timeout=60)
    if check:
        assert p.returncode == 0, f"pystacks exited {p.returncode}: {p.stderr[-1000:]}"
    threads = {}
    for line in p.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "T":
            threads[int(f[1])] = {"name": f[2], "n": int(f[3]), "truncated": f[4] == "1",
                                  "tss_bound": f[5] == "1", "frames": []}
        elif f[0] == "F":
            threads[int(f[1])]["frames"].append({
                "func": f[4], "qualname": None if f[5] == "-" else f[5], "file": f[6],
                "line": int(f[7]), "entry": f[8] == "1", "locals": []})
        elif f[0] == "L":  # --locals: tid, depth, name, type, flags, address, repr
            fr = threads[int(f[1])]["frames"][int(f[2])]
            fr["locals"].append({
                "name": f[3], "type": f[4], "flags": set() if f[5] == "-" else
                set(f[5].split(",")), "addr": int(f[6], 16),
                "repr": None if f[7] == "-" else f[7]})
        elif f[0] == "E":  # --locals: tid, depth, error
            threads[int(f[1])]["frames"][int(f[2])]["locals_error"] = f[3]
    return threads


def pystack_bpf(pid, seconds=2.0, *args):
    """Run pystack-bpf; return ({tid: [(count, status, truncated, n, [(func, line) root-first])]},
    summary dict)."""
    p = h.run([tool(PYSTACK_BPF), "-p", str(pid), "-d", str(seconds), *map(str, args)],
              timeout=seconds + 60)
    assert p.returncode == 0, f"pystack-bpf exited {p.returncode}: {p.stderr[-2000:]}"
    per_tid, summary = {}, None
    for line in p.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "S":
            stack = []
            if f[6]:
                for fr in f[6].split(";"):
                    func, _, ln = fr.rpartition(":")
                    stack.append((func, int(ln)))
            per_tid.setdefault(int(f[1]), []).append(
                (int(f[2]), int(f[3]), f[4] == "1", int(f[5]), stack))
        elif f[0] == "SUMMARY":
            summary = dict(zip(["samples", "lost", "avg_ns", "p99_ns", "max_ns"],
                               map(int, f[1:6])))
    assert summary is not None, f"no SUMMARY line: {p.stdout[-500:]}"
    return per_tid, summary


def pystack_bpf_compare(pid, rounds, *args):
    """Run pystack-bpf --compare; return ([{tid, equal, bpf: (status, n, truncated),
    user: (status, n, truncated), stack: [(func, line) root-first], diff: [lines]}],
    {rounds, equal, moved, page}: page, the compared walks' frames the BPF walker copied from
    its one read of the innermost frame's page)."""
    p = h.run([tool(PYSTACK_BPF), "-p", str(pid), "--compare", str(rounds), *map(str, args)],
              timeout=120)
    assert p.returncode == 0, f"pystack-bpf --compare exited {p.returncode}: {p.stderr[-2000:]}"
    rows, summary = [], None
    for line in p.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "C":
            stack = []
            for fr in (f[9].split(";") if f[9] else []):
                func, _, ln = fr.rpartition(":")
                stack.append((func, int(ln)))
            rows.append({"tid": int(f[1]), "equal": f[2] == "1",
                         "bpf": (int(f[3]), int(f[4]), f[5] == "1"),
                         "user": (int(f[6]), int(f[7]), f[8] == "1"),
                         "stack": stack, "diff": []})
        elif f[0] == "D":
            rows[-1]["diff"].append(line)
        elif f[0] == "COMPARE":
            summary = dict(zip(["rounds", "equal", "moved", "page"], map(int, f[1:5])))
    assert summary is not None, f"no COMPARE line: {p.stdout[-500:]}"
    return rows, summary


def native_tid(thread):
    tid = thread.get("native_id")
    assert tid, f"thread {thread['name']} has no native_id"
    return tid
