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
#include "pymerge.h"
#include "pyproc.h"
#include "recorder.h"
#include "stackbuild.h"
#include "symbolize.h"
#include "util.h"

#define MAX_NATIVE 512	/* native frames unwound per sample */
#define MAX_FRAMES 2048 /* frames per stored stack, all kinds */

struct target {
	pid_t pid, ppid;
	struct dwproc *dp; /* NULL until needed, or if the maps could not be read */
	struct pyproc *py; /* its CPython interpreter, or NULL */
	uint64_t py_gen;   /* which interpreter object: keys the resolved-frame cache */
	bool alive;
	bool dp_failed;	      /* maps unreadable: do not retry on every sample */
	bool py_unsupported;  /* a CPython we cannot read (already said): do not retry */
	size_t py_maps_seen;  /* mappings when we last looked for an interpreter */
	uint64_t py_tried_ns; /* when we last looked (monotonic) */
	uint64_t started_ns;  /* when it became a target or exec'd (monotonic) */
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
	int live;		   /* targets not yet seen to exit */
	char python_versions[256]; /* "3.11.7 3.12.1": for meta */
	/* Scratch for one sample. */
	struct dwproc_frame nat[MAX_NATIVE];
	struct pym_frame nframes[MAX_FRAMES]; /* native frames, classified */
	struct pym_frame pframes[SAMPLER_MAX_PYDEPTH];
	struct pym_frame merged[MAX_FRAMES];
	struct frame frames[MAX_FRAMES];
	const struct frame *stable[MAX_FRAMES]; /* the cached frame each came from, or NULL */
	uint64_t ids[MAX_FRAMES];
	struct bmap *frame_ids; /* address of a cached (stable) frame -> frame id */
	struct bmap *pyframes;	/* struct pyframe_key -> (uintptr_t) resolved struct frame * */
	uint64_t py_gens;	/* interpreters opened so far */
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
	r->pyframes = bmap__new();
	if (!r->sym || !r->target_idx || !r->thread_idx || !r->frame_ids || !r->pyframes)
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

/* A resolved Python frame is cached per (interpreter, code object, checksum, instruction). */
struct pyframe_key {
	uint64_t gen, code;
	uint32_t meta;
	int32_t lasti;
};

static int free_pyframe(const void *key, size_t len, uint64_t *value, void *ctx)
{
	free((void *)(uintptr_t)*value);
	return 0;
}

void recorder__free(struct recorder *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->ntargets; i++) {
		dwproc__free(r->targets[i].dp);
		pyproc__free(r->targets[i].py);
	}
	free(r->targets);
	free(r->threads);
	bmap__free(r->target_idx);
	bmap__free(r->thread_idx);
	bmap__free(r->frame_ids);
	if (r->pyframes)
		bmap__for_each(r->pyframes, free_pyframe, NULL);
	bmap__free(r->pyframes);
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
	p.python_version = t->py ? pyproc__version_str(t->py) : NULL;
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

/* Remember a Python version for meta.python_versions. */
static void note_python_version(struct recorder *r, const char *v)
{
	size_t len = strlen(r->python_versions), vl = strlen(v);
	const char *p;

	for (p = strstr(r->python_versions, v); p; p = strstr(p + 1, v))
		if ((p == r->python_versions || p[-1] == ' ') && (p[vl] == ' ' || !p[vl]))
			return;
	if (len + vl + 2 < sizeof(r->python_versions))
		snprintf(r->python_versions + len, sizeof(r->python_versions) - len, "%s%s",
			 len ? " " : "", v);
	store__meta_text(r->st, "python_versions", r->python_versions);
}

/* Number of mappings of @pid now (a cheap "did it load something" signal), 0 if gone. */
static size_t count_maps(pid_t pid)
{
	struct procmaps pm;
	size_t n;

	if (procmaps__read(pid, &pm))
		return 0;
	n = pm.nr;
	procmaps__release(&pm);
	return n;
}

/*
 * Find the target's CPython interpreter and hand its layout to BPF. Called when the target
 * is added and again (on ticks) while it has none and its mappings change: after exec the
 * loader maps libpython only later, and embedding programs may load it at any time.
 */
static void target_python(struct recorder *r, struct target *t)
{
	struct py_proc_cfg cfg;
	int err, fd;

	if (!r->opts.python || t->py || t->py_unsupported || !t->alive)
		return;
	t->py_tried_ns = now_mono_ns();
	t->py_maps_seen = count_maps(t->pid);
	t->py = pyproc__open(t->pid);
	t->py_gen = ++r->py_gens;
	if (!t->py) {
		pr_debug("pid %d: no CPython interpreter yet (%s)", t->pid, strerror(errno));
		if (errno == ENOTSUP)
			t->py_unsupported = true; /* pyproc said why */
		return;
	}
	err = pyproc__bpf_cfg(t->py, r->opts.py_depth, &cfg);
	if (!err)
		err = sampling__set_python(r->s, t->pid, &cfg);
	if (err) {
		pr_warn("pid %d: cannot set up Python stack sampling: %s", t->pid, strerror(-err));
		pyproc__free(t->py);
		t->py = NULL;
		t->py_unsupported = true;
		return;
	}
	fd = sampling__map_fd(r->s, "py_tstates");
	if (fd >= 0)
		pyproc__fill_tstates(t->py, fd, t->pid);
	pr_info("pid %d: CPython %s in %s", t->pid, pyproc__version_str(t->py),
		pyproc__elf_path(t->py));
	note_python_version(r, pyproc__version_str(t->py));
}

/*
 * A target without an interpreter yet: look again if its mappings changed. Right after it
 * started or exec'd the loader is still mapping libpython and the program may start Python
 * threads within milliseconds, so look every 5 ms for 2 s (recorder__poll, independent of how
 * far behind sample processing is); after that, once a second (an embedding program may
 * load libpython at any time).
 */
static void retry_python(struct recorder *r, struct target *t, double ts)
{
	uint64_t now = now_mono_ns();
	uint64_t every = now - t->started_ns < 2000000000ULL ? 5000000ULL : 1000000000ULL;

	if (t->py || !r->opts.python || t->py_unsupported || !t->alive ||
	    now - t->py_tried_ns < every)
		return;
	t->py_tried_ns = now;
	if (count_maps(t->pid) == t->py_maps_seen)
		return;
	target_python(r, t);
	if (t->py)
		describe_process(r, t, ts);
}

/* Forget the target's interpreter (exec replaced the program). */
static void drop_python(struct recorder *r, struct target *t)
{
	if (t->py)
		sampling__set_python(r->s, t->pid, NULL);
	pyproc__free(t->py);
	t->py = NULL;
	t->py_unsupported = false;
	t->py_maps_seen = 0;
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
	t->started_ns = now_mono_ns();
	if (!t->alive)
		r->live++;
	t->alive = true;
	t->dp_failed = false;
	if (!t->dp)
		target_dwproc(t);
	if (!t->dp && !procinfo_alive(pid))
		return -ESRCH;
	target_python(r, t);
	describe_process(r, t, unix_seconds(r, now_mono_ns()));
	err = sampling__add_target(r->s, pid);
	if (err)
		return err;
	return 0;
}

/*
 * The thread's name: Python's (threading) where the interpreter has one for it, else the
 * OS name. @refresh: re-read the interpreter's threads if the tid is unknown to it.
 */
static void thread_name(struct target *t, struct thread *th, bool refresh)
{
	const struct pythread *pt = NULL;

	if (t && t->py) {
		pt = pyproc__thread_by_tid(t->py, th->tid);
		if (!pt && refresh && pyproc__refresh_threads(t->py) > 0)
			pt = pyproc__thread_by_tid(t->py, th->tid);
	}
	if (pt && pt->name && pt->name[0])
		snprintf(th->name, sizeof(th->name), "%s", pt->name);
	else
		procinfo_thread_name(th->pid, th->tid, th->name, sizeof(th->name));
}

static struct thread *get_thread(struct recorder *r, struct target *t, pid_t tid, double ts)
{
	pid_t pid = t->pid;
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
	thread_name(t, th, true);
	store__thread(r->st, pid, tid, th->name[0] ? th->name : NULL, ts);
	r->stats.threads++;
	return th;
}

/*
 * Unwind and symbolize the sample's native stack into r->nframes (leaf first), each frame
 * classified for the Python merge. Return the number of frames.
 */
static int native_frames(struct recorder *r, struct target *t, const struct sample_event *e,
			 const void *stack, unsigned int *trunc)
{
	struct dwproc *dp = target_dwproc(t);
	bool complete = false;
	int nn;

	if (!dp) {
		r->stats.unresolved++;
		*trunc |= STACK_TRUNC_NATIVE;
		r->nframes[0] = (struct pym_frame){
			.f = {.kind = FRAME_NATIVE, .func = "[unknown: process exited]"}};
		return 1;
	}
	if (r->opts.native) {
		nn = dwproc__unwind(dp, e->tid, (const uint64_t *)e->regs, stack, e->stack_len,
				    r->nat, MAX_NATIVE, &complete);
	} else {
		/* --no-native: the running function only, so not its outermost frame. */
		r->nat[0].pc = e->regs[DWREG_RIP];
		r->nat[0].activation = true;
		nn = 1;
	}
	if (nn < 0)
		nn = 0;
	if (complete)
		r->stats.complete++;
	else
		*trunc |= STACK_TRUNC_NATIVE;
	return stackbuild_native(dp, r->sym, t->py, r->nat, nn, r->nframes, MAX_FRAMES);
}

/* Resolve the sample's Python frames into r->pframes. Return their number. */
static int python_frames(struct recorder *r, struct target *t, const struct sample_event *e,
			 const struct py_frame_rec *py, unsigned int *trunc)
{
	int i;

	if (!t->py)
		return 0;
	if (e->py_status >= 0 && e->py_status < 8)
		r->stats.py_status[e->py_status]++;

	if (!e->py_len)
		return 0;
	if (e->flags & SAMPLE_F_PY_TRUNCATED)
		*trunc |= STACK_TRUNC_PYTHON;
	for (i = 0; i < e->py_len && i < SAMPLER_MAX_PYDEPTH; i++) {
		struct pyframe_key key = {.gen = t->py_gen,
					  .code = py[i].code,
					  .meta = py[i].meta,
					  .lasti = py[i].lasti};
		uint64_t *slot = bmap__find(r->pyframes, &key, sizeof(key));
		struct frame *fp;

		r->pframes[i].flags = py[i].meta & PYF_ENTRY;
		if (slot) {
			fp = (struct frame *)(uintptr_t)*slot;
			r->pframes[i].f = *fp;
			r->pframes[i].stable = fp;
			continue;
		}
		/* On failure the frame is still there, named "[unknown]"; not cached (the code
		 * object may be readable next time). The strings live as long as t->py, and the
		 * generation in the key keeps a later interpreter from finding this entry. */
		r->pframes[i].stable = NULL;
		if (pyproc__resolve(t->py, &py[i], &r->pframes[i].f))
			continue;
		fp = malloc(sizeof(*fp));
		slot = fp ? bmap__upsert(r->pyframes, &key, sizeof(key), 0, NULL) : NULL;
		if (!slot) {
			free(fp);
			continue;
		}
		*fp = r->pframes[i].f;
		*slot = (uintptr_t)fp;
		r->pframes[i].stable = fp;
	}
	r->stats.python_samples++;
	return i;
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
	int n = 0, i, err, nn, np, nm;

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
	retry_python(r, t, ts);
	th = get_thread(r, t, e->tid, ts);
	if (th)
		th->active = true;

	for (i = 0; i < e->kstack_len && n < MAX_FRAMES; i++) {
		r->frames[n] = kallsyms__frame(r->ks, kst[i]);
		r->stable[n++] = NULL;
	}
	if (e->flags & SAMPLE_F_NO_USER_REGS)
		trunc |= STACK_TRUNC_NATIVE; /* the user stack is unknown */
	nn = e->flags & SAMPLE_F_NO_USER_REGS ? 0 : native_frames(r, t, e, stack, &trunc);
	np = python_frames(r, t, e, py, &trunc);
	nm = pymerge(r->nframes, nn, r->pframes, np, r->merged, MAX_FRAMES - n);
	for (i = 0; i < nm; i++) {
		r->frames[n] = r->merged[i].f;
		r->stable[n++] = r->merged[i].stable;
	}
	if (!n) {
		r->frames[n] = (struct frame){.kind = FRAME_NATIVE, .func = "[unknown]"};
		r->stable[n++] = NULL;
	}

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
			drop_python(r, t);
			t->started_ns = now_mono_ns();
			target_python(r, t);
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
	struct target *t;
	struct thread *th;
	size_t i;
	int fd = sampling__map_fd(r->s, "py_tstates");

	for (i = 0; i < r->ntargets; i++) {
		t = &r->targets[i];
		if (!t->alive)
			continue;
		if (t->py) {
			/* New threads, names; the BPF fallback map. */
			if (fd >= 0)
				pyproc__fill_tstates(t->py, fd, t->pid);
		} else {
			retry_python(r, t, now);
		}
	}
	/* Names change (pthread_setname_np, threading): refresh those that ran. */
	for (i = 0; i < r->nthreads; i++) {
		th = &r->threads[i];
		if (!th->active)
			continue;
		th->active = false;
		thread_name(find_target(r, th->pid), th, false);
		store__thread(r->st, th->pid, th->tid, th->name[0] ? th->name : NULL, now);
	}
	/* Exit events can be lost when the ring buffer is full: check. */
	for (i = 0; i < r->ntargets; i++)
		if (r->targets[i].alive && !procinfo_alive(r->targets[i].pid))
			target_exited(r, &r->targets[i], now);
	return store__flush(r->st) ?: recorder__live_targets(r);
}

void recorder__poll(struct recorder *r)
{
	double now = unix_seconds(r, now_mono_ns());
	size_t i;

	for (i = 0; i < r->ntargets; i++)
		retry_python(r, &r->targets[i], now);
}

int recorder__live_targets(const struct recorder *r)
{
	return r->live;
}

void recorder__stats(const struct recorder *r, struct recorder_stats *out)
{
	*out = r->stats;
}
