// SPDX-License-Identifier: MIT
/*
 * The diagnosis of a job from its nodes' merged watch reports (jobdiag.h). Everything read
 * here comes from files anyone may have written: text that diagnose() does not escape itself
 * (labels, ops, waits) is escaped on the way in, numbers are taken as they are.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "base/log.h"
#include "base/util.h"
#include "watch/diagnose.h"
#include "watch/jobdiag.h"

/* The ranks of every node, with what diagnose needs (locals: since reports have them). */
static const char ranks_sql[] =
	"SELECT host, pid, rank, alive, exit_status, exit_time, op, grp, seq, entered,"
	" last_done, func, file, lineno, state, wait, %s FROM main.watch_ranks"
	" ORDER BY rank IS NULL, rank, host, pid";

/* The job as a whole: its world size, the latest stall, the nodes and their kinds. */
static const char job_sql[] =
	"SELECT (SELECT max(world_size) FROM main.processes WHERE rank IS NOT NULL),"
	" (SELECT max(time) FROM main.watch_node_stalls),"
	" (SELECT count(DISTINCT coalesce(host, '')) FROM main.watch_node_stalls),"
	" (SELECT group_concat(h, ', ') FROM (SELECT coalesce(host, '?') || ': ' || kind AS h"
	" FROM main.watch_node_stalls ORDER BY host))";

static void copy_text(char *dst, size_t size, sqlite3_stmt *st, int col, bool escape)
{
	const char *s = (const char *)sqlite3_column_text(st, col);
	struct strbuf tmp = {0};

	snprintf(dst, size, "%s", !s ? "" : escape ? text_str(&tmp, s, 0) : s);
	sb_free(&tmp);
}

/* One row of ranks_sql into @r. */
static void read_rank(sqlite3_stmt *st, struct dg_rank *r)
{
	const char *host = (const char *)sqlite3_column_text(st, 0);
	const char *state = (const char *)sqlite3_column_text(st, 14);
	struct strbuf h = {0};

	memset(r, 0, sizeof(*r));
	r->pid = sqlite3_column_int(st, 1);
	r->rank = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 2);
	text_str(&h, host && *host ? host : "unknown host", 0);
	if (r->rank >= 0)
		snprintf(r->label, sizeof(r->label), "rank %d (pid %d, %s)", r->rank, r->pid,
			 sb_str(&h));
	else
		snprintf(r->label, sizeof(r->label), "pid %d (%s)", r->pid, sb_str(&h));
	sb_free(&h);
	r->dead = !sqlite3_column_int(st, 3);
	r->status = sqlite3_column_int(st, 4);
	r->exit_ts = sqlite3_column_double(st, 5);
	r->in_coll = !r->dead && sqlite3_column_type(st, 6) != SQLITE_NULL;
	copy_text(r->op, sizeof(r->op), st, 6, true);
	copy_text(r->grp, sizeof(r->grp), st, 7, false); /* diagnose escapes it */
	r->seq = sqlite3_column_type(st, 8) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 8);
	r->entered = sqlite3_column_double(st, 9);
	r->last_done = sqlite3_column_double(st, 10);
	copy_text(r->func, sizeof(r->func), st, 11, false);
	copy_text(r->file, sizeof(r->file), st, 12, false);
	r->line = sqlite3_column_int(st, 13);
	r->state = state && state[0] >= 'A' && state[0] <= 'Z' && !state[1] ? state[0] : 0;
	copy_text(r->wait, sizeof(r->wait), st, 15, true);
	copy_text(r->locals, sizeof(r->locals), st, 16, false); /* diagnose escapes them */
}

/* The ranks of @db into *@out (malloc'd). Their number, or -errno. */
static int read_ranks(sqlite3 *db, struct dg_rank **out)
{
	bool locals = sqlite3_table_column_metadata(db, "main", "watch_ranks", "locals", NULL, NULL,
						    NULL, NULL, NULL) == SQLITE_OK;
	char *sql = sqlite3_mprintf(ranks_sql, locals ? "locals" : "NULL");
	sqlite3_stmt *st = NULL;
	struct dg_rank *rs = NULL;
	size_t cap = 0;
	int rc, n = 0;

	if (!sql)
		return -ENOMEM;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	sqlite3_free(sql);
	while ((rc == SQLITE_OK || rc == SQLITE_ROW) && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (grow_array(&rs, &cap, n + 1, sizeof(*rs))) {
			n = -ENOMEM;
			goto cleanup;
		}
		read_rank(st, &rs[n++]);
	}
	if (rc != SQLITE_DONE) {
		pr_warn("cannot merge: the ranks of the watch reports: %s", sqlite3_errmsg(db));
		n = -EIO;
	}
cleanup:
	sqlite3_finalize(st);
	if (n < 0)
		free(rs);
	else
		*out = rs;
	return n;
}

/* The job's row of watch_stall, after the nodes' stalls; its culprit's host. */
static int write_stall(sqlite3 *db, double time, const char *reason, const struct dg_result *res)
{
	static const char sql[] = "INSERT INTO main.watch_stall(time, reason, kind, culprit_pid,"
				  " culprit_rank, diagnosis, host) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
				  " (SELECT host FROM main.watch_ranks WHERE pid = ?4 AND"
				  " rank IS ?5 LIMIT 1))";
	sqlite3_stmt *st = NULL;
	int err = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		pr_warn("cannot merge: watch_stall: %s", sqlite3_errmsg(db));
		return -EIO;
	}
	sqlite3_bind_double(st, 1, time);
	sqlite3_bind_text(st, 2, reason, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, diagnose_kind_name(res->kind), -1, SQLITE_STATIC);
	if (res->culprit) {
		sqlite3_bind_int(st, 4, res->culprit);
		if (res->culprit_rank >= 0)
			sqlite3_bind_int(st, 5, res->culprit_rank);
	}
	sqlite3_bind_text(st, 6, res->text, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE) {
		pr_warn("cannot merge: watch_stall: %s", sqlite3_errmsg(db));
		err = -EIO;
	}
	sqlite3_finalize(st);
	return err;
}

int jobdiag__merged(sqlite3 *db, void *arg)
{
	struct dg_input in = {.world_size = -1};
	struct dg_rank *ranks = NULL;
	struct dg_result res;
	sqlite3_stmt *st = NULL;
	struct strbuf kinds = {0};
	char reason[512], text[sizeof(res.text)], *line, *save = NULL;
	int n, err = 0;

	(void)arg;
	n = read_ranks(db, &ranks);
	if (n < 0)
		return n;
	if (sqlite3_prepare_v2(db, job_sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		pr_warn("cannot merge: the watch reports' stalls: %s", sqlite3_errmsg(db));
		err = -EIO;
		goto cleanup;
	}
	if (sqlite3_column_type(st, 0) != SQLITE_NULL && sqlite3_column_int(st, 0) > 0)
		in.world_size = sqlite3_column_int(st, 0);
	in.now = sqlite3_column_double(st, 1);
	in.nodes = sqlite3_column_int(st, 2);
	text_str(&kinds, (const char *)sqlite3_column_text(st, 3) ?: "", 0);
	in.n = n;
	in.r = ranks;
	diagnose(&in, &res);
	snprintf(reason, sizeof(reason), "the watch reports of %d node%s merged (%s)", in.nodes,
		 in.nodes == 1 ? "" : "s", sb_str(&kinds));
	err = write_stall(db, in.now, reason, &res);
	if (err)
		goto cleanup;
	printf("probing merge: the job, from %s:\n", reason);
	snprintf(text, sizeof(text), "%s",
		 res.kind == DG_NONE ? "no stall in these reports\n" : res.text);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		printf("  %s\n", line);
	fflush(stdout);
cleanup:
	sqlite3_finalize(st);
	sb_free(&kinds);
	free(ranks);
	return err;
}
