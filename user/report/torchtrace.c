// SPDX-License-Identifier: MIT
/*
 * python.torch_trace outside the process: saving it into a recording, reading it back, and
 * Chrome trace JSON. Every step is SQL on a sqlite3 connection, so the live database and a
 * recording file are handled alike.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/jsonq.h"
#include "base/log.h"
#include "base/outfile.h"
#include "live/livetables.h"
#include "report/recording.h"
#include "record/store.h"
#include "report/torchtrace.h"
#include "base/util.h"

/* The statements that copy python.torch_trace into a recording's torch_trace. */
struct trace_sql {
	struct strbuf create, select, insert;
};

static void trace_sql_free(struct trace_sql *q)
{
	sb_free(&q->create);
	sb_free(&q->select);
	sb_free(&q->insert);
}

/*
 * The statements for the columns python.torch_trace is declared with (livetables.h: the
 * register_table() of injector/py/torch.py), in that order; the recording's table has the
 * same columns and types, a row being unique by (pid, seq, ts). -ENOMEM, or -ENOENT if this
 * build declares no python.torch_trace.
 */
static int trace_sql(struct trace_sql *q)
{
	const struct live_table *t = live_table__find("python", "torch_trace");
	const struct live_column *c;
	size_t i;
	int err;

	if (!t)
		return -ENOENT;
	err = sb_puts(&q->create, "CREATE TABLE IF NOT EXISTS torch_trace(");
	err = err ?: sb_puts(&q->select, "SELECT ");
	err = err ?: sb_puts(&q->insert, "INSERT OR IGNORE INTO torch_trace(");
	for (i = 0; !err && i < t->ncolumns; i++) {
		c = &t->columns[i];
		err = sb_printf(&q->create, "%s%s%s, ", c->name, *c->type ? " " : "", c->type);
		err = err ?: sb_printf(&q->select, "%s%s", i ? ", " : "", c->name);
		err = err ?: sb_printf(&q->insert, "%s%s", i ? ", " : "", c->name);
	}
	err = err ?: sb_puts(&q->create, "UNIQUE(pid, seq, ts));");
	err = err ?: sb_puts(&q->select, " FROM python.torch_trace");
	err = err ?: sb_puts(&q->insert, ") VALUES(");
	for (i = 0; !err && i < t->ncolumns; i++)
		err = sb_puts(&q->insert, i ? ", ?" : "?");
	return err ?: sb_puts(&q->insert, ")");
}

static int exec_sql(sqlite3 *db, const char *sql, const char *what)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
		return 0;
	pr_warn("%s: %s", what, msg ? msg : sqlite3_errmsg(db));
	sqlite3_free(msg);
	return -EIO;
}

static int count_rows(sqlite3 *db, const char *sql, long long *n, char *err, size_t len)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*n = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
	}
	if (rc != SQLITE_OK)
		snprintf(err, len, "%s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : -EIO;
}

/* Create @path as an empty recording (schema and views), so that query -i opens it. */
static int create_recording(const char *path)
{
	struct store *st = NULL;
	int err;

	err = store__create(path, 0, &st);
	if (err)
		return err;
	err = store__meta_text(st, "source", "probing query --save (python.torch_trace)");
	err = err ?: store__meta_real(st, "start", now_real_ns() / 1e9);
	err = err ?: store__flush(st);
	if (err) {
		store__discard(st);
		return err;
	}
	return store__close(st);
}

/*
 * Copy the rows of @sel (a statement on the live database) into the file through @ins (an
 * INSERT with as many parameters as @sel has columns). *@added = rows inserted.
 */
static int copy_rows(sqlite3 *live, sqlite3_stmt *sel, sqlite3 *file, sqlite3_stmt *ins,
		     long long *added)
{
	int i, rc, ncol = sqlite3_column_count(sel);

	while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
		for (i = 0; i < ncol; i++)
			sqlite3_bind_value(ins, i + 1, sqlite3_column_value(sel, i));
		rc = sqlite3_step(ins);
		sqlite3_reset(ins);
		if (rc != SQLITE_DONE) {
			pr_warn("%s", sqlite3_errmsg(file));
			return rc == SQLITE_FULL ? -ENOSPC : -EIO;
		}
		*added += sqlite3_changes(file);
	}
	if (rc != SQLITE_DONE) {
		pr_warn("%s", sqlite3_errmsg(live));
		return -EIO;
	}
	return 0;
}

int torchtrace__save(sqlite3 *live, const char *user_path, long long *added, long long *total)
{
	sqlite3_stmt *sel = NULL, *ins = NULL;
	struct trace_sql q = {0};
	struct outpath op = {0};
	sqlite3 *file = NULL;
	const char *path;
	char msg[512];
	long long n = 0, procs = 0;
	struct stat sb;
	bool created = false, in_tx = false;
	int err;

	*added = *total = 0;
	/*
	 * Where to write (outfile.h's rules: a regular file or a new one, a symbolic link
	 * followed, read-only files and anything else refused), then the live table: if the
	 * hooks are not there, say so before touching files.
	 */
	err = outpath__check(user_path, 0, &op);
	if (err)
		return err;
	path = op.dest;
	err = trace_sql(&q);
	if (err) {
		pr_warn("cannot save python.torch_trace: %s",
			err == -ENOENT ? "this build declares no such table" : strerror(-err));
		goto cleanup;
	}
	err = count_rows(live, "SELECT count(*) FROM python.torch_trace", &n, msg, sizeof(msg));
	if (err) {
		pr_warn("cannot save python.torch_trace: %s", msg);
		goto cleanup;
	}
	if (stat(path, &sb)) {
		if (errno != ENOENT) {
			err = -errno;
			pr_warn("cannot save into %s: %s", user_path, strerror(errno));
			goto cleanup;
		}
		/* Created whole (store.h): no half-made file is left if this fails. */
		err = create_recording(path);
		if (err)
			goto cleanup;
		created = true;
	} else {
		/* Only into a recording: query -i must be able to open the result. */
		err = recording__open(path, &file);
		recording__close(file);
		file = NULL;
		if (err) {
			pr_warn("not saving into %s: give a new file name or a probing recording",
				user_path);
			goto cleanup;
		}
	}
	/* A connection of its own: the live database is in-memory, and so would be anything
	 * attached to it (SQLITE_OPEN_MEMORY is inherited by ATTACH). */
	if (sqlite3_open_v2(path, &file, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, NULL) !=
	    SQLITE_OK) {
		pr_warn("cannot open %s: %s", path, file ? sqlite3_errmsg(file) : "out of memory");
		err = -EIO;
		goto cleanup;
	}
	sqlite3_busy_timeout(file, 5000); /* a recorder may be flushing into it */
	err = exec_sql(file, "BEGIN IMMEDIATE", path);
	if (err)
		goto cleanup;
	in_tx = true;
	err = exec_sql(file, sb_str(&q.create), path);
	if (err)
		goto cleanup;
	if (sqlite3_prepare_v2(live, sb_str(&q.select), -1, &sel, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(file, sb_str(&q.insert), -1, &ins, NULL) != SQLITE_OK) {
		pr_warn("saving python.torch_trace: %s",
			sel ? sqlite3_errmsg(file) : sqlite3_errmsg(live));
		err = -EIO;
		goto cleanup;
	}
	err = copy_rows(live, sel, file, ins, added);
	if (err)
		goto cleanup;
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	sel = ins = NULL;
	/* The process, when the live database knows it (not over TCP): best effort. */
	if (sqlite3_prepare_v2(live,
			       "SELECT pid, ppid, command, exe, start_time FROM system.process", -1,
			       &sel, NULL) == SQLITE_OK &&
	    sqlite3_prepare_v2(
		    file,
		    "INSERT OR IGNORE INTO processes(pid, ppid, command, exe, start_time) "
		    "VALUES(?, ?, ?, ?, ?)",
		    -1, &ins, NULL) == SQLITE_OK)
		copy_rows(live, sel, file, ins, &procs);
	err = exec_sql(file, "COMMIT", path);
	if (err)
		goto cleanup;
	in_tx = false;
	err = count_rows(file, "SELECT count(*) FROM torch_trace", total, msg, sizeof(msg));
	if (err)
		pr_warn("%s: %s", path, msg);
cleanup:
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	if (in_tx)
		sqlite3_exec(file, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(file);
	if (err && created)
		unlink(path); /* the empty recording made above */
	outpath__release(&op);
	trace_sql_free(&q);
	return err;
}

int torchtrace__alias(sqlite3 *db, const char *path)
{
	char msg[256];
	long long n = 0;
	int err;

	err = count_rows(db,
			 "SELECT count(*) FROM main.sqlite_master WHERE type = 'table' AND name = "
			 "'torch_trace'",
			 &n, msg, sizeof(msg));
	if (err || !n)
		return 0; /* nothing to alias; the caller's queries report any real trouble */
	/* Read-only like the connection (recording__open). */
	err = recording__attach_self(db, "python");
	if (err)
		pr_warn("%s: cannot show torch_trace as python.torch_trace: %s", path,
			sqlite3_errmsg(db));
	return err;
}

/* ---- Chrome trace JSON ------------------------------------------------------------------- */

#define LANES_MAX 255
#define CLIP_NS	  1000 /* ends this far past the enclosing event's are rounding: clipped */

/* Round to the nearest integer (no libm for this). */
static int64_t round_ns(double x)
{
	return (int64_t)(x >= 0 ? x + 0.5 : x - 0.5);
}

/* The open events of one track: a stack of end times (ns). */
struct lane {
	int64_t *ends;
	size_t n, cap;
};

/* The tracks of one (pid, tid): lane 0 is the thread's own, others hold overlaps. */
struct lanes {
	struct lane l[LANES_MAX + 1];
	int used;
};

static void lanes_reset(struct lanes *ls)
{
	for (int i = 0; i < ls->used; i++)
		ls->l[i].n = 0;
	ls->used = 0;
}

static void lanes_free(struct lanes *ls)
{
	for (int i = 0; i <= LANES_MAX; i++)
		free(ls->l[i].ends);
}

/*
 * Place the event [start, *end) (events come sorted by start, longest first) on the first
 * lane where it nests; clip *end when it overshoots by rounding only. Return the lane, or
 * -ENOMEM.
 */
static int lanes_place(struct lanes *ls, int64_t start, int64_t *end)
{
	int i;

	for (i = 0; i <= LANES_MAX; i++) {
		struct lane *l = &ls->l[i];

		if (i >= ls->used)
			ls->used = i + 1;
		while (l->n && l->ends[l->n - 1] <= start)
			l->n--;
		if (l->n && *end > l->ends[l->n - 1]) {
			if (*end - l->ends[l->n - 1] > CLIP_NS && i < LANES_MAX)
				continue;
			*end = l->ends[l->n - 1];
		}
		if (grow_array(&l->ends, &l->cap, l->n + 1, sizeof(*l->ends)))
			return -ENOMEM;
		l->ends[l->n++] = *end;
		return i;
	}
	return LANES_MAX; /* not reached */
}

/* The track of the steps: not a real tid either (and not 0, which some readers single out). */
#define STEPS_TID ((1 << 30) - 1)

/* Another track for overlapping events: never a real tid (those are < 2^22, PID_MAX_LIMIT). */
static long long lane_tid(long long tid, int lane)
{
	return lane ? (1LL << 30) | ((long long)lane << 22) | (tid & ((1 << 22) - 1)) : tid;
}

static int put_ns(struct strbuf *sb, const char *key, int64_t ns)
{
	/* Microseconds with three decimals, exactly (no floating point in the output). */
	return sb_printf(sb, "\"%s\": %s%" PRId64 ".%03" PRId64, key, ns < 0 ? "-" : "",
			 (ns < 0 ? -ns : ns) / 1000, (ns < 0 ? -ns : ns) % 1000);
}

static int put_int_arg(struct strbuf *sb, sqlite3_stmt *st, int col, const char *key)
{
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return 0;
	return sb_printf(sb, ", \"%s\": %lld", key, (long long)sqlite3_column_int64(st, col));
}

/* One metadata event naming a process or thread. */
static int put_name(struct strbuf *sb, const char *what, long long pid, long long tid,
		    const char *name)
{
	int err = sb_printf(sb,
			    ",\n{\"name\": \"%s\", \"ph\": \"M\", \"pid\": %lld, \"tid\": %lld, "
			    "\"args\": {\"name\": ",
			    what, pid, tid);

	err = err ?: jq_quote(sb, name);
	return err ?: sb_puts(sb, "}}");
}

/* The writer's state: the output so far, the tracks of the current process or thread. */
struct chrome {
	sqlite3 *db;
	const char *table;
	FILE *f;
	double base;	     /* unix seconds of time 0 in the output */
	struct lanes *ls;    /* the tracks of the current process (steps) or thread (events) */
	struct strbuf sb;    /* output not yet written */
	struct strbuf names; /* metadata events written at the end (names of overlap tracks) */
	struct strbuf name;  /* scratch: an event's name */
	size_t first;	     /* where in sb the first event's leading comma is; 0: written */
	long long events;    /* complete events of the rows (not steps, not metadata) */
};

/* Write what @c holds to its file (the first event's leading comma made a space). */
static int chrome_flush(struct chrome *c)
{
	struct strbuf *sb = &c->sb;

	if (c->first && sb->len > c->first && sb->buf[c->first] == ',')
		sb->buf[c->first] = ' ';
	c->first = 0;
	if (sb->len && fwrite(sb->buf, 1, sb->len, c->f) != sb->len)
		return -EIO;
	sb_reset(sb);
	return 0;
}

/* Prepare @fmt with the table's name for its %s. -EINVAL with the error printed, -ENOMEM. */
static int chrome_prepare(struct chrome *c, const char *fmt, sqlite3_stmt **st)
{
	char *sql = sqlite3_mprintf(fmt, c->table);
	int err = 0;

	if (!sql)
		return -ENOMEM;
	if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) != SQLITE_OK) {
		pr_warn("%s", sqlite3_errmsg(c->db));
		err = -EINVAL;
	}
	sqlite3_free(sql);
	return err;
}

/* After the last sqlite3_step() of a query: 0 if it ended well, else -EINVAL (printed). */
static int chrome_done(struct chrome *c, int rc)
{
	if (rc == SQLITE_DONE)
		return 0;
	pr_warn("%s", sqlite3_errmsg(c->db));
	return -EINVAL;
}

/* Unix seconds (a time of the table) to ns since the base. */
static int64_t chrome_ns(const struct chrome *c, double unix_s)
{
	return round_ns((unix_s - c->base) * 1e9);
}

/*
 * The base: midnight UTC of the first row's day. Times relative to it are small numbers that
 * keep nanosecond precision through a reader's double (absolute microseconds since 1970 would
 * not), and files of several ranks from one day share it. -ENOENT: no row with a time.
 */
static int chrome_base(struct chrome *c)
{
	sqlite3_stmt *st = NULL;
	double min_ts;
	int err;

	err = chrome_prepare(c,
			     "SELECT min(ts), count(*) FROM %s WHERE ts IS NOT NULL AND "
			     "duration IS NOT NULL",
			     &st);
	if (err)
		return err;
	if (sqlite3_step(st) != SQLITE_ROW) {
		pr_warn("%s", sqlite3_errmsg(c->db));
		err = -EINVAL;
	} else if (!sqlite3_column_int64(st, 1)) {
		err = -ENOENT;
	} else {
		min_ts = sqlite3_column_double(st, 0);
		c->base = min_ts > 0 ? (double)(int64_t)(min_ts / 86400.0) * 86400.0 : 0;
	}
	sqlite3_finalize(st);
	return err;
}

/* A process's metadata: its name (with its rank when known), its order, its "steps" track. */
static int put_process(struct strbuf *sb, long long pid, sqlite3_stmt *st, int col_rank, int col_ws)
{
	bool ranked = sqlite3_column_type(st, col_rank) != SQLITE_NULL;
	long long rank = sqlite3_column_int64(st, col_rank);
	char label[128];
	int err;

	if (ranked)
		snprintf(label, sizeof(label), "rank %lld/%lld (pid %lld)", rank,
			 (long long)sqlite3_column_int64(st, col_ws), pid);
	else
		snprintf(label, sizeof(label), "pid %lld", pid);
	err = put_name(sb, "process_name", pid, 0, label);
	err = err ?: sb_puts(sb, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", ");
	err = err
		      ?: sb_printf(sb,
				   "\"pid\": %lld, \"tid\": 0, \"args\": {\"sort_index\": %lld}}",
				   pid, ranked ? rank : pid);
	err = err ?: put_name(sb, "thread_name", pid, STEPS_TID, "steps");
	err = err ?: sb_puts(sb, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", ");
	return err
		       ?: sb_printf(sb,
				    "\"pid\": %lld, \"tid\": %d, \"args\": {\"sort_index\": -1}}",
				    pid, STEPS_TID);
}

/* Per process, its metadata and its "steps" track: an event per step, from its rows' first
 * start to their last end (overlapping steps on extra tracks below it). */
static int put_steps(struct chrome *c)
{
	sqlite3_stmt *st = NULL;
	long long cur_pid = -1;
	int rc = SQLITE_DONE, lane, err;

	err = chrome_prepare(c,
			     "SELECT pid, max(rank), max(world_size), step, min(ts), max(ts + "
			     "duration) FROM %s WHERE ts IS NOT NULL AND duration IS NOT NULL AND "
			     "step IS NOT NULL GROUP BY pid, step ORDER BY pid, 5",
			     &st);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		long long pid = sqlite3_column_int64(st, 0), step = sqlite3_column_int64(st, 3);
		int64_t s = chrome_ns(c, sqlite3_column_double(st, 4));
		int64_t e = chrome_ns(c, sqlite3_column_double(st, 5));

		if (pid != cur_pid) {
			lanes_reset(c->ls);
			cur_pid = pid;
			err = put_process(&c->sb, pid, st, 1, 2);
			if (err)
				break;
		}
		lane = lanes_place(c->ls, s, &e);
		if (lane < 0) {
			err = lane;
			break;
		}
		err = sb_printf(&c->sb,
				",\n{\"name\": \"step %lld\", \"cat\": \"step\", \"ph\": \"X\", ",
				step);
		err = err ?: put_ns(&c->sb, "ts", s);
		err = err ?: sb_puts(&c->sb, ", ");
		err = err ?: put_ns(&c->sb, "dur", e - s);
		err = err
			      ?: sb_printf(&c->sb,
					   ", \"pid\": %lld, \"tid\": %lld, \"args\": {\"step\": "
					   "%lld}}",
					   pid, (long long)(STEPS_TID - lane), step);
	}
	if (!err)
		err = chrome_done(c, rc);
	sqlite3_finalize(st);
	return err;
}

/* Names of the extra tracks (1..@maxlane) of thread @tid, called @tname: to c->names. */
static int put_overlap_names(struct chrome *c, long long pid, long long tid, const char *tname,
			     int maxlane)
{
	char label[160];
	int i, err = 0;

	for (i = 1; i <= maxlane && !err; i++) {
		snprintf(label, sizeof(label), "%s (overlap %d)", tname ? tname : "thread", i);
		err = put_name(&c->names, "thread_name", pid, lane_tid(tid, i), label);
	}
	return err;
}

/* The columns of put_events()'s query. */
enum {
	C_PID,
	C_TID,
	C_THREAD,
	C_STEP,
	C_MODULE,
	C_STAGE,
	C_TS,
	C_DUR,
	C_DEPTH,
	C_ALLOC,
	C_MAX,
	C_RES
};

/* The complete event of the row @st, [@s, @e) ns on track @lane of its thread, to c->sb. */
static int put_event(struct chrome *c, sqlite3_stmt *st, int lane, int64_t s, int64_t e)
{
	const char *module = (const char *)sqlite3_column_text(st, C_MODULE);
	const char *stage = (const char *)sqlite3_column_text(st, C_STAGE);
	struct strbuf *sb = &c->sb, *name = &c->name;
	int err;

	/* Backward rows "module (backward)", optimizer steps "Class.step". */
	if (stage && !strcmp(stage, "backward"))
		err = sb_printf(name, "%s (backward)", module ? module : "?");
	else if (stage && !strcmp(stage, "step"))
		err = sb_printf(name, "%s.step", module ? module : "optimizer");
	else
		err = sb_puts(name, module ? module : "?");
	err = err ?: sb_puts(sb, ",\n{\"name\": ");
	err = err ?: jq_quote(sb, sb_str(name));
	sb_reset(name);
	err = err ?: sb_puts(sb, ", \"cat\": ");
	err = err ?: jq_quote(sb, stage ? stage : "?");
	err = err ?: sb_puts(sb, ", \"ph\": \"X\", ");
	err = err ?: put_ns(sb, "ts", s);
	err = err ?: sb_puts(sb, ", ");
	err = err ?: put_ns(sb, "dur", e - s);
	err = err
		      ?: sb_printf(sb, ", \"pid\": %lld, \"tid\": %lld, \"args\": {\"module\": ",
				   (long long)sqlite3_column_int64(st, C_PID),
				   lane_tid(sqlite3_column_int64(st, C_TID), lane));
	err = err ?: jq_quote(sb, module ? module : "");
	err = err ?: put_int_arg(sb, st, C_STEP, "step");
	err = err ?: put_int_arg(sb, st, C_DEPTH, "depth");
	err = err ?: put_int_arg(sb, st, C_ALLOC, "allocated");
	err = err ?: put_int_arg(sb, st, C_MAX, "max_allocated");
	err = err ?: put_int_arg(sb, st, C_RES, "reserved");
	return err ?: sb_puts(sb, "}}");
}

/*
 * The rows, per thread in start order, the enclosing (longer) one first: a name for each
 * thread, an event per row on the first of its tracks where it nests; the extra tracks'
 * names go to c->names. Written out every MiB.
 */
static int put_events(struct chrome *c)
{
	sqlite3_stmt *st = NULL;
	long long cur_pid = -1, cur_tid = -1;
	char *tname = NULL;
	int rc = SQLITE_DONE, lane, maxlane = 0, err;

	err = chrome_prepare(c,
			     "SELECT pid, tid, thread, step, module, stage, ts, duration, depth, "
			     "allocated, max_allocated, reserved FROM %s WHERE ts IS NOT NULL AND "
			     "duration IS NOT NULL ORDER BY pid, tid, ts, duration DESC",
			     &st);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		long long pid = sqlite3_column_int64(st, C_PID);
		long long tid = sqlite3_column_int64(st, C_TID);
		const char *thread = (const char *)sqlite3_column_text(st, C_THREAD);
		int64_t s = chrome_ns(c, sqlite3_column_double(st, C_TS));
		int64_t e = s + round_ns(sqlite3_column_double(st, C_DUR) * 1e9);

		if (pid != cur_pid || tid != cur_tid) {
			/* The previous thread's extra tracks get their names now. */
			if (cur_tid >= 0)
				err = put_overlap_names(c, cur_pid, cur_tid, tname, maxlane);
			free(tname);
			tname = NULL;
			if (thread)
				tname = strdup(thread);
			else if (asprintf(&tname, "thread %lld", tid) < 0)
				tname = NULL;
			err = err ?: (tname ? 0 : -ENOMEM);
			err = err ?: put_name(&c->sb, "thread_name", pid, tid, tname);
			if (err)
				break;
			lanes_reset(c->ls);
			maxlane = 0;
			cur_pid = pid;
			cur_tid = tid;
		}
		if (e < s)
			e = s;
		lane = lanes_place(c->ls, s, &e);
		if (lane < 0) {
			err = lane;
			break;
		}
		if (lane > maxlane)
			maxlane = lane;
		err = put_event(c, st, lane, s, e);
		if (!err)
			c->events++;
		if (!err && c->sb.len > (1 << 20))
			err = chrome_flush(c);
	}
	if (!err)
		err = chrome_done(c, rc);
	if (!err && cur_tid >= 0)
		err = put_overlap_names(c, cur_pid, cur_tid, tname, maxlane);
	free(tname);
	sqlite3_finalize(st);
	return err;
}

int torchtrace__chrome(sqlite3 *db, const char *table, FILE *f, long long *events)
{
	struct chrome c = {.db = db, .table = table, .f = f};
	int err;

	if (events)
		*events = 0;
	c.ls = calloc(1, sizeof(*c.ls));
	if (!c.ls)
		return -ENOMEM;
	err = chrome_base(&c);
	err = err
		      ?: sb_printf(&c.sb,
				   "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"generator\": "
				   "\"probing\", \"source\": \"%s\", \"base_unix\": %.0f},\n"
				   "\"traceEvents\": [",
				   table, c.base);
	/* Every event is written as ",\n{...}": the first one's comma goes at the first flush. */
	c.first = c.sb.len;
	err = err ?: put_steps(&c);
	err = err ?: put_events(&c);
	err = err ?: sb_append(&c.sb, c.names.buf ? c.names.buf : "", c.names.len);
	err = err ?: sb_puts(&c.sb, "\n]}\n");
	err = err ?: chrome_flush(&c);
	if (!err && fflush(f))
		err = -EIO;
	if (!err && events)
		*events = c.events;
	sb_free(&c.sb);
	sb_free(&c.names);
	sb_free(&c.name);
	lanes_free(c.ls);
	free(c.ls);
	return err;
}
