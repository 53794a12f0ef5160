"""probing repl, driven through a real pseudo-terminal (line editing, Ctrl-C, Ctrl-D)."""
import os
import pty
import re
import select
import signal
import stat
import time

import harness
from live_helpers import Target

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


class Term:
    """The probing binary on the slave side of a pty (its controlling terminal)."""

    def __init__(self, args, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execve(harness.PROBING, [harness.PROBING, *map(str, args)], env)
            finally:
                os._exit(127)
        self.buf = ""

    def send(self, s):
        os.write(self.fd, s.encode())

    def expect(self, pattern, timeout=15):
        """Wait until the screen text (escapes removed) after the last match has PATTERN."""
        end = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            text = ANSI.sub("", self.buf)
            m = rx.search(text)
            if m:
                # Consume up to the match.
                self.buf = text[m.end():]
                return m
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("no %r in %r" % (pattern, text[-800:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise AssertionError("terminal closed; no %r in %r" % (pattern, text[-800:]))
                self.buf += data.decode("utf-8", "replace")

    def wait(self, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                r, _, _ = select.select([self.fd], [], [], 0.05)
                if r:
                    self.buf += os.read(self.fd, 65536).decode("utf-8", "replace")
            except OSError:
                pass
        raise AssertionError("repl did not exit; screen: %r" % ANSI.sub("", self.buf)[-500:])

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def _env():
    env = dict(os.environ)
    env["HOME"] = harness.tmp()
    env["TERM"] = "xterm"
    env.pop("PROBING_TOKEN", None)
    return env


PROMPT = r">>> $"


@harness.timeout(90)
def test_repl_lines_blocks_ctrl_c_ctrl_d_history():
    t = Target("sleep", seconds=8, token="repltok").wait_ready()
    term = Term(["repl", "-p", t.pid], _env())
    try:
        term.expect(r"Python 3\.\d+\.\d+ in process %d" % t.pid)
        term.expect(PROMPT)
        term.send("x = 41\r")
        term.expect(PROMPT)
        term.send("x + 1\r")
        term.expect(r"\n42\n>>> $")
        # A block: the agent says it is incomplete until the empty line.
        term.send("for i in range(3):\r")
        term.expect(r"\.\.\. $")
        term.send("    print(i * 10)\r")
        term.expect(r"\.\.\. $")
        term.send("\r")
        term.expect(r"\n0\n10\n20\n>>> $")
        # Ctrl-C discards the line being typed.
        term.send("this is not python")
        term.expect("this is not python")
        term.send("\x03")
        term.expect(r"KeyboardInterrupt\n>>> $")
        # ... and a half-typed block.
        term.send("if True:\r")
        term.expect(r"\.\.\. $")
        term.send("\x03")
        term.expect(r"KeyboardInterrupt\n>>> $")
        term.send("TOKEN\r")
        term.expect(r"'repltok'\n>>> $")
        # Errors show as tracebacks and the prompt goes on.
        term.send("1/0\r")
        term.expect(r"ZeroDivisionError: division by zero\n>>> $")
        # Ctrl-C while code runs in the target interrupts that code only.
        term.send("import time\r")
        term.expect(PROMPT)
        term.send("while True: time.sleep(0.01)\r")
        time.sleep(0.5)
        term.send("\x03")
        term.expect(r"KeyboardInterrupt\n>>> $")
        term.send("x * 2\r")
        term.expect(r"\n82\n>>> $")
        # Up arrow recalls the last line (history).
        term.send("\x1b[A")
        term.expect(r"x \* 2")
        term.send("\r")
        term.expect(r"\n82\n>>> $")
        # Ctrl-D leaves; the target keeps running with what the session defined. It is
        # typed the instant the prompt shows, while the terminal may still be in cooked
        # mode: the line discipline's end-of-file must count as Ctrl-D too.
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.kill()
    hist = open(os.path.join(harness.tmp(), ".probing_history"), errors="replace").read()
    hist = hist.replace("\\040", " ")  # libedit stores entries vis(3)-encoded
    assert "x = 41" in hist and "TOKEN" in hist, hist
    assert oct(os.stat(os.path.join(harness.tmp(), ".probing_history")).st_mode & 0o777) == "0o600"
    p = harness.probing("eval", "-p", t.pid, "x")
    assert p.stdout == "41\n", p.stdout + p.stderr
    n, _ = t.finish()
    assert n > 0


def test_repl_history_survives_sessions():
    t = Target("sleep", seconds=6).wait_ready()
    term = Term(["repl", "-p", t.pid], _env())
    try:
        term.expect(PROMPT)
        term.send("marker = 'from the first session'\r")
        term.expect(PROMPT)
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.kill()
    term = Term(["-t", t.pid, "repl"], _env())
    try:
        term.expect(PROMPT)
        term.send("\x1b[A\r")
        term.expect(PROMPT)
        term.send("marker\r")
        term.expect(r"'from the first session'\n>>> $")
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.kill()


def test_repl_history_only_in_a_file_of_its_own():
    # As root with someone else's $HOME (sudo -E), ~/.probing_history may be a link or a
    # hard link to any file: it is neither read (the history would show its lines) nor
    # written over.
    victim = harness.tmp("victim")
    with open(victim, "w") as f:
        f.write("_HiStOrY_V2_\nsecret\040line\n")
    os.chmod(victim, 0o640)
    hist = os.path.join(harness.tmp(), ".probing_history")
    t = Target("sleep", seconds=3).wait_ready()
    for make in (lambda: os.symlink(victim, hist), lambda: os.link(victim, hist)):
        make()
        term = Term(["repl", "-p", t.pid], _env())
        try:
            term.expect(PROMPT)
            term.send("\x1b[A")  # the history is empty: nothing is recalled
            term.send("\r")
            term.expect(PROMPT)
            term.send("typed = 1\r")
            term.expect(PROMPT)
            term.send("\x04")
            assert term.wait() == 0
        finally:
            term.kill()
        assert "secret" not in ANSI.sub("", term.buf)
        assert open(victim).read() == "_HiStOrY_V2_\nsecret\040line\n"
        assert stat.S_IMODE(os.stat(victim).st_mode) == 0o640
        os.unlink(hist)
    t.finish()


def test_repl_without_a_terminal():
    t = Target("sleep", seconds=4).wait_ready()
    p = harness.probing("repl", "-p", t.pid,
                        input="y = 3\nfor i in range(2):\n    print(i + y)\n\ny * 2\n1/0\nTOKEN\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "3\n4\n6\n'tok'\n", p.stdout
    assert "ZeroDivisionError" in p.stderr
    # An unfinished block at the end of input still runs.
    p = harness.probing("repl", "-p", t.pid, input="for i in range(2):\n    print('z', i)\n")
    assert p.stdout == "z 0\nz 1\n", p.stdout
    p = harness.probing("repl", "--help")
    assert p.returncode == 0 and "Usage: probing repl" in p.stdout
    n, _ = t.finish()
    assert n > 0


def test_inject_then_repl():
    t = Target("sleep", seconds=5).wait_ready()
    term = Term(["inject", "-p", t.pid, "--repl"], _env())
    try:
        term.expect(r"agent: loaded into process %d" % t.pid)
        term.expect(PROMPT)
        term.send("MODE\r")
        term.expect(r"'sleep'\n>>> $")
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.kill()
