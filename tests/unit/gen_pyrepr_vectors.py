"""Print repr() test vectors for the running interpreter (see tests/unit/test_pyrepr.c).

    python gen_pyrepr_vectors.py [SEED]

One line per value, fields separated by one space, text fields as hex of their UTF-8:
    f BITS REPR                      float: IEEE-754 bits (16 hex digits), repr(value)
    i NEG MAX DIGITS EXPECTED        int: sign (0/1), max_repr, 30-bit digits (hex, least
                                     significant first, comma-separated, - for none)
    s MAX TOTAL CPS EXPECTED         str: max_repr, length, the first min(TOTAL, MAX) code
                                     points (8 hex digits each, - for none)
    b MAX TOTAL BYTES EXPECTED       bytes: likewise, 2 hex digits per byte
EXPECTED is what probing must print, computed here with the interpreter's own repr():
    str, bytes  repr(v) if it has at most MAX characters, else repr(v[:n]) + "..." for the
                largest n that fits in MAX characters
    int         repr(v) if it fits, else the leading digits + "...(N digits)" (N digits in all)
Characters are drawn where every CPython 3.8-3.13 agrees on str.isprintable() (assigned since
Unicode 3.2, private use, or permanently unassigned), so the vectors do not depend on which
version's Unicode database wrote them.
"""
import math
import random
import struct
import sys
import unicodedata

if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)

MIN = 16


def hexs(text):
    return text.encode("utf-8", "surrogatepass").hex() or "-"


def fits(r, mx):
    return len(r) <= mx


def cut(v, mx):
    """The repr probing shows for str/bytes v with max_repr mx."""
    mx = max(mx, MIN)
    r = repr(v)
    if fits(r, mx):
        return r
    best = None
    for n in range(0, len(v)):
        if n > mx:
            break
        rn = repr(v[:n])
        if len(rn) + 3 <= mx:
            best = rn + "..."
    return best


def int_expect(v, mx):
    mx = max(mx, MIN)
    r = repr(v)
    if len(r) <= mx:
        return r
    digits = str(abs(v))
    neg = 1 if v < 0 else 0
    tail = f"...({len(digits)} digits)"
    keep = mx - len(tail) - neg if mx > len(tail) + neg + 1 else 1
    return ("-" if neg else "") + digits[:keep] + tail


def float_line(x):
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    return f"f {bits:016x} {hexs(repr(x))}"


def int_line(v, mx):
    a, ds = abs(v), []
    while a:
        ds.append(a & 0x3FFFFFFF)
        a >>= 30
    dig = ",".join(f"{d:x}" for d in ds) or "-"
    return f"i {int(v < 0)} {mx} {dig} {hexs(int_expect(v, mx))}"


def str_line(s, mx):
    shown = s[:max(mx, MIN)]
    cps = "".join(f"{ord(c):08x}" for c in shown) or "-"
    return f"s {mx} {len(s)} {cps} {hexs(cut(s, mx))}"


def bytes_line(b, mx):
    shown = b[:max(mx, MIN)]
    return f"b {mx} {len(b)} {shown.hex() or '-'} {hexs(cut(b, mx))}"


STABLE_UNASSIGNED = [0x378, 0xFFFE, 0xFFFF, 0x2FFFE, 0x50000, 0x10FFFE, 0x10FFFF]
old = unicodedata.ucd_3_2_0


def stable_char(rng):
    while True:
        r = rng.random()
        if r < 0.35:
            c = rng.randrange(0, 0x100)
        elif r < 0.7:
            c = rng.randrange(0x100, 0x10000)
        elif r < 0.8:
            c = rng.choice(STABLE_UNASSIGNED + [0xE000, 0xF8FF, 0xF0000, 0xD800, 0xDFFF])
        else:
            c = rng.randrange(0x10000, 0x110000)
        ch = chr(c)
        if c in STABLE_UNASSIGNED or old.category(ch) != "Cn" or 0xE000 <= c <= 0xF8FF or \
                0xF0000 <= c <= 0x10FFFD:
            return ch


def main():
    rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 20240611)
    out = []
    # floats: specials, boundaries, powers of two (asymmetric rounding intervals), decimals,
    # random bit patterns
    specials = [0.0, -0.0, 0.1, 0.2, 0.3, 1.0, -1.5, 1e16, 1e15, 9999999999999998.0,
                1e-4, 1e-5, 0.0001234, 123.456, 1e300, -1e300, 1e22, 1e23, 5e-324,
                2.2250738585072014e-308, 1.7976931348623157e308, math.pi, math.e,
                float("inf"), float("-inf"), float("nan"), 2.0 ** 60, 2.0 ** -1074,
                1 / 3, 2 / 3, 100.0, 1234567890123456789.0, 0.5, 9.5, 1e-7, 12345678.9]
    specials += [2.0 ** e for e in range(-1074, 1024, 7)]
    specials += [math.ldexp(1.0, e) * (1 + 2 ** -52) for e in range(-1000, 1000, 37)]
    specials += [round(rng.uniform(-1e6, 1e6), rng.randrange(0, 8)) for _ in range(150)]
    specials += [rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30) for _ in range(150)]
    for _ in range(300):
        x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        specials.append(x)
    out += [float_line(x) for x in specials]
    # ints
    ints = [0, 1, -1, 5, -5, 256, -257, 2 ** 30 - 1, 2 ** 30, 2 ** 31, 2 ** 62, 2 ** 63 - 1,
            2 ** 63, -2 ** 63, 2 ** 64, 10 ** 18, 10 ** 19, 10 ** 27, -10 ** 36 + 1,
            2 ** 200, -(3 ** 300), 10 ** 100, 10 ** 1000 + 7, -(7 ** 900)]
    ints += [rng.getrandbits(rng.randrange(1, 700)) * rng.choice([1, -1]) for _ in range(80)]
    for v in ints:
        for mx in (80, 16, 100000) if abs(v) > 10 ** 70 else (80,):
            out.append(int_line(v, mx))
    # str
    strs = ["", "a", "'", '"', "'\"", "it's", 'say "hi"', "both ' and \"", "\\", "\t\n\r\x00",
            "\x7f\x80\x9f\xa0\xad\xff", "café", "Ωmega", "🐍 snake", "\u2028\u200b\ufeff",
            "\ud800\udfff", "\U0010fffe\ue000", "x" * 300, "é" * 100, "'" * 50, "a'" * 40]
    for _ in range(80):
        strs.append("".join(stable_char(rng) for _ in range(rng.randrange(0, 60))))
    for _ in range(40):
        strs.append("".join(rng.choice("ab'\" \\\n\té") for _ in range(rng.randrange(0, 40))))
    for s in strs:
        for mx in (80, 16, 17, 25):
            out.append(str_line(s, mx))
    # bytes
    bs = [b"", b"a", b"'", b'"', b"'\"", b"\x00\x7f\x80\xff\t\n\r\\", bytes(range(256)),
          b"x" * 300]
    for _ in range(80):
        bs.append(bytes(rng.choice(b"ab'\" \\\n\t\x00\xff") for _ in range(rng.randrange(0, 40))))
    for b in bs:
        for mx in (80, 16, 19):
            out.append(bytes_line(b, mx))
    sys.stdout.write("\n".join(out) + "\n")


main()
