#!/usr/bin/env python3
"""Write to stdout the C declarations of the live tables the agent's helpers serve.

    scripts/gen-live-tables.py injector/py/*.py > build/live_tables.h

The columns of a python.* table are defined once, where its rows are made: the
register_table(SCHEMA, NAME, COLUMNS, ROWS[, DOC]) call of its helper (injector/py/NAME.py).
The C side learns them from the running agent (its "tables" request); this script gives it the
same list for when no agent runs, so that the tables still exist with their columns
(user/live/livetables.c). It reads the helpers without running them (Python's ast module):
SCHEMA and NAME must be string literals, COLUMNS a literal list of (column, sqltype[, doc]) or a
module-level name bound to one. Anything else is an error (exit status 1), naming the file and
line, so that a table cannot silently go missing.

A table's origin, for the message of a running agent that does not serve it (a helper may
register a table only later, e.g. torch_trace once the hooks are installed): "the agent" for
agent.py, else the first line of the helper's docstring after "probing_NAME: ".
"""
import ast
import os
import re
import sys

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SQLTYPES = ("INTEGER", "REAL", "TEXT", "BLOB", "")


class DeclError(Exception):
    pass


def c_string(s):
    """A C string literal holding s (UTF-8; quotes, backslashes and control bytes escaped)."""
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7f and c != "?":  # '?': no trigraphs
            out.append(c)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def module_literals(tree):
    """Module-level NAME = literal assignments."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return names


def is_register_table(call):
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "register_table") or \
        (isinstance(f, ast.Attribute) and f.attr == "register_table")


def literal(node, names, what):
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise DeclError("%s is not a literal (or a module-level name bound to one)" % what)


def origin(path, tree):
    base = os.path.basename(path)
    if base == "agent.py":
        return "the agent"
    doc = (ast.get_docstring(tree) or "").strip().splitlines()
    first = doc[0].strip() if doc else ""
    first = re.sub(r"^probing_\w+:\s*", "", first).rstrip(".")
    return "its helper %s%s" % (base, ": " + first if first else "")


def tables_of(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = module_literals(tree)
    out = []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and is_register_table(n)]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        where = "%s:%d" % (path, node.lineno)
        try:
            if len(node.args) < 3:
                raise DeclError("register_table needs SCHEMA, NAME, COLUMNS as positional "
                                "arguments")
            schema = literal(node.args[0], names, "SCHEMA")
            name = literal(node.args[1], names, "NAME")
            cols = literal(node.args[2], names, "COLUMNS")
            if not (isinstance(schema, str) and IDENT.match(schema)):
                raise DeclError("SCHEMA must be a plain name")
            if not (isinstance(name, str) and IDENT.match(name)):
                raise DeclError("NAME must be a plain name")
            if not isinstance(cols, (list, tuple)) or not cols:
                raise DeclError("COLUMNS must be a non-empty list")
            columns = []
            for c in cols:
                if not isinstance(c, (list, tuple)) or not c or not isinstance(c[0], str) or \
                        not IDENT.match(c[0]):
                    raise DeclError("a column must be (name, sqltype, doc), name a plain "
                                    "name: %r" % (c,))
                t = c[1] if len(c) > 1 else ""
                if t not in SQLTYPES:
                    raise DeclError("column %s: sqltype %r is not one of %s" %
                                    (c[0], t, ", ".join(SQLTYPES[:-1])))
                columns.append((c[0], t))
        except DeclError as e:
            raise DeclError("%s: %s" % (where, e))
        out.append((schema, name, path, origin(path, tree), columns))
    return out


def main(paths):
    tables = []
    for path in paths:
        tables.extend(tables_of(path))
    seen = {}
    for t in tables:
        key = (t[0], t[1])
        if key in seen and seen[key][4] != t[4]:
            raise DeclError("%s.%s is declared twice with different columns (%s, %s)" %
                            (t[0], t[1], seen[key][2], t[2]))
        seen.setdefault(key, t)
    w = sys.stdout.write
    w("/* Generated by scripts/gen-live-tables.py from %s: do not edit. */\n\n" %
      " ".join(paths))
    for i, (schema, name, path, orig, columns) in enumerate(seen.values()):
        w("static const struct live_column live_columns_%d[] = {\n" % i)
        for c, t in columns:
            w("\t{%s, %s},\n" % (c_string(c), c_string(t)))
        w("};\n\n")
    w("static const struct live_table live_tables_declared[] = {\n")
    for i, (schema, name, path, orig, columns) in enumerate(seen.values()):
        w("\t{%s, %s, %s, %s, live_columns_%d, %d},\n" %
          (c_string(schema), c_string(name), c_string(path), c_string(orig), i, len(columns)))
    w("};\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: %s HELPER.py..." % sys.argv[0])
    try:
        main(sys.argv[1:])
    except (DeclError, OSError, SyntaxError) as e:
        sys.exit("%s: %s" % (sys.argv[0], e))
