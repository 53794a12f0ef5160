/* SPDX-License-Identifier: MIT */
/*
 * crashsnap: what 'probing crashdump' captured when a process crashed (inject/run --crash),
 * written as a backtrace snapshot file (SQLite, the layout of docs/sql.md "Backtrace
 * snapshots": meta, bt_processes, bt_threads, bt_frames and their views) plus two tables of
 * its own, crash (what happened) and bt_locals (each Python frame's local variables), and a
 * summary for people.
 */
#ifndef PROBING_CRASHSNAP_H
#define PROBING_CRASHSNAP_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "live/backtrace.h"

/* An uncaught exception: crash.py's JSON (its type, message, thread, tid and traceback). */
struct crash_exc {
	pid_t tid;	  /* the thread it was raised in */
	const char *json; /* crash.py's JSON */
	bool reported;	  /* its summary was printed by an earlier capture of the same burst */
};

/* What happened. */
struct crash_info {
	pid_t tid;		     /* the thread it happened in (that runs the capture) */
	int signal;		     /* the fatal signal, 0 for exceptions */
	int code;		     /* its si_code */
	unsigned long addr;	     /* its si_addr */
	const struct crash_exc *exc; /* uncaught exceptions (raised at about the same time) */
	int nexc;		     /* how many; 0 for a signal */
	double time;		     /* unix seconds */
};

/*
 * Write @p (read with native frames and locals) and @ci into the new SQLite file @path
 * (written beside it, renamed over it when complete): one crash row per exception (or the
 * signal). For an exception, the thread it was raised in gets the traceback's frames and
 * locals from its JSON instead of the stack the thread is at now (in the exception hook).
 * Return 0 or -errno with what failed printed.
 */
int crashsnap__save(const struct bt_process *p, const struct crash_info *ci, const char *path);

/*
 * The summary on @f: what happened (each exception not reported yet, with its traceback and
 * the locals of its innermost frames; or the signal, with the stack of the thread it happened
 * in), one line for each other thread, and how to read the file.
 */
void crashsnap__summary(const struct bt_process *p, const struct crash_info *ci, const char *path,
			FILE *f);

struct bt_job;
struct sqlite3;

/*
 * For a file read back as @j (btjob__load from @db, read-only): when it is a crash file (it
 * has the table crash), mark the thread each crash happened in (bt_thread.crash: the signal
 * and its code, or the uncaught exception) and put it first in its process, its group first
 * (btjob__group again); with @locals, give the Python frames the local variables the file
 * holds (bt_locals). The file is untrusted: rows naming no thread or frame of @j are left
 * out. Return 1 (a crash file), 0 (another snapshot: @j untouched) or -errno (printed).
 */
int crashsnap__load(struct sqlite3 *db, const char *path, struct bt_job *j, bool locals);

#endif
