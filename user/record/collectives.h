/* SPDX-License-Identifier: MIT */
/*
 * collectives: the events of the collectives probes (bpf/commprobe.h) joined into rows of the
 * recording's collectives view (store__collective). A gloo collective is a call on the issuing
 * thread, the work object it queues (enqueue) and that object's completion on a gloo worker
 * thread; a send/recv is a call and its unbound buffer's completion; an NCCL call is only its
 * issue (its completion happens on the GPU). A row is written when the call is under way (ns
 * NULL) and again when it completes; a call still under way when recording stops keeps ns NULL.
 */
#ifndef PROBING_COLLECTIVES_H
#define PROBING_COLLECTIVES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/commprobe.h"
#include "record/comm.h"
#include "record/store.h"

struct collectives;

#define COLL_GAPS 1024 /* times between completions kept for collectives__progress */

/*
 * New joiner writing rows to @st, asking @c for payload sizes. Times are converted to unix
 * time with the clock offsets read now. NULL with errno on error.
 */
struct collectives *collectives__new(struct store *st, struct comm *c);

/* Free (rows written stay). NULL is a no-op. */
void collectives__free(struct collectives *cs);

/* A call (COMM_EV_CALL) whose stack was interned as @stack_id (0: none). 0 or -errno. */
int collectives__call(struct collectives *cs, const struct comm_call_event *e, uint64_t stack_id);

/* Any other event (enqueue, completion, NCCL groups). 0 or -errno. */
int collectives__event(struct collectives *cs, const struct comm_event *e);

/* @pid exited or exec'd: drop what was waiting for its events (its rows stay). */
void collectives__forget(struct collectives *cs, pid_t pid);

/* Rows written, of them completed, and the processes they are of. */
void collectives__counts(const struct collectives *cs, uint64_t *rows, uint64_t *completed,
			 uint64_t *processes);

/*
 * The summary of the recording's collectives (docs/sql.md: stragglers) for the end of
 * record, one line per kind of collective that was seen on two ranks or more, into @buf
 * (empty if none). 0 or -errno.
 */
int collectives__summary(struct collectives *cs, char *buf, size_t size);

/*
 * Call @fn for each call under way: called and not completed (@queued: its work was queued,
 * or for a p2p call, its buffer posted; a gloo call not yet queued has no row yet). @row is
 * valid during the call. A non-zero return from @fn stops and is returned.
 */
int collectives__under_way(struct collectives *cs,
			   int (*fn)(void *ctx, const struct store_collective *row, bool queued),
			   void *ctx);

/* Write the rows of the calls under way again (a new file of a rotating store). 0 or -errno. */
int collectives__rewrite(struct collectives *cs);

/* How the job progresses: its completions (collectives__progress). */
struct coll_progress {
	uint64_t completed;   /* calls seen completing */
	int64_t last_done_ns; /* unix ns of the latest completion, 0: none */
	unsigned int gaps; /* times between two completions of one process known (<= COLL_GAPS) */
	int64_t median_gap_ns; /* their median and largest, 0 without any */
	int64_t max_gap_ns;
};
void collectives__progress(const struct collectives *cs, struct coll_progress *out);

/* Unix ns of @pid's latest completion, 0 if none was seen. */
int64_t collectives__last_done(const struct collectives *cs, pid_t pid);

#endif
