// SPDX-License-Identifier: MIT
/*
 * btsnap: a job's backtrace as a snapshot file (SQLite; docs/sql.md "Backtrace snapshots"),
 * written and read back. Tables are keyed by (host, pid): snapshots taken on several nodes
 * can be put together without their pids colliding.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/log.h"
#include "base/outfile.h"
#include "base/bmap.h"
#include "base/strpool.h"
#include "base/util.h"
#include "live/btjob.h"
#include "live/btjob_int.h"

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
	/* The local variables of Python frames, where they were read (--locals, a watch's
	 * report, a crash file): the frame's depth in bt_frames. */
	"CREATE TABLE bt_locals(host TEXT NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
	" depth INTEGER NOT NULL, name TEXT NOT NULL, type TEXT, repr TEXT);\n"
	/* Each thread's stack as one line, leaf first (bt_frames is stored in key order). */
	"CREATE VIEW bt_stacks AS SELECT t.host, t.pid, p.rank, t.tid, t.name AS thread,"
	" t.state, t.wait, t.call,"
	" (SELECT group_concat(CASE WHEN f.kind = 'python' THEN coalesce(f.qualname, f.func) ||"
	" ' (' || coalesce(f.file, '?') || ':' || coalesce(f.lineno, '?') || ')' ELSE f.func END,"
	" ' <- ') FROM bt_frames f WHERE f.host = t.host AND f.pid = t.pid AND f.tid = t.tid)"
	" AS stack FROM bt_threads t JOIN bt_processes p ON p.host = t.host AND p.pid = t.pid;\n"
	"CREATE VIEW bt_groups AS SELECT coalesce(stack, '(no frames) ' || thread) AS stack,"
	" count(*) AS threads, count(DISTINCT host || ':' || pid) AS processes,"
	" group_concat(DISTINCT rank) AS ranks FROM bt_stacks GROUP BY 1 ORDER BY threads DESC;\n";

int btjob__view_sql(const char *name, struct strbuf *sql)
{
	return sql_view_def(schema, name, sql);
}

/* ---- writing --------------------------------------------------------------------------- */

struct writer {
	sqlite3 *db;
	sqlite3_stmt *proc, *thread, *frame, *local;
};

void btjob__bind_text(sqlite3_stmt *st, int i, const char *s)
{
	struct strbuf sb = {0};
	const char *v = utf8_text(&sb, s);

	if (v) /* else out of memory for the copy: @s as it is */
		s = v;
	if (s)
		sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, i);
	sb_free(&sb);
}

static void bind_int(sqlite3_stmt *st, int i, long long v, bool known)
{
	if (known)
		sqlite3_bind_int64(st, i, v);
	else
		sqlite3_bind_null(st, i);
}

int btjob__step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

static int write_thread(struct writer *w, const struct bt_job_proc *p, const struct bt_thread *t)
{
	const char *host = p->id.host;
	bool waits = t->state != 'R' && t->state != '?' && t->wclass != WAIT_RUNNING;
	int i, err;

	btjob__bind_text(w->thread, 1, host);
	sqlite3_bind_int(w->thread, 2, p->pid);
	sqlite3_bind_int(w->thread, 3, t->tid);
	btjob__bind_text(w->thread, 4, t->name);
	btjob__bind_text(w->thread, 5, t->comm[0] ? t->comm : NULL);
	btjob__bind_text(w->thread, 6, t->routine[0] ? t->routine : NULL);
	btjob__bind_text(w->thread, 7, btjob__state_name(t->state));
	btjob__bind_text(w->thread, 8,
			 t->state == 'R' ? "running"
			 : waits	 ? wait_state_name(t->wclass)
					 : NULL);
	btjob__bind_text(w->thread, 9, waits && t->wait_desc[0] ? t->wait_desc : NULL);
	btjob__bind_text(w->thread, 10, t->wait.wchan[0] ? t->wait.wchan : NULL);
	btjob__bind_text(w->thread, 11, btjob__gil_name(t->gil));
	sqlite3_bind_int(w->thread, 12, t->python);
	sqlite3_bind_int(w->thread, 13, t->truncated);
	btjob__bind_text(w->thread, 14, t->error[0] ? t->error : NULL);
	err = btjob__step(w->thread);
	for (i = 0; !err && i < t->nframes; i++) {
		const struct frame *f = &t->frames[i];

		btjob__bind_text(w->frame, 1, host);
		sqlite3_bind_int(w->frame, 2, p->pid);
		sqlite3_bind_int(w->frame, 3, t->tid);
		sqlite3_bind_int(w->frame, 4, i);
		btjob__bind_text(w->frame, 5, frame_kind_name(f->kind));
		btjob__bind_text(w->frame, 6, f->func);
		btjob__bind_text(w->frame, 7, f->qualname);
		btjob__bind_text(w->frame, 8, f->file);
		bind_int(w->frame, 9, f->line, f->line > 0);
		btjob__bind_text(w->frame, 10, f->module);
		err = btjob__step(w->frame);
		for (int k = 0; !err && t->locals && f->kind == FRAME_PYTHON && k < t->locals[i].n;
		     k++) {
			const struct bt_var *v = &t->locals[i].v[k];

			btjob__bind_text(w->local, 1, host);
			sqlite3_bind_int(w->local, 2, p->pid);
			sqlite3_bind_int(w->local, 3, t->tid);
			sqlite3_bind_int(w->local, 4, i);
			btjob__bind_text(w->local, 5, v->name ? v->name : "?");
			btjob__bind_text(w->local, 6, v->type);
			btjob__bind_text(w->local, 7, v->repr);
			err = btjob__step(w->local);
		}
	}
	return err;
}

static int write_proc(struct writer *w, const struct bt_job_proc *p)
{
	const struct job_identity *id = &p->id;
	int i, err;

	btjob__bind_text(w->proc, 1, id->host);
	sqlite3_bind_int(w->proc, 2, p->pid);
	bind_int(w->proc, 3, p->bt ? p->bt->ppid : 0, p->bt && p->bt->ppid > 0);
	bind_int(w->proc, 4, id->rank, id->rank >= 0);
	bind_int(w->proc, 5, id->local_rank, id->local_rank >= 0);
	bind_int(w->proc, 6, id->world_size, id->world_size >= 0);
	bind_int(w->proc, 7, id->group_rank, id->group_rank >= 0);
	btjob__bind_text(w->proc, 8, id->job_id);
	btjob__bind_text(w->proc, 9, id->launcher);
	btjob__bind_text(w->proc, 10, p->bt ? p->bt->command : NULL);
	btjob__bind_text(w->proc, 11, p->bt && p->bt->python[0] ? p->bt->python : NULL);
	btjob__bind_text(w->proc, 12, btjob__status_name(p->status));
	btjob__bind_text(w->proc, 13, p->status != BT_OK ? p->error : NULL);
	sqlite3_bind_int(w->proc, 14, p->odd);
	err = btjob__step(w->proc);
	for (i = 0; !err && p->bt && i < p->bt->nthreads; i++)
		err = write_thread(w, p, &p->bt->threads[i]);
	return err;
}

static int write_meta(sqlite3 *db, const struct bt_job *j, const char *created_by)
{
	sqlite3_stmt *st = NULL;
	int err = 0;
	const char *kv[][2] = {
		{"kind", BTJOB_KIND},
		{"format", NULL},
		{"host", j->host},
		{"time", NULL},
		{"native", j->native ? "1" : "0"},
		{"created_by", created_by},
		{"probing_version", PROBING_VERSION},
	};
	size_t i;

	if (sqlite3_prepare_v2(db, "INSERT INTO meta VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	for (i = 0; !err && i < ARRAY_SIZE(kv); i++) {
		sqlite3_bind_text(st, 1, kv[i][0], -1, SQLITE_STATIC);
		if (!strcmp(kv[i][0], "format"))
			sqlite3_bind_int(st, 2, BTJOB_FORMAT);
		else if (!strcmp(kv[i][0], "time"))
			sqlite3_bind_double(st, 2, j->time);
		else if (!strcmp(kv[i][0], "native"))
			sqlite3_bind_int(st, 2, j->native);
		else
			sqlite3_bind_text(st, 2, kv[i][1], -1, SQLITE_STATIC);
		err = btjob__step(st);
	}
	sqlite3_finalize(st);
	return err;
}

static int write_snapshot(const char *tmp, const struct bt_job *j, const struct btjob_extra *x)
{
	struct writer w = {0};
	int err = -EIO, i;

	if (sqlite3_open_v2(tmp, &w.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
	    SQLITE_OK)
		goto cleanup;
	if (sqlite3_exec(w.db, schema, NULL, NULL, NULL) != SQLITE_OK ||
	    (x && x->schema && sqlite3_exec(w.db, x->schema, NULL, NULL, NULL) != SQLITE_OK) ||
	    sqlite3_exec(w.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(
		    w.db,
		    "INSERT INTO bt_processes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
		    " ?10, ?11, ?12, ?13, ?14)",
		    -1, &w.proc, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db,
			       "INSERT INTO bt_threads VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
			       " ?10, ?11, ?12, ?13, ?14)",
			       -1, &w.thread, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db,
			       "INSERT INTO bt_frames VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
			       " ?10)",
			       -1, &w.frame, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(w.db, "INSERT INTO bt_locals VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
			       -1, &w.local, NULL) != SQLITE_OK)
		goto cleanup;
	err = write_meta(w.db, j, x && x->created_by ? x->created_by : "probing backtrace");
	for (i = 0; !err && i < j->nprocs; i++)
		err = write_proc(&w, &j->procs[i]);
	if (!err && x && x->write)
		err = x->write(w.db, j, x->arg);
	if (!err && sqlite3_exec(w.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		err = -EIO;
cleanup:
	if (err)
		pr_warn("cannot write the %s: %s", x && x->what ? x->what : "snapshot",
			w.db ? sqlite3_errmsg(w.db) : "out of memory");
	sqlite3_finalize(w.proc);
	sqlite3_finalize(w.thread);
	sqlite3_finalize(w.frame);
	sqlite3_finalize(w.local);
	if (sqlite3_close(w.db) != SQLITE_OK && !err)
		err = -EIO;
	return err;
}

int btjob__save_with(const struct bt_job *j, const char *path, unsigned int flags,
		     const struct btjob_extra *x)
{
	struct outpath op = {0};
	char *tmp = NULL, *dir = NULL, *base = NULL;
	mode_t mask;
	int fd = -1, err;

	err = outpath__check(path, flags, &op);
	if (err)
		return err;
	if (op.in_place) {
		if (x && x->what)
			pr_warn("a %s is a SQLite file: %s is not one", x->what, path);
		else
			pr_warn("a snapshot is a SQLite file: give a file name for -o, not %s",
				path);
		err = -EINVAL;
		goto cleanup;
	}
	dir = strdup(op.dest);
	base = strdup(op.dest);
	if (!dir || !base || asprintf(&tmp, "%s/.%s.XXXXXX", dirname(dir), basename(base)) < 0) {
		tmp = NULL;
		err = -ENOMEM;
		goto cleanup;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		pr_warn("cannot write %s: %s", path, strerror(errno));
		free(tmp);
		tmp = NULL;
		goto cleanup;
	}
	/* mkstemp makes the file 0600; give it the mode open(path, O_CREAT, 0666) would. */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask))
		pr_debug("%s: cannot set the mode: %s", tmp, strerror(errno));
	close(fd);
	err = write_snapshot(tmp, j, x);
	err = err ?: outpath__replace(&op, tmp, flags);
	if (err)
		unlink(tmp);
cleanup:
	free(tmp);
	free(dir);
	free(base);
	outpath__release(&op);
	return err;
}

int btjob__save(const struct bt_job *j, const char *path, unsigned int flags)
{
	return btjob__save_with(j, path, flags, NULL);
}

/* ---- reading --------------------------------------------------------------------------- */

static const char *col_text(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

static int col_int(sqlite3_stmt *st, int i, int unknown)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL ? unknown : sqlite3_column_int(st, i);
}

/* One meta value as text into @buf ("" when absent). */
static void meta_value(sqlite3 *db, const char *key, char *buf, size_t size)
{
	sqlite3_stmt *st = NULL;

	buf[0] = '\0';
	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW && col_text(st, 0))
			snprintf(buf, size, "%s", col_text(st, 0));
	}
	sqlite3_finalize(st);
}

static const char *static_launcher(const char *s)
{
	static const char *const known[] = {"torchrun", "slurm", "mpi", "pmi"};
	size_t i;

	for (i = 0; s && i < ARRAY_SIZE(known); i++)
		if (!strcmp(s, known[i]))
			return known[i];
	return NULL;
}

/*
 * Where the rows of bt_threads and bt_frames go: (host, pid) -> process, (host, pid, tid) ->
 * thread, in hash maps (a merged snapshot of a large job has tens of thousands of threads:
 * looking each up by a scan was quadratic), with the room made for each.
 */
struct snap_index {
	struct bmap *procs;   /* key(host, pid, 0) -> process index */
	struct bmap *threads; /* key(host, pid, tid) -> (process index << 32) | thread index */
	int *thread_room;     /* per process: threads allocated */
	int **frame_room;     /* per process, per thread: frames allocated */
	struct strbuf key;
};

static const char *snap_key(struct snap_index *x, const char *host, int pid, int tid)
{
	sb_reset(&x->key);
	if (sb_append(&x->key, host ? host : "", strlen(host ? host : "") + 1) ||
	    sb_append(&x->key, (const char *)&pid, sizeof(pid)) ||
	    sb_append(&x->key, (const char *)&tid, sizeof(tid)))
		return NULL;
	return x->key.buf;
}

static int find_proc(struct snap_index *x, const char *host, int pid)
{
	const char *k = snap_key(x, host, pid, 0);
	uint64_t *v = k ? bmap__find(x->procs, k, x->key.len) : NULL;

	return v ? (int)*v : -1;
}

/* The thread (host, pid, tid) and, in *@room, the frames allocated for it; or NULL. */
static struct bt_thread *find_thread(struct bt_job *j, struct snap_index *x, const char *host,
				     int pid, int tid, int **room)
{
	const char *k = snap_key(x, host, pid, tid);
	uint64_t *v = k ? bmap__find(x->threads, k, x->key.len) : NULL;
	int pi, ti;

	if (!v)
		return NULL;
	pi = *v >> 32;
	ti = *v & 0xffffffff;
	*room = &x->frame_room[pi][ti];
	return &j->procs[pi].bt->threads[ti];
}

static void snap_index_free(struct snap_index *x, int nprocs)
{
	bmap__free(x->procs);
	bmap__free(x->threads);
	for (int i = 0; x->frame_room && i < nprocs; i++)
		free(x->frame_room[i]);
	free(x->frame_room);
	free(x->thread_room);
	sb_free(&x->key);
}

static int count_rows(sqlite3 *db, const char *table)
{
	sqlite3_stmt *st = NULL;
	char sql[96];
	int n = -1;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

static int load_procs(sqlite3 *db, struct bt_job *j)
{
	sqlite3_stmt *st = NULL;
	int i = 0, err = 0;

	if (sqlite3_prepare_v2(
		    db,
		    "SELECT host, pid, ppid, rank, local_rank, world_size, group_rank,"
		    " job_id, launcher, command, python_version, status, error FROM bt_processes"
		    " ORDER BY rank IS NOT NULL, rank, host, pid",
		    -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	while (!err && i < j->nprocs && sqlite3_step(st) == SQLITE_ROW) {
		struct bt_job_proc *p = &j->procs[i++];
		const char *status = col_text(st, 11), *e = col_text(st, 12);

		jobinfo_free(&p->id);
		snprintf(p->id.host, sizeof(p->id.host), "%s", col_text(st, 0) ?: "");
		p->pid = sqlite3_column_int(st, 1);
		p->id.rank = col_int(st, 3, -1);
		p->id.local_rank = col_int(st, 4, -1);
		p->id.world_size = col_int(st, 5, -1);
		p->id.group_rank = col_int(st, 6, -1);
		p->id.job_id = col_text(st, 7) ? strdup(col_text(st, 7)) : NULL;
		p->id.launcher = static_launcher(col_text(st, 8));
		p->status = !status || !strcmp(status, "ok") ? BT_OK
			    : !strcmp(status, "gone")	     ? BT_GONE
							     : BT_ERROR;
		snprintf(p->error, sizeof(p->error), "%s", e ? e : "");
		if (p->status != BT_OK)
			continue;
		p->bt = calloc(1, sizeof(*p->bt));
		if (!p->bt) {
			err = -ENOMEM;
			break;
		}
		p->bt->pid = p->pid;
		p->bt->ppid = col_int(st, 2, -1);
		p->bt->command = col_text(st, 9) ? strdup(col_text(st, 9)) : NULL;
		snprintf(p->bt->python, sizeof(p->bt->python), "%s", col_text(st, 10) ?: "");
	}
	j->nprocs = i;
	sqlite3_finalize(st);
	return err;
}

static int load_threads(sqlite3 *db, struct bt_job *j, struct snap_index *x)
{
	sqlite3_stmt *st = NULL;
	int err = 0, i, pi, inserted, n;
	uint64_t *v;

	x->procs = bmap__new();
	x->threads = bmap__new();
	x->thread_room = calloc(j->nprocs + 1, sizeof(*x->thread_room));
	x->frame_room = calloc(j->nprocs + 1, sizeof(*x->frame_room));
	if (!x->procs || !x->threads || !x->thread_room || !x->frame_room)
		return -ENOMEM;
	for (i = 0; i < j->nprocs; i++) {
		const char *k = snap_key(x, j->procs[i].id.host, j->procs[i].pid, 0);

		v = k ? bmap__upsert(x->procs, k, x->key.len, i, &inserted) : NULL;
		if (!v)
			return -ENOMEM;
	}

	/* How many threads each process has, then the threads. */
	if (sqlite3_prepare_v2(db, "SELECT host, pid, count(*) FROM bt_threads GROUP BY host, pid",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		pi = find_proc(x, col_text(st, 0), sqlite3_column_int(st, 1));
		n = sqlite3_column_int(st, 2);
		if (pi < 0 || !j->procs[pi].bt || j->procs[pi].bt->threads || n <= 0)
			continue;
		j->procs[pi].bt->threads = calloc(n + 1, sizeof(struct bt_thread));
		x->frame_room[pi] = calloc(n + 1, sizeof(int));
		if (!j->procs[pi].bt->threads || !x->frame_room[pi])
			err = -ENOMEM;
		x->thread_room[pi] = n;
	}
	sqlite3_finalize(st);
	if (err ||
	    sqlite3_prepare_v2(db,
			       "SELECT host, pid, tid, name, comm, routine, state, wait, call,"
			       " wchan, gil, python, truncated, error FROM bt_threads"
			       " ORDER BY host, pid, tid",
			       -1, &st, NULL) != SQLITE_OK)
		return err ?: -EIO;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct bt_process *bt;
		struct bt_thread *t;
		const char *wait = col_text(st, 7), *gil = col_text(st, 10);

		pi = find_proc(x, col_text(st, 0), sqlite3_column_int(st, 1));
		/* Never more than the room made (the file could change between the queries). */
		if (pi < 0 || !(bt = j->procs[pi].bt) || !bt->threads ||
		    bt->nthreads >= x->thread_room[pi])
			continue;
		{
			const char *k = snap_key(x, col_text(st, 0), sqlite3_column_int(st, 1),
						 sqlite3_column_int(st, 2));

			v = k ? bmap__upsert(x->threads, k, x->key.len,
					     (uint64_t)pi << 32 | (uint64_t)bt->nthreads, &inserted)
			      : NULL;
			if (!v) {
				err = -ENOMEM;
				break;
			}
			if (!inserted)
				continue; /* the same thread twice: its first row */
		}
		t = &bt->threads[bt->nthreads++];
		t->tid = sqlite3_column_int(st, 2);
		snprintf(t->name, sizeof(t->name), "%s", col_text(st, 3) ?: "");
		snprintf(t->comm, sizeof(t->comm), "%s", col_text(st, 4) ?: "");
		snprintf(t->routine, sizeof(t->routine), "%s", col_text(st, 5) ?: "");
		t->state = btjob__state_letter(col_text(st, 6));
		t->wclass = WAIT_OTHER;
		for (i = 0; wait && i < WAIT_NR; i++)
			if (!strcmp(wait, wait_state_name(i)))
				t->wclass = i;
		snprintf(t->wait_desc, sizeof(t->wait_desc), "%s", col_text(st, 8) ?: "");
		snprintf(t->wait.wchan, sizeof(t->wait.wchan), "%s", col_text(st, 9) ?: "");
		t->wait.state = t->state;
		t->gil = !gil			 ? BT_GIL_NA
			 : !strcmp(gil, "holds") ? BT_GIL_HOLDS
			 : !strcmp(gil, "waits") ? BT_GIL_WAITS
						 : BT_GIL_NO;
		t->python = sqlite3_column_int(st, 11);
		t->truncated = sqlite3_column_int(st, 12);
		snprintf(t->error, sizeof(t->error), "%s", col_text(st, 13) ?: "");
	}
	sqlite3_finalize(st);
	return 0;
}

static int load_frames(sqlite3 *db, struct bt_job *j, struct snap_index *x)
{
	struct btjob_priv *pv = j->priv;
	sqlite3_stmt *st = NULL;
	struct bt_thread *t;
	int err = 0, n, *room;

	if (sqlite3_prepare_v2(db,
			       "SELECT host, pid, tid, count(*) FROM bt_frames GROUP BY host, pid,"
			       " tid",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		t = find_thread(j, x, col_text(st, 0), sqlite3_column_int(st, 1),
				sqlite3_column_int(st, 2), &room);
		n = sqlite3_column_int(st, 3);
		if (!t || t->frames || n <= 0)
			continue;
		t->frames = calloc(n, sizeof(*t->frames));
		if (!t->frames)
			err = -ENOMEM;
		*room = n;
	}
	sqlite3_finalize(st);
	if (err || sqlite3_prepare_v2(db,
				      "SELECT host, pid, tid, kind, func, qualname, file, lineno,"
				      " module FROM bt_frames ORDER BY host, pid, tid, depth",
				      -1, &st, NULL) != SQLITE_OK)
		return err ?: -EIO;
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		const char *kind = col_text(st, 3);
		struct frame *f;

		t = find_thread(j, x, col_text(st, 0), sqlite3_column_int(st, 1),
				sqlite3_column_int(st, 2), &room);
		if (!t || !t->frames || t->nframes >= *room)
			continue;
		f = &t->frames[t->nframes++];
		f->kind = kind && !strcmp(kind, "python")   ? FRAME_PYTHON
			  : kind && !strcmp(kind, "kernel") ? FRAME_KERNEL
							    : FRAME_NATIVE;
		f->func = strpool__intern(pv->strings, col_text(st, 4) ?: "[unknown]");
		f->qualname = strpool__intern(pv->strings, col_text(st, 5));
		f->file = strpool__intern(pv->strings, col_text(st, 6));
		f->line = col_int(st, 7, 0);
		f->module = strpool__intern(pv->strings, col_text(st, 8));
		if (!f->func)
			err = -ENOMEM;
	}
	sqlite3_finalize(st);
	return err;
}

struct bt_thread *btjob__thread(struct bt_job *j, const char *host, pid_t pid, pid_t tid, int *proc)
{
	int i, k;

	for (i = 0; i < j->nprocs; i++) {
		struct bt_process *p = j->procs[i].bt;

		if (!p || j->procs[i].pid != pid ||
		    (host && j->procs[i].id.host[0] && strcmp(host, j->procs[i].id.host)))
			continue;
		for (k = 0; k < p->nthreads; k++)
			if (p->threads[k].tid == tid) {
				*proc = i;
				return &p->threads[k];
			}
	}
	return NULL;
}

int btjob__load_locals(struct sqlite3 *db, struct bt_job *j)
{
	sqlite3_stmt *st = NULL;
	int rc = SQLITE_DONE, err = 0, proc;

	if (sqlite3_table_column_metadata(db, "main", "bt_locals", NULL, NULL, NULL, NULL, NULL,
					  NULL) != SQLITE_OK)
		return 0; /* a snapshot from before bt_locals */
	if (sqlite3_prepare_v2(db,
			       "SELECT host, pid, tid, depth, name, type, repr FROM bt_locals"
			       " ORDER BY rowid",
			       -1, &st, NULL) != SQLITE_OK)
		return -EPROTO;
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct bt_thread *t = btjob__thread(j, col_text(st, 0), sqlite3_column_int(st, 1),
						    sqlite3_column_int(st, 2), &proc);

		if (t && col_text(st, 4))
			err = backtrace__add_local(t, sqlite3_column_int(st, 3), col_text(st, 4),
						   col_text(st, 5), col_text(st, 6));
		if (err == -EINVAL)
			err = 0; /* a frame the file does not have: left out */
	}
	sqlite3_finalize(st);
	return err ?: (rc == SQLITE_DONE ? 0 : -EPROTO);
}

int btjob__load(struct sqlite3 *db, const char *path, struct bt_job **out)
{
	struct bt_job *j = NULL;
	char kind[64], format[32], v[96];
	struct snap_index x = {0};
	long fmt;
	int n, err;

	meta_value(db, "kind", kind, sizeof(kind));
	meta_value(db, "format", format, sizeof(format));
	if (strcmp(kind, BTJOB_KIND)) {
		pr_warn("%s is not a backtrace snapshot: make one with 'probing backtrace -p PID "
			"-o %s'",
			path, path);
		return -EPROTO;
	}
	if (parse_long(format, 1, 1000000, &fmt) || fmt > BTJOB_FORMAT) {
		pr_warn("%s is a backtrace snapshot of format %s, which this probing does not read "
			"(it reads format %d): read it with the probing that wrote it, or a newer "
			"one",
			path, format[0] ? format : "(none)", BTJOB_FORMAT);
		return -EPROTO;
	}
	n = count_rows(db, "bt_processes");
	if (n < 0) {
		pr_warn("%s: cannot read the snapshot: %s", path, sqlite3_errmsg(db));
		return -EIO;
	}
	j = btjob__new(n);
	if (!j)
		return -ENOMEM;
	meta_value(db, "host", j->host, sizeof(j->host));
	meta_value(db, "time", v, sizeof(v));
	j->time = strtod(v, NULL);
	meta_value(db, "native", v, sizeof(v));
	j->native = !strcmp(v, "1");
	err = load_procs(db, j);
	err = err ?: load_threads(db, j, &x);
	err = err ?: load_frames(db, j, &x);
	snap_index_free(&x, j->nprocs);
	if (err == -EIO)
		pr_warn("%s: cannot read the snapshot: %s", path, sqlite3_errmsg(db));
	if (!err) {
		btjob__label(j);
		err = btjob__group(j);
	}
	if (err) {
		btjob__free(j);
		return err;
	}
	*out = j;
	return 0;
}
