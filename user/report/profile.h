/* SPDX-License-Identifier: MIT */
/*
 * profile: a recording's stacks and sample counts loaded into memory, for the commands that
 * turn them into pictures and other formats (flamegraph, export). One pass over each table,
 * no joins: at a million samples this is what keeps 'probing flamegraph' under a second.
 *
 * This is the one reader of the physical tables store.c writes (frame_defs, stacks,
 * stack_frames, sample_counts, threads, processes, meta); users read the public views.
 */
#ifndef PROBING_PROFILE_H
#define PROBING_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sqlite3.h>

#include "base/frame.h"

struct profile_stack {
	uint32_t first;	    /* index in profile.refs of its leaf frame */
	uint32_t n;	    /* number of frames: refs[first] (leaf) .. refs[first + n - 1] (root) */
	uint32_t truncated; /* STACK_TRUNC_* (store.h) */
};

struct profile_sample {
	pid_t pid, tid;
	uint32_t stack; /* index in profile.stacks */
	int64_t ts;	/* the second (unix time) with PROFILE_BY_TIME, else 0 */
	uint64_t count;
};

struct profile_thread {
	pid_t pid, tid;
	const char *name; /* or NULL */
};

struct profile_process {
	pid_t pid;
	const char *command; /* or NULL */
	const char *exe;     /* the executable's path, or NULL */
};

struct profile {
	struct frame *frames; /* strings owned by the profile */
	size_t nframes;
	struct profile_stack *stacks;
	size_t nstacks;
	uint32_t *refs; /* frame indices, see profile_stack */
	/*
	 * Sample counts summed per (pid, tid, stack) — per (ts, pid, tid, stack) with
	 * PROFILE_BY_TIME — sorted by pid, tid (, ts), stack.
	 */
	struct profile_sample *samples;
	size_t nsamples;
	struct profile_thread *threads; /* sorted by pid, tid */
	size_t nthreads;
	struct profile_process *processes; /* sorted by pid */
	size_t nprocesses;
	uint64_t total;	  /* samples loaded (after filtering) */
	double frequency; /* meta 'frequency' in Hz, 0 if the recording does not say */
	double start;	  /* meta 'start' in unix seconds, 0 if unknown */
	double duration;  /* meta 'duration' in seconds, 0 if unknown */
	void *priv;
};

#define PROFILE_BY_TIME 1u /* keep counts per second instead of summing them */

struct profile_filter {
	pid_t pid;	    /* only this process; 0 = all */
	pid_t tid;	    /* only this thread; 0 = all */
	unsigned int flags; /* PROFILE_* */
};

/*
 * Load the recording open on @db (recording.h) into *@out. @f may be NULL (everything).
 * Return 0, -ENOMEM, or -EIO with the reason printed (a table that cannot be read, a stack
 * that names a frame the recording does not have). The profile owns all its memory.
 */
int profile__load(sqlite3 *db, const struct profile_filter *f, struct profile **out);

/* Free a profile. NULL is a no-op. */
void profile__free(struct profile *p);

/*
 * For a profile that came out empty: print why — the recording has no samples at all, or
 * none of the process/thread @f selects, then which processes (or threads) it does have.
 */
void profile__explain_empty(sqlite3 *db, const char *path, const struct profile_filter *f);

/* The thread name of (@pid, @tid) or NULL. */
const char *profile__thread_name(const struct profile *p, pid_t pid, pid_t tid);

/* The command line of @pid or NULL. */
const char *profile__command(const struct profile *p, pid_t pid);

#endif
