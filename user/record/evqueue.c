// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "record/evqueue.h"
#include "base/log.h"

/*
 * A queued record: one allocation holding the record at its start, then this header (at the
 * record's length rounded up to 8), so that a popped record is handed out as it is, the
 * allocation's start, without moving it.
 */
struct ev {
	struct ev *next;
	size_t len;
};

/* The header's offset in an allocation for a record of @len bytes. */
static size_t ev_offset(size_t len)
{
	return (len + 7) & ~(size_t)7;
}

/* The record of @e: its allocation's start. */
static void *ev_record(struct ev *e)
{
	return (unsigned char *)e - ev_offset(e->len);
}

/* A list of records, oldest first. */
struct evlist {
	struct ev *head, *tail;
};

struct evqueue {
	struct sampling *s;
	evqueue_urgent_fn urgent;
	evqueue_seen_fn seen;
	void *seen_ctx;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct evlist l[2]; /* [1]: the urgent records, popped first */
	size_t bytes, limit;
	unsigned int pace_ms; /* between two drains, unless woken */
	uint64_t dropped;
	bool stop;    /* asked to stop */
	bool stopped; /* reader has finished its last drain */
};

/* Ring-buffer callback (reader thread): copy the record to the queue. */
static int enqueue(void *ctx, void *data, size_t len)
{
	struct evqueue *q = ctx;
	unsigned char *blk = malloc(ev_offset(len) + sizeof(struct ev));
	struct evlist *l = &q->l[q->urgent && q->urgent(data, len)];
	struct ev *e = NULL;

	if (q->seen)
		q->seen(q->seen_ctx, data, len);
	if (blk) {
		e = (struct ev *)(blk + ev_offset(len));
		e->next = NULL;
		e->len = len;
		memcpy(blk, data, len);
	}
	pthread_mutex_lock(&q->lock);
	if (!e || q->bytes + len > q->limit) {
		q->dropped++;
		pthread_mutex_unlock(&q->lock);
		free(blk);
		return 0;
	}
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
	q->bytes += len;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

static void *reader(void *arg)
{
	struct evqueue *q = arg;
	bool stop;

	for (;;) {
		pthread_mutex_lock(&q->lock);
		stop = q->stop;
		pthread_mutex_unlock(&q->lock);
		/* Records do not wake us (BPF_RB_NO_WAKEUP) unless the buffer fills up: drain it
		 * at a steady pace. */
		if (!stop)
			sampling__wait(q->s, q->pace_ms);
		if (sampling__consume(q->s, enqueue, q) < 0)
			pr_debug("ring buffer read failed");
		/* One wake-up per batch, not per record: a context switch per sample would cost
		 * more than processing it. */
		pthread_mutex_lock(&q->lock);
		if (q->l[0].head || q->l[1].head)
			pthread_cond_signal(&q->cond);
		pthread_mutex_unlock(&q->lock);
		if (stop)
			break;
	}
	pthread_mutex_lock(&q->lock);
	q->stopped = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int evqueue__start(struct sampling *s, size_t limit_bytes, unsigned int pace_ms,
		   evqueue_urgent_fn urgent, evqueue_seen_fn seen, void *seen_ctx,
		   struct evqueue **out)
{
	struct evqueue *q = calloc(1, sizeof(*q));
	int err;

	if (!q)
		return -ENOMEM;
	q->s = s;
	q->urgent = urgent;
	q->seen = seen;
	q->seen_ctx = seen_ctx;
	q->limit = limit_bytes ? limit_bytes : EVQUEUE_DEFAULT_LIMIT;
	q->pace_ms = pace_ms ? pace_ms : EVQUEUE_DEFAULT_PACE_MS;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	err = pthread_create(&q->thread, NULL, reader, q);
	if (err) {
		evqueue__free(q);
		return -err;
	}
	q->started = true;
	*out = q;
	return 0;
}

size_t evqueue__queued(struct evqueue *q)
{
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->bytes;
	pthread_mutex_unlock(&q->lock);
	return n;
}

/* Unlink the oldest record of @l (locked, not empty) into *@data: its size. */
static long take(struct evqueue *q, struct evlist *l, void **data)
{
	struct ev *e = l->head;
	long len;

	l->head = e->next;
	if (!l->head)
		l->tail = NULL;
	q->bytes -= e->len;
	/* The record itself: the allocation's start, which the caller frees. */
	len = e->len;
	*data = ev_record(e);
	return len;
}

long evqueue__pop(struct evqueue *q, int timeout_ms, void **data)
{
	struct timespec deadline;
	long len;

	if (timeout_ms > 0) {
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += timeout_ms / 1000;
		deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (deadline.tv_nsec >= 1000000000) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&q->lock);
	while (timeout_ms > 0 && !q->l[0].head && !q->l[1].head && !q->stopped) {
		if (pthread_cond_timedwait(&q->cond, &q->lock, &deadline) == ETIMEDOUT)
			break;
	}
	if (q->l[1].head)
		len = take(q, &q->l[1], data);
	else if (q->l[0].head)
		len = take(q, &q->l[0], data);
	else
		len = q->stopped ? -EPIPE : 0;
	pthread_mutex_unlock(&q->lock);
	return len;
}

long evqueue__pop_urgent(struct evqueue *q, void **data)
{
	long len = 0;

	pthread_mutex_lock(&q->lock);
	if (q->l[1].head)
		len = take(q, &q->l[1], data);
	pthread_mutex_unlock(&q->lock);
	return len;
}

void evqueue__stop(struct evqueue *q)
{
	if (!q || !q->started)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
	q->started = false;
	q->stopped = true;
}

bool evqueue__urgent_waiting(struct evqueue *q)
{
	bool waiting;

	pthread_mutex_lock(&q->lock);
	waiting = q->l[1].head;
	pthread_mutex_unlock(&q->lock);
	return waiting;
}

uint64_t evqueue__dropped(struct evqueue *q)
{
	uint64_t n;

	pthread_mutex_lock(&q->lock);
	n = q->dropped;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void evqueue__free(struct evqueue *q)
{
	struct ev *e, *next;
	int i;

	if (!q)
		return;
	evqueue__stop(q);
	for (i = 0; i < 2; i++)
		for (e = q->l[i].head; e; e = next) {
			next = e->next;
			free(ev_record(e));
		}
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}
