"""Ground truth for recording: call shapes that stress name and frame resolution.

Runs each shape for SLICE seconds in turn, in the main thread, for SECONDS in all
(argv[1], default 4). Every shape ends in spin() at the marked line:
  recursion   recurse x DEPTH (argv[2], default 500) -> spin
  generator   consume -> produce -> spin
  coroutine   run_coro -> (asyncio) -> amain -> acoro -> spin
  lambda      call_lambda -> <lambda> -> spin
  method      call_method -> Shape.method -> spin
  non-ASCII   call_unicode -> fünc_ñ -> spin
"""
import asyncio
import sys
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 4
DEPTH = int(sys.argv[2]) if len(sys.argv) > 2 else 500
sys.setrecursionlimit(DEPTH + 200)
SLICE = SECONDS / 6


def spin(until):
    x = 0
    while time.monotonic() < until:
        for i in range(2000): x += i  # @spin
    return x


def recurse(n, until):
    if n <= 1:
        return spin(until)
    return recurse(n - 1, until) + 1  # @recurse


def produce(until):
    while True:
        yield spin(until)  # @produce
        if time.monotonic() >= until:
            return


def consume(until):
    for _ in produce(until):  # @consume
        pass


async def acoro(until):
    return spin(until)  # @acoro


async def amain(until):
    return await acoro(until)  # @amain


def run_coro(until):
    return asyncio.run(amain(until))  # @run_coro


def call_lambda(until):
    f = lambda: spin(until)  # noqa: E731  @lambda
    return f()  # @call_lambda


class Shape:
    def method(self, until):
        return spin(until)  # @method


def call_method(until):
    return Shape().method(until)  # @call_method


def fünc_ñ(until):
    return spin(until)  # @unicode


def call_unicode(until):
    return fünc_ñ(until)  # @call_unicode


def main():
    end = time.monotonic() + SECONDS
    shapes = [lambda u: recurse(DEPTH, u), consume, run_coro, call_lambda, call_method,
              call_unicode]
    i = 0
    while time.monotonic() < end:
        shapes[i % len(shapes)](time.monotonic() + SLICE / 4)
        i += 1


main()
