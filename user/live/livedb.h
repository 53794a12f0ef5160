/* SPDX-License-Identifier: MIT */
/*
 * livedb: the live tables of a running process as an in-memory SQLite database, for
 * 'probing query -p PID SQL' (docs/design.md §4, docs/live.md "Live tables").
 *
 * Schemas and tables (every table is a view over json_each(livedb_rows(SCHEMA, NAME),
 * '$.rows'), so a table is computed only when a query reads it, and rows travel as JSON):
 *   system.process   one row from /proc/PID (stat, status, cmdline...)
 *   system.threads   one row per /proc/PID/task/TID
 *   python.*         every table the agent serves (python.backtrace, python.threads,
 *                    python.modules, python.objects, python.settings, and whatever helpers
 *                    register, e.g. python.torch_trace), with the columns the agent lists.
 * Every table the helpers declare (livetables.h) exists even when the agent does not serve
 * it, with the same columns: without the agent, python.backtrace is filled by the hook below
 * (reading stacks from outside) when one is installed, the others fail with "python.X is
 * served by the agent, which is not loaded in process PID" when read; a table a running agent
 * does not serve fails with "not served by the agent ... (it comes from ORIGIN, ...)".
 */
#ifndef PROBING_LIVEDB_H
#define PROBING_LIVEDB_H

#include <sqlite3.h>
#include <sys/types.h>

struct strbuf;
struct live_target;

/*
 * Open the live database of @t: a pid, or an agent serving TCP (then only python.* is
 * available). The agent is used when it runs; it is never injected. Wait up to @gil_ms for the
 * agent's GIL when listing its tables (a hung target: the python.* tables then fail when
 * read, system.* still work). Return 0 and *@out (close with sqlite3_close; the agent
 * connection goes with it), or -errno with a message printed (-ESRCH: no such process).
 */
int livedb__open_target(const struct live_target *t, int gil_ms, sqlite3 **out);

/*
 * The hook that fills python.backtrace when the agent is not loaded: append to @rows a JSON
 * array of rows [thread, tid, depth, func, file, lineno, kind] (depth 0 = innermost), for
 * every thread of @pid; return 0 or -errno (the query then fails with strerror). NULL (the
 * default) makes python.backtrace fail with advice to inject the agent.
 */
typedef int (*livedb_backtrace_fn)(pid_t pid, struct strbuf *rows);
void livedb__set_outside_backtrace(livedb_backtrace_fn fn);

/*
 * Another python.* table that can be read from outside when the agent does not serve it
 * (python.tasks: tasks__json_rows): @fn appends the JSON array of its rows, or returns
 * -errno (-ENOTSUP: only the agent can read it here). Up to 8 such tables.
 */
void livedb__set_outside_table(const char *name, livedb_backtrace_fn fn);

#endif
