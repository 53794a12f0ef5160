"""Recordings with known contents for the analysis tests (flamegraph, query, export).

make_db() turns folded stacks into a recording with build/tests/tools/folded2db, the store
API the recorder uses; the folded text is then the ground truth every output is checked
against.
"""
import hashlib
import os

import harness

FOLDED2DB = os.path.join(harness.BUILD, "tests", "tools", "folded2db")

# Two processes, three threads, every kind of frame and the names that need escaping:
# C++ templates, <module>, &, quotes, a comma, a semicolon-free UTF-8 name, spaces.
PROCESS_100 = [
    "_start;__libc_start_main;main;Py_RunMain;<module> (/app/train.py:50);"
    "train (/app/train.py:30);Trainer.step (/app/train.py:12);forward (/app/model.py:8);"
    "at::matmul 500",
    "_start;__libc_start_main;main;Py_RunMain;<module> (/app/train.py:50);"
    "train (/app/train.py:30);Trainer.step (/app/train.py:12);backward (/app/model.py:20);"
    "std::vector<int>::push_back 200",
    "_start;__libc_start_main;main;Py_RunMain;<module> (/app/train.py:50);"
    "train (/app/train.py:30);load (/app/data.py:5);read;entry_SYSCALL_64_[k];ksys_read_[k] 150",
    "_start;__libc_start_main;main;Py_RunMain;<module> (/app/train.py:50);"
    "Trainer.log (/app/train.py:70);print 20",
    "_start;__libc_start_main;main;Py_RunMain 3",
]
THREAD_101 = [
    "start_thread;worker (/app/data.py:40);decode \"quoted\" & <tag> 'x' caf\u00e9 80",
    "start_thread;worker (/app/data.py:40);cv::resize(cv::Mat const&, int, int) 45",
]
PROCESS_200 = [
    "_start;main;compress;deflate 30",
    "_start;main;compress;deflate;memcpy 12",
]

FOLDED = ("@process 100 python train.py --epochs 3\n"
          "@process 200 gzip -9\n"
          "@meta frequency 99\n"
          "@pid 100 100 MainThread\n" + "\n".join(PROCESS_100) + "\n"
          "@pid 100 101 loader\n" + "\n".join(THREAD_101) + "\n"
          "@pid 200\n" + "\n".join(PROCESS_200) + "\n")
STACKS = PROCESS_100 + THREAD_101 + PROCESS_200


def total(lines):
    return sum(int(line.rsplit(" ", 1)[1]) for line in lines)


def make_db(folded=FOLDED, name="rec.db", seconds=1, frequency=None):
    """Write @folded to a recording in the test's directory; return its path."""
    src = harness.tmp(name + ".folded")
    with open(src, "w") as f:
        f.write(folded)
    out = harness.tmp(name)
    cmd = [FOLDED2DB, "-o", out, "--seconds", str(seconds)]
    if frequency:
        cmd += ["-F", str(frequency)]
    harness.run(cmd + [src], check=True)
    return out


def probing_raw(*args, input=None):
    """Run build/probing; stdout as bytes (no newline translation: CSV ends lines in CRLF)."""
    import subprocess
    p = subprocess.run([harness.PROBING, *map(str, args)], capture_output=True, timeout=120,
                       input=input.encode() if input is not None else None)
    harness.log(f"$ probing {' '.join(map(str, args))}  -> {p.returncode}\n"
                f"{p.stderr.decode(errors='replace')[-2000:]}")
    return p


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def byte_sorted(lines):
    """Lines in byte order ('LC_ALL=C sort'), as --folded prints them."""
    return sorted(lines, key=lambda s: s.encode())
