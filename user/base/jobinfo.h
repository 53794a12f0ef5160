/* SPDX-License-Identifier: MIT */
/*
 * jobinfo: a process's place in a distributed job, read from its environment
 * (/proc/PID/environ) as the launchers set it — torchrun / torch.distributed.run, Slurm
 * (srun), Open MPI (mpirun), PMI/PMIx — and the processes of a job (a process and its
 * descendants). What is read is the target's data: numbers are parsed strictly and text is
 * kept as bytes for the caller to escape.
 */
#ifndef PROBING_JOBINFO_H
#define PROBING_JOBINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct job_identity {
	int rank;	      /* global rank, -1 unknown */
	int local_rank;	      /* rank on its node, -1 unknown */
	int world_size;	      /* ranks in the job, -1 unknown */
	int group_rank;	      /* its node's (agent's) rank: GROUP_RANK, SLURM_NODEID; -1 */
	char *job_id;	      /* TORCHELASTIC_RUN_ID, SLURM_JOB_ID[.STEP], the MPI job; NULL */
	char *master_addr;    /* MASTER_ADDR (rendezvous host); NULL */
	int master_port;      /* MASTER_PORT; -1 */
	const char *launcher; /* "torchrun" (with TORCHELASTIC_RUN_ID), "slurm", "mpi", "pmi",
			       * NULL (none, or RANK set by a script); static strings */
	char host[65];	      /* the host name the process sees (its UTS namespace); "" unknown */
	int env_error;	      /* 0, or -errno when the environment could not be read (e.g.
			       * -EACCES: another user's process, without root) */
};

/*
 * Fill *@out for @pid. Fields the environment does not give stay unknown (-1 / NULL); a
 * process whose environment cannot be read gets everything unknown and env_error set, which
 * is not a failure. Return 0, or -ESRCH when @pid is gone. Free with jobinfo_free().
 */
int jobinfo_read(pid_t pid, struct job_identity *out);

/* Free what jobinfo_read() allocated; *@j is left all unknown. NULL is a no-op. */
void jobinfo_free(struct job_identity *j);

/* true if @j places its process in a job (a rank is known). */
bool jobinfo_has_rank(const struct job_identity *j);

/*
 * The job's id worth showing: @j->job_id, except torchrun's "none" (TORCHELASTIC_RUN_ID of a
 * job started without --rdzv_id), which names no job. NULL if none.
 */
const char *jobinfo_job_name(const struct job_identity *j);

/*
 * How a process is named wherever probing shows one: "rank 3 (pid 1234)", or "pid 1234"
 * when no rank is known; with @host set and @j->host known, "rank 3 (pid 1234 on node2)".
 * Returns @buf.
 */
char *jobinfo_label(const struct job_identity *j, pid_t pid, bool host, char *buf, size_t size);

/*
 * The processes of the job rooted at @pid: @pid first, then its living descendants (children,
 * their children, ...) in breadth-first order, read from /proc at this moment. *@pids is
 * malloc'd. Return 0 or -errno (-ESRCH: @pid is gone).
 */
int jobinfo_descendants(pid_t pid, pid_t **pids, int *n);

#endif
