"""PyTorch hooks: inject --torch, python.torch_trace, --torch=off, --torch=wait, sampling,
the bounded table, query --save and export --format chrome.

The target is tests/workloads/torch/torch_train.py (a small transformer trained on CPU), on each
torch of torchenv.py: Debian's python3-torch 1.13 under /usr/bin/python3.11 on the host, and
Debian unstable's torch 2.14 under python3.14 in the sid root. It pauses at known iterations
so that hooks are installed, configured and removed at known points; its own timings (--times) and final loss
are the ground truth.
"""
import ast
import json
import os
import re
import subprocess
import time

import harness
import torchenv

PY = "/usr/bin/python3"
WORKLOAD = os.path.join(harness.PY_WORKLOADS, "torch", "torch_train.py")

LAYER = ["", ".norm1", ".attn", ".attn.q", ".attn.k", ".attn.v", ".attn.out", ".norm2", ".mlp",
         ".mlp.0", ".mlp.1", ".mlp.2"]
MODULES = sorted(["TinyTransformer", "embed", "encoder", "norm", "head", "CrossEntropyLoss"] +
                 ["encoder.layers.%d%s" % (i, s) for i in range(2) for s in LAYER])
STEPS_TID = (1 << 30) - 1  # the chrome export's track of steps
EPS = 2e-6  # s: times are stored as unix seconds in a double (about 0.24 us apart)


class Train:
    """A torch_train.py process driven through its pauses."""

    def __init__(self, tv, *args, launcher=()):
        self.out_path = harness.tmp("train-%d.out" % id(self))
        self.err_path = harness.tmp("train-%d.err" % id(self))
        self.times_path = harness.tmp("train-%d.times" % id(self))
        tv.require()
        self.proc = harness.spawn([*launcher, *tv.python_argv(WORKLOAD, "--times",
                                                             self.times_path, *args)],
                                  stdin=subprocess.PIPE, stdout=open(self.out_path, "w"),
                                  stderr=open(self.err_path, "w"))
        self.pid = self.proc.pid
        self.wait_line("READY")

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def wait_line(self, line, timeout=90):
        def seen():
            if re.search("^%s" % re.escape(line), self.stdout(), re.M):
                return True
            if self.proc.poll() is not None:
                raise AssertionError("torch_train exited (%s) before '%s': %s" % (
                    self.proc.returncode, line, self.stderr()[-3000:]))
            return False
        harness.wait_for(seen, timeout=timeout, what="torch_train: " + line)

    def go(self, then=None):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()
        if then:
            self.wait_line(then)

    def result(self):
        """The RESULT line; the process must end cleanly, with nothing on stderr."""
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        err = self.stderr()
        assert self.proc.returncode == 0, "torch_train failed: %s" % err[-3000:]
        assert "Traceback" not in err and "Warning" not in err, err[-3000:]
        m = re.search(r"^(RESULT .*)$", self.stdout(), re.M)
        assert m, self.stdout()
        return m.group(1)

    def times(self):
        with open(self.times_path) as f:
            return json.load(f)


_reference = {}


def reference(tv, steps, *extra):
    """RESULT of a run on torch @tv with no probing at all."""
    key = (tv.label, steps) + extra
    if key not in _reference:
        p = harness.run(tv.python_argv(WORKLOAD, "--steps", steps, *extra), timeout=300)
        assert p.returncode == 0, p.stderr
        _reference[key] = re.search(r"^(RESULT .*)$", p.stdout, re.M).group(1)
    return _reference[key]


def query(pid, sql):
    p = harness.probing("query", "-p", pid, "-f", "json", sql)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout) if p.stdout.strip() else []
    return out


def rows(pid, where="1"):
    return query(pid, "SELECT * FROM python.torch_trace WHERE %s ORDER BY seq" % where)


def status(pid):
    (s,) = query(pid, "SELECT * FROM python.torch_status")
    return s


def inject(pid, *extra, rc=0):
    p = harness.probing("inject", "-p", pid, *extra)
    assert p.returncode == rc, p.stdout + p.stderr
    return p


def config(pid, *settings):
    p = harness.probing("config", "-p", pid, *settings)
    assert p.returncode == 0, p.stderr


def evaluate(pid, code):
    p = harness.probing("eval", "-p", pid, code)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def parent_row(by_name, name):
    """The row of the nearest enclosing module that has one ('encoder.layers' is a
    ModuleList, never called: the parent of 'encoder.layers.0' is 'encoder')."""
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name in by_name:
            return by_name[name]
    return by_name.get("TinyTransformer")


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_trace_every_module_every_step(tv):
    t = Train(tv, "--steps", 8, "--pause-at", "2,8")
    t.wait_line("PAUSE 2")
    inject(t.pid)
    config(t.pid, "torch_every=1")
    p = inject(t.pid, "--torch")
    assert "torch: hooks installed (torch %s" % tv.version in p.stdout, p.stdout
    assert "register_module_forward_pre_hook" in p.stdout
    # 1.13 has no optimizer step hooks: Optimizer.step is wrapped there (docs/torch.md).
    assert ("Optimizer.step wrapped in" if tv.version == "1.13" else
            "register_optimizer_step_pre_hook/register_optimizer_step_post_hook") in p.stdout, \
        p.stdout
    t.go("PAUSE 8")
    got = rows(t.pid)
    s = status(t.pid)
    assert s["installed"] == 1 and s["mode"] == "optimizer" and s["errors"] == 0, s
    t.go()
    # Bit-identical training with the hooks installed for most of it.
    assert t.result() == reference(tv, 8)
    times = t.times()  # written at the end
    # Installed before iteration 2: steps 1..6 are iterations 2..7, one per optimizer step.
    assert sorted({r["step"] for r in got}) == list(range(1, 7)), {r["step"] for r in got}
    for step in range(1, 7):
        rs = [r for r in got if r["step"] == step]
        fwd = {r["module"]: r for r in rs if r["stage"] == "forward"}
        bwd = {r["module"]: r for r in rs if r["stage"] == "backward"}
        opt = [r for r in rs if r["stage"] == "step"]
        assert sorted(fwd) == MODULES, sorted(fwd)
        assert sorted(bwd) == MODULES, sorted(set(MODULES) - set(bwd))
        assert len([r for r in rs if r["stage"] == "forward"]) == len(MODULES)
        assert [r["module"] for r in opt] == ["SGD"] and opt[0]["depth"] is None
        for r in rs:
            assert r["duration"] > 0, r
            assert r["pid"] == t.pid and r["tid"] == t.pid and r["thread"] == "MainThread", r
            assert r["rank"] is None and r["allocated"] > 1 << 20, r
        for r in fwd.values():
            want = 0 if r["module"] in ("TinyTransformer", "CrossEntropyLoss") else \
                len(r["module"].split("."))
            assert r["depth"] == want, r
        # Nested by time: every call inside its parent's call, in both stages.
        for stage in (fwd, bwd):
            for name, r in stage.items():
                if r["depth"] == 0:
                    continue
                p = parent_row(stage, name)
                assert p["ts"] - EPS <= r["ts"], (stage, name)
                assert r["ts"] + r["duration"] <= p["ts"] + p["duration"] + EPS, (name, r, p)
        # A module's backward comes after its forward; backward runs from the head down.
        for name in MODULES:
            assert bwd[name]["ts"] >= fwd[name]["ts"] + fwd[name]["duration"] - EPS, name
        assert bwd["head"]["ts"] < bwd["encoder.layers.1"]["ts"] < bwd["encoder.layers.0"][
            "ts"] < bwd["embed"]["ts"]
        assert bwd["CrossEntropyLoss"]["ts"] < bwd["head"]["ts"]
        # Within the step the workload timed itself (iteration step + 1).
        t0, t1, w0 = times[step + 1]
        wall = t1 - t0
        top = [fwd["TinyTransformer"], bwd["TinyTransformer"], fwd["CrossEntropyLoss"],
               bwd["CrossEntropyLoss"], opt[0]]
        assert sum(r["duration"] for r in top) <= wall, (wall, top)
        level1 = [r for r in rs if r["depth"] == 1] + top[2:]
        assert sum(r["duration"] for r in level1) <= wall
        first = min(r["ts"] for r in rs)
        last = max(r["ts"] + r["duration"] for r in rs)
        assert last - first <= wall + 0.01 and abs(first - w0) < 0.05, (first, last, w0, wall)


# Dynamo's own counters: frames compiled, graphs, graph breaks.
DYNAMO = ("{k: dict(v) for k, v in "
          "__import__('torch._dynamo.utils', fromlist=['counters']).counters.items()}")


@harness.timeout(240)
def test_torch_trace_of_a_compiled_model():
    """torch.compile(model) on torch 2.14 (backend aot_eager: Debian's torch has no C++
    compiler for inductor), hooks in from iteration 2, every 2nd step recorded. The
    compiled model is one row under its own class, with the graph torch runs inside its
    time; its submodules are compiled into that graph and have none. The hooks leave the
    compiled code alone: no graph break, no new graph, no warning in the job's output
    (torch warns about global hooks on compiled modules), the training bit-identical."""
    tv = torchenv.SID
    t = Train(tv, "--steps", 14, "--pause-at", "2,14", "--compile", "aot_eager")
    t.wait_line("PAUSE 2")
    before = ast.literal_eval(evaluate(t.pid, DYNAMO))
    assert before["stats"]["unique_graphs"] == 1, before
    inject(t.pid)
    config(t.pid, "torch_every=2")
    inject(t.pid, "--torch")
    t.go("PAUSE 14")
    got = rows(t.pid)
    after = ast.literal_eval(evaluate(t.pid, DYNAMO))
    # Iterations 2..13 are steps 1..12, every 2nd recorded: recording turns on and off.
    assert sorted({r["step"] for r in got}) == [1, 3, 5, 7, 9, 11], got
    assert not after.get("graph_break") and after["stats"] == before["stats"], after
    # Dynamo compiles the model's frame once more when the first global hook appears (its
    # guards see them), not again as recording turns on and off: 2 frames (measured).
    assert after["frames"]["total"] - before["frames"]["total"] <= 2, (before, after)
    for step in (1, 3, 5, 7, 9, 11):
        rs = [r for r in got if r["step"] == step]
        fwd = {r["module"]: r for r in rs if r["stage"] == "forward"}
        bwd = {r["module"]: r for r in rs if r["stage"] == "backward"}
        (graph,) = [m for m in fwd if re.match(r"GraphModule(#\d+)?$", m)]
        assert sorted(fwd) == sorted(["TinyTransformer", "CrossEntropyLoss", graph]), fwd
        assert len([r for r in rs if r["stage"] == "forward"]) == 3, rs
        assert sorted(bwd) == ["CrossEntropyLoss", "TinyTransformer"], bwd
        assert [r["module"] for r in rs if r["stage"] == "step"] == ["SGD"], rs
        m, g = fwd["TinyTransformer"], fwd[graph]
        assert m["depth"] == 0 and g["depth"] == 0, (m, g)
        assert m["ts"] - EPS <= g["ts"] and g["ts"] + g["duration"] <= \
            m["ts"] + m["duration"] + EPS, (m, g)
        assert bwd["TinyTransformer"]["ts"] >= m["ts"] + m["duration"] - EPS
    inject(t.pid, "--torch=off")
    assert evaluate(t.pid, "check_clean()") == "'clean'"
    assert evaluate(t.pid, "[f for f in __import__('warnings').filters "
                    "if 'global hooks' in str(f[1])]") == "[]"
    t.go()
    assert t.result() == reference(tv, 14, "--compile", "aot_eager")


# Exec the training from a process that touched 1 GiB first: the kernel's getrusage()
# ru_maxrss of the new image starts at that old peak, its VmHWM does not.
BIG_LAUNCHER = (PY, "-c", "import os, sys\nb = bytearray(1 << 30)\n"
                "b[::4096] = b'x' * (len(b) // 4096)\nos.execv(sys.argv[1], sys.argv[1:])")


@harness.timeout(240)
@harness.params([(tv, launcher) for tv in torchenv.ALL for launcher in ((), BIG_LAUNCHER)],
                ["%s-%s" % (tv.label, kind) for tv in torchenv.ALL
                 for kind in ("direct", "exec-from-1GiB")])
def test_torch_peak_rss_without_cuda(param):
    """Without CUDA, max_allocated is the process's peak RSS: the module "spike" fills a
    256 MiB tensor and frees it before returning (from iteration 2 on), so its rows, and
    every row after it, show a peak at least 256 MiB above the RSS; the rows before it none
    (also when what the process was before its exec had a higher peak)."""
    tv, launcher = param
    size = 256 << 20
    t = Train(tv, "--steps", 4, "--pause-at", "1,4", "--spike", 256, "--spike-from", 2,
              launcher=launcher)
    t.wait_line("PAUSE 1")
    inject(t.pid)
    config(t.pid, "torch_every=1")
    inject(t.pid, "--torch")
    t.go("PAUSE 4")
    got = rows(t.pid)
    t.go()
    t.result()
    # Iteration 1 is step 1; the spike runs in steps 2 and 3.
    assert sorted({r["step"] for r in got}) == [1, 2, 3], {r["step"] for r in got}
    for r in got:
        assert r["reserved"] is None, r
        # The peak of a row is never below its RSS.
        assert r["max_allocated"] is not None and r["max_allocated"] >= r["allocated"], r
    spikes = [r for r in got if r["module"] == "spike" and r["stage"] == "forward"]
    assert [r["step"] for r in spikes] == [1, 2, 3], spikes
    before = [r for r in got if r["seq"] < spikes[1]["seq"]]
    assert before and all(r["max_allocated"] < r["allocated"] + size // 2 for r in before), \
        before
    base = spikes[1]["allocated"]  # the tensor is freed again: RSS is back to about where it was
    for r in got:
        if r["seq"] >= spikes[1]["seq"]:
            assert r["max_allocated"] >= base + size * 0.95, (base, r)


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_off_restores_everything(tv):
    t = Train(tv, "--steps", 6, "--pause-at", "1,3,6")
    t.wait_line("PAUSE 1")
    assert evaluate(t.pid, "check_clean()") == "'clean'"
    inject(t.pid, "--torch")
    left = evaluate(t.pid, "check_clean()")
    # The check sees the hooks (so it can fail): module hooks, SGD.step, __init_subclass__.
    # (1.13: SGD.step and the optimizer's own step wrapped; 2.x: its global step hooks.)
    for what in ("_global_forward_hooks has 1", "_global_forward_pre_hooks has 1") + (
            ("SGD.step replaced", "Optimizer attributes ['__init_subclass__']",
             "opt.step is not the original") if tv.version == "1.13" else
            ("_global_optimizer_pre_hooks has 1", "_global_optimizer_post_hooks has 1")):
        assert what in left, left
    t.go("PAUSE 3")
    assert status(t.pid)["rows"] > 0
    p = inject(t.pid, "--torch=off")
    assert re.search(r"torch: hooks removed; \d+ rows stay", p.stdout), p.stdout
    assert evaluate(t.pid, "check_clean()") == "'clean'"
    # The global dictionaries are empty and no module has a hook of any kind.
    assert evaluate(t.pid, "[len(d) for d in (torch.nn.modules.module._global_forward_hooks, "
                    "torch.nn.modules.module._global_forward_pre_hooks, "
                    "torch.nn.modules.module._global_backward_hooks)]") == "[0, 0, 0]"
    assert evaluate(t.pid, "sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + "
                    "len(m._backward_hooks) for m in model.modules())") == "0"
    n = status(t.pid)["rows"]
    assert n > 0 and len(rows(t.pid)) == n  # the rows stay readable
    p = inject(t.pid, "--torch=off")
    assert "torch: no hooks were installed" in p.stdout
    t.go("PAUSE 6")
    assert status(t.pid)["rows"] == n  # nothing recorded after off
    t.go()
    assert t.result() == reference(tv, 6)


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_not_imported_then_wait(tv):
    t = Train(tv, "--late-import", "--steps", 4, "--pause-at", 4)
    t.wait_line("WAITING-IMPORT")
    p = inject(t.pid, "--torch", rc=1)
    assert "torch is not imported in process %d" % t.pid in p.stderr, p.stderr
    assert "--torch=wait" in p.stderr
    p = inject(t.pid, "--torch=status")
    assert "torch: no hooks installed" in p.stdout, p.stdout
    p = inject(t.pid, "--torch=wait")
    assert "waiting for the process to import torch" in p.stdout, p.stdout
    s = status(t.pid)
    assert s["waiting"] == 1 and s["installed"] == 0 and s["torch"] is None, s
    assert evaluate(t.pid, "type(sys.meta_path[0]).__name__") == "'_TorchFinder'"
    t.go("PAUSE 4")
    s = status(t.pid)
    assert s["installed"] == 1 and s["waiting"] == 0 and s["torch"].startswith(tv.version), s
    assert s["last_error"] is None, s
    # The finder is gone; the hooks are there (installed inside 'import torch', so the
    # workload's own snapshot already has them: look at them directly).
    assert "_TorchFinder" not in evaluate(t.pid, "[type(f).__name__ for f in sys.meta_path]")
    if tv.version == "1.13":  # no optimizer step hooks: the classes' step is wrapped
        hooked = ("[c.__name__ for c in _opt_classes() if getattr(c.__dict__.get('step'), "
                  "'__probing_torch__', False)] + [k for k in torch.optim.Optimizer.__dict__ "
                  "if k == '__init_subclass__']")
        assert "'SGD'" in evaluate(t.pid, hooked) and \
            "__init_subclass__" in evaluate(t.pid, hooked)
        unhooked = "[]"
    else:  # torch 2.x's global optimizer step hooks
        hooked = ("[len(sys.modules['torch.optim.optimizer']._global_optimizer_pre_hooks), "
                  "len(sys.modules['torch.optim.optimizer']._global_optimizer_post_hooks)]")
        assert evaluate(t.pid, hooked) == "[1, 1]"
        unhooked = "[0, 0]"
    got = rows(t.pid)
    # Step 1 (the default torch_every=10 records steps 1, 11, ...) has every module.
    assert {r["step"] for r in got} == {1}
    assert sorted({r["module"] for r in got if r["stage"] == "forward"}) == MODULES
    inject(t.pid, "--torch=off")
    assert evaluate(t.pid, hooked) == unhooked
    assert evaluate(t.pid, "[len(d) for d in (torch.nn.modules.module._global_forward_hooks, "
                    "torch.nn.modules.module._global_forward_pre_hooks)]") == "[0, 0]"
    t.go()
    t.result()


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_sampling_and_depth(tv):
    t = Train(tv, "--steps", 10, "--pause-at", "0,10")
    t.wait_line("PAUSE 0")
    inject(t.pid)
    config(t.pid, "torch_every=3", "torch_max_depth=1")
    inject(t.pid, "--torch")
    t.go("PAUSE 10")
    got = rows(t.pid)
    assert sorted({r["step"] for r in got}) == [1, 4, 7, 10], {r["step"] for r in got}
    assert {r["module"] for r in got if r["stage"] != "step"} == {
        "TinyTransformer", "embed", "encoder", "norm", "head", "CrossEntropyLoss"}
    assert all(r["depth"] <= 1 for r in got if r["stage"] != "step")
    for step in (1, 4, 7, 10):
        assert len([r for r in got if r["step"] == step]) == 13  # 6 fwd + 6 bwd + step
    s = status(t.pid)
    assert s["every"] == 3 and s["max_depth"] == 1 and s["step"] == 11, s
    # Between recorded steps the module hooks are not even installed.
    assert s["recording"] == 0
    assert evaluate(t.pid, "len(torch.nn.modules.module._global_forward_pre_hooks)") == "0"
    t.go()
    assert t.result() == reference(tv, 10)


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_table_is_bounded(tv):
    t = Train(tv, "--steps", 6, "--pause-at", "0,6")
    t.wait_line("PAUSE 0")
    inject(t.pid)
    config(t.pid, "torch_every=1", "torch_max_rows=100")
    inject(t.pid, "--torch")
    t.go("PAUSE 6")
    got = rows(t.pid)
    total = 6 * (2 * len(MODULES) + 1)
    assert len(got) == 100, len(got)
    # The newest rows stay; the oldest were dropped and counted.
    assert [r["seq"] for r in got] == list(range(total - 100, total)), [r["seq"] for r in got]
    s = status(t.pid)
    assert s["rows"] == 100 and s["dropped"] == total - 100 and s["max_rows"] == 100, s
    p = inject(t.pid, "--torch=status")
    assert "100 in python.torch_trace, %d dropped" % (total - 100) in p.stdout, p.stdout
    t.go()
    t.result()


def check_chrome(path, table_rows):
    """Validate a Chrome trace file against the rows it was made from; return its events."""
    with open(path) as f:
        doc = json.load(f)
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ms"
    base = doc["otherData"]["base_unix"]
    assert base % 86400 == 0
    evs = doc["traceEvents"]
    xs = [e for e in evs if e["ph"] == "X"]
    meta = [e for e in evs if e["ph"] == "M"]
    assert len(xs) + len(meta) == len(evs)
    for e in xs:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["dur"] >= 0 and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict) and isinstance(e["args"]["step"], int)
    calls = [e for e in xs if e["cat"] in ("forward", "backward", "step")]
    steps = [e for e in xs if e["cat"] == "step" and e["tid"] == STEPS_TID]
    calls = [e for e in calls if e not in steps]
    assert len(calls) == len(table_rows)
    assert len(steps) == len({r["step"] for r in table_rows})
    # Units: microseconds, from the rows' seconds.
    by_key = {}
    for r in table_rows:
        name = r["module"] + (" (backward)" if r["stage"] == "backward" else
                              ".step" if r["stage"] == "step" else "")
        by_key.setdefault((name, r["step"]), []).append(r)
    for e in calls:
        cands = [r for r in by_key.get((e["name"], e["args"]["step"]), [])
                 if abs((r["ts"] - base) * 1e6 - e["ts"]) < 1.0]
        assert len(cands) == 1, e
        r = cands[0]
        assert abs(e["dur"] - r["duration"] * 1e6) <= 1.0, (e, r)
        assert e["pid"] == r["pid"] and e["cat"] == r["stage"]
        if r["stage"] != "step":
            assert e["args"]["depth"] == r["depth"] and e["args"]["module"] == r["module"]
    # Every track nests properly (what Perfetto needs to draw it as a stack).
    tracks = {}
    for e in xs:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for evl in tracks.values():
        evl.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evl:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + 1e-3, (e, stack[-1])
            stack.append(end)
    names = {(e["name"], e["tid"]): e["args"]["name"] for e in meta
             if e["name"].endswith("_name")}
    pid = table_rows[0]["pid"]
    assert names[("process_name", 0)] == "pid %d" % pid
    assert names[("thread_name", STEPS_TID)] == "steps"
    assert names[("thread_name", pid)] == "MainThread"
    return xs


@harness.timeout(240)
@harness.params(torchenv.ALL, ids=torchenv.IDS)
def test_torch_chrome_export_and_saved_file(tv):
    t = Train(tv, "--steps", 4, "--pause-at", "0,4")
    t.wait_line("PAUSE 0")
    out = harness.tmp("steps.json")
    # Before the hooks: clear failures.
    p = harness.probing("export", "-p", t.pid, "--format", "chrome", "-o", out)
    assert p.returncode == 1 and "not loaded" in p.stderr, p.stderr
    inject(t.pid)
    p = harness.probing("export", "-p", t.pid, "--format", "chrome", "-o", out)
    assert p.returncode == 1 and "probing inject -p PID --torch" in p.stderr, p.stderr
    assert not os.path.exists(out)
    config(t.pid, "torch_every=1")
    inject(t.pid, "--torch")
    t.go("PAUSE 4")
    live = rows(t.pid)
    assert len(live) == 4 * (2 * len(MODULES) + 1)
    p = harness.probing("export", "-p", t.pid, "--format", "chrome", "-o", out)
    assert p.returncode == 0, p.stderr
    xs = check_chrome(out, live)
    # Saved into a recording file, the same table and the same trace come back from it.
    db = harness.tmp("saved.db")
    p = harness.probing("query", "-p", t.pid, "--save", db)
    assert p.returncode == 0 and "saved %d new rows" % len(live) in p.stderr, p.stderr
    p = harness.probing("query", "-p", t.pid, "--save", db, "SELECT count(*) AS n FROM "
                        "python.torch_trace")
    assert p.returncode == 0 and "saved 0 new rows" in p.stderr and re.search(
        r"\b%d\b" % len(live), p.stdout), p.stdout + p.stderr
    t.go()
    t.result()
    # The process is gone: the file has it all.
    for table in ("python.torch_trace", "torch_trace"):
        p = harness.probing("query", "-i", db, "-f", "json",
                            "SELECT * FROM %s ORDER BY seq" % table)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == live
    p = harness.probing("query", "-i", db, "SELECT command FROM processes")
    assert "torch_train.py" in p.stdout, p.stdout
    out2 = harness.tmp("steps2.json")
    p = harness.probing("export", "-i", db, "--format", "chrome", "-o", out2)
    assert p.returncode == 0, p.stderr
    with open(out) as a, open(out2) as b:
        da, db_ = json.load(a), json.load(b)
    assert da["traceEvents"] == db_["traceEvents"] and len(xs) > 0
    # Usage errors and files without a trace.
    p = harness.probing("query", "-i", db, "--save", harness.tmp("x.db"), "SELECT 1")
    assert p.returncode == 2 and "give -p PID" in p.stderr
    p = harness.probing("export", "-p", "1", "--format", "pprof", "-o", out2)
    assert p.returncode == 2
    plain = harness.tmp("plain.db")
    con = __import__("sqlite3").connect(plain)
    con.executescript("CREATE TABLE t(x); CREATE VIEW samples AS SELECT 1; "
                      "CREATE VIEW frames AS SELECT 1;")
    con.close()
    p = harness.probing("export", "-i", plain, "--format", "chrome", "-o", out2)
    assert p.returncode == 1 and "has no PyTorch trace" in p.stderr, p.stderr
