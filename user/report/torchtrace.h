/* SPDX-License-Identifier: MIT */
/*
 * torchtrace: the PyTorch hooks' table python.torch_trace (injector/py/torch.py, docs/torch.md)
 * outside the live process: saved into a recording file as the table torch_trace, read back
 * from it under its live name too, and written as Chrome trace JSON for Perfetto.
 */
#ifndef PROBING_TORCHTRACE_H
#define PROBING_TORCHTRACE_H

#include <stdio.h>
#include <sqlite3.h>

/*
 * Copy every row of python.torch_trace from the live database @live (livedb.h) into the
 * recording @path, table torch_trace: @path is created as an empty recording when it does
 * not exist; an existing file must be a probing recording (`probing record` makes them) and
 * keeps what it has. @path follows outfile.h's rules, checked first: a symbolic link is
 * followed, a read-only file or anything but a regular file is refused untouched. A row already in the file (same pid, seq and ts: saved before) is not
 * added twice. The process is added to the recording's processes table when known.
 * On success *@added is the number of rows added, *@total the rows the table now holds.
 * Return 0, or -errno with what failed printed (e.g. the hooks are not installed).
 */
int torchtrace__save(sqlite3 *live, const char *path, long long *added, long long *total);

/*
 * @db is a recording opened with recording__open(@path). If it has a torch_trace table, make
 * it readable as python.torch_trace too (the live name), by attaching the same file again,
 * read-only, as schema "python". Return 0 (also when there is no torch_trace table), or
 * -errno with the reason printed.
 */
int torchtrace__alias(sqlite3 *db, const char *path);

/*
 * Write the rows of @table (a table or view with the columns of python.torch_trace, e.g.
 * "python.torch_trace" of a live database or "torch_trace" of a recording) as Chrome trace
 * JSON (the Trace Event Format: a "traceEvents" array) to @f:
 *   - one complete event ("ph": "X") per row: name = module (backward rows: "module
 *     (backward)", optimizer steps: "Class.step"), cat = stage, ts/dur in microseconds
 *     since midnight UTC of the first row's day (otherData.base_unix holds that time),
 *     pid = the process, tid = the thread, args = step, depth, memory columns;
 *   - per thread, events that do not nest inside one another (the same track cannot show
 *     them) go to extra tracks named "THREAD (overlap N)"; ends at most 1 us past the
 *     enclosing event's end (rounding of the recorded times) are clipped to it;
 *   - a "steps" track per process (tid 2^30 - 1, sorted first) with one event per step
 *     spanning its rows;
 *   - metadata events naming processes ("rank R/W (pid P)") and threads.
 * *@events (may be NULL) = complete events written. Return 0, -ENOENT if @table has no rows
 * (nothing is written then), -EINVAL for an SQL error (printed: e.g. no such table), -EIO
 * or -ENOMEM.
 */
int torchtrace__chrome(sqlite3 *db, const char *table, FILE *f, long long *events);

#endif
