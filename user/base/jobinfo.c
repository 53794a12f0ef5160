// SPDX-License-Identifier: MIT
/* jobinfo: a process's rank and job from its environment; the processes under a process. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/jobinfo.h"
#include "base/procinfo.h"
#include "base/util.h"

/* The environment as one buffer of NUL-separated NAME=VALUE strings. */
struct environ {
	char *text;
	size_t len;
};

static const char *env_get(const struct environ *e, const char *name)
{
	size_t nlen = strlen(name);
	char *p;

	for (p = e->text; p && p < e->text + e->len; p += strlen(p) + 1)
		if (!strncmp(p, name, nlen) && p[nlen] == '=')
			return p + nlen + 1;
	return NULL;
}

/* The first of @names that is set to a number in [0, 2^30]; -1 if none. */
static int env_int(const struct environ *e, const char *const *names, const char **which)
{
	const char *v;
	long n;

	for (; *names; names++) {
		v = env_get(e, *names);
		if (v && !parse_long(v, 0, 1 << 30, &n)) {
			if (which)
				*which = *names;
			return (int)n;
		}
	}
	return -1;
}

static char *env_dup(const struct environ *e, const char *name)
{
	const char *v = env_get(e, name);

	return v && *v ? strdup(v) : NULL;
}

/*
 * The launcher whose variable gave the rank. RANK alone is not torchrun's: a shell script
 * (or any program) sets it too; torchrun's agent also gives every worker
 * TORCHELASTIC_RUN_ID. NULL: not known from the environment (the ranks' parent is what
 * launched them: btjob and pyscan name it by its command).
 */
static const char *launcher_of(const struct environ *e, const char *var)
{
	if (!var)
		return NULL;
	if (!strncmp(var, "SLURM_", 6))
		return "slurm";
	if (!strncmp(var, "OMPI_", 5))
		return "mpi";
	if (!strncmp(var, "PMI", 3))
		return "pmi";
	return env_get(e, "TORCHELASTIC_RUN_ID") ? "torchrun" : NULL;
}

/*
 * The host name in @pid's UTS namespace: ours when it shares it, else read by entering the
 * namespace on this thread for the duration of one uname() (root only; "" otherwise).
 */
static void read_host(pid_t pid, char *host, size_t size)
{
	struct stat mine, theirs;
	struct utsname u;
	char path[64];
	int self = -1, ns = -1;

	host[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/ns/uts", (int)pid);
	if (stat("/proc/self/ns/uts", &mine) || stat(path, &theirs) ||
	    mine.st_ino == theirs.st_ino) {
		if (!uname(&u))
			snprintf(host, size, "%s", u.nodename);
		return;
	}
	self = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
	ns = open(path, O_RDONLY | O_CLOEXEC);
	if (self >= 0 && ns >= 0 && !setns(ns, CLONE_NEWUTS)) {
		if (!uname(&u))
			snprintf(host, size, "%s", u.nodename);
		/* Back to our own namespace: cannot fail for a namespace we were in. */
		if (setns(self, CLONE_NEWUTS))
			host[0] = '\0';
	}
	if (self >= 0)
		close(self);
	if (ns >= 0)
		close(ns);
}

int jobinfo_read(pid_t pid, struct job_identity *out)
{
	static const char *const rank_vars[] = {"RANK",	     "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
						"PMIX_RANK", "PMI_RANK",     NULL};
	static const char *const local_vars[] = {
		"LOCAL_RANK",	   "SLURM_LOCALID",  "OMPI_COMM_WORLD_LOCAL_RANK",
		"MPI_LOCALRANKID", "PMI_LOCAL_RANK", NULL};
	static const char *const world_vars[] = {"WORLD_SIZE", "SLURM_NTASKS",
						 "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
	static const char *const group_vars[] = {"GROUP_RANK", "SLURM_NODEID",
						 "OMPI_COMM_WORLD_NODE_RANK", NULL};
	static const char *const port_vars[] = {"MASTER_PORT", NULL};
	struct environ e = {0};
	const char *which = NULL, *step;
	char path[64];

	memset(out, 0, sizeof(*out));
	out->rank = out->local_rank = out->world_size = out->group_rank = out->master_port = -1;
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	e.text = read_file(path, 1 << 22, &e.len);
	if (!e.text) {
		if (errno == ENOENT || errno == ESRCH)
			return -ESRCH;
		out->env_error = -errno;
	}
	read_host(pid, out->host, sizeof(out->host));
	if (!e.text)
		return procinfo_alive(pid) ? 0 : -ESRCH;
	out->rank = env_int(&e, rank_vars, &which);
	out->launcher = launcher_of(&e, which);
	out->local_rank = env_int(&e, local_vars, NULL);
	out->world_size = env_int(&e, world_vars, NULL);
	out->group_rank = env_int(&e, group_vars, NULL);
	out->master_port = env_int(&e, port_vars, NULL);
	out->master_addr = env_dup(&e, "MASTER_ADDR");
	out->job_id = env_dup(&e, "TORCHELASTIC_RUN_ID");
	if (!out->job_id && env_get(&e, "SLURM_JOB_ID")) {
		step = env_get(&e, "SLURM_STEP_ID");
		if (asprintf(&out->job_id, "%s%s%s", env_get(&e, "SLURM_JOB_ID"), step ? "." : "",
			     step ? step : "") < 0)
			out->job_id = NULL;
	}
	if (!out->job_id)
		out->job_id = env_dup(&e, "OMPI_MCA_ess_base_jobid");
	if (!out->job_id)
		out->job_id = env_dup(&e, "PMIX_NAMESPACE");
	free(e.text);
	return 0;
}

void jobinfo_free(struct job_identity *j)
{
	if (!j)
		return;
	free(j->job_id);
	free(j->master_addr);
	memset(j, 0, sizeof(*j));
	j->rank = j->local_rank = j->world_size = j->group_rank = j->master_port = -1;
}

bool jobinfo_has_rank(const struct job_identity *j)
{
	return j && j->rank >= 0;
}

const char *jobinfo_job_name(const struct job_identity *j)
{
	return j && j->job_id && strcmp(j->job_id, "none") ? j->job_id : NULL;
}

char *jobinfo_label(const struct job_identity *j, pid_t pid, bool host, char *buf, size_t size)
{
	const char *h = host && j && j->host[0] ? j->host : NULL;

	if (jobinfo_has_rank(j))
		snprintf(buf, size, "rank %d (pid %d%s%s)", j->rank, (int)pid, h ? " on " : "",
			 h ? h : "");
	else
		snprintf(buf, size, "pid %d%s%s", (int)pid, h ? " on " : "", h ? h : "");
	return buf;
}

int jobinfo_descendants(pid_t pid, pid_t **pids, int *n)
{
	struct proc {
		pid_t pid, ppid;
	} *all = NULL, *tmp;
	size_t nall = 0, cap = 0;
	pid_t *out = NULL, *grown;
	int nout = 0, i, err = 0;
	struct dirent *d;
	size_t k;
	DIR *dir;
	long v;

	*pids = NULL;
	*n = 0;
	if (!procinfo_alive(pid))
		return -ESRCH;
	dir = opendir("/proc");
	if (!dir)
		return -errno;
	while ((d = readdir(dir))) {
		if (parse_long(d->d_name, 1, 0x7fffffff, &v))
			continue;
		if (nall == cap) {
			cap = cap ? cap * 2 : 256;
			tmp = realloc(all, cap * sizeof(*all));
			if (!tmp) {
				err = -ENOMEM;
				goto cleanup;
			}
			all = tmp;
		}
		all[nall].pid = (pid_t)v;
		all[nall].ppid = procinfo_ppid((pid_t)v);
		nall++;
	}
	out = malloc(sizeof(*out) * (nall + 1));
	if (!out) {
		err = -ENOMEM;
		goto cleanup;
	}
	out[nout++] = pid;
	/* Breadth first: out[i]'s children are appended as i walks the list. */
	for (i = 0; i < nout; i++)
		for (k = 0; k < nall; k++)
			if (all[k].ppid == out[i] && all[k].pid != pid)
				out[nout++] = all[k].pid;
	grown = realloc(out, sizeof(*out) * nout);
	*pids = grown ? grown : out;
	*n = nout;
	out = NULL;
cleanup:
	if (dir)
		closedir(dir);
	free(all);
	free(out);
	return err;
}
