// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bmap.h"
#include "dwproc.h"
#include "kallsyms.h"
#include "log.h"
#include "procinfo.h"
#include "recorder.h"
#include "symbolize.h"
#include "util.h"

#define MAX_NATIVE 512	/* native frames unwound per sample */
#define MAX_FRAMES 2048 /* frames per stored stack, all kinds */

struct target {
	pid_t pid, ppid;
	struct dwproc *dp; /* NULL until needed, or if the maps could not be read */
	bool alive;
	bool dp_failed; /* maps unreadable: do not retry on every sample */
	uint64_t samples;
};

struct thread {
	pid_t pid, tid;
	char name[64];
	bool active; /* sampled since the last tick */
	double last_ts;
};

struct recorder {
	struct store *st;
	struct sampling *s;
	struct recorder_opts opts;
	struct symbolizer *sym;
	struct kallsyms *ks;
	struct target *targets;
	size_t ntargets, captargets;
	struct bmap *target_idx; /* pid -> index + 1 */
	struct thread *threads;
	size_t nthreads, capthreads;
	struct bmap *thread_idx; /* (pid, tid) -> index + 1 */
	int64_t mono_to_real_ns;
	struct recorder_stats stats;
	int live; /* targets not yet seen to exit */
	/* Scratch for one sample. */
	struct dwproc_frame nat[MAX_NATIVE];
	struct frame frames[MAX_FRAMES];
	const struct frame *stable[MAX_FRAMES]; /* the cached frame each came from, or NULL */
	uint64_t ids[MAX_FRAMES];
	struct bmap *frame_ids; /* address of a cached (stable) frame -> frame id */
};

struct recorder *recorder__new(struct store *st, struct sampling *s,
			       const struct recorder_opts *opts)
{
	struct recorder *r = calloc(1, sizeof(*r));

	if (!r)
		goto nomem;
	r->st = st;
	r->s = s;
	r->opts = *opts;
	r->sym = symbolizer__new();
	r->target_idx = bmap__new();
	r->thread_idx = bmap__new();
	r->frame_ids = bmap__new();
	if (!r->sym || !r->target_idx || !r->thread_idx || !r->frame_ids)
		goto nomem;
	if (opts->kernel) {
		r->ks = kallsyms__load();
		if (!r->ks)
			pr_warn("cannot read kernel symbols from /proc/kallsyms (%s): kernel "
				"frames "
				"will be unnamed",
				strerror(errno));
	}
	r->mono_to_real_ns = (int64_t)(now_real_ns() - now_mono_ns());
	return r;
nomem:
	recorder__free(r);
	errno = ENOMEM;
	return NULL;
}

void recorder__free(struct recorder *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->ntargets; i++)
		dwproc__free(r->targets[i].dp);
	free(r->targets);
	free(r->threads);
	bmap__free(r->target_idx);
	bmap__free(r->thread_idx);
	bmap__free(r->frame_ids);
	symbolizer__free(r->sym);
	kallsyms__free(r->ks);
	free(r);
}

static double unix_seconds(const struct recorder *r, uint64_t mono_ns)
{
	return (double)((int64_t)mono_ns + r->mono_to_real_ns) / 1e9;
}

static struct target *find_target(struct recorder *r, pid_t pid)
{
	uint32_t key = pid;
	uint64_t *idx = bmap__find(r->target_idx, &key, sizeof(key));

	return idx ? &r->targets[*idx - 1] : NULL;
}

/* Record the process's metadata row (command line, rank, ...). */
static void describe_process(struct recorder *r, struct target *t, double now)
{
	struct store_process p = {.pid = t->pid, .ppid = t->ppid, .start_time = now};
	char *cmd = procinfo_cmdline(t->pid), *exe = procinfo_exe(t->pid);
	char *rank = procinfo_getenv(t->pid, "RANK");
	char *lrank = procinfo_getenv(t->pid, "LOCAL_RANK");
	char *ws = procinfo_getenv(t->pid, "WORLD_SIZE");
	pid_t ppid;
	long v;

	if (!p.ppid) {
		ppid = procinfo_ppid(t->pid);
		p.ppid = ppid > 0 ? ppid : 0;
	}
	p.command = cmd;
	p.exe = exe;
	p.rank = rank && !parse_long(rank, 0, 1 << 30, &v) ? v : -1;
	p.local_rank = lrank && !parse_long(lrank, 0, 1 << 30, &v) ? v : -1;
	p.world_size = ws && !parse_long(ws, 0, 1 << 30, &v) ? v : -1;
	store__process(r->st, &p);
	free(cmd);
	free(exe);
	free(rank);
	free(lrank);
	free(ws);
}

/* Make sure the target has its dwproc (created lazily: after exec, for new children). */
static struct dwproc *target_dwproc(struct target *t)
{
	if (!t->dp && !t->dp_failed) {
		t->dp = dwproc__new(t->pid);
		if (!t->dp) {
			t->dp_failed = true;
			pr_debug("pid %d: cannot read its memory maps: %s", t->pid,
				 strerror(errno));
		}
	}
	return t->dp;
}

int recorder__add_target(struct recorder *r, pid_t pid, pid_t ppid)
{
	uint32_t key = pid;
	struct target *t;
	uint64_t *slot;
	int inserted, err;

	slot = bmap__upsert(r->target_idx, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return -ENOMEM;
	if (!inserted) {
		t = &r->targets[*slot - 1];
	} else {
		if (grow_array(&r->targets, &r->captargets, r->ntargets + 1, sizeof(*t)))
			return -ENOMEM;
		t = &r->targets[r->ntargets];
		memset(t, 0, sizeof(*t));
		t->pid = pid;
		*slot = ++r->ntargets;
	}
	t->ppid = ppid;
	if (!t->alive)
		r->live++;
	t->alive = true;
	t->dp_failed = false;
	if (!t->dp)
		target_dwproc(t);
	if (!t->dp && !procinfo_alive(pid))
		return -ESRCH;
	describe_process(r, t, unix_seconds(r, now_mono_ns()));
	err = sampling__add_target(r->s, pid);
	if (err)
		return err;
	return 0;
}

static struct thread *get_thread(struct recorder *r, pid_t pid, pid_t tid, double ts)
{
	uint64_t key = (uint64_t)pid << 32 | (uint32_t)tid, *slot;
	struct thread *th;
	int inserted;

	slot = bmap__upsert(r->thread_idx, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (!inserted)
		return &r->threads[*slot - 1];
	if (grow_array(&r->threads, &r->capthreads, r->nthreads + 1, sizeof(*th)))
		return NULL;
	th = &r->threads[r->nthreads];
	memset(th, 0, sizeof(*th));
	th->pid = pid;
	th->tid = tid;
	*slot = ++r->nthreads;
	/* Read the name now: a short-lived thread may be gone by the next tick. */
	procinfo_thread_name(pid, tid, th->name, sizeof(th->name));
	store__thread(r->st, pid, tid, th->name[0] ? th->name : NULL, ts);
	r->stats.threads++;
	return th;
}

/* Append the native frames of the sample to r->frames from index *n. */
static void add_native_frames(struct recorder *r, struct target *t, const struct sample_event *e,
			      const void *stack, int *n, unsigned int *trunc)
{
	struct dwproc *dp = target_dwproc(t);
	const struct frame *fr;
	Dwfl_Module *mod;
	bool complete = false;
	int nn, i, j, cnt;

	if (!dp) {
		r->stats.unresolved++;
		r->frames[(*n)++] =
			(struct frame){.kind = FRAME_NATIVE, .func = "[unknown: process exited]"};
		return;
	}
	if (r->opts.native) {
		nn = dwproc__unwind(dp, e->tid, (const uint64_t *)e->regs, stack, e->stack_len,
				    r->nat, MAX_NATIVE, &complete);
	} else {
		r->nat[0].pc = e->regs[DWREG_RIP];
		r->nat[0].activation = true;
		nn = 1;
		complete = true;
	}
	if (nn < 0)
		nn = 0;
	if (complete)
		r->stats.complete++;
	else
		*trunc |= STACK_TRUNC_NATIVE;
	for (i = 0; i < nn && *n < MAX_FRAMES; i++) {
		mod = dwproc__module(dp, r->nat[i].pc);
		/* An address in no known module: a library may have been loaded since. */
		if (!mod && r->nat[i].pc > 4096 && dwproc__refresh(dp, 100) > 0)
			mod = dwproc__module(dp, r->nat[i].pc);
		if (symbolizer__lookup(r->sym, mod, r->nat[i].pc, r->nat[i].activation, &fr, &cnt))
			continue;
		for (j = 0; j < cnt && *n < MAX_FRAMES; j++) {
			r->stable[*n] = &fr[j];
			r->frames[(*n)++] = fr[j];
		}
	}
}

/*
 * The id of r->frames[i] into r->ids[i]. Frames that come from a cache (symbolizer, Python
 * code cache) have a stable address: look that up first instead of hashing the content.
 */
static int frame_id(struct recorder *r, int i)
{
	uintptr_t key = (uintptr_t)r->stable[i];
	uint64_t *slot;
	int inserted, err;

	if (!key)
		return store__frame_id(r->st, &r->frames[i], &r->ids[i]);
	slot = bmap__upsert(r->frame_ids, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return -ENOMEM;
	if (!inserted && *slot) {
		r->ids[i] = *slot;
		return 0;
	}
	err = store__frame_id(r->st, &r->frames[i], &r->ids[i]);
	if (!err)
		*slot = r->ids[i];
	return err;
}

static int handle_sample(struct recorder *r, const struct sample_event *e, size_t len)
{
	const struct py_frame_rec *py = (const void *)(e + 1);
	const uint64_t *kst;
	const void *stack;
	unsigned int trunc = 0;
	struct target *t;
	struct thread *th;
	uint64_t stack_id;
	double ts;
	int n = 0, i, err;

	if (len < sizeof(*e) ||
	    len < sizeof(*e) + e->py_len * sizeof(*py) + e->kstack_len * 8ul + e->stack_len)
		return -EINVAL;
	kst = (const void *)(py + e->py_len);
	stack = kst + e->kstack_len;
	ts = unix_seconds(r, e->time_ns);

	t = find_target(r, e->pid);
	if (!t) {
		/* A child we have not heard of yet (its fork event may follow). */
		recorder__add_target(r, e->pid, 0);
		t = find_target(r, e->pid);
		if (!t)
			return 0;
	}
	if (!t->samples++)
		r->stats.processes++;
	th = get_thread(r, e->pid, e->tid, ts);
	if (th)
		th->active = true;

	memset(r->stable, 0, sizeof(r->stable));
	for (i = 0; i < e->kstack_len && n < MAX_FRAMES; i++)
		r->frames[n++] = kallsyms__frame(r->ks, kst[i]);
	if (!(e->flags & SAMPLE_F_NO_USER_REGS))
		add_native_frames(r, t, e, stack, &n, &trunc);
	if (!n)
		r->frames[n++] = (struct frame){.kind = FRAME_NATIVE, .func = "[unknown]"};

	for (i = 0; i < n; i++) {
		err = frame_id(r, i);
		if (err)
			return err;
	}
	err = store__stack_id(r->st, r->ids, n, trunc, &stack_id);
	if (!err)
		err = store__count(r->st, e->pid, e->tid, stack_id, (int64_t)ts, 1);
	if (!err)
		r->stats.samples++;
	return err;
}

static void target_exited(struct recorder *r, struct target *t, double ts)
{
	if (!t->alive)
		return;
	t->alive = false;
	r->live--;
	store__process_end(r->st, t->pid, ts);
	pr_info("process %d exited", t->pid);
}

static int handle_proc(struct recorder *r, const struct proc_change_event *ev)
{
	struct target *t = find_target(r, ev->pid);
	double ts = unix_seconds(r, ev->time_ns);

	switch (ev->change) {
	case PROC_FORK:
		pr_info("following new process %d (child of %d)", ev->pid, ev->ppid);
		if (recorder__add_target(r, ev->pid, ev->ppid) == -ESRCH) {
			t = find_target(r, ev->pid);
			if (t)
				target_exited(r, t, ts);
		}
		return 0;
	case PROC_EXEC:
		if (t) {
			/* New program image: maps, interpreter and command line are new. */
			dwproc__free(t->dp);
			t->dp = NULL;
			t->dp_failed = false; /* re-read lazily: the loader is still mapping */
			describe_process(r, t, ts);
		}
		return 0;
	case PROC_EXIT:
		if (t)
			target_exited(r, t, ts);
		return 0;
	}
	return 0;
}

int recorder__handle(struct recorder *r, const void *rec, size_t len)
{
	const __u32 *type = rec;

	if (len < sizeof(*type))
		return -EINVAL;
	if (*type == EVENT_SAMPLE)
		return handle_sample(r, rec, len);
	if (*type == EVENT_PROC && len >= sizeof(struct proc_change_event))
		return handle_proc(r, rec);
	return -EINVAL;
}

int recorder__tick(struct recorder *r)
{
	double now = unix_seconds(r, now_mono_ns());
	struct thread *th;
	size_t i;

	/* Names change (pthread_setname_np, threading): refresh those that ran. */
	for (i = 0; i < r->nthreads; i++) {
		th = &r->threads[i];
		if (!th->active)
			continue;
		th->active = false;
		procinfo_thread_name(th->pid, th->tid, th->name, sizeof(th->name));
		store__thread(r->st, th->pid, th->tid, th->name[0] ? th->name : NULL, now);
	}
	/* Exit events can be lost when the ring buffer is full: check. */
	for (i = 0; i < r->ntargets; i++)
		if (r->targets[i].alive && !procinfo_alive(r->targets[i].pid))
			target_exited(r, &r->targets[i], now);
	return store__flush(r->st) ?: recorder__live_targets(r);
}

int recorder__live_targets(const struct recorder *r)
{
	return r->live;
}

void recorder__stats(const struct recorder *r, struct recorder_stats *out)
{
	*out = r->stats;
}
