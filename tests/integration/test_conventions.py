"""Conventions the code keeps with its documentation and across commands: the map of the
code stays true (as bpftool checks its docs against its code: every source module of user/
and injector/ is named in the map of docs/architecture.md, and every module the map names
exists), and every command reports a missing option value the same way."""
import glob
import os
import re

import harness as h

DOC = os.path.join(h.ROOT, "docs", "architecture.md")
# Folder of the map -> the files whose modules it lists: every folder of user/, and injector/
# (agent*.c: the agent library, named in the text beside the map).
FOLDERS = {os.path.relpath(d, h.ROOT) + "/": os.path.relpath(d, h.ROOT) + "/*.[ch]"
           for d in sorted(glob.glob(os.path.join(h.ROOT, "user", "*", "")))}
FOLDERS["injector/"] = "injector/*.[ch]"


def map_block():
    text = open(DOC).read()
    m = re.search(r"## The map\n.*?```\n(.*?)```", text, re.S)
    assert m, "docs/architecture.md has no code block under '## The map'"
    return m.group(1)


def named_modules():
    """{folder: set of module names} from the map (names without .c/.h; words in
    parentheses are remarks)."""
    named, folder = {}, None
    for line in map_block().splitlines():
        line = re.sub(r"\([^)]*\)", " ", line)
        m = re.match(r"\s*(?:\d+\s+)?(\S*/\S*)\s+(.*)$", line)
        if m and m.group(1) in FOLDERS:
            folder, rest = m.group(1), m.group(2)
        elif m and not m.group(1).startswith("user/") and m.group(1) != "injector/":
            folder, rest = None, ""  # bpf/*.h, pyoffsets/: described, not listed by module
        else:
            rest = line
        if folder:
            for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[ch])?", rest):
                named.setdefault(folder, set()).add(re.sub(r"\.[ch]$", "", w))
    return named


def source_modules():
    have = {}
    for folder, pattern in FOLDERS.items():
        for path in glob.glob(os.path.join(h.ROOT, pattern)):
            name = os.path.splitext(os.path.basename(path))[0]
            if folder == "injector/" and name.startswith("agent"):
                continue
            have.setdefault(folder, set()).add(name)
    return have


def test_every_module_is_on_the_map():
    named, have = named_modules(), source_modules()
    missing = {f: sorted(have[f] - named.get(f, set())) for f in have}
    missing = {f: v for f, v in missing.items() if v}
    assert not missing, "modules not named in the map of docs/architecture.md: %s" % missing


def test_every_module_on_the_map_exists():
    named, have = named_modules(), source_modules()
    stale = {f: sorted(named[f] - have.get(f, set())) for f in named}
    stale = {f: v for f, v in stale.items() if v}
    assert not stale, "docs/architecture.md names modules that do not exist: %s" % stale


def test_a_missing_option_value_is_named_in_every_command():
    """'-p' with nothing after it is 'needs a value', exit 2, in every command that takes -p
    (config, debug, eval, inject, memory and repl said 'unknown option' before)."""
    for cmd in ("record", "backtrace", "query", "export", "config", "debug", "eval", "inject",
                "memory", "repl", "crashdump", "watch"):
        p = h.probing(cmd, "-p")
        assert p.returncode == 2, (cmd, p.returncode, p.stderr)
        assert f"probing {cmd}: option '-p' needs a value" in p.stderr, (cmd, p.stderr)
        assert f"Try 'probing {cmd} --help'." in p.stderr, (cmd, p.stderr)
