"""Ground truth for recording: a program that execs a Python program whose first line runs.

    exec_chain.py PYTHON SECONDS [--torch] [--wait FILE]

With --torch, first import torch and multiply matrices for 0.3 s (a program whose first
samples are slow to unwind and symbolize: the recorder is busy with them when the exec comes);
then exec PYTHON on this very file with --spin, which spins in spin() from its first line
for SECONDS of CPU time and exits; with --wait, only once FILE exists (the recorder names
the frames of a process while it lives: a test lets it catch up first). Every sample of the
spinning program is under <module> -> spin.
"""
import os
import sys
import time


def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:  # @spin_loop
        pass


wait = sys.argv[sys.argv.index("--wait") + 1] if "--wait" in sys.argv else None
if sys.argv[1] == "--spin":
    spin(float(sys.argv[2]))
    deadline = time.monotonic() + 120
    while wait and not os.path.exists(wait) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(0)

if "--torch" in sys.argv:
    import torch

    a = torch.rand(256, 256)
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        a = torch.mm(a, a).clamp(0, 1)
os.execv(sys.argv[1], [sys.argv[1], __file__, "--spin", sys.argv[2]] +
         (["--wait", wait] if wait else []))
