"""Print line-table test vectors for the running interpreter (see tests/unit/test_pylines.c).

    python gen_pylines_vectors.py [SOURCE]     (default: pylines_sample.py next to this file)

One line per code object of SOURCE (recursively):
    3.<minor> <name> <firstlineno> <ncodebytes> <table hex or -> <lines>
<lines> is the interpreter's own PyCode_Addr2Line (called through ctypes) for byte offsets
-2, 0, 2, ..., ncodebytes - 2, run-length encoded as "LINE" or "LINE*COUNT", comma-separated.
The table is co_lnotab on 3.8/3.9, co_linetable on 3.10+.
"""
import ctypes
import os
import sys

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int


def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)


def rle(values):
    out = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return ",".join(str(v) if n == 1 else f"{v}*{n}" for v, n in out)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "pylines_sample.py")
    with open(src, encoding="utf-8") as f:
        top = compile(f.read(), "pylines_sample.py", "exec")
    minor = sys.version_info[1]
    for co in codes(top):
        table = co.co_lnotab if minor < 10 else co.co_linetable
        n = len(co.co_code)
        lines = [addr2line(co, a) for a in range(-2, n, 2)]
        name = co.co_name.encode("unicode_escape").decode("ascii").replace(" ", "_")
        print(f"3.{minor} {name} {co.co_firstlineno} {n} {table.hex() or '-'} {rle(lines)}")


main()
