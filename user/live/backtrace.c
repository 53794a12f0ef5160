// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/user.h>

#include "pyoffsets/pyoffsets.h"
#include "live/backtrace.h"
#include "native/dwproc.h"
#include "base/escape.h"
#include "injector/inject.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "python/pymerge.h"
#include "python/pyproc.h"
#include "bpf/sampler.h"
#include "native/stackbuild.h"
#include "native/symbolize.h"
#include "native/threadroutine.h"
#include "base/util.h"

#define MAX_NATIVE 512
#define MAX_FRAMES (MAX_NATIVE * 4 + SAMPLER_MAX_PYDEPTH)

/* What owns the strings the frames point to. */
struct bt_priv {
	struct pyproc *py;
	struct dwproc *dp;
	struct symbolizer *sym; /* the caller's (bt_opts.sym) or own_sym */
	struct symbolizer *own_sym;
	uint64_t gil_lo, gil_hi; /* the GIL struct, 0, 0 if unknown (opts.waits) */
	uint64_t gil_holder;	 /* the tstate holding it when read, 0 nobody */
	bool gil_known;
};

/* Scratch for one thread. */
struct bt_scratch {
	struct py_frame_rec recs[SAMPLER_MAX_PYDEPTH];
	uint64_t faddr[SAMPLER_MAX_PYDEPTH];	    /* each Python frame's address */
	struct bt_vars pyvars[SAMPLER_MAX_PYDEPTH]; /* and its locals, with --locals */
	struct pym_frame py[SAMPLER_MAX_PYDEPTH];
	struct pym_frame nat[MAX_FRAMES];
	struct pym_frame merged[MAX_FRAMES];
	struct dwproc_frame pcs[MAX_NATIVE];
	uint64_t regs[DWREG_COUNT];
	unsigned char stack[SAMPLER_MAX_STACK];
};

static char thread_state(pid_t pid, pid_t tid)
{
	struct task_wait w;

	return taskwait_read(pid, tid, &w) ? '?' : w.state;
}

/* The tids of @pid, ascending. */
static int list_tids(pid_t pid, pid_t **out, int *nr)
{
	char path[64];
	struct dirent *de;
	size_t cap = 0;
	pid_t *tids = NULL;
	int n = 0, i, j;
	long v;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d))) {
		if (parse_long(de->d_name, 1, 0x7fffffff, &v))
			continue;
		if (grow_array(&tids, &cap, n + 1, sizeof(*tids))) {
			closedir(d);
			free(tids);
			return -ENOMEM;
		}
		tids[n++] = v;
	}
	closedir(d);
	for (i = 1; i < n; i++) /* insertion sort: a few hundred threads at most */
		for (j = i; j > 0 && tids[j - 1] > tids[j]; j--) {
			pid_t t = tids[j];

			tids[j] = tids[j - 1];
			tids[j - 1] = t;
		}
	*out = tids;
	*nr = n;
	return 0;
}

/* Copy the stack above @sp, a page at a time, up to SAMPLER_MAX_STACK bytes. */
static size_t copy_stack(pid_t pid, uint64_t sp, unsigned char *buf)
{
	size_t got = 0, chunk;

	while (got < SAMPLER_MAX_STACK) {
		struct iovec local, remote;

		chunk = 4096 - ((sp + got) & 4095);
		if (chunk > SAMPLER_MAX_STACK - got)
			chunk = SAMPLER_MAX_STACK - got;
		local.iov_base = buf + got;
		local.iov_len = chunk;
		remote.iov_base = (void *)(uintptr_t)(sp + got);
		remote.iov_len = chunk;
		if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)chunk)
			break;
		got += chunk;
	}
	return got & ~(size_t)7;
}

static void user_regs_to_dwarf(const struct user_regs_struct *r, uint64_t *d)
{
	d[DWREG_RAX] = r->rax;
	d[DWREG_RDX] = r->rdx;
	d[DWREG_RCX] = r->rcx;
	d[DWREG_RBX] = r->rbx;
	d[DWREG_RSI] = r->rsi;
	d[DWREG_RDI] = r->rdi;
	d[DWREG_RBP] = r->rbp;
	d[DWREG_RSP] = r->rsp;
	d[DWREG_R8] = r->r8;
	d[DWREG_R9] = r->r9;
	d[DWREG_R10] = r->r10;
	d[DWREG_R11] = r->r11;
	d[DWREG_R12] = r->r12;
	d[DWREG_R13] = r->r13;
	d[DWREG_R14] = r->r14;
	d[DWREG_R15] = r->r15;
	d[DWREG_RIP] = r->rip;
}

static void vars_clear(struct bt_vars *vs)
{
	int i;

	for (i = 0; i < vs->n; i++) {
		free(vs->v[i].name);
		free(vs->v[i].type);
		free(vs->v[i].repr);
	}
	free(vs->v);
	memset(vs, 0, sizeof(*vs));
}

/* Append one variable (copies the strings). */
static int vars_add(struct bt_vars *vs, const char *name, const char *type, const char *repr)
{
	struct bt_var *v;

	if (grow_array(&vs->v, &vs->cap, (size_t)vs->n + 1, sizeof(*vs->v)))
		return -ENOMEM;
	v = &vs->v[vs->n];
	v->name = strdup(name ?: "?");
	v->type = strdup(type ?: "?");
	v->repr = strdup(repr ?: "?");
	if (!v->name || !v->type || !v->repr) {
		free(v->name);
		free(v->type);
		free(v->repr);
		return -ENOMEM;
	}
	vs->n++;
	return 0;
}

int backtrace__add_local(struct bt_thread *t, int frame, const char *name, const char *type,
			 const char *repr)
{
	if (frame < 0 || frame >= t->nframes || t->frames[frame].kind != FRAME_PYTHON)
		return -EINVAL;
	if (!t->locals) {
		t->locals = calloc(t->nframes, sizeof(*t->locals));
		if (!t->locals)
			return -ENOMEM;
	}
	t->locals[frame].full = true;
	return vars_add(&t->locals[frame], name, type, repr);
}

static int outside_local(const struct pyproc_local *l, void *ctx)
{
	char own[160];

	if (!l->repr)
		snprintf(own, sizeof(own), "<%.120s object at 0x%llx>", l->type,
			 (unsigned long long)l->addr);
	return vars_add(ctx, l->name, l->type, l->repr ?: own);
}

/*
 * Python frames of @th into sc->py; the thread's records are in sc->recs, and with
 * o->locals each frame's variables in sc->pyvars.
 */
static int python_frames(struct pyproc *py, const struct pythread *th, const struct bt_opts *o,
			 struct bt_scratch *sc, bool *truncated)
{
	unsigned int partial = 0;
	int n, i, err, tries;

	if (!py || !th)
		return 0;
	/* The thread runs on while it is read (only --native holds it): a walk that met a frame
	 * changing under it is tried again, a few times, before what it read is taken. (On 3.14
	 * and 3.15 a leaf popped meanwhile is passed over by the walk itself: bpf/pywalk.h.) */
	for (tries = 0; tries < 4; tries++) {
		n = pyproc__walk_ex(py, th->tstate, sc->recs, sc->faddr, o->py_depth, truncated,
				    &partial);
		if (n >= 0)
			break;
	}
	if (n < 0)
		n = (int)partial; /* the frames read before a racing change are still good */
	for (i = 0; i < n; i++) {
		pyproc__resolve(py, &sc->recs[i], &sc->py[i].f);
		sc->py[i].stable = NULL;
		sc->py[i].flags = sc->recs[i].meta & PYF_ENTRY;
		if (!o->locals)
			continue;
		/* A frame the thread has left meanwhile (-ESTALE) or unreadable: no locals. */
		err = pyproc__frame_locals_ex(py, sc->faddr[i], sc->recs[i].code, o->max_repr,
					      PYLOCALS_NAMESPACE, outside_local, &sc->pyvars[i]);
		if (err == -ENOMEM) {
			while (i >= 0)
				vars_clear(&sc->pyvars[i--]);
			return err;
		}
	}
	return n;
}

/* Native frames of the held thread, classified for the merge, into sc->nat. */
static int native_frames(struct bt_priv *pv, pid_t tid, size_t stack_len, struct bt_scratch *sc)
{
	bool complete;
	int nn;

	nn = dwproc__unwind(pv->dp, tid, sc->regs, sc->stack, stack_len, sc->pcs, MAX_NATIVE,
			    &complete);
	return stackbuild_native(pv->dp, pv->sym, pv->py, sc->pcs, nn < 0 ? 0 : nn, sc->nat,
				 MAX_FRAMES);
}

/* The thread's wait and its relation to the GIL, read without stopping it. */
static void read_wait(pid_t pid, struct bt_priv *pv, struct bt_thread *t, const struct pythread *th)
{
	t->gil = BT_GIL_NA;
	t->wclass = WAIT_OTHER;
	if (taskwait_read(pid, t->tid, &t->wait))
		return; /* exited meanwhile: the state read before stays */
	t->state = t->wait.state;
	t->wclass = taskwait_classify(&t->wait, pv->gil_lo, pv->gil_hi);
	taskwait_describe(&t->wait, t->wait_desc, sizeof(t->wait_desc));
	if (!th || !pv->gil_known)
		return;
	if (t->wclass == WAIT_GIL)
		t->gil = BT_GIL_WAITS;
	else if (pv->gil_holder && th->tstate == pv->gil_holder)
		t->gil = BT_GIL_HOLDS;
	else
		t->gil = BT_GIL_NO;
}

/* One thread: Python frames, and native ones merged in if asked. */
static int collect_thread(struct bt_process *p, struct bt_thread *t, const struct bt_opts *o,
			  struct bt_scratch *sc)
{
	struct bt_priv *pv = p->priv;
	const struct pythread *th = pv->py ? pyproc__thread_by_tid(pv->py, t->tid) : NULL;
	struct user_regs_struct uregs;
	struct inject_hold *hold = NULL;
	struct inject_info info;
	size_t stack_len = 0;
	bool held = false;
	int np = 0, nn = 0, n, i, k, err;

	t->python = th != NULL;
	if (procinfo_thread_name(p->pid, t->tid, t->comm, sizeof(t->comm)))
		t->comm[0] = '\0';
	if (th && th->name && th->name[0])
		snprintf(t->name, sizeof(t->name), "%s", th->name);
	else
		snprintf(t->name, sizeof(t->name), "%s", t->comm);
	t->state = thread_state(p->pid, t->tid);
	/* Before --native holds it: once let go, a thread is seen running for a moment. */
	if (o->waits)
		read_wait(p->pid, pv, t, th);

	if (o->native && pv->dp) {
		/* Hold the thread while copying its registers, stack and Python frames, so the
		 * three agree. */
		err = inject__hold(p->pid, t->tid, &uregs, &hold, &info);
		if (err) {
			snprintf(t->error, sizeof(t->error), "%.250s",
				 info.error[0] ? info.error : strerror(-err));
		} else {
			user_regs_to_dwarf(&uregs, sc->regs);
			stack_len = copy_stack(p->pid, uregs.rsp, sc->stack);
			np = python_frames(pv->py, th, o, sc, &t->truncated);
			inject__release(hold);
			held = true;
			nn = native_frames(pv, t->tid, stack_len, sc);
		}
	}
	if (!held)
		np = python_frames(pv->py, th, o, sc, &t->truncated);
	if (np < 0)
		return np;
	n = pymerge(sc->nat, nn, sc->py, np, sc->merged, MAX_FRAMES);
	t->frames = calloc(n ? n : 1, sizeof(*t->frames));
	if (o->locals)
		t->locals = calloc(n ? n : 1, sizeof(*t->locals));
	if (!t->frames || (o->locals && !t->locals))
		err = -ENOMEM;
	else
		err = 0;
	for (i = 0, k = 0; !err && i < n; i++) {
		t->frames[i] = sc->merged[i].f;
		/* pymerge keeps the Python frames in their order: the k-th is sc->pyvars[k]. */
		if (t->locals && t->frames[i].kind == FRAME_PYTHON && k < np) {
			t->locals[i] = sc->pyvars[k];
			memset(&sc->pyvars[k++], 0, sizeof(sc->pyvars[0]));
		}
	}
	for (k = 0; k < np; k++)
		vars_clear(&sc->pyvars[k]);
	t->nframes = err ? 0 : n;
	return err;
}

/* Say why collecting failed: into @why when given, else on stderr. */
static void __attribute__((format(printf, 3, 4)))
explain(char *why, size_t size, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (why)
		snprintf(why, size, "%s", msg);
	else
		pr_warn("%s", msg);
}

/* The GIL's place and holder, once per process (opts.waits). */
static void read_gil(struct bt_priv *pv)
{
	if (!pv->py || pyproc__gil_range(pv->py, &pv->gil_lo, &pv->gil_hi))
		return;
	/* A holder that kept changing while read: nobody is said to hold it. */
	if (pyproc__gil_holder(pv->py, &pv->gil_holder))
		pv->gil_holder = 0;
	pv->gil_known = true;
}

/* The native view of the process, for --native and for naming routines; NULL on failure. */
static struct dwproc *native_view(struct bt_process *p, const struct bt_opts *o)
{
	struct bt_priv *pv = p->priv;

	if (!pv->sym)
		pv->sym = o->sym ? o->sym : (pv->own_sym = symbolizer__new());
	if (!pv->dp && pv->sym)
		pv->dp = dwproc__new(p->pid);
	return pv->sym ? pv->dp : NULL;
}

/*
 * Name the threads that have no name of their own (no threading name, and the OS name they
 * inherited from their creator) by the routine they run.
 */
static void name_routines(struct bt_process *p, const struct bt_opts *o)
{
	struct bt_priv *pv = p->priv;
	struct pthread_layout l;
	struct pthread_entry *pds = NULL;
	char main_comm[16] = "";
	pid_t ns_tid;
	bool same_ns;
	int npds = 0, i, k;

	for (i = 0; i < p->nthreads; i++)
		if (p->threads[i].tid == p->pid)
			snprintf(main_comm, sizeof(main_comm), "%s", p->threads[i].comm);
	for (i = 0; i < p->nthreads; i++)
		if (!p->threads[i].python && p->threads[i].tid != p->pid)
			break;
	if (i == p->nthreads)
		return; /* every thread is named already */
	if (pthread_layout__read(p->pid, &l) || !native_view(p, o) ||
	    pthread_layout__threads(p->pid, &l, &pds, &npds))
		goto cleanup;
	same_ns = procinfo_ns_pid(p->pid) == p->pid;
	for (i = 0; i < p->nthreads; i++) {
		struct bt_thread *t = &p->threads[i];

		if (t->python || t->tid == p->pid)
			continue;
		ns_tid = same_ns ? t->tid : procinfo_ns_pid(t->tid);
		for (k = 0; k < npds && pds[k].tid != ns_tid; k++)
			;
		if (k == npds || thread_routine__name(p->pid, &l, pv->dp, pv->sym, ns_tid,
						      pds[k].pd, t->routine, sizeof(t->routine)))
			continue;
		/* A name it set itself stays (the OS name differs from the main thread's). */
		if (!main_comm[0] || !strcmp(t->comm, main_comm))
			snprintf(t->name, sizeof(t->name), "%s", t->routine);
	}
cleanup:
	free(pds);
	pthread_layout__release(&l);
}

int backtrace__collect(pid_t pid, const struct bt_opts *o, struct bt_process **out, char *why,
		       size_t whysize)
{
	struct bt_scratch *sc = NULL;
	struct bt_process *p;
	struct bt_priv *pv;
	pid_t *tids = NULL;
	int ntids = 0, i, err;

	p = calloc(1, sizeof(*p));
	pv = calloc(1, sizeof(*pv));
	sc = calloc(1, sizeof(*sc));
	if (!p || !pv || !sc) {
		free(p);
		free(pv);
		free(sc);
		return -ENOMEM;
	}
	p->pid = pid;
	p->priv = pv;
	p->ppid = procinfo_ppid(pid);
	if (p->ppid < 0)
		p->ppid = -1;
	p->command = procinfo_cmdline(pid);
	pv->py = pyproc__open(pid);
	if (!pv->py && (errno == ESRCH || !procinfo_alive(pid))) {
		err = -ESRCH;
		explain(why, whysize, "no such process: %d", pid);
		goto fail;
	}
	if (!pv->py && (errno == EPERM || errno == EACCES)) {
		err = -EPERM;
		explain(why, whysize,
			"not allowed to read process %d: run probing as its owner or as root", pid);
		goto fail;
	}
	if (!pv->py && !o->native) {
		err = -ENOENT;
		explain(why, whysize,
			"process %d runs no CPython " PY_VERSIONS
			" interpreter that probing can read; "
			"use --native for its native stacks",
			pid);
		goto fail;
	}
	if (pv->py) {
		snprintf(p->python, sizeof(p->python), "%s", pyproc__version_str(pv->py));
		p->interpreter = strdup(pyproc__elf_path(pv->py));
		pyproc__refresh_threads(pv->py);
		if (o->waits)
			read_gil(pv);
	}
	if (o->native && !native_view(p, o)) {
		err = errno ? -errno : -ENOMEM;
		explain(why, whysize, "cannot read the memory maps of process %d: %s", pid,
			strerror(-err));
		goto fail;
	}
	err = list_tids(pid, &tids, &ntids);
	if (err) {
		explain(why, whysize, "cannot list the threads of process %d: %s", pid,
			err == -ESRCH ? "it exited" : strerror(-err));
		goto fail;
	}
	p->threads = calloc(ntids ? ntids : 1, sizeof(*p->threads));
	if (!p->threads) {
		err = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < ntids; i++) {
		p->threads[p->nthreads].tid = tids[i];
		err = collect_thread(p, &p->threads[p->nthreads], o, sc);
		p->nthreads++; /* what it allocated is freed with the others */
		if (err)
			goto fail;
	}
	if (o->routines)
		name_routines(p, o);
	free(tids);
	free(sc);
	*out = p;
	return 0;
fail:
	free(tids);
	free(sc);
	backtrace__free(p);
	return err;
}

void backtrace__free(struct bt_process *p)
{
	struct bt_priv *pv;
	int i, j;

	if (!p)
		return;
	pv = p->priv;
	for (i = 0; i < p->nthreads; i++) {
		struct bt_thread *t = &p->threads[i];

		for (j = 0; t->locals && j < t->nframes; j++)
			vars_clear(&t->locals[j]);
		free(t->locals);
		free(t->frames);
	}
	free(p->threads);
	if (pv) {
		pyproc__free(pv->py);
		dwproc__free(pv->dp);
		symbolizer__free(pv->own_sym);
		free(pv);
	}
	free(p->command);
	free(p->interpreter);
	free(p);
}

const char *backtrace__state_word(char s)
{
	switch (s) {
	case 'R':
		return "running";
	case 'S':
		return "sleeping";
	case 'D':
		return "in uninterruptible wait";
	case 'T':
	case 't':
		return "stopped";
	case 'Z':
		return "zombie";
	default:
		return "unknown state";
	}
}

char *backtrace__wait_str(const struct bt_thread *t, char *buf, size_t size)
{
	buf[0] = '\0';
	if (t->gil == BT_GIL_WAITS)
		snprintf(buf, size, "waiting for the GIL");
	else if (t->state != 'R' && t->state != '?' && t->wclass != WAIT_RUNNING &&
		 (t->wait_desc[0] || t->wclass != WAIT_OTHER))
		snprintf(buf, size, "in %s (%s)", t->wait_desc[0] ? t->wait_desc : "?",
			 wait_state_name(t->wclass));
	return buf;
}

static const char *basename_of(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path;
}

/* Print @text (escaped already), each line after the first indented by @indent. */
static void print_lines(FILE *f, const char *text, const char *indent)
{
	const char *nl;

	for (; (nl = strchr(text, '\n')); text = nl + 1)
		fprintf(f, "%.*s\n%s", (int)(nl - text), text, indent);
	fputs(text, f);
}

/*
 * "        name = repr", a multi-line repr (a tensor, say) indented under its name. Names and
 * reprs come from the target: escaped (escape.h), the repr's own line breaks kept.
 */
static void print_vars(const struct bt_vars *vs, FILE *f, struct strbuf *e)
{
	int i;

	for (i = 0; i < vs->n; i++) {
		fprintf(f, "        %s = ", text_str(&e[0], vs->v[i].name, 0));
		print_lines(f, text_str(&e[1], vs->v[i].repr, TEXT_LINES), "          ");
		fputc('\n', f);
	}
}

/* "    func (file:line)": the line "?" when the frame's line is not known. */
static void print_python_frame(const struct frame *fr, FILE *f, struct strbuf *e)
{
	fprintf(f, "    %s (%s:", text_str(&e[0], fr->qualname ? fr->qualname : fr->func, 0),
		text_str(&e[1], fr->file, 0));
	if (fr->line > 0)
		fprintf(f, "%d)\n", fr->line);
	else
		fputs("?)\n", f);
}

void backtrace__print_frame(const struct frame *fr, FILE *f)
{
	struct strbuf e[3] = {{0}};
	size_t i;

	/* Everything comes from the target: escaped (escape.h). */
	if (fr->kind == FRAME_PYTHON)
		print_python_frame(fr, f, e);
	else if (fr->file && fr->line)
		fprintf(f, "    %s (%s:%d) [%s]\n", text_str(&e[0], fr->func, 0),
			text_str(&e[1], basename_of(fr->file), 0), fr->line,
			text_str(&e[2], basename_of(fr->module), 0));
	else if (fr->func[0] == '[') /* already named after its module */
		fprintf(f, "    %s\n", text_str(&e[0], fr->func, 0));
	else
		fprintf(f, "    %s [%s]\n", text_str(&e[0], fr->func, 0),
			text_str(&e[1], basename_of(fr->module), 0));
	for (i = 0; i < ARRAY_SIZE(e); i++)
		sb_free(&e[i]);
}

void backtrace__print(const struct bt_process *p, FILE *f)
{
	const struct bt_thread *t;
	struct strbuf e[3] = {{0}};
	char wait[96];
	int i, j;

	/* Everything but the numbers comes from the target: escaped (escape.h). */
	fprintf(f, "Process %d: %s\n", p->pid, text_str(&e[0], p->command, 0));
	if (p->python[0])
		fprintf(f, "Python %s (%s)\n", text_str(&e[0], p->python, 0),
			text_str(&e[1], p->interpreter, 0));
	for (i = 0; i < p->nthreads; i++) {
		t = &p->threads[i];
		if (t->crash[0]) {
			/* Its state is its signal handler's, waiting: what matters is the crash. */
			fprintf(f, "\nThread %d \"%s\" crashed: %s", t->tid,
				text_str(&e[0], t->name, 0), text_str(&e[1], t->crash, 0));
			for (j = 0; j < t->nframes && t->frames[j].kind != FRAME_PYTHON; j++)
				;
			if (t->nframes)
				fprintf(f, " in %s",
					text_str(&e[0], t->frames[0].qualname ?: t->frames[0].func,
						 0));
			if (j > 0 && j < t->nframes) /* native code a Python function called */
				fprintf(f, ", called from %s (%s:%d)",
					text_str(&e[0], t->frames[j].qualname ?: t->frames[j].func,
						 0),
					text_str(&e[1], basename_of(t->frames[j].file), 0),
					t->frames[j].line);
			fputs("  <-- the crash\n", f);
		} else {
			fprintf(f, "\nThread %d \"%s\" (%s)%s%s%s%s\n", t->tid,
				text_str(&e[0], t->name, 0), backtrace__state_word(t->state),
				backtrace__wait_str(t, wait, sizeof(wait))[0] ? " " : "", wait,
				t->gil == BT_GIL_HOLDS ? ", holds the GIL" : "",
				t->nframes || t->error[0] ? "" : " (no Python frames)");
		}
		if (t->error[0]) {
			fputs("    [native stack unavailable: ", f);
			print_lines(f, text_str(&e[0], t->error, TEXT_LINES), "     ");
			fputs("]\n", f);
		}
		for (j = 0; j < t->nframes; j++) {
			backtrace__print_frame(&t->frames[j], f);
			if (t->locals && t->frames[j].kind == FRAME_PYTHON)
				print_vars(&t->locals[j], f, e);
		}
		if (t->truncated)
			fprintf(f, "    ... (more frames)\n");
	}
	for (i = 0; i < (int)ARRAY_SIZE(e); i++)
		sb_free(&e[i]);
}

int backtrace__json_rows(pid_t pid, struct strbuf *rows)
{
	struct bt_opts o = {.native = false, .py_depth = SAMPLER_MAX_PYDEPTH};
	struct bt_process *p = NULL;
	const struct bt_thread *t;
	int err, i, j, first = 1;

	err = backtrace__collect(pid, &o, &p, NULL, 0);
	if (err)
		return err;
	err = sb_puts(rows, "[");
	for (i = 0; !err && i < p->nthreads; i++) {
		t = &p->threads[i];
		for (j = 0; !err && j < t->nframes; j++) {
			const struct frame *fr = &t->frames[j];

			err = sb_puts(rows, first ? "[" : ",[");
			first = 0;
			err = err ?: jq_quote(rows, t->name);
			err = err ?: sb_printf(rows, ",%d,%d,", t->tid, j);
			err = err ?: jq_quote(rows, fr->func);
			err = err ?: sb_puts(rows, ",");
			err = err ?: jq_quote(rows, fr->file);
			/* An unknown line is NULL, as in the agent's rows and recordings. */
			err = err
				      ?: (fr->line > 0 ? sb_printf(rows, ",%d", fr->line)
						       : sb_puts(rows, ",null"));
			err = err ?: sb_printf(rows, ",\"%s\",", frame_kind_name(fr->kind));
			/* As the agent's rows: co_qualname (3.11+), else NULL. */
			err = err
				      ?: (fr->qualname ? jq_quote(rows, fr->qualname)
						       : sb_puts(rows, "null"));
			err = err ?: sb_puts(rows, "]");
		}
	}
	err = err ?: sb_puts(rows, "]");
	backtrace__free(p);
	return err;
}

/* The index in t->frames of the @depth-th Python frame (0 = innermost), or -1. */
static int python_frame_index(const struct bt_thread *t, long long depth)
{
	int i;

	for (i = 0; i < t->nframes; i++)
		if (t->frames[i].kind == FRAME_PYTHON && depth-- == 0)
			return i;
	return -1;
}

struct agent_locals_ctx {
	struct bt_process *p;
	int updated;
};

static int agent_local_row(char **v, int n, void *ctx)
{
	struct agent_locals_ctx *a = ctx;
	struct bt_thread *t = NULL;
	struct bt_vars *vs;
	long long tid, depth;
	int i, idx;

	if (n < 6 || !v[0] || !v[1] || !v[2] || !v[3])
		return 0; /* tid NULL: not a threading.Thread the agent could name */
	tid = strtoll(v[0], NULL, 10);
	depth = strtoll(v[1], NULL, 10);
	for (i = 0; i < a->p->nthreads && !t; i++)
		if (a->p->threads[i].tid == tid)
			t = &a->p->threads[i];
	if (!t || !t->locals)
		return 0;
	idx = python_frame_index(t, depth);
	if (idx < 0 || strcmp(t->frames[idx].func, v[2]))
		return 0; /* the thread moved on between the two reads: keep what was read */
	vs = &t->locals[idx];
	if (!vs->full) {
		vars_clear(vs);
		vs->full = true;
		a->updated++;
	}
	return vars_add(vs, v[3], v[4], v[5]);
}

/* The columns agent_local_row() reads, by name (the agent's reply lists its columns). */
static const char *const agent_locals_cols[] = {"tid", "depth", "func", "name", "type", "repr"};

struct column_ctx {
	int index; /* of the current column */
	int at[6]; /* each of agent_locals_cols: its index in a row, -1 if absent */
};

static int locate_column(char **v, int n, void *ctx)
{
	struct column_ctx *c = ctx;
	size_t i;

	for (i = 0; v[0] && i < ARRAY_SIZE(agent_locals_cols); i++)
		if (!strcmp(v[0], agent_locals_cols[i]))
			c->at[i] = c->index;
	c->index++;
	return 0;
}

int backtrace__use_agent_locals(struct bt_process *p, const char *rows_json)
{
	static const char *const self[] = {"$"};
	struct column_ctx cols = {.at = {-1, -1, -1, -1, -1, -1}};
	struct agent_locals_ctx a = {.p = p};
	char paths[6][24];
	const char *pp[6];
	size_t i;
	int err;

	err = jq_each(rows_json, "$.columns", self, 1, locate_column, &cols);
	if (err)
		return err;
	for (i = 0; i < ARRAY_SIZE(agent_locals_cols); i++) {
		if (cols.at[i] < 0)
			return -EPROTO; /* not the python.locals this reader knows */
		snprintf(paths[i], sizeof(paths[i]), "$[%d]", cols.at[i]);
		pp[i] = paths[i];
	}
	err = jq_each(rows_json, "$.rows", pp, 6, agent_local_row, &a);
	return err ? err : a.updated;
}
