// SPDX-License-Identifier: MIT
/* jobsql: one SQL result across the live tables of a job's processes. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "base/util.h"
#include "live/jobsql.h"
#include "live/live.h"
#include "live/livedb.h"
#include "live/livejob.h"

/* Split @sql into its statements (sqlite3_complete decides where one ends). */
static int split(const char *sql, char ***out, int *n)
{
	size_t len = strlen(sql), start = 0, i, cap = 0;
	char **v = NULL, *s;
	int nv = 0;

	for (i = 0; i <= len; i++) {
		if (i < len && sql[i] != ';')
			continue;
		s = strndup(sql + start, i - start + (i < len));
		if (!s)
			goto nomem;
		if (i < len && !sqlite3_complete(s)) {
			free(s); /* a ';' inside a string, a comment or a trigger body */
			continue;
		}
		if (strspn(s, " \t\r\n;") == strlen(s)) {
			free(s);
		} else {
			if (grow_array(&v, &cap, nv + 1, sizeof(*v))) {
				free(s);
				goto nomem;
			}
			v[nv++] = s;
		}
		start = i + 1;
	}
	*out = v;
	*n = nv;
	return 0;
nomem:
	while (nv)
		free(v[--nv]);
	free(v);
	return -ENOMEM;
}

static int quote_ident(struct strbuf *sb, const char *s)
{
	int err = sb_puts(sb, "\"");

	for (; !err && *s; s++)
		err = *s == '"' ? sb_puts(sb, "\"\"") : sb_append(sb, s, 1);
	return err ?: sb_puts(sb, "\"");
}

/* One statement's result being put together. */
struct result {
	int table;	   /* its table r<table> in the result database, 0 until created */
	int ncols;	   /* the statement's own columns */
	bool rank, pid;	   /* prepend rank / pid */
	sqlite3_stmt *ins; /* INSERT into the table */
	int answered;
};

static bool has_column(sqlite3_stmt *st, const char *name)
{
	int i;

	for (i = 0; i < sqlite3_column_count(st); i++)
		if (sqlite3_column_name(st, i) && !strcasecmp(sqlite3_column_name(st, i), name))
			return true;
	return false;
}

/* Create the table of a statement's result from its first answer @st. */
static int create_result(struct jobsql_result *r, struct result *res, sqlite3_stmt *st)
{
	struct strbuf sql = {0}, sel = {0};
	char **grown;
	int i, err;

	res->ncols = sqlite3_column_count(st);
	res->rank = !has_column(st, "rank");
	res->pid = !has_column(st, "pid");
	res->table = r->n + 1;
	err = sb_printf(&sql, "CREATE TABLE r%d(seq INTEGER PRIMARY KEY, rank, pid", res->table);
	for (i = 0; !err && i < res->ncols; i++)
		err = sb_printf(&sql, ", c%d", i);
	err = err ?: sb_puts(&sql, ")");
	if (!err && sqlite3_exec(r->db, sb_str(&sql), NULL, NULL, NULL) != SQLITE_OK)
		err = -ENOMEM;
	sb_reset(&sql);
	err = err ?: sb_printf(&sql, "INSERT INTO r%d VALUES (NULL, ?1, ?2", res->table);
	for (i = 0; !err && i < res->ncols; i++)
		err = sb_printf(&sql, ", ?%d", i + 3);
	err = err ?: sb_puts(&sql, ")");
	if (!err && sqlite3_prepare_v2(r->db, sb_str(&sql), -1, &res->ins, NULL) != SQLITE_OK)
		err = -ENOMEM;
	/* What prints it: the statement's own names (duplicates are fine in a SELECT). */
	err = err ?: sb_puts(&sel, "SELECT ");
	if (!err && res->rank)
		err = sb_puts(&sel, "rank, ");
	if (!err && res->pid)
		err = sb_puts(&sel, "pid, ");
	for (i = 0; !err && i < res->ncols; i++) {
		err = sb_printf(&sel, "%sc%d AS ", i ? ", " : "", i);
		err = err ?: quote_ident(&sel, sqlite3_column_name(st, i) ?: "?");
	}
	err = err ?: sb_printf(&sel, " FROM r%d ORDER BY seq", res->table);
	if (!err) {
		grown = realloc(r->select, sizeof(*r->select) * (r->n + 1));
		if (!grown)
			err = -ENOMEM;
		else
			r->select = grown;
	}
	if (!err) {
		r->select[r->n++] = sel.buf;
		sel.buf = NULL;
	}
	sb_free(&sql);
	sb_free(&sel);
	return err;
}

/* The rows of @st (process @p) into the result; all of them or, on failure, none. */
static int add_rows(struct jobsql_result *r, struct result *res, sqlite3_stmt *st,
		    const struct job_proc *p, const char *cmd, sqlite3 *live)
{
	int rc, i, err = 0;

	sqlite3_exec(r->db, "SAVEPOINT one", NULL, NULL, NULL);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (p->id.rank >= 0)
			sqlite3_bind_int(res->ins, 1, p->id.rank);
		else
			sqlite3_bind_null(res->ins, 1);
		sqlite3_bind_int(res->ins, 2, p->pid);
		for (i = 0; i < res->ncols; i++)
			sqlite3_bind_value(res->ins, i + 3, sqlite3_column_value(st, i));
		if (sqlite3_step(res->ins) != SQLITE_DONE)
			err = -ENOMEM;
		sqlite3_reset(res->ins);
		sqlite3_clear_bindings(res->ins);
		if (err)
			break;
	}
	if (!err && rc != SQLITE_DONE) {
		log_cmd(cmd, "%s: %s", p->label, sqlite3_errmsg(live));
		err = -EINVAL;
	}
	sqlite3_exec(r->db, err ? "ROLLBACK TO one; RELEASE one" : "RELEASE one", NULL, NULL, NULL);
	if (!err)
		res->answered++;
	return err == -EINVAL ? 0 : err;
}

static bool syntax_error(const char *msg)
{
	return !strncmp(msg, "near \"", 6) || !strncmp(msg, "unrecognized token", 18) ||
	       !strncmp(msg, "incomplete input", 16);
}

int jobsql__run(const char *cmd, const struct job_procs *j, const char *sql, int gil_ms,
		struct jobsql_result *out)
{
	struct result *res = NULL;
	sqlite3 **live = NULL;
	sqlite3_stmt *st;
	char **stmts = NULL;
	int nstmts = 0, i, k, err;

	memset(out, 0, sizeof(*out));
	err = split(sql, &stmts, &nstmts);
	if (err)
		return err;
	res = calloc(nstmts ? nstmts : 1, sizeof(*res));
	live = calloc(j->n ? j->n : 1, sizeof(*live));
	if (!res || !live ||
	    sqlite3_open_v2(":memory:", &out->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY,
			    NULL) != SQLITE_OK) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < j->n; i++) {
		struct live_target t = {.pid = j->p[i].pid};

		/* It says why it cannot (the process is gone...). */
		if (livedb__open_target(&t, gil_ms, &live[i]))
			live[i] = NULL;
	}
	for (k = 0; !err && k < nstmts; k++) {
		bool rows = false;

		for (i = 0; !err && i < j->n; i++) {
			if (!live[i])
				continue;
			if (sqlite3_prepare_v2(live[i], stmts[k], -1, &st, NULL) != SQLITE_OK) {
				const char *msg = sqlite3_errmsg(live[i]);

				/* The same for every process: said once. */
				if (syntax_error(msg)) {
					log_cmd(cmd, "SQL error: %s", msg);
					break;
				}
				log_cmd(cmd, "%s: %s", j->p[i].label, msg);
				continue;
			}
			if (!st)
				continue; /* only a comment */
			if (!sqlite3_column_count(st)) {
				/* No rows (a TEMP table, a view): just run it. */
				rows = true;
				if (sqlite3_step(st) != SQLITE_DONE)
					log_cmd(cmd, "%s: %s", j->p[i].label,
						sqlite3_errmsg(live[i]));
				sqlite3_finalize(st);
				continue;
			}
			rows = true;
			if (!res[k].table)
				err = create_result(out, &res[k], st);
			if (!err && sqlite3_column_count(st) != res[k].ncols)
				log_cmd(cmd,
					"%s: its result has %d columns, not %d like the others': "
					"left out",
					j->p[i].label, sqlite3_column_count(st), res[k].ncols);
			else if (!err)
				err = add_rows(out, &res[k], st, &j->p[i], cmd, live[i]);
			sqlite3_finalize(st);
		}
		if (!rows || (res[k].table && !res[k].answered))
			out->unanswered++;
		/* A result nobody answered is not printed (the reasons were). */
		if (res[k].table && !res[k].answered) {
			free(out->select[--out->n]);
			out->select[out->n] = NULL;
		}
	}
cleanup:
	for (k = 0; res && k < nstmts; k++)
		sqlite3_finalize(res[k].ins);
	for (i = 0; live && i < j->n; i++)
		sqlite3_close(live[i]);
	for (k = 0; k < nstmts; k++)
		free(stmts[k]);
	free(stmts);
	free(res);
	free(live);
	if (err) {
		log_cmd(cmd, "%s", strerror(-err));
		jobsql__free(out);
	}
	return err;
}

void jobsql__free(struct jobsql_result *r)
{
	int i;

	for (i = 0; i < r->n; i++)
		free(r->select[i]);
	free(r->select);
	sqlite3_close(r->db);
	memset(r, 0, sizeof(*r));
}
