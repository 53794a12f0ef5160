// SPDX-License-Identifier: MIT
/* btjob: a job's backtrace, grouped; text and JSON (snapshots: btsnap.c). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "base/bmap.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/strpool.h"
#include "base/util.h"
#include "live/btjob.h"
#include "live/btjob_int.h"
#include "live/livejob.h"
#include "native/symbolize.h"

/* ---- collecting ------------------------------------------------------------------------ */

static struct btjob_priv *new_priv(void)
{
	struct btjob_priv *pv = calloc(1, sizeof(*pv));

	if (pv && !(pv->strings = strpool__new())) {
		free(pv);
		pv = NULL;
	}
	return pv;
}

struct bt_job *btjob__new(int nprocs)
{
	struct bt_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->procs = calloc(nprocs ? nprocs : 1, sizeof(*j->procs));
	j->priv = new_priv();
	if (!j->procs || !j->priv) {
		btjob__free(j);
		return NULL;
	}
	j->nprocs = nprocs;
	return j;
}

/* Labels: with the host when the processes are on several hosts. */
void btjob__label(struct bt_job *j)
{
	int i, k;

	j->nhosts = 0;
	for (i = 0; i < j->nprocs; i++) {
		if (!j->procs[i].id.host[0])
			continue; /* unknown (gone before it was read): not another host */
		for (k = 0; k < i && strcmp(j->procs[k].id.host, j->procs[i].id.host); k++)
			;
		if (k == i)
			j->nhosts++;
	}
	for (i = 0; i < j->nprocs; i++)
		jobinfo_label(&j->procs[i].id, j->procs[i].pid, j->nhosts > 1, j->procs[i].label,
			      sizeof(j->procs[i].label));
}

int btjob__collect(const struct job_procs *jp, const struct bt_opts *o, struct bt_job **out)
{
	struct bt_opts po = *o, native = *o;
	struct btjob_priv *pv;
	struct bt_job *j;
	struct utsname u;
	int i, err;

	j = btjob__new(jp->n);
	if (!j)
		return -ENOMEM;
	pv = j->priv;
	j->time = now_real_ns() / 1e9;
	j->native = o->native;
	if (!uname(&u))
		snprintf(j->host, sizeof(j->host), "%s", u.nodename);
	/* One symbolizer for every process: a library they share is read once. */
	if (!po.sym && (o->native || o->routines)) {
		pv->sym = symbolizer__new();
		if (!pv->sym) {
			btjob__free(j);
			return -ENOMEM;
		}
		po.sym = pv->sym;
	}
	native = po;
	native.native = true;
	for (i = 0; i < jp->n; i++) {
		struct bt_job_proc *p = &j->procs[i];

		p->pid = jp->p[i].pid;
		p->id = jp->p[i].id;
		/* The strings are the job's now (job_procs keeps its own copies). */
		p->id.job_id = p->id.job_id ? strdup(p->id.job_id) : NULL;
		p->id.master_addr = p->id.master_addr ? strdup(p->id.master_addr) : NULL;
		err = backtrace__collect(p->pid, &po, &p->bt, p->error, sizeof(p->error));
		if (err == -ENOENT) /* no Python: its native stacks are what there is */
			err = backtrace__collect(p->pid, &native, &p->bt, p->error,
						 sizeof(p->error));
		if (err == -ENOMEM) {
			btjob__free(j);
			return err;
		}
		p->status = !err ? BT_OK : err == -ESRCH ? BT_GONE : BT_ERROR;
		if (p->status == BT_GONE)
			snprintf(p->error, sizeof(p->error), "exited while the job was read");
	}
	btjob__label(j);
	err = btjob__group(j);
	if (err) {
		btjob__free(j);
		return err;
	}
	*out = j;
	return 0;
}

void btjob__free(struct bt_job *j)
{
	struct btjob_priv *pv;
	int i;

	if (!j)
		return;
	for (i = 0; i < j->nprocs; i++) {
		backtrace__free(j->procs[i].bt);
		jobinfo_free(&j->procs[i].id);
		free(j->procs[i].group);
	}
	free(j->procs);
	for (i = 0; i < j->ngroups; i++)
		free(j->groups[i].m);
	free(j->groups);
	pv = j->priv;
	if (pv) {
		/* After the processes: their frames point into the symbolizer's caches. */
		symbolizer__free(pv->sym);
		strpool__free(pv->strings);
		free(pv);
	}
	free(j);
}

/* ---- grouping -------------------------------------------------------------------------- */

/* @s onto @key, told apart from NULL and from any other string (its length first). */
static int key_str(struct strbuf *key, const char *s)
{
	uint64_t len = s ? strlen(s) : 0;
	char tag = s ? 1 : 0;
	int err = sb_append(key, &tag, 1);

	if (!err && s)
		err = sb_append(key, (const char *)&len, sizeof(len));
	return err ?: sb_append(key, s ? s : "", len);
}

/*
 * The key of @t's group in *@key: threads belong together when they have the same frames
 * (kind, line, function, qualified name, file, and for a native or kernel frame its module),
 * or, both without frames, the same name and error. Grouping by this key in a hash map costs
 * time and memory in proportion to the threads' frames, however many there are.
 */
static int stack_key(struct strbuf *key, const struct bt_thread *t)
{
	int err, i;

	sb_reset(key);
	err = sb_append(key, (const char *)&t->nframes, sizeof(t->nframes));
	if (!t->nframes) {
		err = err ?: key_str(key, t->name);
		return err ?: key_str(key, t->error);
	}
	for (i = 0; !err && i < t->nframes; i++) {
		const struct frame *f = &t->frames[i];
		int32_t kind = f->kind, line = f->line;

		err = sb_append(key, (const char *)&kind, sizeof(kind));
		err = err ?: sb_append(key, (const char *)&line, sizeof(line));
		err = err ?: key_str(key, f->func);
		err = err ?: key_str(key, f->qualname);
		err = err ?: key_str(key, f->file);
		err = err ?: key_str(key, f->kind == FRAME_PYTHON ? NULL : f->module);
	}
	return err;
}

static int by_size(const void *a, const void *b)
{
	const struct bt_group *x = a, *y = b;

	/* What crashed first, then where the job's code is, then its idle helper threads. */
	if (x->crashed != y->crashed)
		return x->crashed ? -1 : 1;
	if (x->main != y->main)
		return x->main ? -1 : 1;
	if (x->n != y->n)
		return x->n > y->n ? -1 : 1;
	/* Ties: in the order of their first member (the job's order). */
	if (x->m[0].proc != y->m[0].proc)
		return x->m[0].proc < y->m[0].proc ? -1 : 1;
	return x->m[0].thread < y->m[0].thread ? -1 : x->m[0].thread > y->m[0].thread;
}

static const struct bt_thread *member_thread(const struct bt_job *j, const struct bt_member *m)
{
	return &j->procs[m->proc].bt->threads[m->thread];
}

/* The main thread of process @i (tid == pid), or -1. */
static int main_thread(const struct bt_job *j, int i)
{
	const struct bt_process *bt = j->procs[i].bt;
	int k;

	for (k = 0; bt && k < bt->nthreads; k++)
		if (bt->threads[k].tid == j->procs[i].pid)
			return k;
	return -1;
}

/* How many processes have a rank (and were read): the ones compared, when there are any. */
static int nranked(const struct bt_job *j)
{
	int i, n = 0;

	for (i = 0; i < j->nprocs; i++)
		n += jobinfo_has_rank(&j->procs[i].id) && j->procs[i].bt;
	return n;
}

/* Is process @i one of those compared (a rank, or any process when none has a rank)? */
static bool compared(const struct bt_job *j, int i, int nranks)
{
	return j->procs[i].bt && (!nranks || jobinfo_has_rank(&j->procs[i].id));
}

/*
 * The odd ones out: among the ranks (all processes when none has a rank) whose main thread
 * was read, those whose main thread is in a group no other of them shares, provided some
 * group is shared by at least two of them (else there is no "usual" place to differ from).
 */
static void find_odd(struct bt_job *j)
{
	int i, g, k, nranks = nranked(j), *count = calloc(j->ngroups ? j->ngroups : 1, sizeof(int));
	bool shared = false;

	j->odd = 0;
	for (i = 0; i < j->nprocs; i++)
		j->procs[i].odd = false;
	if (!count)
		return;
	for (i = 0; i < j->nprocs; i++) {
		if (!compared(j, i, nranks))
			continue;
		k = main_thread(j, i);
		if (k >= 0 && (g = j->procs[i].group[k]) >= 0 && ++count[g] > 1)
			shared = true;
	}
	for (i = 0; shared && i < j->nprocs; i++) {
		if (!compared(j, i, nranks))
			continue;
		k = main_thread(j, i);
		if (k >= 0 && (g = j->procs[i].group[k]) >= 0 && count[g] == 1) {
			j->procs[i].odd = true;
			j->odd++;
		}
	}
	free(count);
}

int btjob__group(struct bt_job *j)
{
	struct bt_group *groups = NULL;
	struct strbuf key = {0};
	struct bmap *index = NULL;
	size_t *caps = NULL; /* of each group's members */
	int nthreads = 0, ngroups = 0, i, k, g, inserted, nranks = nranked(j);
	uint64_t *v;

	for (i = 0; i < j->ngroups; i++)
		free(j->groups[i].m);
	free(j->groups);
	j->groups = NULL;
	j->ngroups = 0;
	for (i = 0; i < j->nprocs; i++)
		nthreads += j->procs[i].bt ? j->procs[i].bt->nthreads : 0;
	groups = calloc(nthreads ? nthreads : 1, sizeof(*groups));
	caps = calloc(nthreads ? nthreads : 1, sizeof(*caps));
	index = bmap__new();
	if (!groups || !caps || !index)
		goto nomem;
	/* Each thread joins the group of its stack, made by its first thread. */
	for (i = 0; i < j->nprocs; i++) {
		struct bt_job_proc *p = &j->procs[i];

		free(p->group);
		p->group = NULL;
		if (!p->bt)
			continue;
		p->group = malloc(sizeof(int) * (p->bt->nthreads ? p->bt->nthreads : 1));
		if (!p->group)
			goto nomem;
		for (k = 0; k < p->bt->nthreads; k++) {
			if (stack_key(&key, &p->bt->threads[k]))
				goto nomem;
			v = bmap__upsert(index, key.buf, key.len, ngroups, &inserted);
			if (!v)
				goto nomem;
			g = *v;
			if (inserted)
				ngroups++;
			if (grow_array(&groups[g].m, &caps[g], groups[g].n + 1,
				       sizeof(*groups[g].m)))
				goto nomem;
			groups[g].m[groups[g].n].proc = i;
			groups[g].m[groups[g].n++].thread = k;
			if (p->bt->threads[k].tid == p->pid && compared(j, i, nranks))
				groups[g].main = true;
			if (p->bt->threads[k].crash[0])
				groups[g].crashed = true;
		}
	}
	qsort(groups, ngroups, sizeof(*groups), by_size);
	for (g = 0; g < ngroups; g++)
		for (k = 0; k < groups[g].n; k++)
			j->procs[groups[g].m[k].proc].group[groups[g].m[k].thread] = g;
	j->groups = groups;
	j->ngroups = ngroups;
	bmap__free(index);
	free(caps);
	sb_free(&key);
	find_odd(j);
	return 0;
nomem:
	for (g = 0; groups && g < ngroups; g++)
		free(groups[g].m);
	free(groups);
	free(caps);
	bmap__free(index);
	sb_free(&key);
	return -ENOMEM;
}

/* ---- text ------------------------------------------------------------------------------ */

/* "ranks 0-3, 5" from the sorted ranks @r (@n of them). */
static void rank_ranges(struct strbuf *sb, const int *r, int n)
{
	int i = 0, k;

	sb_printf(sb, "%s", n > 1 ? "ranks " : "rank ");
	while (i < n) {
		for (k = i; k + 1 < n && r[k + 1] == r[k] + 1; k++)
			;
		sb_printf(sb, "%s%d", i ? ", " : "", r[i]);
		if (k > i)
			sb_printf(sb, "%s%d", k == i + 1 ? ", " : "-", r[k]);
		i = k + 1;
	}
}

static int compare_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return x < y ? -1 : x > y;
}

/*
 * The processes of @procs (indices, @n of them, in the job's order; @counts threads each)
 * for a group header: labels when few, else rank ranges and the pids without a rank.
 */
static void list_procs(const struct bt_job *j, const int *procs, const int *counts, int n,
		       struct strbuf *sb)
{
	int i, nr = 0, *ranks = malloc(sizeof(int) * (n ? n : 1));
	bool same = true, first = true;

	for (i = 1; i < n; i++)
		same = same && counts[i] == counts[0];
	if (n <= 4 || !ranks) {
		for (i = 0; i < n; i++) {
			sb_printf(sb, "%s%s", i ? ", " : "", j->procs[procs[i]].label);
			if (counts[i] > 1 && (n == 1 || !same))
				sb_printf(sb, " x%d", counts[i]);
		}
		if (n > 1 && same && counts[0] > 1)
			sb_printf(sb, " (x%d each)", counts[0]);
		free(ranks);
		return;
	}
	for (i = 0; i < n; i++)
		if (jobinfo_has_rank(&j->procs[procs[i]].id) && j->nhosts <= 1)
			ranks[nr++] = j->procs[procs[i]].id.rank;
	qsort(ranks, nr, sizeof(int), compare_int);
	if (nr) {
		rank_ranges(sb, ranks, nr);
		first = false;
	}
	for (i = 0; i < n; i++) {
		if (jobinfo_has_rank(&j->procs[procs[i]].id) && j->nhosts <= 1)
			continue;
		sb_printf(sb, "%s%s", first ? "" : ", ", j->procs[procs[i]].label);
		first = false;
	}
	sb_printf(sb, " (%d processes", n);
	if (same && counts[0] > 1)
		sb_printf(sb, ", x%d each", counts[0]);
	sb_puts(sb, ")");
	free(ranks);
}

/* The distinct thread names and processes of group @g. */
static void count_distinct(const struct bt_job *j, const struct bt_group *g, int *names, int *procs)
{
	int i, k;

	*names = *procs = 0;
	for (i = 0; i < g->n; i++) {
		for (k = 0; k < i && strcmp(member_thread(j, &g->m[k])->name,
					    member_thread(j, &g->m[i])->name);
		     k++)
			;
		*names += k == i;
		for (k = 0; k < i && g->m[k].proc != g->m[i].proc; k++)
			;
		*procs += k == i;
	}
}

/*
 * The header of group @g: for each thread name, the processes that have it; or, when there
 * are more names than processes (a pool of threads named one by one), for each process its
 * threads' names.
 */
static void group_members(const struct bt_job *j, const struct bt_group *g, struct strbuf *sb)
{
	int *procs = malloc(sizeof(int) * g->n), *counts = malloc(sizeof(int) * g->n);
	bool *done = calloc(g->n, sizeof(bool));
	struct strbuf e = {0};
	int i, k, n, names = 0, nnames, nprocs;

	if (!procs || !counts || !done)
		goto cleanup;
	count_distinct(j, g, &nnames, &nprocs);
	if (nnames > 1 && nprocs < nnames) {
		for (i = 0; i < g->n; i++) {
			if (done[i])
				continue;
			sb_printf(sb, "%s%s:", names++ ? "; " : "", j->procs[g->m[i].proc].label);
			for (n = 0, k = i; k < g->n; k++) {
				if (done[k] || g->m[k].proc != g->m[i].proc)
					continue;
				done[k] = true;
				sb_printf(sb, "%s \"%s\"", n++ ? "," : "",
					  text_str(&e, member_thread(j, &g->m[k])->name, 0));
			}
		}
		goto cleanup;
	}
	for (i = 0; i < g->n; i++) {
		const char *name = member_thread(j, &g->m[i])->name;

		if (done[i])
			continue;
		n = 0;
		for (k = i; k < g->n; k++) {
			if (done[k] || strcmp(member_thread(j, &g->m[k])->name, name))
				continue;
			done[k] = true;
			if (n && procs[n - 1] == g->m[k].proc) {
				counts[n - 1]++;
			} else {
				procs[n] = g->m[k].proc;
				counts[n++] = 1;
			}
		}
		sb_printf(sb, "%s\"%s\" of ", names++ ? "; " : "", text_str(&e, name, 0));
		list_procs(j, procs, counts, n, sb);
	}
cleanup:
	free(procs);
	free(counts);
	free(done);
	sb_free(&e);
}

/* What a group's threads are doing: "sleeping in futex (lock)", or each kind with a count. */
static void group_states(const struct bt_job *j, const struct bt_group *g, struct strbuf *sb)
{
	char(*what)[160] = calloc(g->n, sizeof(*what)), wait[96];
	int i, k, n, kinds = 0;

	if (!what)
		return;
	for (i = 0; i < g->n; i++) {
		const struct bt_thread *t = member_thread(j, &g->m[i]);

		backtrace__wait_str(t, wait, sizeof(wait));
		snprintf(what[i], sizeof(what[i]), "%s%s%s%s", backtrace__state_word(t->state),
			 wait[0] ? " " : "", wait, t->gil == BT_GIL_HOLDS ? ", holds the GIL" : "");
	}
	for (i = 0; i < g->n; i++) {
		if (!what[i][0])
			continue;
		for (n = 1, k = i + 1; k < g->n; k++)
			if (!strcmp(what[k], what[i])) {
				n++;
				what[k][0] = '\0';
			}
		sb_printf(sb, "%s%s", kinds++ ? ", " : "", what[i]);
		if (n < g->n)
			sb_printf(sb, " x%d", n);
	}
	free(what);
}

/* Longest launcher command line in the header (the rest is cut: "..."). */
#define LAUNCHER_CMD_MAX 80

/*
 * What launched the ranks of @j when their environment does not say (RANK set by a script):
 * the command of their one parent when that parent is a process of the job ("sh launch.sh",
 * with backtrace --children from it). NULL if unknown.
 */
static const char *parent_command(const struct bt_job *j)
{
	pid_t ppid = -1;
	int i;

	for (i = 0; i < j->nprocs; i++) {
		const struct bt_job_proc *p = &j->procs[i];

		if (!jobinfo_has_rank(&p->id) || !p->bt)
			continue;
		if (p->bt->ppid <= 0 || (ppid > 0 && p->bt->ppid != ppid))
			return NULL;
		ppid = p->bt->ppid;
	}
	for (i = 0; ppid > 0 && i < j->nprocs; i++)
		if (j->procs[i].pid == ppid && j->procs[i].bt && j->procs[i].bt->command &&
		    j->procs[i].bt->command[0])
			return j->procs[i].bt->command;
	return NULL;
}

/* "hang_here (train.py:40)": the innermost Python frame of @t (else its innermost frame). */
static void where_str(const struct bt_thread *t, struct strbuf *sb)
{
	const struct frame *fr = NULL;
	struct strbuf e = {0};
	const char *file;
	int k;

	for (k = 0; k < t->nframes && !fr; k++)
		if (t->frames[k].kind == FRAME_PYTHON)
			fr = &t->frames[k];
	if (!fr && t->nframes)
		fr = &t->frames[0];
	if (!fr) {
		sb_puts(sb, "no Python frames");
		return;
	}
	sb_puts(sb, text_str(&e, fr->qualname ? fr->qualname : fr->func, 0));
	file = fr->file ? strrchr(fr->file, '/') : NULL;
	file = file ? file + 1 : fr->file;
	if (file && fr->line > 0)
		sb_printf(sb, " (%s:%d)", text_str(&e, file, 0), fr->line);
	sb_free(&e);
}

#define PLACES_SHOWN 8

/*
 * No rank is the odd one out, yet the ranks' main threads are in different places (two ranks
 * that differ; or no two alike): say which is where, a line per place (the main threads'
 * groups, first in j->groups).
 */
static void print_places(const struct bt_job *j, FILE *f)
{
	int nranks = nranked(j), nplaces, g, k, n, procs[PLACES_SHOWN], ones[PLACES_SHOWN];
	const struct bt_thread *t, *main_t;
	struct strbuf sb = {0};
	char wait[96];

	for (nplaces = 0; nplaces < j->ngroups && j->groups[nplaces].main; nplaces++)
		;
	if (nplaces < 2)
		return;
	fprintf(f, "The %s' main threads are in %d different places:\n",
		nranks ? "ranks" : "processes", nplaces);
	for (g = 0; g < nplaces && g < PLACES_SHOWN; g++) {
		const struct bt_group *gr = &j->groups[g];

		main_t = NULL;
		for (k = n = 0; k < gr->n; k++) {
			t = member_thread(j, &gr->m[k]);
			if (t->tid != j->procs[gr->m[k].proc].pid ||
			    !compared(j, gr->m[k].proc, nranks))
				continue;
			main_t = main_t ? main_t : t;
			if (n < PLACES_SHOWN) {
				procs[n] = gr->m[k].proc;
				ones[n++] = 1;
			}
		}
		sb_reset(&sb);
		list_procs(j, procs, ones, n, &sb);
		sb_puts(&sb, ": ");
		where_str(main_t, &sb);
		backtrace__wait_str(main_t, wait, sizeof(wait));
		sb_printf(&sb, ", %s%s%s", backtrace__state_word(main_t->state), wait[0] ? " " : "",
			  wait);
		fprintf(f, "  %s  [%d]\n", sb_str(&sb), g + 1);
	}
	if (nplaces > PLACES_SHOWN)
		fprintf(f, "  and %d more places below\n", nplaces - PLACES_SHOWN);
	sb_free(&sb);
}

void btjob__print(const struct bt_job *j, FILE *f)
{
	struct strbuf sb = {0}, e = {0};
	int i, g, k, nranks = 0, nthreads = 0, world = -1, proc_ranks = 0;
	const char *launcher = NULL, *cmd;

	for (i = 0; i < j->nprocs; i++) {
		const struct bt_job_proc *p = &j->procs[i];

		if (jobinfo_has_rank(&p->id)) {
			nranks++;
			if (p->id.world_size > world)
				world = p->id.world_size;
			if (!launcher)
				launcher = p->id.launcher;
		}
		nthreads += p->bt ? p->bt->nthreads : 0;
	}
	proc_ranks = nranks;
	fprintf(f, "Job: %d process%s", j->nprocs, j->nprocs == 1 ? "" : "es");
	if (nranks) {
		fprintf(f, ", %d rank%s", nranks, nranks == 1 ? "" : "s");
		if (world > 0)
			fprintf(f, " of %d", world);
		if (launcher)
			fprintf(f, " (%s)", launcher);
		else if ((cmd = parent_command(j))) {
			char cut[LAUNCHER_CMD_MAX + 1];

			snprintf(cut, sizeof(cut), "%s", cmd);
			if (strlen(cmd) > LAUNCHER_CMD_MAX)
				strcpy(cut + LAUNCHER_CMD_MAX - 3, "...");
			fprintf(f, " (%s)", text_str(&e, cut, 0));
		}
	}
	if (j->nhosts > 1)
		fprintf(f, " on %d hosts", j->nhosts);
	else if (j->host[0])
		fprintf(f, " on %s", text_str(&e, j->host, 0));
	fprintf(f, "; %d threads, %d different stack%s\n", nthreads, j->ngroups,
		j->ngroups == 1 ? "" : "s");
	for (i = 0; i < j->nprocs; i++) {
		const struct bt_job_proc *p = &j->procs[i];

		if (p->status == BT_GONE)
			fprintf(f, "  %s: gone (%s)\n", p->label, text_str(&e, p->error, 0));
		else if (p->status == BT_ERROR)
			fprintf(f, "  %s: not read: %s\n", p->label, text_str(&e, p->error, 0));
	}
	for (i = 0; i < j->nprocs; i++)
		if (j->procs[i].odd)
			fprintf(f,
				"The odd one out: %s: its main thread is where no other %s's main "
				"thread is ([%d] below)\n",
				j->procs[i].label, proc_ranks ? "rank" : "process",
				j->procs[i].group[main_thread(j, i)] + 1);
	if (!j->odd)
		print_places(j, f);
	for (g = 0; g < j->ngroups; g++) {
		const struct bt_group *gr = &j->groups[g];
		const struct bt_thread *t = member_thread(j, &gr->m[0]);
		bool odd = false;
		int ncrashed;

		for (k = 0; k < gr->n && !odd; k++)
			odd = j->procs[gr->m[k].proc].odd &&
			      member_thread(j, &gr->m[k])->tid == j->procs[gr->m[k].proc].pid;
		sb_reset(&sb);
		group_members(j, gr, &sb);
		fprintf(f, "\n[%d] %d thread%s: %s%s\n", g + 1, gr->n, gr->n == 1 ? "" : "s",
			sb_str(&sb), odd ? "  <-- the odd one out" : "");
		ncrashed = 0;
		for (k = 0; k < gr->n; k++)
			if (member_thread(j, &gr->m[k])->crash[0] && ++ncrashed)
				fprintf(f, "    %s crashed: %s  <-- the crash\n",
					j->procs[gr->m[k].proc].label,
					text_str(&e, member_thread(j, &gr->m[k])->crash, 0));
		sb_reset(&sb);
		group_states(j, gr, &sb);
		/* A crashed thread's state is its signal handler's, waiting: not worth saying. */
		if (ncrashed < gr->n)
			fprintf(f, "    %s%s\n", sb_str(&sb),
				t->nframes || t->error[0] ? "" : "; no Python frames");
		if (t->error[0])
			fprintf(f, "    [native stack unavailable: %s]\n",
				text_str(&e, t->error, 0));
		for (k = 0; k < t->nframes; k++)
			backtrace__print_frame(&t->frames[k], f);
		if (t->truncated)
			fprintf(f, "    ... (more frames)\n");
	}
	sb_free(&sb);
	sb_free(&e);
}

/* ---- JSON ------------------------------------------------------------------------------ */

const char *btjob__state_name(char s)
{
	switch (s) {
	case 'R':
		return "running";
	case 'S':
		return "sleeping";
	case 'D':
		return "disk wait";
	case 'T':
	case 't':
		return "stopped";
	case 'Z':
		return "zombie";
	case 'I':
		return "idle";
	case 'X':
	case 'x':
		return "dead";
	default:
		return "unknown";
	}
}

char btjob__state_letter(const char *name)
{
	static const char letters[] = "RSDTZIX";
	const char *l;

	for (l = letters; name && *l; l++)
		if (!strcmp(name, btjob__state_name(*l)))
			return *l;
	return '?';
}

const char *btjob__gil_name(enum bt_gil g)
{
	return g == BT_GIL_HOLDS   ? "holds"
	       : g == BT_GIL_WAITS ? "waits"
	       : g == BT_GIL_NO	   ? "no"
				   : NULL;
}

const char *btjob__status_name(enum bt_status s)
{
	return s == BT_OK ? "ok" : s == BT_GONE ? "gone" : "error";
}

static int json_str(struct strbuf *sb, const char *key, const char *v)
{
	int err = sb_printf(sb, ",\"%s\":", key);

	return err ?: v ? jq_quote(sb, v) : sb_puts(sb, "null");
}

static int json_int(struct strbuf *sb, const char *key, long long v, bool known)
{
	return known ? sb_printf(sb, ",\"%s\":%lld", key, v) : sb_printf(sb, ",\"%s\":null", key);
}

static int json_frame(struct strbuf *sb, const struct frame *fr, bool first)
{
	int err = sb_printf(sb, "%s{\"kind\":\"%s\"", first ? "" : ",", frame_kind_name(fr->kind));

	err = err ?: json_str(sb, "func", fr->func);
	err = err ?: json_str(sb, "qualname", fr->qualname);
	err = err ?: json_str(sb, "file", fr->file);
	err = err ?: json_int(sb, "lineno", fr->line, fr->line > 0);
	err = err ?: json_str(sb, "module", fr->module);
	return err ?: sb_puts(sb, "}");
}

static int json_thread(struct strbuf *sb, const struct bt_job_proc *p, int k, bool waits)
{
	const struct bt_thread *t = &p->bt->threads[k];
	int err, i;

	err = sb_printf(sb, "%s{\"tid\":%d", k ? "," : "", t->tid);
	err = err ?: json_str(sb, "name", t->name);
	err = err ?: json_str(sb, "comm", t->comm[0] ? t->comm : NULL);
	err = err ?: json_str(sb, "routine", t->routine[0] ? t->routine : NULL);
	err = err ?: json_str(sb, "state", btjob__state_name(t->state));
	if (!err && waits && t->state != 'R' && t->state != '?' && t->wclass != WAIT_RUNNING) {
		err = sb_printf(sb, ",\"wait\":{\"class\":\"%s\"", wait_state_name(t->wclass));
		err = err ?: json_str(sb, "call", t->wait_desc[0] ? t->wait_desc : NULL);
		err = err ?: json_str(sb, "wchan", t->wait.wchan[0] ? t->wait.wchan : NULL);
		err = err ?: sb_puts(sb, "}");
	} else if (!err) {
		err = sb_puts(sb, ",\"wait\":null");
	}
	err = err ?: json_str(sb, "gil", btjob__gil_name(t->gil));
	err = err ?: sb_printf(sb, ",\"python\":%s", t->python ? "true" : "false");
	err = err ?: json_int(sb, "group", p->group ? p->group[k] + 1 : 0, p->group != NULL);
	err = err ?: sb_printf(sb, ",\"truncated\":%s", t->truncated ? "true" : "false");
	err = err ?: json_str(sb, "error", t->error[0] ? t->error : NULL);
	err = err ?: sb_puts(sb, ",\"frames\":[");
	for (i = 0; !err && i < t->nframes; i++)
		err = json_frame(sb, &t->frames[i], !i);
	return err ?: sb_puts(sb, "]}");
}

int btjob__json(const struct bt_job *j, struct strbuf *sb)
{
	int err = sb_puts(sb, "["), i, k;

	for (i = 0; !err && i < j->nprocs; i++) {
		const struct bt_job_proc *p = &j->procs[i];
		const struct job_identity *id = &p->id;

		err = sb_printf(sb, "%s\n{\"pid\":%d", i ? "," : "", p->pid);
		err = err
			      ?: json_int(sb, "ppid", p->bt ? p->bt->ppid : -1,
					  p->bt && p->bt->ppid > 0);
		err = err ?: json_int(sb, "rank", id->rank, id->rank >= 0);
		err = err ?: json_int(sb, "local_rank", id->local_rank, id->local_rank >= 0);
		err = err ?: json_int(sb, "world_size", id->world_size, id->world_size >= 0);
		err = err ?: json_int(sb, "group_rank", id->group_rank, id->group_rank >= 0);
		err = err ?: json_str(sb, "job_id", id->job_id);
		err = err ?: json_str(sb, "launcher", id->launcher);
		err = err ?: json_str(sb, "host", id->host[0] ? id->host : NULL);
		err = err ?: json_str(sb, "cmdline", p->bt ? p->bt->command : NULL);
		err = err
			      ?: json_str(sb, "python",
					  p->bt && p->bt->python[0] ? p->bt->python : NULL);
		err = err ?: json_str(sb, "status", btjob__status_name(p->status));
		err = err ?: json_str(sb, "error", p->status != BT_OK ? p->error : NULL);
		err = err ?: sb_printf(sb, ",\"odd_one_out\":%s", p->odd ? "true" : "false");
		err = err ?: sb_puts(sb, ",\"threads\":[");
		for (k = 0; !err && p->bt && k < p->bt->nthreads; k++)
			err = json_thread(sb, p, k, true);
		err = err ?: sb_puts(sb, "]}");
	}
	return err ?: sb_puts(sb, "\n]\n");
}
