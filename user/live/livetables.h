/* SPDX-License-Identifier: MIT */
/*
 * livetables: the python.* live tables that the agent's helpers declare, known without the
 * agent. A table's columns are defined once, where its rows are made: the register_table()
 * call of its helper (injector/py/NAME.py). The running agent lists them (its "tables"
 * request); for when none runs, the build reads the same calls (scripts/gen-live-tables.py)
 * into this module. Adding a live table: its register_table() in a helper, and its columns in
 * docs/sql.md ("Live tables").
 */
#ifndef PROBING_LIVETABLES_H
#define PROBING_LIVETABLES_H

#include <stddef.h>

struct live_column {
	const char *name;
	const char *type; /* INTEGER, REAL, TEXT, BLOB, or "" */
};

struct live_table {
	const char *schema, *name; /* "python", "backtrace" */
	const char *helper;	   /* the file that declares it: "injector/py/agent.py" */
	const char *origin;	   /* where it comes from, for messages: "the agent", or "its
				    * helper torch.py: <the first line of its docstring>" */
	const struct live_column *columns;
	size_t ncolumns;
};

/* Every declared table, in the order of the helpers and of their calls; *@n = how many. */
const struct live_table *live_tables(size_t *n);

/* The declared table @schema.@name, or NULL. */
const struct live_table *live_table__find(const char *schema, const char *name);

#endif
