// SPDX-License-Identifier: MIT
/*
 * crashsnap: a crash written as a backtrace snapshot (crashsnap.h). The layout of meta,
 * bt_processes, bt_threads, bt_frames, bt_stacks and bt_groups is the one of backtrace
 * snapshots (docs/sql.md), so that the same readers work on a crash file: it is written by
 * btsnap.c's writer (btjob__save_with), with the tables crash and bt_locals added.
 */
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/strpool.h"
#include "base/util.h"
#include "injector/agent_crash.h"
#include "live/btjob.h"
#include "live/crashsnap.h"

/* The crash's own tables, beside the snapshot's. */
static const char crash_schema[] =
	"CREATE TABLE crash(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" kind TEXT NOT NULL, signal INTEGER, signal_name TEXT, code INTEGER, addr INTEGER,"
	" exception TEXT, message TEXT, time REAL NOT NULL);\n";

/*
 * Where the stack of @t starts: for a thread in the agent's fatal-signal handler (the one that
 * crashed, and any other that crashed meanwhile and waits), below the signal frame
 * (__restore_rt above on_fatal, or any frame of the agent library): what is above it is the
 * handler waiting for us.
 */
static int first_frame(const struct bt_thread *t, const struct crash_info *ci)
{
	bool handler = false;
	int i;

	if (ci->nexc)
		return 0;
	for (i = 0; i < t->nframes && i < 24; i++) {
		const struct frame *fr = &t->frames[i];
		const char *base = fr->module ? strrchr(fr->module, '/') : NULL;

		if (fr->kind != FRAME_NATIVE)
			return 0;
		if (!strcmp(fr->func, "on_fatal") ||
		    (base && !strcmp(base + 1, "libprobing-agent.so")))
			handler = true;
		/* The signal frame: glibc's trampoline, or where an unwind that could not go
		 * through it stopped (the native frames below the signal are then lost, the
		 * Python ones are not). */
		else if (handler && (!strcmp(fr->func, "__restore_rt") ||
				     (!strcmp(fr->func, "[unknown]") && !fr->module)))
			return i + 1;
	}
	return 0;
}

/* The frames and locals of an exception's traceback, as read from crash.py's JSON. */
struct exc_stack {
	struct strpool *sp; /* owns the strings */
	struct frame *frames;
	struct bt_vars *locals; /* one per frame */
	int n, cap;
};

static int exc_local(char **v, int n, void *arg)
{
	struct exc_stack *x = arg;
	struct bt_vars *vs = &x->locals[x->n - 1];
	struct bt_var *var;

	(void)n;
	if ((size_t)vs->n == vs->cap) {
		size_t cap = vs->cap ? 2 * vs->cap : 8;
		struct bt_var *nv = realloc(vs->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		vs->v = nv;
		vs->cap = cap;
	}
	var = &vs->v[vs->n++];
	/* The pool's strings are never written through these pointers. */
	var->name = (char *)strpool__intern(x->sp, v[0] ? v[0] : "?");
	var->type = (char *)strpool__intern(x->sp, v[1]);
	var->repr = (char *)strpool__intern(x->sp, v[2]);
	return var->name && (!v[1] || var->type) && (!v[2] || var->repr) ? 0 : -ENOMEM;
}

static int exc_frame(char **v, int n, void *arg)
{
	static const char *const lpaths[] = {"$.name", "$.type", "$.repr"};
	struct exc_stack *x = arg;
	struct frame *f;

	(void)n;
	if (x->n == x->cap) {
		int cap = x->cap ? 2 * x->cap : 16;
		struct frame *nf = realloc(x->frames, cap * sizeof(*nf));
		struct bt_vars *nl;

		if (!nf)
			return -ENOMEM;
		x->frames = nf;
		nl = realloc(x->locals, cap * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		memset(nl + x->cap, 0, (cap - x->cap) * sizeof(*nl));
		x->locals = nl;
		x->cap = cap;
	}
	f = &x->frames[x->n++];
	f->kind = FRAME_PYTHON;
	f->func = strpool__intern(x->sp, v[0] ? v[0] : "[unknown]");
	f->qualname = strpool__intern(x->sp, v[1]);
	f->file = strpool__intern(x->sp, v[2]);
	f->line = v[3] ? strtol(v[3], NULL, 10) : 0;
	f->module = f->file;
	if (!f->func || (v[1] && !f->qualname) || (v[2] && !f->file))
		return -ENOMEM;
	/* Locals that are not a JSON list are left out, as the rest of the file is still good. */
	if (v[4] && jq_each(v[4], "$", lpaths, 3, exc_local, x) == -ENOMEM)
		return -ENOMEM;
	return 0;
}

static void exc_stack_free(struct exc_stack *x)
{
	int i;

	for (i = 0; x->locals && i < x->n; i++)
		free(x->locals[i].v);
	free(x->locals);
	free(x->frames);
	strpool__free(x->sp);
}

/*
 * The thread an exception was raised in as the file shows it: the traceback's frames and
 * locals, innermost first, instead of the stack it is at now (in the exception hook).
 */
static int exc_thread(struct bt_thread *t, const char *json, struct exc_stack *x)
{
	static const char *const paths[] = {"$.func", "$.qualname", "$.file", "$.line", "$.locals"};
	char *name = jq_text(json, "$.thread");
	int err;

	if (name)
		snprintf(t->name, sizeof(t->name), "%s", name);
	free(name);
	x->sp = strpool__new();
	if (!x->sp)
		return -ENOMEM;
	err = jq_each(json, "$.frames", paths, 5, exc_frame, x);
	if (err)
		return err == -ENOMEM ? err : -EPROTO;
	/* The traceback's frames are all Python, and complete. */
	t->python = true;
	t->truncated = false;
	t->error[0] = '\0';
	t->nframes = x->n;
	t->frames = x->frames;
	t->locals = x->locals;
	return 0;
}

/* One row of the table crash: the signal (@exc NULL), or the exception @exc. */
static int write_crash_row(sqlite3 *db, const struct bt_job_proc *jp, const struct crash_info *ci,
			   const struct crash_exc *exc)
{
	sqlite3_stmt *st = NULL;
	char *type = NULL, *msg = NULL;
	int err;

	if (sqlite3_prepare_v2(db,
			       "INSERT INTO crash VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
			       " ?11)",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	btjob__bind_text(st, 1, jp->id.host);
	sqlite3_bind_int(st, 2, jp->pid);
	sqlite3_bind_int(st, 3, exc ? exc->tid : ci->tid);
	btjob__bind_text(st, 4, exc ? "exception" : "signal");
	if (!exc) {
		sqlite3_bind_int(st, 5, ci->signal);
		btjob__bind_text(st, 6, crash_signal_name(ci->signal));
		sqlite3_bind_int(st, 7, ci->code);
		/* si_addr means something for a fault only, not for a signal sent by kill/abort. */
		if (ci->code > 0)
			sqlite3_bind_int64(st, 8, (sqlite3_int64)ci->addr);
	} else {
		type = jq_text(exc->json, "$.type");
		msg = jq_text(exc->json, "$.message");
		btjob__bind_text(st, 9, type);
		btjob__bind_text(st, 10, msg);
	}
	sqlite3_bind_double(st, 11, ci->time);
	err = btjob__step(st);
	sqlite3_finalize(st);
	free(type);
	free(msg);
	return err;
}

static int write_extra(sqlite3 *db, const struct bt_job *j, void *arg)
{
	const struct crash_info *ci = arg;
	int err = 0, i;

	if (!ci->nexc)
		err = write_crash_row(db, &j->procs[0], ci, NULL);
	for (i = 0; !err && i < ci->nexc; i++)
		err = write_crash_row(db, &j->procs[0], ci, &ci->exc[i]);
	return err; /* the locals: the snapshot's own bt_locals (btsnap.c) */
}

/* The exception raised in thread @tid (the latest given for it), or NULL. */
static int exc_of(const struct crash_info *ci, pid_t tid)
{
	int i;

	for (i = ci->nexc - 1; i >= 0; i--)
		if (ci->exc[i].tid == tid)
			return i;
	return -1;
}

int crashsnap__save(const struct bt_process *p, const struct crash_info *ci, const char *path)
{
	struct btjob_extra x = {.what = "crash file",
				.created_by = "probing crashdump",
				.schema = crash_schema,
				.write = write_extra,
				.arg = (void *)ci};
	struct bt_process cp = *p;
	struct bt_job_proc jp = {.pid = p->pid, .status = BT_OK, .bt = &cp};
	struct bt_job j = {.nprocs = 1, .procs = &jp, .time = ci->time, .native = true};
	struct exc_stack *exc = NULL;
	int err = 0, i, k, top;

	/* Its rank and job when it is part of one, and the host it sees. */
	jobinfo_read(p->pid, &jp.id);
	gethostname(j.host, sizeof(j.host) - 1);
	if (!jp.id.host[0])
		snprintf(jp.id.host, sizeof(jp.id.host), "%s", j.host);
	/* The threads as the file shows them: stacks start where the crash happened. */
	cp.threads = calloc(p->nthreads + ci->nexc + 1, sizeof(*cp.threads));
	exc = calloc(ci->nexc ? ci->nexc : 1, sizeof(*exc));
	if (!cp.threads || !exc)
		err = -ENOMEM;
	for (i = 0; !err && i < p->nthreads; i++) {
		struct bt_thread *t = &cp.threads[i];

		*t = p->threads[i];
		k = exc_of(ci, t->tid);
		if (k >= 0) {
			err = exc_thread(t, ci->exc[k].json, &exc[k]);
			continue;
		}
		top = first_frame(t, ci);
		t->frames += top;
		t->nframes -= top;
		if (t->locals)
			t->locals += top;
	}
	/* An exception whose thread ended before this capture (one of a burst, captured after
	 * its thread's own hook finished): its traceback only. */
	for (k = 0; !err && k < ci->nexc; k++) {
		struct bt_thread *t = &cp.threads[cp.nthreads];

		for (i = 0; i < cp.nthreads && cp.threads[i].tid != ci->exc[k].tid; i++)
			;
		if (i < cp.nthreads)
			continue;
		t->tid = ci->exc[k].tid;
		t->state = 'X';
		err = exc_thread(t, ci->exc[k].json, &exc[k]);
		snprintf(t->error, sizeof(t->error),
			 "the thread ended before the capture: its traceback only");
		cp.nthreads++;
	}
	if (err)
		pr_warn("cannot write the crash file: %s",
			err == -ENOMEM ? strerror(ENOMEM)
				       : "the exception's traceback is not valid");
	else
		err = btjob__save_with(&j, path, 0, &x);
	free(cp.threads);
	for (k = 0; exc && k < ci->nexc; k++)
		exc_stack_free(&exc[k]);
	free(exc);
	jobinfo_free(&jp.id);
	return err;
}

/* ---- summary ----------------------------------------------------------------------------- */

static const struct bt_thread *crashed_thread(const struct bt_process *p, pid_t tid)
{
	int i;

	for (i = 0; i < p->nthreads; i++)
		if (p->threads[i].tid == tid)
			return &p->threads[i];
	return NULL;
}

static void print_frame(FILE *f, struct strbuf *e, const struct frame *fr)
{
	if (fr->kind == FRAME_PYTHON) {
		fprintf(f, "    %s", text_str(e, fr->qualname ? fr->qualname : fr->func, 0));
		fprintf(f, " (%s:%d)\n", text_str(e, fr->file ? fr->file : "?", 0), fr->line);
	} else {
		fprintf(f, "    %s", text_str(e, fr->func, 0));
		fprintf(f, " [%s]\n", text_str(e, fr->module ? fr->module : "?", 0));
	}
}

/* The summary shows the locals of this many Python frames (innermost); the file has all. */
#define SUMMARY_LOCAL_FRAMES 5

struct sum_ctx {
	FILE *f;
	struct strbuf *e;
	int pyframes; /* Python frames printed so far */
};

static int sum_local(char **v, int n, void *arg)
{
	struct sum_ctx *s = arg;

	(void)n;
	fprintf(s->f, "        %s = ", text_str(s->e, v[0] ? v[0] : "?", 0));
	fprintf(s->f, "%s\n", text_str(s->e, v[2] ? v[2] : "?", 0));
	return 0;
}

static int sum_frame(char **v, int n, void *arg)
{
	static const char *const lpaths[] = {"$.name", "$.type", "$.repr"};
	struct sum_ctx *s = arg;

	(void)n;
	fprintf(s->f, "    %s", text_str(s->e, v[1] ? v[1] : v[0] ? v[0] : "?", 0));
	fprintf(s->f, " (%s:%s)\n", text_str(s->e, v[2] ? v[2] : "?", 0), v[3] ? v[3] : "?");
	if (v[4] && s->pyframes++ < SUMMARY_LOCAL_FRAMES)
		jq_each(v[4], "$", lpaths, 3, sum_local, s);
	return 0;
}

/* An exception's header and traceback (innermost first, with the locals of a few frames). */
static void print_exception(const struct bt_process *p, const struct crash_exc *x, FILE *f,
			    struct strbuf *e)
{
	static const char *const paths[] = {"$.func", "$.qualname", "$.file", "$.line", "$.locals"};
	char *type = jq_text(x->json, "$.type"), *msg = jq_text(x->json, "$.message");
	struct sum_ctx s = {f, e, 0};

	fprintf(f, "probing: uncaught exception %s", text_str(e, type ? type : "?", 0));
	fprintf(f, ": %s in thread %d", text_str(e, msg ? msg : "", 0), x->tid);
	fprintf(f, " of process %d (%s)\n", p->pid, text_str(e, p->command ?: "?", 0));
	fprintf(f, "  traceback, innermost first:\n");
	jq_each(x->json, "$.frames", paths, 5, sum_frame, &s);
	free(type);
	free(msg);
}

void crashsnap__summary(const struct bt_process *p, const struct crash_info *ci, const char *path,
			FILE *f)
{
	const struct bt_thread *t = crashed_thread(p, ci->tid);
	struct strbuf e = {0};
	int i, j, py = 0;

	for (i = 0; i < ci->nexc; i++)
		if (!ci->exc[i].reported)
			print_exception(p, &ci->exc[i], f, &e);
	if (ci->nexc > 1) {
		fprintf(f, "probing: %d uncaught exceptions at about the same time, in threads",
			ci->nexc);
		for (i = 0; i < ci->nexc; i++)
			fprintf(f, "%s %d", i ? "," : "", ci->exc[i].tid);
		fprintf(f, ": each has its row in the file\n");
	}
	if (!ci->nexc) {
		fprintf(f, "probing: fatal signal %s", crash_signal_name(ci->signal) ?: "?");
		if (ci->code > 0)
			fprintf(f, " (code %d, address 0x%lx)", ci->code, ci->addr);
		else
			fprintf(f, " (sent by kill, raise or abort)");
		fprintf(f, " in thread %d", ci->tid);
		fprintf(f, " of process %d (%s)\n", p->pid, text_str(&e, p->command ?: "?", 0));
	}
	if (!ci->nexc && t) {
		fprintf(f, "  thread %d (%s), innermost first:\n", t->tid,
			text_str(&e, t->name, 0));
		for (i = first_frame(t, ci); i < t->nframes; i++) {
			print_frame(f, &e, &t->frames[i]);
			if (t->frames[i].kind != FRAME_PYTHON || py++ >= SUMMARY_LOCAL_FRAMES)
				continue;
			for (j = 0; t->locals && j < t->locals[i].n; j++) {
				fprintf(f,
					"        %s = ", text_str(&e, t->locals[i].v[j].name, 0));
				fprintf(f, "%s\n", text_str(&e, t->locals[i].v[j].repr, 0));
			}
		}
		if (t->error[0])
			fprintf(f, "    (native stack: %s)\n", text_str(&e, t->error, 0));
	}
	for (i = 0; i < p->nthreads; i++) {
		const struct bt_thread *o = &p->threads[i];
		const struct frame *top = NULL;

		if (ci->nexc ? exc_of(ci, o->tid) >= 0 : o->tid == ci->tid)
			continue;
		for (j = 0; j < o->nframes && !top; j++)
			if (o->frames[j].kind == FRAME_PYTHON)
				top = &o->frames[j];
		if (!top && o->nframes)
			top = &o->frames[0];
		fprintf(f, "  thread %d (%s): ", o->tid, text_str(&e, o->name, 0));
		if (top && top->kind == FRAME_PYTHON) {
			fprintf(f, "%s",
				text_str(&e, top->qualname ? top->qualname : top->func, 0));
			fprintf(f, " (%s:%d)\n", text_str(&e, top->file ? top->file : "?", 0),
				top->line);
		} else
			fprintf(f, "%s\n", top ? text_str(&e, top->func, 0) : "(no frames)");
	}
	fprintf(f,
		"probing: every thread's stack and locals are in %s (SQLite: tables crash, "
		"bt_threads, bt_frames, bt_locals; view bt_stacks)\n",
		text_str(&e, path, 0));
	sb_free(&e);
}

/* ---- reading a crash file back --------------------------------------------------------- */

/* Move thread @t of process @p to the front (the crashed thread leads). */
static void to_front(struct bt_process *p, struct bt_thread *t)
{
	struct bt_thread tmp = *t;
	int k = t - p->threads;

	memmove(p->threads + 1, p->threads, k * sizeof(*p->threads));
	p->threads[0] = tmp;
}

static bool has_table(sqlite3 *db, const char *name)
{
	return sqlite3_table_column_metadata(db, "main", name, NULL, NULL, NULL, NULL, NULL,
					     NULL) == SQLITE_OK;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

/* Each crash row: its thread marked and put first. */
static int load_crashes(sqlite3 *db, struct bt_job *j)
{
	sqlite3_stmt *st = NULL;
	struct bt_thread *t;
	const char *kind, *sig, *exc, *msg;
	int rc, proc;

	if (sqlite3_prepare_v2(db,
			       "SELECT host, pid, tid, kind, signal_name, code, addr, exception,"
			       " message FROM crash ORDER BY rowid",
			       -1, &st, NULL) != SQLITE_OK)
		return -EPROTO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		t = btjob__thread(j, col_text(st, 0), sqlite3_column_int(st, 1),
				  sqlite3_column_int(st, 2), &proc);
		if (!t)
			continue;
		kind = col_text(st, 3);
		sig = col_text(st, 4);
		exc = col_text(st, 7);
		msg = col_text(st, 8);
		if (kind && !strcmp(kind, "exception"))
			snprintf(t->crash, sizeof(t->crash), "uncaught %s%s%s",
				 exc ? exc : "exception", msg && *msg ? ": " : "", msg ? msg : "");
		else if (sqlite3_column_int(st, 5) > 0)
			snprintf(t->crash, sizeof(t->crash), "%s (code %d, address 0x%llx)",
				 sig ? sig : "signal", sqlite3_column_int(st, 5),
				 (unsigned long long)sqlite3_column_int64(st, 6));
		else
			snprintf(t->crash, sizeof(t->crash), "%s (sent by kill, raise or abort)",
				 sig ? sig : "signal");
		to_front(j->procs[proc].bt, t);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -EPROTO;
}

int crashsnap__load(sqlite3 *db, const char *path, struct bt_job *j, bool locals)
{
	struct strbuf e = {0};
	int err;

	if (!has_table(db, "crash"))
		return 0;
	err = load_crashes(db, j);
	if (!err && locals)
		err = btjob__load_locals(db, j);
	err = err ?: btjob__group(j);
	if (err)
		pr_warn("cannot read the crash of %s: %s", text_str(&e, path, 0),
			err == -ENOMEM ? "out of memory"
				       : "its tables crash or bt_locals are not "
					 "as probing writes them");
	sb_free(&e);
	return err ?: 1;
}
