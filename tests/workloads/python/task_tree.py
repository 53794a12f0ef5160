"""Ground truth for asyncio tasks: task trees of known shape in two event loops, two threads.

The main thread runs loop A:
  Task "main"    awaits asyncio.gather(left, right)                  @MAIN_AWAIT
  Task "left"    awaits the task "leaf"                              @LEFT_AWAIT
  Task "leaf"    awaits nap(), which awaits asyncio.sleep(3600)      @LEAF_AWAIT @NAP
  Task "right"   awaits helper(), which awaits queue.get()           @RIGHT_AWAIT @HELPER
  Task "busy"    runs: blocks its thread in time.sleep()             @BUSY
                 after creating a task "fresh-N" that is then ready to run (not started)
Thread "loop-2" runs loop B:
  Task "second"  awaits the task "worker"                            @SECOND_AWAIT
  Task "worker"  awaits event.wait()                                 @WORKER_AWAIT
  Task "blocker" runs: blocks its thread in time.sleep() in its first step   @BLOCKER
                 (3.12+: loop B's tasks start eagerly, so "blocker" is still an eager task,
                 in asyncio.tasks._eager_tasks, not yet in _scheduled_tasks)

Usage: task_tree.py OUTFILE [--pure]. Writes OUTFILE (JSON: the loop-2 thread's native id)
once every task is in place, then prints READY and runs until killed. --pure hides the C
accelerator (_asyncio) before asyncio is imported: every task is then a pure-Python
asyncio.tasks._PyTask.
"""
import json
import sys
import threading
import time

if "--pure" in sys.argv:
    sys.modules["_asyncio"] = None  # import _asyncio fails: asyncio uses its Python classes

import asyncio  # noqa: E402

OUT = sys.argv[1]
settled = {"a": threading.Event(), "b": threading.Event()}
info = {}


async def nap():
    await asyncio.sleep(3600)  # @NAP


async def leaf():
    await nap()  # @LEAF_AWAIT


async def left(leaf_task):
    await leaf_task  # @LEFT_AWAIT


async def helper(queue):
    return await queue.get()  # @HELPER


async def right(queue):
    await helper(queue)  # @RIGHT_AWAIT


async def fresh():  # @FRESH
    return 1


async def busy():
    loop = asyncio.get_running_loop()
    n = 0
    await asyncio.sleep(0.2)  # let the others reach their awaits
    settled["a"].set()
    while True:
        n += 1
        loop.create_task(fresh(), name="fresh-%d" % n)
        time.sleep(0.3)  # @BUSY
        await asyncio.sleep(0)


async def main():
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    leaf_task = loop.create_task(leaf(), name="leaf")
    tasks = [loop.create_task(left(leaf_task), name="left"),
             loop.create_task(right(queue), name="right")]
    loop.create_task(busy(), name="busy")
    await asyncio.gather(*tasks)  # @MAIN_AWAIT


async def worker(event):
    await event.wait()  # @WORKER_AWAIT


async def blocker():
    settled["b"].set()
    while True:
        time.sleep(0.3)  # @BLOCKER


async def second():
    loop = asyncio.get_running_loop()
    w = loop.create_task(worker(asyncio.Event()), name="worker")
    loop.call_later(0.2, lambda: loop.create_task(blocker(), name="blocker"))
    await w  # @SECOND_AWAIT


def run_b():
    info["loop2_tid"] = threading.get_native_id()
    loop = asyncio.new_event_loop()
    if hasattr(asyncio, "eager_task_factory"):
        loop.set_task_factory(asyncio.eager_task_factory)
    loop.run_until_complete(loop.create_task(second(), name="second"))


threading.Thread(target=run_b, name="loop-2", daemon=True).start()
loop_a = asyncio.new_event_loop()


def announce():
    settled["a"].wait()
    settled["b"].wait()
    time.sleep(0.1)
    with open(OUT + ".tmp", "w") as f:
        json.dump(info, f)
    import os
    os.rename(OUT + ".tmp", OUT)
    print("READY", flush=True)


threading.Thread(target=announce, name="announcer", daemon=True).start()
loop_a.run_until_complete(loop_a.create_task(main(), name="main"))
