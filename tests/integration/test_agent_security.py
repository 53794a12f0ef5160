"""The agent belongs to its owner: attacks on its sockets (docs/live.md, "Security model").

An unprivileged local user (nobody) floods the abstract Unix socket; TCP peers without the
token hold connections, send slowly, send huge frames, guess tokens. Through all of it the
owner (root here) must get in at once over the Unix socket, the target's memory must not
grow, and the token must stay where it belongs (not in the environment of the target's
children; retrievable by the owner). Every port is picked by the kernel (port 0).
"""
import os
import re
import socket
import struct
import time

import harness
from live_helpers import Target, maps_count

PY = "/usr/bin/python3"
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
AUTH_TIMEOUT = 2.0  # the agent's AUTH_TIMEOUT_S


def frame(kind, body=b"", ftype=b"Q"):
    payload = kind + b"\0" + body
    return struct.pack("<I", len(payload) + 1) + ftype + payload


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        c = s.recv(n - len(data))
        if not c:
            raise ConnectionError("closed after %d of %d bytes" % (len(data), n))
        data += c
    return data


def read_frame(s):
    hdr = recv_exact(s, 5)
    return hdr[4:5], recv_exact(s, struct.unpack("<I", hdr[:4])[0] - 1)


def read_all(s, timeout):
    """Everything S receives until the peer closes (or TIMEOUT passes: then None)."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            c = s.recv(4096)
            if not c:
                return data
            data += c
    except socket.timeout:
        return None
    except ConnectionResetError:
        return data


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def listen(t, addr="127.0.0.1:0"):
    """inject --listen ADDR into target T: (host, port, token)."""
    p = harness.probing("inject", "-p", t.pid, "--listen", addr)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"tcp\s+(\S+):(\d+)\s+token ([0-9a-f]{32})", p.stdout)
    assert m, p.stdout
    return m.group(1).strip("[]"), int(m.group(2)), m.group(3)


def timed_eval(t, limit):
    """The owner's 'probing eval -p PID TOKEN' must answer right within LIMIT seconds."""
    t0 = time.monotonic()
    p = harness.probing("eval", "-p", t.pid, "TOKEN", timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 0 and p.stdout.strip() == repr(t.token), p.stdout + p.stderr
    assert took < limit, "the owner's eval took %.2f s" % took
    return took


def auth(host, port, token, source=None):
    """A raw TCP client's first frame: ('R' or 'E', text)."""
    s = socket.create_connection((host, port), timeout=10,
                                 source_address=(source, 0) if source else None)
    try:
        s.sendall(frame(b"auth", token.encode()))
        t, data = read_frame(s)
        return t.decode(), data.decode(errors="replace")
    finally:
        s.close()


@harness.timeout(120)
def test_idle_tcp_connections_do_not_lock_out_owner():
    """64 TCP connections that never authenticate: the owner's eval still answers at once, a
    token holder still gets in, and the agent closes the idle ones after its deadline."""
    t = Target("sleep", seconds=30, token="idle").wait_ready()
    host, port, token = listen(t)
    base_fds = fd_count(t.pid)
    idle = [socket.create_connection((host, port)) for _ in range(64)]
    time.sleep(0.3)
    timed_eval(t, 3.0)
    r = harness.probing("-t", "%s:%d" % (host, port), "eval", "TOKEN",
                        env={"PROBING_TOKEN": token}, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "'idle'", r.stdout + r.stderr
    # The agent holds only a few of them, and those for at most its deadline.
    assert fd_count(t.pid) <= base_fds + 8 + 2, fd_count(t.pid) - base_fds
    t0 = time.monotonic()
    closed = [read_all(s, AUTH_TIMEOUT + 3) for s in idle[-4:]]
    assert all(c is not None for c in closed), "idle connections still open"
    assert time.monotonic() - t0 < AUTH_TIMEOUT + 3
    assert any(b"authentication timed out" in c for c in closed), closed
    for s in idle:
        s.close()
    harness.wait_for(lambda: fd_count(t.pid) <= base_fds, timeout=5, what="fds released")


ATTACKER = r"""
import socket, sys, time
name = "\0probing-" + sys.argv[1]
held = []
while True:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        s.connect(name)
        held.append(s)
    except OSError:
        s.close()
    if len(held) > 100:
        held.pop(0).close()
"""


@harness.timeout(120)
def test_other_user_flooding_unix_socket_does_not_lock_out_owner():
    """nobody connects to the agent's abstract socket in a loop from two processes, holding
    a hundred connections each: root's eval answers every time, promptly, and the target
    holds no more than a few of those connections."""
    t = Target("sleep", seconds=60, token="flood").wait_ready()
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    base_fds = fd_count(t.pid)
    attackers = [harness.spawn(NOBODY + [PY, "-c", ATTACKER, str(t.pid)]) for _ in range(2)]
    time.sleep(1.0)
    took = [timed_eval(t, 3.0) for _ in range(5)]
    harness.log("owner eval under the flood: %s s" % ["%.3f" % x for x in took])
    assert all(a.poll() is None for a in attackers), "the attackers stopped"
    assert fd_count(t.pid) <= base_fds + 8 + 2, fd_count(t.pid) - base_fds
    # The TCP side is not the way in either.
    p = harness.run(NOBODY + [harness.PROBING, "inject", "-p", str(t.pid), "--show-token"])
    assert p.returncode == 1 and "permission denied" in p.stderr, p.stdout + p.stderr


@harness.timeout(120)
def test_unauthenticated_and_authenticated_memory_bounded():
    """Before authentication only a token-sized frame is read: peers announcing 60 MiB frames
    are cut off at once, a slow sender at the deadline. After authentication, a client that
    piles data behind a running request is cut off once it passes one frame (its request
    interrupted). The target's RSS does not grow (it grew by ~500 MB before)."""
    t = Target("sleep", seconds=60, token="mem").wait_ready()
    host, port, token = listen(t)
    assert harness.probing("eval", "-p", t.pid, "1").returncode == 0  # helpers loaded
    before = rss_kb(t.pid)
    # The attacks come from 127.0.0.3 (all of 127/8 is loopback): their failures lock that
    # address out, not the token holder's.
    attacker = ("127.0.0.3", 0)
    for _ in range(8):
        s = socket.create_connection((host, port), source_address=attacker)
        s.settimeout(5)
        sent = 0
        try:
            s.sendall(struct.pack("<I", 60 << 20) + b"Q")
            chunk = b"x" * (1 << 20)
            while sent < (59 << 20):
                sent += s.send(chunk)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        assert sent < (59 << 20), "the agent read a 60 MiB frame before authentication"
        s.close()
    # Slowloris: one byte every 0.3 s of a valid-looking auth frame.
    s = socket.create_connection((host, port), source_address=attacker)
    t0 = time.monotonic()
    data = frame(b"auth", b"0" * 32)
    try:
        for b in data:
            s.send(bytes([b]))
            time.sleep(0.3)
            if time.monotonic() - t0 > AUTH_TIMEOUT + 3:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    rest = read_all(s, AUTH_TIMEOUT + 3)
    assert rest is not None and b"timed out" in rest, rest
    assert time.monotonic() - t0 < AUTH_TIMEOUT + 3.5
    s.close()
    # Authenticated: a request that runs 2 s, and 100 MiB of further frames meanwhile.
    s = socket.create_connection((host, port))
    s.sendall(frame(b"auth", token.encode()))
    assert read_frame(s)[0] == b"R"
    # Python-level steps: the cancel (KeyboardInterrupt) lands as soon as it hangs up.
    s.sendall(frame(b"eval", b'{"code": "[__import__(\'time\').sleep(0.01) '
                             b'for _ in range(1000)]"}'))
    assert read_frame(s)[0] == b"G"
    s.settimeout(1)
    sent = 0
    big = frame(b"hello", b" " * (1 << 20))
    try:
        while sent < (100 << 20):
            s.sendall(big)
            sent += len(big)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    grown = rss_kb(t.pid) - before
    assert read_all(s, 5) is not None, "the agent kept the connection"
    s.close()
    assert sent < (40 << 20), "the agent read %d MiB while a request ran" % (sent >> 20)
    assert grown < 16 * 1024, "RSS grew by %d KiB" % grown
    harness.log("RSS growth under the memory attacks: %d KiB" % grown)
    timed_eval(t, 3.0)


@harness.timeout(120)
def test_failed_tokens_rate_limited():
    """Five wrong tokens from one address, then that address is not even heard (the right
    token refused too) until its credit comes back; another address is not affected."""
    t = Target("sleep", seconds=60, token="rate").wait_ready()
    host, port, token = listen(t)
    for i in range(5):
        kind, text = auth(host, port, "%032x" % i)
        assert kind == "E" and "authentication failed" in text, (i, kind, text)
    kind, text = auth(host, port, token)
    assert kind == "E" and "too many failed authentications" in text, (kind, text)
    r = harness.probing("-t", "%s:%d" % (host, port), "eval", "TOKEN",
                        env={"PROBING_TOKEN": token})
    assert r.returncode == 1 and "too many failed authentications" in r.stderr, r.stderr
    # Another address (all of 127/8 is loopback) gets in with the token.
    kind, text = auth(host, port, token, source="127.0.0.2")
    assert (kind, text) == ("R", '{"ok": true}'), (kind, text)
    # Garbage counts as a failure too (from yet another address).
    for _ in range(5):
        g = socket.create_connection((host, port), source_address=("127.0.0.4", 0))
        g.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert b"authentication failed" in (read_all(g, 5) or b"")
        g.close()
    kind, text = auth(host, port, token, source="127.0.0.4")
    assert kind == "E" and "too many failed authentications" in text, (kind, text)
    # The owner's way in is untouched.
    timed_eval(t, 3.0)
    # The locked address gets one try back after about 2 s.
    t0 = time.monotonic()
    harness.wait_for(lambda: auth(host, port, token)[0] == "R", timeout=6, interval=0.25,
                     what="the address unlocked")
    assert time.monotonic() - t0 > 0.5, "unlocked too soon"
    r = harness.probing("-t", "%s:%d" % (host, port), "eval", "TOKEN",
                        env={"PROBING_TOKEN": token})
    assert r.returncode == 0 and r.stdout.strip() == "'rate'", r.stdout + r.stderr


CHILD_SPAWNER = r"""
import os, subprocess, sys, time
TOKEN = "spawner"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("READY", os.getpid(), child.pid, flush=True)
time.sleep(60)
"""


@harness.timeout(120)
def test_run_listen_token_not_in_children_and_owner_gets_it_back():
    """probing run --listen: the token printed at start works; it is in neither the
    environment of a process the target starts nor the target's own (os.environ,
    /proc/PID/environ); the owner gets address and token back with --show-token."""
    out = open(harness.tmp("spawn.out"), "w")
    err = open(harness.tmp("spawn.err"), "w")
    harness.spawn([harness.PROBING, "run", "--listen", "127.0.0.1:0", "--", PY, "-c",
                   CHILD_SPAWNER], stdout=out, stderr=err)
    m = harness.wait_for(lambda: re.search(r"READY (\d+) (\d+)",
                                           open(harness.tmp("spawn.out")).read()),
                         what="READY")
    pid, child = int(m.group(1)), int(m.group(2))
    printed = re.search(r"PROBING_TOKEN=([0-9a-f]{32})", open(harness.tmp("spawn.err")).read())
    assert printed, open(harness.tmp("spawn.err")).read()
    token = printed.group(1)
    for who in (child, pid):
        with open("/proc/%d/environ" % who, "rb") as f:
            env = f.read()
        assert token.encode() not in env, "the token is in /proc/%d/environ" % who
        if who == child:
            assert b"PROBING_TOKEN" not in env and b"PROBING_LISTEN" not in env, env
    r = harness.probing("eval", "--no-inject", "-p", pid,
                        "[k for k in __import__('os').environ "
                        "if k in ('PROBING_TOKEN', 'PROBING_LISTEN')]")
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # The owner asks again: the address (port 0 became a real one) and the same token.
    p = harness.probing("inject", "-p", pid, "--show-token")
    m = re.search(r"tcp\s+127\.0\.0\.1:(\d+)\s+token ([0-9a-f]{32})", p.stdout)
    assert p.returncode == 0 and m and m.group(2) == token, p.stdout + p.stderr
    r = harness.probing("-t", "127.0.0.1:" + m.group(1), "eval", "TOKEN",
                        env={"PROBING_TOKEN": token})
    assert r.returncode == 0 and r.stdout.strip() == "'spawner'", r.stdout + r.stderr
    # The child (a Python process under probing run too) serves no TCP port of its own.
    p = harness.probing("inject", "-p", child, "--show-token")
    assert p.returncode == 1 and "serves no TCP port" in p.stderr, p.stdout + p.stderr
    # Without --listen, a PROBING_LISTEN exported by the caller does not make the program
    # listen, and a PROBING_TOKEN (a client's, for -t) is none of the agent's business.
    p = harness.probing("run", "--", PY, "-c",
                        "import os; print(os.environ.get('PROBING_LISTEN'), "
                        "os.environ.get('PROBING_TOKEN'))",
                        env={"PROBING_LISTEN": "127.0.0.1:0", "PROBING_TOKEN": "c" * 32})
    assert p.returncode == 0 and p.stdout.split() == ["None", "c" * 32], p.stdout + p.stderr


@harness.timeout(120)
def test_show_token_and_listen_again():
    t = Target("sleep", seconds=30, token="show").wait_ready()
    # No agent: nothing is loaded just to say there is no token.
    p = harness.probing("inject", "-p", t.pid, "--show-token")
    assert p.returncode == 1 and "not loaded" in p.stderr, p.stderr
    assert maps_count(t.pid) == 0
    assert harness.probing("inject", "-p", t.pid).returncode == 0
    p = harness.probing("inject", "-p", t.pid, "--show-token")
    assert p.returncode == 1 and "serves no TCP port" in p.stderr, p.stderr
    host, port, token = listen(t)
    p = harness.probing("inject", "-p", t.pid, "--show-token")
    assert p.returncode == 0 and ("%s:%d  token %s" % (host, port, token)) in p.stdout, p.stdout
    p = harness.probing("inject", "-p", t.pid)
    assert "%s:%d" % (host, port) in p.stdout and token not in p.stdout, p.stdout
    assert "--show-token" in p.stdout, p.stdout
    # Asking for the same address again reports it; another one is an error.
    p = harness.probing("inject", "-p", t.pid, "--listen", "%s:%d" % (host, port))
    assert p.returncode == 0 and "already served" in p.stdout and token in p.stdout, p.stdout
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other_port = other.getsockname()[1]
    other.close()
    p = harness.probing("inject", "-p", t.pid, "--listen", "127.0.0.1:%d" % other_port)
    assert p.returncode == 1 and "already serves TCP on %s:%d" % (host, port) in p.stderr, \
        p.stdout + p.stderr
    p = harness.probing("inject", "-p", t.pid, "--show-token", "--repl")
    assert p.returncode == 2, p.stderr


@harness.timeout(120)
def test_listen_and_target_address_parsing():
    """Every ADDR reader refuses what it cannot serve exactly, before anything happens:
    ports out of range (99999 used to wrap to 34463), garbage, unbracketed IPv6."""
    t = Target("sleep", seconds=30, token="addr").wait_ready()
    bad = ["99999", "65536", "x:y:z", "::1:9400", "[::1]", "127.0.0.1:-1", "127.0.0.1:",
           "a b:1", "[127.0.0.1]:1", "", "127.0.0.1:http"]
    for addr in bad:
        p = harness.probing("inject", "-p", t.pid, "--listen", addr)
        assert p.returncode == 2 and "bad --listen address" in p.stderr, (addr, p.stderr)
    assert maps_count(t.pid) == 0, "the agent was loaded for a bad address"
    for addr in ["99999", "x:y:z", "[::1]"]:
        marker = harness.tmp("ran")
        p = harness.probing("run", "--listen", addr, "--", "touch", marker)
        assert p.returncode == 2 and "bad --listen address" in p.stderr, (addr, p.stderr)
        assert not os.path.exists(marker), "probing run ran the command"
    # A port in use is found before the program starts, not silently inside it.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    p = harness.probing("run", "--listen", "127.0.0.1:%d" % busy.getsockname()[1], "--",
                        "true")
    busy.close()
    assert p.returncode == 1 and "Address already in use" in p.stderr, p.stderr
    for target in ["127.0.0.1:99999", "x:y:z", "::1:9400", "127.0.0.1:0", ":9400"]:
        p = harness.probing("-t", target, "eval", "1", env={"PROBING_TOKEN": "0" * 32})
        assert p.returncode == 2 and "bad -t target" in p.stderr, (target, p.stderr)
    # IPv6 in brackets works end to end, where the machine has IPv6 loopback.
    try:
        s6 = socket.socket(socket.AF_INET6)
        s6.bind(("::1", 0))
        s6.close()
    except OSError:
        return
    host, port, token = listen(t, "[::1]:0")
    assert host == "::1", host
    r = harness.probing("-t", "[::1]:%d" % port, "eval", "TOKEN", env={"PROBING_TOKEN": token})
    assert r.returncode == 0 and r.stdout.strip() == "'addr'", r.stdout + r.stderr
