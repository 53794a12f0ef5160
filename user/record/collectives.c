// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timex.h>

#include "base/bmap.h"
#include "base/log.h"
#include "base/util.h"
#include "record/collectives.h"
#include "record/torchlayout.h"

static const char *const op_names[COMM_OP_NR] = {
	[COMM_OP_ALLREDUCE] = "allreduce",
	[COMM_OP_BROADCAST] = "broadcast",
	[COMM_OP_ALLGATHER] = "allgather",
	[COMM_OP_BARRIER] = "barrier",
	[COMM_OP_REDUCE] = "reduce",
	[COMM_OP_GATHER] = "gather",
	[COMM_OP_SCATTER] = "scatter",
	[COMM_OP_REDUCE_SCATTER] = "reduce_scatter",
	[COMM_OP_ALLTOALL] = "alltoall",
	[COMM_OP_ALLREDUCE_COALESCED] = "allreduce_coalesced",
	[COMM_OP_ALLGATHER_COALESCED] = "allgather_coalesced",
	[COMM_OP_ALLGATHER_BASE] = "allgather_base",
	[COMM_OP_SEND] = "send",
	[COMM_OP_RECV] = "recv",
	[COMM_OP_RECV_ANYSOURCE] = "recv",
};

/* A call under way. */
struct call {
	struct store_collective row;
	char grp[64];
	uint64_t time_ns; /* the call's event time (BPF clock) */
	bool tai;	  /* that clock is CLOCK_TAI (else CLOCK_MONOTONIC) */
	bool grouped;	  /* NCCL: issued inside ncclGroupStart/End */
};

/* Keys of the maps below: a thread, or an object (work, buffer, process group) of a process. */
struct tkey {
	uint32_t pid, tid;
};
struct okey {
	uint32_t pid, _pad;
	uint64_t obj;
};

struct collectives {
	struct store *st;
	struct comm *comm;
	int64_t tai_to_real_ns;	 /* add to a CLOCK_TAI time */
	int64_t mono_to_real_ns; /* add to a CLOCK_MONOTONIC time */
	int64_t next_id;
	struct bmap *pending;  /* struct tkey -> struct call *: called, work not known yet */
	struct bmap *inflight; /* struct okey -> struct call *: work queued, not done */
	struct bmap *groups;   /* struct okey (the process group) -> char * name ("": unknown) */
	struct bmap *depth;    /* struct tkey -> ncclGroupStart nesting */
	struct call **grouped; /* NCCL calls waiting for their group's end */
	size_t ngrouped, capgrouped;
	struct bmap *pids; /* processes with rows */
	uint64_t rows, completed;
	/* Progress (collectives__progress): per process the unix ns of its latest completion,
	 * and the last COLL_GAPS times between two completions of one process. */
	struct bmap *last_done;
	int64_t last_done_ns;
	int64_t gaps[COLL_GAPS];
	unsigned int ngaps;
};

struct collectives *collectives__new(struct store *st, struct comm *c)
{
	struct collectives *cs = calloc(1, sizeof(*cs));
	struct timex tx = {};

	if (!cs)
		goto nomem;
	cs->st = st;
	cs->comm = c;
	cs->pending = bmap__new();
	cs->inflight = bmap__new();
	cs->groups = bmap__new();
	cs->depth = bmap__new();
	cs->pids = bmap__new();
	cs->last_done = bmap__new();
	if (!cs->pending || !cs->inflight || !cs->groups || !cs->depth || !cs->pids ||
	    !cs->last_done)
		goto nomem;
	/* CLOCK_TAI runs ahead of CLOCK_REALTIME by the TAI offset the time daemon set (0 if it
	 * set none); unlike a monotonic offset it follows the clock's slewing. */
	cs->tai_to_real_ns = adjtimex(&tx) >= 0 ? -(int64_t)tx.tai * 1000000000LL : 0;
	cs->mono_to_real_ns = (int64_t)(now_real_ns() - now_mono_ns());
	return cs;
nomem:
	collectives__free(cs);
	errno = ENOMEM;
	return NULL;
}

#define GROUP_NAME_TRIES 8 /* reads of a process group's name before it is given up */

/* A slot of cs->groups: a count of failed reads (nothing to free) or a name's copy. */
static int free_group(const void *key, size_t len, uint64_t *value, void *ctx)
{
	if (*value > GROUP_NAME_TRIES)
		free((void *)(uintptr_t)*value);
	*value = 0;
	return 0;
}

void collectives__free(struct collectives *cs)
{
	size_t i;

	if (!cs)
		return;
	bmap__free_values(cs->pending);
	bmap__free_values(cs->inflight);
	if (cs->groups)
		bmap__for_each(cs->groups, free_group, NULL);
	for (i = 0; i < cs->ngrouped; i++)
		free(cs->grouped[i]);
	free(cs->grouped);
	bmap__free(cs->pending);
	bmap__free(cs->inflight);
	bmap__free(cs->groups);
	bmap__free(cs->depth);
	bmap__free(cs->pids);
	bmap__free(cs->last_done);
	free(cs);
}

/* A row was written for the first time (not its update at completion). */
static void new_row(struct collectives *cs, pid_t pid)
{
	cs->rows++;
	bmap__upsert(cs->pids, &pid, sizeof(pid), 0, NULL);
}

static int64_t unix_ns(const struct collectives *cs, const struct comm_event *h)
{
	return (int64_t)h->time_ns +
	       (h->flags & COMM_F_TAI ? cs->tai_to_real_ns : cs->mono_to_real_ns);
}

/* Take the value of @key out of @m (NULL if none). */
static struct call *take(struct bmap *m, const void *key, size_t len)
{
	uint64_t *slot = bmap__find(m, key, len);
	struct call *c;

	if (!slot || !*slot)
		return NULL;
	c = (struct call *)(uintptr_t)*slot;
	*slot = 0;
	return c;
}

/* Put @c under @key in @m; what was there is written as it is and freed. */
static int put(struct collectives *cs, struct bmap *m, const void *key, size_t len, struct call *c)
{
	uint64_t *slot = bmap__upsert(m, key, len, 0, NULL);

	if (!slot)
		return -ENOMEM;
	free((void *)(uintptr_t)*slot);
	*slot = (uintptr_t)c;
	return 0;
}

/*
 * The name of the process group @pg of @pid, read once it can be: a read that fails (the
 * group is still being set up, or its library's layout is not known yet) is tried again at
 * the group's next calls, up to GROUP_NAME_TRIES times, then given up (NULL). The slot of
 * cs->groups holds the failures so far (1..GROUP_NAME_TRIES) or the name's copy.
 */
static const char *group_name(struct collectives *cs, pid_t pid, uint64_t pg,
			      const struct torchlayout *tl)
{
	struct okey k = {.pid = pid, .obj = pg};
	char name[64];
	uint64_t *slot;
	char *s;

	slot = bmap__upsert(cs->groups, &k, sizeof(k), 0, NULL);
	if (!slot)
		return NULL;
	if (*slot < GROUP_NAME_TRIES) {
		if (torchlayout_group_name(pid, pg, tl, name, sizeof(name))) {
			if (++*slot == GROUP_NAME_TRIES)
				pr_debug("collectives: pid %d: the name of the process group at "
					 "%#llx cannot be read",
					 pid, (unsigned long long)pg);
			return NULL;
		}
		s = strdup(name);
		if (!s)
			return NULL;
		*slot = (uintptr_t)s;
	}
	return *slot > GROUP_NAME_TRIES ? (const char *)(uintptr_t)*slot : NULL;
}

int collectives__call(struct collectives *cs, const struct comm_call_event *e, uint64_t stack_id)
{
	unsigned int role = COMM_COOKIE_ROLE(e->h.cookie), op = COMM_COOKIE_OP(e->h.cookie);
	struct tkey tk = {e->h.pid, e->h.tid};
	const char *grp = NULL;
	int32_t grank, gsize;
	uint64_t *depth;
	struct call *c;
	int err;

	if (op >= COMM_OP_NR || !op_names[op])
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->time_ns = e->h.time_ns;
	c->tai = e->h.flags & COMM_F_TAI;
	if (role == COMM_R_GLOO_P2P)
		comm__p2p_call(cs->comm, e->h.pid);
	c->row = (struct store_collective){
		.id = ++cs->next_id,
		.pid = e->h.pid,
		.tid = e->h.tid,
		.op = op_names[op],
		.bytes = -1,
		.seq = -1,
		.start_ns = unix_ns(cs, &e->h),
		.ns = -1,
		.stack_id = stack_id,
		.lib = role == COMM_R_NCCL_CALL ? "nccl" : "gloo",
	};
	if (comm__call_bytes(cs->comm, e, &c->row.bytes))
		c->row.bytes = -1;
	/* What the process group said, if it makes sense. */
	if (role != COMM_R_NCCL_CALL && !comm__call_group(cs->comm, e, &grank, &gsize)) {
		c->row.grp_rank = grank;
		c->row.grp_size = gsize;
	}
	if (role == COMM_R_GLOO_CALL && (e->h.flags & COMM_F_SEQ))
		c->row.seq = e->seq;
	if (role == COMM_R_GLOO_CALL || role == COMM_R_GLOO_P2P)
		grp = group_name(cs, e->h.pid, e->pg, comm__call_layout(cs->comm, e));
	if (grp) {
		snprintf(c->grp, sizeof(c->grp), "%s", grp);
		c->row.grp = c->grp;
	}
	if (role == COMM_R_GLOO_P2P) {
		c->row.has_peer = true;
		c->row.peer = e->peer;
		c->row.tag = e->tag;
	} else if (role == COMM_R_NCCL_CALL && e->peer >= 0) {
		c->row.has_peer = true;
		c->row.peer = e->peer;
		c->row.tag = 0;
	}

	switch (role) {
	case COMM_R_GLOO_CALL:
		/* A row once its work is queued: a call that throws first never ran. */
		return put(cs, cs->pending, &tk, sizeof(tk), c);
	case COMM_R_GLOO_P2P:
		/* Under way now; complete once its buffer completes (if libgloo is probed). */
		err = store__collective(cs->st, &c->row);
		new_row(cs, c->row.pid);
		return err ?: put(cs, cs->pending, &tk, sizeof(tk), c);
	case COMM_R_NCCL_CALL:
		depth = bmap__find(cs->depth, &tk, sizeof(tk));
		if (depth && *depth) {
			/* Issued by ncclGroupEnd: written then. */
			c->grouped = true;
			if (grow_array(&cs->grouped, &cs->capgrouped, cs->ngrouped + 1,
				       sizeof(*cs->grouped))) {
				free(c);
				return -ENOMEM;
			}
			cs->grouped[cs->ngrouped++] = c;
			return 0;
		}
		err = store__collective(cs->st, &c->row);
		new_row(cs, c->row.pid);
		free(c);
		return err;
	}
	free(c);
	return -EINVAL;
}

/* ncclGroupEnd of the outermost group on @tk's thread: its calls were issued now. */
static int group_end(struct collectives *cs, const struct tkey *tk, const struct comm_event *e)
{
	struct call *c;
	size_t i;
	int err = 0;

	for (i = 0; i < cs->ngrouped;) {
		c = cs->grouped[i];
		if ((uint32_t)c->row.pid != tk->pid || (uint32_t)c->row.tid != tk->tid) {
			i++;
			continue;
		}
		c->row.start_ns = unix_ns(cs, e);
		err = err ?: store__collective(cs->st, &c->row);
		new_row(cs, c->row.pid);
		free(c);
		cs->grouped[i] = cs->grouped[--cs->ngrouped];
	}
	return err;
}

/* Process @pid completed a call at @ns (unix): its progress. */
static void note_done(struct collectives *cs, pid_t pid, int64_t ns)
{
	uint32_t k = pid;
	uint64_t *last = bmap__upsert(cs->last_done, &k, sizeof(k), 0, NULL);

	if (last && *last && ns > (int64_t)*last)
		cs->gaps[cs->ngaps++ % COLL_GAPS] = ns - (int64_t)*last;
	if (last)
		*last = ns;
	if (ns > cs->last_done_ns)
		cs->last_done_ns = ns;
}

int collectives__event(struct collectives *cs, const struct comm_event *e)
{
	struct tkey tk = {e->pid, e->tid};
	struct okey ok = {.pid = e->pid, .obj = e->obj};
	uint64_t *depth;
	struct call *c;
	int err;

	switch (e->ev) {
	case COMM_EV_ENQUEUE:
	case COMM_EV_UB_POST:
		c = take(cs->pending, &tk, sizeof(tk));
		if (!c)
			return 0; /* called before the probes were attached */
		if (e->ev == COMM_EV_ENQUEUE ||
		    !comm__p2p_watched(cs->comm, e->pid, c->time_ns, c->tai)) {
			err = store__collective(cs->st, &c->row);
			new_row(cs, c->row.pid);
			if (err || e->ev == COMM_EV_UB_POST) {
				/* A send/recv whose completion may have gone unseen: written without
				 * it (ns NULL), not kept under way. */
				free(c);
				return err;
			}
		}
		return put(cs, cs->inflight, &ok, sizeof(ok), c);
	case COMM_EV_DONE:
		if (COMM_COOKIE_ROLE(e->cookie) != COMM_R_UB_DONE)
			comm__work_done(cs->comm, e->pid);
		c = take(cs->inflight, &ok, sizeof(ok));
		if (!c)
			return 0;
		c->row.ns = e->time_ns > c->time_ns ? (int64_t)(e->time_ns - c->time_ns) : 0;
		c->row.worker_tid = e->tid;
		c->row.error = e->flags & COMM_F_ERROR;
		err = store__collective(cs->st, &c->row);
		cs->completed++;
		note_done(cs, c->row.pid, unix_ns(cs, e));
		free(c);
		return err;
	case COMM_EV_GROUP_START:
		depth = bmap__upsert(cs->depth, &tk, sizeof(tk), 0, NULL);
		if (!depth)
			return -ENOMEM;
		++*depth;
		return 0;
	case COMM_EV_GROUP_END:
		depth = bmap__find(cs->depth, &tk, sizeof(tk));
		if (!depth || !*depth)
			return 0;
		if (--*depth)
			return 0;
		return group_end(cs, &tk, e);
	}
	return 0;
}

struct forget_ctx {
	pid_t pid;
};

static int forget_entry(const void *key, size_t len, uint64_t *value, void *arg)
{
	const struct forget_ctx *f = arg;

	if (*(const uint32_t *)key == (uint32_t)f->pid) {
		free((void *)(uintptr_t)*value);
		*value = 0;
	}
	return 0;
}

static int forget_group(const void *key, size_t len, uint64_t *value, void *arg)
{
	const struct forget_ctx *f = arg;

	return *(const uint32_t *)key == (uint32_t)f->pid ? free_group(key, len, value, NULL) : 0;
}

static int forget_depth(const void *key, size_t len, uint64_t *value, void *arg)
{
	const struct forget_ctx *f = arg;

	if (*(const uint32_t *)key == (uint32_t)f->pid)
		*value = 0;
	return 0;
}

void collectives__forget(struct collectives *cs, pid_t pid)
{
	struct forget_ctx f = {pid};
	size_t i;

	/* What was under way stays as written (ns NULL); what never started is dropped. */
	bmap__for_each(cs->pending, forget_entry, &f);
	bmap__for_each(cs->inflight, forget_entry, &f);
	bmap__for_each(cs->groups, forget_group, &f);
	bmap__for_each(cs->depth, forget_depth, &f);
	bmap__for_each(cs->last_done, forget_depth, &f);
	for (i = 0; i < cs->ngrouped;) {
		if (cs->grouped[i]->row.pid == pid) {
			free(cs->grouped[i]);
			cs->grouped[i] = cs->grouped[--cs->ngrouped];
		} else {
			i++;
		}
	}
}

void collectives__counts(const struct collectives *cs, uint64_t *rows, uint64_t *completed,
			 uint64_t *processes)
{
	*rows = cs->rows;
	*completed = cs->completed;
	*processes = bmap__size(cs->pids);
}

/*
 * The stragglers of each kind of collective: for every collective seen on several ranks
 * (same group, op and seq), the rank that entered it last, and how long the others had
 * entered it before. docs/sql.md shows the same query.
 */
static const char straggler_sql[] =
	"WITH a AS (\n"
	"  SELECT grp, op, seq, coalesce(rank, pid) AS rank, start_ns,\n"
	"         max(start_ns) OVER w AS last_start, count(*) OVER w AS ranks\n"
	"  FROM collectives WHERE seq IS NOT NULL\n"
	"  WINDOW w AS (PARTITION BY grp, op, seq)),\n"
	"calls AS (\n"
	"  SELECT grp, op, seq, max(ranks) AS ranks,\n"
	"         min(CASE WHEN start_ns = last_start THEN rank END) AS last_rank,\n"
	"         avg(CASE WHEN start_ns < last_start THEN last_start - start_ns END) AS wait_ns\n"
	"  FROM a WHERE ranks > 1 GROUP BY grp, op, seq)\n"
	"SELECT op, last_rank, count(*) AS times_last,\n"
	"       (SELECT count(*) FROM calls c2 WHERE c2.op = calls.op) AS calls,\n"
	"       round(avg(wait_ns) / 1e6, 1) AS others_wait_ms, max(ranks) AS ranks\n"
	"FROM calls GROUP BY op, last_rank ORDER BY op, times_last DESC, last_rank";

struct summary_ctx {
	struct strbuf *sb;
	char last_op[32];
};

static int summary_row(void *arg, int n, const char *const *v)
{
	struct summary_ctx *s = arg;

	if (n < 6 || !v[0] || !strcmp(s->last_op, v[0]))
		return 0; /* the rank that was last most often, per kind */
	snprintf(s->last_op, sizeof(s->last_op), "%s", v[0]);
	return sb_printf(s->sb,
			 "%s%s over %s ranks: rank %s entered last in %s of %s, the others "
			 "waited %s ms for it on average",
			 s->sb->len ? "\n" : "", v[0], v[5] ? v[5] : "?", v[1] ? v[1] : "?",
			 v[2] ? v[2] : "?", v[3] ? v[3] : "?", v[4] ? v[4] : "?");
}

int collectives__summary(struct collectives *cs, char *buf, size_t size)
{
	struct strbuf sb = {};
	struct summary_ctx s = {.sb = &sb};
	int err;

	buf[0] = '\0';
	if (!cs->rows)
		return 0;
	err = store__select(cs->st, straggler_sql, summary_row, &s);
	if (!err && sb.len)
		snprintf(buf, size, "%s", sb_str(&sb));
	sb_free(&sb);
	return err;
}

struct each_ctx {
	int (*fn)(void *ctx, const struct store_collective *row, bool queued);
	void *ctx;
	bool queued;
};

static int each_call(const void *key, size_t len, uint64_t *value, void *arg)
{
	struct each_ctx *e = arg;
	const struct call *c = (const struct call *)(uintptr_t)*value;

	return c ? e->fn(e->ctx, &c->row, e->queued) : 0;
}

int collectives__under_way(struct collectives *cs,
			   int (*fn)(void *ctx, const struct store_collective *row, bool queued),
			   void *ctx)
{
	struct each_ctx e = {fn, ctx, false};
	int err;

	err = bmap__for_each(cs->pending, each_call, &e);
	e.queued = true;
	return err ?: bmap__for_each(cs->inflight, each_call, &e);
}

static int rewrite_one(void *arg, const struct store_collective *row, bool queued)
{
	struct collectives *cs = arg;

	/* A gloo call before its work is queued has no row yet; a p2p call has one. */
	if (!queued && !row->has_peer)
		return 0;
	return store__collective(cs->st, row);
}

int collectives__rewrite(struct collectives *cs)
{
	return collectives__under_way(cs, rewrite_one, cs);
}

static void swap_i64(int64_t *a, int64_t *b)
{
	int64_t t = *a;

	*a = *b;
	*b = t;
}

/*
 * The @k-th smallest of the @n values @a (0-based, @k < @n), which it reorders (quickselect,
 * with the median of three as the pivot: linear time on the gaps' usual shapes). Asked ten
 * times a second by a watch: a sort of every gap was a measurable part of its CPU.
 */
static int64_t kth_smallest(int64_t *a, unsigned int n, unsigned int k)
{
	unsigned int lo = 0, hi = n - 1, i, j, mid;
	int64_t pivot;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (a[mid] < a[lo])
			swap_i64(&a[mid], &a[lo]);
		if (a[hi] < a[lo])
			swap_i64(&a[hi], &a[lo]);
		if (a[hi] < a[mid])
			swap_i64(&a[hi], &a[mid]);
		pivot = a[mid];
		/* Hoare's partition: a[lo..j] <= pivot <= a[j+1..hi]. */
		i = lo - 1;
		j = hi + 1;
		for (;;) {
			do
				i++;
			while (a[i] < pivot);
			do
				j--;
			while (a[j] > pivot);
			if (i >= j)
				break;
			swap_i64(&a[i], &a[j]);
		}
		if (k <= j)
			hi = j;
		else
			lo = j + 1;
	}
	return a[k];
}

void collectives__progress(const struct collectives *cs, struct coll_progress *out)
{
	int64_t g[COLL_GAPS], max;
	unsigned int n = cs->ngaps < COLL_GAPS ? cs->ngaps : COLL_GAPS, i;

	memset(out, 0, sizeof(*out));
	out->completed = cs->completed;
	out->last_done_ns = cs->last_done_ns;
	out->gaps = n;
	if (!n)
		return;
	memcpy(g, cs->gaps, n * sizeof(*g));
	for (max = g[0], i = 1; i < n; i++)
		if (g[i] > max)
			max = g[i];
	out->median_gap_ns = kth_smallest(g, n, n / 2);
	out->max_gap_ns = max;
}

int64_t collectives__last_done(const struct collectives *cs, pid_t pid)
{
	uint32_t k = pid;
	uint64_t *v = bmap__find(cs->last_done, &k, sizeof(k));

	return v ? (int64_t)*v : 0;
}
