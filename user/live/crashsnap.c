// SPDX-License-Identifier: MIT
/*
 * crashsnap: a crash written as a backtrace snapshot (crashsnap.h). The layout of meta,
 * bt_processes, bt_threads, bt_frames, bt_stacks and bt_groups is the one of backtrace
 * snapshots (docs/sql.md), so that the same readers work on a crash file; crash and bt_locals
 * are added. Keep the schema in step with btsnap.c's (branch job-live, docs/sql.md "Backtrace
 * snapshots"): one writer of both would be better, once both are on main.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/outfile.h"
#include "base/util.h"
#include "live/crashsnap.h"

static const char schema[] =
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value);\n"
	"CREATE TABLE bt_processes(host TEXT NOT NULL, pid INTEGER NOT NULL, ppid INTEGER,"
	" rank INTEGER, local_rank INTEGER, world_size INTEGER, group_rank INTEGER, job_id TEXT,"
	" launcher TEXT, command TEXT, python_version TEXT, status TEXT NOT NULL, error TEXT,"
	" odd_one_out INTEGER NOT NULL, PRIMARY KEY(host, pid));\n"
	"CREATE TABLE bt_threads(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" name TEXT, comm TEXT, routine TEXT, state TEXT, wait TEXT, call TEXT, wchan TEXT,"
	" gil TEXT, python INTEGER NOT NULL, truncated INTEGER NOT NULL, error TEXT,"
	" PRIMARY KEY(host, pid, tid));\n"
	"CREATE TABLE bt_frames(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" depth INTEGER NOT NULL, kind TEXT NOT NULL, func TEXT NOT NULL, qualname TEXT,"
	" file TEXT, lineno INTEGER, module TEXT, PRIMARY KEY(host, pid, tid, depth))"
	" WITHOUT ROWID;\n"
	"CREATE VIEW bt_stacks AS SELECT t.host, t.pid, p.rank, t.tid, t.name AS thread,"
	" t.state, t.wait, t.call,"
	" (SELECT group_concat(CASE WHEN f.kind = 'python' THEN coalesce(f.qualname, f.func) ||"
	" ' (' || coalesce(f.file, '?') || ':' || coalesce(f.lineno, '?') || ')' ELSE f.func END,"
	" ' <- ') FROM bt_frames f WHERE f.host = t.host AND f.pid = t.pid AND f.tid = t.tid)"
	" AS stack FROM bt_threads t JOIN bt_processes p ON p.host = t.host AND p.pid = t.pid;\n"
	"CREATE VIEW bt_groups AS SELECT coalesce(stack, '(no frames) ' || thread) AS stack,"
	" count(*) AS threads, count(DISTINCT host || ':' || pid) AS processes,"
	" group_concat(DISTINCT rank) AS ranks FROM bt_stacks GROUP BY 1 ORDER BY threads DESC;\n"
	/* The crash's own tables. */
	"CREATE TABLE crash(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" kind TEXT NOT NULL, signal INTEGER, signal_name TEXT, code INTEGER, addr INTEGER,"
	" exception TEXT, message TEXT, time REAL NOT NULL);\n"
	"CREATE TABLE bt_locals(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" depth INTEGER NOT NULL, name TEXT NOT NULL, type TEXT, repr TEXT);\n";

struct writer {
	sqlite3 *db;
	sqlite3_stmt *thread, *frame, *local;
	const char *host;
	pid_t pid;
};

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, i);
}

static int step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

static const char *state_name(char s)
{
	switch (s) {
	case 'R':
		return "running";
	case 'S':
		return "sleeping";
	case 'D':
		return "disk wait";
	case 'T':
	case 't':
		return "stopped";
	case 'Z':
		return "zombie";
	case 'I':
		return "idle";
	case 'X':
		return "dead";
	}
	return "unknown";
}

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV:
		return "SIGSEGV";
	case SIGBUS:
		return "SIGBUS";
	case SIGABRT:
		return "SIGABRT";
	case SIGFPE:
		return "SIGFPE";
	case SIGILL:
		return "SIGILL";
	}
	return NULL;
}

static int write_frame(struct writer *w, pid_t tid, int depth, const char *kind, const char *func,
		       const char *qualname, const char *file, long line, const char *module)
{
	bind_text(w->frame, 1, w->host);
	sqlite3_bind_int(w->frame, 2, w->pid);
	sqlite3_bind_int(w->frame, 3, tid);
	sqlite3_bind_int(w->frame, 4, depth);
	bind_text(w->frame, 5, kind);
	bind_text(w->frame, 6, func ? func : "[unknown]");
	bind_text(w->frame, 7, qualname);
	bind_text(w->frame, 8, file);
	if (line > 0)
		sqlite3_bind_int64(w->frame, 9, line);
	bind_text(w->frame, 10, module);
	return step(w->frame);
}

static int write_local(struct writer *w, pid_t tid, int depth, const char *name, const char *type,
		       const char *repr)
{
	bind_text(w->local, 1, w->host);
	sqlite3_bind_int(w->local, 2, w->pid);
	sqlite3_bind_int(w->local, 3, tid);
	sqlite3_bind_int(w->local, 4, depth);
	bind_text(w->local, 5, name ? name : "?");
	bind_text(w->local, 6, type);
	bind_text(w->local, 7, repr);
	return step(w->local);
}

static int write_thread_row(struct writer *w, const struct bt_thread *t, const char *name,
			    bool python, bool truncated, const char *error)
{
	bind_text(w->thread, 1, w->host);
	sqlite3_bind_int(w->thread, 2, w->pid);
	sqlite3_bind_int(w->thread, 3, t->tid);
	bind_text(w->thread, 4, name);
	bind_text(w->thread, 5, state_name(t->state));
	sqlite3_bind_int(w->thread, 6, python);
	sqlite3_bind_int(w->thread, 7, truncated);
	bind_text(w->thread, 8, error && error[0] ? error : NULL);
	return step(w->thread);
}

/*
 * Where the stack of @t starts: for a thread in the agent's fatal-signal handler (the one that
 * crashed, and any other that crashed meanwhile and waits), below the signal frame
 * (__restore_rt above on_fatal): what is above it is the handler waiting for us.
 */
static int first_frame(const struct bt_thread *t, const struct crash_info *ci)
{
	bool handler = false;
	int i;

	if (ci->exc_json)
		return 0;
	for (i = 0; i < t->nframes && i < 24; i++) {
		if (t->frames[i].kind != FRAME_NATIVE)
			return 0;
		if (!strcmp(t->frames[i].func, "on_fatal"))
			handler = true;
		else if (handler && !strcmp(t->frames[i].func, "__restore_rt"))
			return i + 1;
	}
	return 0;
}

/* A thread as read from outside: its merged stack, innermost first, and its locals. */
static int write_thread(struct writer *w, const struct bt_thread *t, const struct crash_info *ci)
{
	int i, j, err, top = first_frame(t, ci);

	err = write_thread_row(w, t, t->name, t->python, t->truncated, t->error);
	for (i = top; !err && i < t->nframes; i++) {
		const struct frame *f = &t->frames[i];

		err = write_frame(w, t->tid, i - top, frame_kind_name(f->kind), f->func,
				  f->qualname, f->file, f->line, f->module);
		if (f->kind != FRAME_PYTHON)
			continue;
		for (j = 0; !err && t->locals && j < t->locals[i].n; j++)
			err = write_local(w, t->tid, i - top, t->locals[i].v[j].name,
					  t->locals[i].v[j].type, t->locals[i].v[j].repr);
	}
	return err;
}

struct exc_ctx {
	struct writer *w;
	pid_t tid;
	int depth;
	int err;
};

static int exc_local(char **v, int n, void *arg)
{
	struct exc_ctx *x = arg;

	(void)n;
	x->err = write_local(x->w, x->tid, x->depth, v[0], v[1], v[2]);
	return x->err;
}

static int exc_frame(char **v, int n, void *arg)
{
	static const char *const lpaths[] = {"$.name", "$.type", "$.repr"};
	struct exc_ctx *x = arg;
	long line = v[3] ? strtol(v[3], NULL, 10) : 0;

	(void)n;
	x->err = write_frame(x->w, x->tid, x->depth, "python", v[0], v[1], v[2], line, v[2]);
	if (!x->err && v[4])
		jq_each(v[4], "$", lpaths, 3, exc_local, x);
	x->depth++;
	return x->err;
}

/* The thread an exception was raised in: the traceback's frames, innermost first. */
static int write_exc_thread(struct writer *w, const struct bt_thread *t, const char *json)
{
	static const char *const paths[] = {"$.func", "$.qualname", "$.file", "$.line", "$.locals"};
	struct exc_ctx x = {.w = w, .tid = t->tid};
	char *name = jq_text(json, "$.thread");
	int err;

	err = write_thread_row(w, t, name ? name : t->name, true, false, NULL);
	free(name);
	if (!err && jq_each(json, "$.frames", paths, 5, exc_frame, &x))
		err = x.err ? x.err : -EPROTO;
	return err;
}

static int write_meta(sqlite3 *db, const struct crash_info *ci, const char *host)
{
	sqlite3_stmt *st = NULL;
	const char *keys[] = {"kind",	"format",     "host",		"time",
			      "native", "created_by", "probing_version"};
	size_t i;
	int err = 0;

	if (sqlite3_prepare_v2(db, "INSERT INTO meta VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	for (i = 0; !err && i < ARRAY_SIZE(keys); i++) {
		sqlite3_bind_text(st, 1, keys[i], -1, SQLITE_STATIC);
		if (i == 0)
			sqlite3_bind_text(st, 2, "backtrace", -1, SQLITE_STATIC);
		else if (i == 1)
			sqlite3_bind_int(st, 2, 1);
		else if (i == 2)
			sqlite3_bind_text(st, 2, host, -1, SQLITE_STATIC);
		else if (i == 3)
			sqlite3_bind_double(st, 2, ci->time);
		else if (i == 4)
			sqlite3_bind_int(st, 2, 1);
		else if (i == 5)
			sqlite3_bind_text(st, 2, "probing crashdump", -1, SQLITE_STATIC);
		else
			sqlite3_bind_text(st, 2, PROBING_VERSION, -1, SQLITE_STATIC);
		err = step(st);
	}
	sqlite3_finalize(st);
	return err;
}

static int write_crash_row(struct writer *w, const struct crash_info *ci)
{
	sqlite3_stmt *st = NULL;
	char *type = NULL, *msg = NULL;
	int err;

	if (sqlite3_prepare_v2(w->db,
			       "INSERT INTO crash VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
			       " ?11)",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	bind_text(st, 1, w->host);
	sqlite3_bind_int(st, 2, w->pid);
	sqlite3_bind_int(st, 3, ci->tid);
	bind_text(st, 4, ci->exc_json ? "exception" : "signal");
	if (!ci->exc_json) {
		sqlite3_bind_int(st, 5, ci->signal);
		bind_text(st, 6, signal_name(ci->signal));
		sqlite3_bind_int(st, 7, ci->code);
		/* si_addr means something for a fault only, not for a signal sent by kill/abort. */
		if (ci->code > 0)
			sqlite3_bind_int64(st, 8, (sqlite3_int64)ci->addr);
	} else {
		type = jq_text(ci->exc_json, "$.type");
		msg = jq_text(ci->exc_json, "$.message");
		bind_text(st, 9, type);
		bind_text(st, 10, msg);
	}
	sqlite3_bind_double(st, 11, ci->time);
	err = step(st);
	sqlite3_finalize(st);
	free(type);
	free(msg);
	return err;
}

static int write_db(const char *tmp, const struct bt_process *p, const struct crash_info *ci,
		    const char *host)
{
	struct writer w = {.host = host, .pid = p->pid};
	sqlite3_stmt *proc = NULL;
	int err = -EIO, i;

	if (sqlite3_open_v2(tmp, &w.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
	    SQLITE_OK)
		goto out;
	if (sqlite3_exec(w.db, schema, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_exec(w.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(
		    w.db,
		    "INSERT INTO bt_processes(host, pid, command, python_version, status,"
		    " odd_one_out) VALUES (?1, ?2, ?3, ?4, 'ok', 0)",
		    -1, &proc, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db,
			       "INSERT INTO bt_threads(host, pid, tid, name, state, python,"
			       " truncated, error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			       -1, &w.thread, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db,
			       "INSERT INTO bt_frames VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
			       " ?10)",
			       -1, &w.frame, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db, "INSERT INTO bt_locals VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			       -1, &w.local, NULL) != SQLITE_OK)
		goto out;
	err = write_meta(w.db, ci, host);
	bind_text(proc, 1, host);
	sqlite3_bind_int(proc, 2, p->pid);
	bind_text(proc, 3, p->command);
	bind_text(proc, 4, p->python[0] ? p->python : NULL);
	err = err ?: step(proc);
	err = err ?: write_crash_row(&w, ci);
	for (i = 0; !err && i < p->nthreads; i++) {
		const struct bt_thread *t = &p->threads[i];

		if (ci->exc_json && t->tid == ci->tid)
			err = write_exc_thread(&w, t, ci->exc_json);
		else
			err = write_thread(&w, t, ci);
	}
	if (!err && sqlite3_exec(w.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		err = -EIO;
out:
	if (err)
		pr_warn("cannot write the crash file: %s",
			w.db ? sqlite3_errmsg(w.db) : "out of memory");
	sqlite3_finalize(proc);
	sqlite3_finalize(w.thread);
	sqlite3_finalize(w.frame);
	sqlite3_finalize(w.local);
	if (sqlite3_close(w.db) != SQLITE_OK && !err)
		err = -EIO;
	return err;
}

int crashsnap__save(const struct bt_process *p, const struct crash_info *ci, const char *path)
{
	struct outpath op = {0};
	char *tmp = NULL, *dir = NULL, *base = NULL, host[256] = "";
	mode_t mask;
	int fd = -1, err;

	err = outpath__check(path, 0, &op);
	if (err)
		return err;
	if (op.in_place) {
		pr_warn("a crash file is a SQLite file: %s is not one", path);
		err = -EINVAL;
		goto out;
	}
	dir = strdup(op.dest);
	base = strdup(op.dest);
	if (!dir || !base || asprintf(&tmp, "%s/.%s.XXXXXX", dirname(dir), basename(base)) < 0) {
		tmp = NULL;
		err = -ENOMEM;
		goto out;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		free(tmp);
		tmp = NULL;
		goto out;
	}
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask))
		pr_debug("%s: cannot set the mode: %s", tmp, strerror(errno));
	close(fd);
	gethostname(host, sizeof(host) - 1);
	err = write_db(tmp, p, ci, host);
	err = err ?: outpath__replace(&op, tmp, 0);
	if (err)
		unlink(tmp);
out:
	free(tmp);
	free(dir);
	free(base);
	outpath__release(&op);
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

void crashsnap__summary(const struct bt_process *p, const struct crash_info *ci, const char *path,
			FILE *f)
{
	static const char *const paths[] = {"$.func", "$.qualname", "$.file", "$.line", "$.locals"};
	const struct bt_thread *t = crashed_thread(p, ci->tid);
	struct strbuf e = {0};
	struct sum_ctx s = {f, &e, 0};
	int i, j, py = 0;

	if (ci->exc_json) {
		char *type = jq_text(ci->exc_json, "$.type"),
		     *msg = jq_text(ci->exc_json, "$.message");

		fprintf(f, "probing: uncaught exception %s", text_str(&e, type ? type : "?", 0));
		fprintf(f, ": %s in thread %d", text_str(&e, msg ? msg : "", 0), ci->tid);
		free(type);
		free(msg);
	} else {
		fprintf(f, "probing: fatal signal %s", signal_name(ci->signal) ?: "?");
		if (ci->code > 0)
			fprintf(f, " (code %d, address 0x%lx)", ci->code, ci->addr);
		else
			fprintf(f, " (sent by kill, raise or abort)");
		fprintf(f, " in thread %d", ci->tid);
	}
	fprintf(f, " of process %d (%s)\n", p->pid, text_str(&e, p->command ?: "?", 0));
	if (ci->exc_json) {
		fprintf(f, "  traceback, innermost first:\n");
		jq_each(ci->exc_json, "$.frames", paths, 5, sum_frame, &s);
	} else if (t) {
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

		if (o->tid == ci->tid)
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
