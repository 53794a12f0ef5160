"""probing inject: the ptrace injector and the agent, against real interpreters.

Every target does its own known work while it is injected and checks each result (sleeps
last their full time, reads return the exact bytes, no EINTR from calls made through ctypes,
a fixed computation ends with a known checksum); see tests/workloads/live/live_target.py.
"""
import glob
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import harness
from live_helpers import Target, expected_sum, maps_count, tracer_of, state_of, held_ms, \
    threads_of, held_by, runs_free

PY = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def _check_done(t, want_n=None):
    n, s = t.finish()
    assert n > 0, "target did no work"
    exp = expected_sum(t.mode, n)
    assert s == exp, "target %s checksum %s, expected %s" % (t.mode, s, exp)


@harness.params(harness.pythons(), ids=[label for label, _ in harness.pythons()])
@harness.timeout(120)
def test_inject_every_python(py):
    label, exe = py
    t = Target("sleep", seconds=1.5, token="tok-" + label, python=exe).wait_ready()
    p = harness.probing("-v", "inject", "-p", t.pid, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "agent: loaded into process %d" % t.pid in p.stdout, p.stdout
    ver = re.search(r"python\s+(3\.\d+)\.\d+", p.stdout)
    assert ver, p.stdout
    want = label.split("-")[-1]
    assert ver.group(1) == want, "agent reports Python %s, interpreter is %s" % (ver.group(1), want)
    assert maps_count(t.pid) == 1
    # The agent answers from inside: the script's global, the interpreter's own version.
    p = harness.probing("eval", "-p", t.pid, "TOKEN", timeout=30)
    assert p.returncode == 0 and p.stdout.strip() == repr("tok-" + label), p.stdout + p.stderr
    p = harness.probing("eval", "-p", t.pid, "__import__('sys').version_info[:2]", timeout=30)
    assert p.stdout.strip() == repr(tuple(int(x) for x in want.split("."))), p.stdout
    # Injecting again is a no-op that reports the running agent.
    p = harness.probing("inject", "-p", t.pid, timeout=30)
    assert p.returncode == 0 and "already running" in p.stdout, p.stdout + p.stderr
    assert maps_count(t.pid) == 1
    assert tracer_of(t.pid) == 0
    _check_done(t)


MODES = ["sleep", "read", "event", "busy", "c_nanosleep", "c_read", "c_poll", "c_epoll",
         "c_futex", "select", "poll", "event_timeout"]


def ended(t, wait=3.0):
    """Has target @t ended (waiting up to @wait s for an end already under way)?"""
    try:
        t.proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass
    return t.proc.poll() is not None


@harness.timeout(900)
def test_inject_eval_200_rounds():
    """200 fresh processes, each injected while blocked in its mode's system call (or busy),
    each asked for its token and counter; every target must finish its own work exactly.
    A target that ended its work (exactly) before a slow machine reached it is not a round:
    another takes its place."""
    pythons = [exe for _, exe in harness.pythons()]
    rng = random.Random(1234)
    rounds, batch = 200, 10
    held = []
    done = late = 0
    while done < rounds:
        assert late <= rounds // 2, "%d targets ended before they were reached" % late
        targets = []
        for i in range(min(batch, rounds - done)):
            mode = MODES[(done + i) % len(MODES)]
            exe = pythons[(done + i) % len(pythons)]
            tok = "t%d-%08x" % (done + i, rng.getrandbits(32))
            targets.append(Target(mode, seconds=2.5, token=tok, python=exe))
        for t in targets:
            t.wait_ready()
        reached = []
        for t in targets:
            if t.proc.poll() is not None:
                late += 1  # its work is checked below all the same
                continue
            p = harness.probing("-v", "eval", "-p", t.pid, "(TOKEN, MODE, counter >= 0)",
                                timeout=60)
            if p.returncode != 0 and ended(t):
                late += 1  # it ended while the eval ran: was its work exact?
                continue
            reached.append(t)
            assert p.returncode == 0, "round %s (%s): %s" % (t.token, t.mode, p.stderr)
            assert p.stdout.strip() == repr((t.token, t.mode, True)), p.stdout
            ms = held_ms(p.stderr)
            assert ms is not None, p.stderr
            held.append(ms)
            # A second question to the same agent: no injection this time.
            p = harness.probing("eval", "-p", t.pid, "len(TOKEN)", timeout=60)
            assert p.stdout.strip() == str(len(t.token)) or \
                (p.returncode != 0 and ended(t)), p.stdout + p.stderr
        for t in targets:
            _check_done(t)
        done += len(reached)
    harness.log("%d targets ended before they were reached" % late)
    held.sort()
    harness.log("thread held stopped: median %.2f ms, max %.2f ms over %d injections" % (
        held[len(held) // 2], held[-1], len(held)))
    assert held[len(held) // 2] < 5.0, "median stop %.2f ms" % held[len(held) // 2]


def test_inject_dead_pid():
    p = harness.probing("inject", "-p", 999999)
    assert p.returncode == 1
    assert "no such process: 999999" in p.stderr


def test_inject_bad_usage():
    p = harness.probing("inject")
    assert p.returncode == 2 and "-p PID" in p.stderr
    p = harness.probing("inject", "-p", "abc")
    assert p.returncode == 2
    p = harness.probing("inject", "--help")
    assert p.returncode == 0 and "Usage: probing inject" in p.stdout and "Examples" in p.stdout


def test_inject_non_python():
    p = harness.spawn(["sleep", "30"])
    time.sleep(0.1)
    r = harness.probing("inject", "-p", p.pid)
    assert r.returncode == 1
    assert "not a Python process" in r.stderr, r.stderr
    assert maps_count(p.pid) == 0
    assert state_of(p.pid) == "S"


def test_inject_agent_missing():
    t = Target("sleep", seconds=1).wait_ready()
    p = harness.probing("inject", "-p", t.pid, env={"PROBING_AGENT": "/nonexistent/agent.so"})
    assert p.returncode == 1 and "PROBING_AGENT" in p.stderr and "missing" in p.stderr
    # A probing binary without the library next to it.
    d = harness.tmp("bin")
    os.makedirs(d)
    shutil.copy(harness.PROBING, d)
    p = harness.run([os.path.join(d, "probing"), "inject", "-p", str(t.pid)])
    assert p.returncode == 1 and "not found next to" in p.stderr, p.stderr
    assert maps_count(t.pid) == 0
    _check_done(t)


def test_inject_stopped_or_traced_target():
    t = Target("sleep", seconds=2).wait_ready()
    os.kill(t.pid, signal.SIGSTOP)
    harness.wait_for(lambda: state_of(t.pid) == "T", what="stopped")
    p = harness.probing("inject", "-p", t.pid)
    assert p.returncode == 1 and "is stopped" in p.stderr, p.stderr
    assert state_of(t.pid) == "T"  # left as it was
    os.kill(t.pid, signal.SIGCONT)
    # Another tracer (gdb) attached: refused with its name.
    g = harness.spawn(["gdb", "-q", "-nx", "-batch", "-p", str(t.pid), "-ex", "shell sleep 2"],
                      stdin=subprocess.DEVNULL)
    harness.wait_for(lambda: tracer_of(t.pid) != 0, timeout=20, what="gdb attached")
    p = harness.probing("inject", "-p", t.pid)
    assert p.returncode == 1 and "already traced by process" in p.stderr, p.stderr
    g.wait(timeout=30)
    harness.wait_for(lambda: tracer_of(t.pid) == 0, what="gdb detached")
    _check_done(t)


def test_inject_other_user_denied():
    """A second user can neither inject into root's process nor talk to its agent."""
    t = Target("sleep", seconds=3).wait_ready()
    p = harness.run(NOBODY + [harness.PROBING, "inject", "-p", str(t.pid)])
    assert p.returncode == 1, p.stdout + p.stderr
    assert "permission denied" in p.stderr and "uid 0" in p.stderr, p.stderr
    assert maps_count(t.pid) == 0
    # Now the agent runs (root injected it); nobody connects to its socket directly.
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    code = ("import socket,struct,sys;s=socket.socket(socket.AF_UNIX);"
            "s.connect('\\0probing-%d');p=b'eval\\0{\"code\": \"TOKEN\"}';"
            "s.sendall(struct.pack('<I',len(p)+1)+b'Q'+p);d=b''\n"
            "while True:\n c=s.recv(4096)\n if not c: break\n d+=c\n"
            "sys.stdout.write(repr(d))" % t.pid)
    p = harness.run(NOBODY + [PY, "-c", code])
    assert "permission denied" in p.stdout and "tok" not in p.stdout.replace("probing", ""), \
        p.stdout + p.stderr
    p = harness.run(NOBODY + [harness.PROBING, "eval", "-p", str(t.pid), "TOKEN"])
    assert p.returncode == 1 and "permission denied" in p.stderr, p.stderr
    _check_done(t)


def test_inject_mount_namespace():
    """The target sees another filesystem at the agent's path (a tmpfs over its directory in
    its own mount namespace): the agent is copied into its /dev/shm, loaded, and removed."""
    d = harness.tmp("hidden")
    os.makedirs(d)
    shutil.copy(harness.PROBING, d)
    shutil.copy(harness.AGENT, d)
    before = set(glob.glob("/dev/shm/libprobing-agent-*") + glob.glob("/tmp/libprobing-agent-*"))
    t = Target("c_nanosleep", seconds=1.5,
               wrapper=["unshare", "-m", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs tmpfs "$0" && exec "$@"', d]).wait_ready()
    # The target really cannot see the library.
    assert not os.path.exists("/proc/%d/root%s/libprobing-agent.so" % (t.pid, d))
    p = harness.run([os.path.join(d, "probing"), "-v", "inject", "-p", str(t.pid)])
    assert p.returncode == 0, p.stderr
    assert "library copied" in p.stdout, p.stdout
    with open("/proc/%d/maps" % t.pid) as f:
        maps = f.read()
    assert re.search(r"/dev/shm/libprobing-agent-\S+\.so \(deleted\)", maps), maps
    after = set(glob.glob("/dev/shm/libprobing-agent-*") + glob.glob("/tmp/libprobing-agent-*"))
    assert after == before, "copies left behind: %s" % (after - before)
    p = harness.run([os.path.join(d, "probing"), "eval", "-p", str(t.pid), "TOKEN"])
    assert p.stdout.strip() == "'tok'", p.stdout + p.stderr
    _check_done(t)


def test_inject_pid_namespaces():
    """Two targets that are both pid 1 in their own pid namespace, in our network namespace:
    each gets its own agent (the second socket name gets a random part), and probing
    always talks to the process it was given (the socket's peer pid is checked)."""
    a = Target("sleep", seconds=3, token="first",
               wrapper=["unshare", "-p", "-f", "--mount-proc"]).wait_ready()
    b = Target("sleep", seconds=3, token="second",
               wrapper=["unshare", "-p", "-f", "--mount-proc"]).wait_ready()
    for t in (a, b):
        assert re.search(r"NSpid:\s+%d\s+1$" % t.pid, open("/proc/%d/status" % t.pid).read(),
                         re.M), "not pid 1 in its namespace"
    for t in (a, b, a, b):
        p = harness.probing("eval", "-p", t.pid, "TOKEN")
        assert p.returncode == 0 and p.stdout.strip() == repr(t.token), p.stdout + p.stderr
    p = harness.probing("list")
    listed = [int(line.split()[0]) for line in p.stdout.splitlines()[1:]]
    assert a.pid in listed and b.pid in listed and 1 not in listed, p.stdout
    _check_done(a)
    _check_done(b)


def test_inject_network_namespace():
    """A target with its own network namespace (a container): its abstract socket lives
    there, and probing enters that namespace to reach it."""
    t = Target("c_poll", seconds=2, token="netns", wrapper=["unshare", "-n"]).wait_ready()
    assert os.readlink("/proc/%d/ns/net" % t.pid) != os.readlink("/proc/self/ns/net")
    p = harness.probing("eval", "-p", t.pid, "TOKEN")
    assert p.returncode == 0 and p.stdout.strip() == "'netns'", p.stdout + p.stderr
    with open("/proc/net/unix") as f:
        assert "@probing-%d" % t.pid not in f.read()  # not in our namespace
    with open("/proc/%d/net/unix" % t.pid) as f:
        assert "@probing-%d" % t.pid in f.read()
    _check_done(t)


@harness.timeout(240)
def test_inject_process_exits_mid_inject():
    """Targets that exit at a random moment around the injection: probing reports it and
    never hangs; nothing is left behind."""
    rng = random.Random(7)
    outcomes = {0: 0, 1: 0}
    for i in range(25):
        delay = rng.uniform(0.0, 0.06)
        p = harness.spawn([PY, "-c", "import time; time.sleep(%f)" % (0.05 + delay)])
        time.sleep(0.05)
        r = harness.probing("inject", "-p", p.pid, timeout=30)
        assert r.returncode in (0, 1), r.stderr
        if r.returncode == 1:
            assert re.search(r"exited|no such process|not initialized|zombie|closed",
                             r.stderr), r.stderr
        outcomes[r.returncode] += 1
        p.wait(timeout=10)
        assert p.returncode == 0, "target died with %s" % p.returncode
    harness.log("exits mid-inject: %s" % outcomes)


@harness.timeout(240)
def test_inject_survives_probing_killed():
    """SIGINT/SIGTERM to probing at random moments of the injection: the target is never
    left stopped or traced, and finishes its work."""
    rng = random.Random(11)
    for i in range(16):
        t = Target(["c_nanosleep", "c_read", "sleep", "busy"][i % 4], seconds=0.8).wait_ready()
        p = subprocess.Popen([harness.PROBING, "inject", "-p", str(t.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, 0.008))
        p.send_signal(signal.SIGINT if i % 2 else signal.SIGTERM)
        p.wait(timeout=20)
        # Whatever happened, the target runs free: none of its threads traced or stopped.
        harness.wait_for(lambda: runs_free(t.pid), timeout=5, what="no thread traced")
        _check_done(t)


def test_inject_signal_inside_critical_section():
    """SIGTERM/SIGINT/SIGHUP arrive while a target thread is held (the injector is made to
    pause there): probing finishes or rolls back first, lets the thread go, then dies."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # Long enough that a slow machine still finds it running when probing gets there.
        t = Target("c_read", seconds=3).wait_ready()
        p = subprocess.Popen([harness.PROBING, "inject", "-p", str(t.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, PROBING_INJECT_DELAY_MS="400"))
        # The thread held is the main one or the writer, whichever was at a safe point: traced
        # by probing, and stopped (traced and still running for a moment before, once in CI).
        def held():
            tid = held_by(t.pid, p.pid)
            return tid if tid and threads_of(t.pid).get(tid, (0, ""))[1] == "t" else None
        end = time.monotonic() + 10
        while not held() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.01)
        tid = held()
        assert tid, "no thread held: probing %s, target %s, its threads %s; %s" % (
            p.poll(), t.proc.poll(), threads_of(t.pid),
            p.stderr.read() if p.poll() is not None else "")
        p.send_signal(sig)
        p.wait(timeout=20)
        assert p.returncode == -sig, "probing exit %s" % p.returncode
        harness.wait_for(lambda: runs_free(t.pid), timeout=5, what="no thread traced")
        _check_done(t)


def test_inject_forked_child_restarts_agent():
    """A child forked after the injection has the library but no agent thread; probing
    starts it there (and the parent's agent is untouched)."""
    t = Target("sleep", seconds=4).wait_ready()
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    p = harness.probing("eval", "-p", t.pid,
                        "import os, time\n"
                        "child = os.fork()\n"
                        "if child == 0:\n"
                        "    time.sleep(3); os._exit(0)\n"
                        "print(child)")
    assert p.returncode == 0, p.stderr
    child = int(p.stdout.strip())
    assert maps_count(child) == 1
    p = harness.probing("inject", "-p", child)
    assert p.returncode == 0 and "started in process %d" % child in p.stdout, p.stdout + p.stderr
    p = harness.probing("eval", "-p", child, "__import__('os').getpid()")
    assert p.stdout.strip() == str(child), p.stdout + p.stderr
    p = harness.probing("eval", "-p", t.pid, "__import__('os').getpid()")
    assert p.stdout.strip() == str(t.pid), p.stdout + p.stderr
    harness.probing("eval", "-p", t.pid, "os.waitpid(child, 0)")
    _check_done(t)


@harness.timeout(90)
def test_requests_wait_for_an_interpreter_starting_up():
    """Injected before Py_Initialize (a C program embedding Python, held at a gate): a request
    waits a moment for the interpreter instead of failing at once; with none coming it ends
    with a clear error after about 2 s, and the target goes on to start Python unharmed."""
    exe = harness.workload("py_embed_linked")
    script = harness.tmp("embed_gate.py")
    with open(script, "w") as f:
        f.write("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    p = harness.spawn([exe, script], env={"PROBING_EMBED_GATE": "1"}, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "gate\n"
    r = harness.probing("inject", "-p", p.pid)
    assert r.returncode == 0 and "not initialized yet" in r.stdout, r.stdout + r.stderr
    # Nothing starts the interpreter: a clear error once the bounded wait is over.
    t0 = time.monotonic()
    r = harness.probing("eval", "-p", p.pid, "6 * 7")
    took = time.monotonic() - t0
    assert r.returncode != 0 and "not initialized (yet)" in r.stderr, r.stdout + r.stderr
    assert 1.5 <= took < 10, took
    # The interpreter starts while a request waits: that request gets its answer.
    e = subprocess.Popen([harness.PROBING, "eval", "-p", str(p.pid), "6 * 7"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    p.stdin.write("go\n")
    p.stdin.flush()
    out, err = e.communicate(timeout=30)
    assert e.returncode == 0 and out.strip() == "42", out + err
    assert p.stdout.readline() == "started\n"
    r = harness.probing("query", "-p", p.pid, "--format", "csv", "--no-header",
                        "SELECT COUNT(*) > 0 FROM python.backtrace")
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stdout + r.stderr
    assert p.poll() is None and tracer_of(p.pid) == 0


def test_run_preloads_agent():
    """probing run: the agent serves from the start, without ptrace; a shell in between is
    left alone and the Python it starts gets the agent."""
    out = open(harness.tmp("run.out"), "w")
    p = harness.spawn([harness.PROBING, "run", "--", "sh", "-c",
                       "exec %s %s sleep 1.5 runtok" % (PY, os.path.join(
                           harness.PY_WORKLOADS, "live", "live_target.py"))], stdout=out)
    harness.wait_for(lambda: "READY" in open(harness.tmp("run.out")).read(), what="READY")
    pid = int(re.search(r"READY (\d+)", open(harness.tmp("run.out")).read()).group(1))
    r = harness.probing("eval", "--no-inject", "-p", pid, "TOKEN")
    assert r.returncode == 0 and r.stdout.strip() == "'runtok'", r.stdout + r.stderr
    assert tracer_of(pid) == 0
    # A shell under probing run has the library but does not serve.
    s = harness.spawn([harness.PROBING, "run", "--", "sh", "-c", "sleep 2; true"])
    time.sleep(0.3)
    assert maps_count(s.pid) == 1  # preloaded...
    r = harness.probing("eval", "--no-inject", "-p", s.pid, "1")
    assert r.returncode == 1 and "not loaded" in r.stderr, r.stderr
    p.wait(timeout=20)
    assert "RESULT ok" in open(harness.tmp("run.out")).read()
    r = harness.probing("run")
    assert r.returncode == 2
    # --listen: the agent serves TCP from the start; the token is printed on stderr.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    err = open(harness.tmp("runl.err"), "w")
    out = open(harness.tmp("runl.out"), "w")
    harness.spawn([harness.PROBING, "run", "--listen", "127.0.0.1:%d" % port, "--", PY,
                   os.path.join(harness.PY_WORKLOADS, "live", "live_target.py"), "sleep", "2",
                   "tcprun"],
                  stdout=out, stderr=err)
    harness.wait_for(lambda: "READY" in open(harness.tmp("runl.out")).read(), what="READY")
    token = re.search(r"PROBING_TOKEN=([0-9a-f]{32})", open(harness.tmp("runl.err")).read())
    assert token, open(harness.tmp("runl.err")).read()
    r = harness.probing("-t", "127.0.0.1:%d" % port, "eval", "TOKEN",
                        env={"PROBING_TOKEN": token.group(1)})
    assert r.returncode == 0 and r.stdout.strip() == "'tcprun'", r.stdout + r.stderr


def test_listen_tcp_with_token():
    t = Target("sleep", seconds=3, token="tcptok").wait_ready()
    p = harness.probing("inject", "-p", t.pid, "--listen", "127.0.0.1:0")
    assert p.returncode == 0, p.stderr
    m = re.search(r"tcp\s+127\.0\.0\.1:(\d+)\s+token ([0-9a-f]{32})", p.stdout)
    assert m, p.stdout
    port, token = m.group(1), m.group(2)
    r = harness.probing("-t", "127.0.0.1:" + port, "eval", "TOKEN", env={"PROBING_TOKEN": token})
    assert r.returncode == 0 and r.stdout.strip() == "'tcptok'", r.stdout + r.stderr
    r = harness.probing("-t", "127.0.0.1:" + port, "eval", "TOKEN",
                        env={"PROBING_TOKEN": "0" * 32})
    assert r.returncode == 1 and "refused the token" in r.stderr, r.stderr
    # A raw client that skips authentication gets nothing.
    s = socket.create_connection(("127.0.0.1", int(port)))
    body = b"eval\0{\"code\": \"TOKEN\"}"
    s.sendall(struct.pack("<I", len(body) + 1) + b"Q" + body)
    data = b""
    while True:
        c = s.recv(4096)
        if not c:
            break
        data += c
    assert b"tcptok" not in data and b"authentication" in data, data
    # Asking again reports the same address and token.
    p = harness.probing("inject", "-p", t.pid, "--listen", "127.0.0.1:0")
    assert ("127.0.0.1:%s" % port) in p.stdout and token in p.stdout, p.stdout
    _check_done(t)
