// SPDX-License-Identifier: MIT
/*
 * agent_worker: the threads that run Python requests (docs/live.md, "The agent"). A worker
 * ("probing-python", started on the first request) takes the queued requests one at a time
 * and runs each under the GIL (agent_pyapi.c). A running request whose client disconnects or
 * sends 'C' gets KeyboardInterrupt raised in it by the watchdog ("probing-watch", started on
 * first use), which waits for the GIL on its own so that nobody else blocks. A cancelled
 * request blocked in C does not block the others: its worker is retired (left to it) and a
 * fresh one serves the queue (struct worker, agent_int.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_int.h"

struct workers wk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.cancel = PTHREAD_COND_INITIALIZER,
	.next_id = 1,
};

static bool start_thread_arg(void *(*fn)(void *), void *arg, const char *name)
{
	pthread_t t;

	/* Every signal stays blocked: this thread inherits the agent thread's mask. */
	if (pthread_create(&t, NULL, fn, arg))
		return false;
	pthread_setname_np(t, name);
	pthread_detach(t);
	return true;
}

static bool start_thread(void *(*fn)(void *), const char *name)
{
	return start_thread_arg(fn, NULL, name);
}

/* ---- the watchdog: interrupts a running request -------------------------------------- */

static bool start_worker(void);

/* A worker whose request is to be interrupted and was not yet (wk.lock held), or NULL. */
static struct worker *to_interrupt(void)
{
	struct worker *w;
	int i;

	for (i = 0; i < MAX_WORKERS; i++) {
		w = &wk.workers[i];
		if (w->used && w->running && w->cancel_id == w->running &&
		    w->delivered != w->cancel_id)
			return w;
	}
	return NULL;
}

/*
 * Retire the workers whose cancelled request has run STUCK_S past the interrupt (wk.lock
 * held): a fresh worker serves the queue. Return when the next one is due (mono_time), or
 * 0 if none is.
 */
static double retire_stuck(double now)
{
	double next = 0, due;
	struct worker *w;
	int i;

	for (i = 0; i < MAX_WORKERS; i++) {
		w = &wk.workers[i];
		if (!w->used || w->retired || !w->running || w->delivered != w->running)
			continue;
		due = w->cancel_at + STUCK_S;
		if (now < due) {
			next = next && next < due ? next : due;
			continue;
		}
		w->retired = true;
		if (wk.cur == w)
			wk.cur = NULL;
		if (wk.head)
			start_worker();
	}
	return next;
}

static void *watchdog_main(void *arg)
{
	struct worker *w;
	struct timespec ts;
	double next, now;
	uint64_t id;
	int st;

	pthread_mutex_lock(&wk.lock);
	for (;;) {
		if (ag.stop || ag.py_gone)
			break;
		w = to_interrupt();
		if (!w) {
			next = retire_stuck(mono_time());
			if (!next) {
				pthread_cond_wait(&wk.cancel, &wk.lock);
				continue;
			}
			/* The condition variable waits on CLOCK_REALTIME: the delay, from now. */
			now = mono_time();
			clock_gettime(CLOCK_REALTIME, &ts);
			next = ts.tv_sec + ts.tv_nsec / 1e9 + (next - now) + 0.001;
			ts.tv_sec = (time_t)next;
			ts.tv_nsec = (long)((next - ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&wk.cancel, &wk.lock, &ts);
			continue;
		}
		id = w->cancel_id;
		w->delivered = id;
		w->cancel_at = mono_time();
		pthread_mutex_unlock(&wk.lock);
		/* Taking the GIL works whenever the running code lets it go (every switch
		 * interval for Python code, or a call into C that releases it). wk.lock is not
		 * held meanwhile: the others take it. Outside an interruptible section nothing
		 * is raised: entering the next section fails instead (set_interruptible), and the
		 * request ends at its next one. */
		st = py.GILState_Ensure();
		pthread_mutex_lock(&wk.lock);
		if (w->running == id && w->running_py && w->interruptible) {
			py.SetAsyncExc(w->ident, *py.ExcKeyboardInterrupt);
			w->sent = true;
		}
		/* An interrupt is raised at the next bytecode: code blocked in C meets it only
		 * when the call returns. Counted from now: retired if not over by then. */
		w->cancel_at = mono_time();
		pthread_mutex_unlock(&wk.lock);
		py.GILState_Release(st);
		pthread_mutex_lock(&wk.lock);
	}
	wk.watchdog_started = false;
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

bool cancel_request(int slot)
{
	struct pyreq **pp, *r;
	bool dropped = false;
	int i;

	pthread_mutex_lock(&wk.lock);
	for (pp = &wk.head; *pp; pp = &(*pp)->next) {
		if ((*pp)->slot != slot)
			continue;
		r = *pp;
		*pp = r->next;
		if (wk.tail == r) {
			wk.tail = NULL;
			for (struct pyreq *q = wk.head; q; q = q->next)
				wk.tail = q;
		}
		free(r->kind);
		free(r->body);
		free(r);
		ag.clients[slot].inflight = false;
		dropped = true;
		break;
	}
	for (i = 0; !dropped && i < MAX_WORKERS && ag.clients[slot].inflight; i++) {
		struct worker *w = &wk.workers[i];

		if (!w->used || !w->running || w->slot != slot)
			continue;
		w->cancel_id = w->running;
		if (!wk.watchdog_started)
			wk.watchdog_started = start_thread(watchdog_main, "probing-watch");
		pthread_cond_signal(&wk.cancel);
	}
	pthread_mutex_unlock(&wk.lock);
	return dropped;
}

/* ---- the worker: runs Python requests one at a time ------------------------------------ */

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pyreq *req;
	int fd;

	pthread_mutex_lock(&wk.lock);
	for (;;) {
		while (!ag.stop && !w->retired && !wk.head)
			pthread_cond_wait(&wk.work, &wk.lock);
		if (ag.stop || w->retired)
			break;
		req = wk.head;
		wk.head = req->next;
		if (!wk.head)
			wk.tail = NULL;
		w->running = req->id;
		w->slot = req->slot;
		snprintf(w->kind, sizeof(w->kind), "%s", req->kind);
		w->started = mono_time();
		/* The I/O thread never closes the socket of a client with a request in flight. */
		fd = req->slot >= 0 ? ag.clients[req->slot].fd : -1;
		pthread_mutex_unlock(&wk.lock);

		python_request(w, fd, req);
		if (req->slot < 0 && !strcmp(req->kind, "crash.install"))
			crash_gate_open();

		pthread_mutex_lock(&wk.lock);
		w->running = 0;
		w->slot = -1;
		if (req->slot >= 0)
			ag.clients[req->slot].inflight = false;
		free(req->kind);
		free(req->body);
		free(req);
		wake_io(); /* it may now read that client's next request, or close it */
	}
	/* Retired (its stuck request is over now) or stopping: the slot is free again. */
	if (wk.cur == w)
		wk.cur = NULL;
	memset(w, 0, sizeof(*w));
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

/* Start a worker to serve the queue, if there is room for one (wk.lock held). */
static bool start_worker(void)
{
	struct worker *w = NULL;
	int i;

	for (i = 0; i < MAX_WORKERS && !w; i++)
		if (!wk.workers[i].used)
			w = &wk.workers[i];
	if (!w)
		return false;
	memset(w, 0, sizeof(*w));
	w->used = true;
	w->slot = -1;
	if (!start_thread_arg(worker_main, w, "probing-python")) {
		w->used = false;
		return false;
	}
	wk.cur = w;
	return true;
}

/*
 * Every worker is stuck (wk.lock held): what they run, for the client's error message.
 */
static void stuck_workers(char *out, size_t len)
{
	double now = mono_time();
	size_t n = 0;
	int i;

	out[0] = '\0';
	for (i = 0; i < MAX_WORKERS && n < len; i++) {
		const struct worker *w = &wk.workers[i];

		if (w->used && w->running)
			n += snprintf(out + n, len - n, "%s'%s' for %.0f s", n ? ", " : "", w->kind,
				      now - w->started);
	}
}

bool queue_request(int slot, const char *kind, const char *body, size_t blen, char *why,
		   size_t whylen)
{
	struct pyreq *r = calloc(1, sizeof(*r));
	char stuck[512];
	bool ok = false;

	if (why)
		why[0] = '\0';
	if (!r)
		return false;
	r->slot = slot;
	r->kind = strdup(kind);
	r->body = malloc(blen + 1);
	if (!r->kind || !r->body)
		goto fail;
	memcpy(r->body, body, blen);
	r->body[blen] = '\0';
	r->blen = blen;
	pthread_mutex_lock(&wk.lock);
	if (!wk.cur && !start_worker() && why) {
		stuck_workers(stuck, sizeof(stuck));
		snprintf(why, whylen,
			 "the agent of process %d cannot run Python requests now: its %d workers "
			 "are each stuck in a request whose client left, blocked in code that "
			 "cannot be interrupted until the call it is in returns (%s); each is "
			 "free again once its call returns (e.g. time.sleep ends)",
			 (int)getpid(), MAX_WORKERS, stuck);
	}
	if (wk.cur) {
		r->id = wk.next_id++;
		if (wk.tail)
			wk.tail->next = r;
		else
			wk.head = r;
		wk.tail = r;
		if (slot >= 0)
			ag.clients[slot].inflight = true;
		pthread_cond_broadcast(&wk.work);
		ok = true;
	}
	pthread_mutex_unlock(&wk.lock);
	if (ok)
		return true;
fail:
	free(r->kind);
	free(r->body);
	free(r);
	return false;
}

bool is_inflight(int slot)
{
	bool v;

	pthread_mutex_lock(&wk.lock);
	v = ag.clients[slot].inflight;
	pthread_mutex_unlock(&wk.lock);
	return v;
}

bool workers_busy(void)
{
	bool busy;

	pthread_mutex_lock(&wk.lock);
	busy = wk.cur && wk.cur->running != 0;
	pthread_mutex_unlock(&wk.lock);
	return busy;
}

void workers_wake_all(void)
{
	pthread_mutex_lock(&wk.lock);
	pthread_cond_broadcast(&wk.work);
	pthread_cond_broadcast(&wk.cancel);
	pthread_mutex_unlock(&wk.lock);
}

/* Only the forking thread exists in the child: reset the locks (another thread may have held
 * them at fork time) and forget the queue (leaked on purpose: no free() of state other
 * threads were using). */
void workers_atfork_child(void)
{
	pthread_mutex_init(&wk.lock, NULL);
	pthread_cond_init(&wk.work, NULL);
	pthread_cond_init(&wk.cancel, NULL);
	wk.watchdog_started = false;
	wk.head = wk.tail = NULL;
	wk.cur = NULL;
	memset(wk.workers, 0, sizeof(wk.workers));
}
