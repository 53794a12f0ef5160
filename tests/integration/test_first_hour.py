"""The first hour of a new user (issue 20): the habits users bring from py-spy, the messages
that must lead to the right command, the examples that must run.

Each test runs real workloads (tests/workloads/) and checks what probing prints and writes
against what the workload is known to do.
"""
import gzip
import json
import os
import pty
import subprocess

import harness as h
import recordings

THREADS_PY = os.path.join(h.PY_WORKLOADS, "python", "threads.py")


def start_threads(seconds=30):
    """tests/workloads/python/threads.py running, its three named threads announced."""
    p = h.spawn(["/usr/bin/python3", THREADS_PY, str(seconds)], stdout=subprocess.PIPE)
    for _ in range(3):
        p.stdout.readline()
    return p


def run_on_tty(args, timeout=60):
    """Run probing ARGS with stdout on a pseudo-terminal; return (status, stdout, stderr)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.run([h.PROBING, *args], stdout=slave, stderr=subprocess.PIPE,
                           timeout=timeout, text=True)
    finally:
        os.close(slave)
    out = b""
    os.set_blocking(master, False)
    try:
        while True:
            chunk = os.read(master, 65536)
            if not chunk:
                break
            out += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(master)
    h.log(f"$ probing {' '.join(args)} (stdout a terminal) -> {p.returncode}\n{p.stderr}")
    return p.returncode, out.decode(errors="replace"), p.stderr


# ---- item 1: record -o x.svg ----------------------------------------------------------------
def test_record_output_named_svg_is_a_flame_graph():
    """py-spy's 'record -o x.svg': an SVG flame graph of the workload's threads, the
    recording kept beside it as x.db and named on stderr with the command that redraws it."""
    target = start_threads()
    svg, rec = h.tmp("x.svg"), h.tmp("x.db")
    p = h.probing("record", "-p", target.pid, "-d", "2", "-F", "199", "-o", svg)
    assert p.returncode == 0, p.stderr
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    assert text.lstrip().startswith("<?xml") or text.lstrip().startswith("<svg"), text[:200]
    for func in ("alpha_work", "beta_work", "gamma_work"):
        assert func in text, f"{func} not in the flame graph"
    con = h.db(rec)
    assert h.total_samples(con, pid=target.pid) > 0
    assert f"probing flamegraph -i {rec} -o {svg}" in p.stderr, p.stderr


@h.params([(".folded", "folded"), (".pb.gz", "pprof"), (".json", "speedscope")],
          ids=["folded", "pprof", "speedscope"])
def test_record_output_named_for_a_format(case):
    """.folded, .pb.gz and .json outputs get folded stacks, pprof and speedscope."""
    ext, kind = case
    target = start_threads()
    out, rec = h.tmp("y" + ext), h.tmp("y.db")
    p = h.probing("record", "-p", target.pid, "-d", "1.5", "-F", "199", "-o", out)
    assert p.returncode == 0, p.stderr
    assert os.path.exists(rec), "the recording is not kept beside the output"
    data = open(out, "rb").read()
    if kind == "folded":
        lines = data.decode().splitlines()
        assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
        assert any("alpha_work" in line for line in lines)
    elif kind == "pprof":
        raw = gzip.decompress(data)
        assert b"alpha_work" in raw
    else:
        doc = json.loads(data)
        assert "speedscope" in doc["$schema"]
        assert any(f["name"].startswith("alpha_work") for f in doc["shared"]["frames"])


def test_record_output_refuses_to_replace_the_recording_beside_it():
    """-o x.svg with an x.db already there: refused before recording, x.db untouched, and the
    message gives the two commands to run instead."""
    target = start_threads()
    rec = h.tmp("x.db")
    with open(rec, "wb") as f:
        f.write(b"precious")
    p = h.probing("record", "-p", target.pid, "-d", "1", "-o", h.tmp("x.svg"))
    assert p.returncode == 2, p.stderr
    assert open(rec, "rb").read() == b"precious"
    assert not os.path.exists(h.tmp("x.svg"))
    assert f"probing flamegraph -i NEW.db -o {h.tmp('x.svg')}" in p.stderr, p.stderr


def test_flamegraph_refuses_svg_on_a_terminal():
    """flamegraph without -o and stdout a terminal: refused as export refuses binary output;
    --folded (text) still prints there, and a pipe still gets the SVG."""
    db = recordings.make_db()
    rc, out, err = run_on_tty(["flamegraph", "-i", db])
    assert rc == 2, (rc, err)
    assert "<svg" not in out and "-o FILE.svg" in err, err
    rc, out, err = run_on_tty(["flamegraph", "-i", db, "--folded"])
    assert rc == 0 and "deflate" in out, err
    p = h.probing("flamegraph", "-i", db)
    assert p.returncode == 0 and "<svg" in p.stdout


# ---- a 2-rank job (items 4, 6, 7) -----------------------------------------------------------
TORCHRUN = "/usr/bin/torchrun"
DDP_JOB = os.path.join(h.PY_WORKLOADS, "torch", "ddp_job.py")


def marked_line(path, tag):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# @" + tag):
                return i
    raise AssertionError("no line marked @" + tag)


class Job:
    """torchrun --nproc_per_node NRANKS ddp_job.py, its ranks ready (READY RANK PID)."""

    def __init__(self, nranks, *args):
        import re
        self.hang_file = h.tmp("hang")
        out_path = h.tmp("job.out")
        self.proc = h.spawn([TORCHRUN, "--nproc_per_node", str(nranks), "--redirects", "1",
                             "--tee", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                             "127.0.0.1:0", DDP_JOB, "--hang-file", self.hang_file,
                             *map(str, args)],
                            stdout=open(out_path, "w"), stderr=subprocess.STDOUT,
                            env={"OMP_NUM_THREADS": "1"})
        self.pid = self.proc.pid

        def ready():
            text = open(out_path).read()
            if self.proc.poll() is not None:
                raise AssertionError("torchrun exited: " + text[-2000:])
            ranks = {int(r): int(p) for r, p in re.findall(r"READY (\d+) (\d+)", text)}
            return ranks if len(ranks) == nranks else None

        self.ranks = h.wait_for(ready, timeout=120, interval=0.2, what="every rank READY")


@h.timeout(240)
def test_two_rank_job_says_which_rank_is_where():
    """Two ranks, rank 1 hung at a known line, rank 0 waiting in backward for it: no rank is
    'the odd one out' with two, so the view says where each rank's main thread is, and the
    main threads' groups come first, before the idle gloo/TCPStore threads."""
    if not os.path.exists(TORCHRUN):
        raise h.Skip("torchrun (python3-torch) is not installed")
    job = Job(2, "--hang-rank", "1")
    hang = marked_line(DDP_JOB, "hang")
    open(job.hang_file, "w").close()
    r0, r1 = job.ranks[0], job.ranks[1]

    def settled():
        r = h.probing("backtrace", "-p", job.pid, "--children")
        ok = r.returncode == 0 and f"hang_here (ddp_job.py:{hang})" in r.stdout and \
            "backward (" in r.stdout.split("\n\n")[0]
        return r.stdout if ok else None

    text = h.wait_for(settled, timeout=60, interval=0.5, what="rank 1 hung, rank 0 waiting")
    head = text.split("\n\n")[0].splitlines()
    assert "odd one out" not in text, text[:600]
    assert head[1] == "The ranks' main threads are in 2 different places:", head
    places = {line.split(":")[0].strip(): line for line in head[2:4]}
    assert f"hang_here (ddp_job.py:{hang}), sleeping in clock_nanosleep (sleep)" in \
        places[f"rank 1 (pid {r1})"], head
    assert "backward (__init__.py:" in places[f"rank 0 (pid {r0})"], head
    # The first two groups are the main threads, each rank's own.
    groups = [b for b in text.split("\n\n")[1:] if b.startswith("[")]
    assert groups[0].startswith(f'[1] 1 thread: "MainThread" of rank 0 (pid {r0})') or \
        groups[0].startswith(f'[1] 1 thread: "MainThread" of rank 1 (pid {r1})'), groups[0]
    assert groups[1].startswith('[2] 1 thread: "MainThread" of rank'), groups[1]

    # README's example: eval on every rank under the launcher. The launcher (torchrun, no
    # torch in its __main__) fails: reported, not fatal; each rank answers its rank.
    r = h.probing("eval", "-p", job.pid, "--children", "torch.distributed.get_rank()")
    assert r.returncode == 0, r.stderr
    assert f"==> rank 0 (pid {r0}) <==\n0\n" in r.stdout, r.stdout
    assert f"==> rank 1 (pid {r1}) <==\n1\n" in r.stdout, r.stdout
    assert f"pid {job.pid}, not a rank" in r.stderr, r.stderr
    # A rank that fails still fails the command.
    r = h.probing("eval", "-p", job.pid, "--children", "undefined_name_here")
    assert r.returncode == 1 and f"rank 0 (pid {r0}): failed" in r.stderr, r.stderr

    # python.torch_trace without the hooks: the command that installs them, with the pid
    # (the agent is loaded by the eval above, the torch helper is not installed).
    r = h.probing("query", "-p", r0, "SELECT * FROM python.torch_trace")
    assert r.returncode != 0 and f"'probing inject -p {r0} --torch'" in r.stderr, r.stderr


# ---- item 4: README examples that were wrong; item 6: messages ------------------------------
def start_sleeper():
    p = h.spawn(["/usr/bin/python3", "-c",
                 "import threading, time\n"
                 "class Worker(threading.Thread):\n"
                 "    def run(self):\n"
                 "        while True: time.sleep(0.05)\n"
                 "Worker(daemon=True, name='worker').start()\n"
                 "print('ready', flush=True)\n"
                 "while True: time.sleep(0.05)\n"], stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"ready"
    return p


def test_eval_readme_examples_and_print():
    """README's 'import gc; len(gc.get_objects())' in a fresh process prints a count (the
    statements run, the expression last gives its value); 'print(1+1)' from stdin prints 2
    and no None; a bare None still prints None."""
    t = start_sleeper()
    r = h.probing("eval", "-p", t.pid, "import gc; len(gc.get_objects())")
    assert r.returncode == 0 and int(r.stdout) > 1000, (r.stdout, r.stderr)
    r = h.probing("eval", "-p", t.pid, "-", input="print(1+1)\n")
    assert r.returncode == 0 and r.stdout == "2\n", repr(r.stdout)
    r = h.probing("eval", "-p", t.pid, "None")
    assert r.stdout == "None\n", repr(r.stdout)
    r = h.probing("eval", "-p", t.pid, "x = 20\nx + 22")
    assert r.stdout == "42\n", repr(r.stdout)


def test_torch_trace_without_agent_names_inject_torch():
    t = start_sleeper()
    r = h.probing("query", "-p", t.pid, "SELECT * FROM python.torch_trace")
    assert r.returncode != 0, r.stdout
    assert f"run 'probing inject -p {t.pid} --torch' first" in r.stderr, r.stderr


def test_export_pid_options_explained():
    """export: -p is a live process, --pid a filter of a recording's samples; each misuse
    says which is which, with the command to run."""
    db = recordings.make_db()
    r = h.probing("export", "-i", db, "--format", "pprof", "-p", "100", "-o", h.tmp("a.pb.gz"))
    assert r.returncode == 2, r.stderr
    assert f"'probing export -i {db} --format pprof --pid 100 -o {h.tmp('a.pb.gz')}'" in \
        r.stderr, r.stderr
    r = h.probing("export", "--format", "chrome", "--pid", "100", "-o", h.tmp("a.json"))
    assert r.returncode == 2 and "'probing export -p 100 --format chrome -o OUT'" in r.stderr, \
        r.stderr
    r = h.probing("export", "--help")
    assert "-p, which reads a live process" in r.stdout


@h.params(["outside", "agent"])
def test_python_backtrace_has_the_qualname_backtrace_shows(how):
    """python.backtrace's qualname is what 'backtrace' prints (Worker.run, not run), read
    from outside or served by the agent."""
    t = start_sleeper()
    if how == "agent":
        assert h.probing("inject", "-p", t.pid).returncode == 0
    r = h.probing("query", "-p", t.pid, "--format", "json",
                  "SELECT thread, depth, func, qualname FROM python.backtrace "
                  "WHERE thread = 'worker' AND depth = 0")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows == [{"thread": "worker", "depth": 0, "func": "run",
                     "qualname": "Worker.run"}], rows
    bt = h.probing("backtrace", "-p", t.pid)
    assert "Worker.run (" in bt.stdout, bt.stdout


# ---- item 5: backtrace of a shell whose child is Python -------------------------------------
def test_backtrace_of_a_wrapper_shell_names_its_python_child():
    """A wrapper shell (bash running python3 as a child, as a launch script or a pyenv shim
    without exec does): backtrace -p SHELL shows the shell's native stacks and says which
    child is the Python process, with the command for it; not 'use --native'."""
    script = h.tmp("wrapped.py")
    with open(script, "w") as f:
        f.write("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    shell = h.spawn(["/bin/bash", "-c", f"/usr/bin/python3 {script}; echo done"],
                    stdout=subprocess.PIPE)
    assert shell.stdout.readline().strip() == b"ready"
    child = int(open(f"/proc/{shell.pid}/task/{shell.pid}/children").read().split()[0])
    r = h.probing("backtrace", "-p", shell.pid)
    assert r.returncode == 0, r.stderr
    assert f"Process {shell.pid}: /bin/bash" in r.stdout
    assert f"its child {child} (/usr/bin/python3 {script}): probing backtrace -p {child}" in \
        r.stderr, r.stderr
    assert "use --native" not in r.stderr, r.stderr
    # The child, as the note says: its Python stack.
    r = h.probing("backtrace", "-p", child)
    assert r.returncode == 0 and "<module> (" in r.stdout, r.stdout


# ---- item 8: crash files lead with the crash ------------------------------------------------
CRASH_TARGET = os.path.join(h.PY_WORKLOADS, "live", "crash_target.py")


def crash_file(mode):
    """Run crash_target.py MODE under 'probing run --crash'; return the crash file."""
    import resource
    out = h.tmp(f"crash-{mode}.db")
    p = h.spawn([h.PROBING, "run", f"--crash={out}", "--", "/usr/bin/python3", CRASH_TARGET,
                 mode], cwd=h.tmp(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    p.communicate(timeout=60)
    assert os.path.exists(out), "no crash file"
    return out


def test_crash_file_leads_with_the_crashed_thread():
    """A worker thread's uncaught exception: backtrace -i shows that thread first, marked with
    the exception and the function it was raised in, before MainThread and sleeper-1; with
    --locals, the variables the file holds. A SIGSEGV: its signal, code and faulting frame
    instead of the handler's '(sleeping) ... holds the GIL'."""
    db = crash_file("thread_exc")
    r = h.probing("backtrace", "-i", db)
    assert r.returncode == 0, r.stderr
    threads = [line for line in r.stdout.splitlines() if line.startswith("Thread ")]
    assert threads[0].endswith('"worker-1" crashed: uncaught ValueError: bad batch 7 in '
                               'fail_batch  <-- the crash'), threads
    assert "MainThread" in threads[1] and "crashed" not in "".join(threads[1:]), threads
    r = h.probing("backtrace", "-i", db, "--locals")
    assert r.returncode == 0, r.stderr
    block = r.stdout.split("\n\n")[1]
    assert "fail_batch (" in block and "        batch = 7\n" in block and \
        "        items = [7, 7, 7]\n" in block, block

    db = crash_file("segv")
    r = h.probing("backtrace", "-i", db)
    first = [line for line in r.stdout.splitlines() if line.startswith("Thread ")][0]
    assert '"MainThread" crashed: SIGSEGV (code 1, address 0x0) in ' in first, first
    assert "strlen" in first and "sleeping" not in first and "GIL" not in first, first
    r = h.probing("backtrace", "-i", db, "--locals")
    assert r.returncode == 0 and "        secret = 4242\n" in r.stdout, r.stdout


def test_backtrace_snapshot_locals_refused_with_the_reason():
    t = start_sleeper()
    snap = h.tmp("snap.db")
    assert h.probing("backtrace", "-p", t.pid, "-o", snap).returncode == 0
    r = h.probing("backtrace", "-i", snap, "--locals")
    assert r.returncode == 1 and "keeps no local variables" in r.stderr, r.stderr
    assert f"'probing backtrace -p PID --locals'" in r.stderr


# ---- item 12: after make demo ----------------------------------------------------------------
@h.timeout(180)
def test_demo_says_what_next_and_explains_frames_without_symbols():
    """scripts/demo.sh (make demo): where the binary is, how to install it, three commands
    to run next on its recording; and every library whose code without symbols ends samples
    of the recording (the ground truth: the recording's own leaf frames) is named, with the
    way to get its debug symbols."""
    out_dir = h.tmp()
    r = h.run([os.path.join(h.ROOT, "scripts", "demo.sh")], timeout=150,
              env={"DEMO_SECONDS": "2", "DEMO_DIR": out_dir})
    assert r.returncode == 0, r.stderr
    db = os.path.join(out_dir, "demo.db")
    assert os.path.exists(os.path.join(out_dir, "demo.svg"))
    text = r.stdout
    assert f"the binary is {h.PROBING}" in text, text
    assert "sudo make install" in text
    nxt = text[text.index("\nNext:\n"):].splitlines()[2:5]
    assert [line.split()[1] for line in nxt] == ["serve", "flamegraph", "backtrace"], nxt
    assert f"serve -i {db}" in nxt[0] and f"flamegraph -i {db}" in nxt[1], nxt
    con = h.db(db)
    stripped = {f for (f,) in con.execute(
        "SELECT DISTINCT func FROM frames WHERE kind = 'native' AND depth = 0 "
        "AND func LIKE '[%]' AND func <> '[unknown]' "
        "AND stack_id IN (SELECT stack_id FROM samples)")}
    named = {line.split(":")[0].strip() for line in text.splitlines()
             if "% of the samples end there" in line}
    assert named == stripped, (named, stripped)
    if stripped:
        assert "native code without symbols" in text and "-dbgsym" in text and \
            "DEBUGINFOD_URLS=" in text, text


# ---- item 3: py-spy's --nolineno, --threads, --idle ------------------------------------------
def test_flamegraph_no_lines_merges_a_functions_lines():
    """--no-lines (py-spy's --nolineno): one frame per Python function, the counts of its
    lines summed; native frames untouched; the help names the py-spy options' equivalents."""
    db = recordings.make_db("@process 100 python app.py\n@pid 100 100 MainThread\n"
                            "main (/app/a.py:3);work (/app/a.py:10) 5\n"
                            "main (/app/a.py:3);work (/app/a.py:12) 7\n"
                            "main (/app/a.py:3);work (/app/a.py:12);memcpy 2\n")
    p = h.probing("flamegraph", "-i", db, "--folded", "--no-lines")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["main (/app/a.py);work (/app/a.py) 12",
                                     "main (/app/a.py);work (/app/a.py);memcpy 2"], p.stdout
    p = h.probing("flamegraph", "-i", db, "--no-lines")
    assert p.returncode == 0 and p.stdout.count(">work (/app/a.py)<") <= 1
    help_text = h.probing("flamegraph", "--help").stdout
    for needle in ("--nolineno is --no-lines", "--threads", "--tid N", "--idle",
                   "record --off-cpu"):
        assert needle in help_text, needle
