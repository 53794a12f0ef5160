"""The committed CPython offset tables (pyoffsets/tables.c) against the interpreters on the
machine: every table is re-extracted from the DWARF of the pyenv libpython of its version (3.8
to 3.13), or of the header probe compiled against the version's own headers (3.14+: Debian's
libpython3.X-dev in the sid root), and must be identical; the tables of 3.13+ must also agree
with the _Py_DebugOffsets the interpreter publishes about itself."""
import glob
import os
import re
import subprocess

import harness as h
import sidroot

GEN = os.path.join(h.BUILD, "pyoffsets-gen")
TABLES = os.path.join(h.ROOT, "pyoffsets", "tables.c")
MINORS = h.py_minors()
HEADERS_FROM = 14  # pyoffsets/gen-tables.sh: tables from headers from this minor on


def _pyenv(minor):
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    dirs = sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*")))
    dirs = [d for d in dirs if re.match(rf"3\.{minor}\.\d+$", os.path.basename(d))]
    return dirs[-1] if dirs else None


def _block(text, minor):
    m = re.search(rf"/\* BEGIN 3\.{minor} \*/\n.*?/\* END 3\.{minor} \*/\n", text, re.S)
    return m.group(0) if m else None


def _fields(block):
    """{field: int or None} of one table block (dbg[] as dbg.0, dbg.1...)."""
    out = {}
    for name, val in re.findall(r"\.(\w+) = (\w+),", block):
        out[name] = None if val == "PYO_NONE" else int(val, 0)
    for key in ("dbg", "dbg_bound"):
        dbg = re.search(rf"\.{key} = \{{(.*?)\}}", block, re.S).group(1)
        for i, v in enumerate(x.strip() for x in dbg.split(",") if x.strip()):
            out[f"{key}.{i}"] = None if v == "PYO_NONE" else int(v)
    return out


def test_tables_match_dwarf():
    assert os.path.exists(GEN), "pyoffsets-gen not built (run 'make test')"
    with open(TABLES) as f:
        text = f.read()
    for minor in MINORS:
        committed = _block(text, minor)
        assert committed, f"pyoffsets/tables.c has no table for 3.{minor}"
        if minor >= HEADERS_FROM:
            continue  # test_header_tables_match
        prefix = _pyenv(minor)
        assert prefix, f"no pyenv CPython 3.{minor} on this machine to verify its table against"
        lib = os.path.join(prefix, "lib", f"libpython3.{minor}.so.1.0")
        r = h.run([GEN, "--version", f"3.{minor}", lib], check=True)
        assert r.stdout == committed, (
            f"3.{minor}: the table extracted from {lib} differs from pyoffsets/tables.c "
            f"(run 'make pyoffsets'):\n{r.stdout}")


def test_generator_rejects_bad_input():
    r = h.run([GEN, "/bin/true"])
    assert r.returncode == 1 and "version" in r.stderr, r.stderr
    r = h.run([GEN, "--version", "3.12", "/bin/true"])
    assert r.returncode == 1 and "DWARF" in r.stderr, r.stderr
    r = h.run([GEN, "/nonexistent"])
    assert r.returncode == 1 and "No such file" in r.stderr, r.stderr
    r = h.run([GEN])
    assert r.returncode == 2


def _probe(minor):
    """The header probe compiled against 3.MINOR's headers in the sid root."""
    inc = os.path.join(sidroot.ROOT, "usr", "include")
    out = h.tmp(f"probe3.{minor}.so")
    # The root's Python headers, the host's C library headers (-idirafter: the root's
    # pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>, found there last).
    subprocess.run(["cc", "-g", "-shared", "-fPIC", "-o", out, "-I",
                    os.path.join(inc, f"python3.{minor}"), "-idirafter", inc,
                    os.path.join(h.ROOT, "pyoffsets", "gen_probe.c")], check=True)
    return out


def test_header_tables_match():
    """3.14+: the tables are what the headers of Debian's libpython3.X-dev say."""
    if not sidroot.available():
        raise h.Skip(sidroot.skip_reason())
    with open(TABLES) as f:
        text = f.read()
    for minor in MINORS:
        if minor < HEADERS_FROM:
            continue
        r = h.run([GEN, "--version", f"3.{minor}", _probe(minor)], check=True)
        assert r.stdout == _block(text, minor), (
            f"3.{minor}: the table extracted from its headers differs from "
            f"pyoffsets/tables.c (run 'make pyoffsets'):\n{r.stdout}")


def _check_debug_offsets(minor, exe):
    """What CPython 3.MINOR says about its own layout (_Py_DebugOffsets at the start of
    _PyRuntime, read in-process with ctypes) equals our table, and so do the struct sizes
    the block gives for every field (dbg_bound)."""
    with open(TABLES) as f:
        fields = _fields(_block(f.read(), minor))
    with open(os.path.join(h.ROOT, "pyoffsets", "pyoffsets.h")) as f:
        names = re.findall(r"^\s*X\((\w+), \"([\w.]+)\", (\d+)\)", f.read(), re.M)
    assert len(names) > 20
    code = ("import ctypes, sys\n"
            "a = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, '_PyRuntime'))\n"
            f"sys.stdout.write(ctypes.string_at(a, {fields['dbg_size']}).hex())\n")
    r = h.run([exe, "-c", code], check=True)
    raw = bytes.fromhex(r.stdout)
    assert raw[:8] == b"xdebugpy"
    u64 = lambda off: int.from_bytes(raw[off:off + 8], "little")
    assert (u64(fields["dbg_version"]) >> 16) & 0xffff == 0x0300 | minor
    assert u64(fields["dbg_free_threaded"]) == 0
    for i, (name, path, width) in enumerate(names):
        assert u64(fields[f"dbg.{i}"]) == fields[name], (
            f"3.{minor}: _Py_DebugOffsets.{path} = {u64(fields[f'dbg.{i}'])}, table "
            f".{name} = {fields[name]}")
        size = u64(fields[f"dbg_bound.{i}"])
        assert fields[name] + int(width) <= size < (16 << 20), (name, size)
    if minor >= 14:
        # The coroutine reader's stackpointer (table only): interpreter_frame.stackpointer
        # follows .owner in the block (pycore_debug_offsets.h of that version).
        hdr = os.path.join(sidroot.ROOT, "usr", "include", f"python3.{minor}", "internal",
                           "pycore_debug_offsets.h")
        with open(hdr) as f:
            assert re.search(r"uint64_t owner;\s*uint64_t stackpointer;", f.read()), hdr
        owner = [i for i, (n, _, _) in enumerate(names) if n == "if_owner"][0]
        assert u64(fields[f"dbg.{owner}"] + 8) == fields["if_stackpointer"], minor


def test_313_table_agrees_with_py_debug_offsets():
    prefix = _pyenv(13)
    assert prefix, "no pyenv CPython 3.13"
    _check_debug_offsets(13, os.path.join(prefix, "bin", "python3.13"))


def test_314_315_tables_agree_with_py_debug_offsets():
    """Debian's python3.14 and python3.15 (in the sid root) against the tables made from
    their headers."""
    if not sidroot.available():
        raise h.Skip(sidroot.skip_reason())
    for minor in sidroot.MINORS:
        if minor in MINORS:
            _check_debug_offsets(minor, sidroot.python(minor))
