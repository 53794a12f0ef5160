// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procmaps.h"
#include "base/util.h"
#include "python/pyproc.h"
#include "record/pyfinder.h"
#include "record/sampling.h"

#define LOOK_EVERY_NS 5000000ULL     /* how often a wanted process is looked at */
#define LOOK_FOR_NS   2000000000ULL  /* for how long after its program began */
#define KEEP_NS	      10000000000ULL /* a result not taken is dropped this long after */
#define FINDER_NICE   -10 /* as the thread-name reader: it must keep up on a busy machine */

struct want {
	pid_t pid;
	uint64_t gen;	   /* which want(): a look made for an older one is dropped */
	uint64_t since_ns; /* when the program looked for began (monotonic) */
	uint64_t until_ns; /* look until then */
	uint64_t next_ns;  /* the next look, not before */
	size_t maps_seen;  /* mappings at the last look (0: none yet) */
	bool ended;	   /* found (pp), or found unreadable (err): for pyfinder__take */
	struct pyproc *pp; /* found, the sampler set up */
	uint64_t tried_ns; /* when the look that found it began */
	int err;	   /* ended without pp: -ENOTSUP or why the sampler was not set up */
};

struct pyfinder {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	struct sampling *s;
	unsigned int max_depth;
	pyfinder_found_fn found;
	void *found_ctx;
	struct want *w;
	size_t nw, capw;
	uint64_t gens;
	int news; /* ended wants not taken (read without the lock by pyfinder__news) */
};

static struct want *find_pid(struct pyfinder *f, pid_t pid)
{
	size_t i;

	for (i = 0; i < f->nw; i++)
		if (f->w[i].pid == pid)
			return &f->w[i];
	return NULL;
}

static struct want *find_gen(struct pyfinder *f, uint64_t gen)
{
	size_t i;

	for (i = 0; i < f->nw; i++)
		if (f->w[i].gen == gen)
			return &f->w[i];
	return NULL;
}

/* Remove @w (locked), freeing what it found. */
static void drop_want(struct pyfinder *f, struct want *w)
{
	if (w->ended)
		__atomic_sub_fetch(&f->news, 1, __ATOMIC_RELAXED);
	pyproc__free(w->pp);
	*w = f->w[--f->nw];
}

/*
 * Post what a look found for @w (locked): first the result, then the sampler's set-up with
 * @cfg (or @err: why there is none), so that a sample with Python frames is handled after the
 * recorder can take the interpreter.
 */
static void post_found(struct pyfinder *f, struct want *w, struct pyproc *pp,
		       const struct py_proc_cfg *cfg, int err, uint64_t tried_ns)
{
	w->ended = true;
	w->tried_ns = tried_ns;
	__atomic_add_fetch(&f->news, 1, __ATOMIC_RELEASE);
	if (!err)
		err = sampling__use_python(f->s, w->pid, pp, cfg);
	if (err) {
		pyproc__free(pp);
		w->err = err;
		return;
	}
	w->pp = pp;
	if (f->found)
		f->found(f->found_ctx, w->pid, pp, tried_ns);
}

/*
 * Look at the wanted process of generation @gen (entered and left locked): for its
 * interpreter when its mappings changed, or, found already, whether it has made its first
 * thread state yet (3.15: the walker's configuration needs it). Posted once it has, or at the
 * last look.
 */
static void look(struct pyfinder *f, uint64_t gen)
{
	struct want *w = find_gen(f, gen);
	struct pyproc *pp = w->pp; /* found at an earlier look, not settled */
	uint64_t tried_ns = w->tried_ns;
	size_t seen = w->maps_seen, maps = seen;
	bool last = w->next_ns >= w->until_ns;
	struct py_proc_cfg cfg;
	pid_t pid = w->pid;
	int err = 0;

	w->pp = NULL; /* ours while unlocked */
	pthread_mutex_unlock(&f->lock);

	if (!pp) {
		/* Mappings unchanged since the last look: nothing new was loaded. */
		tried_ns = now_mono_ns();
		maps = procmaps__count(pid);
		if (maps && maps != seen) {
			pp = pyproc__open(pid);
			err = pp ? 0 : errno;
			if (!pp)
				pr_debug("pid %d: no CPython interpreter yet (%s)", pid,
					 strerror(err));
		}
	}
	if (pp)
		err = -pyproc__bpf_cfg(pp, f->max_depth, &cfg);

	pthread_mutex_lock(&f->lock);
	w = find_gen(f, gen);
	if (!w) { /* forgotten (or wanted anew) meanwhile */
		pyproc__free(pp);
		return;
	}
	w->maps_seen = maps;
	if (pp && !err && !py_cfg_settled(&cfg) && !last) {
		w->pp = pp; /* look again in a while */
		w->tried_ns = tried_ns;
	} else if (pp) {
		post_found(f, w, pp, &cfg, -err, tried_ns);
	} else if (err == ENOTSUP) {
		w->ended = true;
		w->err = -ENOTSUP;
		w->tried_ns = tried_ns;
		__atomic_add_fetch(&f->news, 1, __ATOMIC_RELEASE);
	}
}

/*
 * One round (locked): look at each wanted process that is due, and drop those whose time is
 * up. Return when the next one is due (monotonic ns), or 0 if none is.
 */
static uint64_t look_round(struct pyfinder *f)
{
	uint64_t now = now_mono_ns(), next = 0, gen;
	struct want *w;
	size_t i = 0;

	while (i < f->nw && !f->stop) {
		w = &f->w[i];
		if (w->ended && now < w->until_ns + KEEP_NS) {
			if (!next || w->until_ns + KEEP_NS < next)
				next = w->until_ns + KEEP_NS;
			i++;
			continue;
		}
		if (now >= w->until_ns) { /* a result left here: the sampler keeps using it */
			drop_want(f, w);
			continue;
		}
		if (now >= w->next_ns) {
			w->next_ns = now + LOOK_EVERY_NS;
			gen = w->gen;
			look(f, gen);
			now = now_mono_ns();
			i = 0; /* the array may have changed while unlocked: start over */
			continue;
		}
		if (!next || w->next_ns < next)
			next = w->next_ns;
		i++;
	}
	return next;
}

static void *finder_main(void *arg)
{
	struct pyfinder *f = arg;
	struct timespec until;
	uint64_t next;

	prctl(PR_SET_NAME, "probing-pyfind"); /* its role, in top -H and /proc */

	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), FINDER_NICE))
		pr_debug("cannot raise the priority of the interpreter finder: %s",
			 strerror(errno));
	pthread_mutex_lock(&f->lock);
	while (!f->stop) {
		next = look_round(f);
		if (f->stop)
			break;
		if (!next) {
			pthread_cond_wait(&f->cond, &f->lock); /* nothing due: sleep until asked */
			continue;
		}
		until.tv_sec = next / 1000000000ULL;
		until.tv_nsec = next % 1000000000ULL;
		pthread_cond_timedwait(&f->cond, &f->lock, &until);
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

struct pyfinder *pyfinder__start(struct sampling *s, unsigned int max_depth,
				 pyfinder_found_fn found, void *ctx)
{
	struct pyfinder *f = calloc(1, sizeof(*f));
	pthread_condattr_t ca;
	int err;

	if (!f)
		return NULL;
	f->s = s;
	f->max_depth = max_depth;
	f->found = found;
	f->found_ctx = ctx;
	pthread_mutex_init(&f->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&f->thread, NULL, finder_main, f);
	if (err) {
		pyfinder__free(f);
		errno = err;
		return NULL;
	}
	f->started = true;
	return f;
}

void pyfinder__free(struct pyfinder *f)
{
	if (!f)
		return;
	if (f->started) {
		pthread_mutex_lock(&f->lock);
		f->stop = true;
		pthread_cond_signal(&f->cond);
		pthread_mutex_unlock(&f->lock);
		pthread_join(f->thread, NULL);
	}
	while (f->nw)
		drop_want(f, &f->w[0]);
	free(f->w);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

int pyfinder__want(struct pyfinder *f, pid_t pid, uint64_t since_ns, size_t maps_seen)
{
	struct want *w;
	int err = 0;

	pthread_mutex_lock(&f->lock);
	w = find_pid(f, pid);
	if (w && w->since_ns >= since_ns)
		goto out; /* this program is looked for already, or a newer one */
	if (w) {
		drop_want(f, w);
	} else if (grow_array(&f->w, &f->capw, f->nw + 1, sizeof(*f->w))) {
		err = -ENOMEM;
		goto out;
	}
	f->w[f->nw++] = (struct want){.pid = pid,
				      .gen = ++f->gens,
				      .since_ns = since_ns,
				      .until_ns = since_ns + LOOK_FOR_NS,
				      .maps_seen = maps_seen};
	pthread_cond_signal(&f->cond);
out:
	pthread_mutex_unlock(&f->lock);
	return err;
}

bool pyfinder__news(const struct pyfinder *f)
{
	return __atomic_load_n(&f->news, __ATOMIC_ACQUIRE) > 0;
}

int pyfinder__take(struct pyfinder *f, pid_t pid, bool stop, struct pyproc **pp, uint64_t *tried_ns)
{
	struct want *w;
	int ret = 0;

	*pp = NULL;
	pthread_mutex_lock(&f->lock);
	w = find_pid(f, pid);
	if (w && w->ended) {
		ret = w->pp ? 1 : w->err;
		*pp = w->pp;
		*tried_ns = w->tried_ns;
		w->pp = NULL;
	}
	if (w && (w->ended || stop))
		drop_want(f, w);
	pthread_mutex_unlock(&f->lock);
	return ret;
}

void pyfinder__forget(struct pyfinder *f, pid_t pid, uint64_t before_ns)
{
	struct want *w;

	pthread_mutex_lock(&f->lock);
	w = find_pid(f, pid);
	if (w && w->since_ns < before_ns)
		drop_want(f, w);
	pthread_mutex_unlock(&f->lock);
}
