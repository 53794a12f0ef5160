// SPDX-License-Identifier: MIT
/* livejob: a process and its descendants, each named by its rank. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"
#include "live/live.h"
#include "live/livejob.h"

static int compare_procs(const void *a, const void *b)
{
	const struct job_proc *x = a, *y = b;
	int rx = x->id.rank, ry = y->id.rank;

	if ((rx < 0) != (ry < 0))
		return rx < 0 ? -1 : 1; /* no rank (a launcher) first */
	if (rx != ry)
		return rx < ry ? -1 : 1;
	return 0;
}

static bool listed(const struct job_procs *j, pid_t pid)
{
	int i;

	for (i = 0; i < j->n; i++)
		if (j->p[i].pid == pid)
			return true;
	return false;
}

/* Add @pid to @j; one gone meanwhile is -ESRCH, or kept (rank unknown) with @keep_gone. */
static int add_proc(struct job_procs *j, size_t *cap, pid_t pid, bool keep_gone)
{
	struct job_proc *p;

	if (listed(j, pid))
		return 0;
	if (grow_array(&j->p, cap, (size_t)j->n + 1, sizeof(*j->p)))
		return -ENOMEM;
	p = &j->p[j->n];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	if (jobinfo_read(pid, &p->id)) {
		if (!keep_gone)
			return -ESRCH; /* gone meanwhile */
		p->id.rank = p->id.local_rank = p->id.world_size = p->id.group_rank = -1;
	}
	jobinfo_label(&p->id, pid, false, p->label, sizeof(p->label));
	if (p->id.env_error)
		j->unreadable++;
	j->n++;
	return 0;
}

int livejob__resolve(const char *cmd, const pid_t *pids, int npids, bool children,
		     struct job_procs *out)
{
	pid_t *tree = NULL;
	size_t cap = 0;
	int ntree = 0, i, k, err;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < npids; i++) {
		/* One process must be there; in a job, one that has just exited (a zombie) is
		 * part of it, reported as gone by the command. */
		if (npids == 1 && !children
			    ? cli_check_pid(cmd, pids[i])
			    : kill(pids[i], 0) && errno == ESRCH && cli_check_pid(cmd, pids[i]))
			goto fail;
		if (children) {
			err = jobinfo_descendants(pids[i], &tree, &ntree);
			if (err == -ESRCH) {
				log_cmd(cmd, "no such process: %d (it exited)", pids[i]);
				goto fail;
			}
			if (err) {
				log_cmd(cmd, "cannot list the descendants of process %d: %s",
					pids[i], strerror(-err));
				goto fail;
			}
		}
		err = add_proc(out, &cap, pids[i], npids > 1 || children);
		if (err == -ESRCH) {
			log_cmd(cmd, "no such process: %d (it exited)", pids[i]);
			goto fail;
		}
		if (err)
			goto nomem;
		/* Descendants that exit meanwhile are simply not part of the job any more. */
		for (k = 1; k < ntree; k++)
			if (add_proc(out, &cap, tree[k], false) == -ENOMEM)
				goto nomem;
		free(tree);
		tree = NULL;
		ntree = 0;
	}
	/* Stable: processes without a rank keep the order found (a launcher first). */
	for (i = 1; i < out->n; i++)
		for (k = i; k > 0 && compare_procs(&out->p[k - 1], &out->p[k]) > 0; k--) {
			struct job_proc t = out->p[k];

			out->p[k] = out->p[k - 1];
			out->p[k - 1] = t;
		}
	return EXIT_OK;
nomem:
	log_cmd(cmd, "out of memory");
fail:
	free(tree);
	livejob__free(out);
	return EXIT_FAIL;
}

int livejob__resolve_arg(const char *cmd, const char *arg, bool children, struct job_procs *out)
{
	pid_t *pids = NULL;
	int n = 0, rc;

	memset(out, 0, sizeof(*out));
	if (cli_parse_pids(arg, &pids, &n))
		return cli_usage_error(cmd, "'%s' is not a process id (or a list: PID,PID...)",
				       arg);
	rc = livejob__resolve(cmd, pids, n, children, out);
	free(pids);
	return rc;
}

bool livejob__wanted(const char *arg, bool children)
{
	return children || (arg && strchr(arg, ','));
}

int livejob__from_opts(const char *cmd, const char *pid_arg, const char *t_arg, bool children,
		       bool python_only, struct job_procs *out)
{
	const char *arg = pid_arg ? pid_arg : t_arg;
	int rc, i, k, r;

	memset(out, 0, sizeof(*out));
	if (!arg)
		return cli_usage_error(cmd, "say which process: -p PID");
	if (pid_arg && t_arg)
		return cli_usage_error(cmd, "give -p or -t, not both");
	if (strchr(arg, ':'))
		return cli_usage_error(cmd, "--children and PID lists name processes: give -p PID, "
					    "not HOST:PORT");
	rc = livejob__resolve_arg(cmd, arg, children, out);
	if (rc || !python_only)
		return rc;
	for (i = k = 0; i < out->n; i++) {
		r = live__is_python(out->p[i].pid);
		if (r == 0) {
			log_cmd(cmd, "%s runs no Python: left out", out->p[i].label);
			out->unreadable -= !!out->p[i].id.env_error;
			jobinfo_free(&out->p[i].id);
			continue;
		}
		out->p[k++] = out->p[i];
	}
	out->n = k;
	if (!k) {
		log_cmd(cmd, "none of these processes runs Python");
		livejob__free(out);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

void livejob__free(struct job_procs *j)
{
	int i;

	if (!j)
		return;
	for (i = 0; i < j->n; i++)
		jobinfo_free(&j->p[i].id);
	free(j->p);
	memset(j, 0, sizeof(*j));
}

void livejob__note_unreadable(const char *cmd, const struct job_procs *j)
{
	int i;

	if (!j->unreadable)
		return;
	for (i = 0; i < j->n && !j->p[i].id.env_error; i++)
		;
	log_cmd(cmd,
		"rank unknown for %d process%s (e.g. pid %d): cannot read %s environment (%s); run "
		"as root or as the owner of %s",
		j->unreadable, j->unreadable > 1 ? "es" : "", j->p[i].pid,
		j->unreadable > 1 ? "their" : "its", strerror(-j->p[i].id.env_error),
		j->unreadable > 1 ? "the processes" : "the process");
}

void livejob__header(FILE *f, const struct job_proc *p, bool first)
{
	fprintf(f, "%s==> %s <==\n", first ? "" : "\n", p->label);
}

int livejob__each(const char *cmd, const struct job_procs *j,
		  int (*fn)(const struct job_proc *p, void *ctx), void *ctx)
{
	int i, rc, ret = EXIT_OK, shown = 0;
	bool ranks = false;

	for (i = 0; i < j->n; i++)
		ranks |= jobinfo_has_rank(&j->p[i].id);
	for (i = 0; i < j->n; i++) {
		if (!procinfo_alive(j->p[i].pid)) {
			log_cmd(cmd, "%s is gone (it exited)", j->p[i].label);
			continue;
		}
		if (j->n > 1)
			livejob__header(stdout, &j->p[i], !shown++);
		fflush(stdout);
		rc = fn(&j->p[i], ctx);
		fflush(stdout);
		fflush(stderr);
		if (rc != EXIT_OK && ranks && !jobinfo_has_rank(&j->p[i].id)) {
			/* torchrun, srun...: Python, but not where the training code runs. */
			log_cmd(cmd,
				"%s, not a rank (the job's launcher or a helper): failed (the "
				"messages above); only the ranks' results count",
				j->p[i].label);
			continue;
		}
		if (rc != EXIT_OK && j->n > 1)
			/* Its messages on stderr are not under the header: say whose they were. */
			log_cmd(cmd, "%s: failed (the messages above)", j->p[i].label);
		if (rc != EXIT_OK && ret == EXIT_OK)
			ret = rc;
	}
	return ret;
}

int livejob__select(const char *cmd, const struct live_opts *lo, bool python_only,
		    struct live_sel *sel)
{
	memset(sel, 0, sizeof(*sel));
	if (livejob__wanted(lo->pid_arg ? lo->pid_arg : lo->t_arg, lo->children))
		return livejob__from_opts(cmd, lo->pid_arg, lo->t_arg, lo->children, python_only,
					  &sel->j);
	return live__target(cmd, lo->pid_arg, lo->t_arg, &sel->t);
}

struct run_ctx {
	int (*fn)(const struct live_target *t, const void *ctx);
	const void *ctx;
};

static int run_proc(const struct job_proc *p, void *arg)
{
	const struct run_ctx *r = arg;
	struct live_target t = {.pid = p->pid};

	return r->fn(&t, r->ctx);
}

int livejob__run(const char *cmd, const struct live_sel *sel,
		 int (*fn)(const struct live_target *t, const void *ctx), const void *ctx)
{
	struct run_ctx r = {fn, ctx};

	if (!sel->j.n)
		return fn(&sel->t, ctx);
	livejob__note_unreadable(cmd, &sel->j);
	return livejob__each(cmd, &sel->j, run_proc, &r);
}

void livejob__sel_free(struct live_sel *sel)
{
	livejob__free(&sel->j);
}
