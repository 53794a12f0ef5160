/* SPDX-License-Identifier: MIT */
/*
 * jobsql: SQL on the live tables of every process of a job (query -p PID --children): each
 * statement runs on each process's own live database (livedb.h), and the rows they return
 * are put together into one result per statement, with the process's rank and pid in front.
 * A process that cannot answer (no agent for a python.* table, gone, hung) is reported and
 * left out; the others still answer.
 */
#ifndef PROBING_JOBSQL_H
#define PROBING_JOBSQL_H

#include <sqlite3.h>

struct job_procs;

struct jobsql_result {
	sqlite3 *db;	/* in memory: one table per statement that returns rows */
	int n;		/* statements that return rows */
	char **select;	/* per such statement: the SELECT that reads its result from db, with
			 * the statement's own column names (after rank and pid) */
	int unanswered; /* statements no process answered */
};

/*
 * Run the statements of @sql on the live tables of each process of @j (waiting up to @gil_ms
 * for an agent's GIL), in the job's order. The result of a statement has the columns rank
 * (NULL for a process without one) and pid, then the statement's own, except rank or pid when
 * the statement returns a column of that name already. A process whose statement fails is
 * reported on stderr ("probing @cmd: rank 2 (pid 1234): why") and contributes no row to that
 * statement. Return 0 and *@out (free with jobsql__free), or -errno for a failure of probing
 * itself (printed).
 */
int jobsql__run(const char *cmd, const struct job_procs *j, const char *sql, int gil_ms,
		struct jobsql_result *out);

void jobsql__free(struct jobsql_result *r);

#endif
