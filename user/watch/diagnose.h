/* SPDX-License-Identifier: MIT */
/*
 * diagnose: what a stalled job's ranks are doing, in words a person can act on. From each
 * rank's collective under way (or none), its last completion, its death, and where its main
 * thread is (a backtrace snapshot), name the classic cases: one rank elsewhere while the
 * others wait (the culprit and its victims), ranks in different collectives at the same
 * point (a mismatch), every rank in the same collective (the peer is on another node, or the
 * transport), a dead rank, and no rank in any collective (no progress). Pure: no I/O.
 */
#ifndef PROBING_DIAGNOSE_H
#define PROBING_DIAGNOSE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* A rank (a process of the job) as the watch sees it at a stall. */
struct dg_rank {
	pid_t pid;
	int rank;	/* -1 unknown */
	char label[96]; /* "rank 1 (pid 1234)" or "pid 1234" */
	bool dead;	/* it ended while watched */
	int status;	/* dead: as wait(2) reports it */
	double exit_ts; /* dead: unix seconds */
	bool in_coll;	/* a collective under way */
	char op[32];	/* its op, group and seq (-1 unknown), and when it entered it (unix s) */
	char grp[64];
	int64_t seq;
	double entered;
	double last_done; /* unix seconds of its latest completed collective, 0: none seen */
	/* Where its main thread is (the snapshot): the innermost Python frame, or native
	 * function; func "" when unknown. */
	char func[128];
	char file[256];
	int line;
	char state;    /* its /proc state letter ('R' on a CPU), 0 unknown */
	char wait[96]; /* what it waits in ("in futex (lock)"), "" */
	/* The local variables of that frame read from outside, "shard='x', step=20" (reprs
	 * cut), "" when none; escaped by diagnose. */
	char locals[256];
};

enum dg_kind {
	DG_NONE = 0,	/* nothing stalled (ranks progress) */
	DG_CULPRIT,	/* ranks elsewhere while the others wait for them */
	DG_MISMATCH,	/* ranks in different collectives */
	DG_ALL_WAIT,	/* every rank here in the same collective */
	DG_DEAD,	/* a rank died */
	DG_NO_PROGRESS, /* no rank in a collective, none completed one */
};

struct dg_input {
	int n;
	const struct dg_rank *r;
	double now;	/* unix seconds */
	int world_size; /* ranks in the job, -1 unknown */
	int nodes;	/* the nodes whose ranks @r holds: 0 or 1 (one watch), or the number of
			 * watch reports merged (wording: "these nodes" for "this node") */
};

struct dg_result {
	enum dg_kind kind;
	pid_t culprit; /* the rank to look at first (0: none) */
	int culprit_rank;
	char text[4096]; /* lines, each ending in '\n'; text from targets escaped */
};

/* Diagnose @in into *@out. */
void diagnose(const struct dg_input *in, struct dg_result *out);

/* "culprit", "mismatch", "all-waiting", "dead-rank", "no-progress", "none". */
const char *diagnose_kind_name(enum dg_kind k);

/* How a process ended, from its wait(2) status: "killed by SIGSEGV (core dumped)",
 * "exited with status 3", "exited normally". */
const char *diagnose_exit_str(int status, char *buf, size_t size);

#endif
