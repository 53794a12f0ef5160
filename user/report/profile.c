// SPDX-License-Identifier: MIT
/*
 * Loading a recording into memory. Everything is read inside one read transaction, so a
 * recording that is still being written is seen at one consistent point (WAL snapshot).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "base/log.h"
#include "report/profile.h"
#include "base/util.h"

/* Maps the ids of a table (read in ascending order) to their positions. */
struct idmap {
	int64_t *ids; /* ascending */
	size_t n, cap;
	uint32_t *dense; /* id -> position + 1 (0 = absent) when ids are small, else NULL */
	int64_t dense_n;
};

struct priv {
	char **strings;
	size_t nstrings, capstrings;
	struct idmap frame_ids, stack_ids;
};

static int idmap_push(struct idmap *m, int64_t id)
{
	if (m->n && id <= m->ids[m->n - 1])
		return -EINVAL; /* the queries ORDER BY the primary key: cannot happen */
	if (grow_array(&m->ids, &m->cap, m->n + 1, sizeof(*m->ids)))
		return -ENOMEM;
	m->ids[m->n++] = id;
	return 0;
}

/* Ids written by store.c are 1..N: a direct table is then both smaller and faster. */
static int idmap_finish(struct idmap *m)
{
	size_t i;

	if (!m->n || m->ids[0] < 0 || m->ids[m->n - 1] > (int64_t)(4 * m->n + 65536))
		return 0;
	m->dense_n = m->ids[m->n - 1] + 1;
	m->dense = calloc(m->dense_n, sizeof(*m->dense));
	if (!m->dense)
		return -ENOMEM;
	for (i = 0; i < m->n; i++)
		m->dense[m->ids[i]] = i + 1;
	return 0;
}

/* Position of @id, or -1. */
static int64_t idmap_find(const struct idmap *m, int64_t id)
{
	size_t lo = 0, hi = m->n;

	if (m->dense)
		return id >= 0 && id < m->dense_n ? (int64_t)m->dense[id] - 1 : -1;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->n && m->ids[lo] == id ? (int64_t)lo : -1;
}

static void idmap_free(struct idmap *m)
{
	free(m->ids);
	free(m->dense);
}

/* A copy of column @i (NULL stays NULL), owned by the profile. */
static int keep_column(struct profile *p, sqlite3_stmt *st, int i, const char **out)
{
	struct priv *pv = p->priv;
	const unsigned char *s = sqlite3_column_text(st, i);
	char *copy;

	*out = NULL;
	if (!s)
		return 0;
	if (pv->nstrings == pv->capstrings) {
		size_t cap = pv->capstrings ? pv->capstrings * 2 : 1024;
		char **tmp = realloc(pv->strings, cap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		pv->strings = tmp;
		pv->capstrings = cap;
	}
	copy = strdup((const char *)s);
	if (!copy)
		return -ENOMEM;
	pv->strings[pv->nstrings++] = copy;
	*out = copy;
	return 0;
}

static int sql_fail(sqlite3 *db, const char *what)
{
	pr_warn("cannot read the recording's %s: %s", what, sqlite3_errmsg(db));
	return sqlite3_errcode(db) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int load_frames(sqlite3 *db, struct profile *p)
{
	struct priv *pv = p->priv;
	sqlite3_stmt *st = NULL;
	size_t cap = 0;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(
		db,
		"SELECT id, kind, func, qualname, file, lineno, module FROM frame_defs"
		" ORDER BY id",
		-1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "frames");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *kind = (const char *)sqlite3_column_text(st, 1);
		struct frame *f;

		err = grow_array(&p->frames, &cap, p->nframes + 1, sizeof(*p->frames));
		if (!err)
			err = idmap_push(&pv->frame_ids, sqlite3_column_int64(st, 0));
		if (err)
			goto cleanup;
		f = &p->frames[p->nframes++];
		memset(f, 0, sizeof(*f));
		f->kind = !kind			    ? FRAME_NATIVE
			  : !strcmp(kind, "python") ? FRAME_PYTHON
			  : !strcmp(kind, "kernel") ? FRAME_KERNEL
						    : FRAME_NATIVE;
		f->line = sqlite3_column_int(st, 5);
		err = keep_column(p, st, 2, &f->func);
		if (!err)
			err = keep_column(p, st, 3, &f->qualname);
		if (!err)
			err = keep_column(p, st, 4, &f->file);
		if (!err)
			err = keep_column(p, st, 6, &f->module);
		if (err)
			goto cleanup;
		if (!f->func)
			f->func = "[unknown]";
	}
	if (rc != SQLITE_DONE) {
		err = sql_fail(db, "frames");
		goto cleanup;
	}
	err = idmap_finish(&pv->frame_ids);
cleanup:
	sqlite3_finalize(st);
	return err;
}

static int load_stacks(sqlite3 *db, struct profile *p)
{
	struct priv *pv = p->priv;
	sqlite3_stmt *st = NULL;
	size_t cap = 0, nrefs = 0, i;
	int64_t cur_id = -1, cur = -1, fi;
	int rc, err = 0, depth;

	rc = sqlite3_prepare_v2(db,
				"SELECT stack_id, nframes, truncated FROM stacks ORDER BY stack_id",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "stacks");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct profile_stack *s;
		int64_t n = sqlite3_column_int64(st, 1);

		if (n < 0 || n > 1000000) {
			pr_warn("the recording is damaged: stack %lld has %lld frames",
				(long long)sqlite3_column_int64(st, 0), (long long)n);
			err = -EIO;
			goto cleanup;
		}
		err = grow_array(&p->stacks, &cap, p->nstacks + 1, sizeof(*p->stacks));
		if (!err)
			err = idmap_push(&pv->stack_ids, sqlite3_column_int64(st, 0));
		if (err)
			goto cleanup;
		s = &p->stacks[p->nstacks++];
		s->first = nrefs;
		s->n = n;
		s->truncated = sqlite3_column_int(st, 2);
		nrefs += n;
		if (nrefs > UINT32_MAX) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	if (rc != SQLITE_DONE) {
		err = sql_fail(db, "stacks");
		goto cleanup;
	}
	err = idmap_finish(&pv->stack_ids);
	if (err)
		goto cleanup;
	p->refs = malloc((nrefs ? nrefs : 1) * sizeof(*p->refs));
	if (!p->refs) {
		err = -ENOMEM;
		goto cleanup;
	}
	memset(p->refs, 0xff, nrefs * sizeof(*p->refs));
	sqlite3_finalize(st);
	st = NULL;

	/* stack_frames is WITHOUT ROWID with PRIMARY KEY(stack_id, depth): this is a scan. */
	rc = sqlite3_prepare_v2(db,
				"SELECT stack_id, depth, frame_id FROM stack_frames"
				" ORDER BY stack_id, depth",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "stack frames");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);

		if (id != cur_id) {
			cur_id = id;
			cur = idmap_find(&pv->stack_ids, id);
		}
		depth = sqlite3_column_int(st, 1);
		fi = idmap_find(&pv->frame_ids, sqlite3_column_int64(st, 2));
		if (cur < 0 || fi < 0 || depth < 0 || (uint32_t)depth >= p->stacks[cur].n) {
			pr_warn("the recording is damaged: stack %lld, depth %d refers to a stack "
				"or "
				"frame it does not have",
				(long long)id, depth);
			err = -EIO;
			goto cleanup;
		}
		p->refs[p->stacks[cur].first + depth] = fi;
	}
	if (rc != SQLITE_DONE) {
		err = sql_fail(db, "stack frames");
		goto cleanup;
	}
	for (i = 0; i < nrefs; i++) {
		if (p->refs[i] == UINT32_MAX) {
			pr_warn("the recording is damaged: a stack lacks some of its frames");
			err = -EIO;
			goto cleanup;
		}
	}
cleanup:
	sqlite3_finalize(st);
	return err;
}

struct sample_key {
	int64_t ts;
	int32_t pid, tid;
	uint32_t stack;
	uint32_t pad;
};

static int cmp_sample(const void *a, const void *b)
{
	const struct profile_sample *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static int load_samples(sqlite3 *db, const struct profile_filter *flt, struct profile *p)
{
	struct priv *pv = p->priv;
	bool by_time = flt && (flt->flags & PROFILE_BY_TIME);
	struct bmap *index = NULL;
	sqlite3_stmt *st = NULL;
	struct sample_key k;
	int64_t cur_id = -1, cur = -1, count;
	size_t cap = 0;
	uint64_t *slot;
	int rc, err = 0, inserted;

	index = bmap__new();
	if (!index)
		return -ENOMEM;
	/* ?1 = 0 / ?2 = 0 select everything; SQLite evaluates those terms once. */
	rc = sqlite3_prepare_v2(db,
				"SELECT ts, pid, tid, stack_id, count FROM sample_counts"
				" WHERE (?1 = 0 OR pid = ?1) AND (?2 = 0 OR tid = ?2)",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		err = sql_fail(db, "sample counts");
		goto cleanup;
	}
	sqlite3_bind_int64(st, 1, flt ? flt->pid : 0);
	sqlite3_bind_int64(st, 2, flt ? flt->tid : 0);
	memset(&k, 0, sizeof(k));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 3);

		if (id != cur_id) {
			cur_id = id;
			cur = idmap_find(&pv->stack_ids, id);
		}
		if (cur < 0) {
			pr_warn("the recording is damaged: samples of stack %lld, which it lacks",
				(long long)id);
			err = -EIO;
			goto cleanup;
		}
		count = sqlite3_column_int64(st, 4);
		if (count <= 0)
			continue;
		k.ts = by_time ? sqlite3_column_int64(st, 0) : 0;
		k.pid = sqlite3_column_int(st, 1);
		k.tid = sqlite3_column_int(st, 2);
		k.stack = cur;
		slot = bmap__upsert(index, &k, sizeof(k), p->nsamples, &inserted);
		if (!slot) {
			err = -ENOMEM;
			goto cleanup;
		}
		if (inserted) {
			struct profile_sample *s;

			err = grow_array(&p->samples, &cap, p->nsamples + 1, sizeof(*p->samples));
			if (err)
				goto cleanup;
			s = &p->samples[p->nsamples++];
			s->pid = k.pid;
			s->tid = k.tid;
			s->stack = k.stack;
			s->ts = k.ts;
			s->count = 0;
		}
		p->samples[*slot].count += count;
		p->total += count;
	}
	if (rc != SQLITE_DONE) {
		err = sql_fail(db, "sample counts");
		goto cleanup;
	}
	qsort(p->samples, p->nsamples, sizeof(*p->samples), cmp_sample);
cleanup:
	sqlite3_finalize(st);
	bmap__free(index);
	return err;
}

static int load_threads(sqlite3 *db, struct profile *p)
{
	sqlite3_stmt *st = NULL;
	size_t cap = 0;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(db, "SELECT pid, tid, name FROM threads ORDER BY pid, tid", -1, &st,
				NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "threads");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct profile_thread *t;

		err = grow_array(&p->threads, &cap, p->nthreads + 1, sizeof(*p->threads));
		if (err)
			goto cleanup;
		t = &p->threads[p->nthreads++];
		t->pid = sqlite3_column_int(st, 0);
		t->tid = sqlite3_column_int(st, 1);
		err = keep_column(p, st, 2, &t->name);
		if (err)
			goto cleanup;
	}
	if (rc != SQLITE_DONE)
		err = sql_fail(db, "threads");
	if (err)
		goto cleanup;
	sqlite3_finalize(st);
	st = NULL;

	cap = 0;
	rc = sqlite3_prepare_v2(db, "SELECT pid, command, exe FROM processes ORDER BY pid", -1, &st,
				NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "processes");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct profile_process *pr;

		err = grow_array(&p->processes, &cap, p->nprocesses + 1, sizeof(*p->processes));
		if (err)
			goto cleanup;
		pr = &p->processes[p->nprocesses++];
		pr->pid = sqlite3_column_int(st, 0);
		err = keep_column(p, st, 1, &pr->command);
		if (!err)
			err = keep_column(p, st, 2, &pr->exe);
		if (err)
			goto cleanup;
	}
	if (rc != SQLITE_DONE)
		err = sql_fail(db, "processes");
cleanup:
	sqlite3_finalize(st);
	return err;
}

static int load_meta(sqlite3 *db, struct profile *p)
{
	sqlite3_stmt *st = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db,
				"SELECT key, value FROM meta"
				" WHERE key IN ('frequency', 'start', 'duration')",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "meta data");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *key = (const char *)sqlite3_column_text(st, 0);
		double v = sqlite3_column_double(st, 1); /* text is converted as CAST would */

		if (!key || v < 0)
			continue;
		if (!strcmp(key, "frequency"))
			p->frequency = v;
		else if (!strcmp(key, "start"))
			p->start = v;
		else if (!strcmp(key, "duration"))
			p->duration = v;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : sql_fail(db, "meta data");
}

int profile__load(sqlite3 *db, const struct profile_filter *f, struct profile **out)
{
	struct profile *p;
	bool in_txn = false;
	int err;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->priv = calloc(1, sizeof(struct priv));
	if (!p->priv) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* One snapshot for all the reads below, even while a recorder keeps writing. */
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK)
		in_txn = true;
	err = load_meta(db, p);
	if (!err)
		err = load_frames(db, p);
	if (!err)
		err = load_stacks(db, p);
	if (!err)
		err = load_samples(db, f, p);
	if (!err)
		err = load_threads(db, p);
cleanup:
	if (in_txn)
		sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (err) {
		profile__free(p);
		return err;
	}
	*out = p;
	return 0;
}

void profile__free(struct profile *p)
{
	struct priv *pv;
	size_t i;

	if (!p)
		return;
	pv = p->priv;
	if (pv) {
		for (i = 0; i < pv->nstrings; i++)
			free(pv->strings[i]);
		free(pv->strings);
		idmap_free(&pv->frame_ids);
		idmap_free(&pv->stack_ids);
		free(pv);
	}
	free(p->frames);
	free(p->stacks);
	free(p->refs);
	free(p->samples);
	free(p->threads);
	free(p->processes);
	free(p);
}

void profile__explain_empty(sqlite3 *db, const char *path, const struct profile_filter *f)
{
	struct strbuf list = {0};
	sqlite3_stmt *st = NULL;
	int rows = 0;

	if (!f || (!f->pid && !f->tid)) {
		pr_warn("%s has no samples: the recorder saw no CPU time of its targets (were they "
			"idle, or did the recording stop at once?)",
			path);
		return;
	}
	/* List what there is, busiest first, at most 10. */
	if (f->tid)
		sqlite3_prepare_v2(
			db,
			"SELECT c.tid, t.name, SUM(c.count) FROM sample_counts c"
			" LEFT JOIN threads t ON t.pid = c.pid AND t.tid = c.tid"
			" WHERE ?1 = 0 OR c.pid = ?1 GROUP BY c.tid ORDER BY 3 DESC LIMIT 10",
			-1, &st, NULL);
	else
		sqlite3_prepare_v2(db,
				   "SELECT c.pid, p.command, SUM(c.count) FROM sample_counts c"
				   " LEFT JOIN processes p ON p.pid = c.pid"
				   " GROUP BY c.pid ORDER BY 3 DESC LIMIT 10",
				   -1, &st, NULL);
	if (st) {
		sqlite3_bind_int64(st, 1, f->pid);
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *what = (const char *)sqlite3_column_text(st, 1);

			sb_printf(&list, "%s%lld%s%.40s%s (%lld samples)", rows ? ", " : "",
				  (long long)sqlite3_column_int64(st, 0), what ? " " : "",
				  what ? what : "", what && strlen(what) > 40 ? "..." : "",
				  (long long)sqlite3_column_int64(st, 2));
			rows++;
		}
		sqlite3_finalize(st);
	}
	if (f->tid && f->pid)
		pr_warn("%s has no samples of thread %d of process %d", path, (int)f->tid,
			(int)f->pid);
	else if (f->tid)
		pr_warn("%s has no samples of thread %d", path, (int)f->tid);
	else
		pr_warn("%s has no samples of process %d", path, (int)f->pid);
	if (rows)
		pr_warn("it has samples of these %s: %s", f->tid ? "threads" : "processes",
			sb_str(&list));
	else if (f->tid && f->pid)
		pr_warn("process %d has no samples at all", (int)f->pid);
	sb_free(&list);
}

const char *profile__thread_name(const struct profile *p, pid_t pid, pid_t tid)
{
	size_t lo = 0, hi = p->nthreads;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct profile_thread *t = &p->threads[mid];

		if (t->pid < pid || (t->pid == pid && t->tid < tid))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < p->nthreads && p->threads[lo].pid == pid && p->threads[lo].tid == tid)
		return p->threads[lo].name;
	return NULL;
}

const char *profile__command(const struct profile *p, pid_t pid)
{
	size_t i;

	for (i = 0; i < p->nprocesses; i++)
		if (p->processes[i].pid == pid)
			return p->processes[i].command;
	return NULL;
}
