"""probing merge: the recordings of a job's nodes made into one.

Two "nodes" are two network namespaces joined by a veth pair, each with its own UTS (host
name), PID and mount namespace (its /etc/hosts names both nodes, as a cluster's DNS would).
A torchrun --nnodes 2 gloo DDP job rendezvouses over the link (c10d on node a's address);
on each node one probing records torchrun and its worker. Both nodes number their pids from
1, so pids collide, as on real nodes. Ground truth: the workers write their host, rank,
local rank, world size and pid; folded stacks of each input (per rank, per pid) are those of
the merged file.
"""
import collections
import os
import secrets
import shutil
import sqlite3
import stat
import subprocess

import harness as h

TORCH_PY = "/usr/bin/python3.11"
TORCHRUN = "/usr/bin/torchrun"
WORKER = os.path.join(h.PY_WORKLOADS, "torch", "ddp_nodes.py")
SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"


def have_torch():
    return os.path.exists(TORCHRUN) and h.run(
        [TORCH_PY, "-c", "import torch.distributed"], timeout=60).returncode == 0


class TwoNodes:
    """Namespaces pjm-TAG-a and pjm-TAG-b, joined by the veth pair pjm-TAG-a <-> pjm-TAG-b
    (10.231.0.1 and .2), removed on exit whatever happened."""

    def __init__(self):
        self.tag = secrets.token_hex(2)
        self.ns = {n: f"pjm-{self.tag}-{n}" for n in "ab"}
        self.addr = {"a": "10.231.0.1", "b": "10.231.0.2"}

    def __enter__(self):
        try:
            for n in "ab":
                h.run(["ip", "netns", "add", self.ns[n]], check=True)
            h.run(["ip", "link", "add", self.ns["a"], "type", "veth", "peer", "name",
                   self.ns["b"]], check=True)
            for n in "ab":
                ip = ["ip", "-n", self.ns[n]]
                h.run(["ip", "link", "set", self.ns[n], "netns", self.ns[n]], check=True)
                h.run(ip + ["addr", "add", self.addr[n] + "/24", "dev", self.ns[n]], check=True)
                h.run(ip + ["link", "set", "lo", "up"], check=True)
                h.run(ip + ["link", "set", self.ns[n], "up"], check=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        # Deleting a namespace removes its end of the veth pair, and with it the other.
        for n in "ab":
            h.run(["ip", "netns", "del", self.ns[n]])
        h.run(["ip", "link", "del", self.ns["a"]])

    def free_port(self, n):
        """A port nothing listens on at node @n's address (bound to port 0 there)."""
        p = h.run(["ip", "netns", "exec", self.ns[n], TORCH_PY, "-c",
                   "import socket; s = socket.socket(); s.bind(('%s', 0)); "
                   "print(s.getsockname()[1])" % self.addr[n]], check=True)
        return int(p.stdout)

    def snapshot(self, proc, out):
        """probing backtrace of torchrun and its workers on the node whose sh -c runs as
        @proc (nodes.spawn), from inside its namespaces, into @out."""
        init = int(open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()[0])
        return h.run(["nsenter", "-t", str(init), "-p", "-u", "-m", "-n", "sh", "-c",
                      f"exec {h.PROBING} backtrace -p $(pgrep -o -f '^{TORCH_PY} {TORCHRUN}')"
                      f" --children -o {out}"], timeout=60)

    def write_hosts(self, path):
        """An /etc/hosts for the nodes (as a cluster's DNS would name them), at @path."""
        with open(path, "w") as f:
            f.write(f"127.0.0.1 localhost\n{self.addr['a']} node-a\n{self.addr['b']} node-b\n")
        return path

    def torchrun(self, n, hosts, port, probing, job, env=""):
        """On node @n, with /etc/hosts from @hosts: probing @probing (its arguments) over a
        torchrun --nnodes 2 of @job (the script and its arguments), one rank per node, the
        rendezvous at node a's @port; @env: VAR=value words for probing and the job."""
        return self.spawn(
            n, f"mount --bind {hosts} /etc/hosts && exec env {env} {h.PROBING} {probing} -- "
            f"{TORCHRUN} --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d "
            f"--rdzv_endpoint {self.addr['a']}:{port} --rdzv_id pj-{self.tag} "
            f"--max_restarts 0 --redirects 1 --tee 1 {job}")

    def spawn(self, n, script):
        """Run sh -c @script on node @n: its network, a UTS namespace named node-@n, its own
        PID namespace (killing its first process ends it all) and mount namespace."""
        return h.spawn(["ip", "netns", "exec", self.ns[n], "env",
                        f"GLOO_SOCKET_IFNAME={self.ns[n]}", "unshare", "--uts", "--pid",
                        "--fork", "--mount-proc", "sh", "-c", f"hostname node-{n} && {script}"],
                       stdout=open(h.tmp(f"{n}.log"), "w"), stderr=subprocess.STDOUT)


def folded(path, *args):
    p = h.probing("flamegraph", "-i", path, "--folded", *args, check=True)
    return p.stdout


def counter(text):
    c = collections.Counter()
    for line in text.splitlines():
        stack, n = line.rsplit(" ", 1)
        c[stack] += int(n)
    return c


def processes(path):
    con = h.db(path)
    rows = con.execute("SELECT pid, ppid, rank, local_rank, world_size, host, host_pid, "
                       "command, ns_pid FROM processes ORDER BY host, host_pid").fetchall()
    con.close()
    return rows


def ppids(path):
    """{pid: ppid} of a node's own recording."""
    con = h.db(path)
    rows = dict(con.execute("SELECT pid, ppid FROM processes"))
    con.close()
    return rows


@h.timeout(240)
def test_merge_two_node_torchrun_job():
    """Each node's recording of a torchrun --nnodes 2 job, merged: both hosts' ranks with
    their ranks and local ranks, colliding pids moved and followed by ppid, flamegraph
    --rank N of the merged file = that of the node that ran rank N, --pid of a moved process
    = its pid on its node, everything = the sum of the inputs; SQL sees node_work on every
    rank; a merged file merges again."""
    if not have_torch():
        return
    out = h.tmp()
    with TwoNodes() as nodes:
        hosts = nodes.write_hosts(h.tmp("hosts"))
        port = nodes.free_port("a")
        procs = {}
        for n in "ab":
            procs[n] = nodes.torchrun(n, hosts, port, f"record -F 99 --children -o {out}/{n}.db",
                                      f"{WORKER} 1.5 {out}")
        # Both ranks hold in hold_here: a backtrace snapshot on each node.
        h.wait_for(lambda: all(os.path.exists(f"{out}/rank{r}.txt") for r in (0, 1))
                   or any(p.poll() is not None for p in procs.values()),
                   timeout=150, what="both ranks to hold")
        for n in "ab":
            assert procs[n].poll() is None, f"node {n} ended early"
            p = nodes.snapshot(procs[n], f"{out}/bt-{n}.db")
            assert p.returncode == 0, p.stderr
        open(f"{out}/release", "w").close()
        for n in "ab":
            rc = procs[n].wait(timeout=180)
            h.log(open(h.tmp(f"{n}.log")).read()[-3000:])
            assert rc == 0, f"node {n}: exit status {rc}"

    truth = {}  # host -> (rank, local_rank, world_size, pid)
    for r in (0, 1):
        host, rank, lrank, world, pid, total = open(f"{out}/rank{r}.txt").read().split()
        assert float(total) == 3.0, f"rank {r}: all_reduce gave {total}"
        truth[host] = (int(rank), int(lrank), int(world), int(pid))
    assert set(truth) == {"node-a", "node-b"}, truth

    p = h.probing("merge", f"{out}/a.db", f"{out}/b.db", "-o", f"{out}/job.db")
    assert p.returncode == 0, p.stderr
    assert "merged 2 recordings" in p.stderr and "node-a,node-b" in p.stderr, p.stderr
    assert not os.path.exists(f"{out}/job.db.partial")

    rows = processes(f"{out}/job.db")
    node_pids = {n: set(ppids(f"{out}/{n}.db")) for n in "ab"}
    assert node_pids["a"] & node_pids["b"], f"no pid collided: {node_pids}"
    assert len(rows) == len(node_pids["a"]) + len(node_pids["b"]), rows
    by_host = collections.defaultdict(dict)
    for pid, ppid, rank, lrank, world, host, host_pid, command, ns_pid in rows:
        by_host[host][host_pid] = (pid, ppid, rank, lrank, world)
        assert ns_pid is None, rows
    assert {h_: set(v) for h_, v in by_host.items()} == \
        {"node-a": node_pids["a"], "node-b": node_pids["b"]}, rows
    for host, (rank, lrank, world, pid) in truth.items():
        assert by_host[host][pid][2:] == (rank, lrank, world), (host, pid, rows)
    # Node a's pids stay; node b's that collide move above PID_MAX_LIMIT, ppid following.
    moved = {}
    for host_pid, (pid, ppid, *_rest) in by_host["node-b"].items():
        assert pid == host_pid or pid == host_pid + 4194304 * (pid // 4194304), rows
        if pid != host_pid:
            moved[host_pid] = pid
    assert all(pid == hp for hp, (pid, *_r) in by_host["node-a"].items()), rows
    assert set(moved) == node_pids["a"] & node_pids["b"], (moved, rows)
    for host_pid, (pid, ppid, *_r) in by_host["node-b"].items():
        src_ppid = ppids(f"{out}/b.db")[host_pid]
        assert ppid == moved.get(src_ppid, src_ppid), (host_pid, rows)

    # Readers: per rank, per moved pid and in all, the merged file is its inputs.
    node_of_rank = {truth[host][0]: host[-1] for host in truth}
    for rank, n in node_of_rank.items():
        mine = folded(f"{out}/job.db", "--rank", rank)
        assert mine == folded(f"{out}/{n}.db", "--rank", rank), f"rank {rank}"
        assert "node_work (" in mine, f"rank {rank}: {mine[:2000]}"
    for host_pid, pid in moved.items():
        assert folded(f"{out}/job.db", "--pid", pid) == folded(f"{out}/b.db", "--pid", host_pid)
    whole = counter(folded(f"{out}/job.db"))
    assert whole == counter(folded(f"{out}/a.db")) + counter(folded(f"{out}/b.db"))

    q = h.probing("query", "-i", f"{out}/job.db", "-f", "csv", "--no-header",
                  "SELECT p.host, p.rank, sum(s.count) FROM samples s JOIN processes p"
                  " USING (pid) WHERE s.stack_id IN (SELECT stack_id FROM frames WHERE"
                  " func = 'node_work') GROUP BY 1, 2 ORDER BY 1", check=True)
    got = {host: (int(rank), int(n)) for host, rank, n in
           (line.split(",") for line in q.stdout.split())}
    assert set(got) == {"node-a", "node-b"}, q.stdout
    for host, (rank, n) in got.items():
        assert rank == truth[host][0] and n >= 40, q.stdout  # 1.5 s at 99 Hz: ~148

    con = h.db(f"{out}/job.db")
    meta = dict(con.execute("SELECT key, value FROM meta"))
    ids = con.execute("SELECT count(*), count(DISTINCT k) FROM (SELECT group_concat(frame_id)"
                      " AS k FROM (SELECT * FROM stack_frames ORDER BY stack_id, depth)"
                      " GROUP BY stack_id)").fetchone()
    con.close()
    assert meta["host"] == "node-a,node-b" and meta["merged"] == 2 and meta["frequency"] == 99
    samples = [dict(h.db(f"{out}/{n}.db").execute("SELECT key, value FROM meta"))["samples"]
               for n in "ab"]
    assert meta["samples"] == sum(samples) == sum(whole.values()), (meta, samples)
    assert ids[0] == ids[1], f"stacks not interned: {ids}"
    # The all_reduce of each rank (recorded with uprobes) is in the merged file under its
    # rank and host, with the same stack as on its node.
    coll_q = ("SELECT p.host, c.rank, c.op, c.bytes, c.seq, (SELECT group_concat(func, ';')"
              " FROM (SELECT func FROM frames f WHERE f.stack_id = c.stack_id ORDER BY"
              " depth)) FROM collectives c JOIN processes p USING (pid)"
              " WHERE c.op = 'allreduce' ORDER BY 1, 5")
    merged_coll = h.db(f"{out}/job.db").execute(coll_q).fetchall()
    node_coll = [r for n in "ab" for r in h.db(f"{out}/{n}.db").execute(
        coll_q.replace("p.host", "'node-" + n + "'")).fetchall()]
    assert merged_coll and sorted(merged_coll) == sorted(node_coll), (merged_coll, node_coll)
    assert {(host, rank) for host, rank, *_ in merged_coll} == \
        {(host, truth[host][0]) for host in truth}, merged_coll

    # The snapshots: both nodes' processes keyed by host (their pids collide), ranks from
    # the workers' truth; both ranks' main threads one group, at hold_here's line.
    p = h.probing("merge", f"{out}/bt-a.db", f"{out}/bt-b.db", "-o", f"{out}/bt.db")
    assert p.returncode == 0 and "merged 2 snapshots" in p.stderr, p.stderr
    con = h.db(f"{out}/bt.db")
    bt = con.execute("SELECT host, pid, rank, odd_one_out FROM bt_processes").fetchall()
    groups = con.execute("SELECT stack, ranks FROM bt_groups").fetchall()
    con.close()
    for host, (rank, _l, _w, pid) in truth.items():
        assert (host, pid, rank, 0) in bt, (host, pid, bt)
    launchers = [(host, pid) for host, pid, rank, _o in bt if rank is None]
    assert {h_ for h_, _ in launchers} == {"node-a", "node-b"}, bt
    hold_line = [i for i, line in enumerate(open(WORKER), 1)
                 if line.rstrip().endswith("# hold")][0]
    hold = [r for s_, r in groups if s_.startswith(f"hold_here ({WORKER}:{hold_line})")]
    assert hold and sorted(hold[0].split(",")) == ["0", "1"], groups
    text = h.probing("backtrace", "-i", f"{out}/bt.db", check=True).stdout
    assert "on 2 hosts" in text, text
    header = [line for line in text.splitlines() if "rank 0 (pid" in line and "rank 1 (pid"
              in line]
    assert header and "node-a" in header[0] and "node-b" in header[0], text
    p = h.probing("merge", f"{out}/bt-a.db", f"{out}/a.db", "-o", f"{out}/mixed.db")
    assert p.returncode == 1 and "a backtrace snapshot, with" in p.stderr, p.stderr
    assert not os.path.exists(f"{out}/mixed.db")

    # A merged file merges again: a alone, then with b, is a and b.
    assert h.probing("merge", f"{out}/a.db", "-o", f"{out}/a1.db").returncode == 0
    p = h.probing("merge", f"{out}/a1.db", f"{out}/b.db", "-o", f"{out}/job2.db")
    assert p.returncode == 0, p.stderr
    assert processes(f"{out}/job2.db") == rows
    assert counter(folded(f"{out}/job2.db")) == whole


HOLD_PY = """import sys, time
def hold_here():
    while True:
        time.sleep(3600)
def elsewhere_here():
    while True:
        time.sleep(3600)
print("READY", flush=True)
hold_here() if sys.argv[1] == "hold" else elsewhere_here()
"""


def test_merge_snapshots_find_the_odd_rank_across_hosts():
    """Three hosts (UTS namespaces), one rank each, each read alone by backtrace -o (a rank
    alone is no odd one out): merged, ranks 0 and 1 in hold_here are one group and rank 2,
    in elsewhere_here, is the odd one out, in bt_processes.odd_one_out as in backtrace -i."""
    d = h.tmp()
    script = f"{d}/hold.py"
    with open(script, "w") as f:
        f.write(HOLD_PY)
    files = []
    for rank, where in enumerate(("hold", "hold", "elsewhere")):
        p = h.spawn(["unshare", "--uts", "sh", "-c", f"hostname host{rank} && exec {TORCH_PY}"
                     f" {script} {where}"], stdout=subprocess.PIPE,
                    env={"RANK": str(rank), "WORLD_SIZE": "3", "LOCAL_RANK": "0"})
        assert p.stdout.readline().strip() == b"READY"
        # In its hour-long sleep (not still at the module's level): asleep in the kernel.
        h.wait_for(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0]
                   == "S", timeout=10, what="the rank asleep")
        files.append(f"{d}/bt{rank}.db")
        b = h.probing("backtrace", "-p", p.pid, "-o", files[-1])
        assert b.returncode == 0, b.stderr
        con = h.db(files[-1])
        assert con.execute("SELECT host, rank, odd_one_out FROM bt_processes").fetchall() == \
            [(f"host{rank}", rank, 0)]
        con.close()
    p = h.probing("merge", *files, "-o", f"{d}/job.db")
    assert p.returncode == 0, p.stderr
    con = h.db(f"{d}/job.db")
    rows = con.execute("SELECT host, rank, odd_one_out FROM bt_processes ORDER BY rank").fetchall()
    groups = con.execute("SELECT ranks FROM bt_groups WHERE stack LIKE 'hold_here (%'").fetchall()
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    assert rows == [("host0", 0, 0), ("host1", 1, 0), ("host2", 2, 1)], rows
    assert [sorted(r.split(",")) for (r,) in groups] == [["0", "1"]], groups
    assert meta["host"] == "host0,host1,host2" and meta["merged"] == 3 and \
        meta["kind"] == "backtrace", meta
    text = h.probing("backtrace", "-i", f"{d}/job.db", check=True).stdout
    assert "The odd one out: rank 2" in text, text


CRASH_TARGET = os.path.join(h.PY_WORKLOADS, "live", "crash_target.py")


def test_merge_crash_files_of_a_job():
    """The crash files of two processes (a segfault in ctypes, an uncaught exception in a
    worker thread) and a backtrace snapshot of a third, merged: one crash row per crashed
    process, the locals of each, every process in bt_processes; backtrace -i reads it. A
    crash file whose crash table differs is refused, naming the table."""
    d = h.tmp()
    crashes = {}
    for how in ("segv", "thread_exc"):
        out = f"{d}/{how}.db"
        p = h.spawn([h.PROBING, "run", f"--crash={out}", "--", TORCH_PY, CRASH_TARGET, how],
                    cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p.wait(timeout=60)
        assert os.path.exists(out), (how, p.returncode)
        crashes[how] = p.pid
    script = f"{d}/hold.py"
    with open(script, "w") as f:
        f.write(HOLD_PY)
    p = h.spawn([TORCH_PY, script, "hold"], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"READY"
    b = h.probing("backtrace", "-p", p.pid, "-o", f"{d}/hold.db")
    assert b.returncode == 0, b.stderr
    m = h.probing("merge", f"{d}/hold.db", f"{d}/segv.db", f"{d}/thread_exc.db", "-o",
                  f"{d}/job.db")
    assert m.returncode == 0, m.stderr
    con = h.db(f"{d}/job.db")
    got = con.execute("SELECT pid, kind, signal_name, exception FROM crash ORDER BY kind")
    assert got.fetchall() == [(crashes["thread_exc"], "exception", None, "ValueError"),
                              (crashes["segv"], "signal", "SIGSEGV", None)]
    pids = {pid for (pid,) in con.execute("SELECT pid FROM bt_processes")}
    assert pids == {p.pid, *crashes.values()}, pids
    # Each crash's locals, joined to its frames as docs/sql.md shows.
    local = dict(con.execute(
        "SELECT c.kind, group_concat(l.name || '=' || l.repr) FROM crash c JOIN bt_frames f"
        " USING (host, pid, tid) JOIN bt_locals l USING (host, pid, tid, depth)"
        " WHERE f.func IN ('crash_here', 'fail_batch') GROUP BY c.kind"))
    con.close()
    assert "secret=4242" in local["signal"] and "batch=7" in local["exception"], local
    text = h.probing("backtrace", "-i", f"{d}/job.db", check=True).stdout
    assert "hold_here" in text and "fail_batch" in text and "crash_here" in text, text
    # A crash table of another shape: refused, and which table says why.
    odd = f"{d}/odd.db"
    shutil.copy(f"{d}/segv.db", odd)
    con = sqlite3.connect(odd)
    con.execute("ALTER TABLE crash ADD COLUMN gpu TEXT")
    con.commit()
    con.close()
    m = h.probing("merge", f"{d}/thread_exc.db", odd, "-o", f"{d}/bad.db")
    assert m.returncode == 1 and "table 'crash' differs" in m.stderr, m.stderr
    assert not os.path.exists(f"{d}/bad.db")
    p.kill()


def record_spin(path, freq=99):
    p = h.probing("record", "-F", freq, "-o", path, "--", TORCH_PY, "-c", SPIN, timeout=60)
    assert p.returncode == 0, p.stderr


def test_merge_bad_input():
    """Files that are not recordings, recordings of another format, sampling frequency or
    with a table merge does not know, a crafted schema, a file twice, the output among the inputs, a
    read-only output, a leftover OUT.partial: refused with a clear message, exit 1 (2 for a
    usage error), and nothing written; an existing output stays as it was."""
    d = h.tmp()
    r1, r2, r3 = f"{d}/r1.db", f"{d}/r2.db", f"{d}/r3.db"
    record_spin(r1)
    record_spin(r2)
    record_spin(r3, freq=199)
    out = f"{d}/out.db"

    def refused(*args, why, rc=1):
        for old in (None, b"precious"):
            if old is not None:
                with open(out, "wb") as f:
                    f.write(old)
            elif os.path.exists(out):
                os.unlink(out)
            p = h.probing("merge", *args, "-o", out)
            assert p.returncode == rc, (args, p.returncode, p.stderr)
            assert why in p.stderr, (args, p.stderr)
            assert os.path.exists(out) == (old is not None), args
            if old is not None:
                assert open(out, "rb").read() == old, args
            assert not os.path.exists(out + ".partial"), args
        return p.stderr

    text = f"{d}/notes.txt"
    with open(text, "w") as f:
        f.write("not a recording\n")
    other = f"{d}/other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    refused(r1, text, why="not a SQLite database")
    refused(other, r1, why="not a probing recording")
    refused(r1, f"{d}/missing.db", why="no such file")
    # A newer format: a column added to processes; a table this probing does not know.
    newer = f"{d}/newer.db"
    shutil.copy(r2, newer)
    con = sqlite3.connect(newer)
    con.execute("ALTER TABLE processes ADD COLUMN gpu TEXT")
    con.commit()
    con.close()
    msg = refused(r1, newer, why="different formats")
    assert "'processes'" in msg and "same version of probing" in msg, msg
    future = f"{d}/future.db"
    shutil.copy(r2, future)
    con = sqlite3.connect(future)
    con.execute("CREATE TABLE gpu_kernels(name TEXT)")
    con.commit()
    con.close()
    refused(r1, future, why="a table 'gpu_kernels' that this probing does not know")
    # A crafted file whose schema text runs more than a definition (ATTACH makes files).
    crafted, planted = f"{d}/crafted.db", f"{d}/planted.db"
    shutil.copy(r2, crafted)
    con = sqlite3.connect(crafted)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET sql = sql || '; ATTACH ''%s'' AS p;"
                " CREATE TABLE p.x(a)' WHERE name = 'meta'" % planted)
    con.commit()
    con.close()
    refused(crafted, r1, why="not one table definition")
    assert not os.path.exists(planted)
    refused(r1, r3, why="recorded at 99 Hz and 199 Hz")
    refused(r1, r1, why="are the same file")
    h.run(["ln", "-s", r1, f"{d}/link.db"], check=True)
    refused(r1, f"{d}/link.db", why="are the same file")
    # The output among the inputs: refused, the recording untouched.
    before = open(r1, "rb").read()
    p = h.probing("merge", r1, r2, "-o", r1)
    assert p.returncode == 1 and "one of the recordings merged" in p.stderr, p.stderr
    assert open(r1, "rb").read() == before
    # Usage errors.
    for args in ([], [r1], [r1, "-o", "-"], [r1, "-o"]):
        p = h.probing("merge", *args)
        assert p.returncode == 2 and "Try 'probing merge --help'" in p.stderr, (args, p.stderr)
    # A read-only output: refused, then replaced with --force; a directory refused.
    with open(out, "w") as f:
        f.write("old")
    os.chmod(out, 0o444)
    p = h.probing("merge", r1, r2, "-o", out)
    assert p.returncode == 1 and "--force" in p.stderr and open(out).read() == "old", p.stderr
    p = h.probing("merge", r1, r2, "-o", out, "--force")
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o444
    assert h.db(out).execute("SELECT value FROM meta WHERE key = 'merged'").fetchone() == (2,)
    p = h.probing("merge", r1, r2, "-o", d)
    assert p.returncode == 1 and os.path.isdir(d), p.stderr
    # A leftover OUT.partial (a merge killed, or running) is not overwritten.
    os.unlink(out)
    with open(out + ".partial", "w") as f:
        f.write("x")
    p = h.probing("merge", r1, r2, "-o", out)
    assert p.returncode == 1 and out + ".partial" in p.stderr and not os.path.exists(out)
    assert open(out + ".partial").read() == "x"
    os.unlink(out + ".partial")
    # A recording made before processes had a host column: its processes get meta's host.
    older = f"{d}/older.db"
    shutil.copy(r2, older)
    con = sqlite3.connect(older)
    con.execute("ALTER TABLE processes DROP COLUMN host")
    con.execute("UPDATE meta SET value = 'older-host' WHERE key = 'host'")
    con.commit()
    con.close()
    assert h.probing("merge", r1, older, "-o", f"{d}/mixed.db").returncode == 0
    con = h.db(f"{d}/mixed.db")
    hosts = con.execute("SELECT DISTINCT host FROM processes ORDER BY host = 'older-host'")
    assert [r[0] for r in hosts] == [os.uname().nodename, "older-host"]
    con.close()
    # Names that mean something in a SQLite URI are plain names.
    odd = f"{d}/r 1?mode=rw#%41.db"
    shutil.copy(r1, odd)
    p = h.probing("merge", odd, r2, "-o", out)
    assert p.returncode == 0, p.stderr
    assert sum(counter(folded(out)).values()) == \
        sum(counter(folded(r1)).values()) + sum(counter(folded(r2)).values())
