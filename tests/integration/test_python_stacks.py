"""Python stacks read from outside (pyproc, through the pystacks test tool) against every
interpreter on the machine, compared with what the workload's interpreter says about itself
(sys._current_frames) and with the '# @marker' lines of the workload's source."""
import os
import re

import harness as h
import pystack_common as pc
import sidroot

PYTHONS = h.pythons()
NO_CPYTHON = f"no CPython 3.{h.py_minors()[0]}-3.{h.py_minors()[-1]} interpreter"


def _strip(frames):
    return [(f["func"], f["file"], f["line"]) for f in frames]


def _check_thread(ours, truth_t, version):
    exp = truth_t["frames"]
    assert _strip(ours["frames"]) == [(f["func"], f["file"], f["line"]) for f in exp], (
        f"thread {truth_t['name']}: read from outside\n  {_strip(ours['frames'])}\n"
        f"interpreter says\n  {[(f['func'], f['file'], f['line']) for f in exp]}")
    if version >= (3, 11):
        assert [f["qualname"] for f in ours["frames"]] == [f["qualname"] for f in exp]
    else:
        assert all(f["qualname"] is None for f in ours["frames"])
    assert not ours["truncated"]
    # The outermost frame was entered from C; before 3.11 every frame was.
    assert ours["frames"][-1]["entry"], f"thread {truth_t['name']}: root frame not an entry"
    if version < (3, 11):
        assert all(f["entry"] for f in ours["frames"])


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_stacks_match_interpreter(exe):
    p, out, truth = pc.start_workload(exe)
    version = tuple(truth["version"])
    m = pc.markers(pc.WORKLOAD)
    um = pc.markers(os.path.join(out, "mödülé_ü.py"))
    threads = pc.pystacks(p.pid)
    by_name = {t["name"]: (tid, t) for tid, t in threads.items()}
    # Every Python thread, with its threading name (non-ASCII included) and OS tid.
    assert sorted(by_name) == sorted(t["name"] for t in truth["threads"]), by_name.keys()
    for t in truth["threads"]:
        tid, ours = by_name[t["name"]]
        assert tid == pc.native_tid(t), f"{t['name']}: tid {tid} != {t['native_id']}"
        assert ours["tss_bound"], f"{t['name']}: thread state not found through the TSS key"
        if t["name"] != "MainThread":
            _check_thread(ours, t, version)
    # The ground truth dump itself, against the source markers.
    wl = pc.WORKLOAD
    main = by_name["MainThread"][1]["frames"]
    assert _strip(main) == [("idle", wl, m["main_leaf"]), ("main", wl, m["main_call"]),
                            ("<module>", wl, m["module_call"])], _strip(main)
    sl = by_name["sleeper-Ω"][1]["frames"]
    assert _strip(sl[:2]) == [("<lambda>", wl, m["sleeper_leaf"]),
                              ("run_forever", wl, m["sleeper_leaf"])]
    if version >= (3, 11):
        assert sl[0]["qualname"] == "Sleeper.run_forever.<locals>.<lambda>"
        assert sl[1]["qualname"] == "Sleeper.run_forever"
    g = by_name["gen-café"][1]["frames"]
    assert _strip(g[:3]) == [("block_in_gen", wl, m["gen_leaf"]),
                             ("produce", wl, m["gen_produce"]),
                             ("gen_consumer", wl, m["gen_consumer"])]
    a = by_name["asyncio-🐍"][1]["frames"]
    assert _strip(a[:3]) == [("block_in_coro", wl, m["coro_leaf"]),
                             ("acoro", wl, m["coro_acoro"]), ("amain", wl, m["coro_amain"])]
    assert [f["func"] for f in a[-4:]] == ["run_async", "run", "_bootstrap_inner", "_bootstrap"]
    u = by_name["unicode"][1]["frames"]
    uf = os.path.join(out, "mödülé_ü.py")
    assert _strip(u[:3]) == [("méthode", uf, um["unicode_leaf"]),
                             ("fünc_ñ", uf, um["unicode_call"]),
                             ("call_unicode", wl, m["unicode_outer"])]
    if version >= (3, 11):
        assert u[0]["qualname"] == "Ünï.méthode"
    c = by_name["ctor"][1]["frames"]
    assert _strip(c[:2]) == [("__init__", wl, m["ctor_leaf"]),
                             ("make_objects", wl, m["ctor_call"])], _strip(c[:3])
    d = by_name["deep"][1]["frames"]
    assert len(d) == 501 + 3, len(d)
    assert _strip(d[:2]) == [("recurse", wl, m["deep_leaf"]), ("recurse", wl, m["deep_call"])]
    assert {(f["func"], f["line"]) for f in d[1:501]} == {("recurse", m["deep_call"])}


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_deep_stack_truncated_at_limit(exe):
    p, out, truth = pc.start_workload(exe)
    m = pc.markers(pc.WORKLOAD)
    deep = pc.native_tid(pc.truth_thread(truth, "deep"))
    full = pc.pystacks(p.pid)[deep]
    cut = pc.pystacks(p.pid, "--depth", 100)[deep]
    assert cut["truncated"] and len(cut["frames"]) == 100
    # The leaf-most 100 frames, exactly those of the full walk.
    assert _strip(cut["frames"]) == _strip(full["frames"][:100])
    assert cut["frames"][0]["line"] == m["deep_leaf"]
    # Other threads are short: not truncated.
    for tid, t in pc.pystacks(p.pid, "--depth", 100).items():
        if tid != deep:
            assert not t["truncated"], t["name"]


@h.timeout(60)
def test_not_a_python_process():
    p = h.spawn(["sleep", "100"])
    h.wait_for(lambda: os.path.exists(f"/proc/{p.pid}/maps"))
    r = h.run([pc.tool(pc.PYSTACKS), str(p.pid)])
    assert r.returncode == 1 and NO_CPYTHON in r.stderr, r.stderr
    r = h.run([pc.tool(pc.PYSTACKS), "999999"])
    assert r.returncode == 1 and "No such process" in r.stderr, r.stderr


@h.timeout(120)
def test_newer_version_read_exactly_or_refused():
    """An interpreter newer than probing knows is read with the newest known layout and the
    interpreter's own _Py_DebugOffsets, kept only if the process confirms it: 3.15 read with
    3.14's knowledge alone (PROBING_PY_KNOWN_MAX), and 3.14 with 3.13's, either gives exactly
    what full knowledge gives or is refused with a message naming the version: never wrong
    frames."""
    if not sidroot.available():
        raise h.Skip(sidroot.skip_reason())
    checked = 0
    for minor in sidroot.MINORS:
        if minor not in h.py_minors() or minor - 1 < 13:
            continue
        p, out, truth = pc.start_workload(sidroot.python(minor))
        full = pc.pystacks(p.pid)
        # The confirmation itself accepts the right layout (PROBING_PY_CONFIRM: the checks a
        # newer version gets, on this known one): what a compatible 3.16 would pass.
        r = h.run([pc.tool(pc.PYSTACKS), "--raw", str(p.pid)], env={"PROBING_PY_CONFIRM": "1"})
        assert r.returncode == 0 and "does not confirm" not in r.stderr, r.stderr
        r = h.run([pc.tool(pc.PYSTACKS), "--raw", str(p.pid)],
                  env={"PROBING_PY_KNOWN_MAX": f"3.{minor - 1}"})
        if r.returncode == 0:
            older = {}
            for line in r.stdout.splitlines():
                f = line.split("\t")
                if f[0] == "F":
                    older.setdefault(int(f[1]), []).append(f[4:9])
            assert older == {tid: [[fr["func"], fr["qualname"] or "-", fr["file"],
                                   str(fr["line"]), "1" if fr["entry"] else "0"]
                                  for fr in t["frames"]] for tid, t in full.items()}, (
                f"3.{minor} read with 3.{minor - 1}'s layout differs from its own")
            h.log(f"3.{minor} read exactly with 3.{minor - 1}'s layout")
        else:
            assert f"Python 3.{minor}." in r.stderr and "newer than probing knows" in \
                r.stderr and f"3.{minor - 1}'s" in r.stderr, r.stderr
            h.log(f"3.{minor} with 3.{minor - 1}'s layout refused: {r.stderr.strip()}")
        p.kill()
        p.wait()
        os.unlink(os.path.join(out, "truth.json"))  # the next workload writes its own
        checked += 1
    assert checked == 2, checked


@h.timeout(60)
def test_unsupported_versions_say_so():
    """pyenv's 3.7/3.6 have _PyRuntime (3.7) or not (3.6, 2.7): a clear message either way."""
    root = os.path.expanduser("~/.pyenv/versions")
    found = 0
    for d in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        minor = d.split(".")[:2]
        if len(minor) < 2 or (minor[0], minor[1]) not in (("3", "7"), ("3", "6"), ("2", "7")):
            continue
        exe = os.path.join(root, d, "bin", f"python{minor[0]}.{minor[1]}")
        if not os.path.exists(exe):
            continue
        p = h.spawn([exe, "-c", "import time; time.sleep(100)"])
        h.wait_for(lambda: "libpython" in open(f"/proc/{p.pid}/maps").read() or
                   "python" in open(f"/proc/{p.pid}/maps").read())
        import time
        time.sleep(0.3)
        r = h.run([pc.tool(pc.PYSTACKS), str(p.pid)])
        assert r.returncode == 1, r.stdout
        if (minor[0], minor[1]) == ("3", "7"):
            assert "Python 3.7" in r.stderr and "not supported" in r.stderr, r.stderr
        else:
            assert NO_CPYTHON in r.stderr, r.stderr
        found += 1
    h.log(f"checked {found} unsupported interpreters")


@h.timeout(120)
@h.params(["linked", "dlopen"])
def test_embedded_interpreter(kind):
    """A C program that embeds CPython (linked against libpython, or dlopen'ing it) running
    the same workload: the interpreter is found in a library of a non-Python executable."""
    exe = os.path.join(h.WORKLOADS, f"py_embed_{kind}")
    assert os.path.exists(exe), f"{exe} not built (run 'make test')"
    with open(exe + ".libpython") as f:
        libpython = f.read().strip()
    prefix = [exe, libpython] if kind == "dlopen" else [exe]
    p, out, truth = pc.start_workload(None, argv_prefix=prefix)
    threads = pc.pystacks(p.pid)
    by_name = {t["name"]: t for t in threads.values()}
    version = tuple(truth["version"])
    for name in ("sleeper-Ω", "gen-café", "unicode"):
        _check_thread(by_name[name], pc.truth_thread(truth, name), version)
    r = h.run([pc.tool(pc.PYSTACKS), str(p.pid)])
    assert libpython in r.stdout.splitlines()[0], r.stdout[:300]


def _readelf_syms(path):
    """{name: (value, size)} of FUNC symbols from .dynsym and .symtab."""
    out = {}
    r = h.run(["readelf", "-W", "--syms", "--dyn-syms", path], check=True)
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[6] != "UND":
            out.setdefault(f[7].split("@")[0], (int(f[1], 16), int(f[2], 0)))
    return out


@h.timeout(60)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_eval_function_ranges(exe):
    """_PyEval_EvalFrameDefault's address ranges in the target (for merging native and
    Python frames): the function, and its .cold part where the ELF names it."""
    p = h.spawn([exe, "-c", "import time; time.sleep(100)"])
    import time
    time.sleep(0.4)
    r = h.run([pc.tool(pc.PYSTACKS), "--info", str(p.pid)], check=True)
    info = [line.split("\t") for line in r.stdout.splitlines()]
    elf = dict(i[:2] for i in info)["elf"]
    got = sorted((int(i[1], 16), int(i[2], 16)) for i in info if i[0] == "eval")
    # Load bias: the mapping of file offset 0 minus the first PT_LOAD's address.
    with open(f"/proc/{p.pid}/maps") as f:
        start = min(int(line.split("-")[0], 16) for line in f
                    if line.rstrip().endswith(elf) and line.split()[2] == "00000000")
    loads = [line.split() for line in h.run(["readelf", "-lW", elf], check=True).stdout
             .splitlines() if line.strip().startswith("LOAD")]
    bias = start - (int(loads[0][2], 16) & ~0xfff)
    syms = _readelf_syms(elf)
    want = [(bias + v, bias + v + s) for name, (v, s) in syms.items()
            if name in ("_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault.cold")]
    stripped = ".symtab" not in h.run(["readelf", "-SW", elf], check=True).stdout
    if stripped:
        # Stripped (Debian): the cold part has no name. Independent check with objdump: the
        # .eh_frame FDE where the function's out-of-range jumps land.
        lo, size = syms["_PyEval_EvalFrameDefault"]
        dis = h.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={lo:#x}",
                     f"--stop-address={lo + size:#x}", elf], check=True).stdout
        targets = [int(t, 16) for t in re.findall(r"\bj[a-z]{1,3} +([0-9a-f]+) <", dis)]
        targets = [t for t in targets if not lo <= t < lo + size]
        fdes = [tuple(int(x, 16) for x in m) for m in re.findall(
            r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)",
            h.run(["readelf", "-W", "--debug-dump=frames", elf]).stdout)]
        counts = {}
        for t in targets:
            for a, b in fdes:
                if a <= t < b:  # the part's first instruction is a target too (3.15)
                    counts[(a, b)] = counts.get((a, b), 0) + 1
        a, b = max(counts, key=counts.get)
        assert counts[(a, b)] >= 0.9 * len(targets), counts
        want.append((bias + a, bias + b))
    assert got == sorted(want), f"{[hex(a) for r in got for a in r]} != " \
                                f"{[hex(a) for r in sorted(want) for a in r]}"
    # 3.11+ builds (GCC 12 here) split a .cold part off; 3.8-3.10 have none.
    assert len(got) == (2 if "_PyEval_EvalFrameDefault.cold" in syms or stripped else 1)


@h.timeout(90)
@h.params(["mount-namespace", "deleted"])
def test_interpreter_file_only_visible_to_target(kind):
    """libpython mapped from a file we cannot open by its path: one mounted in the target's
    own mount namespace (read through /proc/PID/root), or deleted since it was mapped (read
    through /proc/PID/map_files)."""
    label, exe = next((lb, e) for lb, e in PYTHONS if lb == "3.12")
    lib = os.path.join(os.path.dirname(os.path.dirname(exe)), "lib", "libpython3.12.so.1.0")
    libdir = h.tmp("libdir")
    os.makedirs(libdir)
    wrapper = h.tmp("wrapper.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nset -e\n")
        if kind == "mount-namespace":
            f.write(f"mount -t tmpfs probing-test {libdir}\n")
        f.write(f"cp {lib} {libdir}/\nLD_LIBRARY_PATH={libdir} exec {exe} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    prefix = ["unshare", "-m", "--propagation", "private", wrapper] \
        if kind == "mount-namespace" else [wrapper]
    p, out, truth = pc.start_workload(None, argv_prefix=prefix)
    copy = os.path.join(libdir, "libpython3.12.so.1.0")
    if kind == "deleted":
        os.unlink(copy)
        with open(f"/proc/{p.pid}/maps") as f:
            assert f"{copy} (deleted)" in f.read()
    else:
        assert not os.path.exists(copy), "the tmpfs should be private to the target"
    info = h.run([pc.tool(pc.PYSTACKS), "--info", str(p.pid)], check=True).stdout
    assert f"elf\t{copy}\n" in info, info
    by_name = {t["name"]: t for t in pc.pystacks(p.pid).values()}
    for name in ("sleeper-Ω", "gen-café", "deep"):
        _check_thread(by_name[name], pc.truth_thread(truth, name), tuple(truth["version"]))
