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

#include <stdio.h>
#include <sys/types.h>

#include "live/backtrace.h"

/* What happened. */
struct crash_info {
	pid_t tid;	      /* the thread it happened in */
	int signal;	      /* the fatal signal, 0 for an exception */
	int code;	      /* its si_code */
	unsigned long addr;   /* its si_addr */
	const char *exc_json; /* an uncaught exception: crash.py's JSON, else NULL */
	double time;	      /* unix seconds */
};

/*
 * Write @p (read with native frames and locals) and @ci into the new SQLite file @path
 * (written beside it, renamed over it when complete). For an exception, the thread it was
 * raised in gets the traceback's frames and locals from @ci->exc_json instead of the stack
 * the thread is at now (in the exception hook). Return 0 or -errno with what failed printed.
 */
int crashsnap__save(const struct bt_process *p, const struct crash_info *ci, const char *path);

/*
 * The summary on @f: what happened, the stack of the thread it happened in (innermost
 * first, with locals), one line for each other thread, and how to read the file.
 */
void crashsnap__summary(const struct bt_process *p, const struct crash_info *ci, const char *path,
			FILE *f);

#endif
