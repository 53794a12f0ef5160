# Sample code for the line-table test vectors (gen_pylines_vectors.py compiles this file with
# each interpreter and records every code object's table and the interpreter's own answers).
# It is never run. Shapes chosen to exercise every table encoding: long jumps in lines and
# bytecode, negative line deltas, instructions without a line, wide columns, nested code.
import os


def simple(a, b):
    c = a + b
    return c * 2


def loop(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            total += i
        elif i % 5 == 0:
            total -= 1
        else:
            continue
    while total > 100:
        total //= 2
    return total


def multi_line_call(x):
    return max(
        x,
        1,
        min(
            x,
            2,
        ),
    )


def backwards(x):
    y = [
        x
        for x in range(10)
        if x
    ]
    return (y
            +
            [1])


def try_except(path):
    try:
        with open(path) as f:
            data = f.read()
    except OSError as e:
        data = str(e)
    except (ValueError, KeyError):
        raise
    else:
        data += "!"
    finally:
        path = None
    return data


def big_bytecode():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40] + [a * b for a in range(3) for b in range(4)] + [x + 1 for x in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30)] + list(map(lambda q: q * q, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]))
    s = values[0]; s += values[1]; s += values[2]; s += values[3]; s += values[4]; s += values[5]; s += values[6]; s += values[7]; s += values[8]; s += values[9]; s += values[10]; s += values[11]; s += values[12]; s += values[13]; s += values[14]; s += values[15]; s += values[16]; s += values[17]; s += values[18]; s += values[19]; s += values[20]; s += values[21]; s += values[22]
    return s


def long_jump():
    a = 1
    # A long gap: line deltas larger than one table entry can hold.
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    #
    b = 2
    return a + b


def gen(n):
    for i in range(n):
        yield i
        yield from range(i)


async def coro(x):
    await x
    async with x as y:
        async for z in y:
            pass
    return 1


class Klass:
    attr = 1

    def method(self):
        return self.attr

    @staticmethod
    @property
    def decorated():
        return (lambda: 1)()

    class Inner:
        def deep(self):
            def deeper():
                return os.getpid()
            return deeper


def ünïcødé(ß):
    return ß


def wide_columns(a):
    return a                                                                                                                                                                                                                                                                      + 1


def closure():
    v = 1

    def inner():
        nonlocal v
        v += 1
        return v
    return inner


x = simple(1, 2)
if x:
    y = [loop(i) for i in range(3)]
