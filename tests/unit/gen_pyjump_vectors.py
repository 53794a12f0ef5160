"""Print jump-decoding test vectors for the running interpreter, 3.10+ (test_pylines.c).

    python gen_pyjump_vectors.py [SOURCE...]   (default: pylines_sample.py next to this file)

One line per code object:
    J 3.<minor> <name> <code hex> <index>:<target>,...
for every instruction of the code (index in code units): the target of the unconditional
jumps (JUMP_FORWARD, JUMP_BACKWARD[_NO_INTERRUPT], JUMP_ABSOLUTE) as dis computes it, -1 for
every other instruction. The code is co_code for the code objects of each SOURCE; then, on
3.11+, the quickened code (co_code_adaptive) of hot functions run here, with long loops
(EXTENDED_ARG) that end in an if statement (a back-edge without a line), and on 3.12+ the
same code instrumented for sys.monitoring jump events. Quickening and instrumentation change
opcodes in place, never where instructions start or jump to: the targets are co_code's.
"""
import dis
import os
import sys

JUMPS = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE"}

HOT = '''
def hot_short(xs):
    n = 0
    for x in xs:
        if x:
            n += 1
    return n


def hot_long(xs):
    n = 0
    for x in xs:
        a = [x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9]
        b = {"a": a[0], "b": a[1], "c": a[2], "d": a[3], "e": a[4], "f": a[5], "g": a[6]}
        c = [b["a"] + b["b"], b["c"] * b["d"], b["e"] - b["f"], b["g"] // (x + 1)]
        d = sum(c) + len(a) + max(a) + min(a) + abs(x) + sum(a[::2]) + sum(a[1::2])
        e = [d + 1, d + 2, d + 3, d + 4, d + 5, d + 6, d + 7, d + 8, d + 9, d + 10]
        f = (e[0] + e[1] + e[2] + e[3] + e[4] + e[5] + e[6] + e[7] + e[8] + e[9]) % 7
        while f > 3:
            f -= 1
            if f == 2:
                break
        if x % 3 == 0:
            n += f
    return n
'''


def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)


def targets(co):
    out = []
    for ins in dis.get_instructions(co):
        t = -1
        if ins.opname in JUMPS:
            t = ins.argval // 2  # a byte offset
        out.append(f"{ins.offset // 2}:{t}")
    return ",".join(out)


def line(co, code, tag=""):
    name = co.co_name.encode("unicode_escape").decode("ascii").replace(" ", "_")
    print(f"J 3.{sys.version_info[1]} {name}{tag} {code.hex()} {targets(co)}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for src in sys.argv[1:] or [os.path.join(here, "pylines_sample.py")]:
        with open(src, encoding="utf-8") as f:
            top = compile(f.read(), os.path.basename(src), "exec")
        for co in codes(top):
            line(co, co.co_code)
    if sys.version_info < (3, 11):
        return
    ns = {}
    exec(compile(HOT, "hot.py", "exec"), ns)
    fns = [ns["hot_short"], ns["hot_long"]]
    for _ in range(100):
        for fn in fns:
            fn(list(range(20)))
    for fn in fns:
        line(fn.__code__, fn.__code__._co_code_adaptive, "@quickened")
    if sys.version_info >= (3, 12):
        mon = sys.monitoring
        mon.use_tool_id(mon.DEBUGGER_ID, "vectors")
        mon.register_callback(mon.DEBUGGER_ID, mon.events.JUMP, lambda *a: None)
        mon.set_events(mon.DEBUGGER_ID, mon.events.JUMP)
        for fn in fns:
            fn(list(range(20)))
            line(fn.__code__, fn.__code__._co_code_adaptive, "@monitored")
        mon.set_events(mon.DEBUGGER_ID, 0)
        mon.free_tool_id(mon.DEBUGGER_ID)


main()
