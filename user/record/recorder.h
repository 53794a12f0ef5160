/* SPDX-License-Identifier: MIT */
/*
 * recorder: turns sampler records into stored stacks. For each sample: unwind the native
 * stack (dwproc), symbolize it (symbolize), add kernel frames (kallsyms) and Python frames,
 * intern the stack and count it (store). Keeps per-process and per-thread state: maps,
 * names, liveness.
 */
#ifndef PROBING_RECORDER_H
#define PROBING_RECORDER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/jobinfo.h"
#include "record/sampling.h"
#include "record/store.h"

struct recorder;

/* What the recorder does with the samples; what they hold (kernel and Python frames, off-CPU
 * records) is the sampler's to say (sampling__opts). */
#define RECORDER_PY_DEPTH     128 /* Python frames read per sample, by default */
#define RECORDER_PY_DEPTH_STR "128"

struct recorder_opts {
	bool native; /* unwind native stacks (else only the interrupted function is kept) */
	unsigned int py_depth;
	/* Seconds between two reads of every Python thread's name, for renames (new threads
	 * are read at their birth); 0: PY_NAMES_EVERY_S. A process with many threads takes
	 * tens of reads of its memory per thread. */
	unsigned int names_every_s;
};

#define PY_NAMES_EVERY_S 10
/* Seconds between two writes of the last_seen of a thread seen at every tick (threads.last_seen
 * of a running thread is that much behind in the file being written; exact in a finished one). */
#define THREAD_SEEN_EVERY_S 10

struct recorder_stats {
	uint64_t samples;	 /* samples stored */
	uint64_t complete;	 /* of which the native unwind reached the outermost frame */
	uint64_t unresolved;	 /* samples of processes whose maps could not be read */
	uint64_t processes;	 /* processes that produced samples */
	uint64_t threads;	 /* threads that produced samples */
	uint64_t python_samples; /* samples with Python frames */
	uint64_t py_status[8];	 /* samples of Python processes by enum py_status */
	/* Off-CPU: stacks of blocks by where they were taken (the sweep, the wake-up, the
	 * iterator), and what offcpu.h counted. */
	uint64_t off_stacks_sweep, off_stacks_wake, off_stacks_fetch, off_stacks_resume;
	uint64_t off_stacks_site;      /* of those, native frames from a known site: not unwound */
	uint64_t off_stacks_by_id;     /* of those, sent as the site's id, checked in the kernel */
	uint64_t off_stacks_site_lost; /* sent as the id of a site forgotten since: no stack */
	uint64_t off_stacks_memo;      /* at a known site, the same as the thread's last block's:
					* its stack id reused (blockmemo.h) */
	uint64_t off_segments, off_observations, off_ns;
	uint64_t off_blocks, off_blocks_no_stack, off_ns_no_stack;
	uint64_t off_blocks_run_stack; /* preempted blocks under the run's last on-CPU stack */
};

/* New recorder writing to @st, configuring BPF state through @s. NULL with errno on error. */
struct recorder *recorder__new(struct store *st, struct sampling *s,
			       const struct recorder_opts *opts);

/* Free (does not close the store). NULL is a no-op. */
void recorder__free(struct recorder *r);

/*
 * Make @pid a target: read its maps and metadata now (before sampling starts, so the
 * first samples resolve quickly), add it to the sampler. @ppid: its parent, or 0.
 * Return 0, -ESRCH if it is gone, or -errno.
 */
int recorder__add_target(struct recorder *r, pid_t pid, pid_t ppid);

/* Is @pid a target that has not been seen to exit? */
bool recorder__has_target(struct recorder *r, pid_t pid);

/*
 * Process one ring-buffer record (struct sample_event, proc_change_event or offcpu_event).
 * 0 or -errno.
 */
int recorder__handle(struct recorder *r, const void *rec, size_t len);

/*
 * A record as the ring buffer's reader reads it (evqueue_seen_fn; @ctx: the recorder), long
 * before recorder__handle gets to it: a target that exec'd or a child it forked has its
 * interpreter looked for at once (pyfinder). Called on the reader thread; it touches nothing
 * but the finder, which is thread-safe.
 */
void recorder__seen(void *ctx, const void *rec, size_t len);

/*
 * Periodic work (about once per second): refresh thread names, notice targets that
 * exited (those whose exit event was lost: only when @caught_up, no event being queued
 * still), flush the store. Return the number of live targets, or -errno.
 */
int recorder__tick(struct recorder *r, bool caught_up);

/*
 * Frequent, cheap work independent of the sample backlog (call it every few milliseconds):
 * look for the interpreter of targets that just started or exec'd; with comm, what its
 * probes need at each turn. (Blocked threads' stacks are fetched on the reader thread:
 * sampling__offcpu_fetch_due.)
 */
void recorder__poll(struct recorder *r);

/*
 * The end of recording, once every record was handled: off-CPU time still waiting for a stack
 * is counted (under the fallback), and every thread's row written as it is now
 * (recorder__store_threads). Call before the last recorder__tick. 0 or -errno.
 */
int recorder__finish(struct recorder *r);

/*
 * Write into the store the row of every thread whose name or last_seen changed since it was
 * last written (a file about to be closed: store__rotate).
 */
void recorder__store_threads(struct recorder *r);

struct comm;

/*
 * Record collective communication calls through @c (owned by the caller, who keeps it until
 * after recorder__free): probe the targets now and every target from now on, and join the
 * events into rows of the recording. 0 or -errno.
 */
int recorder__use_comm(struct recorder *r, struct comm *c);

/* Collectives written into the recording, of them those seen completing, and the processes
 * that issued them. */
void recorder__comm_counts(const struct recorder *r, uint64_t *rows, uint64_t *completed,
			   uint64_t *processes);

/*
 * Calls of collectives whose stack was copied and unwound (the first from each call site, and
 * any whose site could not be proven the same), and calls that came from a known call site.
 */
void recorder__comm_stacks(const struct recorder *r, uint64_t *copies, uint64_t *site_calls);

/* The summary of the collectives (collectives.h) into @buf; "" if none. 0 or -errno. */
int recorder__comm_summary(struct recorder *r, char *buf, size_t size);

/* Live targets (not yet seen to exit). */
int recorder__live_targets(const struct recorder *r);

void recorder__stats(const struct recorder *r, struct recorder_stats *out);

/* A process recorded: who it is in its job, and what it gave. */
struct recorder_process {
	pid_t pid;
	const struct job_identity *job; /* owned by the recorder */
	uint64_t samples;		/* its samples (pid reuse: of the latest process) */
};

/*
 * The processes recorded, in the order they became targets, into *@out (malloc'd; the
 * identities stay the recorder's, valid until recorder__free). Return their number, or
 * -ENOMEM.
 */
int recorder__processes(const struct recorder *r, struct recorder_process **out);

/*
 * CPU seconds the targets used while recorded, as /proc showed it when they were added and
 * at the last tick (what a process used after the last tick before it exited is missing).
 */
double recorder__target_cpu(const struct recorder *r);

/*
 * Call @fn when a target process ends (its last thread's exit, seen by the sampler), with
 * its place in its job (owned by the recorder, valid during the call), its status as wait(2)
 * reports it (WIFEXITED, WTERMSIG...) and when (unix seconds). Called from recorder__handle.
 */
typedef void (*recorder_exit_fn)(void *ctx, pid_t pid, const struct job_identity *job, int status,
				 double ts);
void recorder__on_exit(struct recorder *r, recorder_exit_fn fn, void *ctx);

struct collectives;

/* The collectives joiner (record/collectives.h) once recorder__use_comm succeeded, or NULL. */
struct collectives *recorder__collectives(const struct recorder *r);

#endif
