// SPDX-License-Identifier: MIT
/*
 * The recording file. Hot path (store__frame_id, store__stack_id, store__count) touches only
 * in-memory maps; SQLite is written in store__flush, once per second, in one transaction.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sqlite3.h>

#include "base/bmap.h"
#include "base/escape.h"
#include "base/log.h"
#include "base/outfile.h"
#include "base/strpool.h"
#include "record/store.h"
#include "base/util.h"
#include "record/rankview.h"
#include "bpf/waitclass.h"

static const char schema_sql[] =
	"PRAGMA journal_mode = WAL;\n"
	"PRAGMA synchronous = NORMAL;\n"
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value);\n"
	"CREATE TABLE processes(pid INTEGER PRIMARY KEY, ppid INTEGER, command TEXT, exe TEXT,\n"
	"  start_time REAL, end_time REAL, rank INTEGER, local_rank INTEGER, world_size INTEGER,\n"
	"  python_version TEXT, ns_pid INTEGER, group_rank INTEGER, job_id TEXT, host TEXT);\n"
	"CREATE TABLE threads(pid INTEGER NOT NULL, tid INTEGER NOT NULL, name TEXT,\n"
	"  first_seen REAL, last_seen REAL, ns_tid INTEGER, PRIMARY KEY(pid, tid));\n"
	"CREATE TABLE frame_defs(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, func TEXT NOT NULL,\n"
	"  qualname TEXT, file TEXT, lineno INTEGER, module TEXT);\n"
	"CREATE TABLE stacks(stack_id INTEGER PRIMARY KEY, nframes INTEGER NOT NULL,\n"
	"  truncated INTEGER NOT NULL);\n"
	"CREATE TABLE stack_frames(stack_id INTEGER NOT NULL, depth INTEGER NOT NULL,\n"
	"  frame_id INTEGER NOT NULL, PRIMARY KEY(stack_id, depth)) WITHOUT ROWID;\n"
	"CREATE TABLE sample_counts(ts INTEGER NOT NULL, pid INTEGER NOT NULL,\n"
	"  tid INTEGER NOT NULL, stack_id INTEGER NOT NULL, count INTEGER NOT NULL,\n"
	"  state INTEGER NOT NULL DEFAULT 0, ns INTEGER NOT NULL DEFAULT 0);\n"
	"CREATE VIEW samples AS\n"
	"  SELECT c.pid AS pid, c.tid AS tid, t.name AS thread, c.stack_id AS stack_id,\n"
	"         SUM(c.count) AS count, SUM(c.ns) AS ns, @STATE@ AS state\n"
	"  FROM sample_counts c LEFT JOIN threads t ON t.pid = c.pid AND t.tid = c.tid\n"
	"  GROUP BY c.pid, c.tid, c.stack_id, c.state;\n"
	"CREATE VIEW frames AS\n"
	"  SELECT sf.stack_id AS stack_id, sf.depth AS depth, f.kind AS kind, f.func AS func,\n"
	"         f.file AS file, f.lineno AS lineno, f.module AS module, f.qualname AS qualname\n"
	"  FROM stack_frames sf JOIN frame_defs f ON f.id = sf.frame_id;\n"
	"CREATE VIEW sample_times AS\n"
	"  SELECT c.ts AS ts, c.pid AS pid, c.tid AS tid, t.name AS thread,\n"
	"         c.stack_id AS stack_id, c.count AS count, c.ns AS ns, @STATE@ AS state\n"
	"  FROM sample_counts c LEFT JOIN threads t ON t.pid = c.pid AND t.tid = c.tid;\n"
	/* Collective communication calls (user/record/collectives.c); docs/sql.md. */
	"CREATE TABLE collectives_raw(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL,\n"
	"  tid INTEGER NOT NULL, op TEXT NOT NULL, grp TEXT, bytes INTEGER, seq INTEGER,\n"
	"  start_ns INTEGER NOT NULL, ns INTEGER, stack_id INTEGER, grp_rank INTEGER,\n"
	"  grp_size INTEGER, peer INTEGER, tag INTEGER, worker_tid INTEGER, error INTEGER,\n"
	"  lib TEXT);\n"
	"CREATE VIEW collectives AS\n"
	"  SELECT c.pid AS pid, p.rank AS rank, c.tid AS tid, c.op AS op, c.grp AS grp,\n"
	"         c.bytes AS bytes, c.seq AS seq, c.start_ns AS start_ns, c.ns AS ns,\n"
	"         c.stack_id AS stack_id, c.grp_rank AS grp_rank, c.grp_size AS grp_size,\n"
	"         c.peer AS peer, c.tag AS tag, c.worker_tid AS worker_tid, c.error AS error,\n"
	"         c.lib AS lib\n"
	"  FROM collectives_raw c LEFT JOIN processes p ON p.pid = c.pid;\n";

/* Key of the count map. */
struct count_key {
	int64_t ts;
	uint32_t pid, tid;
	uint64_t stack_id;
	uint32_t state; /* enum wait_state */
	uint32_t pad;
};

/* What a count_key has gathered since the last flush. */
struct count_val {
	uint64_t count, ns;
};

struct pending_frame {
	uint64_t id;
	struct frame f; /* strings in the store's pool (copied on interning) */
};

struct pending_stack {
	uint64_t id;
	unsigned int flags;
	int n;
	uint64_t *ids;
};

/* Every frame and stack interned, for a rotating store (store__rotate): a file gets those its
 * rows use, the first time they use them (gen: the file that last got it). */
struct frame_def {
	struct frame f; /* strings in the store's pool */
	uint32_t gen;
};

struct stack_def {
	uint64_t *ids;
	int n;
	unsigned int flags;
	uint32_t gen;
};

struct pending_thread {
	pid_t pid, tid;
	char *name;
	double ts;
};

/* The threads row of a thread seen at ts, or its first_seen, last_seen and name updated. */
#define THREAD_UPSERT_SQL(values)                                                    \
	"INSERT INTO threads(pid, tid, name, first_seen, last_seen) VALUES" values   \
	" ON CONFLICT(pid, tid) DO UPDATE SET name = coalesce(excluded.name, name)," \
	" first_seen = min(first_seen, excluded.first_seen),"                        \
	" last_seen = max(last_seen, excluded.last_seen)"

struct store {
	sqlite3 *db;
	char *path;	    /* the file written: DEST.partial */
	struct outpath out; /* DEST, where it goes when complete */
	unsigned int out_flags;
	struct bmap *frames; /* serialized frame -> id */
	struct bmap *stacks; /* flags + ids -> id */
	struct bmap *counts; /* count_key -> index in vals + 1 */
	struct count_val *vals;
	size_t nvals, capvals;
	uint64_t period_ns; /* of an on-CPU sample */
	struct pending_frame *pframes;
	size_t npframes, cappframes;
	struct pending_stack *pstacks;
	size_t npstacks, cappstacks;
	struct strbuf pending_sql; /* meta, processes, threads: small statements, run at flush */
	/* Collectives to insert at the flush, in order (grp interned in strings): one prepared
	 * statement for all, not a statement to parse for each (hundreds a second). */
	struct store_collective *pcolls;
	size_t npcolls, cappcolls;
	/* Threads seen, to insert (or update) at the flush before pending_sql (whose ns_tid
	 * updates need their rows), with one prepared statement (name malloc'd or NULL). */
	struct pending_thread *pthreads;
	size_t npthreads, cappthreads;
	struct strpool *strings; /* the strings of interned frames, one copy of each */
	struct strbuf key;	 /* scratch for serializing frames */
	/* STORE_ROTATE: the files' number (1: the first), every frame and stack by id - 1,
	 * and the statements that make meta, processes and threads of a new file (by key). */
	bool rotating;
	uint32_t gen;
	struct frame_def *fdefs;
	size_t nfdefs, capfdefs;
	struct stack_def *sdefs;
	size_t nsdefs, capsdefs;
	struct bmap *replay_keys; /* key -> index in replay + 1 */
	char **replay;
	size_t nreplay, capreplay;
};

static int sql_err(struct store *st, int rc, const char *what)
{
	pr_warn("%s: %s: %s", st->path, what, sqlite3_errmsg(st->db));
	return rc == SQLITE_FULL ? -ENOSPC : rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* The SQLite files that belong to the database @path: its WAL, shared memory and journal. */
static const char *const side_suffixes[] = {"-wal", "-shm", "-journal"};

/* Remove the side files of @path that are regular files (ours to remove: they go with it). */
static void remove_side_files(const char *path)
{
	char side[PATH_MAX + 16];
	struct stat sb;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(side_suffixes); i++) {
		snprintf(side, sizeof(side), "%s%s", path, side_suffixes[i]);
		if (!lstat(side, &sb) && S_ISREG(sb.st_mode) && unlink(side))
			pr_debug("cannot remove %s: %s", side, strerror(errno));
	}
}

/*
 * The schema: schema_sql with @STATE@ replaced by the expression that names sample_counts.state
 * as waitclass.h does, so that the views and the BPF side share one list of states.
 */
static int schema(struct strbuf *sql, bool head)
{
	/* Without its head (the journal mode and meta): the tables and views of the rows. */
	const char *p = head ? schema_sql : strstr(schema_sql, "CREATE TABLE processes"), *at;
	int err = 0, i;

	while (!err && (at = strstr(p, "@STATE@"))) {
		err = sb_append(sql, p, at - p);
		err = err ?: sb_puts(sql, "CASE c.state");
		for (i = 0; !err && i < WAIT_NR; i++)
			err = sb_printf(sql, " WHEN %d THEN '%s'", i, wait_state_name(i));
		err = err ?: sb_puts(sql, " ELSE 'other' END");
		p = at + strlen("@STATE@");
	}
	return err ?: sb_puts(sql, p);
}

int store__view_sql(const char *name, struct strbuf *sql)
{
	struct strbuf all = {0};
	char *rv;
	int err;

	err = schema(&all, true);
	if (!err)
		err = sql_view_def(sb_str(&all), name, sql);
	if (err == -ENOENT) {
		rv = rankview_schema_sql();
		err = rv ? sql_view_def(rv, name, sql) : -ENOMEM;
		free(rv);
	}
	sb_free(&all);
	return err;
}

/*
 * Create the file of @path (@path.partial, with the schema) for @st, whose maps are set up.
 * 0 or -errno, said; nothing of it is left behind on failure.
 */
static int open_file(struct store *st, const char *path)
{
	struct strbuf sql = {0};
	char *errmsg = NULL;
	int rc, fd, err = 0;

	err = outpath__check(path, st->out_flags, &st->out);
	if (err)
		return err;
	if (asprintf(&st->path, "%s.partial", st->out.dest) < 0) {
		st->path = NULL;
		err = -ENOMEM;
		goto cleanup;
	}
	/* Ours alone: never a file that was there already (a killed recorder's data). */
	fd = open(st->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (fd < 0) {
		err = -errno;
		if (err == -EEXIST) {
			pr_warn("cannot record into %s: %s already exists", path, st->path);
			pr_warn("it holds the recording of a recorder that was killed, or of one "
				"still writing %s; it is a readable recording ('probing query -i "
				"%s')",
				st->out.dest, st->path);
			pr_warn("move it away or delete it (with its -wal and -shm files), then "
				"record again");
		} else {
			pr_warn("cannot write the recording %s: %s", path, strerror(-err));
		}
		free(st->path);
		st->path = NULL; /* not ours: leave it */
		goto cleanup;
	}
	close(fd);

	rc = sqlite3_open_v2(st->path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL);
	if (rc != SQLITE_OK) {
		err = st->db ? sql_err(st, rc, "cannot create") : -ENOMEM;
		goto cleanup;
	}
	err = schema(&sql, true);
	if (!err) {
		char *rv = rankview_schema_sql();

		err = rv ? sb_puts(&sql, rv) : -ENOMEM;
		free(rv);
	}
	if (err)
		goto cleanup;
	rc = sqlite3_exec(st->db, sb_str(&sql), NULL, NULL, &errmsg);
	if (rc != SQLITE_OK) {
		pr_warn("%s: cannot create the schema: %s", st->path, errmsg ? errmsg : "?");
		sqlite3_free(errmsg);
		err = -EIO;
		goto cleanup;
	}
	sb_free(&sql);
	return 0;
cleanup:
	sb_free(&sql);
	if (st->db)
		sqlite3_close(st->db);
	st->db = NULL;
	if (st->path) {
		unlink(st->path);
		remove_side_files(st->path);
	}
	free(st->path);
	st->path = NULL;
	outpath__release(&st->out);
	return err;
}

int store__create(const char *path, unsigned int flags, struct store **out)
{
	struct store *st = NULL;
	int err = 0;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->frames = bmap__new();
	st->stacks = bmap__new();
	st->counts = bmap__new();
	st->strings = strpool__new();
	st->period_ns = hz_period_ns(PROBING_DEFAULT_HZ); /* until store__set_frequency */
	st->rotating = flags & STORE_ROTATE;
	st->gen = 1;
	if (st->rotating)
		st->replay_keys = bmap__new();
	if (!st->frames || !st->stacks || !st->counts || !st->strings ||
	    (st->rotating && !st->replay_keys)) {
		err = -ENOMEM;
		goto cleanup;
	}
	st->out_flags = OUTFILE_FORCE_HINT | (flags & STORE_FORCE ? OUTFILE_FORCE : 0);
	err = open_file(st, path);
	if (err)
		goto cleanup;
	*out = st;
	return 0;
cleanup:
	store__discard(st);
	return err;
}

void store__set_frequency(struct store *st, unsigned int hz)
{
	if (hz)
		st->period_ns = hz_period_ns(hz);
}

const char *store__path(const struct store *st)
{
	return st->path;
}

/*
 * A rotating store keeps @sql under @key (replacing what was there, or after it with
 * @append), to make the same row in the next file (store__rotate).
 */
static int replay_keep(struct store *st, const char *key, bool append, const char *sql)
{
	uint64_t *slot;
	char *old, *s;
	int inserted;

	slot = bmap__upsert(st->replay_keys, key, strlen(key), st->nreplay + 1, &inserted);
	if (!slot)
		return -ENOMEM;
	if (inserted) {
		if (grow_array(&st->replay, &st->capreplay, st->nreplay + 1, sizeof(*st->replay))) {
			*slot = 0;
			return -ENOMEM;
		}
		st->replay[st->nreplay++] = NULL;
	}
	if (!*slot)
		return -ENOMEM;
	old = st->replay[*slot - 1];
	if (append && old) {
		if (asprintf(&s, "%s;\n%s", old, sql) < 0)
			return -ENOMEM;
	} else {
		s = strdup(sql);
		if (!s)
			return -ENOMEM;
	}
	free(old);
	st->replay[*slot - 1] = s;
	return 0;
}

/*
 * Queue one SQL statement built with sqlite3_mprintf (%Q quotes, or NULL); a rotating store
 * keeps it under @key (NULL: not kept) for the next file, replacing (or with @append, after)
 * what that key had.
 */
static int pending_keyed(struct store *st, const char *key, bool append, const char *fmt, ...)
{
	va_list ap;
	char *sql;
	int err;

	va_start(ap, fmt);
	sql = sqlite3_vmprintf(fmt, ap);
	va_end(ap);
	if (!sql)
		return -ENOMEM;
	err = sb_puts(&st->pending_sql, sql);
	if (!err)
		err = sb_puts(&st->pending_sql, ";\n");
	if (!err && st->rotating && key)
		err = replay_keep(st, key, append, sql);
	sqlite3_free(sql);
	return err;
}

#define pending_append(st, ...) pending_keyed(st, NULL, false, __VA_ARGS__)

/* The replay key of meta @key, of process @pid, of thread @tid of @pid. */
#define REPLAY_KEY_MAX 96
static const char *meta_key(char *buf, const char *key)
{
	snprintf(buf, REPLAY_KEY_MAX, "m%s", key);
	return buf;
}

static const char *proc_key(char *buf, pid_t pid)
{
	snprintf(buf, REPLAY_KEY_MAX, "p%d", (int)pid);
	return buf;
}

static const char *thread_key(char *buf, char kind, pid_t pid, pid_t tid)
{
	snprintf(buf, REPLAY_KEY_MAX, "%c%d.%d", kind, (int)pid, (int)tid);
	return buf;
}

/*
 * @s as valid UTF-8 (utf8_text: names from a target, /proc comm and cmdline, prctl thread
 * names, ELF symbols, str objects read while they change, may be any bytes), interned in the
 * store's pool: NULL for NULL or when out of memory.
 */
static const char *intern_text(struct store *st, const char *s)
{
	struct strbuf sb = {0};
	const char *r = strpool__intern(st->strings, utf8_text(&sb, s));

	sb_free(&sb);
	return r;
}

int store__meta_text(struct store *st, const char *key, const char *value)
{
	char k[REPLAY_KEY_MAX];
	struct strbuf t = {0};
	int err;

	err = pending_keyed(st, meta_key(k, key), false,
			    "INSERT OR REPLACE INTO meta VALUES(%Q, %Q)", key,
			    utf8_text(&t, value));
	sb_free(&t);
	return err;
}

int store__meta_int(struct store *st, const char *key, int64_t value)
{
	char k[REPLAY_KEY_MAX];

	return pending_keyed(st, meta_key(k, key), false,
			     "INSERT OR REPLACE INTO meta VALUES(%Q, %lld)", key, (long long)value);
}

int store__meta_real(struct store *st, const char *key, double value)
{
	char k[REPLAY_KEY_MAX];

	return pending_keyed(st, meta_key(k, key), false,
			     "INSERT OR REPLACE INTO meta VALUES(%Q, %.6f)", key, value);
}

static void int_or_null(char *buf, size_t n, long v)
{
	if (v < 0)
		snprintf(buf, n, "NULL");
	else
		snprintf(buf, n, "%ld", v);
}

int store__process(struct store *st, const struct store_process *p)
{
	char rank[24], lrank[24], ws[24], grank[24], nspid[24], end[32], k[REPLAY_KEY_MAX];
	struct strbuf t[4] = {0};
	int err;

	int_or_null(rank, sizeof(rank), p->rank);
	int_or_null(grank, sizeof(grank), p->group_rank);
	int_or_null(lrank, sizeof(lrank), p->local_rank);
	int_or_null(ws, sizeof(ws), p->world_size);
	int_or_null(nspid, sizeof(nspid), p->ns_pid && p->ns_pid != p->pid ? p->ns_pid : -1);
	if (p->end_time > 0)
		snprintf(end, sizeof(end), "%.6f", p->end_time);
	else
		snprintf(end, sizeof(end), "NULL");
	err = pending_keyed(
		st, proc_key(k, p->pid), false,
		"INSERT OR REPLACE INTO processes(pid, ppid, command, exe, start_time, end_time,"
		" rank, local_rank, world_size, python_version, ns_pid, group_rank, job_id, host)"
		" VALUES(%d, %d, %Q, %Q, %.6f, %s, %s, %s, %s, %Q, %s, %s, %Q, %Q)",
		(int)p->pid, (int)p->ppid, utf8_text(&t[0], p->command), utf8_text(&t[1], p->exe),
		p->start_time, end, rank, lrank, ws, p->python_version, nspid, grank,
		utf8_text(&t[2], p->job_id), utf8_text(&t[3], p->host));
	for (size_t i = 0; i < ARRAY_SIZE(t); i++)
		sb_free(&t[i]);
	return err;
}

int store__process_end(struct store *st, pid_t pid, double end_time)
{
	char k[REPLAY_KEY_MAX];

	return pending_keyed(st, proc_key(k, pid), true,
			     "UPDATE processes SET end_time = %.6f WHERE pid = %d", end_time,
			     (int)pid);
}

/* A text column: @v (not copied), or NULL. */
static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
	return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

int store__thread(struct store *st, pid_t pid, pid_t tid, const char *name, double ts)
{
	char k[REPLAY_KEY_MAX], *sql;
	struct pending_thread *p;
	struct strbuf t = {0};
	int err = -ENOMEM;

	name = utf8_text(&t, name);
	if (grow_array(&st->pthreads, &st->cappthreads, st->npthreads + 1, sizeof(*p)))
		goto out;
	p = &st->pthreads[st->npthreads];
	*p = (struct pending_thread){pid, tid, name ? strdup(name) : NULL, ts};
	if (name && !p->name)
		goto out;
	st->npthreads++;
	err = 0;
	/* A rotating store makes the row again in the next file: the statement is kept. */
	if (st->rotating) {
		sql = sqlite3_mprintf(THREAD_UPSERT_SQL("(%d, %d, %Q, %.6f, %.6f)"), (int)pid,
				      (int)tid, name, ts, ts);
		err = sql ? replay_keep(st, thread_key(k, 't', pid, tid), false, sql) : -ENOMEM;
		sqlite3_free(sql);
	}
out:
	sb_free(&t);
	return err;
}

/* Insert or update the pending threads with @s. SQLITE_DONE or why not. */
static int flush_threads(struct store *st, sqlite3_stmt *s)
{
	size_t i;
	int rc;

	for (i = 0; i < st->npthreads; i++) {
		const struct pending_thread *t = &st->pthreads[i];

		sqlite3_reset(s);
		sqlite3_bind_int(s, 1, (int)t->pid);
		sqlite3_bind_int(s, 2, (int)t->tid);
		bind_text_or_null(s, 3, t->name);
		sqlite3_bind_double(s, 4, t->ts);
		sqlite3_bind_double(s, 5, t->ts);
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			return rc;
	}
	return SQLITE_DONE;
}

static void drop_pending_threads(struct store *st)
{
	size_t i;

	for (i = 0; i < st->npthreads; i++)
		free(st->pthreads[i].name);
	st->npthreads = 0;
}

int store__thread_ns_tid(struct store *st, pid_t pid, pid_t tid, pid_t ns_tid)
{
	char k[REPLAY_KEY_MAX];

	return pending_keyed(st, thread_key(k, 'n', pid, tid), false,
			     "UPDATE threads SET ns_tid = %d WHERE pid = %d AND tid = %d",
			     (int)ns_tid, (int)pid, (int)tid);
}

static int ensure_stack(struct store *st, uint64_t id);

int store__collective(struct store *st, const struct store_collective *c)
{
	struct store_collective *p;

	if (ensure_stack(st, c->stack_id) ||
	    grow_array(&st->pcolls, &st->cappcolls, st->npcolls + 1, sizeof(*p)))
		return -ENOMEM;
	p = &st->pcolls[st->npcolls];
	*p = *c;
	p->grp = c->grp ? intern_text(st, c->grp) : NULL;
	if (c->grp && !p->grp)
		return -ENOMEM;
	st->npcolls++;
	return 0;
}

/* An integer column: @v, or NULL when @known is false. */
static void bind_int_or_null(sqlite3_stmt *s, int i, bool known, int64_t v)
{
	if (known)
		sqlite3_bind_int64(s, i, (sqlite3_int64)v);
	else
		sqlite3_bind_null(s, i);
}

/* Insert the pending collectives with @s (collectives_raw's insert). SQLITE_DONE or why not. */
static int flush_collectives(struct store *st, sqlite3_stmt *s)
{
	size_t i;
	int rc;

	for (i = 0; i < st->npcolls; i++) {
		const struct store_collective *c = &st->pcolls[i];

		sqlite3_reset(s);
		sqlite3_bind_int64(s, 1, (sqlite3_int64)c->id);
		sqlite3_bind_int(s, 2, (int)c->pid);
		sqlite3_bind_int(s, 3, (int)c->tid);
		bind_text_or_null(s, 4, c->op);
		bind_text_or_null(s, 5, c->grp);
		bind_int_or_null(s, 6, c->bytes >= 0, c->bytes);
		bind_int_or_null(s, 7, c->seq >= 0, c->seq);
		sqlite3_bind_int64(s, 8, (sqlite3_int64)c->start_ns);
		bind_int_or_null(s, 9, c->ns >= 0, c->ns);
		bind_int_or_null(s, 10, c->stack_id > 0, (int64_t)c->stack_id);
		bind_int_or_null(s, 11, c->grp_size > 0, c->grp_rank);
		bind_int_or_null(s, 12, c->grp_size > 0, c->grp_size);
		bind_int_or_null(s, 13, c->has_peer, c->peer);
		bind_int_or_null(s, 14, c->has_peer, c->tag);
		bind_int_or_null(s, 15, c->worker_tid > 0, c->worker_tid);
		sqlite3_bind_int(s, 16, c->error ? 1 : 0);
		bind_text_or_null(s, 17, c->lib);
		rc = sqlite3_step(s);
		if (rc != SQLITE_DONE)
			return rc;
	}
	return SQLITE_DONE;
}

int store__select(struct store *st, const char *sql,
		  int (*row)(void *ctx, int ncols, const char *const *values), void *ctx)
{
	const char *vals[16];
	sqlite3_stmt *s = NULL;
	int rc, i, n, err = 0;

	err = store__flush(st);
	if (err)
		return err;
	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK)
		return sql_err(st, rc, "cannot read");
	n = sqlite3_column_count(s);
	if (n > (int)ARRAY_SIZE(vals))
		n = ARRAY_SIZE(vals);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		for (i = 0; i < n; i++)
			vals[i] = (const char *)sqlite3_column_text(s, i);
		err = row(ctx, n, vals);
		if (err)
			break;
	}
	if (!err && rc != SQLITE_DONE)
		err = sql_err(st, rc, "cannot read");
	sqlite3_finalize(s);
	return err;
}

/* Serialize a frame into st->key: kind, line, then NUL-separated strings (NULL as \1). */
static int frame_key(struct store *st, const struct frame *f)
{
	const char *strs[] = {f->func, f->qualname, f->file, f->module};
	char head[32];
	size_t i;
	int err;

	sb_reset(&st->key);
	snprintf(head, sizeof(head), "%d:%d", (int)f->kind, f->line);
	err = sb_append(&st->key, head, strlen(head) + 1);
	for (i = 0; !err && i < ARRAY_SIZE(strs); i++)
		err = strs[i] ? sb_append(&st->key, strs[i], strlen(strs[i]) + 1)
			      : sb_append(&st->key, "\1", 2);
	return err;
}

int store__frame_id(struct store *st, const struct frame *f, uint64_t *id)
{
	struct pending_frame *pf;
	uint64_t *slot;
	int inserted, err;

	err = frame_key(st, f);
	if (err)
		return err;
	slot = bmap__upsert(st->frames, st->key.buf, st->key.len, bmap__size(st->frames) + 1,
			    &inserted);
	if (!slot)
		return -ENOMEM;
	*id = *slot;
	if (!inserted)
		return 0;
	if (grow_array(&st->pframes, &st->cappframes, st->npframes + 1, sizeof(*st->pframes)))
		return -ENOMEM;
	pf = &st->pframes[st->npframes++];
	pf->id = *id;
	pf->f.kind = f->kind;
	pf->f.line = f->line;
	pf->f.func = intern_text(st, f->func ? f->func : "[unknown]");
	pf->f.qualname = intern_text(st, f->qualname);
	pf->f.file = intern_text(st, f->file);
	pf->f.module = intern_text(st, f->module);
	if (!pf->f.func || (f->qualname && !pf->f.qualname) || (f->file && !pf->f.file) ||
	    (f->module && !pf->f.module))
		return -ENOMEM;
	if (!st->rotating)
		return 0;
	/* Ids are handed out in order: fdefs[id - 1] is this frame. */
	if (grow_array(&st->fdefs, &st->capfdefs, st->nfdefs + 1, sizeof(*st->fdefs)))
		return -ENOMEM;
	st->fdefs[st->nfdefs++] = (struct frame_def){.f = pf->f, .gen = st->gen};
	return 0;
}

/* A rotating store's frame @id goes into the file being written if it is not there yet. */
static int ensure_frame(struct store *st, uint64_t id)
{
	struct frame_def *d;

	if (!id || id > st->nfdefs || st->fdefs[id - 1].gen == st->gen)
		return 0;
	d = &st->fdefs[id - 1];
	if (grow_array(&st->pframes, &st->cappframes, st->npframes + 1, sizeof(*st->pframes)))
		return -ENOMEM;
	st->pframes[st->npframes++] = (struct pending_frame){.id = id, .f = d->f};
	d->gen = st->gen;
	return 0;
}

/*
 * A rotating store's stack @id (and its frames) goes into the file being written if it is not
 * there yet: a file has every stack its rows use. 0 or -ENOMEM.
 */
static int ensure_stack(struct store *st, uint64_t id)
{
	struct pending_stack *ps;
	struct stack_def *d;
	int i, err;

	if (!st->rotating || !id || id > st->nsdefs || st->sdefs[id - 1].gen == st->gen)
		return 0;
	d = &st->sdefs[id - 1];
	for (i = 0; i < d->n; i++) {
		err = ensure_frame(st, d->ids[i]);
		if (err)
			return err;
	}
	if (grow_array(&st->pstacks, &st->cappstacks, st->npstacks + 1, sizeof(*st->pstacks)))
		return -ENOMEM;
	ps = &st->pstacks[st->npstacks];
	ps->ids = malloc((d->n ? d->n : 1) * sizeof(*ps->ids));
	if (!ps->ids)
		return -ENOMEM;
	memcpy(ps->ids, d->ids, d->n * sizeof(*ps->ids));
	ps->n = d->n;
	ps->flags = d->flags;
	ps->id = id;
	st->npstacks++;
	d->gen = st->gen;
	return 0;
}

int store__stack_id(struct store *st, const uint64_t *ids, int n, unsigned int flags, uint64_t *id)
{
	struct pending_stack *ps;
	uint64_t *slot;
	int inserted, err;

	sb_reset(&st->key);
	err = sb_append(&st->key, (const char *)&flags, sizeof(flags));
	if (!err)
		err = sb_append(&st->key, (const char *)ids, n * sizeof(*ids));
	if (err)
		return err;
	slot = bmap__upsert(st->stacks, st->key.buf, st->key.len, bmap__size(st->stacks) + 1,
			    &inserted);
	if (!slot)
		return -ENOMEM;
	*id = *slot;
	if (!inserted)
		return 0;
	if (grow_array(&st->pstacks, &st->cappstacks, st->npstacks + 1, sizeof(*st->pstacks)))
		return -ENOMEM;
	ps = &st->pstacks[st->npstacks];
	ps->ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ps->ids)
		return -ENOMEM;
	memcpy(ps->ids, ids, n * sizeof(*ids));
	ps->n = n;
	ps->flags = flags;
	ps->id = *id;
	st->npstacks++;
	if (!st->rotating)
		return 0;
	/* A new stack of frames seen before: in an earlier file, maybe not in this one. */
	for (int i = 0; i < n; i++) {
		err = ensure_frame(st, ids[i]);
		if (err)
			return err;
	}
	if (grow_array(&st->sdefs, &st->capsdefs, st->nsdefs + 1, sizeof(*st->sdefs)))
		return -ENOMEM;
	st->sdefs[st->nsdefs] = (struct stack_def){.n = n, .flags = flags, .gen = st->gen};
	st->sdefs[st->nsdefs].ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!st->sdefs[st->nsdefs].ids)
		return -ENOMEM;
	memcpy(st->sdefs[st->nsdefs].ids, ids, n * sizeof(*ids));
	st->nsdefs++;
	return 0;
}

int store__count_state(struct store *st, pid_t pid, pid_t tid, uint64_t stack_id, int64_t ts,
		       unsigned int state, uint64_t n, uint64_t ns)
{
	struct count_key k;
	uint64_t *slot;
	int inserted;

	if (ensure_stack(st, stack_id))
		return -ENOMEM;
	memset(&k, 0, sizeof(k));
	k.ts = ts;
	k.pid = pid;
	k.tid = tid;
	k.stack_id = stack_id;
	k.state = state;
	slot = bmap__upsert(st->counts, &k, sizeof(k), st->nvals + 1, &inserted);
	if (!slot)
		return -ENOMEM;
	if (inserted) {
		if (grow_array(&st->vals, &st->capvals, st->nvals + 1, sizeof(*st->vals))) {
			*slot = 0; /* counted nowhere: flush_count skips it */
			return -ENOMEM;
		}
		st->vals[st->nvals++] = (struct count_val){0};
	}
	if (!*slot)
		return -ENOMEM;
	st->vals[*slot - 1].count += n;
	st->vals[*slot - 1].ns += ns;
	return 0;
}

int store__count(struct store *st, pid_t pid, pid_t tid, uint64_t stack_id, int64_t ts, uint64_t n)
{
	return store__count_state(st, pid, tid, stack_id, ts, WAIT_RUNNING, n, n * st->period_ns);
}

struct flush_ctx {
	struct store *st;
	sqlite3_stmt *stmt;
	int rc;
};

static int flush_count(const void *key, size_t len, uint64_t *value, void *arg)
{
	const struct count_key *k = key;
	struct flush_ctx *c = arg;
	const struct count_val *v;

	if (!*value)
		return 0;
	v = &c->st->vals[*value - 1];
	sqlite3_reset(c->stmt);
	sqlite3_bind_int64(c->stmt, 1, k->ts);
	sqlite3_bind_int64(c->stmt, 2, k->pid);
	sqlite3_bind_int64(c->stmt, 3, k->tid);
	sqlite3_bind_int64(c->stmt, 4, (sqlite3_int64)k->stack_id);
	sqlite3_bind_int64(c->stmt, 5, (sqlite3_int64)v->count);
	sqlite3_bind_int64(c->stmt, 6, k->state);
	sqlite3_bind_int64(c->stmt, 7, (sqlite3_int64)v->ns);
	c->rc = sqlite3_step(c->stmt);
	return c->rc == SQLITE_DONE ? 0 : 1;
}

int store__flush(struct store *st)
{
	sqlite3_stmt *fs = NULL, *ss = NULL, *sf = NULL, *cs = NULL, *ks = NULL, *ts = NULL;
	struct flush_ctx c = {st, NULL, SQLITE_DONE};
	char *errmsg = NULL;
	size_t i;
	int rc, err = 0, d;

	if (!st || !st->db)
		return 0;
	if (!st->npframes && !st->npstacks && !bmap__size(st->counts) && !st->pending_sql.len &&
	    !st->npcolls && !st->npthreads)
		return 0;
	rc = sqlite3_exec(st->db, "BEGIN", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return sql_err(st, rc, "cannot start a transaction");
	if (st->npthreads) {
		rc = sqlite3_prepare_v2(st->db, THREAD_UPSERT_SQL("(?, ?, ?, ?, ?)"), -1, &ts,
					NULL);
		if (rc != SQLITE_OK || (rc = flush_threads(st, ts)) != SQLITE_DONE)
			goto sqlfail;
	}
	if (st->pending_sql.len) {
		rc = sqlite3_exec(st->db, st->pending_sql.buf, NULL, NULL, &errmsg);
		if (rc != SQLITE_OK) {
			pr_warn("%s: %s", st->path, errmsg ? errmsg : "write failed");
			sqlite3_free(errmsg);
			err = -EIO;
			goto rollback;
		}
	}
	rc = sqlite3_prepare_v2(st->db, "INSERT INTO frame_defs VALUES(?, ?, ?, ?, ?, ?, ?)", -1,
				&fs, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(st->db, "INSERT INTO stacks VALUES(?, ?, ?)", -1, &ss,
					NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(st->db, "INSERT INTO stack_frames VALUES(?, ?, ?)", -1, &sf,
					NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(st->db,
					"INSERT INTO sample_counts VALUES(?, ?, ?, ?, ?, ?, ?)", -1,
					&cs, NULL);
	if (rc != SQLITE_OK)
		goto sqlfail;
	for (i = 0; i < st->npframes; i++) {
		const struct frame *f = &st->pframes[i].f;

		sqlite3_reset(fs);
		sqlite3_bind_int64(fs, 1, (sqlite3_int64)st->pframes[i].id);
		sqlite3_bind_text(fs, 2, frame_kind_name(f->kind), -1, SQLITE_STATIC);
		sqlite3_bind_text(fs, 3, f->func, -1, SQLITE_STATIC);
		bind_text_or_null(fs, 4, f->qualname);
		bind_text_or_null(fs, 5, f->file);
		if (f->line > 0)
			sqlite3_bind_int(fs, 6, f->line);
		else
			sqlite3_bind_null(fs, 6);
		bind_text_or_null(fs, 7, f->module);
		rc = sqlite3_step(fs);
		if (rc != SQLITE_DONE)
			goto sqlfail;
	}
	for (i = 0; i < st->npstacks; i++) {
		const struct pending_stack *ps = &st->pstacks[i];

		sqlite3_reset(ss);
		sqlite3_bind_int64(ss, 1, (sqlite3_int64)ps->id);
		sqlite3_bind_int(ss, 2, ps->n);
		sqlite3_bind_int(ss, 3, ps->flags);
		rc = sqlite3_step(ss);
		if (rc != SQLITE_DONE)
			goto sqlfail;
		for (d = 0; d < ps->n; d++) {
			sqlite3_reset(sf);
			sqlite3_bind_int64(sf, 1, (sqlite3_int64)ps->id);
			sqlite3_bind_int(sf, 2, d);
			sqlite3_bind_int64(sf, 3, (sqlite3_int64)ps->ids[d]);
			rc = sqlite3_step(sf);
			if (rc != SQLITE_DONE)
				goto sqlfail;
		}
	}
	c.stmt = cs;
	if (bmap__for_each(st->counts, flush_count, &c)) {
		rc = c.rc;
		goto sqlfail;
	}
	if (st->npcolls) {
		rc = sqlite3_prepare_v2(
			st->db,
			"INSERT OR REPLACE INTO collectives_raw(id, pid, tid, op, grp, bytes, seq,"
			" start_ns, ns, stack_id, grp_rank, grp_size, peer, tag, worker_tid, error,"
			" lib) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			-1, &ks, NULL);
		if (rc != SQLITE_OK || (rc = flush_collectives(st, ks)) != SQLITE_DONE)
			goto sqlfail;
	}
	rc = sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto sqlfail;
	/* Committed: drop what was pending. */
	for (i = 0; i < st->npstacks; i++)
		free(st->pstacks[i].ids);
	st->npstacks = 0;
	st->npframes = 0;
	bmap__clear(st->counts);
	st->nvals = 0;
	st->npcolls = 0;
	drop_pending_threads(st);
	sb_reset(&st->pending_sql);
	goto cleanup;
sqlfail:
	err = sql_err(st, rc, "cannot write");
rollback:
	sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
cleanup:
	sqlite3_finalize(fs);
	sqlite3_finalize(ss);
	sqlite3_finalize(sf);
	sqlite3_finalize(cs);
	sqlite3_finalize(ks);
	sqlite3_finalize(ts);
	return err;
}

/* Free everything but the file. */
static void store_free(struct store *st)
{
	size_t i;

	for (i = 0; i < st->npstacks; i++)
		free(st->pstacks[i].ids);
	free(st->pstacks);
	free(st->pframes);
	for (i = 0; i < st->nsdefs; i++)
		free(st->sdefs[i].ids);
	free(st->sdefs);
	free(st->fdefs);
	for (i = 0; i < st->nreplay; i++)
		free(st->replay[i]);
	free(st->replay);
	bmap__free(st->replay_keys);
	strpool__free(st->strings);
	bmap__free(st->frames);
	bmap__free(st->stacks);
	bmap__free(st->counts);
	free(st->vals);
	sb_free(&st->pending_sql);
	free(st->pcolls);
	drop_pending_threads(st);
	free(st->pthreads);
	sb_free(&st->key);
	outpath__release(&st->out);
	free(st->path);
	free(st);
}

/*
 * Fold the WAL into the file and leave WAL mode, so that the file alone is the recording (it
 * is renamed without its -wal). Readers of the file being written can delay that: wait for
 * them a while.
 */
static int leave_wal(struct store *st)
{
	sqlite3_stmt *s = NULL;
	const char *mode;
	int rc, err = -EBUSY;

	sqlite3_busy_timeout(st->db, 10000);
	sqlite3_exec(st->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
	rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = DELETE", -1, &s, NULL);
	if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
		mode = (const char *)sqlite3_column_text(s, 0);
		if (mode && !strcmp(mode, "delete"))
			err = 0;
	}
	if (err)
		pr_warn("%s: cannot fold the WAL into the file (%s); a reader may hold it open",
			st->path, sqlite3_errmsg(st->db));
	sqlite3_finalize(s);
	return err;
}

/* Move the complete recording over its destination; on failure say where it is. */
static int publish(struct store *st)
{
	int err;

	/* The side files of the file replaced would be read as part of the new one. */
	err = outpath__recheck(&st->out, st->out_flags);
	if (!err) {
		remove_side_files(st->out.dest);
		err = outpath__replace(&st->out, st->path, st->out_flags);
	}
	if (err)
		pr_warn("the recording is complete in %s", st->path);
	return err;
}

int store__close(struct store *st)
{
	int err = 0;

	if (!st)
		return 0;
	if (st->db) {
		err = store__flush(st);
		err = err ?: leave_wal(st);
		if (sqlite3_close(st->db) != SQLITE_OK && !err)
			err = -EIO;
		st->db = NULL;
	}
	if (err && st->path)
		pr_warn("what was recorded until then is in %s (keep its -wal file with it)",
			st->path);
	else if (st->path)
		err = publish(st);
	store_free(st);
	return err;
}

void store__discard(struct store *st)
{
	if (!st)
		return;
	if (st->db)
		sqlite3_close(st->db);
	if (st->path) {
		unlink(st->path);
		remove_side_files(st->path);
	}
	store_free(st);
}

int store__rotate(struct store *st, const char *path)
{
	size_t i;
	int err;

	if (!st->rotating)
		return -EINVAL;
	if (st->db) {
		err = store__flush(st);
		if (err)
			return err; /* still in the file being written: try again later */
		leave_wal(st);
		if (sqlite3_close(st->db) != SQLITE_OK)
			pr_warn("%s: cannot close", st->path);
		st->db = NULL;
		/* Complete: under its own name; the file replaced is no one's (a new name). */
		if (publish(st))
			pr_warn("%s stays under that name", st->path);
		outpath__release(&st->out);
		free(st->path);
		st->path = NULL;
	}
	err = open_file(st, path);
	if (err)
		return err;
	/* A new file: every frame and stack goes in again when a row uses it, and the rows of
	 * meta, processes and threads are made again. */
	st->gen++;
	/* What a file that could not be opened kept pending goes into this one, once. */
	for (i = 0; i < st->npframes; i++)
		if (st->pframes[i].id <= st->nfdefs)
			st->fdefs[st->pframes[i].id - 1].gen = st->gen;
	for (i = 0; i < st->npstacks; i++)
		if (st->pstacks[i].id <= st->nsdefs)
			st->sdefs[st->pstacks[i].id - 1].gen = st->gen;
	for (i = 0; !err && i < st->nreplay; i++)
		if (st->replay[i])
			err = sb_printf(&st->pending_sql, "%s;\n", st->replay[i]);
	return err;
}

bool store__is_open(const struct store *st)
{
	return st && st->db;
}

/* Run @sql on @db; 0 or -EIO with the reason said for @what. */
static int exec_said(sqlite3 *db, const char *what, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
		return 0;
	pr_warn("cannot copy %s: %s", what, msg ? msg : sqlite3_errmsg(db));
	sqlite3_free(msg);
	return sqlite3_errcode(db) == SQLITE_FULL ? -ENOSPC : -EIO;
}

int store__copy_window(sqlite3 *db, const char *const *files, int n, int64_t from_ts,
		       int (*check)(sqlite3 *db, const char *file, void *ctx), void *ctx)
{
	struct strbuf sql = {0};
	sqlite3_stmt *at = NULL;
	char *copy = NULL;
	int i, err;

	err = sb_puts(&sql, "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value);\n");
	err = err ?: schema(&sql, false);
	err = err ?: exec_said(db, "the schema", sb_str(&sql));
	if (!err) {
		char *rv = rankview_schema_sql();

		err = rv ? exec_said(db, "the schema", rv) : -ENOMEM;
		free(rv);
	}
	sb_free(&sql);
	if (err)
		return err;
	copy = sqlite3_mprintf(
		"INSERT INTO main.sample_counts SELECT * FROM seg.sample_counts WHERE ts >= %lld;\n"
		/* Later files hold the later state of a call (written again there). */
		"INSERT OR REPLACE INTO main.collectives_raw SELECT * FROM seg.collectives_raw"
		" WHERE ns IS NULL OR start_ns + ns >= %lld * 1000000000;\n"
		"INSERT OR REPLACE INTO main.processes SELECT * FROM seg.processes;\n"
		"INSERT INTO main.threads SELECT * FROM seg.threads WHERE true"
		" ON CONFLICT(pid, tid) DO UPDATE SET name = coalesce(excluded.name, name),"
		" first_seen = min(first_seen, excluded.first_seen),"
		" last_seen = max(last_seen, excluded.last_seen),"
		" ns_tid = coalesce(excluded.ns_tid, ns_tid);\n"
		/* The stacks this file's rows use: every file has those its rows use (one id
		 * space). Each is looked up by its key: the work grows with this file, not
		 * with what the files before it added. */
		"INSERT OR IGNORE INTO main.stacks SELECT * FROM seg.stacks WHERE stack_id IN"
		" (SELECT stack_id FROM seg.sample_counts WHERE ts >= %lld UNION"
		"  SELECT stack_id FROM seg.collectives_raw"
		"  WHERE ns IS NULL OR start_ns + ns >= %lld * 1000000000);\n"
		"INSERT OR IGNORE INTO main.stack_frames SELECT * FROM seg.stack_frames f"
		" WHERE EXISTS (SELECT 1 FROM main.stacks s WHERE s.stack_id = f.stack_id);\n"
		"INSERT OR IGNORE INTO main.frame_defs SELECT * FROM seg.frame_defs WHERE id IN"
		" (SELECT frame_id FROM seg.stack_frames f"
		"  WHERE EXISTS (SELECT 1 FROM main.stacks s WHERE s.stack_id = f.stack_id));\n"
		"INSERT OR IGNORE INTO main.meta SELECT * FROM seg.meta;\n",
		(long long)from_ts, (long long)from_ts, (long long)from_ts, (long long)from_ts);
	if (!copy)
		return -ENOMEM;
	for (i = 0; !err && i < n; i++) {
		if (sqlite3_prepare_v2(db, "ATTACH ?1 AS seg", -1, &at, NULL) != SQLITE_OK) {
			err = exec_said(db, "the recording", "SELECT 1 FROM nothing");
			break;
		}
		sqlite3_bind_text(at, 1, files[i], -1, SQLITE_STATIC);
		if (sqlite3_step(at) != SQLITE_DONE) {
			/* Deleted meanwhile (the oldest, pruned): the others still go in. */
			pr_debug("cannot read %s: %s", files[i], sqlite3_errmsg(db));
			sqlite3_finalize(at);
			at = NULL;
			continue;
		}
		sqlite3_finalize(at);
		at = NULL;
		err = check ? check(db, files[i], ctx) : 0;
		err = err ?: exec_said(db, files[i], copy);
		sqlite3_exec(db, "DETACH seg", NULL, NULL, NULL);
	}
	sqlite3_free(copy);
	return err;
}
