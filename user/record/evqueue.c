// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "record/evqueue.h"
#include "base/log.h"

/*
 * Records are copied into chunks of EVQUEUE_CHUNK bytes (one of its own for a record larger
 * than that), not one allocation each: at the rate of an 8-rank job's samples and
 * collectives, malloc and free per record were a tenth of the recorder's time. A chunk is
 * freed when its last record is released and the reader has moved on to another one.
 */
#define EVQUEUE_CHUNK (256u << 10)

struct chunk {
	unsigned int refs; /* records not released, +1 while the reader fills it (atomic) */
	size_t used, cap;
	unsigned char data[] __attribute__((aligned(16)));
};

/* A queued record: this header, then the record (aligned as malloc's memory). */
struct ev {
	struct ev *next;
	struct chunk *chunk;
	size_t len;
} __attribute__((aligned(16)));

/* A list of records, oldest first. */
struct evlist {
	struct ev *head, *tail;
};

/*
 * The reader publishes what it copied every EVQUEUE_PUBLISH records and at the end of each
 * drain, and the consumer takes everything published at once: one lock per batch on each
 * side, not one per record.
 */
#define EVQUEUE_PUBLISH 64

struct evqueue {
	struct sampling *s;
	evqueue_urgent_fn urgent;
	evqueue_seen_fn seen;
	void *seen_ctx;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct evlist l[2]; /* published, [1]: the urgent records, popped first (locked) */
	size_t published;   /* bytes in l (locked) */
	/* The reader's own: the chunk it fills, what it copied and not published yet. */
	struct chunk *chunk;
	struct chunk *spare; /* one chunk no record uses, for the next (atomic) */
	struct evlist pend[2];
	size_t pend_bytes;
	unsigned int npend;
	/* The consumer's own: what it took from l and not popped yet. */
	struct evlist mine[2];
	size_t mine_bytes;
	size_t held, limit;	     /* bytes of records not released (atomic), and its bound */
	unsigned int urgent_waiting; /* l[1] is not empty (atomic: read without the lock) */
	unsigned int pace_ms;	     /* between two drains, unless woken */
	int kick_fd;		     /* eventfd: wakes the reader for a drain now (evqueue__sync) */
	uint64_t asked;		     /* drains asked for by evqueue__sync (locked) */
	uint64_t served;	     /* of them, the latest a finished drain served (locked) */
	uint64_t dropped;	     /* atomic */
	bool stop;		     /* asked to stop */
	bool stopped;		     /* reader has finished its last drain */
};

static void ev_append(struct evlist *l, struct ev *e)
{
	e->next = NULL;
	if (l->tail)
		l->tail->next = e;
	else
		l->head = e;
	l->tail = e;
}

/* Move the records of @from to the end of @to. */
static void list_splice(struct evlist *to, struct evlist *from)
{
	if (!from->head)
		return;
	if (to->tail)
		to->tail->next = from->head;
	else
		to->head = from->head;
	to->tail = from->tail;
	from->head = from->tail = NULL;
}

/*
 * Drop a reference to @c; the last one frees it, or keeps it as @q's spare: the next chunk
 * reuses its pages while they are warm instead of faulting in fresh ones.
 */
static void chunk_put(struct evqueue *q, struct chunk *c)
{
	if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
		return;
	if (c->cap == EVQUEUE_CHUNK)
		c = __atomic_exchange_n(&q->spare, c, __ATOMIC_ACQ_REL);
	free(c);
}

/* Room for a record of @len bytes with its header, in the reader's chunk: NULL on ENOMEM. */
static struct ev *ev_alloc(struct evqueue *q, size_t len)
{
	size_t need = sizeof(struct ev) + ((len + 15) & ~(size_t)15);
	struct chunk *c = q->chunk;
	struct ev *e;

	if (!c || c->cap - c->used < need) {
		size_t cap = need > EVQUEUE_CHUNK ? need : EVQUEUE_CHUNK;

		c = cap == EVQUEUE_CHUNK ? __atomic_exchange_n(&q->spare, NULL, __ATOMIC_ACQ_REL)
					 : NULL;
		if (!c)
			c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->refs = 1;
		c->used = 0;
		c->cap = cap;
		chunk_put(q, q->chunk); /* its records keep it while they are queued */
		q->chunk = c;
	}
	e = (struct ev *)(c->data + c->used);
	c->used += need;
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	e->chunk = c;
	e->len = len;
	return e;
}

/*
 * Reader thread: hand what it copied to the consumer; at the end of a drain (@wake), wake it
 * if anything waits.
 */
static void publish(struct evqueue *q, bool wake)
{
	pthread_mutex_lock(&q->lock);
	if (q->pend[1].head)
		__atomic_store_n(&q->urgent_waiting, 1, __ATOMIC_RELEASE);
	list_splice(&q->l[0], &q->pend[0]);
	list_splice(&q->l[1], &q->pend[1]);
	q->published += q->pend_bytes;
	q->pend_bytes = 0;
	q->npend = 0;
	/* One wake-up per batch, not per record: a context switch per sample would cost
	 * more than processing it. */
	if (wake && (q->l[0].head || q->l[1].head))
		pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

/* Ring-buffer callback (reader thread): copy the record to the queue. */
static int enqueue(void *ctx, void *data, size_t len)
{
	struct evqueue *q = ctx;
	struct ev *e = NULL;

	if (q->seen)
		q->seen(q->seen_ctx, data, len);
	if (__atomic_load_n(&q->held, __ATOMIC_RELAXED) + len <= q->limit)
		e = ev_alloc(q, len);
	if (!e) {
		__atomic_add_fetch(&q->dropped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	memcpy(e + 1, data, len);
	__atomic_add_fetch(&q->held, len, __ATOMIC_RELAXED);
	ev_append(&q->pend[q->urgent && q->urgent(data, len)], e);
	q->pend_bytes += len;
	if (++q->npend >= EVQUEUE_PUBLISH)
		publish(q, false);
	return 0;
}

/*
 * Reader thread: sleep until the pace, the kernel (the buffer filling up) or a kick wakes it.
 * The kick is reset before the drain learns which asks it serves: an ask whose kick it reset
 * was made before, and is served by this drain.
 */
static uint64_t reader_wait(struct evqueue *q, bool stop)
{
	uint64_t v, serving;

	if (!stop)
		sampling__wait(q->s, q->kick_fd, q->pace_ms);
	if (read(q->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		pr_debug("evqueue: reading its eventfd: %s", strerror(errno));
	pthread_mutex_lock(&q->lock);
	serving = q->asked;
	pthread_mutex_unlock(&q->lock);
	return serving;
}

static void *reader(void *arg)
{
	struct evqueue *q = arg;
	uint64_t serving;
	bool stop;
	int err;

	prctl(PR_SET_NAME, "probing-events"); /* its role, in top -H and /proc */

	for (;;) {
		pthread_mutex_lock(&q->lock);
		stop = q->stop;
		pthread_mutex_unlock(&q->lock);
		/* Records do not wake us (BPF_RB_NO_WAKEUP) unless the buffer fills up: drain it
		 * at a steady pace, or when asked to. */
		serving = reader_wait(q, stop);
		/* Blocked threads' stacks while the blocks last, however far behind the consumer
		 * is (the first symbolization of a large library takes tens of ms): its records
		 * are drained below. */
		if (!stop && (err = sampling__offcpu_fetch_due(q->s)))
			pr_debug("cannot fetch stacks of blocked threads: %s", strerror(-err));
		if (sampling__consume(q->s, enqueue, q) < 0)
			pr_debug("ring buffer read failed");
		publish(q, true);
		if (serving) {
			pthread_mutex_lock(&q->lock);
			if (serving > q->served) {
				q->served = serving;
				pthread_cond_broadcast(&q->cond);
			}
			pthread_mutex_unlock(&q->lock);
		}
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
	q->kick_fd = -1;
	q->urgent = urgent;
	q->seen = seen;
	q->seen_ctx = seen_ctx;
	q->limit = limit_bytes ? limit_bytes : EVQUEUE_DEFAULT_LIMIT;
	q->pace_ms = pace_ms ? pace_ms : EVQUEUE_DEFAULT_PACE_MS;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->kick_fd < 0) {
		err = errno;
		evqueue__free(q);
		return -err;
	}
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
	n = q->published;
	pthread_mutex_unlock(&q->lock);
	return n + q->mine_bytes;
}

/* Consumer, locked: take everything the reader published. */
static void take_published(struct evqueue *q)
{
	list_splice(&q->mine[0], &q->l[0]);
	list_splice(&q->mine[1], &q->l[1]);
	q->mine_bytes += q->published;
	q->published = 0;
	__atomic_store_n(&q->urgent_waiting, 0, __ATOMIC_RELAXED);
}

/* Unlink the consumer's oldest urgent record, else (unless @urgent_only) its oldest other
 * one, into *@data: its size, or 0 if there is none. */
static long take(struct evqueue *q, bool urgent_only, void **data)
{
	struct evlist *l = q->mine[1].head ? &q->mine[1] : urgent_only ? NULL : &q->mine[0];
	struct ev *e = l ? l->head : NULL;

	if (!e)
		return 0;
	l->head = e->next;
	if (!l->head)
		l->tail = NULL;
	q->mine_bytes -= e->len;
	*data = e + 1;
	return e->len;
}

/* The time @timeout_ms from now, as pthread_cond_timedwait takes it. */
static void deadline_in(struct timespec *deadline, int timeout_ms)
{
	clock_gettime(CLOCK_REALTIME, deadline);
	deadline->tv_sec += timeout_ms / 1000;
	deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline->tv_nsec >= 1000000000) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000;
	}
}

long evqueue__pop(struct evqueue *q, int timeout_ms, void **data)
{
	struct timespec deadline;
	bool stopped = false;
	long len;

	/* The lock only when the consumer's own records are done, or an urgent one waits. */
	if (q->mine[0].head && !__atomic_load_n(&q->urgent_waiting, __ATOMIC_ACQUIRE))
		return take(q, false, data);
	if (timeout_ms > 0)
		deadline_in(&deadline, timeout_ms);
	pthread_mutex_lock(&q->lock);
	while (timeout_ms > 0 && !q->mine[0].head && !q->mine[1].head && !q->l[0].head &&
	       !q->l[1].head && !q->stopped) {
		if (pthread_cond_timedwait(&q->cond, &q->lock, &deadline) == ETIMEDOUT)
			break;
	}
	take_published(q);
	stopped = q->stopped;
	pthread_mutex_unlock(&q->lock);
	len = take(q, false, data);
	return len ? len : stopped ? -EPIPE : 0;
}

long evqueue__pop_urgent(struct evqueue *q, void **data)
{
	if (__atomic_load_n(&q->urgent_waiting, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&q->lock);
		take_published(q);
		pthread_mutex_unlock(&q->lock);
	}
	return take(q, true, data);
}

void evqueue__release(struct evqueue *q, void *data)
{
	struct ev *e = (struct ev *)data - 1;

	if (!data)
		return;
	__atomic_sub_fetch(&q->held, e->len, __ATOMIC_RELAXED);
	chunk_put(q, e->chunk);
}

/* Wake the reader now (its eventfd). */
static void kick(struct evqueue *q)
{
	uint64_t one = 1;

	if (write(q->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_debug("evqueue: writing its eventfd: %s", strerror(errno));
}

int evqueue__sync(struct evqueue *q, int timeout_ms)
{
	struct timespec deadline;
	uint64_t mine;
	bool done;

	if (!q->started)
		return 0;
	pthread_mutex_lock(&q->lock);
	mine = ++q->asked;
	pthread_mutex_unlock(&q->lock);
	kick(q);
	deadline_in(&deadline, timeout_ms);
	pthread_mutex_lock(&q->lock);
	while (q->served < mine && !q->stopped)
		if (pthread_cond_timedwait(&q->cond, &q->lock, &deadline) == ETIMEDOUT)
			break;
	done = q->served >= mine || q->stopped;
	pthread_mutex_unlock(&q->lock);
	return done ? 0 : -ETIMEDOUT;
}

void evqueue__stop(struct evqueue *q)
{
	if (!q || !q->started)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_mutex_unlock(&q->lock);
	kick(q); /* not after its pace: at once */
	pthread_join(q->thread, NULL);
	q->started = false;
	q->stopped = true;
}

bool evqueue__urgent_waiting(struct evqueue *q)
{
	return q->mine[1].head || __atomic_load_n(&q->urgent_waiting, __ATOMIC_ACQUIRE);
}

uint64_t evqueue__dropped(struct evqueue *q)
{
	return __atomic_load_n(&q->dropped, __ATOMIC_RELAXED);
}

/* Release every record of @l. */
static void release_all(struct evqueue *q, struct evlist *l)
{
	struct ev *e, *next;

	for (e = l->head; e; e = next) {
		next = e->next;
		evqueue__release(q, e + 1);
	}
	l->head = l->tail = NULL;
}

void evqueue__free(struct evqueue *q)
{
	int i;

	if (!q)
		return;
	evqueue__stop(q);
	if (q->kick_fd >= 0)
		close(q->kick_fd);
	for (i = 0; i < 2; i++) {
		release_all(q, &q->l[i]);
		release_all(q, &q->pend[i]);
		release_all(q, &q->mine[i]);
	}
	chunk_put(q, q->chunk);
	free(q->spare);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}
