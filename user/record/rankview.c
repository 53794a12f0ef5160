// SPDX-License-Identifier: MIT
/*
 * The rank comparison in SQL. Every part reads `src(rank, pid, stack_id, count)`: the samples
 * of the processes that have a rank. A function is (kind, name, file): the qualified name of
 * a Python function with its file, a native one with its library (lines are not told apart).
 * Its share in a rank is inclusive — the rank's samples with the function anywhere on their
 * stack, over all of the rank's samples — so that the function where a rank spends extra
 * time is named whatever it calls. A rank without samples of a function has share 0 there:
 * the median of a function counts every rank. A rank's deviation is the largest amount by
 * which one function's share exceeds the median's: what it spends in excess of the median
 * rank's behaviour, where.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "record/rankview.h"

/* Samples of ranked processes, from the samples view. */
#define SRC_ALL                                                              \
	"SELECT p.rank AS rank, s.pid AS pid, s.stack_id AS stack_id,"       \
	" s.count AS count FROM samples s JOIN processes p ON p.pid = s.pid" \
	" WHERE p.rank IS NOT NULL"

/* rank_functions, as common table expressions over src (without the WITH). */
#define RF_CTES                                                                            \
	"rf_counts AS (SELECT rank, stack_id, SUM(count) AS n FROM src\n"                  \
	"  GROUP BY rank, stack_id),\n"                                                    \
	"rf_totals AS (SELECT rank, SUM(n) AS total FROM rf_counts GROUP BY rank),\n"      \
	"rf_frames AS (SELECT stack_id, depth, kind,\n"                                    \
	"    coalesce(qualname, func) AS func,\n"                                          \
	"    coalesce(CASE kind WHEN 'python' THEN file ELSE module END, '') AS file\n"    \
	"  FROM frames WHERE stack_id IN (SELECT stack_id FROM rf_counts)),\n"             \
	"rf_inclusive AS (SELECT c.rank AS rank, f.kind AS kind, f.func AS func,\n"        \
	"    f.file AS file, SUM(c.n) AS samples\n"                                        \
	"  FROM rf_counts c\n"                                                             \
	"  JOIN (SELECT DISTINCT stack_id, kind, func, file FROM rf_frames) f\n"           \
	"    ON f.stack_id = c.stack_id\n"                                                 \
	"  GROUP BY c.rank, f.kind, f.func, f.file),\n"                                    \
	"rf_self AS (SELECT c.rank AS rank, f.kind AS kind, f.func AS func,\n"             \
	"    f.file AS file, SUM(c.n) AS samples\n"                                        \
	"  FROM rf_counts c JOIN rf_frames f ON f.stack_id = c.stack_id AND f.depth = 0\n" \
	"  GROUP BY c.rank, f.kind, f.func, f.file),\n"                                    \
	"rf_grid AS (SELECT t.rank AS rank, fn.kind AS kind, fn.func AS func,\n"           \
	"    fn.file AS file, coalesce(i.samples, 0) AS samples,\n"                        \
	"    coalesce(se.samples, 0) AS self_samples,\n"                                   \
	"    1.0 * coalesce(i.samples, 0) / t.total AS share,\n"                           \
	"    1.0 * coalesce(se.samples, 0) / t.total AS self_share\n"                      \
	"  FROM rf_totals t\n"                                                             \
	"  CROSS JOIN (SELECT DISTINCT kind, func, file FROM rf_inclusive) fn\n"           \
	"  LEFT JOIN rf_inclusive i ON i.rank = t.rank AND i.kind = fn.kind\n"             \
	"    AND i.func = fn.func AND i.file = fn.file\n"                                  \
	"  LEFT JOIN rf_self se ON se.rank = t.rank AND se.kind = fn.kind\n"               \
	"    AND se.func = fn.func AND se.file = fn.file),\n"                              \
	"rf_ordered AS (SELECT g.*,\n"                                                     \
	"    row_number() OVER (PARTITION BY kind, func, file ORDER BY share) AS i,\n"     \
	"    count(*) OVER (PARTITION BY kind, func, file) AS nr FROM rf_grid g),\n"       \
	"rf_medians AS (SELECT kind, func, file, avg(share)\n"                             \
	"    FILTER (WHERE i IN ((nr + 1) / 2, (nr + 2) / 2)) AS median_share\n"           \
	"  FROM rf_ordered GROUP BY kind, func, file)"

#define RF_SELECT                                                         \
	"SELECT o.rank AS rank, o.kind AS kind, o.func AS func,\n"        \
	"  nullif(o.file, '') AS file, o.samples AS samples,\n"           \
	"  o.self_samples AS self_samples, o.share AS share,\n"           \
	"  o.self_share AS self_share, m.median_share AS median_share,\n" \
	"  o.share - m.median_share AS deviation\n"                       \
	"FROM rf_ordered o JOIN rf_medians m\n"                           \
	"  ON m.kind = o.kind AND m.func = o.func AND m.file = o.file"

/* rank_deviation, over rf (rank_functions' rows) and src. */
#define RD_CTES                                                                        \
	"rd_top AS (SELECT rank, kind, func, file, share, median_share, deviation,\n"  \
	"    row_number() OVER (PARTITION BY rank\n"                                   \
	"      ORDER BY deviation DESC, self_share DESC, func, file) AS k FROM rf),\n" \
	"rd_ranks AS (SELECT rank, SUM(count) AS samples FROM src GROUP BY rank),\n"   \
	"rd_pids AS (SELECT rank, group_concat(pid, ',') AS pids\n"                    \
	"  FROM (SELECT DISTINCT rank, pid FROM src ORDER BY rank, pid)\n"             \
	"  GROUP BY rank)"

#define RD_SELECT                                                                   \
	"SELECT r.rank AS rank, p.pids AS pids, r.samples AS samples,\n"            \
	"  coalesce(t.deviation, 0.0) AS deviation, t.kind AS kind,\n"              \
	"  t.func AS func, t.file AS file, t.share AS share,\n"                     \
	"  t.median_share AS median_share\n"                                        \
	"FROM rd_ranks r JOIN rd_pids p ON p.rank = r.rank\n"                       \
	"  LEFT JOIN rd_top t ON t.rank = r.rank AND t.k = 1 AND t.deviation > 0\n" \
	"ORDER BY deviation DESC, r.rank"

const char rankview_schema_sql[] =
	"CREATE VIEW rank_functions AS\nWITH src AS (" SRC_ALL "),\n" RF_CTES "\n" RF_SELECT ";\n"
	"CREATE VIEW rank_deviation AS\nWITH src AS (" SRC_ALL "),\n"
	"rf AS (SELECT * FROM rank_functions),\n" RD_CTES "\n" RD_SELECT ";\n";

char *rankview_deviation_query(const char *source)
{
	char *q = NULL;

	if (asprintf(&q,
		     "WITH src AS (SELECT p.rank AS rank, x.pid AS pid, x.stack_id AS stack_id,"
		     " x.count AS count FROM (%s) x JOIN processes p ON p.pid = x.pid"
		     " WHERE p.rank IS NOT NULL),\n" RF_CTES ",\nrf AS (" RF_SELECT "),\n" RD_CTES
		     "\n" RD_SELECT,
		     source) < 0) {
		errno = ENOMEM;
		return NULL;
	}
	return q;
}
