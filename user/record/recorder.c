// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bmap.h"
#include "base/jobinfo.h"
#include "native/dwproc.h"
#include "native/kallsyms.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/procmaps.h"
#include "python/pymerge.h"
#include "python/pyproc.h"
#include "record/blockmemo.h"
#include "record/offcpu.h"
#include "record/collectives.h"
#include "record/comm.h"
#include "record/pyfinder.h"
#include "record/recorder.h"
#include "record/stacksites.h"
#include "native/stackbuild.h"
#include "native/symbolize.h"
#include "native/threadroutine.h"
#include "record/threadnames.h"
#include "base/util.h"

#define MAX_NATIVE	 512	       /* native frames unwound per sample */
#define MAX_FRAMES	 2048	       /* frames per stored stack, all kinds */
#define PY_YOUNG_NS	 2000000000ULL /* a program this young is looked at every 5 ms */
#define PY_REFRESH_TICKS 10 /* ticks (seconds) between full rereads of thread states, names */

struct target {
	pid_t pid, ppid;
	pid_t ns_pid;	      /* its pid in its own PID namespace; 0 if unknown */
	uint32_t incarnation; /* a new process with this pid (pid reuse) counts up */
	struct dwproc *dp;    /* NULL until needed, or if the maps could not be read */
	bool dp_shared;	      /* dp is its parent's view (forked, no exec since; dwproc__share) */
	uint64_t own_maps_ns; /* dp_shared: when its own maps were last looked at (monotonic) */
	struct pyproc *py;    /* its CPython interpreter, or NULL */
	uint64_t py_gen;      /* which interpreter object: keys the resolved-frame cache */
	bool alive;
	bool dp_failed;	      /* maps unreadable: do not retry on every sample */
	bool py_unsupported;  /* a CPython we cannot read (already said): do not retry */
	bool py_finding;      /* the finder looks for its interpreter (it may set up BPF) */
	bool py_settled;      /* the sampler finds its thread states its own way (py_cfg_settled) */
	size_t py_maps_seen;  /* mappings when we last looked for an interpreter */
	uint64_t py_tried_ns; /* when we last looked (monotonic) */
	uint64_t started_ns;  /* when it became a target or exec'd (monotonic) */
	uint64_t prog_ns;     /* when its program began: the kernel's time of its exec or fork,
			       * else started_ns (monotonic) */
	uint64_t exec_ns;     /* the kernel's time of its latest exec seen (monotonic), or 0 */
	uint64_t samples;
	bool names_to_drop;	       /* exited: drop its Python thread names at a later tick */
	bool sites_to_drop;	       /* exited: forget its stack sites at a later tick */
	long long cpu_first, cpu_last; /* its CPU ticks when added and at the last look; -1 */
	/* Its processes row, kept: /proc may be gone when the row must be written again. */
	double start_time, end_time; /* unix seconds; end_time 0: not seen to exit */
	bool end_exact;		     /* end_time is the kernel's (its exit event) */
	char *command, *exe;
	char pyver[32];
	struct job_identity job;   /* its rank, job and host, from its environment */
	struct pthread_layout *pl; /* glibc's threads, to name them by routine; NULL: not read */
	bool pl_failed;		   /* not readable (no glibc descriptors...): do not retry */
};

struct thread {
	pid_t pid, tid;
	pid_t ns_tid;	      /* in its own PID namespace (what Python calls its native id) */
	uint32_t incarnation; /* of its process */
	char name[64];
	char comm[16];	     /* its OS name at its last sample or at its exit */
	bool py_named;	     /* name is its Python threading name */
	bool exited;	     /* its exit was seen: the name is final */
	bool dirty;	     /* name changed since it was stored */
	bool active;	     /* sampled since the last tick */
	uint64_t names_seen; /* threadnames version at the last lookup */
	double last_ts;
	double stored_ts;      /* the last_ts its row in the store has */
	char routine[64];      /* what it runs (native/threadroutine.h), "" unknown */
	char routine_comm[16]; /* its process's OS name: its own while it still has that one */
	bool routine_tried;
	struct blockmemo memo; /* the stack of its last block at a known site */
};

struct recorder {
	struct store *st;
	struct sampling *s;
	struct recorder_opts opts;
	bool python; /* the samples have Python frames (sampling__opts) */
	struct symbolizer *sym;
	struct kallsyms *ks;
	struct target *targets;
	size_t ntargets, captargets;
	struct bmap *target_idx; /* pid -> index + 1 */
	struct thread *threads;
	size_t nthreads, capthreads;
	struct bmap *thread_idx; /* (pid, tid) -> index + 1 */
	struct threadnames *tn;	 /* Python thread names, read while the threads live */
	const uint64_t *births;	 /* the sampler's count of thread births (mmap'ed), or NULL */
	uint64_t births_seen;	 /* its value at the last tick */
	unsigned int ticks;
	struct pyfinder *pf;	/* looks for new programs' interpreters, or NULL */
	struct offcpu *oc;	/* off-CPU segments joined with their stacks (off_cpu) */
	bool capture;		/* the record handled is an off-CPU stack, not a sample: the
				  * sample statistics leave it out */
	struct comm *comm;	/* probes on collectives libraries, or NULL (recorder__use_comm) */
	struct collectives *cs; /* their events joined into rows */
	struct stacksites *call_sites;	/* the collectives probes' call sites (comm__site_put) */
	struct stacksites *block_sites; /* where threads blocked (off-CPU stacks), bounded */
	uint64_t comm_copies, comm_site_calls; /* calls with a stack copy, calls from a site */
	int64_t mono_to_real_ns;
	struct recorder_stats stats;
	int live;		   /* targets not yet seen to exit */
	char python_versions[256]; /* "3.11.7 3.12.1": for meta */
	/* Scratch for one sample. */
	struct dwproc_frame nat[MAX_NATIVE];
	struct pym_frame nframes[MAX_FRAMES]; /* native frames, classified */
	struct pym_frame pframes[SAMPLER_MAX_PYDEPTH];
	int py_unknown; /* frames the last python_frames could not resolve (not cached) */
	struct pym_frame merged[MAX_FRAMES];
	struct frame frames[MAX_FRAMES];
	int nframes_last; /* frames in r->frames by the last intern_frames */
	/* The last native_frames: frames unwound (r->nat) and built (r->nframes), its view. */
	int nat_last, nn_last;
	bool nat_complete;
	struct dwproc *nat_dp;
	const struct frame *stable[MAX_FRAMES]; /* the cached frame each came from, or NULL */
	uint64_t ids[MAX_FRAMES];
	struct bmap *frame_ids;	  /* address of a cached (stable) frame -> frame id */
	struct bmap *pyframes;	  /* struct pyframe_key -> (uintptr_t) resolved struct frame * */
	uint64_t py_gens;	  /* interpreters opened so far */
	recorder_exit_fn on_exit; /* recorder__on_exit */
	void *on_exit_ctx;
};

static int fallback_stack(void *ctx, pid_t pid, pid_t tid, uint64_t ip, uint64_t *stack_id);

/*
 * The finder set the sampler up for @pid's interpreter: read its thread names from now on, not
 * from when the recorder takes it (it may be busy with the program's first samples for longer
 * than its first threads live). On the finder's thread; threadnames is thread-safe.
 */
static void watch_names_at_once(void *tn, pid_t pid, const struct pyproc *pp, uint64_t seen_ns)
{
	if (threadnames__watch(tn, pid, pp, seen_ns))
		pr_debug("pid %d: cannot watch its thread names", pid);
}

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
	r->call_sites = stacksites__new(0);
	r->block_sites = stacksites__new(BLOCK_SITES_MAX);
	if (!r->sym || !r->target_idx || !r->thread_idx || !r->frame_ids || !r->pyframes ||
	    !r->call_sites || !r->block_sites)
		goto nomem;
	r->python = sampling__opts(s)->python;
	if (sampling__opts(s)->off_cpu && !(r->oc = offcpu__new(st, fallback_stack, r)))
		goto nomem;
	if (sampling__opts(s)->kernel) {
		r->ks = kallsyms__load();
		if (!r->ks)
			pr_warn("cannot read kernel symbols from /proc/kallsyms (%s): kernel "
				"frames "
				"will be unnamed",
				strerror(errno));
	}
	if (r->python) {
		const uint64_t *changes;
		int births, children, wake_rb;

		sampling__thread_maps(s, &births, &children, &changes, &wake_rb);
		r->births = changes;
		r->tn = threadnames__start(births, children, changes, wake_rb);
		if (!r->tn)
			pr_warn("cannot start reading Python thread names (%s): threads will have "
				"their OS names",
				strerror(errno));
		r->pf = pyfinder__start(s, opts->py_depth, r->tn ? watch_names_at_once : NULL,
					r->tn);
		if (!r->pf)
			pr_debug(
				"cannot start the interpreter finder (%s): looking between samples",
				strerror(errno));
	}
	r->mono_to_real_ns = (int64_t)(now_real_ns() - now_mono_ns());
	return r;
nomem:
	recorder__free(r);
	errno = ENOMEM;
	return NULL;
}

/* Let go of the target's view of its memory maps, its own or its parent's. */
static void drop_dwproc(struct target *t)
{
	if (t->dp_shared)
		dwproc__unshare(t->dp);
	else
		dwproc__free(t->dp);
	t->dp = NULL;
	t->dp_shared = false;
}

/* A resolved Python frame is cached per (interpreter, code object, checksum, instruction). */
struct pyframe_key {
	uint64_t gen, code;
	uint32_t meta;
	int32_t lasti;
};

/* Forget @t's glibc thread layout (read again lazily: after an exec, another libc). */
static void free_layout(struct target *t)
{
	if (t->pl)
		pthread_layout__release(t->pl);
	free(t->pl);
	t->pl = NULL;
	t->pl_failed = false;
}

void recorder__free(struct recorder *r)
{
	size_t i;

	if (!r)
		return;
	pyfinder__free(r->pf); /* first: its thread starts thread-name watches */
	threadnames__free(r->tn);
	offcpu__free(r->oc);
	collectives__free(r->cs);
	for (i = 0; i < r->ntargets; i++) {
		drop_dwproc(&r->targets[i]);
		free_layout(&r->targets[i]);
		pyproc__free(r->targets[i].py);
		free(r->targets[i].command);
		free(r->targets[i].exe);
		jobinfo_free(&r->targets[i].job);
	}
	free(r->targets);
	for (i = 0; i < r->nthreads; i++)
		blockmemo__release(&r->threads[i].memo);
	free(r->threads);
	bmap__free(r->target_idx);
	bmap__free(r->thread_idx);
	bmap__free(r->frame_ids);
	bmap__free_values(r->pyframes);
	bmap__free(r->pyframes);
	stacksites__free(r->call_sites);
	stacksites__free(r->block_sites);
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

/* Replace *@dst by @src (owned), unless @src is NULL or empty. */
static void set_str(char **dst, char *src)
{
	if (!src || !*src) {
		free(src);
		return;
	}
	free(*dst);
	*dst = src;
}

/* *@dst = a copy of @src (a forked child's identity is its parent's until it execs). */
static void copy_job(struct job_identity *dst, const struct job_identity *src)
{
	jobinfo_free(dst);
	*dst = *src;
	dst->job_id = src->job_id ? strdup(src->job_id) : NULL;
	dst->master_addr = src->master_addr ? strdup(src->master_addr) : NULL;
}

/*
 * Refresh what the target's row says from /proc, while the process is there: a zombie or a
 * pid that is gone tells nothing, and what was known (from its parent, from the exec) stays.
 */
static void read_proc_info(struct target *t)
{
	struct job_identity job;
	pid_t ppid, ns;

	if (!procinfo_alive(t->pid))
		return;
	set_str(&t->command, procinfo_cmdline(t->pid));
	set_str(&t->exe, procinfo_exe(t->pid));
	/* Its place in a job, from the environment it exec'd with; an environment that cannot
	 * be read keeps what was known (a forked child's, its parent's). */
	if (!jobinfo_read(t->pid, &job) && (!job.env_error || !jobinfo_has_rank(&t->job))) {
		jobinfo_free(&t->job);
		t->job = job;
	} else {
		jobinfo_free(&job);
	}
	if (!t->ppid) {
		ppid = procinfo_ppid(t->pid);
		t->ppid = ppid > 0 ? ppid : 0;
	}
	ns = procinfo_ns_pid(t->pid);
	if (ns > 0)
		t->ns_pid = ns;
}

/* Write the target's processes row (the whole row: a later write replaces it). */
static void store_process_row(struct recorder *r, struct target *t)
{
	struct store_process p = {
		.pid = t->pid,
		.ppid = t->ppid,
		.command = t->command,
		.exe = t->exe,
		.start_time = t->start_time,
		.end_time = t->end_time,
		.rank = t->job.rank,
		.local_rank = t->job.local_rank,
		.world_size = t->job.world_size,
		.group_rank = t->job.group_rank,
		.job_id = t->job.job_id,
		.host = t->job.host[0] ? t->job.host : NULL,
		.ns_pid = t->ns_pid,
	};

	if (t->py)
		snprintf(t->pyver, sizeof(t->pyver), "%s", pyproc__version_str(t->py));
	p.python_version = t->pyver[0] ? t->pyver : NULL;
	store__process(r->st, &p);
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

/* @t's interpreter @pp was found and the sampler set up for it: use it from now on. */
static void use_python(struct recorder *r, struct target *t, struct pyproc *pp)
{
	t->py = pp;
	t->py_gen = ++r->py_gens;
	t->py_settled = false; /* known at the next tick (settle_python) */
	if (r->tn && threadnames__watch(r->tn, t->pid, t->py, t->prog_ns))
		pr_debug("pid %d: cannot watch its thread names", t->pid);
	pr_info("pid %d: CPython %s in %s", t->pid, pyproc__version_str(t->py),
		pyproc__elf_path(t->py));
	note_python_version(r, pyproc__version_str(t->py));
}

/* The sampler could not be set up for @t's interpreter (err): say so, once. */
static void python_failed(struct target *t, int err)
{
	if (err != -ENOTSUP) /* else pyproc said why */
		pr_warn("pid %d: cannot set up Python stack sampling: %s", t->pid, strerror(-err));
	t->py_unsupported = true;
}

/*
 * What the finder found for @t, which has no interpreter, if its look ended. Once @t's
 * program is PY_YOUNG_NS old, the look the recorder asked for is over: what it found, or
 * nothing. (An exec event handles what the finder found its own way: target_exec.)
 */
static void take_found(struct recorder *r, struct target *t)
{
	bool over = false;
	struct pyproc *pp;
	uint64_t tried_ns;
	int ret;

	if (!r->pf || t->py || t->py_unsupported)
		return;
	if (t->py_finding)
		over = now_mono_ns() - t->started_ns >= PY_YOUNG_NS;
	if (!over && !pyfinder__news(r->pf))
		return;
	ret = pyfinder__take(r->pf, t->pid, over, &pp, &tried_ns);
	if (ret || over)
		t->py_finding = false;
	if (ret < 0) {
		python_failed(t, ret);
	} else if (ret > 0) {
		t->py_tried_ns = tried_ns;
		use_python(r, t, pp);
		store_process_row(r, t);
	}
}

/*
 * Find the target's CPython interpreter and hand its layout to BPF. Called when the target
 * is added and again while it has none and its mappings change: after exec the loader maps
 * libpython only later, and embedding programs may load it at any time. A target that
 * started (or exec'd) less than PY_YOUNG_NS ago is then handed to the finder, which keeps
 * looking on its own thread.
 */
static void target_python(struct recorder *r, struct target *t)
{
	struct py_proc_cfg cfg;
	struct pyproc *pp;
	bool young;
	int err;

	if (!r->python || t->py || t->py_unsupported || !t->alive)
		return;
	t->py_tried_ns = now_mono_ns();
	t->py_maps_seen = procmaps__count(t->pid);
	young = r->pf && t->py_tried_ns - t->started_ns < PY_YOUNG_NS;
	pp = pyproc__open(t->pid);
	if (!pp) {
		err = errno;
		pr_debug("pid %d: no CPython interpreter yet (%s)", t->pid, strerror(err));
		if (err == ENOTSUP) {
			t->py_unsupported = true; /* pyproc said why */
			return;
		}
		goto find;
	}
	err = pyproc__bpf_cfg(pp, r->opts.py_depth, &cfg);
	if (!err && young && !py_cfg_settled(&cfg)) {
		/* No thread state made yet (3.15): the finder waits for the first. */
		pyproc__free(pp);
		t->py_maps_seen = 0;
		goto find;
	}
	/* Found here: whatever the finder finds for this program is the same. */
	if (r->pf)
		pyfinder__forget(r->pf, t->pid, UINT64_MAX);
	t->py_finding = false;
	if (!err)
		err = sampling__use_python(r->s, t->pid, pp, &cfg);
	if (err) {
		pyproc__free(pp);
		python_failed(t, err);
		return;
	}
	use_python(r, t, pp);
	t->py_settled = py_cfg_settled(&cfg);
	return;
find:
	if (young && !pyfinder__want(r->pf, t->pid, t->prog_ns, t->py_maps_seen))
		t->py_finding = true;
}

/*
 * A 3.15 interpreter found before it made its first thread state: the walker finds thread
 * states through py_tstates only. Once the interpreter has one, hand the walker its own way.
 */
static void settle_python(struct recorder *r, struct target *t)
{
	struct py_proc_cfg cfg;

	if (t->py_settled || pyproc__bpf_cfg(t->py, r->opts.py_depth, &cfg) ||
	    !py_cfg_settled(&cfg))
		return;
	if (!sampling__set_python(r->s, t->pid, &cfg))
		t->py_settled = true;
}

/*
 * A target without an interpreter yet: take what the finder found, or look again if its
 * mappings changed. Right after it started or exec'd the loader is still mapping libpython
 * and the program may start Python threads within milliseconds: for PY_YOUNG_NS the finder
 * looks every 5 ms on its own thread, however far behind sample handling is (without one,
 * recorder__poll looks at each turn of the loop). After that, once a second (an
 * embedding program may load libpython at any time).
 */
static void retry_python(struct recorder *r, struct target *t)
{
	uint64_t now, every;

	if (t->py || !r->python || t->py_unsupported || !t->alive)
		return;
	take_found(r, t);
	if (t->py || t->py_finding || t->py_unsupported)
		return;
	now = now_mono_ns();
	every = now - t->started_ns < PY_YOUNG_NS ? 5000000ULL : 1000000000ULL;
	if (now - t->py_tried_ns < every)
		return;
	t->py_tried_ns = now;
	if (procmaps__count(t->pid) == t->py_maps_seen)
		return;
	target_python(r, t);
	if (t->py)
		store_process_row(r, t);
}

/*
 * Forget the target's interpreter (exec replaced the program), and stop looking for that of
 * a program that began before @before_ns. The kernel dropped the sampler's entry at the exec
 * or the exit (bpf/sampler.bpf.c); with a finder, what is there now was set up for a newer
 * program, and stays.
 */
static void drop_python(struct recorder *r, struct target *t, uint64_t before_ns)
{
	if (r->pf)
		pyfinder__forget(r->pf, t->pid, before_ns);
	else if (t->py)
		sampling__set_python(r->s, t->pid, NULL);
	t->py_finding = false;
	/* The finder may already watch the names of a newer program (an exec): kept. */
	if (r->tn && threadnames__unwatch(r->tn, t->pid, before_ns))
		threadnames__drop(r->tn, t->pid);
	pyproc__free(t->py);
	t->py = NULL;
	t->py_unsupported = false;
	t->py_maps_seen = 0;
}

/* The target of @pid, created (empty) if new; *@created says which. NULL on ENOMEM. */
static struct target *get_target(struct recorder *r, pid_t pid, bool *created)
{
	uint32_t key = pid;
	struct target *t;
	uint64_t *slot;
	int inserted;

	*created = false;
	slot = bmap__upsert(r->target_idx, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (!inserted)
		return &r->targets[*slot - 1];
	if (grow_array(&r->targets, &r->captargets, r->ntargets + 1, sizeof(*t)))
		return NULL;
	t = &r->targets[r->ntargets];
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	jobinfo_free(&t->job); /* all unknown */
	t->cpu_first = t->cpu_last = -1;
	*slot = ++r->ntargets;
	*created = true;
	return t;
}

/* Forget the stack sites of @t's program (it exec'd another, or it exited a while ago). */
static void forget_sites(struct recorder *r, struct target *t)
{
	stacksites__forget(r->call_sites, t->pid);
	stacksites__forget(r->block_sites, t->pid);
	t->sites_to_drop = false;
}

/* A new process has @t's pid (or the old one is seen anew): forget everything about it. */
static void reset_target(struct recorder *r, struct target *t)
{
	pid_t pid = t->pid;
	uint32_t incarnation = t->incarnation + 1;

	if (t->alive)
		r->live--;
	if (t->sites_to_drop)
		forget_sites(r, t);
	drop_python(r, t, UINT64_MAX);
	drop_dwproc(t);
	free_layout(t);
	free(t->command);
	free(t->exe);
	jobinfo_free(&t->job);
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->incarnation = incarnation;
	jobinfo_free(&t->job); /* all unknown */
	t->cpu_first = t->cpu_last = -1;
}

/* Start sampling @t: read its maps and interpreter now, so its first samples resolve. */
static void start_target(struct recorder *r, struct target *t)
{
	int err;

	if (!t->alive)
		r->live++;
	t->alive = true;
	t->started_ns = now_mono_ns();
	if (!t->prog_ns)
		t->prog_ns = t->started_ns;
	t->cpu_first = t->cpu_last = procinfo_cpu_ticks(t->pid);
	target_dwproc(t);
	target_python(r, t);
	err = sampling__add_target(r->s, t->pid);
	if (err)
		pr_warn("pid %d: cannot add it to the sampler: %s", t->pid, strerror(-err));
	if (r->comm)
		comm__started(r->comm, t->pid);
}

/*
 * @t's collectives probes and what waits for their events belong to its old program, or it
 * exited (@exec_ns 0). Events come in order: none of the new program's calls is handled yet.
 */
static void forget_comm(struct recorder *r, struct target *t, uint64_t exec_ns)
{
	if (r->comm && exec_ns)
		comm__exec(r->comm, t->pid, exec_ns);
	else if (r->comm)
		comm__forget(r->comm, t->pid);
	/* The kernel stops sending the sites' ids now. Stacks its last threads sent as site ids
	 * may still be queued behind its exit (handled first: session.h's urgent_first): an
	 * exited process's sites are forgotten a tick later. The old program's samples that
	 * follow an exec are not handled at all. */
	sampling__block_sites_forget(r->s, t->pid);
	if (exec_ns)
		forget_sites(r, t);
	else
		t->sites_to_drop = true;
	if (r->cs)
		collectives__forget(r->cs, t->pid);
}

int recorder__add_target(struct recorder *r, pid_t pid, pid_t ppid)
{
	struct target *t;
	bool created;

	t = get_target(r, pid, &created);
	if (!t)
		return -ENOMEM;
	if (!created && t->alive)
		return 0;
	if (!created)
		reset_target(r, t);
	t->ppid = ppid;
	t->start_time = unix_seconds(r, now_mono_ns());
	if (!procinfo_alive(pid))
		return -ESRCH;
	read_proc_info(t);
	start_target(r, t);
	store_process_row(r, t);
	return 0;
}

bool recorder__has_target(struct recorder *r, pid_t pid)
{
	struct target *t = find_target(r, pid);

	return t && t->alive;
}

/*
 * A sample of a process we were not told about (its fork event was lost): make it a target
 * with what the sample says, and what /proc says if it is still there.
 */
static struct target *unknown_target(struct recorder *r, const struct sample_event *e, double ts)
{
	struct target *t;
	bool created;

	t = get_target(r, e->pid, &created);
	if (!t)
		return NULL;
	if (!created)
		reset_target(r, t);
	t->ns_pid = e->ns_pid;
	t->start_time = ts;
	read_proc_info(t);
	start_target(r, t);
	store_process_row(r, t);
	return t;
}

/* A followed process forked a child: the child runs the parent's program until it execs. */
static void follow_child(struct recorder *r, const struct proc_change_event *ev, double ts)
{
	struct target *parent, *t;
	bool created;

	pr_info("following new process %d (child of %d)", ev->pid, ev->ppid);
	t = get_target(r, ev->pid, &created);
	if (!t)
		return;
	parent = find_target(r, ev->ppid); /* after get_target: it may move the targets */
	/* A running target made one after this fork is this very child: found among the
	 * descendants of a target (record --children) while its fork event was queued. */
	if (!created && t->alive && t->started_ns > ev->time_ns)
		return;
	/* The fork precedes every sample of the child: a target with its pid is an older
	 * process that had the same pid. */
	if (!created)
		reset_target(r, t);
	t->ppid = ev->ppid;
	t->ns_pid = ev->ns_pid;
	t->start_time = ts;
	t->prog_ns = ev->time_ns;
	if (parent) {
		t->command = parent->command ? strdup(parent->command) : NULL;
		t->exe = parent->exe ? strdup(parent->exe) : NULL;
		copy_job(&t->job, &parent->job);
		if (parent->py)
			snprintf(t->pyver, sizeof(t->pyver), "%s", pyproc__version_str(parent->py));
		/* Until it execs, the child has its parent's address space: its samples unwind
		 * with the parent's view, even once it has exited (its own maps are gone then,
		 * and often before its fork is handled). Its exec event drops the view; an
		 * address outside it makes the child read its own maps (native_frames). */
		if (target_dwproc(parent)) {
			t->dp = dwproc__share(parent->dp);
			t->dp_shared = true;
		}
	}
	read_proc_info(t); /* it may have exec'd already: its exec event follows */
	start_target(r, t);
	store_process_row(r, t);
}

/* A target replaced its program: maps, interpreter and command line are new. */
static void target_exec(struct recorder *r, struct target *t, const struct proc_exec_event *ev)
{
	size_t i, n = ev->h.args_len < sizeof(ev->args) ? ev->h.args_len : sizeof(ev->args);
	char *cmd = NULL, *path;
	struct pyproc *pp = NULL;
	uint64_t tried_ns = 0;
	int found;

	if (ev->h.time_ns > t->exec_ns)
		t->exec_ns = ev->h.time_ns;
	drop_dwproc(t);			  /* its parent's too: the child's address space is new */
	forget_comm(r, t, ev->h.time_ns); /* the new program's libraries: probed again */
	t->dp_failed = false;		  /* re-read lazily: the loader is still mapping */
	free_layout(t);
	/* Events are handled late: an interpreter found after the exec is the new program's
	 * (and its threads' names are being read); one found before is the old one's. The
	 * finder's look may be the newer. */
	found = r->pf ? pyfinder__take(r->pf, t->pid, false, &pp, &tried_ns) : 0;
	if (found && (tried_ns < ev->h.time_ns || (t->py && t->py_tried_ns >= ev->h.time_ns))) {
		pyproc__free(pp); /* the old program's, or one is known already */
		found = 0;
	}
	if (found || !t->py || t->py_tried_ns < ev->h.time_ns) {
		drop_python(r, t, ev->h.time_ns);
		t->pyver[0] = '\0';
		t->started_ns = now_mono_ns();
	}
	if (ev->h.time_ns > t->prog_ns)
		t->prog_ns = ev->h.time_ns;
	if (found > 0) {
		t->py_tried_ns = tried_ns;
		use_python(r, t, pp);
	} else if (found < 0) {
		python_failed(t, found);
	}
	t->ns_pid = ev->h.ns_pid;
	read_proc_info(t);
	/* The command line as it was at the exec (/proc may show a later one, or none), unless
	 * it was too long for the event. */
	while (n && !ev->args[n - 1])
		n--;
	if (n && !((ev->h.flags & PROC_F_ARGS_TRUNCATED) && t->command)) {
		cmd = malloc(n + 1);
		if (cmd) {
			for (i = 0; i < n; i++)
				cmd[i] = ev->args[i] ? ev->args[i] : ' ';
			cmd[n] = '\0';
			set_str(&t->command, cmd);
		}
	}
	if (!t->exe || !procinfo_alive(t->pid)) {
		path = strndup(ev->path, sizeof(ev->path) - 1);
		set_str(&t->exe, path);
	}
	target_python(r, t);
	store_process_row(r, t);
}

/*
 * @t exited at @ts. @from_event: the kernel said so (the exact time; every earlier event of
 * the process has been handled); else a check of /proc found it gone (the time is when we
 * looked, and its last events may still be queued).
 */
static void target_exited(struct recorder *r, struct target *t, double ts, bool from_event)
{
	if (from_event || !t->end_time) {
		t->end_time = ts;
		t->end_exact = from_event;
		store__process_end(r->st, t->pid, ts);
	}
	if (from_event)
		sampling__remove_target(r->s, t->pid);
	forget_comm(r, t, 0);
	if (r->pf)
		pyfinder__forget(r->pf, t->pid, UINT64_MAX);
	t->py_finding = false;
	/* Samples of its last thread's way out of the kernel (or, found gone, its queued
	 * samples) may follow: its Python thread names are dropped a tick later. */
	if (r->tn) {
		threadnames__unwatch(r->tn, t->pid, UINT64_MAX);
		t->names_to_drop = true;
	}
	if (!t->alive)
		return;
	t->alive = false;
	r->live--;
	pr_info("process %d exited", t->pid);
}

/*
 * Once per thread (at a tick, while it lives): what @th runs, from its start routine
 * (native/threadroutine.h), to name it by when it has no name of its own.
 */
static void read_routine(struct recorder *r, struct thread *th)
{
	struct target *t = find_target(r, th->pid);
	struct pthread_entry *pds = NULL;
	pid_t ns_tid = th->ns_tid ? th->ns_tid : th->tid;
	int n = 0, k;

	th->routine_tried = true;
	if (!t || !t->alive || th->tid == th->pid || th->py_named || !target_dwproc(t) ||
	    procinfo_thread_name(th->pid, th->pid, th->routine_comm, sizeof(th->routine_comm)))
		return;
	if (!t->pl && !t->pl_failed) {
		t->pl = calloc(1, sizeof(*t->pl));
		if (!t->pl || pthread_layout__read(t->pid, t->pl)) {
			free_layout(t);
			t->pl_failed = true;
			return;
		}
	}
	if (!t->pl || pthread_layout__threads(t->pid, t->pl, &pds, &n))
		return;
	for (k = 0; k < n && pds[k].tid != ns_tid; k++)
		;
	if (k == n || thread_routine__name(t->pid, t->pl, t->dp, r->sym, ns_tid, pds[k].pd,
					   th->routine, sizeof(th->routine)))
		th->routine[0] = '\0';
	free(pds);
}

/*
 * Name @th: its Python threading name where the interpreter has one for it, else its OS
 * name (@comm, when given, is its OS name now). A Python name, once read, stays when the
 * thread leaves threading's list at its end. Marks the thread dirty if the name changed.
 */
static void name_thread(struct recorder *r, struct thread *th, const char *comm)
{
	char py[64];
	const char *name;

	if (comm)
		snprintf(th->comm, sizeof(th->comm), "%.*s", (int)sizeof(th->comm) - 1, comm);
	if (r->tn) {
		th->names_seen = threadnames__version(r->tn);
		if (threadnames__lookup(r->tn, th->pid, th->ns_tid, py, sizeof(py)))
			th->py_named = true;
		else if (th->py_named)
			return;
	}
	/* No name of its own (its process's, inherited): what it runs, where that is known. */
	name = th->py_named					       ? py
	       : th->routine[0] && !strcmp(th->comm, th->routine_comm) ? th->routine
								       : th->comm;
	if (strcmp(th->name, name)) {
		snprintf(th->name, sizeof(th->name), "%s", name);
		th->dirty = true;
	}
}

/* Is @th's row in the store behind (its name, or when it was last seen)? */
static bool row_behind(const struct thread *th)
{
	return th->dirty || th->last_ts != th->stored_ts;
}

/* Write @th's row (its name, when it was last seen) into the store. */
static void store_thread(struct recorder *r, struct thread *th)
{
	store__thread(r->st, th->pid, th->tid, th->name[0] ? th->name : NULL, th->last_ts);
	th->stored_ts = th->last_ts;
	th->dirty = false;
}

static struct thread *find_thread(struct recorder *r, pid_t pid, pid_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | (uint32_t)tid, *idx;

	idx = bmap__find(r->thread_idx, &key, sizeof(key));
	return idx ? &r->threads[*idx - 1] : NULL;
}

/*
 * The thread @tid of @t (@ns_tid: in its own PID namespace, 0 if unknown; @comm: its OS name
 * now, "" if unknown), created at its first record, which is at @ts.
 */
static struct thread *get_thread(struct recorder *r, struct target *t, pid_t tid, pid_t ns_tid,
				 const char *comm, double ts)
{
	pid_t pid = t->pid;
	uint64_t key = (uint64_t)pid << 32 | (uint32_t)tid, *slot;
	struct thread *th;
	int inserted;

	slot = bmap__upsert(r->thread_idx, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (!inserted) {
		th = &r->threads[*slot - 1];
		if (th->incarnation == t->incarnation) {
			th->last_ts = ts;
			/* After its exit only the kernel's exit path is left: the name is final. */
			if (!th->exited && *comm &&
			    (strncmp(th->comm, comm, sizeof(th->comm)) ||
			     (r->tn && th->names_seen != threadnames__version(r->tn))))
				name_thread(r, th, comm);
			return th;
		}
		/* A thread of an older process that had this pid: start over. */
		blockmemo__release(&th->memo);
	} else {
		if (grow_array(&r->threads, &r->capthreads, r->nthreads + 1, sizeof(*th)))
			return NULL;
		th = &r->threads[r->nthreads];
		*slot = ++r->nthreads;
	}
	memset(th, 0, sizeof(*th));
	th->pid = pid;
	th->tid = tid;
	th->ns_tid = ns_tid ? ns_tid : tid;
	th->incarnation = t->incarnation;
	th->last_ts = ts;
	/* The name as it is now, from the sample: a short-lived thread is gone by the tick. */
	name_thread(r, th, *comm ? comm : NULL);
	store_thread(r, th);
	if (th->ns_tid != tid)
		store__thread_ns_tid(r->st, pid, tid, th->ns_tid);
	th->dirty = false;
	r->stats.threads++;
	return th;
}

/* Thread @tid of @t exited with the OS name @comm: its name is final. */
static void thread_exited(struct recorder *r, struct target *t, const struct proc_change_event *ev)
{
	struct thread *th = find_thread(r, ev->pid, ev->tid);

	if (th && t && th->incarnation == t->incarnation && !th->exited) {
		name_thread(r, th, ev->comm);
		th->exited = true;
		if (row_behind(th))
			store_thread(r, th);
	}
	if (r->tn)
		threadnames__forget(r->tn, ev->pid, ev->ns_tid);
	if (r->oc)
		offcpu__thread_exit(r->oc, ev->pid, ev->tid);
}

/* How often a child unwound with its parent's view looks at its own maps (ms), at most. */
#define OWN_MAPS_GAP_MS REFRESH_MAX_GAP_MS

/*
 * @t unwinds with its parent's view (forked, no exec since), and a frame of its sample lies
 * outside it: the child mapped something of its own since the fork (dlopen, mmap). If its
 * own maps (while it is there) hold a file mapped executable at @pc, give it a view of its
 * own, and return true; the shared view stays otherwise. Looks at most every
 * OWN_MAPS_GAP_MS: JIT code, an address really in no file, is outside every view.
 */
static bool child_own_view(struct target *t, uint64_t pc)
{
	const struct procmap *m;
	struct procmaps pm;
	struct dwproc *own;
	uint64_t now = now_mono_ns();
	bool in_file;

	if (now - t->own_maps_ns < OWN_MAPS_GAP_MS * 1000000ULL || procmaps__read(t->pid, &pm))
		return false;
	t->own_maps_ns = now;
	m = procmaps__find(&pm, pc);
	in_file = m && m->x && m->path[0] && (m->path[0] != '[' || !strcmp(m->path, "[vdso]"));
	procmaps__release(&pm);
	if (!in_file || !(own = dwproc__new(t->pid)))
		return false;
	pr_debug("pid %d: mapped a file of its own since the fork: its own maps from now on",
		 t->pid);
	drop_dwproc(t);
	t->dp = own;
	return true;
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
	uint64_t pc;
	int nn;

	r->nat_last = r->nn_last = 0;
	r->nat_dp = NULL;
	if (!dp) {
		r->stats.unresolved += !r->capture;
		*trunc |= STACK_TRUNC_NATIVE;
		r->nframes[0] = (struct pym_frame){
			.f = {.kind = FRAME_NATIVE, .func = "[unknown: process exited]"}};
		return 1;
	}
again:
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
	if (t->dp_shared && !complete && (pc = dwproc__frame_outside(dp, r->nat, nn)) &&
	    child_own_view(t, pc)) {
		dp = t->dp;
		goto again;
	}
	if (complete)
		r->stats.complete += !r->capture;
	else
		*trunc |= STACK_TRUNC_NATIVE;
	r->nat_last = nn;
	r->nat_complete = complete;
	r->nat_dp = dp;
	r->nn_last = stackbuild_native(dp, r->sym, t->py, r->nat, nn, r->nframes, MAX_FRAMES);
	return r->nn_last;
}

/* Resolve the sample's Python frames into r->pframes. Return their number. */
static int python_frames(struct recorder *r, struct target *t, const struct sample_event *e,
			 const struct py_frame_rec *py, unsigned int *trunc)
{
	int i;

	r->py_unknown = 0;
	if (!t->py)
		return 0;
	if (e->py_status >= 0 && e->py_status < 8 && !r->capture)
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
		if (pyproc__resolve(t->py, &py[i], &r->pframes[i].f)) {
			r->py_unknown++;
			continue;
		}
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
	r->stats.python_samples += !r->capture;
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

/*
 * Intern the stack of the @n frames in r->frames (with r->stable), "[unknown]" when there is
 * none, with the STACK_TRUNC_* @trunc: *@stack_id. 0 or -errno.
 */
static int intern_frames(struct recorder *r, int n, unsigned int trunc, uint64_t *stack_id)
{
	int i, err;

	if (!n) {
		r->frames[n] = (struct frame){.kind = FRAME_NATIVE, .func = "[unknown]"};
		r->stable[n++] = NULL;
	}
	r->nframes_last = n;
	for (i = 0; i < n; i++) {
		err = frame_id(r, i);
		if (err)
			return err;
	}
	return store__stack_id(r->st, r->ids, n, trunc, stack_id);
}

/*
 * The stack of sample @e of target @t, interned: *@stack_id. @py, @kst, @stack: the parts that
 * follow its header. Its native frames are @site's where given (a known site whose checks
 * held: stacksites.h; @stack is not read then), else unwound from @stack. 0 or -errno.
 */
static int sample_stack(struct recorder *r, struct target *t, const struct sample_event *e,
			const struct py_frame_rec *py, const uint64_t *kst, const void *stack,
			const struct stack_site *site, uint64_t *stack_id)
{
	unsigned int trunc = 0;
	int n = 0, i, nn, np, nm;

	for (i = 0; i < e->kstack_len && n < MAX_FRAMES; i++) {
		r->frames[n] = kallsyms__frame(r->ks, kst[i]);
		r->stable[n++] = NULL;
	}
	if (site) {
		/* Complete, as only complete unwinds make sites; nothing new to learn. */
		memcpy(r->nframes, site->f, sizeof(site->f[0]) * site->nn);
		nn = site->nn;
		r->nat_last = r->nn_last = 0;
	} else if (e->flags & SAMPLE_F_NO_USER_REGS) {
		trunc |= STACK_TRUNC_NATIVE; /* the user stack is unknown */
		nn = 0;
	} else {
		nn = native_frames(r, t, e, stack, &trunc);
	}
	np = python_frames(r, t, e, py, &trunc);
	nm = pymerge(r->nframes, nn, r->pframes, np, r->merged, MAX_FRAMES - n);
	for (i = 0; i < nm; i++) {
		r->frames[n] = r->merged[i].f;
		r->stable[n++] = r->merged[i].stable;
	}
	return intern_frames(r, n, trunc, stack_id);
}

/* Whether the sample @e, @len bytes with what follows it, holds what its header says. */
static bool sample_fits(const struct sample_event *e, size_t len)
{
	return len >= sizeof(*e) && len >= sizeof(*e) + e->py_len * sizeof(struct py_frame_rec) +
						    e->kstack_len * 8ul + e->stack_len;
}

/* The key of the site where sample @e's thread stopped (stacksites.h). */
static struct site_key site_key(const struct sample_event *e)
{
	return (struct site_key){
		.pid = e->pid, .tid = e->tid, .ip = e->regs[DWREG_RIP], .sp = e->regs[DWREG_RSP]};
}

/*
 * The site in @ss whose checks hold on sample @e and its stack copy @stack (whose native frames
 * are then the site's), or NULL.
 */
static const struct stack_site *copied_site(struct stacksites *ss, const struct sample_event *e,
					    const void *stack)
{
	struct site_key k = site_key(e);

	if (e->flags & (SAMPLE_F_STACK_SHORT | SAMPLE_F_NO_USER_REGS))
		return NULL;
	return stacksites__match(ss, &k, (const uint64_t *)e->regs, stack, e->stack_len);
}

/*
 * Sample @e of @t (its stack copy @stack) was just unwound by sample_stack: learn its site in
 * @ss, where the unwind reached the thread's first frame (one that stopped early may have
 * stopped on a value no check covers) in @t's own view. The site learned, or NULL.
 */
static const struct stack_site *learn_site(struct recorder *r, struct target *t,
					   struct stacksites *ss, const struct sample_event *e,
					   const void *stack)
{
	struct site_key k = site_key(e);

	if (!r->opts.native || t->dp_shared || r->nat_dp != t->dp || !r->nat_last ||
	    !r->nat_complete || !r->nn_last ||
	    (e->flags & (SAMPLE_F_STACK_SHORT | SAMPLE_F_NO_USER_REGS)))
		return NULL;
	return stacksites__learn(ss, &k, t->dp, (const uint64_t *)e->regs, stack, e->stack_len,
				 r->nat, r->nat_last, r->nframes, r->nn_last);
}

/*
 * The off-CPU sample @e of @t was just unwound: learn where its thread blocked, if it blocked
 * there before (learning costs a few unwinds, worth it only where threads block again).
 */
static void learn_block_site(struct recorder *r, struct target *t, const struct sample_event *e,
			     const void *stack)
{
	struct site_key k = site_key(e);
	const struct stack_site *site;

	if (!stacksites__seen(r->block_sites, &k) ||
	    !(site = learn_site(r, t, r->block_sites, e, stack)))
		return;
	/* The first site of an empty table (a new one, or one that forgot everything to make
	 * room): what the kernel was told before is gone. */
	if (stacksites__count(r->block_sites) == 1)
		sampling__block_sites_forget(r->s, 0);
	k.variant = site->variant;
	if (sampling__block_site_put(r->s, &k, &site->chk))
		pr_debug("pid %d: block site not given to the sweep", e->pid);
}

/*
 * The site of the off-CPU stack @e that came as its site's id (SAMPLE_F_SITE), or NULL if it
 * is not known any more (the table forgot it to make room): the kernel is then told to stop
 * using the sites of that place, and the block's time goes under offcpu's fallback.
 */
static const struct stack_site *sent_site(struct recorder *r, const struct sample_event *e)
{
	const struct stack_site *site = stacksites__by_id(r->block_sites, e->site);
	struct site_key k;

	if (site && site->pid == (pid_t)e->pid)
		return site;
	k = site_key(e);
	for (k.variant = 0; k.variant < SITE_VARIANTS; k.variant++)
		sampling__block_site_drop(r->s, &k);
	r->stats.off_stacks_site_lost++;
	return NULL;
}

static int handle_sample(struct recorder *r, const struct sample_event *e, size_t len)
{
	const struct py_frame_rec *py = (const void *)(e + 1);
	const uint64_t *kst;
	const void *stack;
	const struct stack_site *site;
	struct block_stack_key memo_key;
	struct blockmemo *memo = NULL;
	struct target *t;
	struct thread *th;
	uint64_t stack_id;
	double ts;
	int err;

	if (!sample_fits(e, len))
		return -EINVAL;
	kst = (const void *)(py + e->py_len);
	stack = kst + e->kstack_len;
	ts = unix_seconds(r, e->time_ns);

	t = find_target(r, e->pid);
	if (!t) {
		/* A process we have not heard of: its fork event was lost. */
		t = unknown_target(r, e, ts);
		if (!t)
			return -ENOMEM;
	}
	/* A sample of the program before its exec, handled after the exec (records of processes
	 * ahead of samples: session.h's urgent_first): its addresses are not the new
	 * program's. */
	if (e->time_ns < t->exec_ns)
		return 0;
	if (!t->samples++)
		r->stats.processes++;
	retry_python(r, t);
	th = get_thread(r, t, e->tid, e->ns_tid, e->comm, ts);
	if (th)
		th->active = true;

	r->capture = e->flags & SAMPLE_F_OFFCPU;
	/* A thread blocks again and again where it blocked before (a worker on its queue): its
	 * native frames are unwound once (stacksites.h). */
	if (e->flags & SAMPLE_F_SITE) {
		if (!r->capture || !(site = sent_site(r, e))) {
			r->capture = false;
			return 0;
		}
		r->stats.off_stacks_by_id++;
	} else {
		site = r->capture ? copied_site(r->block_sites, e, stack) : NULL;
	}
	if (site && th) {
		/* A block at a known site: the same as the thread's last one, very often. */
		memo_key = (struct block_stack_key){.site_id = site->chk.id,
						    .py_gen = t->py ? t->py_gen : 0,
						    .flags = e->flags & SAMPLE_F_PY_TRUNCATED,
						    .py_len = t->py ? e->py_len : 0,
						    .kstack_len = e->kstack_len,
						    .py = py,
						    .kst = kst};
		memo = &th->memo;
	}
	if (memo && blockmemo__get(memo, &memo_key, &stack_id)) {
		err = 0;
		r->stats.off_stacks_memo++;
	} else {
		err = sample_stack(r, t, e, py, kst, stack, site, &stack_id);
		if (!err && memo && !r->py_unknown)
			blockmemo__put(memo, &memo_key, stack_id);
	}
	if (!err && r->capture && !site)
		learn_block_site(r, t, e, stack);
	r->capture = false;
	if (err)
		return err;
	r->stats.off_stacks_site += !!site;
	if (e->flags & SAMPLE_F_OFFCPU) {
		/* The stack of a block of a thread off its CPU: its segments are counted under it. */
		if (!r->oc)
			return 0;
		if (e->flags & SAMPLE_F_OFFCPU_WAKE)
			r->stats.off_stacks_wake++;
		else if (e->flags & SAMPLE_F_OFFCPU_RESUME)
			r->stats.off_stacks_resume++;
		else if (e->flags & SAMPLE_F_OFFCPU_FETCH)
			r->stats.off_stacks_fetch++;
		else
			r->stats.off_stacks_sweep++;
		return offcpu__stack(r->oc, e->pid, e->tid, e->block, stack_id);
	}
	err = store__count(r->st, e->pid, e->tid, stack_id, (int64_t)ts, 1);
	if (!err)
		r->stats.samples++;
	if (!err && r->oc && e->block)
		err = offcpu__oncpu(r->oc, e->pid, e->tid, e->block, stack_id);
	return err;
}

/*
 * The stack of a block whose stack was not taken (offcpu.h's fallback): the function the thread
 * waits in, from its instruction pointer @ip (without its callers: the stack was not copied),
 * marked incomplete; "[unknown]" without one.
 */
static int fallback_stack(void *ctx, pid_t pid, pid_t tid, uint64_t ip, uint64_t *stack_id)
{
	struct recorder *r = ctx;
	struct target *t = find_target(r, pid);
	struct dwproc *dp = t ? target_dwproc(t) : NULL;
	int n = 0, i, nn;

	if (ip && dp) {
		r->nat[0].pc = ip;
		r->nat[0].activation = true;
		nn = stackbuild_native(dp, r->sym, t->py, r->nat, 1, r->nframes, MAX_FRAMES);
		n = pymerge(r->nframes, nn, r->pframes, 0, r->merged, MAX_FRAMES);
		for (i = 0; i < n; i++) {
			r->frames[i] = r->merged[i].f;
			r->stable[i] = r->merged[i].stable;
		}
	}
	return intern_frames(r, n, STACK_TRUNC_NATIVE, stack_id);
}

/* Off-CPU time of a thread (a segment, offcpu.h). */
static int handle_offcpu(struct recorder *r, const struct offcpu_event *ev)
{
	struct target *t = find_target(r, ev->pid);
	struct offcpu_event clipped;
	struct thread *th;
	double ts = unix_seconds(r, ev->time_ns), after;

	if (!r->oc || !t)
		return 0; /* a process whose fork event was lost: its stacks say who it is */
	/* Time observed after the process ended (a zombie waits for nothing; the sweep leaves
	 * those out, bpf/sampler.bpf.c) is not its time, nor a sign of its threads. A segment
	 * whose last observation came after the end (a sweep between the exit's event and the
	 * task's exit_state) keeps the part before it: dropped whole, a child that slept through
	 * its short life lost all of it. */
	if (t->end_exact && ts > t->end_time) {
		after = (ts - t->end_time) * 1e9;
		if (after >= (double)ev->ns)
			return 0;
		clipped = *ev;
		clipped.ns = ev->ns - (uint64_t)after;
		clipped.time_ns = ev->time_ns - (uint64_t)after;
		ev = &clipped;
		ts = t->end_time;
	}
	if (!t->samples++)
		r->stats.processes++;
	th = get_thread(r, t, ev->tid, ev->ns_tid, ev->comm, ts);
	if (th)
		th->active = true;
	return offcpu__segment(r->oc, ev, (int64_t)ts, now_mono_ns());
}

/*
 * Whether the NCCL call whose stack call_stack just read was made by another probed NCCL
 * call (NCCL 2.2x: ncclBcast calls ncclBroadcast; one broadcast counted twice otherwise).
 * Its callers are the frames above the probed function itself.
 */
static bool nested_nccl_call(const struct recorder *r)
{
	int i;

	for (i = 1; i < r->nframes_last && i < 4; i++)
		if (r->frames[i].kind == FRAME_NATIVE && comm__is_nccl_call(r->frames[i].func))
			return true;
	return false;
}

/*
 * The stack of the call @e of @t: from its site (COMM_F_SITE, or a copy that passes a known
 * site's checks), or unwound from its copy, whose site is then learned and given to the
 * probes, so that later calls from it send no copy. 0 or -errno (-ENOENT: from a site no
 * longer known).
 */
static int call_stack(struct recorder *r, struct target *t, const struct comm_call_event *e,
		      uint64_t *stack_id)
{
	const struct py_frame_rec *py = (const void *)(&e->s + 1);
	const uint64_t *kst = (const void *)(py + e->s.py_len);
	const void *stack = kst + e->s.kstack_len;
	const struct stack_site *site;
	struct site_key k;
	int err;

	if (e->h.flags & COMM_F_SITE) {
		r->comm_site_calls++;
		site = stacksites__by_id(r->call_sites, e->site);
		if (!site || site->pid != (pid_t)e->s.pid)
			return -ENOENT;
		return sample_stack(r, t, &e->s, py, kst, NULL, site, stack_id);
	}
	r->comm_copies++;
	if (!e->s.kstack_len && (site = copied_site(r->call_sites, &e->s, stack)))
		return sample_stack(r, t, &e->s, py, kst, NULL, site, stack_id);
	err = sample_stack(r, t, &e->s, py, kst, stack, NULL, stack_id);
	if (!err && !e->s.kstack_len && r->comm &&
	    (site = learn_site(r, t, r->call_sites, &e->s, stack))) {
		k = site_key(&e->s);
		if (comm__site_put(r->comm, &k, &site->chk))
			pr_debug("pid %d: call site not given to the probes", e->s.pid);
	}
	return err;
}

/* An event of the collectives probes: a call's stack is interned like a sample's. */
static int handle_comm(struct recorder *r, const struct comm_event *h, size_t len)
{
	const struct comm_call_event *e = (const void *)h;
	struct recorder_stats keep;
	struct target *t;
	uint64_t stack_id = 0;

	if (!r->cs)
		return 0;
	if (h->ev == COMM_EV_MAPPED) {
		if (r->comm && find_target(r, h->pid))
			comm__mapped(r->comm, h->pid);
		return 0;
	}
	if (h->ev != COMM_EV_CALL)
		return collectives__event(r->cs, h);
	if (len < sizeof(*e) || !sample_fits(&e->s, len - offsetof(struct comm_call_event, s)) ||
	    ((h->flags & COMM_F_SITE) && (e->s.stack_len || e->s.kstack_len)))
		return -EINVAL;
	t = find_target(r, h->pid);
	if (t && t->alive) {
		/* A call is no sample: the sample statistics stay as they were. */
		keep = r->stats;
		r->nframes_last = 0;
		if (call_stack(r, t, e, &stack_id))
			stack_id = 0;
		r->stats = keep;
		if (COMM_COOKIE_ROLE(h->cookie) == COMM_R_NCCL_CALL && nested_nccl_call(r))
			return 0;
	}
	return collectives__call(r->cs, e, stack_id);
}

static int handle_proc(struct recorder *r, const struct proc_change_event *ev, size_t len)
{
	struct target *t = find_target(r, ev->pid);
	double ts = unix_seconds(r, ev->time_ns);

	switch (ev->change) {
	case PROC_FORK:
		follow_child(r, ev, ts);
		return 0;
	case PROC_EXEC:
		if (len < sizeof(struct proc_exec_event))
			return -EINVAL;
		if (t)
			target_exec(r, t, (const struct proc_exec_event *)ev);
		return 0;
	case PROC_THREAD_EXIT:
		thread_exited(r, t, ev);
		return 0;
	case PROC_EXIT:
		thread_exited(r, t, ev);
		/* Even if a tick found it gone first (its records were still queued). */
		if (t && r->on_exit)
			r->on_exit(r->on_exit_ctx, t->pid, &t->job, (int)ev->exit_code, ts);
		if (t)
			target_exited(r, t, ts, true);
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
		return handle_proc(r, rec, len);
	if (*type == EVENT_OFFCPU && len >= sizeof(struct offcpu_event))
		return handle_offcpu(r, rec);
	if (*type == EVENT_COMM && len >= sizeof(struct comm_event))
		return handle_comm(r, rec, len);
	return -EINVAL;
}

void recorder__seen(void *ctx, const void *rec, size_t len)
{
	const struct proc_change_event *ev = rec;
	struct recorder *r = ctx;

	if (!r->pf || len < sizeof(*ev) || ev->type != EVENT_PROC)
		return;
	if (ev->change == PROC_EXEC || ev->change == PROC_FORK)
		pyfinder__want(r->pf, ev->pid, ev->time_ns, 0);
}

int recorder__tick(struct recorder *r, bool caught_up)
{
	double now = unix_seconds(r, now_mono_ns());
	struct target *t;
	struct thread *th;
	long long cpu = 0;
	char state;
	size_t i;
	int fd = sampling__tstates_fd(r->s);
	/* What the interpreters hold of their threads (states, names: hundreds of reads of a
	 * process with many threads) is read again when a thread was born since the last tick,
	 * and every PY_REFRESH_TICKS ticks (renamed threads, exits). */
	uint64_t births = r->births ? __atomic_load_n(r->births, __ATOMIC_ACQUIRE) : 0;
	bool full = r->ticks++ % PY_REFRESH_TICKS == 0;
	bool reread = full || !r->births || births != r->births_seen;

	r->births_seen = births;
	for (i = 0; i < r->ntargets; i++) {
		t = &r->targets[i];
		if (!t->alive)
			continue;
		if (t->py) {
			/* New threads, names; the BPF fallback map. */
			if (fd >= 0 && reread)
				pyproc__fill_tstates(t->py, fd, t->pid);
			settle_python(r, t);
		} else {
			retry_python(r, t);
		}
		/* Libraries loaded since (dlopen), when the kernel does not say so itself. */
		if (r->comm)
			comm__tick(r->comm, t->pid);
	}
	/* Python names change (thread.name = ...): have them read again now and then (new
	 * threads are read at their birth), and store what changed and how long the threads
	 * that ran were seen. */
	if (r->tn && (r->ticks - 1) % (r->opts.names_every_s ?: PY_NAMES_EVERY_S) == 0)
		threadnames__refresh(r->tn);
	for (i = 0; i < r->nthreads; i++) {
		th = &r->threads[i];
		if (!th->active && !row_behind(th))
			continue;
		if (!th->exited && !th->routine_tried)
			read_routine(r, th);
		if (!th->exited)
			name_thread(r, th, NULL);
		/* A thread seen again and again (a worker that blocks twice a second) has its
		 * last_seen written every THREAD_SEEN_EVERY_S; at once when it went quiet, was
		 * renamed, or the file ends (recorder__store_threads). */
		if (th->dirty || !th->active || th->last_ts - th->stored_ts >= THREAD_SEEN_EVERY_S)
			store_thread(r, th);
		th->active = false;
	}
	/* Off-CPU time whose block's stack did not come: under the fallback. */
	if (r->oc && offcpu__expire(r->oc, now_mono_ns(), false))
		pr_warn("cannot count off-CPU time: out of memory");
	/* Exit events can be lost when the ring buffer is full: check, once every event queued
	 * before now has been handled (a process gone while its own events still wait in the
	 * queue is not dead to them yet: its calls keep their stacks). */
	for (i = 0; i < r->ntargets; i++) {
		t = &r->targets[i];
		if (t->names_to_drop && now - t->end_time > 1.0) {
			threadnames__drop(r->tn, t->pid);
			t->names_to_drop = false;
		}
		if (t->sites_to_drop && now - t->end_time > 1.0)
			forget_sites(r, t);
		if (!t->alive)
			continue;
		state = procinfo_state_cpu(t->pid, &cpu);
		if (caught_up && !procinfo_state_alive(state)) {
			target_exited(r, t, now, false);
			continue;
		}
		if (state && cpu >= 0)
			t->cpu_last = cpu;
	}
	return store__flush(r->st) ?: recorder__live_targets(r);
}

void recorder__poll(struct recorder *r)
{
	size_t i;

	for (i = 0; i < r->ntargets; i++)
		retry_python(r, &r->targets[i]);
	if (r->comm)
		comm__poll(r->comm);
}

int recorder__finish(struct recorder *r)
{
	int err = r->oc ? offcpu__expire(r->oc, now_mono_ns(), true) : 0;

	recorder__store_threads(r);
	return err;
}

void recorder__store_threads(struct recorder *r)
{
	struct thread *th;
	size_t i;

	for (i = 0; i < r->nthreads; i++) {
		th = &r->threads[i];
		if (row_behind(th))
			store_thread(r, th);
	}
}

int recorder__use_comm(struct recorder *r, struct comm *c)
{
	size_t i;

	r->cs = collectives__new(r->st, c);
	if (!r->cs)
		return -errno;
	r->comm = c;
	for (i = 0; i < r->ntargets; i++)
		if (r->targets[i].alive)
			comm__scan(c, r->targets[i].pid);
	return 0;
}

void recorder__comm_counts(const struct recorder *r, uint64_t *rows, uint64_t *completed,
			   uint64_t *processes)
{
	*rows = *completed = *processes = 0;
	if (r->cs)
		collectives__counts(r->cs, rows, completed, processes);
}

void recorder__comm_stacks(const struct recorder *r, uint64_t *copies, uint64_t *site_calls)
{
	*copies = r->comm_copies;
	*site_calls = r->comm_site_calls;
}

int recorder__comm_summary(struct recorder *r, char *buf, size_t size)
{
	buf[0] = '\0';
	return r->cs ? collectives__summary(r->cs, buf, size) : 0;
}

int recorder__live_targets(const struct recorder *r)
{
	return r->live;
}

void recorder__stats(const struct recorder *r, struct recorder_stats *out)
{
	struct offcpu_stats os;

	*out = r->stats;
	if (!r->oc)
		return;
	offcpu__stats(r->oc, &os);
	out->off_segments = os.segments;
	out->off_observations = os.observations;
	out->off_ns = os.ns;
	out->off_blocks = os.blocks;
	out->off_blocks_no_stack = os.blocks_no_stack;
	out->off_blocks_run_stack = os.blocks_run_stack;
	out->off_ns_no_stack = os.ns_no_stack;
}

int recorder__processes(const struct recorder *r, struct recorder_process **out)
{
	size_t i;

	*out = calloc(r->ntargets ? r->ntargets : 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	for (i = 0; i < r->ntargets; i++) {
		(*out)[i].pid = r->targets[i].pid;
		(*out)[i].job = &r->targets[i].job;
		(*out)[i].samples = r->targets[i].samples;
	}
	return (int)r->ntargets;
}

double recorder__target_cpu(const struct recorder *r)
{
	long long ticks = 0;
	size_t i;

	for (i = 0; i < r->ntargets; i++)
		if (r->targets[i].cpu_first >= 0 &&
		    r->targets[i].cpu_last > r->targets[i].cpu_first)
			ticks += r->targets[i].cpu_last - r->targets[i].cpu_first;
	return (double)ticks / sysconf(_SC_CLK_TCK);
}

void recorder__on_exit(struct recorder *r, recorder_exit_fn fn, void *ctx)
{
	r->on_exit = fn;
	r->on_exit_ctx = ctx;
}

struct collectives *recorder__collectives(const struct recorder *r)
{
	return r->cs;
}
