#!/usr/bin/env python3
"""Run the integration tests: every test_* function of tests/integration/test_*.py.

Each test prints one line, "PASS module.test" or "FAIL module.test: reason", then
tests/run.sh counts them; a test that cannot run here (it needs hardware the machine lacks)
raises harness.Skip and prints "SKIP module.test: why", counted as neither. A test that raises fails; a test running past its time limit
(harness.timeout decorator, default 300 s) fails. Output of a failing test follows its line,
indented.

    runner.py [--filter SUBSTRING] [--list]
"""
import argparse
import importlib.util
import os
import signal
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402


class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout("test ran past its time limit")


def discover():
    tests = []
    for fn in sorted(os.listdir(HERE)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        modname = fn[:-3]
        spec = importlib.util.spec_from_file_location(modname, os.path.join(HERE, fn))
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception:
            tests.append((modname + ".<import>", None, traceback.format_exc(), 0))
            continue
        for name in sorted(vars(mod)):
            obj = getattr(mod, name)
            if not (name.startswith("test_") and callable(obj)):
                continue
            variants = getattr(obj, "_params", None)
            limit = getattr(obj, "_timeout", 300)
            if variants is None:
                tests.append((f"{modname}.{name}", obj, None, limit))
            else:
                for vid, value in variants:
                    tests.append((f"{modname}.{name}[{vid}]",
                                  (lambda f, v: (lambda: f(v)))(obj, value), None, limit))
    return tests


def default_signals():
    """Started in the background by a shell without job control (`cmd &` in a script), or
    under nohup, the tests inherit SIGINT, SIGQUIT or SIGHUP ignored, and so does every
    process they start (exec keeps an ignored signal ignored): probing would then, rightly,
    ignore the signals the tests send it. The tests are about what those signals do."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGQUIT, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    default_signals()
    signal.signal(signal.SIGALRM, _alarm)
    failed = 0
    for name, fn, import_error, limit in discover():
        if args.filter and args.filter not in name:
            continue
        if args.list:
            print(name)
            continue
        if fn is None:
            print(f"FAIL {name}: cannot import the test module")
            print("    " + import_error.replace("\n", "\n    "))
            failed += 1
            continue
        with tempfile.TemporaryDirectory(prefix="probing-test-") as tmp:
            harness.begin_test(tmp)
            t0 = time.monotonic()
            signal.alarm(limit)
            try:
                fn()
                signal.alarm(0)
                print(f"PASS {name} ({time.monotonic() - t0:.1f}s)")
            except harness.Skip as e:
                signal.alarm(0)
                print(f"SKIP {name}: {e}")
            except BaseException as e:  # noqa: B902 - report everything, keep going
                signal.alarm(0)
                if isinstance(e, KeyboardInterrupt):
                    raise
                failed += 1
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                print(f"FAIL {name}: {msg}")
                detail = traceback.format_exc() + harness.test_log()
                print("    " + detail.rstrip().replace("\n", "\n    "))
            finally:
                harness.end_test()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
