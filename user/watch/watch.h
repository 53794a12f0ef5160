/* SPDX-License-Identifier: MIT */
/*
 * watch: probing watch, the loop that runs beside a job for days. It records the job
 * continuously at a low rate (on- and off-CPU samples, collectives) into rotating segment
 * files of a directory (segdir.h), bounded in age and size; declares a stall when a
 * collective stays in flight too long, when no rank completes one for that long, when a rank
 * dies, or when asked (SIGUSR1); and at each stall writes one report: every rank's stacks
 * (a backtrace snapshot, live/btjob.h), the last minutes of the recording, and a diagnosis
 * (diagnose.h), printed as well. docs/watch.md.
 */
#ifndef PROBING_WATCH_H
#define PROBING_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct watch_opts {
	const pid_t *pids; /* the processes watched (with children: and their descendants) ... */
	int npids;
	char **command; /* ... or a command started under the watch (argv, NULL-terminated) */
	bool children;
	const char *dir;      /* where segments and reports go */
	unsigned int freq;    /* samples per second */
	double keep_s;	      /* segments older than this are removed */
	uint64_t max_bytes;   /* segments take at most this much (0: no limit) */
	double segment_s;     /* a new segment this often */
	double window_s;      /* a report's samples: the last seconds */
	double stall_s;	      /* the stall threshold; 0: from the job's pace ... */
	double stall_floor_s; /* ... but never under this */
	const char *on_stall; /* shell command run at a stall, or NULL */
	double on_stall_interval_s;
	bool native;	 /* native stacks in the reports' snapshots */
	int max_reports; /* reports kept */
	int argc;	 /* probing's own command line, for the segments' meta */
	char **argv;
};

/* Run the watch until Ctrl-C/SIGTERM or every process has exited. Return an exit status. */
int watch__run(const struct watch_opts *o);

/*
 * Ask the watch writing into @dir for a report now (SIGUSR1), wait up to @timeout_s for it,
 * and print its path. Return an exit status.
 */
int watch__dump(const char *dir, double timeout_s);

#endif
