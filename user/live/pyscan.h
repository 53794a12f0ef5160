/* SPDX-License-Identifier: MIT */
/*
 * pyscan: the Python processes of this machine — every process running CPython that we may
 * inspect, whether the probing agent runs in it or not — with their place in a distributed
 * job (base/jobinfo.h), grouped by job. What `probing list --all`, `probing serve`'s live page
 * and `probing mcp`'s list_processes show.
 */
#ifndef PROBING_PYSCAN_H
#define PROBING_PYSCAN_H

#include <stdbool.h>
#include <sys/types.h>

#include "base/jobinfo.h"

struct strbuf;

struct pyscan_proc {
	pid_t pid, ppid;
	uid_t uid;
	bool agent;    /* the probing agent listens in it (probing inject, probing run) */
	char *command; /* command line, arguments joined by spaces (the target's bytes) */
	char *job;     /* the job it belongs to (pyscan__list), NULL if none */
	bool launcher; /* no rank of its own, but the parent of ranks of its job (torchrun) */
	bool worker;   /* a child of a process of the same rank (a DataLoader worker), which it
			* inherited the rank from: not a rank of its own */
	struct job_identity id;
};

/*
 * Every Python process (live__is_python) this process may read, sorted by job (processes of
 * no job last), then rank, then pid. A process's job is the launcher's job id
 * (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ...), else the rendezvous MASTER_ADDR:MASTER_PORT,
 * else, for a process with a rank, "ranks of pid PPID" (its parent started them); a
 * process without a rank whose children are ranks of one job is that job's launcher, and a
 * child of a rank with the same rank (inherited with the environment) is a worker of it.
 * Return 0 and *@out (free with pyscan__free), *@n, or -errno (-ENOMEM, or /proc unreadable).
 */
int pyscan__list(struct pyscan_proc **out, int *n);

void pyscan__free(struct pyscan_proc *procs, int n);

/*
 * Append @procs as JSON: {"processes": [{"pid", "ppid", "uid", "agent", "command", "job",
 * "launcher", "worker", "rank", "local_rank", "world_size", "host", "launched_by"}...], "jobs":
 * [{"job", "launched_by", "world_size", "ranks": [pids in rank order], "workers": [pids],
 * "launcher": pid or null}...]} (unknown numbers are null). Return 0 or -ENOMEM.
 */
int pyscan__json(const struct pyscan_proc *procs, int n, struct strbuf *out);

/*
 * The processes in which an agent listens: owners of the abstract sockets @probing-... of this
 * network namespace (/proc/net/unix), among those whose file descriptors we may read. Sorted,
 * malloc'd into *@out. Return 0 or -errno.
 */
int pyscan__agent_pids(pid_t **out, int *nr);

#endif
