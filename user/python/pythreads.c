// SPDX-License-Identifier: MIT
/*
 * pythreads (part of pyproc): the interpreters' thread states, their OS tids and names, and
 * the calibration of glibc's struct pthread that the BPF walker's TSS lookup relies on.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "base/log.h"
#include "python/pyproc_int.h"
#include "base/util.h"

#define MAX_INTERPS 256
#define MAX_THREADS 65536

/*
 * glibc's struct pthread (nptl/descr.h), x86_64, glibc 2.26-2.38 (Debian 12 ships 2.36):
 * `pid_t tid` at 0x2d0 and `struct pthread_key_data specific_1stblock[32]` at 0x310, followed
 * by `struct pthread_key_data *specific[32]`. Both are calibrated from the live threads;
 * these values only break ties and serve when no thread can confirm them.
 */
#define GLIBC_PTHREAD_TID_DEFAULT      0x2d0
#define GLIBC_PTHREAD_SPECIFIC_DEFAULT 0x310
#define PTHREAD_KEY_2NDLEVEL_SIZE      32 /* keys per block */
#define PTHREAD_KEY_1STLEVEL_SIZE      32 /* blocks */
#define PTHREAD_KEY_DATA_SIZE	       16 /* struct pthread_key_data { uintptr_t seq; void *data; } */
#define PTHREAD_SCAN_SIZE	       0xc00 /* bytes of struct pthread scanned by calibration */

/* ---- tasks and pid namespaces ------------------------------------------------------------- */

struct task {
	pid_t tid;    /* as our /proc sees it */
	pid_t ns_tid; /* in the target's own pid namespace (last NSpid field) */
};

/* The target's tasks, with their tids in its namespace (NSpid, Linux 4.1+). */
static int read_tasks(pid_t pid, struct task **out, size_t *nr)
{
	char path[96];
	struct task *t = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d))) {
		char *status, *p;
		long tid;

		if (parse_long(de->d_name, 1, 0x7fffffff, &tid))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct task *tmp = realloc(t, ncap * sizeof(*tmp));

			if (!tmp) {
				free(t);
				closedir(d);
				return -ENOMEM;
			}
			t = tmp;
			cap = ncap;
		}
		t[n].tid = (pid_t)tid;
		t[n].ns_tid = (pid_t)tid;
		snprintf(path, sizeof(path), "/proc/%d/task/%ld/status", (int)pid, tid);
		status = read_file(path, 1 << 16, NULL);
		p = status ? strstr(status, "\nNSpid:") : NULL;
		if (p) {
			char *end = strchr(p + 1, '\n'), *tok, *last = NULL, *save = NULL;

			if (end)
				*end = 0;
			for (tok = strtok_r(p + 7, " \t", &save); tok;
			     tok = strtok_r(NULL, " \t", &save))
				last = tok;
			if (last)
				t[n].ns_tid = (pid_t)atoi(last);
		}
		free(status);
		n++;
	}
	closedir(d);
	*out = t;
	*nr = n;
	return 0;
}

static pid_t ns_to_ours(const struct task *t, size_t n, pid_t ns_tid)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (t[i].ns_tid == ns_tid)
			return t[i].tid;
	return 0;
}

/* ---- calibration of glibc's struct pthread ------------------------------------------------ */

static ssize_t read_pthread(struct pyproc *pp, uint64_t pthread, uint8_t *buf)
{
	ssize_t n = pymem_read_partial(pp->pid, pthread, buf, PTHREAD_SCAN_SIZE);

	/* Not a struct pthread: its header starts with tcb and self, both equal to it. */
	if (n >= 24) {
		uint64_t tcb, self;

		memcpy(&tcb, buf, 8);
		memcpy(&self, buf + 16, 8);
		if (tcb != pthread || self != pthread)
			return -EINVAL;
	}
	return n;
}

/*
 * Offset of `tid` in struct pthread: where the main thread holds the process's pid (in its
 * namespace) and every other thread a tid of the process.
 */
static int calibrate_tid(struct pyproc *pp, const struct task *tasks, size_t ntasks)
{
	uint8_t buf[PTHREAD_SCAN_SIZE];
	uint64_t main_pthread;
	bool cand[PTHREAD_SCAN_SIZE / 4];
	pid_t ns_pid = 0;
	ssize_t n;
	size_t i, k, t;
	int best = -1;

	for (i = 0; i < ntasks; i++)
		if (tasks[i].tid == pp->pid)
			ns_pid = tasks[i].ns_tid;
	if (!ns_pid || pp_ptr(pp, pp->runtime + pp->off.rt_main_thread, &main_pthread) ||
	    !main_pthread)
		return -1;
	n = read_pthread(pp, main_pthread, buf);
	if (n < 8)
		return -1;
	for (k = 0; k < ARRAY_SIZE(cand); k++) {
		int32_t v;

		cand[k] = false;
		if (k * 4 + 4 > (size_t)n || k * 4 < 24)
			continue;
		memcpy(&v, buf + k * 4, 4);
		cand[k] = v == ns_pid;
	}
	/* Every other thread must hold one of the process's tids there, all different. */
	for (t = 0; t < pp->nthreads; t++) {
		uint64_t pt = pp->threads[t].pthread;

		if (!pt || pt == main_pthread)
			continue;
		n = read_pthread(pp, pt, buf);
		if (n < 0)
			continue;
		for (k = 0; k < ARRAY_SIZE(cand); k++) {
			int32_t v;
			bool ok = false;

			if (!cand[k])
				continue;
			if (k * 4 + 4 <= (size_t)n) {
				memcpy(&v, buf + k * 4, 4);
				for (i = 0; i < ntasks && !ok; i++)
					ok = tasks[i].ns_tid == v && v != ns_pid;
			}
			cand[k] = ok;
		}
	}
	for (k = 0; k < ARRAY_SIZE(cand); k++) {
		if (!cand[k])
			continue;
		if (k * 4 == GLIBC_PTHREAD_TID_DEFAULT)
			return GLIBC_PTHREAD_TID_DEFAULT;
		if (best < 0)
			best = (int)(k * 4);
	}
	return best;
}

struct tss {
	int32_t initialized;
	uint32_t key;
};

static int read_tss(struct pyproc *pp, struct tss *tss)
{
	uint8_t buf[16];
	int err;

	if (pp->off.rt_tss == PYO_NONE)
		return -ENOTSUP;
	err = pp_read(pp, pp->runtime + pp->off.rt_tss, buf, sizeof(buf));
	if (err)
		return err;
	memcpy(&tss->initialized, buf + pp->off.tss_initialized, 4);
	memcpy(&tss->key, buf + pp->off.tss_key, 4);
	return 0;
}

/* The TSS value of @key in the thread @pthread if glibc's specific_1stblock is at @off. */
static int tss_value(struct pyproc *pp, const uint8_t *buf, ssize_t n, int off, uint32_t key,
		     uint64_t *value)
{
	uint64_t slot[2], l2;

	if (key < PTHREAD_KEY_2NDLEVEL_SIZE) {
		size_t at = (size_t)off + key * PTHREAD_KEY_DATA_SIZE;

		if (at + 16 > (size_t)n)
			return -EFAULT;
		memcpy(slot, buf + at, 16);
	} else {
		size_t at = (size_t)off + PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_DATA_SIZE +
			    (key / PTHREAD_KEY_2NDLEVEL_SIZE) * 8;

		if (key >= PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE ||
		    at + 8 > (size_t)n)
			return -EFAULT;
		memcpy(&l2, buf + at, 8);
		if (!l2 ||
		    pp_read(pp, l2 + (key % PTHREAD_KEY_2NDLEVEL_SIZE) * PTHREAD_KEY_DATA_SIZE,
			    slot, 16))
			return -EFAULT;
	}
	/* glibc stores the key's sequence number with the value; an odd one is a live key. */
	if (!(slot[0] & 1))
		return -ENOENT;
	*value = slot[1];
	return 0;
}

/* The same, reading only the slot (what the BPF walker does). */
static int thread_tss_value(struct pyproc *pp, uint64_t pthread, int off, uint32_t key,
			    uint64_t *value)
{
	uint64_t slot[2], l2, base = pthread + (uint64_t)off;
	int err;

	if (!pthread)
		return -EFAULT;
	if (key < PTHREAD_KEY_2NDLEVEL_SIZE) {
		err = pp_read(pp, base + key * PTHREAD_KEY_DATA_SIZE, slot, sizeof(slot));
	} else if (key < PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE) {
		err = pp_ptr(pp,
			     base + PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_DATA_SIZE +
				     (key / PTHREAD_KEY_2NDLEVEL_SIZE) * 8,
			     &l2);
		if (!err)
			err = l2 ? pp_read(pp,
					   l2 + (key % PTHREAD_KEY_2NDLEVEL_SIZE) *
							   PTHREAD_KEY_DATA_SIZE,
					   slot, sizeof(slot))
				 : -ENOENT;
	} else {
		err = -EINVAL;
	}
	if (err)
		return err;
	if (!(slot[0] & 1))
		return -ENOENT;
	*value = slot[1];
	return 0;
}

/*
 * Find offsetof(struct pthread, specific_1stblock) from the threads bound to the TSS key.
 * *@final is false when no thread could tell yet (the interpreter has not created its key or
 * bound a thread to it: we may be looking right after exec): the glibc default is returned
 * then, to be confirmed by a later call. BPF reads the key live and checks that it is
 * initialized and that the thread state it finds is the thread's own, so a tentative offset
 * is safe to hand over.
 */
static int calibrate_specific(struct pyproc *pp, bool *final)
{
	uint8_t(*bufs)[PTHREAD_SCAN_SIZE];
	ssize_t lens[8];
	uint64_t tss_[8];
	struct tss tss;
	size_t t, nb = 0;
	int off, best = -1, best_count = 0;

	*final = true;
	if (read_tss(pp, &tss))
		return -1;
	if (!tss.initialized) {
		*final = false;
		return GLIBC_PTHREAD_SPECIFIC_DEFAULT;
	}
	if (tss.key >= PTHREAD_KEY_2NDLEVEL_SIZE * PTHREAD_KEY_1STLEVEL_SIZE)
		return -1;
	bufs = malloc(ARRAY_SIZE(lens) * sizeof(*bufs));
	if (!bufs)
		return GLIBC_PTHREAD_SPECIFIC_DEFAULT;
	/* A handful of threads is plenty to agree on one offset. */
	for (t = 0; t < pp->nthreads && nb < ARRAY_SIZE(lens); t++) {
		if (!pp->threads[t].pthread)
			continue;
		lens[nb] = read_pthread(pp, pp->threads[t].pthread, bufs[nb]);
		if (lens[nb] <= 0)
			continue;
		tss_[nb] = pp->threads[t].tstate;
		nb++;
	}
	for (off = 24; off + PTHREAD_KEY_DATA_SIZE <= PTHREAD_SCAN_SIZE; off += 8) {
		int count = 0;

		for (t = 0; t < nb; t++) {
			uint64_t v;

			if (!tss_value(pp, bufs[t], lens[t], off, tss.key, &v) && v == tss_[t])
				count++;
		}
		if (count > best_count ||
		    (count && count == best_count && off == GLIBC_PTHREAD_SPECIFIC_DEFAULT)) {
			best = off;
			best_count = count;
		}
	}
	free(bufs);
	if (best < 0) {
		pr_debug("pid %d: no thread confirms the pthread TSS layout (yet); assuming "
			 "glibc's %#x",
			 (int)pp->pid, GLIBC_PTHREAD_SPECIFIC_DEFAULT);
		*final = false;
		return GLIBC_PTHREAD_SPECIFIC_DEFAULT;
	}
	if (best != GLIBC_PTHREAD_SPECIFIC_DEFAULT)
		pr_debug("pid %d: pthread specific_1stblock at %#x (%d threads agree)",
			 (int)pp->pid, best, best_count);
	return best;
}

/*
 * 3.15 keeps no thread state under a TSS key: PyGILState binds each thread's state in a
 * thread-local variable of the interpreter (pystate.c, no symbol in a stripped build). Its
 * offset from the thread pointer (fs base: x86_64 TLS variant II puts the static TLS blocks
 * just below it) is the same in every thread: find the offset (in the TLS_SCAN bytes below
 * fs base) that holds each thread's own state in every thread read. Final once two threads
 * agree on exactly one offset; with one thread, or where the thread-local of the attached
 * state (_Py_tss_tstate) agrees too, tentative, tried again at the next refresh. BPF checks
 * that what it finds there is the thread's own state (thread_id == fs base), so a tentative
 * offset is safe.
 */
#define TLS_SCAN 0x4000

static void calibrate_tls(struct pyproc *pp)
{
	uint8_t *bufs;
	uint64_t ts[8];
	size_t t, nb = 0, k;
	int64_t found = 0;
	int nfound = 0;

	bufs = malloc(8 * (size_t)TLS_SCAN);
	if (!bufs)
		return;
	for (t = 0; t < pp->nthreads && nb < 8; t++) {
		uint64_t pt = pp->threads[t].pthread;

		if (!pt || pt < TLS_SCAN ||
		    pp_read(pp, pt - TLS_SCAN, bufs + nb * TLS_SCAN, TLS_SCAN))
			continue;
		ts[nb++] = pp->threads[t].tstate;
	}
	for (k = 0; nb && k < TLS_SCAN; k += 8) {
		size_t j;

		for (j = 0; j < nb; j++) {
			uint64_t v;

			memcpy(&v, bufs + j * TLS_SCAN + k, 8);
			if (v != ts[j])
				break;
		}
		if (j == nb) {
			if (!nfound)
				found = (int64_t)k - TLS_SCAN;
			nfound++;
		}
	}
	free(bufs);
	if (!nfound) {
		pp->tls_state = TLS_NONE;
		return;
	}
	pp->tls_off = found;
	pp->tls_state = nb >= 2 && nfound == 1 ? TLS_FINAL : TLS_TENTATIVE;
	pr_debug("pid %d: thread states in a thread-local at fs%+lld (%zu threads, %d candidates)",
		 (int)pp->pid, (long long)found, nb, nfound);
}

int pyproc__tls_tstate(struct pyproc *pp, int32_t *off)
{
	if (pp->tls_state == TLS_NONE && pp->off.rt_tss == PYO_NONE && !pp->newer)
		pyproc__refresh_threads(pp);
	if (pp->tls_state == TLS_NONE)
		return -ENOENT;
	*off = (int32_t)pp->tls_off;
	return 0;
}

int pyproc__pthread_specific(struct pyproc *pp)
{
	bool final;
	int off;

	if (pp->pthread_specific == -2 && !pp->nthreads)
		pyproc__refresh_threads(pp); /* calibrates when it can */
	if (pp->pthread_specific != -2)
		return pp->pthread_specific;
	off = calibrate_specific(pp, &final);
	if (final)
		pp->pthread_specific = off;
	return off;
}

int pyproc__tss_key(struct pyproc *pp)
{
	struct tss tss;

	if (read_tss(pp, &tss) || !tss.initialized || tss.key > 0x7fffffff)
		return -1;
	return (int)tss.key;
}

int pyproc__main_pthread(struct pyproc *pp, uint64_t *out)
{
	int err = pp_ptr(pp, pp->runtime + pp->off.rt_main_thread, out);

	return err ?: (*out ? 0 : -ENOENT);
}

/* ---- threads ------------------------------------------------------------------------------ */

static int add_thread(struct pyproc *pp, const struct pythread *th)
{
	if (pp->nthreads == pp->capthreads) {
		size_t ncap = pp->capthreads ? pp->capthreads * 2 : 16;
		struct pythread *tmp = realloc(pp->threads, ncap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		pp->threads = tmp;
		pp->capthreads = ncap;
	}
	pp->threads[pp->nthreads++] = *th;
	return 0;
}

struct name_ctx {
	uint64_t interp;
};

/* threading._active: {ident: Thread}; name each of our threads from its Thread._name. */
static int name_from_active(struct pyproc *pp, uint64_t key, uint64_t value, void *ctx)
{
	struct name_ctx *nc = ctx;
	uint64_t name_obj;
	int64_t ident;
	size_t i;

	if (py_read_long(pp, key, &ident))
		return 0;
	for (i = 0; i < pp->nthreads; i++) {
		struct pythread *th = &pp->threads[i];
		const char *name;

		if (th->interp != nc->interp || th->pthread != (uint64_t)ident)
			continue;
		if (py_getattr_dict_keyed(pp, value, "_name", &pp->thr_key_name, &name_obj))
			return 0;
		name = py_str_interned(pp, name_obj);
		if (name)
			th->name = name;
	}
	return 0;
}

struct names_ctx {
	void (*cb)(void *ctx, pid_t ns_tid, const char *name);
	void *ctx;
};

/* A Thread's _native_id (its tid in its PID namespace), or 0 when it has none (yet). */
static pid_t native_id_of(struct pyproc *pp, uint64_t thread)
{
	uint64_t id_obj, type;
	int64_t ns_tid;

	/* _native_id is None until the thread has run (and without native ids). */
	if (py_getattr_dict_keyed(pp, thread, "_native_id", &pp->thr_key_native_id, &id_obj) ||
	    pp_ptr(pp, id_obj + pp->off.ob_type, &type) || !pp->objs[PYS_INT] ||
	    type != pp->objs[PYS_INT] || py_read_long(pp, id_obj, &ns_tid) || ns_tid <= 0 ||
	    ns_tid > 0x7fffffff)
		return 0;
	return (pid_t)ns_tid;
}

/* threading._active entry -> (Thread._native_id, Thread._name). */
static int name_of_active(struct pyproc *pp, uint64_t key, uint64_t value, void *arg)
{
	struct names_ctx *nc = arg;
	uint64_t name_obj;
	pid_t ns_tid;
	size_t len;
	char *name;

	ns_tid = native_id_of(pp, value);
	if (!ns_tid || py_getattr_dict_keyed(pp, value, "_name", &pp->thr_key_name, &name_obj))
		return 0;
	/* Not interned: a process that names a thread per request would grow the pool. */
	if (py_read_str(pp, name_obj, &name, &len))
		return 0;
	/*
	 * The process runs on while we read: the Thread may have ended and its memory been
	 * reused by a new Thread between the two reads (a pool starting a thread per task does
	 * that within microseconds). The pair is ours only if the id still reads the same.
	 */
	if (*name && strlen(name) == len && native_id_of(pp, value) == ns_tid)
		nc->cb(nc->ctx, ns_tid, name);
	free(name);
	return 0;
}

static int count_entry(struct pyproc *pp, uint64_t key, uint64_t value, void *arg)
{
	(*(int *)arg)++;
	return 0;
}

static bool is_dict(struct pyproc *pp, uint64_t obj)
{
	uint64_t type;

	return obj && !pp_ptr(pp, obj + pp->off.ob_type, &type) && pp->objs[PYS_DICT] &&
	       type == pp->objs[PYS_DICT];
}

/*
 * threading._active and _limbo (0 if absent) of interpreter @interp. Found through
 * sys.modules and the module's dict, which takes hundreds of reads (a torch process has
 * thousands of modules, each key read to be compared): for one interpreter they are kept
 * (module globals live as long as the module), checked to still be dicts at each use, and
 * found again every THR_REUSE uses (a threading module imported anew).
 */
#define THR_REUSE 32
static int threading_dicts(struct pyproc *pp, uint64_t interp, uint64_t *active, uint64_t *limbo)
{
	uint64_t modules, mod, mdict;

	if (interp == pp->thr_interp && pp->thr_uses && is_dict(pp, pp->thr_active) &&
	    (!pp->thr_limbo || is_dict(pp, pp->thr_limbo))) {
		pp->thr_uses--;
		*active = pp->thr_active;
		*limbo = pp->thr_limbo;
		return 0;
	}
	if (pp_ptr(pp, interp + pp->off.is_modules, &modules) || !modules ||
	    py_dict_get_str(pp, modules, "threading", &mod) ||
	    pp_ptr(pp, mod + pp->off.md_dict, &mdict) || !mdict ||
	    py_dict_get_str(pp, mdict, "_active", active))
		return -ENOENT; /* threading not imported (yet) */
	if (py_dict_get_str(pp, mdict, "_limbo", limbo))
		*limbo = 0;
	if (interp == pp->thr_interp || !pp->thr_interp || !pp->thr_uses) {
		pp->thr_interp = interp;
		pp->thr_active = *active;
		pp->thr_limbo = *limbo;
		pp->thr_uses = THR_REUSE;
	}
	return 0;
}

/* Thread names from each interpreter's threading module, read like a debugger would. */
static void read_thread_names(struct pyproc *pp, uint64_t interp)
{
	struct name_ctx nc = {interp};
	uint64_t active, limbo;

	if (threading_dicts(pp, interp, &active, &limbo))
		return; /* threading not imported (yet): the OS names stand */
	py_dict_foreach(pp, active, MAX_THREADS, name_from_active, &nc);
}

int pyproc__thread_names(struct pyproc *pp, void (*cb)(void *ctx, pid_t ns_tid, const char *name),
			 void *ctx)
{
	struct names_ctx nc = {cb, ctx};
	uint64_t interp, active, limbo;
	int n, err, starting = 0, failed = 0;

	err = pp_ptr(pp, pp->runtime + pp->off.rt_interpreters_head, &interp);
	for (n = 0; !err && interp && n < MAX_INTERPS; n++) {
		if (!threading_dicts(pp, interp, &active, &limbo)) {
			/* Thread.start() puts the thread in _limbo before it creates the OS
			 * thread, which moves itself to _active once it holds the GIL. The dicts
			 * change while we read them: a failed read is said. */
			if (limbo)
				failed = py_dict_foreach(pp, limbo, MAX_THREADS, count_entry,
							 &starting)
						 ?: failed;
			failed = py_dict_foreach(pp, active, MAX_THREADS, name_of_active, &nc)
					 ?: failed;
		}
		err = pp_ptr(pp, interp + pp->off.is_next, &interp);
	}
	return err ?: failed ?: starting;
}

static const char *comm_name(struct pyproc *pp, pid_t tid)
{
	char path[96], *s;
	size_t len;
	const char *r;

	if (!tid)
		return "";
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pp->pid, (int)tid);
	s = read_file(path, 256, &len);
	if (!s)
		return "";
	while (len && s[len - 1] == '\n')
		s[--len] = 0;
	r = strpool__intern(pp->strs, s);
	free(s);
	return r ? r : "";
}

/*
 * Read every interpreter's thread states into pp->threads (tstate, interp, pthread_t; with
 * @tasks, the tid too, else 0; no name) and the interpreters into @interps (MAX_INTERPS).
 * Return the number of interpreters or -errno; pp->threads holds what was read either way.
 */
static int read_tstates(struct pyproc *pp, const struct task *tasks, size_t ntasks,
			uint64_t *interps)
{
	const struct py_offsets *o = &pp->off;
	uint64_t interp, tstate;
	size_t ninterp = 0;
	int err;

	pp->nthreads = 0;
	err = pp_ptr(pp, pp->runtime + o->rt_interpreters_head, &interp);
	if (err)
		return err;
	for (; interp && ninterp < MAX_INTERPS; ninterp++) {
		interps[ninterp] = interp;
		err = pp_ptr(pp, interp + o->is_tstate_head, &tstate);
		if (err)
			return err;
		while (tstate && pp->nthreads < MAX_THREADS) {
			struct pythread th = {.tstate = tstate, .interp = interp, .name = ""};

			err = pp_ptr(pp, tstate + o->ts_thread_id, &th.pthread);
			if (!err && tasks && o->ts_native_thread_id != PYO_NONE) {
				uint64_t ntid;

				err = pp_ptr(pp, tstate + o->ts_native_thread_id, &ntid);
				if (!err)
					th.tid = ns_to_ours(tasks, ntasks, (pid_t)ntid);
			}
			if (!err)
				err = add_thread(pp, &th);
			if (!err)
				err = pp_ptr(pp, tstate + o->ts_next, &tstate);
			if (err)
				return err;
		}
		err = pp_ptr(pp, interp + o->is_next, &interp);
		if (err)
			return err;
	}
	return (int)ninterp;
}

int pyproc__refresh_threads(struct pyproc *pp)
{
	const struct py_offsets *o = &pp->off;
	uint64_t interps[MAX_INTERPS];
	struct task *tasks = NULL;
	size_t ntasks = 0, ninterp, i;
	struct tss tss;
	int err;

	pp->nthreads = 0;
	err = read_tasks(pp->pid, &tasks, &ntasks);
	if (err)
		return err;
	err = read_tstates(pp, tasks, ntasks, interps);
	if (err < 0)
		goto cleanup;
	ninterp = (size_t)err;
	/* <= 3.10 has no native_thread_id: take the tid from glibc's struct pthread. */
	if (o->ts_native_thread_id == PYO_NONE) {
		if (pp->pthread_tid_off < 0)
			pp->pthread_tid_off = calibrate_tid(pp, tasks, ntasks);
		for (i = 0; i < pp->nthreads && pp->pthread_tid_off >= 0; i++) {
			int32_t ns_tid;

			if (pp->threads[i].pthread &&
			    !pp_read(pp, pp->threads[i].pthread + pp->pthread_tid_off, &ns_tid, 4))
				pp->threads[i].tid = ns_to_ours(tasks, ntasks, ns_tid);
		}
	}
	/* 3.15+ has no TSS key: a thread-local variable holds each thread's state. */
	if (pp->off.rt_tss == PYO_NONE && pp->tls_state != TLS_FINAL && pp->nthreads && !pp->newer)
		calibrate_tls(pp);
	if (pp->tls_state != TLS_NONE) {
		for (i = 0; i < pp->nthreads; i++) {
			uint64_t v;

			pp->threads[i].tss_bound =
				pp->threads[i].pthread &&
				!pp_ptr(pp, pp->threads[i].pthread + (int64_t)pp->tls_off, &v) &&
				v == pp->threads[i].tstate;
		}
	}
	/* Which thread states are what their thread's TSS slot holds (what BPF will find). */
	if (pp->pthread_specific == -2 && pp->nthreads) {
		bool final;
		int off = calibrate_specific(pp, &final);

		if (final)
			pp->pthread_specific = off;
	}
	if (pp->pthread_specific >= 0 && !read_tss(pp, &tss) && tss.initialized) {
		for (i = 0; i < pp->nthreads; i++) {
			uint64_t v;

			pp->threads[i].tss_bound =
				!thread_tss_value(pp, pp->threads[i].pthread, pp->pthread_specific,
						  tss.key, &v) &&
				v == pp->threads[i].tstate;
		}
	}
	for (i = 0; i < ninterp; i++)
		read_thread_names(pp, interps[i]);
	for (i = 0; i < pp->nthreads; i++)
		if (!*pp->threads[i].name)
			pp->threads[i].name = comm_name(pp, pp->threads[i].tid);
	err = (int)pp->nthreads;
cleanup:
	free(tasks);
	if (err < 0)
		pp->nthreads = 0;
	return err;
}

const struct pythread *pyproc__threads(const struct pyproc *pp, size_t *nr)
{
	*nr = pp->nthreads;
	return pp->threads;
}

const struct pythread *pyproc__thread_by_tid(const struct pyproc *pp, pid_t tid)
{
	size_t i;

	for (i = 0; i < pp->nthreads; i++)
		if (pp->threads[i].tid == tid && tid)
			return &pp->threads[i];
	return NULL;
}

const struct pythread *pyproc__thread_by_pthread(const struct pyproc *pp, uint64_t pthread)
{
	size_t i;

	for (i = 0; i < pp->nthreads; i++)
		if (pp->threads[i].pthread == pthread && pthread)
			return &pp->threads[i];
	return NULL;
}

/* Whether the last fill wrote @tstate for @pthread into the map. */
static bool filled(const struct pyproc *pp, uint64_t pthread, uint64_t tstate)
{
	size_t i;

	for (i = 0; i < pp->nfilled; i++)
		if (pp->filled[i].pthread == pthread)
			return pp->filled[i].tstate == tstate;
	return false;
}

/* The map's key of thread @pthread of @kernel_pid (its padding zeroed: hashed as bytes). */
static struct py_tstate_key tstate_key(__u32 kernel_pid, uint64_t pthread)
{
	struct py_tstate_key key;

	memset(&key, 0, sizeof(key));
	key.pid = kernel_pid;
	key.pthread = pthread;
	return key;
}

int pyproc__fill_tstates(struct pyproc *pp, int map_fd, __u32 kernel_pid)
{
	struct py_tstate_key key, next, *prev = NULL;
	uint64_t interps[MAX_INTERPS];
	size_t i;
	int err, n = 0;

	/* The thread states only: the map needs no tid, name or TSS binding (a process with
	 * many threads took thousands of reads for those, every few seconds). While where
	 * the threads keep their state is not settled yet, the whole refresh, which goes on
	 * finding it out. */
	if (pp->pthread_specific == -2 ||
	    (pp->off.rt_tss == PYO_NONE && pp->tls_state != TLS_FINAL && !pp->newer))
		err = pyproc__refresh_threads(pp);
	else if ((err = read_tstates(pp, NULL, 0, interps)) < 0)
		pp->nthreads = 0;
	if (err < 0)
		return err;
	/*
	 * Drop this process's entries for threads that are gone. The first time, they are looked
	 * for in the whole map (a program this pid ran before an exec left its own); then only
	 * what this process's fills wrote is there, and the map (every process's threads) is
	 * not walked again.
	 */
	if (!pp->filled_known) {
		while (!bpf_map_get_next_key(map_fd, prev, &next)) {
			key = next;
			prev = &key;
			if (next.pid != kernel_pid || pyproc__thread_by_pthread(pp, next.pthread))
				continue;
			bpf_map_delete_elem(map_fd, &next);
			prev = NULL; /* deletion invalidates the iteration: restart */
		}
	} else {
		for (i = 0; i < pp->nfilled; i++) {
			if (pyproc__thread_by_pthread(pp, pp->filled[i].pthread))
				continue;
			key = tstate_key(kernel_pid, pp->filled[i].pthread);
			bpf_map_delete_elem(map_fd, &key); /* absent is fine */
		}
	}
	for (i = 0; i < pp->nthreads; i++) {
		__u64 value = pp->threads[i].tstate;

		if (!pp->threads[i].pthread)
			continue;
		n++;
		if (pp->filled_known && filled(pp, pp->threads[i].pthread, value))
			continue;
		key = tstate_key(kernel_pid, pp->threads[i].pthread);
		if (bpf_map_update_elem(map_fd, &key, &value, BPF_ANY)) {
			/* What the map holds is not known now: walk it at the next fill. */
			pp->filled_known = false;
			return -errno;
		}
	}
	/* What the map holds of this process now. */
	pp->nfilled = 0;
	pp->filled_known =
		!grow_array(&pp->filled, &pp->capfilled, pp->nthreads, sizeof(*pp->filled));
	for (i = 0; pp->filled_known && i < pp->nthreads; i++)
		if (pp->threads[i].pthread)
			pp->filled[pp->nfilled++] = (struct pythread_tss){
				.pthread = pp->threads[i].pthread, .tstate = pp->threads[i].tstate};
	return n;
}
