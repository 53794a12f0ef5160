"""Ground truth for recording: Python calling C libraries.

The main thread spins in pure Python (holding the GIL) in gil_spin; thread "zlib-worker"
calls zlib.compress in do_zlib and thread "hash-worker" hashlib.sha256 in do_hash, both of
which release the GIL, so their samples are taken while another thread holds it. With
--torch, thread "torch-worker" runs torch.mm in do_matmul (torch is imported first). Prints
"ready" once every thread runs. Runs SECONDS (argv[1], default 3).
"""
import hashlib
import sys
import threading
import time
import zlib

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3
end = time.monotonic() + SECONDS
DATA = bytes(range(256)) * 4096 + b"probing" * 100000


def do_zlib():
    return zlib.compress(DATA, 9)  # @zlib_call


def zlib_loop():
    while time.monotonic() < end:
        do_zlib()


def do_hash():
    return hashlib.sha256(DATA).digest()  # @hash_call


def hash_loop():
    while time.monotonic() < end:
        do_hash()


def do_matmul(torch, a, b):
    return torch.mm(a, b)  # @matmul_call


def torch_loop():
    torch = sys.modules["torch"]
    a = torch.rand(256, 256)
    b = torch.rand(256, 256)
    while time.monotonic() < end:
        do_matmul(torch, a, b)


def gil_spin():
    x = 0
    while time.monotonic() < end:
        for i in range(10000): x += i  # @spin
    return x


if "--torch" in sys.argv:
    import torch
    torch.set_num_threads(1)
    end = time.monotonic() + SECONDS
workers = [threading.Thread(target=zlib_loop, name="zlib-worker"),
           threading.Thread(target=hash_loop, name="hash-worker")]
if "--torch" in sys.argv:
    workers.append(threading.Thread(target=torch_loop, name="torch-worker"))
for w in workers:
    w.start()
print("ready", flush=True)
gil_spin()
for w in workers:
    w.join()
