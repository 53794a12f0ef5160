/* SPDX-License-Identifier: MIT */
/*
 * rankview: the SQL that compares the ranks of a distributed job in a recording — per rank,
 * the share of its samples in each function, the median rank's share, and which rank
 * deviates from the median the most (the straggler), with the function where it does. One
 * text serves the views every recording has (rank_functions, rank_deviation; docs/sql.md
 * "Comparing ranks") and the reports that compare a part of a recording (flamegraph --by
 * rank with --from/--to): both compute the same thing.
 */
#ifndef PROBING_RANKVIEW_H
#define PROBING_RANKVIEW_H

/*
 * The CREATE VIEW statements of rank_functions and rank_deviation (store.c's schema), which
 * read sample_counts, processes, collectives and meta. Returns a malloc'd string, or NULL
 * (errno = ENOMEM).
 */
char *rankview_schema_sql(void);

/* What the recording has, for rankview_deviation_query. */
enum {
	RANKVIEW_COLLECTIVES = 1, /* a collectives table or view (record's collectives) */
	RANKVIEW_META = 2,	  /* a meta table, whose off_cpu says whether it has off-CPU time */
};

/*
 * A query with rank_deviation's columns for the samples @source selects: @source is a SELECT
 * with columns pid, stack_id, count, ns (NULL: weigh by count) and state (0 or 'running' when
 * on a CPU) (more may follow; their names matter, not their order), whose processes' ranks
 * come from the recording's processes table. @flags (RANKVIEW_*) say what else the recording
 * has: without RANKVIEW_COLLECTIVES the collectives columns are NULL; without RANKVIEW_META
 * off-CPU time is told by the states of @source's rows. Returns a malloc'd string, or NULL
 * (errno = ENOMEM).
 */
char *rankview_deviation_query(const char *source, unsigned int flags);

#endif
