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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "record/rankview.h"

/* Samples of ranked processes (sample_counts: the samples view less its GROUP BY and join). */
#define SRC_ALL                                                        \
	"SELECT p.rank AS rank, s.pid AS pid, s.stack_id AS stack_id," \
	" s.count AS count, s.ns AS ns FROM sample_counts s"           \
	" JOIN processes p ON p.pid = s.pid"                           \
	" WHERE p.rank IS NOT NULL"

/*
 * rank_functions, as common table expressions over src (without the WITH). A function is
 * numbered by its first frame_defs id (rf_fns), every frame_defs row mapped to it (rf_fn_of):
 * the stacks' frames are then joined and told apart by number, not by text.
 */
#define RF_CTES                                                                               \
	"rf_counts AS (SELECT rank, stack_id, SUM(count) AS n,\n"                             \
	"    SUM(coalesce(ns, count)) AS w FROM src GROUP BY rank, stack_id),\n"              \
	"rf_totals AS (SELECT rank, SUM(w) AS total FROM rf_counts GROUP BY rank),\n"         \
	"rf_defs AS (SELECT id, kind, coalesce(qualname, func) AS func,\n"                    \
	"    coalesce(CASE kind WHEN 'python' THEN file ELSE module END, '') AS file\n"       \
	"  FROM frame_defs),\n"                                                               \
	"rf_fns AS (SELECT min(id) AS fn, kind, func, file FROM rf_defs\n"                    \
	"  GROUP BY kind, func, file),\n"                                                     \
	"rf_fn_of AS (SELECT d.id AS frame_id, f.fn AS fn FROM rf_defs d\n"                   \
	"  JOIN rf_fns f ON f.kind = d.kind AND f.func = d.func AND f.file = d.file),\n"      \
	"rf_stack_fns AS (SELECT DISTINCT sf.stack_id AS stack_id, o.fn AS fn\n"              \
	"  FROM stack_frames sf JOIN rf_fn_of o ON o.frame_id = sf.frame_id\n"                \
	"  WHERE sf.stack_id IN (SELECT stack_id FROM rf_counts)),\n"                         \
	"rf_inclusive AS (SELECT c.rank AS rank, s.fn AS fn, SUM(c.n) AS samples,\n"          \
	"    SUM(c.w) AS w\n"                                                                 \
	"  FROM rf_counts c JOIN rf_stack_fns s ON s.stack_id = c.stack_id\n"                 \
	"  GROUP BY c.rank, s.fn),\n"                                                         \
	"rf_self AS (SELECT c.rank AS rank, o.fn AS fn, SUM(c.n) AS samples, SUM(c.w) AS w\n" \
	"  FROM rf_counts c\n"                                                                \
	"  JOIN stack_frames sf ON sf.stack_id = c.stack_id AND sf.depth = 0\n"               \
	"  JOIN rf_fn_of o ON o.frame_id = sf.frame_id GROUP BY c.rank, o.fn),\n"             \
	"rf_grid AS (SELECT t.rank AS rank, fn.fn AS fn,\n"                                   \
	"    coalesce(i.samples, 0) AS samples, coalesce(se.samples, 0) AS self_samples,\n"   \
	"    1.0 * coalesce(i.w, 0) / t.total AS share,\n"                                    \
	"    1.0 * coalesce(se.w, 0) / t.total AS self_share\n"                               \
	"  FROM rf_totals t CROSS JOIN (SELECT DISTINCT fn FROM rf_inclusive) fn\n"           \
	"  LEFT JOIN rf_inclusive i ON i.rank = t.rank AND i.fn = fn.fn\n"                    \
	"  LEFT JOIN rf_self se ON se.rank = t.rank AND se.fn = fn.fn),\n"                    \
	"rf_ordered AS (SELECT g.*,\n"                                                        \
	"    row_number() OVER (PARTITION BY fn ORDER BY share) AS i,\n"                      \
	"    count(*) OVER (PARTITION BY fn) AS nr FROM rf_grid g),\n"                        \
	"rf_medians AS (SELECT fn, avg(share)\n"                                              \
	"    FILTER (WHERE i IN ((nr + 1) / 2, (nr + 2) / 2)) AS median_share\n"              \
	"  FROM rf_ordered GROUP BY fn)"

#define RF_SELECT                                                         \
	"SELECT o.rank AS rank, f.kind AS kind, f.func AS func,\n"        \
	"  nullif(f.file, '') AS file, o.samples AS samples,\n"           \
	"  o.self_samples AS self_samples, o.share AS share,\n"           \
	"  o.self_share AS self_share, m.median_share AS median_share,\n" \
	"  o.share - m.median_share AS deviation\n"                       \
	"FROM rf_ordered o JOIN rf_medians m ON m.fn = o.fn JOIN rf_fns f ON f.fn = o.fn"

/*
 * rank_deviation, over rf (rank_functions' rows) and src. A function named "[unknown]", or a
 * native one named only by its library ("[libstdc++.so.6]": no symbol holds it, e.g. the
 * start routine of every std::thread, on every such thread's stack), says nothing of where
 * the time goes: the next one is named instead (a CI run once named libstdc++'s thread
 * root as the reason a sleeping rank was late: 0.80 of its time against a median 0.60).
 */
#define RD_CTES                                                                          \
	"rd_top AS (SELECT rank, kind, func, file, share, median_share, deviation,\n"    \
	"    row_number() OVER (PARTITION BY rank\n"                                     \
	"      ORDER BY deviation DESC, self_share DESC, func, file) AS k FROM rf\n"     \
	"  WHERE func <> '[unknown]' AND NOT (kind = 'native' AND func LIKE '[%%]')),\n" \
	"rd_ranks AS (SELECT rank, SUM(count) AS samples FROM src GROUP BY rank),\n"     \
	"rd_pids AS (SELECT rank, group_concat(pid, ',') AS pids\n"                      \
	"  FROM (SELECT DISTINCT rank, pid FROM src ORDER BY rank, pid)\n"               \
	"  GROUP BY rank)"

/*
 * rd_last(rank, collectives, entered_last, others_wait_ms): of the collectives a rank took
 * part in that were seen on several ranks (same group, op and seq), how many it entered
 * last, and how long the others had entered them before it, on average (the stragglers of
 * record's summary, collectives.c, per rank).
 */
#define RD_LAST                                                                                \
	"rd_calls AS (SELECT grp, op, seq, rank, start_ns,\n"                                  \
	"    max(start_ns) OVER w AS last_start\n"                                             \
	"  FROM collectives WHERE seq IS NOT NULL AND rank IS NOT NULL\n"                      \
	"  WINDOW w AS (PARTITION BY grp, op, seq)),\n"                                        \
	"rd_call AS (SELECT grp, op, seq,\n"                                                   \
	"    min(CASE WHEN start_ns = last_start THEN rank END) AS last_rank,\n"               \
	"    avg(CASE WHEN start_ns < last_start THEN last_start - start_ns END) AS wait_ns\n" \
	"  FROM rd_calls GROUP BY grp, op, seq HAVING count(DISTINCT rank) > 1),\n"            \
	"rd_in AS (SELECT DISTINCT rank, grp, op, seq FROM rd_calls),\n"                       \
	"rd_last AS (SELECT i.rank AS rank, count(*) AS collectives,\n"                        \
	"    count(*) FILTER (WHERE c.last_rank = i.rank) AS entered_last,\n"                  \
	"    round(avg(c.wait_ns) FILTER (WHERE c.last_rank = i.rank) / 1e6, 1)\n"             \
	"      AS others_wait_ms\n"                                                            \
	"  FROM rd_in i JOIN rd_call c ON c.grp IS i.grp AND c.op = i.op AND c.seq = i.seq\n"  \
	"  GROUP BY i.rank)"

/* The same columns for a recording without a collectives table: no rows. */
#define RD_LAST_NONE                                                                    \
	"rd_last AS (SELECT NULL AS rank, NULL AS collectives, NULL AS entered_last,\n" \
	"    NULL AS others_wait_ms WHERE 0)"

/* Whether the recording has off-CPU time (meta off_cpu, record --off-cpu). */
#define RD_OFFCPU_META \
	"coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'off_cpu'), 0)"

/* A rank is late when it entered last more than half of its collectives seen on several ranks. */
#define RD_LATE "coalesce(l.entered_last * 2 > l.collectives, 0)"

/* %s: RD_OFFCPU_META or an expression over src that says the same. */
#define RD_SELECT                                                                             \
	"SELECT r.rank AS rank, p.pids AS pids, r.samples AS samples,\n"                      \
	"  coalesce(t.deviation, 0.0) AS deviation, t.kind AS kind,\n"                        \
	"  t.func AS func, t.file AS file, t.share AS share,\n"                               \
	"  t.median_share AS median_share, l.collectives AS collectives,\n"                   \
	"  l.entered_last AS entered_last, l.others_wait_ms AS others_wait_ms,\n"             \
	"  CASE WHEN " RD_LATE " THEN printf('entered last in %%d of %%d collectives, the'\n" \
	"      || ' others waiting %%.1f ms for it on average', l.entered_last,\n"            \
	"      l.collectives, l.others_wait_ms) || CASE WHEN (%s) THEN '' ELSE\n"             \
	"      ': the time it is late is not on its CPU, and this recording has on-CPU'\n"    \
	"      || ' samples only: record with --off-cpu to see where it goes' END\n"          \
	"    WHEN NOT (%s) THEN 'on-CPU samples only: time spent waiting or sleeping'\n"      \
	"      || ' is not compared (record with --off-cpu)' END AS note\n"                   \
	"FROM rd_ranks r JOIN rd_pids p ON p.rank = r.rank\n"                                 \
	"  LEFT JOIN rd_top t ON t.rank = r.rank AND t.k = 1 AND t.deviation > 0\n"           \
	"  LEFT JOIN rd_last l ON l.rank = r.rank\n"                                          \
	"ORDER BY " RD_LATE " DESC, deviation DESC, r.rank"

static char *rank_deviation_sql(const char *src, const char *rf, bool collectives,
				const char *offcpu)
{
	char *select = NULL, *q = NULL;

	if (asprintf(&select, RD_SELECT, offcpu, offcpu) < 0)
		return NULL;
	if (asprintf(&q, "WITH src AS (%s),\n%s,\n" RD_CTES ",\n%s\n%s", src, rf,
		     collectives ? RD_LAST : RD_LAST_NONE, select) < 0)
		q = NULL;
	free(select);
	return q;
}

char *rankview_schema_sql(void)
{
	char *dev = rank_deviation_sql(SRC_ALL, "rf AS (SELECT * FROM rank_functions)", true,
				       RD_OFFCPU_META),
	     *q = NULL;

	if (dev && asprintf(&q,
			    "CREATE VIEW rank_functions AS\nWITH src AS (" SRC_ALL "),\n" RF_CTES
			    "\n" RF_SELECT ";\nCREATE VIEW rank_deviation AS\n%s;\n",
			    dev) < 0)
		q = NULL;
	free(dev);
	if (!q)
		errno = ENOMEM;
	return q;
}

char *rankview_deviation_query(const char *source, unsigned int flags)
{
	char *src = NULL, *q = NULL;

	if (asprintf(&src,
		     "SELECT p.rank AS rank, x.pid AS pid, x.stack_id AS stack_id,"
		     " x.count AS count, x.ns AS ns, x.state AS state FROM (%s) x"
		     " JOIN processes p ON p.pid = x.pid WHERE p.rank IS NOT NULL",
		     source) < 0)
		src = NULL;
	if (src)
		q = rank_deviation_sql(
			src, RF_CTES ",\nrf AS (" RF_SELECT ")", flags & RANKVIEW_COLLECTIVES,
			flags & RANKVIEW_META
				? RD_OFFCPU_META
				: "EXISTS (SELECT 1 FROM src WHERE state NOT IN (0, 'running'))");
	free(src);
	if (!q)
		errno = ENOMEM;
	return q;
}
