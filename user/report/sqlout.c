// SPDX-License-Identifier: MIT
/* Running SQL and printing its results as a table, CSV or JSON. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "base/log.h"
#include "report/sqlout.h"
#include "base/util.h"

#define TABLE_MEASURE_ROWS 10000

int sqlout__parse_format(const char *s, enum sqlout_format *out)
{
	if (!strcmp(s, "table"))
		*out = SQLOUT_TABLE;
	else if (!strcmp(s, "csv"))
		*out = SQLOUT_CSV;
	else if (!strcmp(s, "json"))
		*out = SQLOUT_JSON;
	else if (!strcmp(s, "json-compact"))
		*out = SQLOUT_JSON_COMPACT;
	else
		return -EINVAL;
	return 0;
}

static int append_hex(struct strbuf *sb, const void *data, int n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = data;
	int i, err;

	err = sb_reserve(sb, 2 * n);
	for (i = 0; !err && i < n; i++) {
		char two[2] = {hex[p[i] >> 4], hex[p[i] & 15]};

		err = sb_append(sb, two, 2);
	}
	return err;
}

/* ---- table ---------------------------------------------------------------------------------- */

struct cell {
	char *text; /* NULL: SQL NULL */
	size_t len, width;
};

struct table {
	int ncols;
	struct cell *cells; /* buffered rows, ncols per row */
	size_t nrows, cap;
	size_t *widths;
	bool *numeric; /* every non-NULL value of the column is a number */
	bool *seen;    /* the column had a non-NULL value */
};

/*
 * A value as the table shows it: escaped by text_escape, so a row stays on one line and
 * nothing in a value can drive the terminal.
 */
static int table_text(sqlite3_stmt *st, int i, struct strbuf *sb)
{
	const unsigned char *s;
	int n, err = 0;

	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		return sb_printf(sb, "%lld", (long long)sqlite3_column_int64(st, i));
	case SQLITE_FLOAT:
		return fmt_double(sb, sqlite3_column_double(st, i), "inf");
	case SQLITE_BLOB:
		n = sqlite3_column_bytes(st, i);
		err = sb_puts(sb, "x'");
		if (!err)
			err = append_hex(sb, sqlite3_column_blob(st, i), n);
		return err ? err : sb_puts(sb, "'");
	default:
		s = sqlite3_column_text(st, i);
		n = sqlite3_column_bytes(st, i);
		return text_escape(sb, (const char *)s, n, 0);
	}
}

static int pad(FILE *out, size_t n)
{
	while (n--)
		if (putc(' ', out) == EOF)
			return -EIO;
	return 0;
}

/* One cell with its padding: numbers to the right, text to the left. */
static void put_cell(FILE *out, const struct table *t, int col, const char *s, size_t len,
		     size_t width)
{
	size_t fill = t->widths[col] > width ? t->widths[col] - width : 0;

	fputs(col ? " | " : " ", out);
	if (t->numeric[col])
		pad(out, fill);
	fwrite(s, 1, len, out);
	if (!t->numeric[col] && col + 1 < t->ncols)
		pad(out, fill);
}

static void put_row(FILE *out, const struct table *t, const struct cell *row)
{
	int c;

	for (c = 0; c < t->ncols; c++) {
		if (row[c].text)
			put_cell(out, t, c, row[c].text, row[c].len, row[c].width);
		else
			put_cell(out, t, c, "NULL", 4, 4);
	}
	putc('\n', out);
}

/* Column @c's name as the table header shows it (a view's column is named by its maker). */
static const char *header_name(sqlite3_stmt *st, int c, struct strbuf *tmp)
{
	return text_str(tmp, sqlite3_column_name(st, c), 0);
}

static void put_header(FILE *out, const struct table *t, sqlite3_stmt *st)
{
	struct strbuf tmp = {0};
	const char *name;
	size_t i;
	int c;

	for (c = 0; c < t->ncols; c++) {
		name = header_name(st, c, &tmp);
		put_cell(out, t, c, name, strlen(name), utf8_width(name, strlen(name)));
	}
	sb_free(&tmp);
	putc('\n', out);
	for (c = 0; c < t->ncols; c++) {
		if (c)
			putc('+', out);
		for (i = 0; i < t->widths[c] + 2; i++)
			putc('-', out);
	}
	putc('\n', out);
}

static int read_cells(sqlite3_stmt *st, struct table *t, struct cell *row, struct strbuf *tmp)
{
	int c, err;

	for (c = 0; c < t->ncols; c++)
		row[c].text = NULL; /* so a failure half-way leaves the row freeable */
	for (c = 0; c < t->ncols; c++) {
		if (sqlite3_column_type(st, c) == SQLITE_NULL) {
			row[c].width = 4;
			continue;
		}
		t->seen[c] = true;
		if (sqlite3_column_type(st, c) != SQLITE_INTEGER &&
		    sqlite3_column_type(st, c) != SQLITE_FLOAT)
			t->numeric[c] = false;
		sb_reset(tmp);
		err = table_text(st, c, tmp);
		if (err)
			return err;
		row[c].text = strndup(sb_str(tmp), tmp->len);
		if (!row[c].text)
			return -ENOMEM;
		row[c].len = tmp->len;
		row[c].width = utf8_width(row[c].text, row[c].len);
	}
	return 0;
}

static void free_cells(struct cell *cells, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(cells[i].text);
}

/* Size the columns to the buffered rows and print them, under the header. */
static void flush_buffered(FILE *out, struct table *t, sqlite3_stmt *st,
			   const struct sqlout_options *o)
{
	size_t i;
	int c;

	for (c = 0; c < t->ncols; c++) {
		if (!t->seen[c])
			t->numeric[c] = false; /* all NULL: nothing says it is a number */
		for (i = 0; i < t->nrows; i++)
			t->widths[c] = max(t->widths[c], t->cells[i * t->ncols + c].width);
	}
	if (!o->no_header)
		put_header(out, t, st);
	for (i = 0; i < t->nrows; i++)
		put_row(out, t, t->cells + i * t->ncols);
}

/* Step @st to the end, printing a table. Return 0, -ENOMEM, or 1 when a step failed. */
static int print_table(sqlite3_stmt *st, const struct sqlout_options *o, FILE *out)
{
	struct table t = {.ncols = sqlite3_column_count(st)};
	struct strbuf tmp = {0};
	struct cell *row, *stream = NULL;
	size_t total = 0;
	int rc = SQLITE_DONE, c, err = 0;
	bool streaming = false;

	t.widths = calloc(t.ncols, sizeof(*t.widths));
	t.numeric = calloc(t.ncols, sizeof(*t.numeric));
	t.seen = calloc(t.ncols, sizeof(*t.seen));
	stream = calloc(t.ncols, sizeof(*stream));
	if (!t.widths || !t.numeric || !t.seen || !stream) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (c = 0; c < t.ncols; c++) {
		const char *name = header_name(st, c, &tmp);

		t.numeric[c] = true;
		t.widths[c] = o->no_header ? 0 : utf8_width(name, strlen(name));
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		total++;
		if (streaming) {
			/* Past the rows that sized the columns: print as they come. */
			err = read_cells(st, &t, stream, &tmp);
			if (!err)
				put_row(out, &t, stream);
			free_cells(stream, t.ncols);
			if (err)
				goto cleanup;
			continue;
		}
		if (t.nrows == t.cap) {
			size_t cap = t.cap ? t.cap * 2 : 64;
			struct cell *tmpc = realloc(t.cells, cap * t.ncols * sizeof(*tmpc));

			if (!tmpc) {
				err = -ENOMEM;
				goto cleanup;
			}
			t.cells = tmpc;
			t.cap = cap;
		}
		row = t.cells + t.nrows * t.ncols;
		err = read_cells(st, &t, row, &tmp);
		t.nrows++; /* even on failure: its cells are freed below */
		if (err)
			goto cleanup;
		if (t.nrows == TABLE_MEASURE_ROWS) {
			flush_buffered(out, &t, st, o);
			streaming = true;
		}
	}
	/* A failed step prints nothing more: a table cut short would look complete. */
	if (!streaming && rc == SQLITE_DONE)
		flush_buffered(out, &t, st, o);
	if (!o->no_header && rc == SQLITE_DONE)
		fprintf(out, "(%zu row%s)\n", total, total == 1 ? "" : "s");
cleanup:
	free_cells(t.cells, t.nrows * t.ncols);
	free(t.cells);
	free(t.widths);
	free(t.numeric);
	free(t.seen);
	free(stream);
	sb_free(&tmp);
	if (err)
		return err;
	return rc == SQLITE_DONE ? 0 : 1;
}

/* ---- CSV and JSON --------------------------------------------------------------------------- */

static int csv_value(sqlite3_stmt *st, int i, struct strbuf *sb)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_NULL:
		return 0;
	case SQLITE_INTEGER:
		return sb_printf(sb, "%lld", (long long)sqlite3_column_int64(st, i));
	case SQLITE_FLOAT:
		return fmt_double(sb, sqlite3_column_double(st, i), "inf");
	case SQLITE_BLOB:
		return append_hex(sb, sqlite3_column_blob(st, i), sqlite3_column_bytes(st, i));
	default:
		return csv_field(sb, (const char *)sqlite3_column_text(st, i),
				 sqlite3_column_bytes(st, i));
	}
}

static int json_value(sqlite3_stmt *st, int i, struct strbuf *sb)
{
	int err;

	switch (sqlite3_column_type(st, i)) {
	case SQLITE_NULL:
		return sb_puts(sb, "null");
	case SQLITE_INTEGER:
		return sb_printf(sb, "%lld", (long long)sqlite3_column_int64(st, i));
	case SQLITE_FLOAT:
		/* JSON has no infinity or NaN. */
		return fmt_double(sb, sqlite3_column_double(st, i), "null");
	case SQLITE_BLOB:
		err = sb_puts(sb, "\"");
		if (!err)
			err = append_hex(sb, sqlite3_column_blob(st, i),
					 sqlite3_column_bytes(st, i));
		return err ? err : sb_puts(sb, "\"");
	default:
		return json_string(sb, (const char *)sqlite3_column_text(st, i),
				   sqlite3_column_bytes(st, i));
	}
}

/*
 * Step @st to the end printing {"columns":[...],"rows":[\n[...],\n[...]\n]}: the column names
 * in order (duplicates too) and one array per row, on a line of its own.
 */
static int print_compact(sqlite3_stmt *st, FILE *out)
{
	struct strbuf line = {0};
	int ncols = sqlite3_column_count(st), c, rc, err;
	size_t rows = 0;
	const char *name;

	err = sb_puts(&line, "{\"columns\":[");
	for (c = 0; !err && c < ncols; c++) {
		name = sqlite3_column_name(st, c);
		err = sb_puts(&line, c ? "," : "");
		if (!err)
			err = json_string(&line, name, strlen(name));
	}
	if (!err)
		err = sb_puts(&line, "],\"rows\":[");
	if (!err)
		fwrite(line.buf, 1, line.len, out);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		sb_reset(&line);
		err = sb_puts(&line, rows++ ? ",\n[" : "\n[");
		for (c = 0; !err && c < ncols; c++) {
			err = c ? sb_puts(&line, ",") : 0;
			if (!err)
				err = json_value(st, c, &line);
		}
		if (!err)
			err = sb_puts(&line, "]");
		if (!err)
			fwrite(line.buf, 1, line.len, out);
	}
	if (!err)
		fputs(rows ? "\n]}\n" : "]}\n", out);
	sb_free(&line);
	if (err)
		return err;
	return rc == SQLITE_DONE ? 0 : 1;
}

/* Step @st to the end printing CSV or JSON. Return 0, -ENOMEM, or 1 when a step failed. */
static int print_stream(sqlite3_stmt *st, const struct sqlout_options *o, FILE *out)
{
	struct strbuf line = {0};
	bool json = o->format == SQLOUT_JSON, compact = o->format == SQLOUT_JSON_COMPACT;
	int ncols = sqlite3_column_count(st), c, rc, err = 0;
	size_t rows = 0;
	const char *name;

	if (compact)
		return print_compact(st, out);
	if (!json && !o->no_header) {
		for (c = 0; !err && c < ncols; c++) {
			name = sqlite3_column_name(st, c);
			if (c)
				err = sb_puts(&line, ",");
			if (!err)
				err = csv_field(&line, name, strlen(name));
		}
		if (!err)
			err = sb_puts(&line, "\r\n");
		if (!err)
			fwrite(line.buf, 1, line.len, out);
	}
	if (json)
		fputs("[", out);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		sb_reset(&line);
		if (json)
			err = sb_puts(&line, rows ? ",\n{" : "\n{");
		for (c = 0; !err && c < ncols; c++) {
			if (c)
				err = sb_puts(&line, ",");
			if (!err && json) {
				name = sqlite3_column_name(st, c);
				err = json_string(&line, name, strlen(name));
				if (!err)
					err = sb_puts(&line, ":");
			}
			if (!err)
				err = json ? json_value(st, c, &line) : csv_value(st, c, &line);
		}
		if (!err)
			err = sb_puts(&line, json ? "}" : "\r\n");
		if (!err)
			fwrite(line.buf, 1, line.len, out);
		rows++;
	}
	if (json && !err)
		fputs(rows ? "\n]\n" : "]\n", out);
	sb_free(&line);
	if (err)
		return err;
	return rc == SQLITE_DONE ? 0 : 1;
}

/* ---- errors --------------------------------------------------------------------------------- */

/* Append the names of every @kind ("table", "view") of @db to @sb, comma-separated. */
static int list_kind(sqlite3 *db, const char *kind, struct strbuf *sb)
{
	sqlite3_stmt *schemas = NULL, *st = NULL;
	size_t n = 0;
	char *q;
	int err = 0;

	if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_database_list ORDER BY seq", -1,
			       &schemas, NULL) != SQLITE_OK)
		return -EIO;
	while (!err && sqlite3_step(schemas) == SQLITE_ROW) {
		const char *schema = (const char *)sqlite3_column_text(schemas, 0);
		/* Objects of attached schemas (a live source's python, system) are qualified. */
		bool plain = !strcmp(schema, "main") || !strcmp(schema, "temp");

		/* %w quotes the schema name as an identifier. */
		q = sqlite3_mprintf("SELECT name FROM \"%w\".sqlite_master WHERE type = %Q"
				    " AND name NOT LIKE 'sqlite_%%' ORDER BY name",
				    schema, kind);
		if (!q) {
			err = -ENOMEM;
			break;
		}
		if (sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK) {
			while (!err && sqlite3_step(st) == SQLITE_ROW)
				err = sb_printf(sb, "%s%s%s%s", n++ ? ", " : "",
						plain ? "" : schema, plain ? "" : ".",
						sqlite3_column_text(st, 0));
		}
		sqlite3_finalize(st);
		st = NULL;
		sqlite3_free(q);
	}
	sqlite3_finalize(schemas);
	return err;
}

/* "views: a, b; tables: c, d" — what a query can read from @db. */
static int list_tables(sqlite3 *db, struct strbuf *sb)
{
	struct strbuf views = {0}, tables = {0};
	int err;

	err = list_kind(db, "view", &views);
	if (!err)
		err = list_kind(db, "table", &tables);
	if (!err && views.len)
		err = sb_printf(sb, "views: %s", views.buf);
	if (!err && tables.len)
		err = sb_printf(sb, "%stables: %s", views.len ? "; " : "", tables.buf);
	sb_free(&views);
	sb_free(&tables);
	return err;
}

/* Whether @db is an in-memory database: a live process's tables, not a recording. */
static bool is_memory_db(sqlite3 *db)
{
	const char *f = sqlite3_db_filename(db, "main");

	return !f || !*f;
}

/* Print the error of a statement starting at @stmt_start in @sql, with its position. */
static void report(sqlite3 *db, const char *sql, const char *stmt_start)
{
	const char *msg = sqlite3_errmsg(db);
	int off = sqlite3_error_offset(db);
	struct strbuf tables = {0};

	if (off >= 0 && (size_t)off <= strlen(stmt_start)) {
		const char *at = stmt_start + off, *ls = at, *le, *p;
		int line = 1;
		size_t col, i;

		for (p = sql; p < at; p++)
			line += *p == '\n';
		while (ls > sql && ls[-1] != '\n')
			ls--;
		le = strchr(at, '\n');
		if (!le)
			le = at + strlen(at);
		col = utf8_width(ls, at - ls) + 1;
		pr_warn("SQL error at line %d, column %zu: %s", line, col, msg);
		/* The line, and a caret under the spot (tabs shown as one space to keep it there). */
		fputs("    ", stderr);
		for (p = ls; p < le; p++)
			fputc(*p == '\t' || *p == '\r' ? ' ' : *p, stderr);
		fputs("\n    ", stderr);
		for (i = 1; i < col; i++)
			fputc(' ', stderr);
		fputs("^\n", stderr);
	} else {
		pr_warn("SQL error: %s", msg);
	}
	if (!strncmp(msg, "no such table", 13) && !list_tables(db, &tables) && tables.len)
		pr_warn("what there is to query: %s", sb_str(&tables));
	else if (sqlite3_errcode(db) == SQLITE_READONLY)
		pr_warn("recordings are read-only for queries; to keep intermediate results use "
			"TEMP tables or views (CREATE TEMP TABLE t AS SELECT ...)");
	else if (sqlite3_errcode(db) == SQLITE_AUTH)
		pr_warn("queries cannot reach other files: ATTACH and VACUUM INTO are refused, and "
			"so are PRAGMA temp_store_directory and data_store_directory and "
			"fts3_tokenizer(). Keep intermediate results in TEMP tables or views; %s",
			is_memory_db(db) ? "to keep a live process's python.torch_trace, use "
					   "'probing query -p PID --save FILE'"
					 : "to copy a recording, copy the file");
	sb_free(&tables);
}

/* ---- running -------------------------------------------------------------------------------- */

/* sqlite3_progress_handler: interrupt once the deadline (CLOCK_MONOTONIC ns) has passed. */
static int past_deadline(void *deadline)
{
	return now_mono_ns() >= *(uint64_t *)deadline;
}

int sqlout__run(sqlite3 *db, const char *sql, const struct sqlout_options *o, FILE *out)
{
	const char *next = sql, *start;
	sqlite3_stmt *st = NULL;
	uint64_t deadline = 0;
	int rc, err = 0, results = 0;

	if (o->time_limit_ms > 0) {
		deadline = now_mono_ns() + (uint64_t)o->time_limit_ms * 1000000;
		/* Every 1000 virtual machine instructions: microseconds apart. */
		sqlite3_progress_handler(db, 1000, past_deadline, &deadline);
	}
	while (*next) {
		start = next;
		rc = sqlite3_prepare_v2(db, start, -1, &st, &next);
		if (rc != SQLITE_OK) {
			report(db, sql, start);
			err = rc == SQLITE_NOMEM ? -ENOMEM : -EINVAL;
			break;
		}
		if (!st) /* only white space or a comment was left */
			break;
		if (sqlite3_column_count(st)) {
			/* Results apart: a blank line (CRLF in CSV); JSON arrays need none. */
			if (results++)
				fputs(o->format == SQLOUT_JSON || o->format == SQLOUT_JSON_COMPACT
					      ? ""
				      : o->format == SQLOUT_CSV ? "\r\n"
								: "\n",
				      out);
			rc = o->format == SQLOUT_TABLE ? print_table(st, o, out)
						       : print_stream(st, o, out);
		} else {
			while ((rc = sqlite3_step(st)) == SQLITE_ROW)
				;
			rc = rc == SQLITE_DONE ? 0 : 1;
		}
		if (rc < 0) {
			err = rc;
			pr_warn("out of memory printing the result");
			break;
		}
		if (rc && deadline && sqlite3_errcode(db) == SQLITE_INTERRUPT &&
		    now_mono_ns() >= deadline) {
			pr_warn("the SQL was stopped: it ran longer than the time limit of %g s "
				"(--timeout)",
				o->time_limit_ms / 1000.0);
			err = -ETIMEDOUT;
			break;
		}
		if (rc) {
			report(db, sql, start);
			err = -EINVAL;
			break;
		}
		sqlite3_finalize(st);
		st = NULL;
	}
	sqlite3_finalize(st);
	if (deadline)
		sqlite3_progress_handler(db, 0, NULL, NULL);
	errno = 0;
	if (fflush(out) || ferror(out)) {
		if (!err)
			pr_warn("cannot write the result: %s", strerror(errno ? errno : EIO));
		return errno == EPIPE ? -EPIPE : -EIO;
	}
	return err;
}
