// SPDX-License-Identifier: MIT
/* pyscan: the Python processes of this machine, their agents and their jobs. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/escape.h"
#include "base/procinfo.h"
#include "base/util.h"
#include "injector/agent.h"
#include "live/live.h"
#include "live/pyscan.h"

static int pid_cmp(const void *a, const void *b)
{
	return *(const pid_t *)a - *(const pid_t *)b;
}

struct sock {
	unsigned long long ino;
	pid_t pid;
};

static int sock_cmp(const void *a, const void *b)
{
	const struct sock *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int pid_of_sock(const struct sock *s, int n, unsigned long long ino)
{
	int lo = 0, hi = n - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (s[mid].ino == ino)
			return mid;
		if (s[mid].ino < ino)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/*
 * The number in the socket's name is the pid in the process's own pid namespace, so the owner
 * is found by the socket's inode among the file descriptors of every process we may read.
 */
int pyscan__agent_pids(pid_t **out, int *nr)
{
	char *buf, *line, *save = NULL;
	struct sock *socks = NULL, *stmp;
	pid_t *pids = NULL, *tmp;
	int n = 0, cap = 0, ns = 0, scap = 0, i;
	struct dirent *pe, *fe;
	DIR *proc, *fds;

	buf = read_file("/proc/net/unix", 0, NULL);
	if (!buf)
		return -errno;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long flags = 0;
		unsigned long long ino;
		char path[256] = "";

		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %llu %255s", &flags, &ino, path) < 3)
			continue;
		/* __SO_ACCEPTCON (0x10000): a listening socket. */
		if (!(flags & 0x10000) || path[0] != '@' ||
		    strncmp(path + 1, AGENT_SOCK_PREFIX, strlen(AGENT_SOCK_PREFIX)))
			continue;
		if (ns == scap) {
			scap = scap ? scap * 2 : 16;
			stmp = realloc(socks, scap * sizeof(*socks));
			if (!stmp)
				goto nomem;
			socks = stmp;
		}
		socks[ns++] = (struct sock){ino, 0};
	}
	free(buf);
	buf = NULL;
	*out = NULL;
	*nr = 0;
	if (!ns)
		return 0;
	qsort(socks, ns, sizeof(*socks), sock_cmp);
	proc = opendir("/proc");
	if (!proc)
		goto nomem;
	while ((pe = readdir(proc))) {
		char dir[300];
		pid_t pid = atoi(pe->d_name);

		if (pid <= 0)
			continue;
		snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
		fds = opendir(dir);
		if (!fds)
			continue; /* not ours to read */
		while ((fe = readdir(fds))) {
			char fn[600], link[64];
			unsigned long long ino;
			ssize_t l;

			snprintf(fn, sizeof(fn), "%s/%s", dir, fe->d_name);
			l = readlink(fn, link, sizeof(link) - 1);
			if (l <= 0)
				continue;
			link[l] = '\0';
			if (sscanf(link, "socket:[%llu]", &ino) != 1)
				continue;
			i = pid_of_sock(socks, ns, ino);
			if (i >= 0 && !socks[i].pid)
				socks[i].pid = pid;
		}
		closedir(fds);
	}
	closedir(proc);
	for (i = 0; i < ns; i++) {
		if (!socks[i].pid)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			tmp = realloc(pids, cap * sizeof(*pids));
			if (!tmp)
				goto nomem;
			pids = tmp;
		}
		pids[n++] = socks[i].pid;
	}
	free(socks);
	if (n)
		qsort(pids, n, sizeof(*pids), pid_cmp);
	*out = pids;
	*nr = n;
	return 0;
nomem:
	free(buf);
	free(socks);
	free(pids);
	return -ENOMEM;
}

static bool has_pid(const pid_t *pids, int n, pid_t pid)
{
	return n && bsearch(&pid, pids, n, sizeof(*pids), pid_cmp);
}

/*
 * The job of every process, in one place (issue 10 may grow it): the launcher's job id, else
 * the rendezvous address, else the parent that started the ranks; launchers are the rankless
 * parents of a job's ranks.
 */
static int assign_jobs(struct pyscan_proc *p, int n)
{
	int i, j;

	for (i = 0; i < n; i++) {
		const struct job_identity *id = &p[i].id;
		int rc = 0;

		if (jobinfo_job_name(id))
			p[i].job = strdup(jobinfo_job_name(id));
		else if (id->master_addr && id->master_port >= 0 && jobinfo_has_rank(id))
			rc = asprintf(&p[i].job, "%s:%d", id->master_addr, id->master_port);
		else if (jobinfo_has_rank(id))
			rc = asprintf(&p[i].job, "ranks of pid %d", (int)p[i].ppid);
		else
			continue;
		if (rc < 0 || !p[i].job) {
			p[i].job = NULL;
			return -ENOMEM;
		}
	}
	for (i = 0; i < n; i++) {
		for (j = 0; p[i].job && j < n; j++)
			if (p[j].pid == p[i].ppid && p[j].job && !strcmp(p[j].job, p[i].job) &&
			    jobinfo_has_rank(&p[i].id) && p[j].id.rank == p[i].id.rank)
				p[i].worker = true;
		if (p[i].job)
			continue;
		for (j = 0; j < n; j++) {
			if (p[j].ppid == p[i].pid && p[j].job && jobinfo_has_rank(&p[j].id)) {
				p[i].job = strdup(p[j].job);
				if (!p[i].job)
					return -ENOMEM;
				p[i].launcher = true;
				break;
			}
		}
	}
	return 0;
}

static int proc_cmp(const void *a, const void *b)
{
	const struct pyscan_proc *x = a, *y = b;
	int c;

	if (!x->job != !y->job)
		return x->job ? -1 : 1;
	if (x->job && (c = strcmp(x->job, y->job)))
		return c;
	if (x->launcher != y->launcher)
		return x->launcher ? -1 : 1;
	if (x->id.rank != y->id.rank)
		return x->id.rank < y->id.rank ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

int pyscan__list(struct pyscan_proc **out, int *nout)
{
	struct pyscan_proc *procs = NULL, *tmp, *p;
	pid_t *agents = NULL, self = getpid();
	int n = 0, nagents = 0, err;
	size_t cap = 0;
	struct dirent *d;
	DIR *dir;
	long v, uid;

	*out = NULL;
	*nout = 0;
	if (pyscan__agent_pids(&agents, &nagents))
		nagents = 0; /* no /proc/net/unix (another network namespace?): no agents known */
	dir = opendir("/proc");
	if (!dir) {
		err = -errno;
		free(agents);
		return err;
	}
	err = 0;
	while ((d = readdir(dir))) {
		if (parse_long(d->d_name, 1, 0x7fffffff, &v) || v == self)
			continue;
		/* Kernel threads, processes we may not read and the ones gone meanwhile: < 1. */
		if (live__is_python((pid_t)v) != 1)
			continue;
		if (n == (int)cap) {
			cap = cap ? cap * 2 : 32;
			tmp = realloc(procs, cap * sizeof(*procs));
			if (!tmp) {
				err = -ENOMEM;
				break;
			}
			procs = tmp;
		}
		p = &procs[n];
		memset(p, 0, sizeof(*p));
		p->pid = (pid_t)v;
		if (jobinfo_read(p->pid, &p->id))
			continue; /* gone */
		p->ppid = procinfo_ppid(p->pid);
		uid = procinfo_uid(p->pid);
		p->uid = uid >= 0 ? (uid_t)uid : (uid_t)-1;
		p->command = procinfo_cmdline(p->pid);
		p->agent = has_pid(agents, nagents, p->pid);
		n++;
		if (!p->command) {
			if (errno == ENOMEM) {
				err = -ENOMEM;
				break;
			}
			p->command = strdup("");
			if (!p->command) {
				err = -ENOMEM;
				break;
			}
		}
	}
	closedir(dir);
	free(agents);
	if (!err)
		err = assign_jobs(procs, n);
	if (err) {
		pyscan__free(procs, n);
		return err;
	}
	if (n)
		qsort(procs, n, sizeof(*procs), proc_cmp);
	*out = procs;
	*nout = n;
	return 0;
}

void pyscan__free(struct pyscan_proc *procs, int n)
{
	int i;

	for (i = 0; procs && i < n; i++) {
		free(procs[i].command);
		free(procs[i].job);
		jobinfo_free(&procs[i].id);
	}
	free(procs);
}

/* A number, or null when unknown (< 0). */
static int json_num(struct strbuf *out, const char *key, long long v)
{
	return v >= 0 ? sb_printf(out, ",\"%s\":%lld", key, v)
		      : sb_printf(out, ",\"%s\":null", key);
}

static int json_text(struct strbuf *out, const char *key, const char *s)
{
	int err = sb_printf(out, ",\"%s\":", key);

	return err ? err : json_string(out, s, s ? strlen(s) : 0);
}

/* Longest launcher command line shown (the rest is cut: "..."). */
#define LAUNCHER_CMD_MAX 160

/*
 * What launched the ranks @p[@i..@j) of one job when their environment does not say (RANK set
 * by a script): the command of their parent, if they have one parent, from the list or from
 * /proc ("sh launch.sh"). malloc'd, or NULL.
 */
static char *parent_command(const struct pyscan_proc *p, int n, int i, int j)
{
	pid_t ppid = -1;
	char *cmd = NULL;
	int k;

	for (k = i; k < j; k++) {
		if (p[k].launcher || p[k].worker || !jobinfo_has_rank(&p[k].id))
			continue;
		if (p[k].ppid <= 0 || (ppid > 0 && p[k].ppid != ppid))
			return NULL;
		ppid = p[k].ppid;
	}
	if (ppid <= 0)
		return NULL;
	for (k = 0; k < n && !cmd; k++)
		if (p[k].pid == ppid && p[k].command && p[k].command[0])
			cmd = strdup(p[k].command);
	if (!cmd)
		cmd = procinfo_cmdline(ppid);
	if (cmd && !cmd[0]) {
		free(cmd);
		return NULL;
	}
	if (cmd && strlen(cmd) > LAUNCHER_CMD_MAX)
		strcpy(cmd + LAUNCHER_CMD_MAX - 3, "...");
	return cmd;
}

int pyscan__json(const struct pyscan_proc *p, int n, struct strbuf *out)
{
	int i, j, err;

	err = sb_puts(out, "{\"processes\":[");
	for (i = 0; !err && i < n; i++) {
		err = sb_printf(out, "%s{\"pid\":%d", i ? ",\n" : "\n", (int)p[i].pid);
		err = err ?: json_num(out, "ppid", p[i].ppid);
		err = err ?: json_num(out, "uid", p[i].uid == (uid_t)-1 ? -1 : (long long)p[i].uid);
		err = err ?: sb_printf(out, ",\"agent\":%s", p[i].agent ? "true" : "false");
		err = err ?: json_text(out, "command", p[i].command);
		err = err ?: json_text(out, "job", p[i].job);
		err = err
			      ?: sb_printf(out, ",\"launcher\":%s,\"worker\":%s",
					   p[i].launcher ? "true" : "false",
					   p[i].worker ? "true" : "false");
		err = err ?: json_num(out, "rank", p[i].id.rank);
		err = err ?: json_num(out, "local_rank", p[i].id.local_rank);
		err = err ?: json_num(out, "world_size", p[i].id.world_size);
		err = err ?: json_text(out, "host", p[i].id.host[0] ? p[i].id.host : NULL);
		err = err ?: json_text(out, "launched_by", p[i].id.launcher);
		err = err ?: sb_puts(out, "}");
	}
	err = err ?: sb_puts(out, "],\n\"jobs\":[");
	/* The list is sorted by job: each job's processes are one run. */
	for (i = 0; !err && i < n; i = j) {
		const char *launched_by = NULL;
		char *cmd;
		int world = -1, k, first = 1;
		pid_t launcher = 0;

		for (j = i; j < n && p[j].job && p[i].job && !strcmp(p[j].job, p[i].job); j++) {
			if (p[j].launcher)
				launcher = p[j].pid;
			if (p[j].id.world_size > world)
				world = p[j].id.world_size;
			if (!launched_by)
				launched_by = p[j].id.launcher;
		}
		if (j == i) /* processes of no job: the rest of the list */
			break;
		cmd = launched_by ? NULL : parent_command(p, n, i, j);
		err = sb_printf(out, "%s{", i ? ",\n" : "\n");
		err = err ?: sb_puts(out, "\"job\":");
		err = err ?: json_string(out, p[i].job, strlen(p[i].job));
		err = err ?: json_text(out, "launched_by", launched_by ? launched_by : cmd);
		free(cmd);
		err = err ?: json_num(out, "world_size", world);
		err = err ?: sb_puts(out, ",\"ranks\":[");
		for (k = i; !err && k < j; k++) {
			if (p[k].launcher || p[k].worker)
				continue;
			err = sb_printf(out, "%s%d", first ? "" : ",", (int)p[k].pid);
			first = 0;
		}
		err = err ?: sb_puts(out, "],\"workers\":[");
		for (k = i, first = 1; !err && k < j; k++) {
			if (!p[k].worker)
				continue;
			err = sb_printf(out, "%s%d", first ? "" : ",", (int)p[k].pid);
			first = 0;
		}
		err = err ?: sb_puts(out, "]");
		err = err ?: json_num(out, "launcher", launcher ? launcher : -1);
		err = err ?: sb_puts(out, "}");
	}
	return err ?: sb_puts(out, "]}\n");
}
