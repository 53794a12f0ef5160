// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/bmap.h"
#include "base/log.h"
#include "python/pyproc.h"
#include "record/threadnames.h"
#include "base/util.h"

#define POLL_NS	       5000000ULL    /* how often the reading thread looks while threads start */
#define IDLE_MS	       1000	     /* at most this long asleep otherwise, with a birth signal */
#define AFTER_BIRTH_NS 100000000ULL  /* read this long after threads were created */
#define FORGET_NS      1000000000ULL /* keep a name this long after its thread exited */
#define MAX_NAME       64
#define READER_NICE    -10

struct watched {
	pid_t pid;
	uint64_t since_ns;   /* when the program watched began (monotonic) */
	uint64_t gen;	     /* which watch() this is: results for an older one are dropped */
	struct pyproc *pp;   /* our own view; only the reading thread uses it */
	bool gone;	     /* unwatched: the reading thread frees pp and drops the entry */
	uint64_t births;     /* thread creations last seen in the BPF map */
	int starting;	     /* threads waiting to run at the last read (threading._limbo) */
	pid_t fork_tid;	     /* a forked child: its main thread's Thread object still holds */
	pid_t main_tid;	     /* the forking thread's id (fork_tid); its id is main_tid */
	uint64_t read_until; /* keep reading until then (monotonic ns) */
};

/* A thread that exited: its name is dropped a while later. */
struct forget {
	uint64_t key;
	uint64_t when; /* monotonic ns */
};

struct threadnames {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	int wake_fd;		       /* eventfd: a watch, a refresh or the stop */
	int epoll_fd;		       /* wake_fd and, with one, the births ring buffer */
	struct ring_buffer *births_rb; /* the sampler's thread births, each one a wake-up */
	bool stop;
	int births_fd, children_fd;
	const uint64_t *changes; /* the sampler's births_changes, or NULL */
	uint64_t changes_seen;
	struct watched *w;
	size_t nw, capw;
	uint64_t gens;
	bool refresh_all;
	struct bmap *names; /* (pid, ns_tid) -> (uintptr_t) malloc'd name, 0 once forgotten */
	size_t live, dead;
	struct forget *fq; /* threads that exited, oldest first, from fq[fq_head] */
	size_t fq_head, fq_n, fq_cap;
	uint64_t version;
};

/* One name read, before it is stored. */
struct got {
	pid_t tid;
	char *name;
};

struct read_ctx {
	struct got *v;
	size_t n, cap;
	pid_t fork_tid, main_tid; /* as in struct watched */
};

static uint64_t name_key(pid_t pid, pid_t tid)
{
	return (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid;
}

static void collect(void *arg, pid_t ns_tid, const char *name)
{
	struct read_ctx *c = arg;

	char *copy;

	if (grow_array(&c->v, &c->cap, c->n + 1, sizeof(*c->v)))
		return;
	if (c->fork_tid && ns_tid == c->fork_tid)
		ns_tid = c->main_tid;
	copy = strndup(name, MAX_NAME - 1);
	if (copy)
		c->v[c->n++] = (struct got){ns_tid, copy};
}

/* Store one name (locked). */
static void put_name(struct threadnames *tn, pid_t pid, const struct got *g)
{
	uint64_t key = name_key(pid, g->tid), *slot;
	char *old, *copy;
	int inserted;

	slot = bmap__upsert(tn->names, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return;
	old = (char *)(uintptr_t)*slot;
	if (old && !strcmp(old, g->name))
		return;
	copy = strdup(g->name);
	if (!copy)
		return;
	if (old)
		free(old);
	else if (!inserted)
		tn->dead--; /* a forgotten entry comes back */
	if (!old)
		tn->live++;
	*slot = (uintptr_t)copy;
	__atomic_add_fetch(&tn->version, 1, __ATOMIC_RELEASE);
}

struct rebuild_ctx {
	uint64_t *keys, *vals;
	size_t n;
	pid_t drop_pid; /* with drop: forget every name of this pid */
	bool drop;
};

static int gather(const void *key, size_t len, uint64_t *value, void *arg)
{
	struct rebuild_ctx *c = arg;
	uint64_t k;

	memcpy(&k, key, sizeof(k));
	if (!*value)
		return 0;
	if (c->drop && (pid_t)(k >> 32) == c->drop_pid) {
		free((void *)(uintptr_t)*value);
		return 0;
	}
	c->keys[c->n] = k;
	c->vals[c->n++] = *value;
	return 0;
}

/* Rebuild the map without forgotten entries (and, with @drop, without @pid's). Locked. */
static void rebuild(struct threadnames *tn, bool drop, pid_t pid)
{
	struct rebuild_ctx c = {.drop = drop, .drop_pid = pid};
	size_t i, total = bmap__size(tn->names);

	c.keys = malloc((total + 1) * sizeof(*c.keys));
	c.vals = malloc((total + 1) * sizeof(*c.vals));
	if (!c.keys || !c.vals) {
		free(c.keys);
		free(c.vals);
		return; /* keep the old map: correct, only larger */
	}
	bmap__for_each(tn->names, gather, &c);
	bmap__clear(tn->names);
	for (i = 0; i < c.n; i++) {
		uint64_t *slot = bmap__upsert(tn->names, &c.keys[i], sizeof(c.keys[i]), 0, NULL);

		if (slot)
			*slot = c.vals[i];
		else
			free((void *)(uintptr_t)c.vals[i]);
	}
	tn->live = c.n;
	tn->dead = 0;
	free(c.keys);
	free(c.vals);
}

/* The entry of watch() number @gen (gone or not), or NULL. Locked. */
static struct watched *find_gen(struct threadnames *tn, uint64_t gen)
{
	size_t i;

	for (i = 0; i < tn->nw; i++)
		if (tn->w[i].gen == gen)
			return &tn->w[i];
	return NULL;
}

/* The live entry of @pid, or NULL. Locked. */
static struct watched *find_pid(struct threadnames *tn, pid_t pid)
{
	size_t i;

	for (i = 0; i < tn->nw; i++)
		if (tn->w[i].pid == pid && !tn->w[i].gone)
			return &tn->w[i];
	return NULL;
}

/* Watch @pid through @pp (ours from now on); read it for a while. Locked. 0 or -ENOMEM. */
static int add_watched(struct threadnames *tn, pid_t pid, struct pyproc *pp, uint64_t since_ns)
{
	struct watched *w;

	if (grow_array(&tn->w, &tn->capw, tn->nw + 1, sizeof(*tn->w))) {
		pyproc__free(pp);
		return -ENOMEM;
	}
	w = &tn->w[tn->nw++];
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->pp = pp;
	w->since_ns = since_ns;
	w->gen = ++tn->gens;
	w->read_until = now_mono_ns() + AFTER_BIRTH_NS;
	if (tn->births_fd >= 0)
		bpf_map_lookup_elem(tn->births_fd, &pid, &w->births);
	return 0;
}

/*
 * Children the sampler followed since the last look: a child of a watched process runs its
 * parent's interpreter, so watch it now (the recorder's watch, when it handles the fork,
 * finds it watched). Locked.
 */
static void watch_new_children(struct threadnames *tn)
{
	struct watched *parent, *w;
	struct new_child nc;
	struct pyproc *pp;
	__u32 child, next;
	bool first = true;

	while (!bpf_map_get_next_key(tn->children_fd, first ? NULL : &child, &next)) {
		first = false;
		child = next;
		if (bpf_map_lookup_elem(tn->children_fd, &child, &nc))
			continue;
		bpf_map_delete_elem(tn->children_fd, &child);
		first = true; /* deleting invalidates the iteration: start over */
		parent = find_pid(tn, nc.ppid);
		if (!parent)
			continue;
		w = find_pid(tn, child); /* the recorder may have been first */
		if (!w) {
			pp = pyproc__dup(parent->pp, child);
			if (!pp || add_watched(tn, child, pp, parent->since_ns))
				continue;
			w = &tn->w[tn->nw - 1];
		}
		w->fork_tid = nc.fork_ns_tid;
		w->main_tid = nc.child_ns_pid;
	}
}

/* Is @w in its read window: threads born lately, or started and waiting for the GIL? */
static bool in_read_window(const struct watched *w, uint64_t now)
{
	return w->starting > 0 || now < w->read_until;
}

/* One round of the reading thread; called with the lock held, returns with it held. */
static void read_round(struct threadnames *tn)
{
	struct watched *jobs = NULL, *w;
	struct read_ctx rc = {};
	size_t njobs = 0, i, j;
	uint64_t now = now_mono_ns(), count;
	bool all = tn->refresh_all, changed = true;

	/* Drop what was unwatched; copy the rest out so the reads run unlocked. */
	for (i = 0; i < tn->nw;) {
		if (tn->w[i].gone) {
			pyproc__free(tn->w[i].pp);
			tn->w[i] = tn->w[--tn->nw];
			continue;
		}
		i++;
	}
	tn->refresh_all = false;
	/* The maps are read only when the sampler counted a change since the last round (the
	 * count is read first: a change after it is seen at the next round). */
	if (tn->changes) {
		uint64_t c = __atomic_load_n(tn->changes, __ATOMIC_ACQUIRE);

		changed = c != tn->changes_seen;
		tn->changes_seen = c;
	}
	if (tn->children_fd >= 0 && changed)
		watch_new_children(tn);
	if (tn->nw) {
		jobs = malloc(tn->nw * sizeof(*jobs));
		if (jobs) {
			memcpy(jobs, tn->w, tn->nw * sizeof(*jobs));
			njobs = tn->nw;
		}
	}
	pthread_mutex_unlock(&tn->lock);

	for (i = 0; i < njobs; i++) {
		w = &jobs[i];
		if (changed && tn->births_fd >= 0 &&
		    !bpf_map_lookup_elem(tn->births_fd, &w->pid, &count) && count != w->births) {
			w->births = count;
			w->read_until = now + AFTER_BIRTH_NS;
		}
		/* Read after births and until started threads run, or when all are asked for. */
		if (!all && !in_read_window(w, now))
			continue;
		rc.n = 0;
		rc.fork_tid = w->fork_tid;
		rc.main_tid = w->main_tid;
		w->starting = pyproc__thread_names(w->pp, collect, &rc);
		if (w->starting < 0 && w->starting != -ESRCH)
			w->starting = 1; /* read while it changed: read again */
		pthread_mutex_lock(&tn->lock);
		if ((w = find_gen(tn, jobs[i].gen)) && !w->gone)
			for (j = 0; j < rc.n; j++)
				put_name(tn, jobs[i].pid, &rc.v[j]);
		pthread_mutex_unlock(&tn->lock);
		for (j = 0; j < rc.n; j++)
			free(rc.v[j].name);
	}

	/* Entries leave the array only in the sweep above, on this thread: each job's is
	 * there, gone or not. */
	pthread_mutex_lock(&tn->lock);
	for (i = 0; i < njobs; i++) {
		w = find_gen(tn, jobs[i].gen);
		if (!w)
			continue;
		w->births = jobs[i].births;
		w->starting = jobs[i].starting;
		if (jobs[i].read_until > w->read_until)
			w->read_until = jobs[i].read_until;
	}
	free(jobs);
	free(rc.v);
}

/* Wake the reading thread (a watch, a refresh, the stop). */
static void wake_reader(struct threadnames *tn)
{
	uint64_t one = 1;

	if (write(tn->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_debug("cannot wake the thread-name reader: %s", strerror(errno));
}

static int birth_seen(void *ctx, void *data, size_t len)
{
	return 0; /* the wake-up is the message: read_round reads the maps */
}

/*
 * How long the reading thread may sleep (ms, -1: until woken), locked. Every POLL_NS while a
 * watched process is in its read window (threads born or starting lately) or a refresh is
 * due; otherwise until a thread is born, which the sampler signals through births_rb (a
 * second at most, should a signal be lost), or at POLL_NS without that signal.
 */
static int sleep_ms(struct threadnames *tn)
{
	uint64_t now = now_mono_ns();
	size_t i;

	if (!tn->nw && !tn->refresh_all)
		return -1;
	if (!tn->births_rb || tn->refresh_all)
		return POLL_NS / 1000000;
	for (i = 0; i < tn->nw; i++)
		if (in_read_window(&tn->w[i], now))
			return POLL_NS / 1000000;
	return IDLE_MS;
}

/* Sleep up to @ms (unlocked): until a wake-up or a thread's birth. */
static void sleep_until_news(struct threadnames *tn, int ms)
{
	struct epoll_event ev[2];
	uint64_t count;

	if (epoll_wait(tn->epoll_fd, ev, 2, ms) < 0 && errno != EINTR) {
		pr_debug("thread-name reader: epoll_wait: %s", strerror(errno));
		usleep(POLL_NS / 1000);
	}
	if (read(tn->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		pr_debug("thread-name reader: %s", strerror(errno));
	if (tn->births_rb)
		ring_buffer__consume(tn->births_rb);
}

static void *reader(void *arg)
{
	struct threadnames *tn = arg;
	int ms;

	prctl(PR_SET_NAME, "probing-names"); /* its role, in top -H and /proc */

	/*
	 * A thread that lives 30 ms must be read within 30 ms of its start, also on a loaded
	 * machine: ask for a larger share (this thread sleeps nearly all the time). Allowed
	 * for root and CAP_SYS_NICE; without it, the default.
	 */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), READER_NICE))
		pr_debug("cannot raise the priority of the thread-name reader: %s",
			 strerror(errno));

	pthread_mutex_lock(&tn->lock);
	while (!tn->stop) {
		read_round(tn);
		if (tn->stop)
			break;
		ms = sleep_ms(tn);
		pthread_mutex_unlock(&tn->lock);
		sleep_until_news(tn, ms);
		pthread_mutex_lock(&tn->lock);
	}
	pthread_mutex_unlock(&tn->lock);
	return NULL;
}

/* The reader's ways to be woken: wake_fd, and @births_rb_fd's ring buffer if >= 0. */
static int open_wake_ups(struct threadnames *tn, int births_rb_fd)
{
	struct epoll_event ev = {.events = EPOLLIN};

	tn->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	tn->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (tn->wake_fd < 0 || tn->epoll_fd < 0 ||
	    epoll_ctl(tn->epoll_fd, EPOLL_CTL_ADD, tn->wake_fd, &ev))
		return -errno;
	if (births_rb_fd < 0)
		return 0;
	tn->births_rb = ring_buffer__new(births_rb_fd, birth_seen, tn, NULL);
	if (tn->births_rb &&
	    !epoll_ctl(tn->epoll_fd, EPOLL_CTL_ADD, ring_buffer__epoll_fd(tn->births_rb), &ev))
		return 0;
	/* Without the signal: look every POLL_NS, as a thread may be born at any time. */
	pr_debug("thread-name reader: no births signal (%s): polling", strerror(errno));
	ring_buffer__free(tn->births_rb);
	tn->births_rb = NULL;
	return 0;
}

struct threadnames *threadnames__start(int births_fd, int children_fd, const uint64_t *changes,
				       int births_rb_fd)
{
	struct threadnames *tn = calloc(1, sizeof(*tn));
	int err;

	if (!tn)
		return NULL;
	tn->wake_fd = tn->epoll_fd = -1;
	tn->births_fd = births_fd;
	tn->children_fd = children_fd;
	tn->changes = changes;
	tn->names = bmap__new();
	if (!tn->names) {
		free(tn);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&tn->lock, NULL);
	err = -open_wake_ups(tn, births_rb_fd);
	if (!err)
		err = pthread_create(&tn->thread, NULL, reader, tn);
	if (err) {
		threadnames__free(tn);
		errno = err;
		return NULL;
	}
	tn->started = true;
	return tn;
}

void threadnames__free(struct threadnames *tn)
{
	size_t i;

	if (!tn)
		return;
	if (tn->started) {
		pthread_mutex_lock(&tn->lock);
		tn->stop = true;
		wake_reader(tn);
		pthread_mutex_unlock(&tn->lock);
		pthread_join(tn->thread, NULL);
	}
	ring_buffer__free(tn->births_rb);
	if (tn->epoll_fd >= 0)
		close(tn->epoll_fd);
	if (tn->wake_fd >= 0)
		close(tn->wake_fd);
	for (i = 0; i < tn->nw; i++)
		pyproc__free(tn->w[i].pp);
	free(tn->w);
	free(tn->fq);
	bmap__free_values(tn->names);
	bmap__free(tn->names);
	pthread_mutex_destroy(&tn->lock);
	free(tn);
}

int threadnames__watch(struct threadnames *tn, pid_t pid, const struct pyproc *pp,
		       uint64_t since_ns)
{
	struct pyproc *view;
	int err = 0;

	pthread_mutex_lock(&tn->lock);
	if (find_pid(tn, pid))
		goto cleanup;
	view = pyproc__dup(pp, pid);
	err = view ? add_watched(tn, pid, view, since_ns) : -ENOMEM;
	wake_reader(tn);
cleanup:
	pthread_mutex_unlock(&tn->lock);
	return err;
}

bool threadnames__unwatch(struct threadnames *tn, pid_t pid, uint64_t before_ns)
{
	struct watched *w;
	bool older = true;

	pthread_mutex_lock(&tn->lock);
	w = find_pid(tn, pid);
	if (w && w->since_ns < before_ns)
		w->gone = true;
	else if (w)
		older = false;
	pthread_mutex_unlock(&tn->lock);
	return older;
}

void threadnames__drop(struct threadnames *tn, pid_t pid)
{
	pthread_mutex_lock(&tn->lock);
	rebuild(tn, true, pid);
	pthread_mutex_unlock(&tn->lock);
}

bool threadnames__lookup(struct threadnames *tn, pid_t pid, pid_t ns_tid, char *buf, size_t size)
{
	uint64_t key = name_key(pid, ns_tid), *slot;
	bool found = false;

	pthread_mutex_lock(&tn->lock);
	slot = bmap__find(tn->names, &key, sizeof(key));
	if (slot && *slot) {
		snprintf(buf, size, "%s", (const char *)(uintptr_t)*slot);
		found = true;
	}
	pthread_mutex_unlock(&tn->lock);
	return found;
}

void threadnames__forget(struct threadnames *tn, pid_t pid, pid_t ns_tid)
{
	uint64_t now = now_mono_ns(), *slot;
	struct forget *f;

	pthread_mutex_lock(&tn->lock);
	/* Not at once: samples of the thread's way out of the kernel may still come. */
	if (!grow_array(&tn->fq, &tn->fq_cap, tn->fq_n + 1, sizeof(*tn->fq)))
		tn->fq[tn->fq_n++] = (struct forget){name_key(pid, ns_tid), now};
	for (; tn->fq_head < tn->fq_n; tn->fq_head++) {
		f = &tn->fq[tn->fq_head];
		if (now - f->when < FORGET_NS)
			break;
		slot = bmap__find(tn->names, &f->key, sizeof(f->key));
		if (slot && *slot) {
			free((void *)(uintptr_t)*slot);
			*slot = 0;
			tn->live--;
			tn->dead++;
		}
	}
	if (tn->fq_head > 256 && tn->fq_head * 2 > tn->fq_n) {
		memmove(tn->fq, tn->fq + tn->fq_head, (tn->fq_n - tn->fq_head) * sizeof(*tn->fq));
		tn->fq_n -= tn->fq_head;
		tn->fq_head = 0;
	}
	if (tn->dead > 1024 && tn->dead > tn->live)
		rebuild(tn, false, 0);
	pthread_mutex_unlock(&tn->lock);
}

void threadnames__refresh(struct threadnames *tn)
{
	pthread_mutex_lock(&tn->lock);
	tn->refresh_all = true;
	wake_reader(tn);
	pthread_mutex_unlock(&tn->lock);
}

uint64_t threadnames__version(struct threadnames *tn)
{
	return __atomic_load_n(&tn->version, __ATOMIC_ACQUIRE);
}
