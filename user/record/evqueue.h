/* SPDX-License-Identifier: MIT */
/*
 * evqueue: a reader thread that drains the sampler's ring buffer promptly into an in-memory
 * queue, so slow work in the consumer (first symbolization of a large library, a burst of
 * new threads) does not make the kernel drop samples. Optionally, records a classifier
 * calls urgent go into a second queue popped first (in their own order): a consumer that
 * must learn of some records promptly (probing watch: exits, collectives) is then behind
 * only by the record it is handling, not by a backlog of samples. With off-CPU recording the
 * reader also runs the stack fetcher when it has work (sampling__offcpu_fetch_due), so that
 * blocked threads' stacks are taken while the blocks last however slow the consumer is.
 */
#ifndef PROBING_EVQUEUE_H
#define PROBING_EVQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "record/sampling.h"

struct evqueue;

/* Records held at most (bytes); beyond it records are dropped and counted. */
#define EVQUEUE_DEFAULT_LIMIT (512u << 20)

/* Is the record @rec (@len bytes) urgent? Called on the reader thread: cheap, no state. */
typedef bool (*evqueue_urgent_fn)(const void *rec, size_t len);

/*
 * A record (@len bytes) as it is read from the ring buffer, long before it is popped: called
 * on the reader thread with @ctx, for a consumer that must act at once (pyfinder). Cheap.
 */
typedef void (*evqueue_seen_fn)(void *ctx, const void *rec, size_t len);

/* How long the reader sleeps between two drains unless the ring buffer fills (ms). */
#define EVQUEUE_DEFAULT_PACE_MS 10

/*
 * Start the reader thread on @s. It drains the ring buffer every @pace_ms (0: the default),
 * or sooner when the kernel wakes it (the buffer filling up, a process's exit) or
 * evqueue__sync asks. @urgent: which records are popped ahead of the others, or NULL (one
 * queue, in the kernel's order). @seen: called with @seen_ctx for every record read, or
 * NULL. Return 0 and *@out or -errno.
 */
int evqueue__start(struct sampling *s, size_t limit_bytes, unsigned int pace_ms,
		   evqueue_urgent_fn urgent, evqueue_seen_fn seen, void *seen_ctx,
		   struct evqueue **out);

/*
 * Take the next record (an urgent one first), waiting up to @timeout_ms (0: not at all, not
 * even a system call). Return its size and set *@data to it (16-byte aligned, the caller's
 * until it hands it back with evqueue__release), 0 on time-out, or -EPIPE once stopped and
 * empty. The consumer's calls (pop, pop_urgent, release, queued, urgent_waiting) come from
 * one thread.
 */
long evqueue__pop(struct evqueue *q, int timeout_ms, void **data);

/* Take the next urgent record, without waiting: its size and *@data as evqueue__pop, or 0. */
long evqueue__pop_urgent(struct evqueue *q, void **data);

/* Hand back a record popped (its memory is reused). NULL is a no-op. */
void evqueue__release(struct evqueue *q, void *data);

/*
 * Stop the reader after one last drain of the ring buffer; records already queued can still
 * be popped. Safe to call twice.
 */
void evqueue__stop(struct evqueue *q);

/*
 * Wake the reader for a drain now and wait, up to @timeout_ms, until it has queued every
 * record the kernel wrote before this call (then evqueue__pop sees them): for a consumer
 * about to judge by what it knows (a stall) that drains at a slow pace. 0, or -ETIMEDOUT.
 */
int evqueue__sync(struct evqueue *q, int timeout_ms);

/* Bytes of records queued and not popped yet (0: the consumer has caught up). */
size_t evqueue__queued(struct evqueue *q);
/* Does an urgent record wait in the queue? */
bool evqueue__urgent_waiting(struct evqueue *q);

/* Records dropped because the queue was over its limit. */
uint64_t evqueue__dropped(struct evqueue *q);

/* Stop (if needed) and free, discarding queued records. NULL is a no-op. */
void evqueue__free(struct evqueue *q);

#endif
