#!/usr/bin/env python3
"""Generate a synthetic but realistic profile as folded stacks (for folded2db).

    gen_folded.py [--stacks N] [--samples N] [--seed S] > profile.folded

Stacks start in a few native entry frames, go through an interpreter-like mix of Python
frames ("func (file.py:line)") and native library frames (C++ templates included), and end
in leaves; the call tree branches more the deeper it goes, as real programs do, so stacks
share their roots. Sample counts follow a Zipf-like law (a few hot stacks, a long tail).
Deterministic for a given seed.
"""
import argparse
import random

PY_MODULES = ["train", "model", "data", "optim", "utils", "nn/functional", "nn/modules/linear",
              "autograd/function", "distributed", "dataloader", "transforms", "metrics"]
NATIVE = ["at::native::add_kernel", "at::matmul", "std::vector<float>::_M_realloc_insert",
          "c10::impl::wrap_kernel_functor_unboxed_<int, float>::call", "memcpy", "malloc",
          "free", "sgemm_kernel", "pthread_cond_wait", "__GI___poll", "PyObject_Call",
          "_PyEval_EvalFrameDefault", "cudaLaunchKernel", "ncclAllReduce", "deflate",
          "std::map<std::string, int>::find", "operator new(unsigned long)"]
KERNEL = ["entry_SYSCALL_64_after_hwframe_[k]", "do_syscall_64_[k]", "__x64_sys_futex_[k]",
          "futex_wait_[k]", "schedule_[k]", "ksys_read_[k]", "vfs_read_[k]"]


def frame_name(rng, node):
    r = rng.random()
    if r < 0.55:
        mod = rng.choice(PY_MODULES)
        func = rng.choice(["forward", "backward", "step", "__call__", "_call_impl", "load",
                           "collate", "get_item", "apply", "run", "<listcomp>", "<module>",
                           "Trainer.fit", "Model.forward", "Adam.step", "Loader.__next__"])
        return f"{func}{node % 97 if r < 0.3 else ''} (/opt/app/{mod}.py:{10 + node % 400})"
    if r < 0.95:
        return rng.choice(NATIVE) + ("" if r < 0.8 else f"_{node % 53}")
    return rng.choice(KERNEL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=1000000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    names = {}
    stacks = []
    seen = set()
    while len(stacks) < args.stacks:
        depth = rng.randint(18, 42)
        node = 0
        path = ["_start", "__libc_start_main", "main", "Py_RunMain"]
        for d in range(depth):
            branching = 1 if d < 3 else 2 if d < 8 else 3 if d < 20 else 4
            node = node * 5 + rng.randrange(branching) + 1
            if node not in names:
                names[node] = frame_name(random.Random(node * 7919 + args.seed), node)
            path.append(names[node])
        key = ";".join(path)
        if key not in seen:
            seen.add(key)
            stacks.append(key)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(stacks))]
    scale = (args.samples - len(stacks)) / sum(weights)
    counts = [1 + int(w * scale) for w in weights]
    counts[0] += args.samples - sum(counts)
    order = list(range(len(stacks)))
    rng.shuffle(order)
    print("@process 4242 python train.py --epochs 10")
    print("@pid 4242 4242 MainThread")
    for i in order:
        print(f"{stacks[i]} {counts[i]}")


if __name__ == "__main__":
    main()
