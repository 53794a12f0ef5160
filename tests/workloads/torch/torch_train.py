"""A tiny transformer trained on CPU, for the PyTorch-hooks tests (test_torch.py) and
bench/bench_torch.py.

    torch_train.py [--steps N] [--pause-at I,J,...] [--late-import] [--no-optimizer]
                   [--times FILE] [--size tiny|bench] [--seconds S] [--seed S]
                   [--spike MIB --spike-from I] [--compile BACKEND]

Prints "READY PID", then trains. Before iteration I of --pause-at (I == N: after the last
one) it prints "PAUSE I" and waits for a line on stdin, so a test can inject, configure or
remove hooks at known points. At the end: "RESULT loss=<float.hex> params=<sha256 of every
parameter's bytes>" (bit-identical runs print the same line). --times writes, as JSON, each
iteration's [start (perf_counter), end, wall-clock start]. --late-import waits for a stdin
line before importing torch. --seconds trains until that much time has passed (bench), and
prints "STEP <start> <end> <cpu>" per iteration (perf_counter, and the main thread's CPU
seconds, which other processes on a busy machine do not inflate). --spike adds a module
"spike" at the start of the model whose forward, from iteration --spike-from on, fills a
MIB MiB tensor and frees it before returning its input unchanged: a known transient peak.
--compile wraps the model in torch.compile(model, backend=BACKEND) (torch 2.x).

check_clean() (called through 'probing eval') lists every hook left in torch's registries,
on the modules, and on the optimizer classes, compared with the state before training.
"""
import argparse
import hashlib
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--pause-at", default="")
ap.add_argument("--late-import", action="store_true")
ap.add_argument("--no-optimizer", action="store_true")
ap.add_argument("--times")
ap.add_argument("--size", default="tiny", choices=("tiny", "bench"))
ap.add_argument("--seconds", type=float, default=0)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--spike", type=int, default=0)
ap.add_argument("--spike-from", type=int, default=0)
ap.add_argument("--compile", metavar="BACKEND", help="torch.compile the model with BACKEND")
args = ap.parse_args()
pauses = {int(x) for x in args.pause_at.split(",") if x.strip()}

print("READY %d" % os.getpid(), flush=True)


def pause(i):
    if i in pauses:
        print("PAUSE %d" % i, flush=True)
        if not sys.stdin.readline():
            sys.exit("torch_train: stdin closed")


if args.late_import:
    print("WAITING-IMPORT", flush=True)
    if not sys.stdin.readline():
        sys.exit("torch_train: stdin closed")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)  # deterministic and quiet on a 2-core machine


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.scale = d ** -0.5

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        a = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        return self.out(a @ v)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.norm2 = nn.LayerNorm(d)
        # ReLU(inplace=True): torch's full backward hooks would break this model.
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(inplace=True), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h = self.mlp(self.norm2(x))
        h.mul_(0.5)  # in place, on a module's output
        return x + h


class Encoder(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Spike(nn.Module):
    def __init__(self, mib):
        super().__init__()
        self.mib = mib
        self.active = False

    def forward(self, x):
        if self.active:
            t = torch.ones(self.mib << 18)  # float32: every page written, so resident
            del t
        return x


class TinyTransformer(nn.Module):
    def __init__(self, vocab, d, n):
        super().__init__()
        if args.spike:
            self.spike = Spike(args.spike)
        self.embed = nn.Embedding(vocab, d)
        self.encoder = Encoder(d, n)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        if args.spike:
            tokens = self.spike(tokens)
        return self.head(self.norm(self.encoder(self.embed(tokens))))


if args.size == "tiny":
    VOCAB, D, LAYERS, BATCH, SEQ = 64, 32, 2, 8, 16
else:
    VOCAB, D, LAYERS, BATCH, SEQ = 256, 64, 4, 8, 32

torch.manual_seed(args.seed)
model = TinyTransformer(VOCAB, D, LAYERS)
if args.compile:
    model = torch.compile(model, backend=args.compile)
loss_fn = nn.CrossEntropyLoss()
opt = None if args.no_optimizer else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
gen = torch.Generator().manual_seed(args.seed + 1)


def batch():
    t = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
    return t[:, :-1], t[:, 1:]


def _opt_classes():
    todo, seen = [torch.optim.Optimizer], []
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo.extend(type.__subclasses__(c))
    return seen


def _snapshot():
    import torch.nn.modules.module as M
    om = sys.modules["torch.optim.optimizer"]
    return {
        "steps": {c: c.__dict__.get("step") for c in _opt_classes()},
        "opt_dict": set(torch.optim.Optimizer.__dict__),
        "meta_path": list(sys.meta_path),
        "globals": {n: dict(getattr(M, n)) for n in dir(M)
                    if n.startswith("_global_") and isinstance(getattr(M, n), dict)},
        "opt_globals": {n: dict(getattr(om, n)) for n in dir(om)
                        if n.startswith("_global_") and isinstance(getattr(om, n), dict)},
        "full_bw": getattr(M, "_global_is_full_backward_hook", None),
    }


BEFORE = _snapshot()


def check_clean():
    """'clean', or what is left behind compared with BEFORE."""
    now = _snapshot()
    left = []
    for c, f in now["steps"].items():
        if c in BEFORE["steps"] and BEFORE["steps"][c] is not f:
            left.append("%s.step replaced" % c.__name__)
    if now["opt_dict"] != BEFORE["opt_dict"]:
        left.append("Optimizer attributes %s" % sorted(now["opt_dict"] ^ BEFORE["opt_dict"]))
    if now["meta_path"] != BEFORE["meta_path"]:
        left.append("sys.meta_path changed")
    for key in ("globals", "opt_globals"):
        for n, d in now[key].items():
            if d != BEFORE[key].get(n, {}):
                left.append("%s has %d entries" % (n, len(d)))
    if now["full_bw"] != BEFORE["full_bw"]:
        left.append("_global_is_full_backward_hook changed")
    for name, m in list(model.named_modules()) + [("loss_fn", loss_fn)]:
        for attr, v in vars(m).items():
            if "hooks" in attr and isinstance(v, dict) and v:
                left.append("%s.%s has %d entries" % (name or "model", attr, len(v)))
    if opt is not None and opt.step.__func__ is not BEFORE["steps"][type(opt)]:
        left.append("opt.step is not the original")
    for p in model.parameters():
        if getattr(p, "_backward_hooks", None):
            left.append("a parameter has tensor hooks")
            break
    return "clean" if not left else "; ".join(left)


def train_step():
    x, y = batch()
    logits = model(x)
    loss = loss_fn(logits.reshape(-1, VOCAB), y.reshape(-1))
    if opt is not None:
        opt.zero_grad()
    loss.backward()
    if opt is not None:
        opt.step()
    else:
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
                p.grad = None
    return loss


times = []
loss = None
if args.seconds:
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0, c0 = time.perf_counter(), time.thread_time()
        loss = train_step()
        t1, c1 = time.perf_counter(), time.thread_time()
        print("STEP %.6f %.6f %.6f" % (t0, t1, c1 - c0), flush=True)
else:
    for i in range(args.steps):
        pause(i)
        if args.spike:
            model.spike.active = i >= args.spike_from
        t0, w0 = time.perf_counter(), time.time()
        loss = train_step()
        times.append([t0, time.perf_counter(), w0])
    pause(args.steps)

h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().numpy().tobytes())
print("RESULT loss=%s params=%s" % (float(loss.detach()).hex(), h.hexdigest()), flush=True)
if args.times:
    with open(args.times, "w") as f:
        json.dump(times, f)
