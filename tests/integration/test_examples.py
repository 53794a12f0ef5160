"""Every example of the README and of each command's --help that can run here is run, against
real workloads, so that none rots (issue 20).

The examples are read from the texts themselves (README.md's code blocks; the "Examples:"
section of 'probing --help' and 'probing COMMAND --help'), not copied here. Each runs in bash
in a directory holding what the examples name: app.db (a recording of a PyTorch training
script, tests/workloads/torch/torch_train.py, whose pid stands for 1234), job.db (a
recording of a 2-rank torchrun job, whose launcher stands for 4321 and for
$(pgrep -f torchrun)), before.db/after.db, node0.db/node1.db, bt-node0.db/bt-node1.db,
snippet.py and a crash file. 'probing' there is build/probing, through a shell function that
logs every exit status: each must be 0 (141 when a pipe's reader stopped early, as 'head'
does). The examples of one block (or one --help) run in order in one directory, so that
one writes what the next reads; each block gets a fresh copy.

Some examples cannot run here, each for a reason given in SKIPPED (a server that runs until
stopped, an interactive prompt, the user's own train.py, a tool not installed); numbers that
only fit a longer recording or a bigger job are scaled in SCALED, each said.
"""
import os
import re
import shutil
import subprocess

import harness as h

README = os.path.join(h.ROOT, "README.md")
TORCH_TRAIN = os.path.join(h.PY_WORKLOADS, "torch", "torch_train.py")
DDP_JOB = os.path.join(h.PY_WORKLOADS, "torch", "ddp_job.py")
CRASH_TARGET = os.path.join(h.PY_WORKLOADS, "live", "crash_target.py")
PY = "/usr/bin/python3.11"
TORCHRUN = "/usr/bin/torchrun"

# (pattern in the example, why it is not run here)
SKIPPED = [
    (r"\bprobing serve\b", "a server that runs until stopped (test_serve runs it)"),
    (r"\bprobing mcp\b", "a server on stdin/stdout (test_mcp runs it)"),
    (r"\brepl\b|--repl", "an interactive prompt (test_repl runs it)"),
    (r"\bprobing run\b", "starts the user's own train.py/serve.py"),
    (r"\bprobing debug\b", "waits for VS Code to attach (test_debug runs it)"),
    (r"\bprobing top\b(?!.*(-d|--duration) )", "a live view that runs until q or Ctrl-C "
     "(test_top drives it in tmux)"),
    (r"\bprobing watch\b(?!.*--dump)", "watches a job until stopped (test_watch runs it on "
     "real jobs)"),
    (r"/stall-\*\.db", "merges the watch reports of two nodes (test_watch runs two watches "
     "in two network namespaces and merges their reports)"),
    (r"/var/tmp/watch\b", "reads what a running watch keeps (test_watch reads its segments and "
     "reports with backtrace -i, flamegraph -i and query -i, and drives --dump)"),
    (r"-- \./myprog|-- python3 train\.py|-- torchrun", "starts the user's own program"),
    (r"--listen", "a fixed TCP port (9400, 8080) that tests running side by side would share"),
    (r"--show-token", "needs the agent's TCP port (--listen, above)"),
    (r"<token>", "a placeholder"),
    (r"\$\(hostname\)", "records a job on each node of a cluster"),
    (r"\bgo tool\b", "Go is not installed"),
    (r"flamegraph\.pl", "flamegraph.pl is not installed"),
]

# (pattern, replacement, why): what only fits a longer recording or a bigger job.
SCALED = [
    (r"-d (5|10|30)\b", "-d 1", "a second is enough to check that the example works"),
    (r"--from 30 --to 40", "--from 0 --to 2", "the recording here lasts 2 s"),
    (r"--diff-ranks 0,3", "--diff-ranks 0,1", "the job here has 2 ranks"),
    (r"--rank 3", "--rank 1", "the job here has 2 ranks"),
    (r"/shared/\*\.db", "node*.db", "the nodes' recordings are here, not on a shared disk"),
]

COMMAND = re.compile(r"^(sudo )?probing (-t \S+ )?[a-z]")


def readme_examples():
    """[(block name, [command text])] of README.md's code blocks."""
    out, block, name, n = [], None, "README", 0
    for line in open(README, encoding="utf-8").read().splitlines():
        if line.startswith("#"):
            name = line.lstrip("# ").strip()
        if line.startswith("```"):
            if block is None:
                block, n = [], n + 1
            else:
                if block:
                    out.append((f"README block {n} ({name})", block))
                block = None
            continue
        if block is None:
            continue
        if COMMAND.match(line):
            block.append(line)
        elif block and line.startswith(" ") and line.strip():
            block[-1] += "\n" + line  # a continuation (SQL over several lines)
    return out


def help_examples(cmd):
    """[command text] of the Examples: section of 'probing [CMD] --help'."""
    r = h.probing(*([cmd] if cmd else []), "--help")
    text = r.stdout
    if "Examples:\n" not in text:
        return []  # mcp: its client configuration is the example (test_mcp uses it)
    lines = text[text.index("Examples:\n") + len("Examples:\n"):].splitlines()
    out, indent = [], None
    for line in lines:
        if not line.strip():
            break
        stripped = line.lstrip()
        ind = len(line) - len(stripped)
        if indent is not None and ind > indent and out and not stripped.startswith("#") \
                and not COMMAND.match(stripped):
            out[-1] += "\n" + line
            continue
        if COMMAND.match(stripped) or stripped.startswith("PROBING_TOKEN"):
            out.append(stripped)
            indent = ind
    return out


def commands():
    r = h.probing("--help")
    text = r.stdout
    names = re.findall(r"^  ([a-z]+) ", text[text.index("Commands:"):text.index("Global")],
                       re.M)
    assert "record" in names and "backtrace" in names, names
    return names


def skipped(example):
    # What the example runs, not what its comment says ("# or: probing run --crash ...").
    code = "\n".join(re.sub(r"\s+#.*$", "", line) for line in example.splitlines())
    for pat, why in SKIPPED:
        if re.search(pat, code):
            return why
    return None


def scaled(example):
    for pat, rep, _ in SCALED:
        example = re.sub(pat, rep, example)
    return example


class Fixture:
    """The workloads and the files the examples name."""

    def __init__(self):
        self.dir = h.tmp("fixture")
        os.makedirs(self.dir)
        # Its output to a file: a pipe nobody reads fills with its STEP lines, and then the
        # trainer is blocked writing, with no CPU time to sample (on a quiet machine, within
        # seconds).
        out = h.tmp("train.out")
        t = h.spawn([PY, TORCH_TRAIN, "--seconds", "600"], stdout=open(out, "w"),
                    env={"OMP_NUM_THREADS": "1"})
        h.wait_for(lambda: open(out).read().startswith("READY"), timeout=60,
                   what="the trainer's READY")
        self.pid = t.pid
        self.job = self.start_job()
        self.run_setup(f"probing record -p {self.pid} -d 2 -o app.db")
        self.run_setup(f"probing record --children -p {self.job} -d 2 -o job.db")
        # Two nodes' recordings: different processes (the same one twice is refused).
        for a, b in (("app.db", "before.db"), ("app.db", "after.db"), ("job.db", "node0.db"),
                     ("app.db", "node1.db")):
            shutil.copy(os.path.join(self.dir, a), os.path.join(self.dir, b))
        os.makedirs(os.path.join(self.dir, "rec"))
        for n in ("node0.db", "node1.db"):
            shutil.copy(os.path.join(self.dir, n), os.path.join(self.dir, "rec", n))
        self.run_setup(f"probing backtrace -p {self.job} --children -o bt-node0.db && "
                       f"probing backtrace -p {self.pid} -o bt-node1.db")
        with open(os.path.join(self.dir, "snippet.py"), "w") as f:
            f.write("import threading\nprint(len(threading.enumerate()), 'threads')\n")
        # A crash file, under the name 'inject -p 1234 --crash' gives it.
        crash = os.path.join(self.dir, f"probing-crash-{self.pid}.db")
        c = h.spawn([h.PROBING, "run", f"--crash={crash}", "--", PY, CRASH_TARGET, "segv"],
                    cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    preexec_fn=_no_core)
        c.communicate(timeout=60)
        assert os.path.exists(crash)
        # The PyTorch examples read python.torch_trace: hooks in the script and in the job,
        # every step recorded, a few steps run.
        self.run_setup(f"probing inject -p {self.pid} --torch && "
                       f"probing config -p {self.pid} torch_every=1")
        self.run_setup(f"probing inject -p {self.job} --children --torch && "
                       f"probing config -p {self.job} --children torch_every=1")
        h.wait_for(lambda: self.torch_rows(), timeout=60, interval=0.5,
                   what="python.torch_trace rows")

    def start_job(self):
        out = h.tmp("job.out")
        p = h.spawn([TORCHRUN, "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
                     "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", DDP_JOB,
                     "--hang-file", h.tmp("never"), "--sleep", "0.05"],
                    stdout=open(out, "w"), stderr=subprocess.STDOUT,
                    env={"OMP_NUM_THREADS": "1"})

        def ready():
            if p.poll() is not None:
                raise AssertionError("torchrun exited: " + open(out).read()[-2000:])
            return len(re.findall(r"READY \d+ \d+", open(out).read())) == 2

        h.wait_for(ready, timeout=120, interval=0.2, what="the job's ranks")
        return p.pid

    def torch_rows(self):
        r = h.probing("query", "-p", self.pid, "--format", "csv",
                      "SELECT COUNT(*) FROM python.torch_trace")
        return r.returncode == 0 and int(r.stdout.split()[-1]) > 0

    def substitute(self, example):
        example = scaled(example)
        example = re.sub(r"\b1234\b", str(self.pid), example)
        example = re.sub(r"\b4321\b", str(self.job), example)
        return example

    def run_setup(self, script):
        r = run_bash(script, self.dir, self)
        assert r["failed"] == [] and r["rc"] == 0, r

    def copy(self, name):
        d = h.tmp(name)
        shutil.copytree(self.dir, d)
        return d


def _no_core():
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


PRELUDE = r"""
probing() {
    "$PROBING_BIN" "$@"
    local rc=$?
    local args="$*"
    printf '%s\t%s\n' "$rc" "${args//$'\n'/ }" >> "$PROBING_LOG"
    return $rc
}
sudo() { "$@"; }
pgrep() { echo "$JOB_PID"; }   # the job of this test, not another one on the machine
"""


def run_bash(script, cwd, fx, timeout=120):
    """Run @script in bash in @cwd; return the exit status and the probing calls that failed."""
    log = os.path.join(cwd, ".probing-calls")
    open(log, "w").close()
    env = {"PROBING_BIN": h.PROBING, "PROBING_LOG": log,
           "JOB_PID": str(getattr(fx, "job", 0))}
    p = h.run(["bash", "-c", PRELUDE + script], timeout=timeout, cwd=cwd, env=env)
    calls = [line.split("\t", 1) for line in open(log).read().splitlines()]
    # 141: killed by SIGPIPE when the reader of its output (head) had what it wanted.
    failed = [(rc, args) for rc, args in calls if rc not in ("0", "141")]
    return {"rc": p.returncode, "failed": failed, "calls": len(calls),
            "stderr": p.stderr[-2000:], "script": script}


def blocks():
    """[(name, [example])]: README's code blocks and each --help's examples."""
    out = readme_examples()
    out.append(("probing --help", help_examples(None)))
    for cmd in commands():
        out.append((f"probing {cmd} --help", help_examples(cmd)))
    return out


@h.timeout(600)
def test_readme_and_help_examples_run():
    if not os.path.exists(TORCHRUN):
        raise h.Skip("torchrun (python3-torch) is not installed")
    fx = Fixture()
    ran, skipped_here, failures = 0, [], []
    for name, examples in blocks():
        d = fx.copy(re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-"))
        # '--torch=off' removes the hooks the examples after it read: it runs last.
        examples = sorted(examples, key=lambda e: "--torch=off" in e)
        for example in examples:
            why = skipped(example)
            if why:
                skipped_here.append((name, example.splitlines()[0], why))
                continue
            script = fx.substitute(example)
            r = run_bash(script, d, fx)
            ran += 1
            if r["failed"] or r["rc"] != 0 or r["calls"] == 0:
                failures.append((name, example, r))
    h.log(f"{ran} examples ran; skipped:\n" +
          "\n".join(f"  {n}: {e}  ({w})" for n, e, w in skipped_here))
    assert ran >= 60, f"only {ran} examples ran"
    assert not failures, "\n\n".join(
        f"{n}: {e}\n  -> exit {r['rc']}, failed probing calls {r['failed']}\n{r['stderr']}"
        for n, e, r in failures)
