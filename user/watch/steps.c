// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "base/jsonq.h"
#include "base/log.h"
#include "base/util.h"
#include "live/agent_client.h"
#include "watch/steps.h"

#define CONNECT_MS 500	/* to connect to an agent */
#define REQUEST_MS 1000 /* for its GIL, then for its answer */

struct proc_steps {
	pid_t pid;
	double next_try; /* no agent or no hooks: not before then */
	struct step_pace pace;
};

struct steps {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop;
	double interval_s;
	struct proc_steps *procs; /* under lock */
	size_t nprocs;
	double last_move;
};

bool step_pace__read(struct step_pace *p, int64_t step, double t)
{
	if (!p->known || step < p->step) {
		/* The first reading, or the hooks put in again (a new count): the pace is
		 * judged from now. */
		p->known = true;
		p->step = step;
		p->seen = t;
		p->pending = 0;
		return true;
	}
	if (step == p->step)
		return false;
	/*
	 * The time between two readings over the steps made between them is a step's time
	 * only if the process stepped all along: the last move before it stopped (a hang) is
	 * a few steps over a whole interval, a step seemingly many times longer than it is,
	 * which would raise the threshold of the very stall it precedes. So a move counts once
	 * the process is read to move again; until then it is pending.
	 */
	if (p->pending > 0)
		p->gaps[p->ngaps++ % STEP_PACE_MOVES] = p->pending;
	p->pending = (t - p->seen) / (double)(step - p->step);
	p->step = step;
	p->seen = t;
	return true;
}

double step_pace__longest(const struct step_pace *p)
{
	unsigned int k, n = p->ngaps < STEP_PACE_MOVES ? p->ngaps : STEP_PACE_MOVES;
	double longest = 0;

	for (k = 0; k < n; k++)
		if (p->gaps[k] > longest)
			longest = p->gaps[k];
	/* One move only (slow steps, just begun): that move is all there is. */
	return n ? longest : p->pending;
}

static double now_s(void)
{
	return now_real_ns() / 1e9;
}

/*
 * Ask @pid's agent for its hooks' step: 0 and *@step, -ENOENT (no hooks), -ENODATA (hooks in,
 * no step begun yet), or -errno.
 */
static int ask(pid_t pid, int64_t *step)
{
	struct agent_client *c = NULL;
	struct agent_reply r = {0};
	long long v;
	int err;

	err = agent_client__connect_pid(pid, CONNECT_MS, &c);
	if (err)
		return err;
	err = agent_client__request(c, "torch.status", "{}", REQUEST_MS, REQUEST_MS, NULL, &r);
	if (!err && (r.type != 'R' || !jq_bool(r.data, "$.installed")))
		err = -ENOENT;
	if (!err && jq_int(r.data, "$.step", &v))
		err = -ENODATA;
	if (!err)
		*step = v;
	agent_reply__free(&r);
	agent_client__free(c);
	return err;
}

/* What @pid's answer (@err, @step) at @t says, into its entry (under lock). */
static void learn(struct steps *st, pid_t pid, int err, int64_t step, double t)
{
	struct proc_steps *p = NULL;

	for (size_t i = 0; i < st->nprocs; i++)
		if (st->procs[i].pid == pid)
			p = &st->procs[i];
	if (!p)
		return; /* no longer watched */
	if (err) {
		/* No agent, no hooks: later. A time-out (the GIL held) says nothing, and
		 * hooks with no step yet are asked again at the next turn. */
		if (err != -ETIMEDOUT && err != -ENODATA)
			p->next_try = t + STEPS_RETRY_S;
		return;
	}
	if (step_pace__read(&p->pace, step, t))
		st->last_move = t;
}

static void *steps_main(void *arg)
{
	struct steps *st = arg;
	pid_t *ask_now = NULL;
	size_t cap = 0;

	prctl(PR_SET_NAME, "probing-steps"); /* its role, in top -H and /proc */

	pthread_mutex_lock(&st->lock);
	while (!st->stop) {
		double t = now_s();
		size_t n = 0, i;
		struct timespec until;

		if (!grow_array(&ask_now, &cap, st->nprocs + 1, sizeof(*ask_now)))
			for (i = 0; i < st->nprocs; i++)
				if (st->procs[i].next_try <= t)
					ask_now[n++] = st->procs[i].pid;
		for (i = 0; i < n && !st->stop; i++) {
			int64_t step = 0;
			int err;

			pthread_mutex_unlock(&st->lock);
			err = ask(ask_now[i], &step);
			pthread_mutex_lock(&st->lock);
			learn(st, ask_now[i], err, step, now_s());
		}
		t += st->interval_s;
		until.tv_sec = (time_t)t;
		until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
		/* CLOCK_REALTIME (the condition's default): the interval, or a stop. */
		while (!st->stop && pthread_cond_timedwait(&st->wake, &st->lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&st->lock);
	free(ask_now);
	return NULL;
}

int steps__start(double interval_s, struct steps **out)
{
	struct steps *st = calloc(1, sizeof(*st));
	int err;

	if (!st)
		return -ENOMEM;
	st->interval_s = interval_s;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->wake, NULL);
	err = -pthread_create(&st->thread, NULL, steps_main, st);
	if (err) {
		pthread_mutex_destroy(&st->lock);
		pthread_cond_destroy(&st->wake);
		free(st);
		return err;
	}
	*out = st;
	return 0;
}

void steps__stop(struct steps *st)
{
	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	st->stop = true;
	pthread_cond_signal(&st->wake);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->thread, NULL);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->wake);
	free(st->procs);
	free(st);
}

int steps__set_pids(struct steps *st, const pid_t *pids, int n)
{
	struct proc_steps *v;
	size_t kept = 0;

	v = calloc(n > 0 ? n : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&st->lock);
	for (int i = 0; i < n; i++) {
		size_t j;

		for (j = 0; j < st->nprocs && st->procs[j].pid != pids[i]; j++)
			;
		if (j < st->nprocs)
			v[kept] = st->procs[j];
		else
			v[kept].pid = pids[i];
		kept++;
	}
	free(st->procs);
	st->procs = v;
	st->nprocs = kept;
	pthread_mutex_unlock(&st->lock);
	return 0;
}

void steps__progress(struct steps *st, struct step_progress *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&st->lock);
	for (size_t i = 0; i < st->nprocs; i++) {
		const struct step_pace *p = &st->procs[i].pace;
		double longest = step_pace__longest(p);

		if (!p->known)
			continue;
		if (!out->procs++ || p->step > out->step)
			out->step = p->step;
		if (longest > out->max_step_s)
			out->max_step_s = longest;
	}
	out->last_move = st->last_move;
	pthread_mutex_unlock(&st->lock);
}

double steps__last_move(struct steps *st, pid_t pid)
{
	double t = 0;

	pthread_mutex_lock(&st->lock);
	for (size_t i = 0; i < st->nprocs; i++)
		if (st->procs[i].pid == pid && st->procs[i].pace.known)
			t = st->procs[i].pace.seen;
	pthread_mutex_unlock(&st->lock);
	return t;
}
