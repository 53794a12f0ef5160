"""probing_torch: per-module PyTorch timings for 'probing inject -p PID --torch'.

Loaded by the agent as ``probing_torch`` (docs/torch.md). It serves the request kinds
``torch.install`` ({"wait": bool}), ``torch.remove`` and ``torch.status``, the live tables
``python.torch_trace`` (once hooks were installed) and ``python.torch_status``, and the
settings ``torch_*`` (``probing config``).

What is hooked, and why that way:

* Forward: torch's global module hooks (``register_module_forward_pre_hook`` and
  ``register_module_forward_hook``, public since torch 1.10, present in 1.13 and 2.x). They
  only observe: they return None, so inputs and outputs pass unchanged.
* Backward: hooks on the autograd graph's own nodes (``Node.register_prehook`` /
  ``Node.register_hook``), registered while the sampled step's forward builds the graph.
  Not ``register_module_full_backward_hook``: it wraps every module's inputs and outputs in
  ``BackwardHookFunction``, whose outputs are views, so any in-place op on a module's output
  (``nn.ReLU(inplace=True)``, ``x += 1``) then raises "Output 0 of
  BackwardHookFunctionBackward is a view and is being modified inplace" (torch 1.13 and
  2.x) -- it would break common models. Node hooks change nothing in the graph.
  A module's backward interval is [first of its nodes starts, last of its nodes ends]: its
  own nodes are found, once per sampled call, by walking from its outputs' ``grad_fn``
  towards its inputs' ``grad_fn`` (stopping at nodes already owned by its submodules,
  which report their own intervals); a parent's interval encloses its children's. These
  hooks live and die with the graph they are on (normally freed by its backward()); once
  their step is turned into rows they do nothing. Parameters' AccumulateGrad nodes, which
  outlive graphs, get none.
* Compiled models (``torch.compile``): Dynamo traces the global hooks into the model's
  frame; each hook returns at once there (``_compiling``). The wrapper torch.compile
  returns is named as the model it wraps (``name_root``).
* Optimizer steps: ``register_optimizer_step_pre_hook``/``..._post_hook`` where torch has
  them (2.x); otherwise (1.13) the ``step`` of every Optimizer subclass is wrapped (and
  ``Optimizer.__init_subclass__`` wraps classes defined later), and so is a ``step`` an
  optimizer instance already has of its own (an LR scheduler created before the install puts
  its counting wrapper there, which calls the class's original ``step``, bypassing the
  class wrapper); ``--torch=off`` puts every original back. Steps are counted by optimizer
  steps; until the first one is seen, each top-level call of the root model starts a step
  (inference, or no optimizer).
* Step numbers: the same training step gets the same number in every rank of a job, however
  late each was injected: where the optimizer keeps its own count (the per-parameter
  ``state['step']`` of Adam, AdamW, RMSprop...), else DDP's ``num_iterations`` of the root
  model, else an LR scheduler's ``optimizer._step_count``, a step is numbered from it (the
  step after N optimizer steps is N + 1); only without any of them does the numbering start
  at 1 at the install (python.torch_status.step_source says which).

Sampling: only every ``torch_every``-th step is recorded. Between recorded steps, once an
optimizer was seen, the module hooks are removed altogether (torch then takes its no-hook
fast path), so unrecorded steps cost one wrapper call per optimizer step.

Nothing here imports torch: it is used only when the target imported it already (or, with
``wait``, right after it does). Every hook catches its own errors (counted in
python.torch_status, and recording stops): the target's training must never see one.
"""
import _thread
import collections
import gc
import itertools
import os
import sys
import time
import warnings
import weakref

import probing_agent as agent

try:
    import resource  # getrusage: the cheap way to the peak RSS (_Hooks.peak_rss)
except ImportError:
    resource = None

_hooks = None  # the installed _Hooks, or None
_waiter = None  # the sys.meta_path finder of install(wait), or None
_wait_error = None  # why installing after the import failed
_table_registered = False

# The rows, kept across install/remove (so a trace can still be read and saved after off).
# Each row: (seq, step, module, stage, duration, allocated, max_allocated, reserved, ts,
# tid, depth); seq numbers every row this process recorded (dropped = seq - len).
_rows = collections.deque(maxlen=50000)
_seq = itertools.count()  # next(_seq) is atomic under the GIL, unlike "+= 1"
_last_seq = [0]

_perf = time.perf_counter


def _never():
    return False


# torch.compiler.is_compiling where torch has it. The hooks call it before anything else:
# Dynamo traces the global hooks into a compiled module's graph (they are called from the
# module's __call__), and every attribute of ours read there would become a guard of the
# compiled code -- a recompilation each time recording turns on or off.
_compiling = _never

# torch.compile's wrapper warns, at its calls, when any global module hook exists (ours
# are); the hooks make that warning a line in the job's log, or an exception under
# "-W error". It is ignored while the hooks are in (_Hooks.add_forward).
_COMPILE_HOOK_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


def _env_int(name):
    v = os.environ.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


class _Bwd(object):
    """The backward of one recorded module call: filled by node hooks, turned into a row
    when its step ends. Holds no reference to the graph (nodes or tensors)."""

    __slots__ = ("name", "depth", "step", "begin", "end", "mem", "mt", "tid", "children", "fb",
                 "fe", "h")

    def __init__(self, h, name, depth, step, children):
        self.h = h
        self.name = name
        self.depth = depth
        self.step = step
        self.begin = None
        self.end = None
        self.mem = None
        self.mt = 0.0  # when mem was read
        self.tid = None
        self.children = children
        self.fb = None
        self.fe = None

    # Node hooks run on whichever thread runs the backward, while the agent's thread may
    # finalize or remove everything between any two bytecodes: read self.h once, and never
    # let anything out (an exception here would fail the user's backward()).
    def pre(self, grad_outputs):
        # The node is about to run. Returning None leaves the gradients as they are.
        h = self.h
        if h is None:
            return None
        try:
            if h.sync:
                h.cuda_sync()
            t = _perf()
            if self.begin is None or t < self.begin:
                self.begin = t
                if self.tid is None:
                    self.tid = _thread.get_native_id()
        except Exception as e:  # noqa: BLE001
            h.fail(e)
        return None

    def post(self, grad_inputs, grad_outputs):
        # The node has run.
        h = self.h
        if h is None:
            return None
        try:
            if h.sync:
                h.cuda_sync()
            t = _perf()
            if self.end is None or t > self.end:
                self.end = t
                # Memory at the end, read at most every 50 us: most nodes are short.
                if h.memory and t - self.mt > 5e-5:
                    self.mem = h.mem()
                    self.mt = t
                if self.tid is None:
                    self.tid = _thread.get_native_id()
        except Exception as e:  # noqa: BLE001
            h.fail(e)
        return None


class _Frame(object):
    """A module call in progress on one thread."""

    __slots__ = ("module", "ent", "t0", "ins", "children", "exits", "recorded")

    def __init__(self, module, ent, recorded):
        self.module = module
        self.ent = ent
        self.recorded = recorded
        self.ins = None  # {id: grad_fn} of the tensor inputs (held: see Hooks.thread)
        self.children = []
        self.exits = []  # graph nodes where the submodules' walks stopped (freed at post)
        self.t0 = 0.0


def _tensors(out, Tensor):
    """The tensors of a module's output that have a grad_fn: the output itself, or the items
    of a tuple/list, or the values of a dict (first level, up to 32)."""
    if isinstance(out, Tensor):
        return (out,) if out.grad_fn is not None else ()
    if isinstance(out, (tuple, list)):
        items = out[:32]
    elif isinstance(out, dict):
        items = list(itertools.islice(out.values(), 32))
    else:
        return ()
    return [t for t in items if isinstance(t, Tensor) and t.grad_fn is not None]


class _Hooks(object):
    def __init__(self, torch):
        self.torch = torch
        self.Tensor = torch.Tensor
        self.M = torch.nn.modules.module
        self.Module = torch.nn.Module
        self.Optimizer = torch.optim.Optimizer
        self.grad_enabled = torch.is_grad_enabled
        global _compiling
        comp = getattr(getattr(torch, "compiler", None), "is_compiling", None)
        _compiling = comp if callable(comp) else _never
        self.inner = {}  # id(module torch.compile wrapped) -> weakref of the wrapper
        self.warn_filter = None
        self.pid = os.getpid()
        self.wall0 = time.time()
        self.perf0 = _perf()
        self.rank = _env_int("RANK")
        self.world_size = _env_int("WORLD_SIZE")
        self.local_rank = _env_int("LOCAL_RANK")
        self.names = {}  # id(module) -> (weakref, name, depth, is_root, child prefix)
        self.names_limit = 4096
        self.root_labels = {}  # label -> weakref of the root that has it
        self.resolve_times = collections.deque(maxlen=20)
        self.fwd_handles = []
        self.opt_handles = []  # torch 2.x global optimizer hooks
        self.wrapped = []  # (class, original step, our wrapper) on torch 1.x
        self.init_subclass = None  # (had one, previous) when Optimizer.__init_subclass__ set
        self.opt_counts = {}  # id(optimizer) -> [weakref, steps]
        self.opt_max = 0
        self.opt_mode = False
        self.primary = None  # weakref of the root whose top-level calls start steps
        self.started = False
        self.step = 0
        self.step_source = "local"  # where step numbers come from (torch_status)
        self.step_opt = None  # weakref of the optimizer whose count numbers the steps
        self.step_param = None  # weakref of the parameter whose state['step'] is read
        self.last_global = None  # that count at the last boundary
        self.inst_wrapped = []  # (weakref of an optimizer, its own step, our wrapper)
        self.recording = False
        self.gen = 0  # bumped at every step boundary: stale per-thread stacks are dropped
        self.tls = _thread._local()
        self.pending = []  # _Bwd of the recorded steps, in completion order (children first)
        acc = getattr(getattr(torch._C, "_functions", None), "AccumulateGrad", None)
        if acc is None:
            acc = type(torch.zeros(1, requires_grad=True).expand(1).grad_fn.next_functions[0][0])
        self.AccumulateGrad = acc
        self.errors = 0
        self.last_error = None
        self.cuda = None
        self.statm = None
        self.status = None
        self.peak = None  # peak_rss's reader, chosen at the first read
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.off = False
        self.load_settings()

    # ---- settings ------------------------------------------------------------------------
    def load_settings(self):
        self.every = agent.setting("torch_every")
        self.max_depth = agent.setting("torch_max_depth")
        self.backward = agent.setting("torch_backward")
        self.memory = agent.setting("torch_memory")
        self.sync = agent.setting("torch_sync")

    # ---- errors --------------------------------------------------------------------------
    def fail(self, e):
        """A hook failed: count it, keep the message, stop recording. Never raises."""
        try:
            self.errors += 1
            self.recording = False
            self.last_error = "%s: %s" % (type(e).__name__, e)
        except Exception:  # noqa: BLE001 - e.g. a str() that fails
            self.last_error = "an error in the hooks"

    # ---- measurements --------------------------------------------------------------------
    def cuda_sync(self):
        c = self.cuda
        if c is None and self.cuda_ready():
            c = self.cuda
        if c is not None:
            c.synchronize()

    def cuda_ready(self):
        # Never initialize CUDA ourselves: only use it once the program did.
        cuda = getattr(self.torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():
            self.cuda = cuda
            return True
        return False

    def mem(self):
        """(allocated, max_allocated, reserved): CUDA's caching allocator on the current
        device when CUDA is in use, else (RSS of the process, peak RSS of the process, None).
        (The kernel's RSS counters lag by up to 64 pages per thread, so two reads can
        disagree by that much: a peak below the RSS read with it is that RSS.)"""
        c = self.cuda
        if c is not None or self.cuda_ready():
            c = self.cuda
            return (c.memory_allocated(), c.max_memory_allocated(), c.memory_reserved())
        fd = self.statm
        if fd is None:
            fd = self.statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        rss = int(os.pread(fd, 64, 0).split()[1]) * self.page
        return (rss, max(rss, self.peak_rss()), None)

    def peak_rss(self):
        """The peak RSS of this process since it started, in bytes: the kernel's high-water
        mark (VmHWM in /proc/self/status), which a transient allocation freed before the row
        is read still raised. Never reset (that would take writing /proc/self/clear_refs,
        which changes what every other tool reads), so it only grows, like CUDA's
        max_memory_allocated() when the program does not reset it.

        getrusage()'s ru_maxrss is the same mark for a fifth of the cost of reading the
        status file, except that it also covers what the process was before its exec (a
        launcher that forked or vforked it, torchrun's agent say): it is used once seen to
        be no higher than VmHWM, i.e. when the process itself holds the peak."""
        peak = self.peak
        if peak is None:
            fd = self.status = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)

            def vm_hwm():
                s = os.pread(fd, 16384, 0)
                i = s.index(b"VmHWM:") + 6
                return int(s[i:s.index(b"kB", i)]) * 1024

            peak = vm_hwm
            if resource is not None:
                getrusage, who = resource.getrusage, resource.RUSAGE_SELF
                if getrusage(who).ru_maxrss * 1024 <= vm_hwm():
                    peak = (lambda: getrusage(who).ru_maxrss * 1024)
            self.peak = peak
        return peak()

    def row(self, step, name, stage, dur, mem, t0, tid, depth):
        rows = _rows
        seq = next(_seq)
        if mem is None:
            mem = (None, None, None)
        rows.append((seq, step, name, stage, dur, mem[0], mem[1], mem[2],
                     self.wall0 + (t0 - self.perf0), tid, depth))
        if seq >= _last_seq[0]:
            _last_seq[0] = seq + 1

    # ---- per-thread state ----------------------------------------------------------------
    def thread(self):
        """This thread's state: its stack of module calls in progress, and ``claimed``, the
        graph nodes that recorded module calls of the current top-level forward own.

        Graph nodes are keyed by id() of their Python wrapper, which is only stable while
        the wrapper lives: torch caches one wrapper per node but frees it with its last
        reference, and a new wrapper (of another node) may then get the same id. So the
        wrappers are held (in ``claimed`` and in the frames) until the top-level call
        returns -- the graph itself lives longer than that anyway.
        """
        tls = self.tls
        try:
            if tls.gen == self.gen:
                return tls
        except AttributeError:
            tls.tid = _thread.get_native_id()
            tls.opt_depth = 0
            tls.opt_t0 = []
        tls.gen = self.gen
        tls.stack = []
        tls.claimed = {}
        return tls

    # ---- module names --------------------------------------------------------------------
    def name_root(self, root):
        """Name ROOT by its class (Model, or Model#2 when another root has that name) and
        its submodules by their qualified path (encoder.layers.3.attn).

        The wrapper torch.compile(model) returns (OptimizedModule) is named as the model it
        wraps, and the model's submodules as the model's: the wrapper's call is the model's
        call (the model's own call inside it records nothing), and submodules that run
        eagerly (a graph break, a fallback) have the names they have uncompiled."""
        cls = type(root)
        skip, inner = "", None
        if cls.__name__ == "OptimizedModule" and cls.__module__.startswith("torch._dynamo"):
            inner = root.__dict__.get("_modules", {}).get("_orig_mod")
            if inner is not None:
                cls = type(inner)
                skip = "_orig_mod"
                self.inner[id(inner)] = weakref.ref(root)
        label = cls.__name__
        k = 1
        while True:
            other = self.root_labels.get(label)
            if other is None or other() is None or other() is root or (
                    inner is not None and other() is inner):
                break
            k += 1
            label = "%s#%d" % (cls.__name__, k)
        self.root_labels[label] = weakref.ref(root)
        prefix = "" if k == 1 else label + "."
        ent = (weakref.ref(root), label, 0, True, prefix)
        self.names[id(root)] = ent
        for qual, sub in root.named_modules():
            if skip:
                if qual == skip:
                    self.names[id(sub)] = (weakref.ref(sub), label, 0, True, prefix)
                    continue
                qual = qual[len(skip) + 1:]
            if not qual:
                continue
            old = self.names.get(id(sub))
            if old is not None and old[0]() is sub:
                continue  # shared: keeps its first name
            self.names[id(sub)] = (weakref.ref(sub), prefix + qual, qual.count(".") + 1, False,
                                   prefix + qual + ".")
        return ent

    def scan(self):
        """The one gc scan: every module alive now, named from the roots of their trees
        (the largest tree first, so the model gets the plain names).

        Found by agent.instances() (gc.get_objects() filtered in C: see there why).
        """
        try:
            mods = agent.instances(self.Module)
        except Exception:  # noqa: BLE001 - no native side: names come lazily, on first call
            return 0, 0
        children = set()
        for m in mods:
            d = m.__dict__.get("_modules")
            if not isinstance(d, dict):
                continue
            for c in d.values():
                if c is not None:
                    children.add(id(c))
        roots = [m for m in mods if id(m) not in children]
        sized = []
        for r in roots:
            try:
                sized.append((-sum(1 for _ in r.modules()), len(sized), r))
            except Exception:  # noqa: BLE001 - a broken module tree: skip it
                continue
        sized.sort()
        for _, _, r in sized:
            try:
                self.name_root(r)
            except Exception:  # noqa: BLE001
                continue
        return len(mods), len(sized)

    def resolve(self, m, stack):
        """The name entry of a module not seen before (lazily, on its first call)."""
        if len(self.names) > self.names_limit:
            # Programs that create modules as they go: forget the dead ones.
            self.names = {k: v for k, v in self.names.items() if v[0]() is not None}
            self.names_limit = max(4096, 2 * len(self.names))
        cls = type(m).__name__
        if not stack:
            # A module called at top level that was not alive at install: a new root.
            # Naming its tree walks it; rate-limited so that code creating modules on every
            # call cannot turn this into a cost.
            now = _perf()
            rt = self.resolve_times
            if len(rt) == rt.maxlen and now - rt[0] < 1.0:
                return (weakref.ref(m), cls, 0, True, "")
            rt.append(now)
            return self.name_root(m)
        parent = stack[-1]
        pm, pent = parent.module, parent.ent
        d = pm.__dict__.get("_modules") or {}
        key = None
        for k, v in d.items():
            if v is m:
                key = k
                break
        if key is not None:
            ent = (weakref.ref(m), pent[4] + key, pent[2] + 1, False, pent[4] + key + ".")
        else:
            # Not a direct child (a module passed in, or a grandchild called directly).
            qual = None
            now = _perf()
            rt = self.resolve_times
            if not (len(rt) == rt.maxlen and now - rt[0] < 1.0):
                rt.append(now)
                for q, sub in pm.named_modules():
                    if sub is m and q:
                        qual = q
                        break
            if qual is not None:
                name, depth = pent[4] + qual, pent[2] + qual.count(".") + 1
            else:
                name, depth = "%s<%s>" % (pent[4], cls), pent[2] + 1
            ent = (weakref.ref(m), name, depth, False, name + ".")
        self.names[id(m)] = ent
        return ent

    # ---- steps -----------------------------------------------------------------------------
    def boundary(self, opt=None):
        """A step starts (a top-level call of the root model, or an optimizer step ended:
        OPT is that optimizer)."""
        if os.getpid() != self.pid:
            # A forked child inherited the hooks: it records nothing (its parent owns them).
            self.recording = False
            self.started = False
            self.remove_forward()
            return
        self.finalize()
        n = self.next_step(opt)
        if n is not None:
            self.step = n
        elif not self.started:
            self.step = 1
        else:
            self.step += 1
        self.started = True
        self.gen += 1
        # The first error stops recording for good (python.torch_status says why).
        self.recording = (self.step - 1) % self.every == 0 and not self.off and not self.errors
        if self.opt_mode:
            if self.recording:
                self.add_forward()
            else:
                self.remove_forward()

    # ---- step numbers shared by every rank ------------------------------------------------
    def next_step(self, opt):
        """The number of the step starting now, from a count every rank of a job shares
        (the optimizer's own, DDP's, an LR scheduler's), or None: count locally. OPT is the
        optimizer that has just stepped, None at a forward-mode boundary."""
        if opt is not None:
            self.step_opt = weakref.ref(opt)
        o = self.step_opt() if self.step_opt is not None else None
        if o is None:
            self.step_source = "local"
            return None
        n, src = self.global_steps(o)
        if n is not None and self.last_global is not None and n < self.last_global:
            n = None  # a count that went back (a new optimizer, a reset): not ours to follow
        if n is not None and opt is None and n + 1 <= self.step:
            # Forward mode, no optimizer step since the last boundary (several forwards per
            # step, evaluation): numbered on from there.
            n = None
        if n is None:
            self.step_source = "local"
            return None
        self.step_source = src
        self.last_global = n
        return n + 1

    def global_steps(self, opt):
        """(optimizer steps taken so far, source) from OPT's own state, DDP's count or an
        LR scheduler's count; (None, "local") if none of them is there."""
        n = self.state_steps(opt)
        if n is not None:
            return n, "optimizer_state"
        p = self.primary() if self.primary is not None else None
        ddp = getattr(getattr(self.torch.nn, "parallel", None), "DistributedDataParallel", None)
        ni = getattr(p, "num_iterations", None) if p is not None else None
        if ddp is not None and isinstance(p, ddp) and isinstance(ni, int):
            return ni, "ddp"
        sc = getattr(opt, "_step_count", None)
        if isinstance(sc, int) and not isinstance(sc, bool):
            return sc, "scheduler"
        return None, "local"

    def state_steps(self, opt):
        """The per-parameter step count of OPT's state (max over the parameters: one that
        had no gradient in some step lags), read from one parameter once it is known."""
        state = getattr(opt, "state", None)
        if not isinstance(state, dict) or not state:
            return None
        p = self.step_param() if self.step_param is not None else None
        s = state.get(p) if p is not None else None
        n = self.step_value(s)
        if n is not None and (self.last_global is None or n > self.last_global):
            return n
        best = None
        for k, v in list(state.items()):
            m = self.step_value(v)
            if m is not None and (best is None or m > best[0]):
                best = (m, k)
        if best is None:
            return None
        try:
            self.step_param = weakref.ref(best[1])
        except TypeError:
            self.step_param = None
        return best[0]

    def step_value(self, s):
        v = s.get("step") if isinstance(s, dict) else None
        if v is None or isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return int(v)
        if isinstance(v, self.Tensor):
            # A CUDA count (capturable=True): .item() would synchronize the device.
            if v.device.type != "cpu" or v.numel() != 1:
                return None
            return int(v.item())
        return None

    def finalize(self):
        """Turn the backward intervals collected so far into rows. Their node hooks stay on
        the graph (it is normally freed by its backward() already) but do nothing any more:
        rec.h is cleared."""
        pend, self.pending = self.pending, []
        for rec in pend:
            b, e, mem = rec.begin, rec.end, rec.mem
            tid = rec.tid
            for c in rec.children:
                if c.fb is not None and (b is None or c.fb < b):
                    b = c.fb
                    if tid is None:
                        tid = c.tid
                if c.fe is not None and (e is None or c.fe > e):
                    e = c.fe
                    mem = c.mem
            rec.fb, rec.fe = b, e
            rec.tid = tid
            if b is not None and e is not None and e >= b:
                self.row(rec.step, rec.name, "backward", e - b, mem, b, tid, rec.depth)
            rec.h = None

    # ---- module hooks --------------------------------------------------------------------
    def add_forward(self):
        if self.fwd_handles:
            return
        M = self.M
        self.fwd_handles = [M.register_module_forward_pre_hook(self.fwd_pre),
                            M.register_module_forward_hook(self.fwd_post)]

    def remove_forward(self):
        hs, self.fwd_handles = self.fwd_handles, []
        for hd in hs:
            hd.remove()

    def fwd_pre(self, module, inputs):
        if _compiling():  # first (see _compiling)
            return None
        try:
            if self.off or (self.opt_mode and not self.recording):
                return None
            p = self.primary
            if p is not None and not self.recording:
                # Forward mode between recorded steps: only a top-level call of the primary
                # root matters (it starts a step). Nothing is on the stacks then.
                pm = p()
                if pm is None:
                    self.primary = None  # the model is gone: the next root call takes over
                elif pm is not module or self.thread().stack:
                    return None
            tls = self.thread()
            stack = tls.stack
            ent = self.names.get(id(module))
            if ent is None or ent[0]() is not module:
                ent = self.resolve(module, stack)
            if stack and self.inner:
                w = self.inner.get(id(module))
                if w is not None and stack[-1].module is w():
                    return None  # the compiled module's call: its wrapper's row is its row
            if not stack:
                if ent[3] and not self.opt_mode:
                    p = self.primary
                    if p is None or p() is None:
                        self.primary = p = weakref.ref(module)
                    if p() is module:
                        self.boundary()
                        tls = self.thread()
                        stack = tls.stack
                tls.claimed = {}
            if not self.recording:
                return None
            md = self.max_depth
            fr = _Frame(module, ent, md == 0 or ent[2] <= md)
            if fr.recorded and self.backward and self.grad_enabled():
                Tensor = self.Tensor
                ins = {}
                for x in inputs:
                    if isinstance(x, Tensor):
                        g = x.grad_fn
                        if g is not None:
                            ins[id(g)] = g
                fr.ins = ins
            stack.append(fr)
            if self.sync:
                self.cuda_sync()
            fr.t0 = _perf()
        except Exception as e:  # noqa: BLE001 - never into the user's forward
            self.fail(e)
        return None

    def fwd_post(self, module, inputs, output):
        if _compiling():  # first (see _compiling)
            return None
        if self.sync and self.recording:
            try:
                self.cuda_sync()
            except Exception as e:  # noqa: BLE001
                self.fail(e)
        t1 = _perf()
        if not self.recording:
            return None
        try:
            tls = self.thread()
            stack = tls.stack
            if not stack or stack[-1].module is not module:
                # Its pre-hook ran before the install or in another step, or a submodule
                # raised: drop the frames above it, or ignore the call.
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i].module is module:
                        del stack[i + 1:]
                        break
                else:
                    return None
            fr = stack.pop()
            if fr.recorded:
                ent = fr.ent
                self.row(self.step, ent[1], "forward", t1 - fr.t0,
                         self.mem() if self.memory else None, fr.t0, tls.tid, ent[2])
                if fr.ins is not None:
                    self.backward_setup(fr, output, stack, tls.claimed)
            if not stack:
                tls.claimed = {}  # the top-level call is over: let go of the graph
        except Exception as e:  # noqa: BLE001
            self.fail(e)
        return None

    def backward_setup(self, fr, output, stack, claimed):
        """Hook the graph nodes this module call created (see the module docstring)."""
        stop = fr.ins
        ent = fr.ent
        rec = _Bwd(self, ent[1], ent[2], self.step, fr.children)
        acc = self.AccumulateGrad
        starts = []
        for t in _tensors(output, self.Tensor):
            starts.append(t.grad_fn)  # an input passed through or a submodule's: skipped below
        starts.extend(fr.exits)
        fr.exits = None
        exits = {}
        pre, post = rec.pre, rec.post
        n = 0
        while starts:
            node = starts.pop()
            i = id(node)
            if i in stop:
                exits[i] = node
                continue
            if i in claimed:
                continue
            claimed[i] = node
            if type(node) is acc:
                # A parameter's gradient accumulator: it outlives the graph (the next step
                # reuses it while it lives), so it gets no hook; it only adds the gradient.
                continue
            # Both hooks on every node: an in-place op on the output of a module that is a
            # view (3-D nn.Linear) rebases the graph, and the output's own node never runs.
            # Hooks on graph nodes go with the graph: no handle is kept.
            node.register_prehook(pre)
            node.register_hook(post)
            n += 1
            if n >= 4096:
                break  # a runaway walk (an input we could not see): stop here
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    starts.append(nxt)
        if n or fr.children:
            self.pending.append(rec)
            for parent in reversed(stack):
                if parent.recorded:
                    parent.children.append(rec)
                    parent.exits.extend(exits.values())
                    break

    # ---- optimizer hooks -----------------------------------------------------------------
    def opt_pre(self, opt):
        tls = self.thread()
        tls.opt_depth += 1
        if tls.opt_depth > 1:
            return None  # a subclass's step calling super().step(): one step
        if self.recording:
            self.finalize()  # the step's backward is over
        if self.sync and self.recording:
            self.cuda_sync()
        return _perf()

    def opt_post(self, opt, t0, ok):
        tls = self.thread()
        if tls.opt_depth > 0:
            tls.opt_depth -= 1
        if t0 is None or not ok or self.off:
            return
        if self.sync and self.recording:
            self.cuda_sync()
        t1 = _perf()
        if self.recording:
            self.row(self.step, type(opt).__name__, "step", t1 - t0,
                     self.mem() if self.memory else None, t0, tls.tid, None)
        ent = self.opt_counts.get(id(opt))
        if ent is None or ent[0]() is not opt:
            try:
                ref = weakref.ref(opt)
            except TypeError:
                ref = (lambda: None)
            ent = self.opt_counts[id(opt)] = [ref, 0]
        ent[1] += 1
        # With several optimizers (GANs), the step advances with the one that steps most.
        if ent[1] > self.opt_max:
            self.opt_max = ent[1]
            self.opt_mode = True
            self.boundary(opt)

    def opt_pre_hook(self, opt, args, kwargs):  # torch 2.x global hook
        if _compiling():  # a compiled optimizer step: not seen (see _compiling)
            return None
        try:
            self.thread().opt_t0.append(self.opt_pre(opt))
        except Exception as e:  # noqa: BLE001
            self.fail(e)
        return None

    def opt_post_hook(self, opt, args, kwargs):  # torch 2.x global hook
        if _compiling():
            return None
        try:
            st = self.thread().opt_t0
            self.opt_post(opt, st.pop() if st else None, True)
        except Exception as e:  # noqa: BLE001
            self.fail(e)
        return None

    def wrap_class(self, cls):
        """torch 1.x: wrap CLS.step (its own, not an inherited one) once."""
        orig = cls.__dict__.get("step")
        if orig is None or getattr(orig, "__probing_torch__", False) or not callable(orig):
            return
        import functools
        hooks = self

        @functools.wraps(orig)
        def step(*args, **kwargs):
            if _hooks is not hooks or not args:
                return orig(*args, **kwargs)
            opt = args[0]
            try:
                t0 = hooks.opt_pre(opt)
            except Exception as e:  # noqa: BLE001
                hooks.fail(e)
                return orig(*args, **kwargs)
            ok = False
            try:
                out = orig(*args, **kwargs)
                ok = True
                return out
            finally:
                try:
                    hooks.opt_post(opt, t0, ok)
                except Exception as e:  # noqa: BLE001
                    hooks.fail(e)

        step.__probing_torch__ = True
        # Optimizer._hook_for_profile (1.x) wraps a class's step once, at the first
        # instance, unless step.hooked: ours says so, or it would wrap our wrapper and we
        # could not put the original back.
        step.hooked = True
        type.__setattr__(cls, "step", step)
        self.wrapped.append((cls, orig, step))

    def wrap_instance(self, opt):
        """torch 1.x: an optimizer whose instance has a step of its own (an LR scheduler's
        counting wrapper, made before the install: it calls the class's original step, not
        our class wrapper) gets it wrapped too. Nested calls count once (opt_pre)."""
        inst = opt.__dict__.get("step")
        if inst is None or getattr(inst, "__probing_torch__", False) or not callable(inst):
            return
        import functools
        hooks = self
        ref = weakref.ref(opt)  # no cycle: the optimizer holds this function

        @functools.wraps(inst)
        def step(*args, **kwargs):
            o = ref()
            if _hooks is not hooks or o is None:
                return inst(*args, **kwargs)
            try:
                t0 = hooks.opt_pre(o)
            except Exception as e:  # noqa: BLE001
                hooks.fail(e)
                return inst(*args, **kwargs)
            ok = False
            try:
                out = inst(*args, **kwargs)
                ok = True
                return out
            finally:
                try:
                    hooks.opt_post(o, t0, ok)
                except Exception as e:  # noqa: BLE001
                    hooks.fail(e)

        step.__probing_torch__ = True
        opt.__dict__["step"] = step
        self.inst_wrapped.append((ref, inst, step))

    def find_optimizers(self):
        """The optimizers alive at the install: those with a step of their own are wrapped,
        and the one that has taken the most steps numbers the steps until one steps."""
        try:
            opts = agent.instances(self.Optimizer)
        except Exception:  # noqa: BLE001 - no native side: found when they step
            return
        best = None
        for o in opts:
            try:
                if self.opt_handles == []:
                    self.wrap_instance(o)
                n, _ = self.global_steps(o)
            except Exception:  # noqa: BLE001 - a broken optimizer: leave it alone
                continue
            if best is None or (n is not None and (best[0] is None or n > best[0])):
                best = (n, o)
        if best is not None:
            self.step_opt = weakref.ref(best[1])
            self.step_param = None

    def add_optimizer(self):
        om = sys.modules.get("torch.optim.optimizer")
        pre = getattr(om, "register_optimizer_step_pre_hook", None) if om else None
        post = getattr(om, "register_optimizer_step_post_hook", None) if om else None
        if pre is not None and post is not None:
            self.opt_handles = [pre(self.opt_pre_hook), post(self.opt_post_hook)]
            return "register_optimizer_step_pre_hook/register_optimizer_step_post_hook"
        todo = list(type.__subclasses__(self.Optimizer))
        seen = set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            self.wrap_class(c)
            todo.extend(type.__subclasses__(c))
        Opt = self.Optimizer
        had = "__init_subclass__" in Opt.__dict__
        prev = Opt.__dict__.get("__init_subclass__")

        def __init_subclass__(cls, **kwargs):
            if prev is not None:
                prev.__get__(None, cls)(**kwargs)
            else:
                super(Opt, cls).__init_subclass__(**kwargs)
            h = _hooks
            if h is not None:
                try:
                    h.wrap_class(cls)
                except Exception as e:  # noqa: BLE001
                    h.fail(e)

        mine = classmethod(__init_subclass__)
        type.__setattr__(Opt, "__init_subclass__", mine)
        self.init_subclass = (had, prev, mine)
        return "Optimizer.step wrapped in %d classes" % len(self.wrapped)

    def remove_optimizer(self):
        for hd in self.opt_handles:
            hd.remove()
        self.opt_handles = []
        for ref, inst, mine in reversed(self.inst_wrapped):
            o = ref()
            if o is not None and o.__dict__.get("step") is mine:
                o.__dict__["step"] = inst
        self.inst_wrapped = []
        for cls, orig, mine in reversed(self.wrapped):
            # Only if it is still ours: code that replaced it since keeps its own (ours, if
            # it wraps it, passes calls through once _hooks is not ours).
            if cls.__dict__.get("step") is mine:
                type.__setattr__(cls, "step", orig)
        self.wrapped = []
        if self.init_subclass is not None:
            had, prev, mine = self.init_subclass
            Opt = self.Optimizer
            if Opt.__dict__.get("__init_subclass__") is mine:
                if had:
                    type.__setattr__(Opt, "__init_subclass__", prev)
                else:
                    type.__delattr__(Opt, "__init_subclass__")
            self.init_subclass = None

    # ---- install / remove ----------------------------------------------------------------
    def quiet_compile_warning(self):
        if self.warn_filter is None and hasattr(self.torch, "compile"):
            warnings.filterwarnings("ignore", _COMPILE_HOOK_WARNING, UserWarning)
            self.warn_filter = warnings.filters[0]

    def restore_compile_warning(self):
        f, self.warn_filter = self.warn_filter, None
        if f is None:
            return
        try:
            warnings.filters.remove(f)
        except ValueError:
            return  # the program reset its filters
        mutated = getattr(warnings, "_filters_mutated", None)
        if mutated is not None:
            mutated()  # the C side caches the filters' version

    def install(self, scan=True):
        nmods, nroots = self.scan() if scan else (0, 0)
        try:
            self.quiet_compile_warning()
            opt = self.add_optimizer()
            if scan:
                self.find_optimizers()
            self.add_forward()
        except BaseException:
            self.remove()  # all or nothing
            raise
        return {"modules": nmods, "roots": nroots, "optimizer_hooks": opt,
                "module_hooks": "register_module_forward_pre_hook/register_module_forward_hook",
                "backward_hooks": "autograd graph node hooks (register_prehook/register_hook)"}

    def remove(self):
        self.off = True
        self.recording = False
        try:
            self.finalize()
        finally:
            self.remove_forward()
            self.remove_optimizer()
            self.restore_compile_warning()
            for fd in (self.statm, self.status):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.statm = self.status = self.peak = None


# ---- the table ---------------------------------------------------------------------------
_COLUMNS = [
    ("step", "INTEGER", "training step: the optimizer's own count + 1 where it keeps one "
     "(the same number in every rank), else counted from 1 at the install (see "
     "python.torch_status.step_source)"),
    ("module", "TEXT", "qualified module name in its root model (encoder.layers.3.attn); the "
     "root by its class name; for stage 'step' the optimizer's class"),
    ("stage", "TEXT", "'forward', 'backward' or 'step' (optimizer.step)"),
    ("duration", "REAL", "seconds"),
    ("allocated", "INTEGER", "bytes at the end: CUDA memory_allocated() when CUDA is in use, "
     "else the process's RSS"),
    ("max_allocated", "INTEGER", "bytes: CUDA max_memory_allocated() (peak since start or "
     "the program's last reset), else the process's peak RSS since it started (VmHWM)"),
    ("ts", "REAL", "start, unix seconds"),
    ("rank", "INTEGER", "$RANK of the process (torchrun), NULL if unset"),
    ("reserved", "INTEGER", "CUDA memory_reserved(), NULL without CUDA"),
    ("world_size", "INTEGER", "$WORLD_SIZE, NULL if unset"),
    ("local_rank", "INTEGER", "$LOCAL_RANK, NULL if unset"),
    ("pid", "INTEGER", "process id"),
    ("tid", "INTEGER", "native id of the thread the call ran on (backward: where the "
     "autograd engine ran it)"),
    ("thread", "TEXT", "that thread's name, NULL if it is not a threading.Thread"),
    ("depth", "INTEGER", "nesting in the module tree: 0 = the root, NULL for 'step'"),
    ("seq", "INTEGER", "row number in this process (gaps: rows dropped)"),
]


def _thread_names():
    out = {}
    threading = sys.modules.get("threading")
    if threading is None:
        return out
    for t in list(getattr(threading, "_active", {}).values()):
        nid = getattr(t, "native_id", None)
        if nid is not None:
            out[nid] = t.name
    return out


def _trace_rows():
    h = _hooks
    rank = h.rank if h else _env_int("RANK")
    ws = h.world_size if h else _env_int("WORLD_SIZE")
    lr = h.local_rank if h else _env_int("LOCAL_RANK")
    pid = os.getpid()
    names = _thread_names()
    for r in list(_rows):  # list() copies in C: other threads may append meanwhile
        yield (r[1], r[2], r[3], r[4], r[5], r[6], r[8], rank, r[7], ws, lr, pid, r[9],
               names.get(r[9]), r[10], r[0])


def _register_table():
    global _table_registered
    if not _table_registered:
        agent.register_table("python", "torch_trace", _COLUMNS, _trace_rows,
                             "per-module forward/backward and optimizer step timings "
                             "(probing inject --torch)")
        _table_registered = True


def _status():
    h = _hooks
    torch = sys.modules.get("torch")
    n = len(_rows)
    total = _last_seq[0]
    return {
        "installed": h is not None,
        "waiting": _waiter is not None,
        "torch": getattr(torch, "__version__", None) if torch is not None else None,
        "mode": (("optimizer" if h.opt_mode else "forward") if h else None),
        "step": h.step if h else None,
        "recording": bool(h and h.recording),
        "rows": n,
        "dropped": max(0, total - n),
        "max_rows": _rows.maxlen,
        "every": agent.setting("torch_every"),
        "max_depth": agent.setting("torch_max_depth"),
        "modules_named": len(h.names) if h else 0,
        "errors": h.errors if h else 0,
        "last_error": (h.last_error if h else None) or _wait_error,
        "step_source": h.step_source if h else None,
    }


_STATUS_COLUMNS = [
    ("installed", "INTEGER", "1 while the hooks are installed"),
    ("waiting", "INTEGER", "1 while waiting for 'import torch' (--torch=wait)"),
    ("torch", "TEXT", "torch.__version__, NULL if torch is not imported"),
    ("mode", "TEXT", "'optimizer' (steps counted by optimizer steps) or 'forward' (by "
     "top-level calls of the root model, until an optimizer step is seen)"),
    ("step", "INTEGER", "the current step"),
    ("recording", "INTEGER", "1 if the current step is recorded (see torch_every)"),
    ("rows", "INTEGER", "rows held in python.torch_trace"),
    ("dropped", "INTEGER", "oldest rows dropped to stay within torch_max_rows"),
    ("max_rows", "INTEGER", "torch_max_rows"),
    ("every", "INTEGER", "torch_every"),
    ("max_depth", "INTEGER", "torch_max_depth"),
    ("modules_named", "INTEGER", "modules with a known name"),
    ("errors", "INTEGER", "hook failures (recording stops at the first; see last_error)"),
    ("last_error", "TEXT", "the last failure"),
    ("step_source", "TEXT", "where step numbers come from: 'optimizer_state' (the "
     "optimizer's per-parameter step count), 'ddp' (DistributedDataParallel's "
     "num_iterations), 'scheduler' (an LR scheduler's optimizer._step_count): the same in "
     "every rank; 'local' (counted from 1 at the install)"),
]


def _status_rows():
    s = _status()
    return [[s[c[0]] for c in _STATUS_COLUMNS]]


# ---- waiting for 'import torch' ----------------------------------------------------------
class _TorchFinder(object):
    """sys.meta_path entry for --torch=wait: asked about every new import until the one of
    'torch' (a dict lookup and a compare each), then it removes itself and has the hooks
    installed as soon as torch's __init__ has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        _unwait()
        spec = None
        for f in list(sys.meta_path):
            fs = getattr(f, "find_spec", None)
            if fs is None:
                continue
            spec = fs(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        orig = loader.exec_module
        had = "exec_module" in getattr(loader, "__dict__", {})

        def exec_module(module):
            try:
                orig(module)
            finally:
                # Put the loader back as it was (the instance attribute is ours).
                try:
                    if had:
                        loader.exec_module = orig
                    else:
                        del loader.exec_module
                except Exception:  # noqa: BLE001
                    pass
            _install_after_import(module)

        try:
            loader.exec_module = exec_module
        except Exception:  # noqa: BLE001 - a loader we cannot annotate: say so in status
            global _wait_error
            _wait_error = "could not hook the import of torch (loader %r)" % type(loader)
            return None
        return spec


def _install_after_import(module):
    global _wait_error
    try:
        r = _install(module, scan=False)  # no module exists yet: nothing to scan
        if r.get("error"):
            _wait_error = r["error"]
    except Exception as e:  # noqa: BLE001 - never into the user's 'import torch'
        _wait_error = "installing the hooks after 'import torch' failed: %s: %s" % (
            type(e).__name__, e)


def _unwait():
    global _waiter
    w = _waiter
    _waiter = None
    if w is not None:
        try:
            sys.meta_path.remove(w)
        except ValueError:
            pass


# ---- request kinds -----------------------------------------------------------------------
def _torch_ready():
    """torch if it is imported and finished importing, else (None, reason)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "not_imported"
    spec = getattr(torch, "__spec__", None)
    if getattr(spec, "_initializing", False) or not hasattr(torch, "optim") or not hasattr(
            torch, "nn"):
        return None, "importing"
    return torch, None


def _install(torch, scan=True):
    global _hooks
    if _hooks is not None:
        return dict(_status(), already=True)
    h = _Hooks(torch)
    info = h.install(scan)
    _hooks = h
    _register_table()
    return dict(_status(), **info)


def _k_install(args):
    global _waiter, _wait_error
    wait = bool(args.get("wait"))
    torch, why = _torch_ready()
    if torch is None:
        if why == "importing":
            return dict(_status(), error="torch is being imported right now in this "
                        "process: try again in a moment", reason=why)
        if not wait:
            return dict(_status(), error="torch is not imported in this process", reason=why)
        if _waiter is None:
            _wait_error = None
            _waiter = _TorchFinder()
            sys.meta_path.insert(0, _waiter)
        return _status()
    _unwait()
    return _install(torch)


def _k_remove(args):
    global _hooks
    was_waiting = _waiter is not None
    _unwait()
    h = _hooks
    _hooks = None
    if h is not None:
        h.remove()
    return dict(_status(), removed=h is not None, was_waiting=was_waiting)


def _k_status(args):
    return _status()


def _set_max_rows(n):
    global _rows
    _rows = collections.deque(_rows, maxlen=n)  # keeps the newest n


def _changed(value):
    h = _hooks
    if h is not None:
        h.load_settings()


agent.register_setting("torch_every", 10,
                       "record every Nth training step of the PyTorch hooks (1 = every step)",
                       parse=lambda t: agent.parse_int(t, 1, 1000000), on_change=_changed)
agent.register_setting("torch_max_depth", 0,
                       "record modules down to this depth in the module tree (0 = all; 1 = "
                       "the root's children)", parse=lambda t: agent.parse_int(t, 0, 1000),
                       on_change=_changed)
agent.register_setting("torch_max_rows", 50000,
                       "rows kept in python.torch_trace (the oldest are dropped and counted)",
                       parse=lambda t: agent.parse_int(t, 100, 10000000),
                       on_change=_set_max_rows)
agent.register_setting("torch_backward", True, "time the backward pass of every module",
                       parse=agent.parse_bool, on_change=_changed)
agent.register_setting("torch_memory", True,
                       "record memory (CUDA allocator, else RSS) at the end of every row",
                       parse=agent.parse_bool, on_change=_changed)
agent.register_setting("torch_sync", False,
                       "torch.cuda.synchronize() at every timestamp of a recorded step, so "
                       "that durations are GPU time (slower; CUDA only)",
                       parse=agent.parse_bool, on_change=_changed)

agent.register_kind("torch.install", _k_install,
                    "install the PyTorch hooks ({\"wait\": true}: when torch gets imported)")
agent.register_kind("torch.remove", _k_remove, "remove every PyTorch hook")
agent.register_kind("torch.status", _k_status, "state of the PyTorch hooks")
agent.register_table("python", "torch_status", _STATUS_COLUMNS, _status_rows,
                     "state of the PyTorch hooks (probing inject --torch)")
