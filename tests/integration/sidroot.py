"""Debian unstable's interpreters and PyTorch, in the root file system that
scripts/install-sidroot.sh makes: workloads run inside it (scripts/sidroot-run: its own glibc,
libstdc++ and /usr, the host's PID namespace, /proc, /dev, /tmp and the repository at their own
paths), probing outside it, as with a container.

    sidroot.available()      the root is there and complete
    sidroot.skip_reason()    why not, for harness.Skip
    sidroot.argv("torchrun", ...)   the argv that runs a command inside it
    sidroot.python(14)       an executable that runs /usr/bin/python3.14 inside it (its pid is
                             the interpreter's), for harness.pythons()
"""
import os

ROOT = os.environ.get("PROBING_SIDROOT", "/var/cache/probing/sid-root")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RUN = os.path.join(REPO, "scripts", "sidroot-run")
STAMP = os.path.join(ROOT, ".probing-sidroot")
MINORS = (14, 15)  # the CPython minors the root holds


def available():
    return os.path.isfile(STAMP) and os.path.exists(os.path.join(ROOT, "usr/bin/python3.14"))


def skip_reason():
    return (f"no Debian unstable root at {ROOT} (make it with scripts/install-sidroot.sh; "
            "'make test' does)")


def argv(*cmd):
    """The argv that runs CMD inside the root (same pid, working directory kept)."""
    return [RUN, *map(str, cmd)]


def python(minor):
    """Path of a wrapper that runs the root's python3.MINOR with its arguments (exec all the
    way, so the wrapper's pid is the interpreter's)."""
    d = os.path.join(REPO, "build", "sidroot")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"python3.{minor}")
    text = f'#!/bin/sh\nexec {RUN} /usr/bin/python3.{minor} "$@"\n'
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def has_debugpy():
    """Whether the root holds Debian's python3-debugpy (install-sidroot.sh installs it)."""
    return available() and os.path.isfile(
        os.path.join(ROOT, "usr", "lib", "python3", "dist-packages", "debugpy", "__init__.py"))
