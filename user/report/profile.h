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
	uint32_t state; /* enum wait_state (bpf/waitclass.h): WAIT_RUNNING for on-CPU samples */
	int64_t ts;	/* the second (unix time) with PROFILE_BY_TIME, else 0 */
	uint64_t count;
	uint64_t ns; /* the thread's time they stand for (samples.ns; count x period if the
		      * recording does not say) */
};

struct profile_thread {
	pid_t pid, tid;
	const char *name; /* or NULL */
};

struct profile_process {
	pid_t pid;
	const char *command; /* or NULL */
	const char *exe;     /* the executable's path, or NULL */
	int rank;	     /* its distributed rank (processes.rank), -1 if none */
	const char *host;    /* the host it ran on (processes.host), NULL if unknown */
};

struct profile {
	struct frame *frames; /* strings owned by the profile */
	size_t nframes;
	struct profile_stack *stacks;
	size_t nstacks;
	uint32_t *refs; /* frame indices, see profile_stack */
	/*
	 * Sample counts summed per (pid, tid, stack, state) — per (ts, pid, tid, stack, state)
	 * with PROFILE_BY_TIME — sorted by pid, tid (, ts), stack, state.
	 */
	struct profile_sample *samples;
	size_t nsamples;
	struct profile_thread *threads; /* sorted by pid, tid */
	size_t nthreads;
	struct profile_process *processes; /* sorted by pid */
	size_t nprocesses;
	uint64_t total;	   /* samples loaded (after filtering) */
	uint64_t total_ns; /* the time they stand for */
	/*
	 * The recording has off-CPU time (record --off-cpu): reports weigh stacks by time (ns)
	 * and show the state of off-CPU stacks (profile__state_frame).
	 */
	bool wall;
	double frequency; /* meta 'frequency' in Hz, 0 if the recording does not say */
	double start;	  /* meta 'start' in unix seconds, 0 if unknown */
	double duration;  /* meta 'duration' in seconds, 0 if unknown */
	void *priv;
};

#define PROFILE_BY_TIME 1u /* keep counts per second instead of summing them */
#define PROFILE_RANK	2u /* only the processes whose processes.rank is .rank */
#define PROFILE_RANGE	4u /* only the seconds that overlap [.from, .to) */
#define PROFILE_NO_LINES \
	8u /* Python frames without their line: a function is one frame,
			     * whatever line it was at (py-spy's --nolineno) */

struct profile_filter {
	pid_t pid;	    /* only this process; 0 = all */
	pid_t tid;	    /* only this thread; 0 = all */
	unsigned int flags; /* PROFILE_* */
	int rank;	    /* with PROFILE_RANK: the distributed rank (processes.rank) */
	/*
	 * With PROFILE_RANGE: seconds since the recording's first second (profile__t0). Samples
	 * are timed to the second (sample_times.ts): a second is kept when it overlaps the range.
	 */
	double from, to;
	/*
	 * Only samples in this thread state ("running", "lock", ... as the samples view's
	 * `state` column names them, bpf/waitclass.h); NULL = all. A recording without that
	 * column has no states: profile__load refuses the filter (-EINVAL, reason printed).
	 */
	const char *state;
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

/*
 * The second the recording's time axis starts at, in unix seconds: meta 'start' rounded down,
 * or the earliest sample_times.ts if the recording does not say, 0 if it has no samples. The
 * filter's from/to and the timeline of `probing serve` count from it. 0 or -EIO (printed).
 */
int profile__t0(sqlite3 *db, int64_t *t0);

/*
 * Does the recording @db have thread states other than running: was it recorded with --off-cpu
 * (meta off_cpu), or, for other writers, has its samples view a `state` column with rows in
 * other states? (Every recording of record has the column; without --off-cpu all its rows are
 * 'running'.) 1, 0, or -EIO.
 */
int profile__has_states(sqlite3 *db);

/*
 * Check @name against the thread states bpf/waitclass.h defines ("running", "runnable",
 * "sleep", "lock", "io", "gil", "other"); 0 or -EINVAL. *@code (may be NULL) = its number.
 */
int profile__state_code(const char *name, int *code);

struct profile_second {
	int64_t t;	/* seconds since profile__t0 */
	uint64_t count; /* samples in that second */
};

/*
 * Samples per second of the recording @db that @f selects (by process, thread, rank and state;
 * its time range is ignored: the whole recording), the seconds in ascending order, only those
 * with samples: the time line `probing serve` draws. *@out is malloc'd, *@t0 = profile__t0.
 * Return 0, -ENOMEM, -EINVAL (a state filter on a recording without states, printed) or -EIO.
 */
int profile__per_second(sqlite3 *db, const struct profile_filter *f, struct profile_second **out,
			size_t *n, int64_t *t0);

/* How one rank differs from the median rank (rank_deviation's columns, record/rankview.h). */
struct profile_rank_deviation {
	int rank;
	uint64_t samples;
	double deviation; /* the largest excess of a function's share over the median's */
	const char *func; /* that function, or NULL when the rank exceeds the median nowhere */
	const char *file; /* its file (Python) or library (native), or NULL */
	enum frame_kind kind;
	double share, median_share; /* that function's share in this rank and the median's */
	/* Of the collectives it took part in seen on several ranks, those it entered last. */
	uint64_t collectives, entered_last;
	double others_wait_ms; /* how long the others had entered those, on average */
	bool late;	       /* it entered more than half of them last: the late rank */
	const char *note;      /* rank_deviation.note, or NULL */
};

/*
 * Compare the ranks of the samples of @db that @f selects (all its filters but the rank; the
 * recording's rank_deviation view is the same for the whole recording): one row per rank
 * with samples, the most deviating first. *@out is malloc'd (strings included: free with
 * profile__free_rank_deviation). Return 0, -ENOMEM, -EINVAL (a state filter on a recording
 * without states, printed) or -EIO (printed).
 */
int profile__rank_deviation(sqlite3 *db, const struct profile_filter *f,
			    struct profile_rank_deviation **out, size_t *n);
void profile__free_rank_deviation(struct profile_rank_deviation *rows, size_t n);

/* The process @pid, or NULL. */
const struct profile_process *profile__process(const struct profile *p, pid_t pid);

/*
 * The pseudo-frame reports put on top of a stack in off-CPU state @state ("[off-CPU: lock]",
 * kind FRAME_NATIVE, no module): its index in p->frames, or -1 for WAIT_RUNNING and in a
 * profile that is not p->wall.
 */
long profile__state_frame(const struct profile *p, unsigned int state);

/* The thread name of (@pid, @tid) or NULL. */
const char *profile__thread_name(const struct profile *p, pid_t pid, pid_t tid);

/* The command line of @pid or NULL. */
const char *profile__command(const struct profile *p, pid_t pid);

#endif
