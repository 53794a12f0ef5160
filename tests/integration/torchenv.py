"""The PyTorch installs the torch and job tests run on, each test once per install:

    torch1.13   Debian 12's python3-torch 1.13 under its python3.11, on the host; jobs started
                by its torchrun (gloo built into libtorch_cpu)
    torch2.14   Debian unstable's python3-torch 2.14 under its python3.14, inside the root of
                sidroot.py (probing outside it, as with a container); gloo is its own library
                there (libgloo.so.0). Its torchrun cannot start a job here (its rendezvous
                store asks for libuv, which that build lacks, whatever USE_LIBUV says), so
                jobs are started by tests/workloads/torch/launch.py with the environment
                torchrun gives its ranks, plus USE_LIBUV=0.

A test takes the install as its parameter:

    @harness.params(torchenv.ALL, ids=torchenv.IDS)
    def test_x(t):
        t.require()                     # harness.Skip with the reason if it is not here
        harness.spawn(t.launch(3, SCRIPT, "--flag"), env=t.env(...))
"""
import os

import harness
import sidroot

LAUNCH = os.path.join(harness.PY_WORKLOADS, "torch", "launch.py")


class Torch:
    def __init__(self, label, version, minor, python, in_root, backward_leaf):
        self.label = label
        self.version = version      # "2.14"
        self.minor = minor          # the CPython minor it runs under
        self.python = python        # the interpreter's path as the workload sees it
        self.in_root = in_root
        self.thread_name = os.path.basename(python)  # what unnamed threads are called
        # The innermost Python function of a thread waiting in loss.backward(): 1.13's
        # torch.autograd.backward calls the engine itself, 2.x's through autograd/graph.py.
        self.backward_leaf = backward_leaf

    def __str__(self):
        return self.label

    def require(self):
        if self.in_root and not sidroot.available():
            raise harness.Skip("torch %s: %s" % (self.version, sidroot.skip_reason()))

    def argv(self, *cmd):
        """CMD run where this torch is (inside the root for 2.14); the process started has
        CMD's pid."""
        return sidroot.argv(*cmd) if self.in_root else [str(c) for c in cmd]

    def python_argv(self, *args):
        """This torch's Python with ARGS."""
        return self.argv(self.python, *args)

    def launch(self, nproc, script, *args, port=None):
        """The argv of a one-node job of @nproc ranks of @script on loopback: torchrun
        (--redirects 1 --tee 1; rendezvous on @port, else c10d on a port its agent picks) or
        launch.py (the same environment; a free port if @port is None). Its pid is the
        launcher's, the ranks are its children."""
        if self.in_root:
            extra = ["--master_port", str(port)] if port else []
            return self.python_argv(LAUNCH, "--nproc_per_node", nproc, *extra, script, *args)
        rdzv = (["--master_addr", "127.0.0.1", "--master_port", str(port)] if port else
                ["--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0"])
        return ["/usr/bin/torchrun", "--nproc_per_node", str(nproc), *rdzv, "--redirects", "1",
                "--tee", "1", script, *map(str, args)]

    def env(self, **extra):
        """The environment a test adds for a job: USE_LIBUV=0 (2.14's TCPStore asks for libuv
        otherwise; 1.13 has no such variable), and @extra."""
        env = {"USE_LIBUV": "0"}
        env.update({k: str(v) for k, v in extra.items()})
        return env


HOST = Torch("torch1.13", "1.13", 11, "/usr/bin/python3.11", False, "backward")
SID = Torch("torch2.14", "2.14", 14, "/usr/bin/python3.14", True, "_engine_run_backward")
ALL = [HOST, SID]
IDS = [t.label for t in ALL]
