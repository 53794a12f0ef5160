"""Line-table decoding (user/python/pylines.c) against every interpreter on the machine: vectors are
generated live by each interpreter (tests/unit/gen_pylines_vectors.py: its own
PyCode_Addr2Line for every instruction of every code object of pylines_sample.py and of
three stdlib modules) and the unit test binary checks the decoders on them. Jumps likewise
(gen_pyjump_vectors.py: dis's targets), with the opcode tables each interpreter's dis gives
(pyoffsets/gen_opcodes.py). Then the lines backtrace and record show for threads that wait
for the GIL, against the lines the functions have."""
import collections
import json
import os
import re
import subprocess

import harness as h

GEN = os.path.join(h.ROOT, "tests", "unit", "gen_pylines_vectors.py")
GEN_JUMPS = os.path.join(h.ROOT, "tests", "unit", "gen_pyjump_vectors.py")
GEN_OPCODES = os.path.join(h.ROOT, "pyoffsets", "gen_opcodes.py")
OPCODES_C = os.path.join(h.ROOT, "pyoffsets", "opcodes.c")
SAMPLE = os.path.join(h.ROOT, "tests", "unit", "pylines_sample.py")
UNIT = os.path.join(h.BUILD, "tests", "unit", "test_pylines")
GIL_LINES = os.path.join(h.PY_WORKLOADS, "python", "gil_lines.py")
PYTHONS = h.pythons()
PYTHONS_310 = [(label, exe) for label, exe in PYTHONS
               if label.startswith("debian") or int(label.split(".")[1]) >= 10]


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_line_tables_match_interpreter(exe):
    assert os.path.exists(UNIT), "test_pylines not built (run 'make test')"
    vec = h.tmp("vectors.txt")
    # The sample, plus real modules of the interpreter's own stdlib.
    r = h.run([exe, "-c", "import json.decoder, argparse, dataclasses\n"
               "for m in (json.decoder, argparse, dataclasses): print(m.__file__)"], check=True)
    with open(vec, "w") as f:
        for src in [SAMPLE] + r.stdout.split():
            g = h.run([exe, GEN, src], check=True)
            f.write(g.stdout)
    n = sum(1 for _ in open(vec))
    assert n > 200, f"only {n} code objects"
    u = h.run([UNIT, "vectors_match_interpreters"], env={"PROBING_PYLINES_VECTORS": vec})
    assert u.returncode == 0 and "PASS" in u.stdout, u.stdout + u.stderr


def stdlib_sources(exe):
    r = h.run([exe, "-c", "import json.decoder, argparse, dataclasses\n"
               "for m in (json.decoder, argparse, dataclasses): print(m.__file__)"], check=True)
    return r.stdout.split()


@h.timeout(120)
@h.params([p for _, p in PYTHONS_310], ids=[label for label, _ in PYTHONS_310])
def test_opcode_tables_match_interpreter(exe):
    """pyoffsets/opcodes.c holds what this interpreter's dis says (3.11.x: the same numbers
    for Debian's 3.11.2 and pyenv's)."""
    r = h.run([exe, GEN_OPCODES], check=True)
    block = r.stdout.strip()
    minor = re.search(r"BEGIN (3\.\d+)", block).group(1)
    with open(OPCODES_C) as f:
        text = f.read()
    m = re.search(rf"/\* BEGIN {re.escape(minor)} \*/.*?/\* END {re.escape(minor)} \*/", text,
                  re.S)
    assert m, f"no table for {minor} in pyoffsets/opcodes.c"
    assert m.group(0) == block, f"regenerate with 'make pyopcodes':\n{block}"


@h.timeout(120)
@h.params([p for _, p in PYTHONS_310], ids=[label for label, _ in PYTHONS_310])
def test_jump_targets_match_interpreter(exe):
    assert os.path.exists(UNIT), "test_pylines not built (run 'make test')"
    vec = h.tmp("jumps.txt")
    with open(vec, "w") as f:
        f.write(h.run([exe, GEN_JUMPS, SAMPLE] + stdlib_sources(exe), check=True).stdout)
    n = sum(1 for _ in open(vec))
    assert n > 200, f"only {n} code objects"
    u = h.run([UNIT, "jump_vectors_match_interpreters"], env={"PROBING_PYJUMP_VECTORS": vec})
    assert u.returncode == 0 and "PASS" in u.stdout, u.stdout + u.stderr


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_lines_of_threads_waiting_for_the_gil(exe):
    """Threads contending for the GIL (tests/workloads/python/gil_lines.py): every line backtrace
    and record give their frames is a line of that function, never 0 or unknown, across many
    readings. (3.10 and 3.11 leave the loop back-edge where threads wait without a line.)"""
    target = h.spawn([exe, GIL_LINES, "60"], stdout=subprocess.PIPE, text=True)
    truth = json.loads(target.stdout.readline())
    lines = {func: set(v) for func, v in truth["lines"].items()}
    frame = re.compile(r"^    (spin|short|caller) \(.*:([^:]+)\)$", re.M)
    seen = collections.Counter()
    for _ in range(30):
        r = h.probing("backtrace", "-p", target.pid)
        assert r.returncode == 0, r.stderr
        for func, line in frame.findall(r.stdout):
            assert line.isdigit() and int(line) in lines[func], \
                f"{func} at line {line}, not one of {sorted(lines[func])}:\n{r.stdout}"
            seen[func, int(line)] += 1
    # Every reading finds every thread's frames. On 3.14 and 3.15 a reader from outside can
    # find the thread's current frame popped and cleared (its executable PyStackRef_NULL)
    # by the time it reads it: the walk passes over that leaf (bpf/pywalk.h). Before that,
    # 1 to 6 readings in 30 missed the "caller" thread (5 runs in 6 had a miss); after, none
    # in 10 runs here. One miss is still allowed there, for a race not seen yet.
    slack = 1 if "sidroot" in exe else 0
    assert 90 - slack <= sum(n for (func, _), n in seen.items() if func == "spin") <= 90, seen
    assert 30 - slack <= sum(n for (func, _), n in seen.items() if func == "caller") <= 30, seen
    h.log(f"backtrace lines: {sorted(seen.items())}")

    rec = h.tmp("gil.db")
    r = h.probing("record", "-p", target.pid, "-d", "1.5", "-o", rec)
    assert r.returncode == 0, r.stderr
    rows = h.db(rec).execute(
        "SELECT f.func, f.lineno, SUM(s.count) FROM samples s JOIN frames f USING (stack_id)"
        " WHERE f.kind = 'python' AND f.func IN ('spin', 'short', 'caller')"
        " GROUP BY f.func, f.lineno").fetchall()
    h.log(f"recorded lines: {rows}")
    assert sum(n for func, _, n in rows if func == "spin") > 10, rows
    bad = [(func, line, n) for func, line, n in rows if line not in lines[func]]
    assert not bad, f"lines that are not the function's (None: unknown): {bad}"
