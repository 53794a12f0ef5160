/* SPDX-License-Identifier: MIT */
/*
 * topview: the table of 'probing top' — the hottest functions of a recording being written,
 * with their self and inclusive time and the share of it spent waiting, and why.
 *
 * A function is (kind, name, file) as in rank_functions (docs/sql.md): a Python function by
 * its qualified name and file, shown with the line where it spends the most time; a native
 * or kernel one by its name and library. Times are samples.ns (on-CPU samples count one
 * sampling period each, off-CPU observations the time they stand for); shares are of all the
 * time read (every thread of every process recorded, or of one rank).
 *
 *   store (a recording being written) -> topview__read -> topview__render -> text lines
 */
#ifndef PROBING_TOPVIEW_H
#define PROBING_TOPVIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"
#include "bpf/waitclass.h"
#include "record/store.h"

struct topview_opts {
	bool waits;    /* count time off the CPU too (else only state 'running') */
	bool by_total; /* order by inclusive time (else by self time) */
	bool native;   /* native frames of stacks with Python frames too (else a stack's
			   * Python frames only, where it has any: native code is counted
			   * in the Python function that called it, as py-spy does) */
	int rank;      /* only the processes of this rank; -1: every process */
	int64_t since; /* only sample_counts rows after this rowid (a reset: topview__mark) */
	int limit;     /* at most this many functions (1-1000) */
};

struct topview_row {
	const char *kind;	  /* "python", "native", "kernel" */
	char *func;		  /* the function (Python: its qualified name) */
	char *file;		  /* Python: its file; native: its library; NULL when unknown */
	int line;		  /* Python: its line with the most time; 0: unknown */
	double own_ns;		  /* time with it as the leaf */
	double total_ns;	  /* time with it anywhere on the stack */
	double state_ns[WAIT_NR]; /* total_ns by thread state (enum wait_state) */
};

struct topview {
	struct topview_row *rows; /* nrows of them, the hottest first */
	int nrows;
	double total_ns;	  /* all the time read (the shares' denominator) */
	double state_ns[WAIT_NR]; /* total_ns by state, whatever opts.waits says */
	int threads, processes;	  /* with samples in what was read */
	int ranks[64];		  /* the ranks of the recording, ascending (at most 64) */
	int nranks;
};

/*
 * Read the hottest functions of the recording @st (store__select: what is pending is written
 * first) as @o says into *@tv (emptied first). Return 0 or -errno (said by the store).
 */
int topview__read(struct store *st, const struct topview_opts *o, struct topview *tv);

/* The rowid of the last sample_counts row of @st (0: none), for topview_opts.since. */
int64_t topview__mark(struct store *st);

/*
 * Append @tv as a fixed-width table to @sb: a line of shares by state, the column titles,
 * then a row per function, at most @height lines in all (0: no limit), each at most @width
 * columns (at least 60; the function's name is cut to fit). Names are escaped (escape.h):
 * nothing from the target reaches the terminal as a control character. Lines end in "\n".
 * Return 0 or -ENOMEM.
 */
int topview__render(const struct topview *tv, const struct topview_opts *o, int width, int height,
		    struct strbuf *sb);

/* Free what topview__read allocated; *@tv is then empty. */
void topview__free(struct topview *tv);

#endif
