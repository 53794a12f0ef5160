"""Print the bytecode facts of the running CPython (3.10+) as a C table for pyoffsets/opcodes.c.

    python3.X pyoffsets/gen_opcodes.py

probing decodes a code object's instructions only to find where an unconditional jump goes
(pylines_jump_target, user/python/pylines.h), in the code as the target process holds it: 3.11+
quickens it in place (specialized opcodes, inline caches), 3.12+ instruments it for
sys.monitoring. So per opcode value (0-255):

  caches        inline cache units after the instruction (what dis knows per base opcode; a
                specialized or instrumented opcode has its base's), or PY_OP_UNDECODABLE
                where the instruction's length cannot be known from its opcode
                (INSTRUMENTED_LINE and INSTRUMENTED_INSTRUCTION keep the real opcode
                elsewhere, ENTER_EXECUTOR in an executor);
  jump          PY_JUMP_FORWARD / _BACKWARD / _ABSOLUTE for the unconditional jumps
                (JUMP_FORWARD, JUMP_BACKWARD[_QUICK], JUMP_BACKWARD_NO_INTERRUPT,
                JUMP_ABSOLUTE and their instrumented forms);
  extended_arg  EXTENDED_ARG and its specialized form.

The numbers of specialized opcodes come from dis's own table (dis._all_opmap), the one it
uses to show quickened code (dis.dis(..., adaptive=True)).
"""
import dis
import sys

JUMPS = {"JUMP_FORWARD": "PY_JUMP_FORWARD", "JUMP_BACKWARD": "PY_JUMP_BACKWARD",
         "JUMP_BACKWARD_NO_INTERRUPT": "PY_JUMP_BACKWARD", "JUMP_ABSOLUTE": "PY_JUMP_ABSOLUTE"}
UNDECODABLE = {"INSTRUMENTED_LINE", "INSTRUMENTED_INSTRUCTION", "ENTER_EXECUTOR"}


def base_name(op, name):
    """The opcode @op (@name) stands for: itself, or what it specializes or instruments."""
    if name.startswith("INSTRUMENTED_") and name not in UNDECODABLE:
        return name[len("INSTRUMENTED_"):]
    if hasattr(dis, "_deoptop"):
        return dis._all_opname[dis._deoptop(op)]
    return name


def caches_of(name):
    table = getattr(dis, "_inline_cache_entries", None)
    if table is None:
        return 0  # 3.10: no inline caches
    if hasattr(table, "get"):  # 3.13+: by name (3.15: a frozendict)
        return table.get(name, 0)
    return table[dis.opmap[name]]


def main():
    minor = sys.version_info[1]
    assert sys.version_info[0] == 3 and minor >= 10, "3.10+ only"
    opmap = getattr(dis, "_all_opmap", dis.opmap)
    caches, jumps, ext = {}, {}, []
    for name, op in sorted(opmap.items(), key=lambda kv: kv[1]):
        if op > 255:
            continue  # pseudo-instructions: never in code
        if name in UNDECODABLE:
            caches[op] = "PY_OP_UNDECODABLE"
            continue
        base = base_name(op, name)
        if base not in dis.opmap:
            caches[op] = "PY_OP_UNDECODABLE"
            continue
        n = caches_of(base)
        if n:
            caches[op] = str(n)
        if base in JUMPS:
            jumps[op] = JUMPS[base]
        if base == "EXTENDED_ARG":
            ext.append(op)

    def member(name, d):
        """".name = {[op] = value, ...}," wrapped to lines of at most 100 columns."""
        lines, cur = [], f"\t.{name} = {{"
        for op, v in sorted(d.items()):
            item = f"[{op}] = {v}, "
            if len(cur.expandtabs(8)) + len(item.rstrip()) > 98:
                lines.append(cur.rstrip())
                cur = "\t\t"
            cur += item
        if not d:
            cur += "0"  # C11 has no empty initializer
        lines.append(cur.rstrip().rstrip(",") + "},")
        print("\n".join(lines))

    print(f"/* BEGIN 3.{minor} */")
    print(f"static const struct py_opcodes py_opcodes_3_{minor} = {{")
    print(f"\t.version = 0x03{minor:02x},")
    member("caches", caches)
    member("jump", jumps)
    member("extended_arg", {op: 1 for op in ext})
    print("};")
    print(f"/* END 3.{minor} */")


main()
