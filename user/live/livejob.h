/* SPDX-License-Identifier: MIT */
/*
 * livejob: the processes a live command acts on when it is given a job rather than one
 * process: -p PID[,PID...] and --children (each PID and every descendant it has now), each
 * with its place in the job (rank, local rank, world size, host: base/jobinfo.h) read from
 * its environment, named "rank 3 (pid 1234)" wherever probing shows it; and running a
 * command's work on each of them in turn.
 */
#ifndef PROBING_LIVEJOB_H
#define PROBING_LIVEJOB_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/jobinfo.h"
#include "live/live.h"

struct job_proc {
	pid_t pid;
	struct job_identity id; /* rank... (jobinfo_read), all unknown when unreadable */
	char label[96];		/* "rank 3 (pid 1234)" or "pid 1234" */
};

struct job_procs {
	int n;
	struct job_proc *p; /* sorted: processes without a rank first (in the order found:
			     * a launcher before what it started), then by rank */
	int unreadable;	    /* how many environments could not be read (rank unknown) */
};

/*
 * The processes of @pids (@npids of them) and, with @children, of all their descendants that
 * exist now (jobinfo_descendants), each once. A given pid that does not exist is an error
 * (printed, "probing CMD: no such process: PID"); a descendant that exits while this runs is
 * left out. Return EXIT_OK and *@out (free with livejob__free), or EXIT_FAIL.
 */
int livejob__resolve(const char *cmd, const pid_t *pids, int npids, bool children,
		     struct job_procs *out);

/* Parse -p's "PID[,PID...]" (@arg) for @cmd and resolve it as above. Usage errors return
 * EXIT_USAGE (printed). */
int livejob__resolve_arg(const char *cmd, const char *arg, bool children, struct job_procs *out);

void livejob__free(struct job_procs *j);

/*
 * Does a live command's -p/-t value @arg with --children (@children) name several processes
 * (a job) rather than one?
 */
bool livejob__wanted(const char *arg, bool children);

/*
 * For a live command that takes -p PID or -t PID|HOST:PORT (@pid_arg, @t_arg): resolve the
 * job, as livejob__resolve_arg; an agent's HOST:PORT is a usage error (a job is processes).
 * Non-Python processes are left out when @python_only (said on stderr, not a failure).
 */
int livejob__from_opts(const char *cmd, const char *pid_arg, const char *t_arg, bool children,
		       bool python_only, struct job_procs *out);

/*
 * Say once on stderr, for @cmd, that some processes' environments could not be read, so that
 * their rank is unknown (another user's processes: run as root or as their owner).
 */
void livejob__note_unreadable(const char *cmd, const struct job_procs *j);

/* The header printed before a process's output when a command acts on several:
 * "==> rank 3 (pid 1234) <==", preceded by a blank line unless @first. */
void livejob__header(FILE *f, const struct job_proc *p, bool first);

/*
 * Run @fn on each process of @j in turn, with livejob__header before each when there are
 * several (output flushed between them). A process that exited before its turn is reported
 * as gone on stderr, not as a failure; so is a failure in a process without a rank when others
 * have one (the job's launcher: torchrun has no torch.distributed of its own). Return EXIT_OK
 * if every other @fn returned EXIT_OK, else the first other status.
 */
int livejob__each(const char *cmd, const struct job_procs *j,
		  int (*fn)(const struct job_proc *p, void *ctx), void *ctx);

/* What a live command with --children acts on: a job (j.n > 0) or one target (t). */
struct live_sel {
	struct job_procs j;
	struct live_target t;
};

/*
 * For a live command taking -p/-t and --children (@lo): the job they name (livejob__wanted;
 * livejob__from_opts, with @python_only), else the one target (live__target). Return EXIT_OK
 * and *@sel (free with livejob__sel_free), or the status of what failed (printed).
 */
int livejob__select(const char *cmd, const struct live_opts *lo, bool python_only,
		    struct live_sel *sel);

/*
 * Run @fn on what @sel names: on its one target, or on each process of its job as a pid
 * target (livejob__note_unreadable, then livejob__each). Return what @fn or livejob__each
 * returned.
 */
int livejob__run(const char *cmd, const struct live_sel *sel,
		 int (*fn)(const struct live_target *t, const void *ctx), const void *ctx);

void livejob__sel_free(struct live_sel *sel);

#endif
