// SPDX-License-Identifier: MIT
/*
 * Merging recordings (merge.h). Every input is checked first, through its own read-only
 * connection (report/recording.c); then the output is built in OUTPUT.partial, one input at
 * a time attached read-only to it, in one transaction, with SQL: pids are mapped in a temp
 * table, frames and stacks interned again, rows copied column by column (the columns are read
 * from the files, so columns a later version adds to a table are carried over).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sqlite3.h>

#include "base/log.h"
#include "base/outfile.h"
#include "base/util.h"
#include "live/btjob.h"
#include "record/store.h"
#include "report/merge.h"
#include "report/recording.h"

/* Above any pid the kernel gives (PID_MAX_LIMIT on 64-bit): a remapped pid is never real. */
#define PID_SPACE 4194304LL

/* The tables of a recording merge knows; torch_trace (query --save) is optional. */
static const char *const known_tables[] = {
	"meta",		"processes",	 "threads",	    "frame_defs",  "stacks",
	"stack_frames", "sample_counts", "collectives_raw", "torch_trace", NULL};

/* The tables of a backtrace snapshot (live/btsnap.c); crash and bt_locals: a crash file's. */
static const char *const snapshot_tables[] = {"meta",  "bt_processes", "bt_threads", "bt_frames",
					      "crash", "bt_locals",    NULL};

/*
 * Tables an input may have or not: a recording's torch_trace (query --save), a crash file's
 * crash and bt_locals (live/crashsnap.c). Where two inputs both have one, it must be the same.
 */
static const char *const optional_tables[] = {"torch_trace", "crash", "bt_locals"};
#define OPTIONAL_TABLES ARRAY_SIZE(optional_tables)

/* The tables a watch report has besides a recording's and a snapshot's (watch/watch.c); a
 * merged report's own, watch_node_stalls, is read apart (read_format). */
static const char *const report_tables[] = {"watch_stall", "watch_ranks", NULL};

/* meta keys merged by a rule of their own (merge.h); the others are kept when all agree. */
static const char *const summed_keys[] = {
	"samples",  "lost", "complete_native_stacks", "recorder_cpu", "bpf_run_ns",
	"bpf_runs", NULL};

struct input {
	const char *path;
	unsigned int kind; /* RECORDING_SAMPLES or RECORDING_BACKTRACE */
	bool report;	   /* a watch report: a recording with a snapshot and watch_* tables */
	bool node_stalls;  /* a merged report: its nodes' stalls in watch_node_stalls */
	dev_t dev;
	ino_t ino;
	char *tables;	 /* "name(col type pk, ...);..." of every table, sorted: the format */
	char *frequency; /* meta values, NULL when missing */
	char *clock;
	char *version;
	char *host;
	char *format;			/* a snapshot's meta 'format' */
	bool optional[OPTIONAL_TABLES]; /* which of optional_tables it has */
};

static char *column_text(sqlite3_stmt *st, int i)
{
	const unsigned char *s = sqlite3_column_text(st, i);

	return s ? strdup((const char *)s) : NULL;
}

static bool streq(const char *a, const char *b)
{
	return a && b && !strcmp(a, b);
}

/* Run @sql on @db; on failure print "cannot merge: @what: <SQLite's reason>" and return -EIO. */
static int exec(sqlite3 *db, const char *what, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc == SQLITE_OK)
		return 0;
	pr_warn("cannot merge: %s: %s", what, msg ? msg : sqlite3_errstr(rc));
	sqlite3_free(msg);
	return rc == SQLITE_NOMEM ? -ENOMEM : rc == SQLITE_FULL ? -ENOSPC : -EIO;
}

/* As exec, @sql made with printf's @fmt (only numbers and our own names go in). */
static int execf(sqlite3 *db, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int execf(sqlite3 *db, const char *what, const char *fmt, ...)
{
	va_list ap;
	char *sql;
	int err;

	va_start(ap, fmt);
	sql = sqlite3_vmprintf(fmt, ap);
	va_end(ap);
	if (!sql)
		return -ENOMEM;
	err = exec(db, what, sql);
	sqlite3_free(sql);
	return err;
}

/* ---- checking the inputs ------------------------------------------------------------------ */

static bool in_list(const char *const *t, const char *name)
{
	for (int i = 0; t[i]; i++)
		if (!strcmp(t[i], name))
			return true;
	return false;
}

static bool known_table(const struct input *in, const char *name)
{
	if (in->report)
		return in_list(known_tables, name) || in_list(snapshot_tables, name) ||
		       in_list(report_tables, name);
	return in_list(in->kind == RECORDING_BACKTRACE ? snapshot_tables : known_tables, name);
}

/*
 * Read what @in's file is made of, through @db: its tables with their columns (merge's own
 * processes.host and host_pid, watch_ranks.host, watch_stall.host and watch_node_stalls left
 * out: a merged file merges again with unmerged ones) and the meta values the checks need.
 * Return 0 or -errno with the reason printed.
 */
static int read_format(sqlite3 *db, struct input *in)
{
	static const char tables_sql[] =
		"SELECT m.name, group_concat(c.name || ' ' || c.type || ' ' || c.pk, ', ')"
		" FROM sqlite_master m, pragma_table_info(m.name) c"
		" WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
		" AND NOT (m.name = 'processes' AND c.name IN ('host', 'host_pid'))"
		" AND NOT (m.name IN ('watch_ranks', 'watch_stall') AND c.name = 'host')"
		" AND m.name != 'watch_node_stalls'"
		" GROUP BY m.name ORDER BY m.name";
	static const char meta_sql[] =
		"SELECT key, value FROM meta"
		" WHERE key IN ('frequency', 'clock', 'probing_version', 'host',"
		" 'format')";
	struct strbuf sb = {0};
	sqlite3_stmt *st = NULL;
	int rc, err = 0;

	/* A watch report (watch/watch.c): a recording, a snapshot and watch_* tables. */
	in->report = sqlite3_table_column_metadata(db, NULL, "watch_stall", "time", NULL, NULL,
						   NULL, NULL, NULL) == SQLITE_OK;
	in->node_stalls = sqlite3_table_column_metadata(db, NULL, "watch_node_stalls", "host", NULL,
							NULL, NULL, NULL, NULL) == SQLITE_OK;
	if (in->report && in->kind != RECORDING_SAMPLES) {
		pr_warn("cannot merge %s: a watch report without its recording's tables", in->path);
		return -EPROTO;
	}
	rc = sqlite3_prepare_v2(db, tables_sql, -1, &st, NULL);
	while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		const char *cols = (const char *)sqlite3_column_text(st, 1);

		if (!name)
			continue;
		if (!known_table(in, name)) {
			pr_warn("cannot merge %s: it has a table '%s' that this probing does not "
				"know (made by a newer version of probing?)",
				in->path, name);
			pr_warn("Merge it with the version of probing that recorded it.");
			err = -EPROTO;
			goto cleanup;
		}
		for (size_t o = 0; o < OPTIONAL_TABLES; o++)
			if (!strcmp(name, optional_tables[o]))
				in->optional[o] = true;
		if (sb_printf(&sb, "%s(%s);", name, cols ? cols : "")) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	if (rc != SQLITE_DONE)
		goto sqlfail;
	sqlite3_finalize(st);
	st = NULL;
	in->tables = strdup(sb_str(&sb));
	if (!in->tables) {
		err = -ENOMEM;
		goto cleanup;
	}
	rc = sqlite3_prepare_v2(db, meta_sql, -1, &st, NULL);
	while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		char **dst = streq(key, "format")	     ? &in->format
			     : streq(key, "frequency")	     ? &in->frequency
			     : streq(key, "clock")	     ? &in->clock
			     : streq(key, "probing_version") ? &in->version
							     : &in->host;

		free(*dst);
		*dst = column_text(st, 1);
	}
	if (rc != SQLITE_DONE)
		goto sqlfail;
	goto cleanup;
sqlfail:
	pr_warn("cannot read the recording %s: %s", in->path, sqlite3_errmsg(db));
	err = -EIO;
cleanup:
	sqlite3_finalize(st);
	sb_free(&sb);
	return err;
}

/* The first table whose definition differs between @a and @b (as "name"), in @buf. */
static const char *first_difference(const char *a, const char *b, char *buf, size_t size)
{
	const char *ea, *eb;

	while (*a || *b) {
		ea = strchr(a, ';');
		eb = strchr(b, ';');
		if (!ea || !eb || ea - a != eb - b || memcmp(a, b, ea - a)) {
			const char *s = ea && (!eb || strcmp(a, b) < 0) ? a : b;
			size_t n = strcspn(s, "(");

			snprintf(buf, size, "%.*s", (int)min(n, size - 1), s);
			return buf;
		}
		a = ea + 1;
		b = eb + 1;
	}
	snprintf(buf, size, "?");
	return buf;
}

/*
 * The "@name(...);" entry of the format @s (read_format), its length in @len; NULL when @s
 * has no table @name.
 */
static const char *table_entry(const char *s, const char *name, size_t *len)
{
	size_t n = strlen(name), l;
	const char *end;

	for (; *s; s += l) {
		end = strchr(s, ';');
		l = end ? (size_t)(end + 1 - s) : strlen(s);
		if (!strncmp(s, name, n) && s[n] == '(') {
			*len = l;
			return s;
		}
	}
	return NULL;
}

/* The format @s without the entries of optional_tables, in a new string. */
static char *without_optional(const char *s)
{
	char *out = strdup(s);
	const char *t;
	size_t len;

	for (size_t o = 0; out && o < OPTIONAL_TABLES; o++) {
		t = table_entry(out, optional_tables[o], &len);
		if (t)
			memmove((char *)t, t + len, strlen(t + len) + 1);
	}
	return out;
}

/* Whether @in has @table, one of optional_tables (a table that is not optional: true). */
static bool has_table(const struct input *in, const char *table)
{
	for (size_t o = 0; o < OPTIONAL_TABLES; o++)
		if (!strcmp(table, optional_tables[o]))
			return in->optional[o];
	return true;
}

/* The first optional table that @a and @b both have with different columns, or NULL. */
static const char *optional_difference(const struct input *a, const struct input *b)
{
	const char *ea, *eb;
	size_t la, lb;

	for (size_t o = 0; o < OPTIONAL_TABLES; o++) {
		if (!a->optional[o] || !b->optional[o])
			continue;
		ea = table_entry(a->tables, optional_tables[o], &la);
		eb = table_entry(b->tables, optional_tables[o], &lb);
		if (!ea || !eb || la != lb || memcmp(ea, eb, la))
			return optional_tables[o];
	}
	return NULL;
}

static const char *kind_name(const struct input *in)
{
	return in->report			 ? "watch report"
	       : in->kind == RECORDING_BACKTRACE ? "backtrace snapshot"
						 : "recording";
}

/* Check that @b can be merged with @a (merge.h). Return 0 or -EPROTO with the reason. */
static int check_compatible(const struct input *a, const struct input *b)
{
	char *ta = without_optional(a->tables), *tb = without_optional(b->tables);
	const char *optional = optional_difference(a, b);
	char table[128];
	int err = 0;

	if (!ta || !tb) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (a->kind != b->kind || a->report != b->report) {
		pr_warn("cannot merge %s, a %s, with %s, a %s", a->path, kind_name(a), b->path,
			kind_name(b));
		pr_warn("Merge recordings with recordings, backtrace snapshots with snapshots, "
			"watch reports with watch reports.");
		err = -EPROTO;
		goto cleanup;
	}
	if (a->format && b->format && strcmp(a->format, b->format)) {
		pr_warn("cannot merge %s with %s: they are snapshots of different formats (%s and "
			"%s; made by probing %s and %s)",
			a->path, b->path, a->format, b->format,
			a->version ? a->version : "of an unknown version",
			b->version ? b->version : "of an unknown version");
		pr_warn("Take every node's snapshot with the same version of probing.");
		err = -EPROTO;
		goto cleanup;
	}
	if (strcmp(ta, tb) || optional) {
		const char *which =
			strcmp(ta, tb) ? first_difference(ta, tb, table, sizeof(table)) : optional;

		pr_warn("cannot merge %s with %s: they are %ss of different formats "
			"(table '%s' differs; made by probing %s and %s)",
			a->path, b->path, kind_name(a), which,
			a->version ? a->version : "of an unknown version",
			b->version ? b->version : "of an unknown version");
		pr_warn("Use the same version of probing on every node.");
		err = -EPROTO;
		goto cleanup;
	}
	if (a->clock && b->clock && strcmp(a->clock, b->clock)) {
		pr_warn("cannot merge %s with %s: they sampled different events (%s and %s)",
			a->path, b->path, a->clock, b->clock);
		pr_warn("Merge recordings made with the same kind of sampling.");
		err = -EPROTO;
		goto cleanup;
	}
	if (a->frequency && b->frequency && strcmp(a->frequency, b->frequency)) {
		pr_warn("cannot merge %s with %s: they were recorded at %s Hz and %s Hz, so "
			"their samples do not weigh the same",
			a->path, b->path, a->frequency, b->frequency);
		pr_warn("Record every node with the same -F.");
		err = -EPROTO;
	}
cleanup:
	free(ta);
	free(tb);
	return err;
}

/* Open, identify and check @in. Return 0 or -errno with the reason printed. */
static int check_input(struct input *in)
{
	sqlite3 *db = NULL;
	struct stat sb;
	int err;

	err = recording__open_kind(in->path, RECORDING_SAMPLES | RECORDING_BACKTRACE, &db,
				   &in->kind);
	if (err) {
		if (err == -EPROTO || err == -EINVAL)
			pr_warn("probing merge takes recordings ('probing record -o FILE' on each "
				"node) or backtrace snapshots ('probing backtrace -o FILE').");
		return err;
	}
	if (stat(in->path, &sb)) {
		err = -errno;
		pr_warn("cannot read %s: %s", in->path, strerror(errno));
		goto cleanup;
	}
	in->dev = sb.st_dev;
	in->ino = sb.st_ino;
	err = read_format(db, in);
cleanup:
	recording__close(db);
	return err;
}

static void free_input(struct input *in)
{
	free(in->tables);
	free(in->frequency);
	free(in->format);
	free(in->clock);
	free(in->version);
	free(in->host);
}

/* ---- building the output ------------------------------------------------------------------ */

/*
 * The columns of @schema.@table of @db, in order, into @cols (names quoted for SQL, each
 * followed by a NUL; @n of them). @skip (NULL-terminated names) are left out.
 */
static int table_columns(sqlite3 *db, const char *schema, const char *table,
			 const char *const *skip, struct strbuf *cols, int *n)
{
	sqlite3_stmt *st = NULL;
	int rc, err = 0;

	sb_reset(cols);
	*n = 0;
	rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1, ?2)", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, schema, -1, SQLITE_STATIC);
	}
	while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		bool skipped = false;
		char *q;

		for (int i = 0; skip && skip[i] && name; i++)
			skipped |= !strcmp(skip[i], name);
		if (!name || skipped)
			continue;
		q = sqlite3_mprintf("\"%w\"", name);
		if (!q || sb_append(cols, q, strlen(q) + 1)) {
			sqlite3_free(q);
			err = -ENOMEM;
			goto cleanup;
		}
		sqlite3_free(q);
		(*n)++;
	}
	if (rc != SQLITE_DONE) {
		pr_warn("cannot merge: columns of %s: %s", table, sqlite3_errmsg(db));
		err = -EIO;
	}
cleanup:
	sqlite3_finalize(st);
	return err;
}

/* A column given its own expression in a copy: its quoted name, then the expression. */
struct colexpr {
	const char *col;
	const char *expr;
};

/*
 * Copy the rows of src.@table into main.@dest: every column of src.@table (alias s), a
 * column named in @special taken from its expression instead, @extra_cols (", a, b") given
 * @extra_vals (", x, y"), FROM src.@table s @join. Return 0 or -errno, printed.
 */
static int copy_rows_into(sqlite3 *db, const char *table, const char *dest,
			  const struct colexpr *special, const char *const *skip,
			  const char *extra_cols, const char *extra_vals, const char *join)
{
	struct strbuf cols = {0}, sql = {0};
	const char *c;
	int n, err;

	err = table_columns(db, "src", table, skip, &cols, &n);
	if (err)
		goto cleanup;
	err = sb_printf(&sql, "INSERT INTO main.\"%s\"(", dest);
	c = sb_str(&cols);
	for (int i = 0; i < n && !err; i++, c += strlen(c) + 1)
		err = sb_printf(&sql, "%s%s", i ? ", " : "", c);
	err = err ?: sb_printf(&sql, "%s) SELECT ", extra_cols);
	c = sb_str(&cols);
	for (int i = 0; i < n && !err; i++, c += strlen(c) + 1) {
		const char *expr = NULL;

		for (const struct colexpr *x = special; x && x->col; x++)
			if (!strcmp(x->col, c))
				expr = x->expr;
		err = expr ? sb_printf(&sql, "%s%s", i ? ", " : "", expr)
			   : sb_printf(&sql, "%ss.%s", i ? ", " : "", c);
	}
	err = err ?: sb_printf(&sql, "%s FROM src.\"%s\" s %s", extra_vals, table, join);
	if (err)
		goto cleanup;
	err = exec(db, table, sb_str(&sql));
cleanup:
	sb_free(&cols);
	sb_free(&sql);
	return err;
}

/* copy_rows_into @table itself. */
static int copy_rows(sqlite3 *db, const char *table, const struct colexpr *special,
		     const char *const *skip, const char *extra_cols, const char *extra_vals,
		     const char *join)
{
	return copy_rows_into(db, table, table, special, skip, extra_cols, extra_vals, join);
}

/*
 * An expression equal for two rows of frame_defs (m, s) exactly when every column but id is
 * (IS: NULLs equal), and the list of those columns, from main.frame_defs.
 */
static int frame_key(sqlite3 *db, struct strbuf *match, struct strbuf *list)
{
	static const char *const skip[] = {"id", NULL};
	struct strbuf cols = {0};
	const char *c;
	int n, err;

	err = table_columns(db, "main", "frame_defs", skip, &cols, &n);
	c = sb_str(&cols);
	for (int i = 0; i < n && !err; i++, c += strlen(c) + 1) {
		err = sb_printf(match, "%sm.%s IS s.%s", i ? " AND " : "", c, c);
		err = err ?: sb_printf(list, "%s%s", i ? ", " : "", c);
	}
	sb_free(&cols);
	return err;
}

/* The columns of src.stacks but stack_id, as "quote(s.a) || ',' || quote(s.b)". */
static int stack_attrs(sqlite3 *db, struct strbuf *attrs)
{
	static const char *const skip[] = {"stack_id", NULL};
	struct strbuf cols = {0};
	const char *c;
	int n, err;

	err = table_columns(db, "src", "stacks", skip, &cols, &n);
	c = sb_str(&cols);
	for (int i = 0; i < n && !err; i++, c += strlen(c) + 1)
		err = sb_printf(attrs, "%squote(s.%s)", i ? " || ',' || " : "", c);
	if (!err && !n)
		err = sb_puts(attrs, "''");
	sb_free(&cols);
	return err;
}

/*
 * Map every pid of src (processes, threads, sample_counts) to its pid in the output
 * (temp.pidmap: src, pid, host, host_pid), refusing a process already merged. Return 0 or
 * -errno with the reason printed.
 */
static int map_pids(sqlite3 *db, const struct input *in, bool has_host, bool has_host_pid)
{
	char *sql = sqlite3_mprintf(
		"SELECT u.pid, p.start_time, %s, %s FROM (SELECT pid FROM src.processes UNION"
		" SELECT pid FROM src.threads UNION SELECT pid FROM src.sample_counts) u"
		" LEFT JOIN src.processes p ON p.pid = u.pid ORDER BY u.pid",
		has_host ? "coalesce(p.host, ?1)" : "?1",
		has_host_pid ? "coalesce(p.host_pid, u.pid)" : "u.pid");
	sqlite3_stmt *st = NULL, *seen = NULL, *used = NULL, *add = NULL;
	int rc, err = 0;

	if (!sql)
		return -ENOMEM;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db,
					"SELECT 1 FROM main.processes WHERE host IS ?1 AND"
					" host_pid = ?2 AND start_time = ?3",
					-1, &seen, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, "SELECT 1 FROM temp.used WHERE pid = ?1", -1, &used,
					NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db,
					"INSERT INTO temp.pidmap(src, pid, host, host_pid)"
					" VALUES (?1, ?2, ?3, ?4)",
					-1, &add, NULL);
	if (rc != SQLITE_OK)
		goto sqlfail;
	if (in->host)
		sqlite3_bind_text(st, 1, in->host, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_int64 src = sqlite3_column_int64(st, 0), pid = src;
		sqlite3_int64 host_pid = sqlite3_column_int64(st, 3);
		const char *host = (const char *)sqlite3_column_text(st, 2);

		if (sqlite3_column_type(st, 1) != SQLITE_NULL) {
			sqlite3_bind_value(seen, 1, sqlite3_column_value(st, 2));
			sqlite3_bind_int64(seen, 2, host_pid);
			sqlite3_bind_value(seen, 3, sqlite3_column_value(st, 1));
			rc = sqlite3_step(seen);
			sqlite3_reset(seen);
			if (rc == SQLITE_ROW) {
				pr_warn("cannot merge %s: process %lld of host %s, started at the "
					"same time, is in an input already merged: the same "
					"recording twice?",
					in->path, (long long)host_pid, host ? host : "(unknown)");
				pr_warn("Give each node's file once.");
				err = -EEXIST;
				goto cleanup;
			}
			if (rc != SQLITE_DONE)
				goto sqlfail;
		}
		for (;;) {
			sqlite3_bind_int64(used, 1, pid);
			rc = sqlite3_step(used);
			sqlite3_reset(used);
			if (rc == SQLITE_DONE)
				break;
			if (rc != SQLITE_ROW)
				goto sqlfail;
			pid += PID_SPACE;
		}
		sqlite3_bind_int64(add, 1, src);
		sqlite3_bind_int64(add, 2, pid);
		sqlite3_bind_value(add, 3, sqlite3_column_value(st, 2));
		sqlite3_bind_int64(add, 4, host_pid);
		rc = sqlite3_step(add);
		sqlite3_reset(add);
		if (rc != SQLITE_DONE)
			goto sqlfail;
		err = execf(db, "pids", "INSERT INTO temp.used VALUES (%lld)", (long long)pid);
		if (err)
			goto cleanup;
	}
	if (rc == SQLITE_DONE)
		goto cleanup;
sqlfail:
	pr_warn("cannot merge %s: its processes: %s", in->path, sqlite3_errmsg(db));
	err = -EIO;
cleanup:
	sqlite3_finalize(st);
	sqlite3_finalize(seen);
	sqlite3_finalize(used);
	sqlite3_finalize(add);
	sqlite3_free(sql);
	return err;
}

/* Does src.@table (or main's, @schema) have a column @col? */
static bool has_column(sqlite3 *db, const char *schema, const char *table, const char *col)
{
	sqlite3_stmt *st = NULL;
	bool yes = false;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1, ?2) WHERE name = ?3", -1,
			       &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, schema, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, col, -1, SQLITE_STATIC);
		yes = sqlite3_step(st) == SQLITE_ROW;
	}
	sqlite3_finalize(st);
	return yes;
}

static int create_schema(sqlite3 *db, const struct input *in, struct strbuf *match,
			 struct strbuf *cols);
static int create_optional(sqlite3 *db, const char *table);

/*
 * Add the rows of the recording attached as src (input @i) to the output open on @db (the
 * frame index of create_schema: @match, @cols). Return 0 or -errno, printed.
 */
static int add_recording(sqlite3 *db, const struct input *in, int i, const struct strbuf *match,
			 const struct strbuf *cols)
{
	static const char *const proc_skip[] = {"host", "host_pid", NULL};
	static const struct colexpr proc_x[] = {
		{"\"pid\"", "m.pid"},
		{"\"ppid\"", "coalesce((SELECT pid FROM temp.pidmap WHERE src = s.ppid), s.ppid)"},
		{NULL, NULL}};
	static const struct colexpr pid_x[] = {{"\"pid\"", "m.pid"}, {NULL, NULL}};
	static const struct colexpr count_x[] = {
		{"\"pid\"", "m.pid"}, {"\"stack_id\"", "k.id"}, {NULL, NULL}};
	static const struct colexpr frame_x[] = {
		{"\"stack_id\"", "k.id"}, {"\"frame_id\"", "f.id"}, {NULL, NULL}};
	static const struct colexpr stack_x[] = {{"\"stack_id\"", "k.id"}, {NULL, NULL}};
	static const struct colexpr torch_x[] = {
		{"\"pid\"", "coalesce((SELECT pid FROM temp.pidmap WHERE src = s.pid), s.pid)"},
		{NULL, NULL}};
	static const char *const coll_skip[] = {"id", NULL};
	static const struct colexpr coll_x[] = {
		{"\"pid\"", "m.pid"},
		{"\"stack_id\"",
		 "CASE WHEN coalesce(s.stack_id, 0) = 0 THEN s.stack_id ELSE k.id END"},
		{NULL, NULL}};
	struct strbuf attrs = {0};
	char join[256];
	int err;

	err = exec(db, "temp tables",
		   "DELETE FROM temp.pidmap; DELETE FROM temp.fmap; DELETE FROM temp.skey");
	if (!err)
		err = map_pids(db, in, has_column(db, "src", "processes", "host"),
			       has_column(db, "src", "processes", "host_pid"));
	if (!err)
		err = copy_rows(db, "processes", proc_x, proc_skip, ", host, host_pid",
				", m.host, m.host_pid", "JOIN temp.pidmap m ON m.src = s.pid");
	if (!err)
		err = copy_rows(db, "threads", pid_x, NULL, "", "",
				"JOIN temp.pidmap m ON m.src = s.pid");
	/* Frames: the new ones added, then every frame of src mapped to its id here. */
	if (!err)
		err = execf(
			db, "frames",
			"INSERT INTO main.frame_defs(%s) SELECT DISTINCT %s FROM src.frame_defs s"
			" WHERE NOT EXISTS (SELECT 1 FROM main.frame_defs m WHERE %s);"
			"INSERT INTO temp.fmap(src, id) SELECT s.id, (SELECT m.id FROM"
			" main.frame_defs m WHERE %s LIMIT 1) FROM src.frame_defs s",
			sb_str(cols), sb_str(cols), sb_str(match), sb_str(match));
	/*
	 * Stacks: each src stack's key (its attributes and its frames' ids here, leaf first);
	 * keys not seen before get the next stack_ids (temp.mkey, kept across inputs), with
	 * their rows copied from the first src stack of that key.
	 */
	if (!err)
		err = stack_attrs(db, &attrs);
	if (!err)
		err = execf(db, "stacks",
			    "INSERT INTO temp.skey(src, key) SELECT s.stack_id, %s || ':' ||"
			    " coalesce((SELECT group_concat(id) FROM (SELECT f.id AS id FROM"
			    " src.stack_frames sf JOIN temp.fmap f ON f.src = sf.frame_id WHERE"
			    " sf.stack_id = s.stack_id ORDER BY sf.depth)), '') FROM src.stacks s;"
			    "INSERT INTO temp.mkey(key, id, round, rep) SELECT key, (SELECT"
			    " coalesce(max(stack_id), 0) FROM main.stacks) + row_number() OVER"
			    " (ORDER BY rep), %d, rep FROM (SELECT key, min(src) AS rep FROM"
			    " temp.skey WHERE key NOT IN (SELECT key FROM temp.mkey) GROUP BY key);"
			    "DELETE FROM temp.skey2; INSERT INTO temp.skey2(src, id) SELECT k.src,"
			    " m.id FROM temp.skey k JOIN temp.mkey m ON m.key = k.key",
			    sb_str(&attrs), i);
	sqlite3_snprintf(sizeof(join), join,
			 "JOIN temp.mkey k ON k.rep = s.stack_id AND k.round = %d", i);
	if (!err)
		err = copy_rows(db, "stacks", stack_x, NULL, "", "", join);
	sqlite3_snprintf(sizeof(join), join,
			 "JOIN temp.mkey k ON k.rep = s.stack_id AND k.round = %d"
			 " JOIN temp.fmap f ON f.src = s.frame_id",
			 i);
	if (!err)
		err = copy_rows(db, "stack_frames", frame_x, NULL, "", "", join);
	if (!err)
		err = copy_rows(db, "sample_counts", count_x, NULL, "", "",
				"JOIN temp.pidmap m ON m.src = s.pid"
				" JOIN temp.skey2 k ON k.src = s.stack_id");
	/* Collectives: new row ids (the key is per recording), pids and stacks mapped. */
	if (!err)
		err = copy_rows(db, "collectives_raw", coll_x, coll_skip, "", "",
				"JOIN temp.pidmap m ON m.src = s.pid"
				" LEFT JOIN temp.skey2 k ON k.src = s.stack_id");
	if (!err && has_table(in, "torch_trace"))
		err = copy_rows(db, "torch_trace", torch_x, NULL, "", "", "");
	sb_free(&attrs);
	return err;
}

/*
 * Add the rows of the backtrace snapshot attached as src to the output open on @db: they are
 * keyed by (host, pid) already; a process already there is refused. Return 0 or -errno.
 */
static int add_snapshot(sqlite3 *db, const struct input *in)
{
	static const char *const tables[] = {"bt_processes", "bt_threads", "bt_frames", "crash",
					     "bt_locals"};
	sqlite3_stmt *st = NULL;
	int err = 0;

	if (sqlite3_prepare_v2(db,
			       "SELECT s.host, s.pid FROM src.bt_processes s JOIN"
			       " main.bt_processes m ON m.host = s.host AND m.pid = s.pid LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK) {
		pr_warn("cannot read the snapshot %s: %s", in->path, sqlite3_errmsg(db));
		return -EIO;
	}
	if (sqlite3_step(st) == SQLITE_ROW) {
		const char *host = (const char *)sqlite3_column_text(st, 0);

		pr_warn("cannot merge %s: process %d of host %s is in an input already merged: "
			"the same snapshot twice, or snapshots of one host without its name?",
			in->path, sqlite3_column_int(st, 1), host && *host ? host : "(unknown)");
		pr_warn("Give each node's snapshot once.");
		err = -EEXIST;
	}
	sqlite3_finalize(st);
	for (size_t t = 0; t < ARRAY_SIZE(tables) && !err; t++)
		if (has_table(in, tables[t]))
			err = copy_rows(db, tables[t], NULL, NULL, "", "", "");
	return err;
}

/*
 * Add the watch tables of the report attached as src: its ranks and its stall (a merged
 * report's: its nodes' stalls), each row with its node's host (the report's meta 'host').
 * The job's own stall row is made once every report is in (merge_hooks). Return 0 or -errno.
 */
static int add_watch(sqlite3 *db, const struct input *in)
{
	static const char *const skip_host[] = {"host", NULL};
	char *host = sqlite3_mprintf(", %Q", in->host);
	int err;

	if (!host)
		return -ENOMEM;
	if (has_column(db, "src", "watch_ranks", "host"))
		err = copy_rows(db, "watch_ranks", NULL, NULL, "", "", "");
	else
		err = copy_rows(db, "watch_ranks", NULL, NULL, ", host", host, "");
	if (!err && in->node_stalls)
		err = copy_rows(db, "watch_node_stalls", NULL, NULL, "", "", "");
	else if (!err)
		err = copy_rows_into(db, "watch_stall", "watch_node_stalls", NULL, skip_host,
				     ", host", host, "");
	sqlite3_free(host);
	return err;
}

/*
 * Where a merged report keeps its nodes: watch_ranks.host, watch_node_stalls (each node's
 * watch_stall row and its host) and watch_stall.host (the culprit's), made unless the first
 * input, a merged report, has them.
 */
static int create_report_tables(sqlite3 *db)
{
	int err = 0;

	if (!has_column(db, "main", "watch_ranks", "host"))
		err = exec(db, "watch_ranks", "ALTER TABLE main.watch_ranks ADD COLUMN host TEXT");
	if (!err && !has_column(db, "main", "watch_node_stalls", "host"))
		err = exec(db, "watch_node_stalls",
			   "CREATE TABLE main.watch_node_stalls AS SELECT * FROM main.watch_stall"
			   " WHERE 0; ALTER TABLE main.watch_node_stalls ADD COLUMN host TEXT");
	if (!err && !has_column(db, "main", "watch_stall", "host"))
		err = exec(db, "watch_stall", "ALTER TABLE main.watch_stall ADD COLUMN host TEXT");
	return err;
}

/*
 * Add the input @in (number @i) to the output open on @db; the first one makes its tables
 * (create_schema: @match and @cols). Return 0 or -errno, printed.
 */
static int merge_one(sqlite3 *db, const struct input *in, int i, struct strbuf *match,
		     struct strbuf *cols)
{
	bool snapshot = in->kind == RECORDING_BACKTRACE;
	char *uri = recording__readonly_uri(in->path), *sql = NULL;
	bool attached = false;
	int err;

	if (!uri)
		return -ENOMEM;
	sql = sqlite3_mprintf("ATTACH %Q AS src", uri);
	if (!sql) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
		pr_warn("cannot read %s: %s", in->path, sqlite3_errmsg(db));
		err = -EIO;
		goto cleanup;
	}
	attached = true;
	/* One transaction per input: an attached file is detached only outside of one. */
	err = exec(db, "the output", "BEGIN");
	if (!err && !i)
		err = create_schema(db, in, match, cols);
	if (!err && !i && in->report)
		err = create_report_tables(db);
	for (size_t o = 0; o < OPTIONAL_TABLES && !err; o++)
		if (in->optional[o])
			err = create_optional(db, optional_tables[o]);
	if (!err)
		err = snapshot ? add_snapshot(db, in) : add_recording(db, in, i, match, cols);
	if (!err && in->report)
		err = add_snapshot(db, in);
	if (!err && in->report)
		err = add_watch(db, in);
	if (!err)
		err = execf(db, "meta",
			    "INSERT INTO temp.allmeta(i, key, value) SELECT %d, key, value"
			    " FROM src.meta",
			    i);
	if (!err)
		err = exec(db, "the output", "COMMIT");
cleanup:
	if (err)
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	if (attached && sqlite3_exec(db, "DETACH src", NULL, NULL, NULL) != SQLITE_OK && !err) {
		pr_warn("cannot merge %s: %s", in->path, sqlite3_errmsg(db));
		err = -EIO;
	}
	sqlite3_free(sql);
	free(uri);
	return err;
}

/*
 * The authorizer while a definition read from an input runs (define): a recording is
 * untrusted, and its sqlite_master may hold any text. Only CREATE TABLE and CREATE VIEW in
 * main, with their own indexes and what they read and write of the schema, are allowed: no
 * ATTACH (which makes files), no PRAGMA, no trigger, no temp object.
 */
static int define_only(void *ctx, int action, const char *a, const char *b, const char *db,
		       const char *trigger)
{
	switch (action) {
	case SQLITE_CREATE_TABLE:
	case SQLITE_CREATE_VIEW:
	case SQLITE_CREATE_INDEX: /* a PRIMARY KEY's or UNIQUE's own */
		return db && !strcmp(db, "main") ? SQLITE_OK : SQLITE_DENY;
	case SQLITE_INSERT:
	case SQLITE_UPDATE:
	case SQLITE_READ:
	case SQLITE_SELECT:
	case SQLITE_FUNCTION:
	case SQLITE_RECURSIVE:
		return SQLITE_OK;
	default:
		return SQLITE_DENY;
	}
}

/* Run @sql, a table's or a view's definition from an input: one statement, that only. */
static int define(sqlite3 *db, const char *what, const char *sql)
{
	sqlite3_stmt *st = NULL;
	const char *tail = NULL;
	int rc, err = 0;

	sqlite3_set_authorizer(db, define_only, NULL);
	rc = sqlite3_prepare_v2(db, sql, -1, &st, &tail);
	if (rc == SQLITE_OK && st && !tail[strspn(tail, " \t\r\n;")])
		rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
	else if (rc == SQLITE_OK)
		rc = SQLITE_MISUSE;
	if (rc != SQLITE_OK) {
		pr_warn("cannot merge: %s: %s", what,
			rc == SQLITE_MISUSE ? "not one table definition" : sqlite3_errmsg(db));
		err = -EPROTO;
	}
	sqlite3_finalize(st);
	sqlite3_set_authorizer(db, NULL, NULL);
	return err;
}

/*
 * The output's tables and views, from the first input @in (attached as src), and, for a
 * recording, what merging needs of them: processes.host and host_pid, an index to find a
 * frame by its columns (the condition @match and the columns @cols).
 */
static int create_schema(sqlite3 *db, const struct input *in, struct strbuf *match,
			 struct strbuf *cols)
{
	bool recording = in->kind == RECORDING_SAMPLES;
	sqlite3_stmt *st = NULL;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(
		db,
		"SELECT sql, type, name FROM src.sqlite_master WHERE sql IS NOT NULL"
		" AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND type IN ('table',"
		" 'view') ORDER BY type = 'view', rowid",
		-1, &st, NULL);
	while ((rc == SQLITE_OK || rc == SQLITE_ROW) && !err &&
	       (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *type = (const char *)sqlite3_column_text(st, 1);
		const char *name = (const char *)sqlite3_column_text(st, 2);
		struct strbuf own = {0};
		int found;

		if (strcmp(type, "view")) {
			err = define(db, "the tables", (const char *)sqlite3_column_text(st, 0));
			continue;
		}
		/*
		 * A view is the input's writer's text: it could compute anything (counts
		 * multiplied, threads renamed). The output gets probing's own definition of
		 * each of probing's views the input has, and none of the others.
		 */
		found = recording ? store__view_sql(name, &own) : btjob__view_sql(name, &own);
		if (found == -ENOENT && in->report) /* its snapshot's views */
			found = btjob__view_sql(name, &own);
		if (found == -ENOENT)
			pr_info("merge: leaving out the view %s of %s: it is not one of probing's",
				name, "the first input");
		else if (found)
			err = found;
		else
			err = define(db, name, sb_str(&own));
		sb_free(&own);
	}
	if (!err && rc != SQLITE_DONE) {
		pr_warn("cannot merge: the tables: %s", sqlite3_errmsg(db));
		err = -EIO;
	}
	sqlite3_finalize(st);
	if (err || !recording)
		return err;
	if (!has_column(db, "main", "processes", "host"))
		err = exec(db, "processes", "ALTER TABLE main.processes ADD COLUMN host TEXT");
	if (!err && !has_column(db, "main", "processes", "host_pid"))
		err = exec(db, "processes",
			   "ALTER TABLE main.processes ADD COLUMN host_pid INTEGER");
	err = err ?: frame_key(db, match, cols);
	err = err
		      ?: execf(db, "frames", "CREATE INDEX main.merge_frame_key ON frame_defs(%s)",
			       sb_str(cols));
	return err;
}

/* The optional @table in the output, as src defines it, when the output has none yet. */
static int create_optional(sqlite3 *db, const char *table)
{
	static const char sql[] = "SELECT (SELECT sql FROM src.sqlite_master WHERE type = 'table'"
				  " AND name = ?1), EXISTS (SELECT 1 FROM main.sqlite_master"
				  " WHERE type = 'table' AND name = ?1)";
	sqlite3_stmt *st = NULL;
	int err = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		pr_warn("cannot merge: %s: %s", table, sqlite3_errmsg(db));
		err = -EIO;
	} else if (sqlite3_column_text(st, 0) && !sqlite3_column_int(st, 1)) {
		err = define(db, table, (const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	return err;
}

/*
 * meta of the output from temp.allmeta, the meta of the @n inputs (merge.h); the hosts are
 * those of @procs (processes or bt_processes).
 */
static int merge_meta(sqlite3 *db, int n, const char *procs)
{
	static const char *const earliest[] = {"start", "time", NULL};
	static const char *const latest[] = {"end", "native", NULL};
	struct strbuf sql = {0};
	int err;

	err = sb_puts(&sql, "INSERT INTO main.meta(key, value) SELECT key, min(value) FROM"
			    " temp.allmeta WHERE key NOT IN ('duration', 'host', 'merged'");
	for (int i = 0; summed_keys[i] && !err; i++)
		err = sb_printf(&sql, ", '%s'", summed_keys[i]);
	for (int i = 0; earliest[i] && !err; i++)
		err = sb_printf(&sql, ", '%s', '%s'", earliest[i], latest[i]);
	if (!err)
		err = sb_printf(
			&sql, ") GROUP BY key HAVING count(*) = %d AND count(DISTINCT value) = 1;",
			n);
	for (int i = 0; summed_keys[i] && !err; i++)
		err = sb_printf(
			&sql,
			"INSERT INTO main.meta(key, value) SELECT '%s', v FROM (SELECT"
			" sum(value) AS v, count(*) AS k FROM temp.allmeta WHERE key = '%s')"
			" WHERE k = %d;",
			summed_keys[i], summed_keys[i], n);
	for (int i = 0; earliest[i] && !err; i++)
		err = sb_printf(
			&sql,
			"INSERT INTO main.meta(key, value) SELECT '%s', v FROM (SELECT"
			" min(value) AS v, count(*) AS k FROM temp.allmeta WHERE key = '%s')"
			" WHERE k = %d;"
			"INSERT INTO main.meta(key, value) SELECT '%s', v FROM (SELECT"
			" max(value) AS v, count(*) AS k FROM temp.allmeta WHERE key = '%s')"
			" WHERE k = %d;",
			earliest[i], earliest[i], n, latest[i], latest[i], n);
	if (!err)
		err = sb_printf(
			&sql,
			"INSERT INTO main.meta(key, value) SELECT 'duration', e.value -"
			" s.value FROM main.meta s, main.meta e WHERE s.key = 'start' AND"
			" e.key = 'end';"
			"INSERT INTO main.meta(key, value) SELECT 'host', group_concat(host)"
			" FROM (SELECT host FROM main.%s WHERE host IS NOT NULL AND host != ''"
			" GROUP BY host ORDER BY min(rowid)) HAVING count(*) > 0;"
			"INSERT INTO main.meta(key, value) SELECT 'merged', %d - count(*) +"
			" coalesce(sum(value), 0) FROM temp.allmeta WHERE key = 'merged';",
			procs, n);
	if (!err)
		err = exec(db, "meta", sb_str(&sql));
	sb_free(&sql);
	return err;
}

/*
 * The odd ones out of a merged snapshot, open on @db as @output, again over every node's
 * processes (each input flagged its own): read back and grouped as backtrace -i does.
 */
static int flag_odd_ones(sqlite3 *db, const char *output)
{
	sqlite3_stmt *st = NULL;
	struct bt_job *j = NULL;
	int err;

	err = btjob__load(db, output, &j);
	if (err)
		return err;
	if (sqlite3_prepare_v2(db,
			       "UPDATE main.bt_processes SET odd_one_out = ?3"
			       " WHERE host = ?1 AND pid = ?2",
			       -1, &st, NULL) != SQLITE_OK) {
		err = -EIO;
		goto cleanup;
	}
	for (int i = 0; i < j->nprocs && !err; i++) {
		sqlite3_bind_text(st, 1, j->procs[i].id.host, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 2, j->procs[i].pid);
		sqlite3_bind_int(st, 3, j->procs[i].odd);
		if (sqlite3_step(st) != SQLITE_DONE)
			err = -EIO;
		sqlite3_reset(st);
	}
cleanup:
	if (err == -EIO)
		pr_warn("cannot merge: odd_one_out: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	btjob__free(j);
	return err;
}

static const char temp_sql[] =
	"PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
	"CREATE TEMP TABLE pidmap(src INTEGER PRIMARY KEY, pid INTEGER, host TEXT,"
	" host_pid INTEGER);"
	"CREATE TEMP TABLE used(pid INTEGER PRIMARY KEY);"
	"CREATE TEMP TABLE fmap(src INTEGER PRIMARY KEY, id INTEGER);"
	"CREATE TEMP TABLE skey(src INTEGER PRIMARY KEY, key TEXT);"
	"CREATE TEMP TABLE skey2(src INTEGER PRIMARY KEY, id INTEGER);"
	"CREATE TEMP TABLE mkey(key TEXT PRIMARY KEY, id INTEGER, round INTEGER, rep INTEGER);"
	"CREATE TEMP TABLE allmeta(i INTEGER, key TEXT, value);";

/*
 * "merged 2 recordings into job.db: 6 processes of 2 hosts (a,b), 1,234 samples" (@what:
 * "recording", "watch report"), or for snapshots "... 6 processes of 2 hosts (a,b), 80
 * threads".
 */
static void print_summary(sqlite3 *db, int n, const char *what, bool snapshot, const char *output)
{
	const char *sql = snapshot ? "SELECT (SELECT count(*) FROM bt_processes), (SELECT"
				     " count(DISTINCT host) FROM bt_processes), (SELECT value FROM"
				     " meta WHERE key = 'host'), (SELECT count(*) FROM bt_threads)"
				   : "SELECT (SELECT count(*) FROM processes), (SELECT"
				     " count(DISTINCT host) FROM processes), (SELECT value FROM"
				     " meta WHERE key = 'host'), (SELECT coalesce(sum(count), 0)"
				     " FROM sample_counts)";
	sqlite3_stmt *st = NULL;
	char num[32];

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		const char *hosts = (const char *)sqlite3_column_text(st, 2);
		int nhosts = sqlite3_column_int(st, 1);

		log_cmd("merge", "merged %d %s%s into %s: %d processes of %d host%s (%s), %s %s", n,
			what, n == 1 ? "" : "s", output, sqlite3_column_int(st, 0), nhosts,
			nhosts == 1 ? "" : "s", hosts ? hosts : "unknown",
			fmt_thousands(num, sizeof(num), sqlite3_column_int64(st, 3)),
			snapshot ? "threads" : "samples");
	}
	sqlite3_finalize(st);
}

int merge__recordings(const char *const *inputs, int n, const char *output, unsigned int out_flags,
		      const struct merge_hooks *hooks)
{
	struct strbuf match = {0}, cols = {0};
	struct outpath op = {0};
	struct input *in = NULL;
	bool have_op = false, created = false, snapshot;
	char *tmp = NULL, name[PATH_MAX + 16];
	sqlite3 *db = NULL;
	struct stat sb;
	int err, fd;

	/* The output first: one that may not be written is refused before any work. */
	err = outpath__check(output, out_flags & ~OUTFILE_STREAM, &op);
	if (err)
		goto cleanup;
	have_op = true;
	in = calloc(n, sizeof(*in));
	if (!in) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (int i = 0; i < n; i++) {
		in[i].path = inputs[i];
		err = check_input(&in[i]);
		if (err)
			goto cleanup;
		for (int j = 0; j < i; j++) {
			if (in[j].dev == in[i].dev && in[j].ino == in[i].ino) {
				pr_warn("cannot merge: %s and %s are the same file", in[j].path,
					in[i].path);
				pr_warn("Give each node's file once.");
				err = -EINVAL;
				goto cleanup;
			}
		}
		if (!stat(op.dest, &sb) && sb.st_dev == in[i].dev && sb.st_ino == in[i].ino) {
			pr_warn("cannot merge into %s: it is one of the recordings merged (%s)",
				output, in[i].path);
			pr_warn("Write the merged recording to another file (-o job.db).");
			err = -EINVAL;
			goto cleanup;
		}
		if (i)
			err = check_compatible(&in[0], &in[i]);
		if (err)
			goto cleanup;
	}
	if (in[0].report && !(hooks && hooks->reports)) {
		pr_warn("cannot merge %s: a watch report, and this merge does not diagnose jobs",
			in[0].path);
		err = -EPROTO;
		goto cleanup;
	}

	if (asprintf(&tmp, "%s.partial", op.dest) < 0) {
		tmp = NULL;
		err = -ENOMEM;
		goto cleanup;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0) {
		err = -errno;
		if (err == -EEXIST)
			pr_warn("cannot write %s: %s exists (another merge writing it, or one that "
				"was killed); remove it if no merge is running",
				output, tmp);
		else
			pr_warn("cannot write %s: %s: %s", output, tmp, strerror(-err));
		goto cleanup;
	}
	created = true;
	close(fd);
	snprintf(name, sizeof(name), "%s%s", strncmp(tmp, "file:", 5) ? "" : "./", tmp);
	if (sqlite3_open_v2(name, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		pr_warn("cannot write %s: %s", tmp, db ? sqlite3_errmsg(db) : "out of memory");
		err = -EIO;
		goto cleanup;
	}
	sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, NULL);
	err = exec(db, "the output", temp_sql);
	for (int i = 0; i < n && !err; i++)
		err = merge_one(db, &in[i], i, &match, &cols);
	snapshot = in[0].kind == RECORDING_BACKTRACE;
	if (!err)
		err = merge_meta(db, n, snapshot ? "bt_processes" : "processes");
	if (!err && (snapshot || in[0].report))
		err = flag_odd_ones(db, output);
	if (!err && in[0].report) {
		err = exec(db, "the output", "BEGIN");
		err = err ?: hooks->reports(db, hooks->arg);
		err = err ?: exec(db, "the output", "COMMIT");
	}
	if (!err && !snapshot)
		err = exec(db, "the output", "DROP INDEX main.merge_frame_key");
	if (err)
		goto cleanup;
	print_summary(db, n,
		      snapshot	     ? "snapshot"
		      : in[0].report ? "watch report"
				     : "recording",
		      snapshot, output);
	if (sqlite3_close(db) != SQLITE_OK) {
		pr_warn("cannot write %s: %s", tmp, sqlite3_errmsg(db));
		err = -EIO;
		goto cleanup;
	}
	db = NULL;
	fd = open(tmp, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd)) {
		err = -errno;
		pr_warn("cannot write %s: %s", tmp, strerror(-err));
		if (fd >= 0)
			close(fd);
		goto cleanup;
	}
	close(fd);
	err = outpath__replace(&op, tmp, out_flags & ~OUTFILE_STREAM);
	if (!err)
		created = false;
cleanup:
	if (db)
		sqlite3_close(db);
	if (created)
		unlink(tmp);
	free(tmp);
	for (int i = 0; in && i < n; i++)
		free_input(&in[i]);
	free(in);
	sb_free(&match);
	sb_free(&cols);
	if (have_op)
		outpath__release(&op);
	return err;
}
