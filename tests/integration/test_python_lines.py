"""Line-table decoding (user/pylines.c) against every interpreter on the machine: vectors are
generated live by each interpreter (tests/unit/gen_pylines_vectors.py: its own
PyCode_Addr2Line for every instruction of every code object of pylines_sample.py and of
three stdlib modules) and the unit test binary checks the decoders on them."""
import os

import harness as h

GEN = os.path.join(h.ROOT, "tests", "unit", "gen_pylines_vectors.py")
SAMPLE = os.path.join(h.ROOT, "tests", "unit", "pylines_sample.py")
UNIT = os.path.join(h.BUILD, "tests", "unit", "test_pylines")
PYTHONS = h.pythons()


@h.timeout(120)
@h.params([p for _, p in PYTHONS], ids=[label for label, _ in PYTHONS])
def test_line_tables_match_interpreter(exe):
    assert os.path.exists(UNIT), "test_pylines not built (run 'make test')"
    vec = h.tmp("vectors.txt")
    # The sample, plus real modules of the interpreter's own stdlib.
    r = h.run([exe, "-c", "import json.decoder, argparse, dataclasses\n"
               "for m in (json.decoder, argparse, dataclasses): print(m.__file__)"], check=True)
    with open(vec, "w") as f:
        for src in [SAMPLE] + r.stdout.split():
            g = h.run([exe, GEN, src], check=True)
            f.write(g.stdout)
    n = sum(1 for _ in open(vec))
    assert n > 200, f"only {n} code objects"
    u = h.run([UNIT, "vectors_match_interpreters"], env={"PROBING_PYLINES_VECTORS": vec})
    assert u.returncode == 0 and "PASS" in u.stdout, u.stdout + u.stderr
