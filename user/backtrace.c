// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/user.h>

#include "backtrace.h"
#include "dwproc.h"
#include "inject.h"
#include "jsonq.h"
#include "log.h"
#include "procinfo.h"
#include "pymerge.h"
#include "pyproc.h"
#include "sampler.h"
#include "stackbuild.h"
#include "symbolize.h"
#include "util.h"

#define MAX_NATIVE 512
#define MAX_FRAMES (MAX_NATIVE * 4 + SAMPLER_MAX_PYDEPTH)

/* What owns the strings the frames point to. */
struct bt_priv {
	struct pyproc *py;
	struct dwproc *dp;
	struct symbolizer *sym;
};

/* Scratch for one thread. */
struct bt_scratch {
	struct py_frame_rec recs[SAMPLER_MAX_PYDEPTH];
	struct pym_frame py[SAMPLER_MAX_PYDEPTH];
	struct pym_frame nat[MAX_FRAMES];
	struct pym_frame merged[MAX_FRAMES];
	struct dwproc_frame pcs[MAX_NATIVE];
	uint64_t regs[DWREG_COUNT];
	unsigned char stack[SAMPLER_MAX_STACK];
};

static char thread_state(pid_t pid, pid_t tid)
{
	char path[64], *text, *p, c = '?';

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	text = read_file(path, 4096, NULL);
	if (!text)
		return c;
	p = strrchr(text, ')');
	if (p && p[1] == ' ')
		c = p[2];
	free(text);
	return c;
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

/* Python frames of @th into sc->py; the thread's records are in sc->recs. */
static int python_frames(struct pyproc *py, const struct pythread *th, unsigned int depth,
			 struct bt_scratch *sc, bool *truncated)
{
	unsigned int partial = 0;
	int n, i;

	if (!py || !th)
		return 0;
	n = pyproc__walk(py, th->tstate, sc->recs, depth, truncated, &partial);
	if (n < 0)
		n = (int)partial; /* the frames read before a racing change are still good */
	for (i = 0; i < n; i++) {
		pyproc__resolve(py, &sc->recs[i], &sc->py[i].f);
		sc->py[i].stable = NULL;
		sc->py[i].flags = sc->recs[i].meta & PYF_ENTRY;
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
	int np = 0, nn = 0, n, i, err;

	t->python = th != NULL;
	if (th && th->name && th->name[0])
		snprintf(t->name, sizeof(t->name), "%s", th->name);
	else
		procinfo_thread_name(p->pid, t->tid, t->name, sizeof(t->name));
	t->state = thread_state(p->pid, t->tid);

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
			np = python_frames(pv->py, th, o->py_depth, sc, &t->truncated);
			inject__release(hold);
			held = true;
			nn = native_frames(pv, t->tid, stack_len, sc);
		}
	}
	if (!held)
		np = python_frames(pv->py, th, o->py_depth, sc, &t->truncated);
	n = pymerge(sc->nat, nn, sc->py, np, sc->merged, MAX_FRAMES);
	t->frames = calloc(n ? n : 1, sizeof(*t->frames));
	if (!t->frames)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		t->frames[i] = sc->merged[i].f;
	t->nframes = n;
	return 0;
}

int backtrace__collect(pid_t pid, const struct bt_opts *o, struct bt_process **out)
{
	struct bt_scratch *sc = NULL;
	struct bt_process *p;
	struct bt_priv *pv;
	pid_t *tids = NULL;
	int ntids = 0, i, err;

	p = calloc(1, sizeof(*p));
	pv = calloc(1, sizeof(*pv));
	sc = malloc(sizeof(*sc));
	if (!p || !pv || !sc) {
		free(p);
		free(pv);
		free(sc);
		return -ENOMEM;
	}
	p->pid = pid;
	p->priv = pv;
	p->command = procinfo_cmdline(pid);
	pv->py = pyproc__open(pid);
	if (!pv->py && errno == ESRCH) {
		err = -ESRCH;
		pr_warn("no such process: %d", pid);
		goto fail;
	}
	if (!pv->py && !o->native) {
		err = -ENOENT;
		pr_warn("process %d runs no CPython 3.8-3.13 interpreter that probing can read; "
			"use --native for its native stacks",
			pid);
		goto fail;
	}
	if (pv->py) {
		snprintf(p->python, sizeof(p->python), "%s", pyproc__version_str(pv->py));
		p->interpreter = strdup(pyproc__elf_path(pv->py));
		pyproc__refresh_threads(pv->py);
	}
	if (o->native) {
		pv->sym = symbolizer__new();
		pv->dp = dwproc__new(pid);
		if (!pv->sym || !pv->dp) {
			err = -errno;
			pr_warn("cannot read the memory maps of process %d: %s", pid,
				strerror(errno));
			goto fail;
		}
	}
	err = list_tids(pid, &tids, &ntids);
	if (err) {
		pr_warn("cannot list the threads of process %d: %s", pid, strerror(-err));
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
		if (err)
			goto fail;
		p->nthreads++;
	}
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
	int i;

	if (!p)
		return;
	pv = p->priv;
	for (i = 0; i < p->nthreads; i++)
		free(p->threads[i].frames);
	free(p->threads);
	if (pv) {
		pyproc__free(pv->py);
		dwproc__free(pv->dp);
		symbolizer__free(pv->sym);
		free(pv);
	}
	free(p->command);
	free(p->interpreter);
	free(p);
}

static const char *state_word(char s)
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

static const char *basename_of(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path;
}

void backtrace__print(const struct bt_process *p, FILE *f)
{
	const struct bt_thread *t;
	const struct frame *fr;
	int i, j;

	fprintf(f, "Process %d: %s\n", p->pid, p->command ? p->command : "?");
	if (p->python[0])
		fprintf(f, "Python %s (%s)\n", p->python, p->interpreter);
	for (i = 0; i < p->nthreads; i++) {
		t = &p->threads[i];
		fprintf(f, "\nThread %d \"%s\" (%s)%s\n", t->tid, t->name, state_word(t->state),
			t->nframes || t->error[0] ? "" : " (no Python frames)");
		if (t->error[0])
			fprintf(f, "    [native stack unavailable: %s]\n", t->error);
		for (j = 0; j < t->nframes; j++) {
			fr = &t->frames[j];
			if (fr->kind == FRAME_PYTHON)
				fprintf(f, "    %s (%s:%d)\n",
					fr->qualname ? fr->qualname : fr->func,
					fr->file ? fr->file : "?", fr->line);
			else if (fr->file && fr->line)
				fprintf(f, "    %s (%s:%d) [%s]\n", fr->func, basename_of(fr->file),
					fr->line, basename_of(fr->module) ?: "?");
			else if (fr->func[0] == '[') /* already named after its module */
				fprintf(f, "    %s\n", fr->func);
			else
				fprintf(f, "    %s [%s]\n", fr->func,
					fr->module ? basename_of(fr->module) : "?");
		}
		if (t->truncated)
			fprintf(f, "    ... (more frames)\n");
	}
}

int backtrace__json_rows(pid_t pid, struct strbuf *rows)
{
	struct bt_opts o = {.native = false, .py_depth = SAMPLER_MAX_PYDEPTH};
	struct bt_process *p = NULL;
	const struct bt_thread *t;
	int err, i, j, first = 1;

	err = backtrace__collect(pid, &o, &p);
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
			err = err
				      ?: sb_printf(rows, ",%d,\"%s\"]", fr->line,
						   frame_kind_name(fr->kind));
		}
	}
	err = err ?: sb_puts(rows, "]");
	backtrace__free(p);
	return err;
}
