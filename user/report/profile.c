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
#include "base/util.h"
#include "bpf/waitclass.h"
#include "record/rankview.h"
#include "report/profile.h"

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
	long state_frames[WAIT_NR]; /* p->wall: index of each state's pseudo-frame */
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

/* Make the malloc'd string @s the profile's (freed with it). 0 or -ENOMEM (@s stays yours). */
static int keep_string(struct profile *p, char *s)
{
	struct priv *pv = p->priv;

	if (pv->nstrings == pv->capstrings) {
		size_t cap = pv->capstrings ? pv->capstrings * 2 : 1024;
		char **tmp = realloc(pv->strings, cap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		pv->strings = tmp;
		pv->capstrings = cap;
	}
	pv->strings[pv->nstrings++] = s;
	return 0;
}

/* A copy of column @i (NULL stays NULL), owned by the profile. */
static int keep_column(struct profile *p, sqlite3_stmt *st, int i, const char **out)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	char *copy;

	*out = NULL;
	if (!s)
		return 0;
	copy = strdup((const char *)s);
	if (!copy)
		return -ENOMEM;
	if (keep_string(p, copy)) {
		free(copy);
		return -ENOMEM;
	}
	*out = copy;
	return 0;
}

static int sql_fail(sqlite3 *db, const char *what)
{
	pr_warn("cannot read the recording's %s: %s", what, sqlite3_errmsg(db));
	return sqlite3_errcode(db) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int load_frames(sqlite3 *db, struct profile *p, bool no_lines)
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
		if (err == -EINVAL) {
			pr_warn("the recording is damaged: frame_defs has the id %lld more than "
				"once",
				(long long)sqlite3_column_int64(st, 0));
			err = -EIO;
		}
		if (err)
			goto cleanup;
		f = &p->frames[p->nframes++];
		memset(f, 0, sizeof(*f));
		f->kind = !kind			    ? FRAME_NATIVE
			  : !strcmp(kind, "python") ? FRAME_PYTHON
			  : !strcmp(kind, "kernel") ? FRAME_KERNEL
						    : FRAME_NATIVE;
		f->line = no_lines && f->kind == FRAME_PYTHON ? 0 : sqlite3_column_int(st, 5);
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
	int64_t cur_id = -1, cur = -1, fi, depth;
	int rc, err = 0;

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
		if (err == -EINVAL) {
			pr_warn("the recording is damaged: stacks has the stack_id %lld more than "
				"once",
				(long long)sqlite3_column_int64(st, 0));
			err = -EIO;
		}
		if (err)
			goto cleanup;
		s = &p->stacks[p->nstacks++];
		s->first = nrefs;
		s->n = n;
		s->truncated = sqlite3_column_int(st, 2);
		nrefs += n;
		if (nrefs > UINT32_MAX) {
			pr_warn("the recording is damaged: its stacks claim more than 2^32 frames "
				"in "
				"all (stacks.nframes)");
			err = -EIO;
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
	sqlite3_finalize(st);
	st = NULL;
	/* Each frame a stack claims is a row of stack_frames: what the stacks claim is checked
	 * against what the file holds before anything is allocated for it. */
	if (sqlite3_prepare_v2(db, "SELECT count(*) FROM stack_frames", -1, &st, NULL) !=
		    SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		err = sql_fail(db, "stack frames");
		goto cleanup;
	}
	if ((int64_t)nrefs != sqlite3_column_int64(st, 0)) {
		pr_warn("the recording is damaged: its stacks claim %zu frames in all (stacks."
			"nframes), but stack_frames holds %lld",
			nrefs, (long long)sqlite3_column_int64(st, 0));
		err = -EIO;
		goto cleanup;
	}
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
		depth = sqlite3_column_int64(st, 1);
		fi = idmap_find(&pv->frame_ids, sqlite3_column_int64(st, 2));
		if (cur < 0 || fi < 0 || depth < 0 || depth >= p->stacks[cur].n) {
			pr_warn("the recording is damaged: stack %lld, depth %lld refers to a "
				"stack or frame it does not have",
				(long long)id, (long long)depth);
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
	uint32_t state;
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
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return x->state < y->state ? -1 : x->state > y->state;
}

/* Does @table (a table or view of @db) have @column? 1, 0, or -EIO. */
static int has_column(sqlite3 *db, const char *table, const char *column)
{
	sqlite3_stmt *st = NULL;
	int rc, found = -EIO;

	rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
				-1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			found = sqlite3_column_int(st, 0) > 0;
	}
	sqlite3_finalize(st);
	return found;
}

int profile__has_states(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	int found = has_column(db, "sample_counts", "state"), rc;

	if (found != 1)
		return found;
	/* record writes meta off_cpu; other writers: any row in another state than running. */
	rc = sqlite3_prepare_v2(db,
				"SELECT CAST(value AS INTEGER) > 0 FROM meta WHERE key = 'off_cpu'",
				-1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		found = sqlite3_column_int(st, 0) > 0;
		sqlite3_finalize(st);
		return found;
	}
	sqlite3_finalize(st);
	st = NULL;
	found = 0;
	rc = sqlite3_prepare_v2(db,
				"SELECT 1 FROM sample_counts WHERE state NOT IN (0, 'running')"
				" LIMIT 1",
				-1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		found = 1;
	sqlite3_finalize(st);
	return found;
}

int profile__state_code(const char *name, int *code)
{
	int i;

	for (i = 0; i < WAIT_NR; i++) {
		if (!strcmp(name, wait_state_name(i))) {
			if (code)
				*code = i;
			return 0;
		}
	}
	return -EINVAL;
}

int profile__t0(sqlite3 *db, int64_t *t0)
{
	sqlite3_stmt *st = NULL;
	int rc;

	/* meta 'start' (REAL unix seconds) rounded down, else the first second sampled. */
	rc = sqlite3_prepare_v2(db,
				"SELECT coalesce((SELECT CAST(value AS INTEGER) FROM meta"
				" WHERE key = 'start' AND CAST(value AS REAL) > 0),"
				" (SELECT MIN(ts) FROM sample_counts), 0)",
				-1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
		*t0 = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		return 0;
	}
	sqlite3_finalize(st);
	return sql_fail(db, "start time");
}

/*
 * The query that reads the samples @flt selects, with its parameters bound, into *@out: columns
 * ts, pid, tid, stack_id, count, state (a number or a name; 0 when the recording has no states)
 * and ns (NULL when it does not say). Counts come from the table sample_counts only: views in
 * a file are whatever its writer made them (docs/sql.md, "Untrusted files").
 */
enum samples_query {
	SAMPLE_ROWS,	   /* (ts, pid, tid, stack_id, count) */
	SAMPLES_BY_SECOND, /* (ts, samples) */
	RANK_DEVIATION,	   /* rank_deviation's columns (record/rankview.h) */
};

static int prepare_samples(sqlite3 *db, const struct profile_filter *flt, enum samples_query what,
			   sqlite3_stmt **out)
{
	bool per_second = what == SAMPLES_BY_SECOND;
	char *query = NULL;
	const char *table = "sample_counts", *state = "0", *ns = "NULL";
	struct strbuf sql = {0};
	sqlite3_stmt *st = NULL;
	int64_t t0 = 0;
	int err, code = -1;

	/* probing's own table only: views in a file are whatever its writer made them. */
	if (has_column(db, "sample_counts", "state") == 1)
		state = "state";
	if (has_column(db, table, "ns") == 1)
		ns = "ns";
	if (flt && flt->state) {
		if (profile__state_code(flt->state, &code)) {
			pr_warn("unknown thread state '%s': the states are running, runnable, "
				"sleep, lock, io, gil and other",
				flt->state);
			return -EINVAL;
		}
		if (!strcmp(state, "0") || (code != WAIT_RUNNING && profile__has_states(db) != 1)) {
			pr_warn("this recording has no thread states (its samples are on-CPU time "
				"only; record --off-cpu records them): leave out the state filter");
			return -EINVAL;
		}
	}
	if (flt && (flt->flags & PROFILE_RANGE)) {
		err = profile__t0(db, &t0);
		if (err)
			return err;
	}
	/* ?1 = 0 / ?2 = 0 select everything; SQLite evaluates those terms once. */
	err = per_second ? sb_puts(&sql, "SELECT ts, SUM(count) FROM (") : 0;
	err = err
		      ?: sb_printf(&sql,
				   "SELECT ts, pid, tid, stack_id, count, %s AS state, %s AS ns "
				   "FROM %s"
				   " WHERE (?1 = 0 OR pid = ?1) AND (?2 = 0 OR tid = ?2)",
				   state, ns, table);
	if (!err && flt && (flt->flags & PROFILE_RANK))
		err = sb_puts(&sql, " AND pid IN (SELECT pid FROM processes WHERE rank = ?3)");
	/* Second ts covers [ts, ts + 1): it overlaps [from, to) when ts > from - 1, ts < to. */
	if (!err && flt && (flt->flags & PROFILE_RANGE))
		err = sb_puts(&sql, " AND ts > ?4 AND ts < ?5");
	/* A state stored as its number or as its name. */
	if (!err && flt && flt->state)
		err = sb_puts(&sql, " AND (state = ?6 OR state = ?7)");
	/* @per_second: (ts, samples) of these rows, by second. */
	if (!err && per_second)
		err = sb_puts(&sql, ") GROUP BY ts ORDER BY ts");
	if (!err && what == RANK_DEVIATION) {
		unsigned int has = 0;

		if (has_column(db, "collectives", "seq") == 1 &&
		    has_column(db, "collectives", "rank") == 1)
			has |= RANKVIEW_COLLECTIVES;
		if (has_column(db, "meta", "value") == 1)
			has |= RANKVIEW_META;
		query = rankview_deviation_query(sb_str(&sql), has);
		if (!query)
			err = -ENOMEM;
	}
	if (err) {
		sb_free(&sql);
		return err;
	}
	if (sqlite3_prepare_v2(db, query ? query : sb_str(&sql), -1, &st, NULL) != SQLITE_OK) {
		free(query);
		sb_free(&sql);
		return sql_fail(db, what == RANK_DEVIATION ? "ranks" : "sample counts");
	}
	free(query);
	sb_free(&sql);
	sqlite3_bind_int64(st, 1, flt ? flt->pid : 0);
	sqlite3_bind_int64(st, 2, flt ? flt->tid : 0);
	if (flt && (flt->flags & PROFILE_RANK))
		sqlite3_bind_int64(st, 3, flt->rank);
	if (flt && (flt->flags & PROFILE_RANGE)) {
		sqlite3_bind_double(st, 4, (double)t0 + flt->from - 1);
		sqlite3_bind_double(st, 5, (double)t0 + flt->to);
	}
	if (flt && flt->state) {
		sqlite3_bind_int(st, 6, code);
		sqlite3_bind_text(st, 7, flt->state, -1, SQLITE_STATIC);
	}
	*out = st;
	return 0;
}

/* Column @i of a samples row as a state code: a number, or a name (WAIT_OTHER if unknown). */
static uint32_t column_state(sqlite3_stmt *st, int i)
{
	const char *name;
	int code;

	if (sqlite3_column_type(st, i) != SQLITE_TEXT) {
		code = sqlite3_column_int(st, i);
		return code >= 0 && code < WAIT_NR ? (uint32_t)code : WAIT_OTHER;
	}
	name = (const char *)sqlite3_column_text(st, i);
	return name && !profile__state_code(name, &code) ? (uint32_t)code : WAIT_OTHER;
}

static int load_samples(sqlite3 *db, const struct profile_filter *flt, struct profile *p)
{
	struct priv *pv = p->priv;
	bool by_time = flt && (flt->flags & PROFILE_BY_TIME);
	struct bmap *index = NULL;
	sqlite3_stmt *st = NULL;
	struct sample_key k;
	int64_t cur_id = -1, cur = -1, count;
	/* A sample stands for one period when the recording does not say (older recordings). */
	uint64_t period = hz_period_ns(p->frequency >= 1 ? (unsigned int)p->frequency
							 : PROBING_DEFAULT_HZ),
		 ns;
	size_t cap = 0;
	uint64_t *slot;
	int rc, err = 0, inserted;

	index = bmap__new();
	if (!index)
		return -ENOMEM;
	err = prepare_samples(db, flt, SAMPLE_ROWS, &st);
	if (err)
		goto cleanup;
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
		if (sqlite3_column_type(st, 6) == SQLITE_NULL) {
			if (__builtin_mul_overflow((uint64_t)count, period, &ns)) {
				pr_warn("the recording is damaged: stack %lld has %lld samples in "
					"one row, more than any recording holds",
					(long long)id, (long long)count);
				err = -EIO;
				goto cleanup;
			}
		} else if (sqlite3_column_int64(st, 6) < 0) {
			pr_warn("the recording is damaged: a sample of stack %lld (pid %d, tid %d) "
				"stands for a negative time (ns = %lld)",
				(long long)id, sqlite3_column_int(st, 1), sqlite3_column_int(st, 2),
				(long long)sqlite3_column_int64(st, 6));
			err = -EIO;
			goto cleanup;
		} else {
			ns = sqlite3_column_int64(st, 6);
		}
		k.ts = by_time ? sqlite3_column_int64(st, 0) : 0;
		k.pid = sqlite3_column_int(st, 1);
		k.tid = sqlite3_column_int(st, 2);
		k.stack = cur;
		k.state = column_state(st, 5);
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
			s->state = k.state;
			s->ts = k.ts;
			s->count = 0;
			s->ns = 0;
		}
		/* The totals bound every sum of samples: they must not wrap around. */
		if (__builtin_add_overflow(p->total, (uint64_t)count, &p->total) ||
		    __builtin_add_overflow(p->total_ns, ns, &p->total_ns)) {
			pr_warn("the recording is damaged: its samples add up to more than 2^64 "
				"(counts or ns)");
			err = -EIO;
			goto cleanup;
		}
		p->samples[*slot].count += count;
		p->samples[*slot].ns += ns;
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
	int rc, err = 0, host;

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
	/* processes.host came with record --children of jobs: older recordings lack it. */
	host = has_column(db, "processes", "host") == 1;
	rc = sqlite3_prepare_v2(
		db,
		host ? "SELECT pid, command, exe, rank, host FROM processes ORDER BY pid"
		     : "SELECT pid, command, exe, rank, NULL FROM processes ORDER BY pid",
		-1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(db, "processes");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct profile_process *pr;

		err = grow_array(&p->processes, &cap, p->nprocesses + 1, sizeof(*p->processes));
		if (err)
			goto cleanup;
		pr = &p->processes[p->nprocesses++];
		pr->pid = sqlite3_column_int(st, 0);
		pr->rank = sqlite3_column_type(st, 3) == SQLITE_INTEGER &&
					   sqlite3_column_int64(st, 3) >= 0 &&
					   sqlite3_column_int64(st, 3) <= INT32_MAX
				   ? sqlite3_column_int(st, 3)
				   : -1;
		err = keep_column(p, st, 1, &pr->command);
		if (!err)
			err = keep_column(p, st, 2, &pr->exe);
		if (!err)
			err = keep_column(p, st, 4, &pr->host);
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

/*
 * Does the recording have off-CPU time? meta off_cpu says so (record --off-cpu); without it (other
 * writers), any row in another state than running. Then add the states' pseudo-frames.
 */
static int load_wall(sqlite3 *db, struct profile *p)
{
	struct priv *pv = p->priv;
	size_t cap = p->nframes, i;
	int found = profile__has_states(db) == 1;

	p->wall = found;
	for (i = 0; i < WAIT_NR; i++)
		pv->state_frames[i] = -1;
	if (!p->wall)
		return 0;
	for (i = WAIT_RUNNING + 1; i < WAIT_NR; i++) {
		struct frame *f;
		char *name;

		if (grow_array(&p->frames, &cap, p->nframes + 1, sizeof(*p->frames)) ||
		    asprintf(&name, "[off-CPU: %s]", wait_state_name(i)) < 0)
			return -ENOMEM;
		if (keep_string(p, name)) {
			free(name);
			return -ENOMEM;
		}
		f = &p->frames[p->nframes];
		memset(f, 0, sizeof(*f));
		f->kind = FRAME_NATIVE;
		f->func = name;
		pv->state_frames[i] = p->nframes++;
	}
	return 0;
}

long profile__state_frame(const struct profile *p, unsigned int state)
{
	const struct priv *pv = p->priv;

	return p->wall && state < WAIT_NR ? pv->state_frames[state] : -1;
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
		err = load_frames(db, p, f && (f->flags & PROFILE_NO_LINES));
	if (!err)
		err = load_stacks(db, p);
	if (!err)
		err = load_wall(db, p);
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

int profile__per_second(sqlite3 *db, const struct profile_filter *f, struct profile_second **out,
			size_t *n, int64_t *t0)
{
	struct profile_filter all = f ? *f : (struct profile_filter){0};
	struct profile_second *secs = NULL;
	sqlite3_stmt *st = NULL;
	size_t cap = 0;
	int rc, err;

	*out = NULL;
	*n = 0;
	all.flags &= ~(PROFILE_RANGE | PROFILE_BY_TIME);
	err = profile__t0(db, t0);
	if (!err)
		err = prepare_samples(db, &all, SAMPLES_BY_SECOND, &st);
	if (err)
		return err;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		err = grow_array(&secs, &cap, *n + 1, sizeof(*secs));
		if (err)
			goto cleanup;
		secs[*n].t = sqlite3_column_int64(st, 0) - *t0;
		secs[*n].count = sqlite3_column_int64(st, 1);
		(*n)++;
	}
	if (rc != SQLITE_DONE)
		err = sql_fail(db, "sample times");
cleanup:
	sqlite3_finalize(st);
	if (err) {
		free(secs);
		*n = 0;
		return err;
	}
	*out = secs;
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

/* Append the text of the first column of every row of @sql to @sb, comma-separated. */
static void list_column(sqlite3 *db, const char *sql, struct strbuf *sb)
{
	sqlite3_stmt *st = NULL;
	int rows = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW && rows < 20) {
		const char *v = (const char *)sqlite3_column_text(st, 0);

		sb_printf(sb, "%s%s", rows++ ? ", " : "", v ? v : "NULL");
	}
	sqlite3_finalize(st);
}

/* An empty profile with a rank, time range or state filter: say what the recording has. */
static void explain_selection(sqlite3 *db, const char *path, const struct profile_filter *f)
{
	struct strbuf what = {0}, have = {0};
	int64_t t0 = 0;

	if (f->pid)
		sb_printf(&what, " of process %d", (int)f->pid);
	if (f->tid)
		sb_printf(&what, " of thread %d", (int)f->tid);
	if (f->flags & PROFILE_RANK)
		sb_printf(&what, " of rank %d", f->rank);
	if (f->flags & PROFILE_RANGE)
		sb_printf(&what, f->to < 1e15 ? " from %g s to %g s" : " from %g s on", f->from,
			  f->to);
	if (f->state)
		sb_printf(&what, " in state %s", f->state);
	pr_warn("%s has no samples%s", path, sb_str(&what));
	if (f->flags & PROFILE_RANK) {
		list_column(db,
			    "SELECT DISTINCT p.rank FROM processes p JOIN sample_counts c"
			    " ON c.pid = p.pid WHERE p.rank IS NOT NULL ORDER BY 1",
			    &have);
		if (have.len)
			pr_warn("it has samples of ranks %s", sb_str(&have));
		else
			pr_warn("none of its processes has a rank (no RANK in their environment)");
		sb_reset(&have);
	}
	if ((f->flags & PROFILE_RANGE) && !profile__t0(db, &t0)) {
		char *sql = sqlite3_mprintf("SELECT printf('%%d s to %%d s', MIN(ts) - %lld,"
					    " MAX(ts) + 1 - %lld) FROM sample_counts",
					    (long long)t0, (long long)t0);

		if (sql)
			list_column(db, sql, &have);
		sqlite3_free(sql);
		if (have.len)
			pr_warn("its samples span %s (seconds since it started)", sb_str(&have));
		sb_reset(&have);
	}
	if (f->state) {
		/* From the table (views in a file are its writer's): states by their names. */
		struct strbuf q = {0};
		int i;

		sb_puts(&q, "SELECT DISTINCT CASE state");
		for (i = 0; i < WAIT_NR; i++)
			sb_printf(&q, " WHEN %d THEN '%s'", i, wait_state_name(i));
		sb_puts(&q, " ELSE CAST(state AS TEXT) END FROM sample_counts ORDER BY 1");
		if (q.len)
			list_column(db, sb_str(&q), &have);
		sb_free(&q);
		if (have.len)
			pr_warn("its samples are in the states %s", sb_str(&have));
	}
	sb_free(&what);
	sb_free(&have);
}

void profile__explain_empty(sqlite3 *db, const char *path, const struct profile_filter *f)
{
	struct strbuf list = {0};
	sqlite3_stmt *st = NULL;
	int rows = 0;

	if (f && (f->flags & (PROFILE_RANK | PROFILE_RANGE) || f->state)) {
		explain_selection(db, path, f);
		return;
	}
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

const struct profile_process *profile__process(const struct profile *p, pid_t pid)
{
	size_t lo = 0, hi = p->nprocesses, mid;

	/* Sorted by pid (ORDER BY pid, the primary key). */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (p->processes[mid].pid == pid)
			return &p->processes[mid];
		if (p->processes[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const char *profile__command(const struct profile *p, pid_t pid)
{
	const struct profile_process *pr = profile__process(p, pid);

	return pr ? pr->command : NULL;
}

static char *column_dup(sqlite3_stmt *st, int i, int *err)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	char *copy;

	if (!s)
		return NULL;
	copy = strdup((const char *)s);
	if (!copy)
		*err = -ENOMEM;
	return copy;
}

int profile__rank_deviation(sqlite3 *db, const struct profile_filter *f,
			    struct profile_rank_deviation **out, size_t *n)
{
	struct profile_filter all = f ? *f : (struct profile_filter){0};
	struct profile_rank_deviation *rows = NULL, *r;
	sqlite3_stmt *st = NULL;
	const char *kind;
	size_t cap = 0;
	int rc, err;

	*out = NULL;
	*n = 0;
	all.flags &= ~(PROFILE_RANK | PROFILE_BY_TIME);
	err = prepare_samples(db, &all, RANK_DEVIATION, &st);
	if (err)
		return err;
	/*
	 * rank, pids, samples, deviation, kind, func, file, share, median_share, collectives,
	 * entered_last, others_wait_ms, note
	 */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		err = grow_array(&rows, &cap, *n + 1, sizeof(*rows));
		if (err)
			goto cleanup;
		r = &rows[(*n)++];
		memset(r, 0, sizeof(*r));
		r->rank = sqlite3_column_int(st, 0);
		r->samples = sqlite3_column_int64(st, 2);
		r->deviation = sqlite3_column_double(st, 3);
		kind = (const char *)sqlite3_column_text(st, 4);
		r->kind = !kind			    ? FRAME_NATIVE
			  : !strcmp(kind, "python") ? FRAME_PYTHON
			  : !strcmp(kind, "kernel") ? FRAME_KERNEL
						    : FRAME_NATIVE;
		r->func = column_dup(st, 5, &err);
		r->file = column_dup(st, 6, &err);
		r->share = sqlite3_column_double(st, 7);
		r->median_share = sqlite3_column_double(st, 8);
		r->collectives = sqlite3_column_int64(st, 9);
		r->entered_last = sqlite3_column_int64(st, 10);
		r->others_wait_ms = sqlite3_column_double(st, 11);
		r->late = r->entered_last * 2 > r->collectives && r->collectives > 0;
		r->note = column_dup(st, 12, &err);
		if (err)
			goto cleanup;
	}
	if (rc != SQLITE_DONE)
		err = sql_fail(db, "ranks");
cleanup:
	sqlite3_finalize(st);
	if (err) {
		profile__free_rank_deviation(rows, *n);
		*n = 0;
		return err;
	}
	*out = rows;
	return 0;
}

void profile__free_rank_deviation(struct profile_rank_deviation *rows, size_t n)
{
	size_t i;

	for (i = 0; rows && i < n; i++) {
		free((char *)rows[i].func);
		free((char *)rows[i].file);
		free((char *)rows[i].note);
	}
	free(rows);
}
