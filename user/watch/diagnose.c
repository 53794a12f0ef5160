// SPDX-License-Identifier: MIT
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/escape.h"
#include "base/util.h"
#include "watch/diagnose.h"

const char *diagnose_kind_name(enum dg_kind k)
{
	switch (k) {
	case DG_CULPRIT:
		return "culprit";
	case DG_MISMATCH:
		return "mismatch";
	case DG_ALL_WAIT:
		return "all-waiting";
	case DG_DEAD:
		return "dead-rank";
	case DG_NO_PROGRESS:
		return "no-progress";
	default:
		return "none";
	}
}

const char *diagnose_exit_str(int status, char *buf, size_t size)
{
	const char *name;

	if (WIFSIGNALED(status)) {
		name = sigabbrev_np(WTERMSIG(status));
		snprintf(buf, size, "killed by %s%s%s", name ? "SIG" : "signal ", name ? name : "",
			 WCOREDUMP(status) ? " (core dumped)" : "");
		if (!name)
			snprintf(buf, size, "killed by signal %d%s", WTERMSIG(status),
				 WCOREDUMP(status) ? " (core dumped)" : "");
	} else if (WEXITSTATUS(status)) {
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
	} else {
		snprintf(buf, size, "exited normally");
	}
	return buf;
}

/* Append to the result's text (cut, never overflowing). */
static void say(struct dg_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct dg_result *out, const char *fmt, ...)
{
	size_t len = strlen(out->text);
	va_list ap;

	if (len + 1 >= sizeof(out->text))
		return;
	va_start(ap, fmt);
	vsnprintf(out->text + len, sizeof(out->text) - len, fmt, ap);
	va_end(ap);
}

/* Seconds for people: "0.4", "12", "312". */
static const char *secs(double s, char *buf, size_t size)
{
	if (s < 0)
		s = 0;
	snprintf(buf, size, s < 10 ? "%.1f" : "%.0f", s);
	return buf;
}

/* "hang_here (train.py:42)", escaped; "an unknown place" when the snapshot had nothing. */
static const char *where(const struct dg_rank *r, char *buf, size_t size)
{
	struct strbuf a = {0}, b = {0};

	if (!r->func[0])
		snprintf(buf, size, "an unknown place (its stack could not be read)");
	else if (r->file[0] && r->line > 0)
		snprintf(buf, size, "%s (%s:%d)", text_str(&a, r->func, 0),
			 text_str(&b, r->file, 0), r->line);
	else if (r->file[0])
		snprintf(buf, size, "%s (%s)", text_str(&a, r->func, 0), text_str(&b, r->file, 0));
	else
		snprintf(buf, size, "%s", text_str(&a, r->func, 0));
	sb_free(&a);
	sb_free(&b);
	return buf;
}

/* "; its locals there: shard='x', step=20" (escaped), or "". */
static const char *locals_of(const struct dg_rank *r, char *buf, size_t size)
{
	struct strbuf e = {0};

	if (r->locals[0])
		snprintf(buf, size, "; its locals there: %s", text_str(&e, r->locals, 0));
	else
		buf[0] = '\0';
	sb_free(&e);
	return buf;
}

/* ", running on a CPU (spinning or computing)" / ", blocked in futex (lock)". */
static const char *how(const struct dg_rank *r, char *buf, size_t size)
{
	if (r->state == 'R')
		snprintf(buf, size, ", running on a CPU (spinning or computing, not waiting)");
	else if (r->wait[0])
		snprintf(buf, size, ", blocked %s", r->wait);
	else if (r->state)
		snprintf(buf, size, ", blocked (state %c)", r->state);
	else
		buf[0] = '\0';
	return buf;
}

static bool same_call(const struct dg_rank *a, const struct dg_rank *b)
{
	return a->seq == b->seq && !strcmp(a->op, b->op) && !strcmp(a->grp, b->grp);
}

/* " seq 12 of group 0" (what is known). */
static const char *call_id(const struct dg_rank *r, char *buf, size_t size)
{
	struct strbuf g = {0};
	int n = 0;

	buf[0] = '\0';
	if (r->seq >= 0)
		n = snprintf(buf, size, " seq %lld", (long long)r->seq);
	if (r->grp[0] && n >= 0 && (size_t)n < size)
		snprintf(buf + n, size - n, " of group %s", text_str(&g, r->grp, 0));
	sb_free(&g);
	return buf;
}

/* The ranks of @in that are in the same call as @lead: "rank 0 (pid 11), rank 2 (pid 13)". */
static void list_call(struct dg_result *out, const struct dg_input *in, const struct dg_rank *lead)
{
	int i, k = 0;

	for (i = 0; i < in->n; i++)
		if (!in->r[i].dead && in->r[i].in_coll && same_call(&in->r[i], lead))
			say(out, "%s%s", k++ ? ", " : "", in->r[i].label);
}

/* One line per distinct call the living ranks wait in: "the other 3 ranks wait in ...". */
static void waiters(struct dg_result *out, const struct dg_input *in, const char *who)
{
	char a[32], b[96];
	int i, j, n;

	for (i = 0; i < in->n; i++) {
		const struct dg_rank *r = &in->r[i];
		double first = r->entered;
		bool seen = false;

		if (r->dead || !r->in_coll)
			continue;
		for (j = 0; j < i && !seen; j++)
			seen = !in->r[j].dead && in->r[j].in_coll && same_call(&in->r[j], r);
		if (seen)
			continue;
		for (j = n = 0; j < in->n; j++)
			if (!in->r[j].dead && in->r[j].in_coll && same_call(&in->r[j], r)) {
				n++;
				if (in->r[j].entered < first)
					first = in->r[j].entered;
			}
		say(out, "%s %d rank%s wait%s in %s%s, entered %s s ago: ", who, n,
		    n == 1 ? "" : "s", n == 1 ? "s" : "", r->op, call_id(r, b, sizeof(b)),
		    secs(in->now - first, a, sizeof(a)));
		list_call(out, in, r);
		say(out, "\n");
	}
}

/* How long @r has been away from collectives: since its last completion, else since the
 * others entered theirs. */
static double away(const struct dg_input *in, const struct dg_rank *r)
{
	double since = r->last_done;
	int i;

	if (since > 0)
		return in->now - since;
	for (i = 0; i < in->n; i++)
		if (in->r[i].in_coll && (since <= 0 || in->r[i].entered < since))
			since = in->r[i].entered;
	return since > 0 ? in->now - since : 0;
}

void diagnose(const struct dg_input *in, struct dg_result *out)
{
	int i, alive = 0, in_coll = 0, dead = 0, distinct = 0, ranks_here = 0;
	const struct dg_rank *first = NULL;
	char a[32], w[512], h[160], e[96], c[96], l[1100];

	memset(out, 0, sizeof(*out));
	for (i = 0; i < in->n; i++) {
		const struct dg_rank *r = &in->r[i];

		if (r->rank >= 0)
			ranks_here++;
		if (r->dead) {
			if (r->status)
				dead++;
			continue;
		}
		alive++;
		if (!r->in_coll)
			continue;
		in_coll++;
		if (!first) {
			first = r;
			distinct = 1;
		} else if (!same_call(first, r)) {
			distinct = 2;
		}
	}

	if (dead) {
		const struct dg_rank *earliest = NULL;

		out->kind = DG_DEAD;
		/* The first to die: a launcher kills the others after it. */
		for (i = 0; i < in->n; i++)
			if (in->r[i].dead && in->r[i].status &&
			    (!earliest || in->r[i].exit_ts < earliest->exit_ts))
				earliest = &in->r[i];
		out->culprit = earliest->pid;
		out->culprit_rank = earliest->rank;
		for (i = 0; i < in->n; i++) {
			const struct dg_rank *r = &in->r[i];

			if (!r->dead || !r->status)
				continue;
			say(out, "%s died: %s, %s s ago\n", r->label,
			    diagnose_exit_str(r->status, e, sizeof(e)),
			    secs(in->now - r->exit_ts, a, sizeof(a)));
		}
		waiters(out, in, "the other");
		for (i = 0; i < in->n; i++)
			if (!in->r[i].dead && !in->r[i].in_coll)
				say(out, "%s is in %s%s\n", in->r[i].label,
				    where(&in->r[i], w, sizeof(w)), how(&in->r[i], h, sizeof(h)));
		return;
	}
	if (in_coll && in_coll < alive) {
		out->kind = DG_CULPRIT;
		for (i = 0; i < in->n; i++) {
			const struct dg_rank *r = &in->r[i];

			if (r->dead || r->in_coll)
				continue;
			if (!out->culprit) {
				out->culprit = r->pid;
				out->culprit_rank = r->rank;
			}
			say(out, "%s has been in %s for %s s%s%s\n", r->label,
			    where(r, w, sizeof(w)), secs(away(in, r), a, sizeof(a)),
			    how(r, h, sizeof(h)), locals_of(r, l, sizeof(l)));
		}
		waiters(out, in, "the other");
		return;
	}
	if (in_coll && distinct > 1) {
		out->kind = DG_MISMATCH;
		say(out, "a mismatch: the ranks are in different collectives, each waiting for the "
			 "others to enter its own:\n");
		waiters(out, in, "  ");
		for (i = 0; i < in->n; i++)
			if (!in->r[i].dead && in->r[i].in_coll) {
				say(out, "%s calls %s%s from %s\n", in->r[i].label, in->r[i].op,
				    call_id(&in->r[i], c, sizeof(c)),
				    where(&in->r[i], w, sizeof(w)));
			}
		return;
	}
	if (in_coll) {
		out->kind = DG_ALL_WAIT;
		waiters(out, in, in->nodes > 1 ? "every rank of these nodes:" : "every rank here:");
		if (in->world_size > 0 && ranks_here < in->world_size && in->nodes > 1)
			say(out,
			    "the ranks they wait for are on none of these %d nodes (world size %d, "
			    "%d in their reports): merge the other nodes' watch reports too\n",
			    in->nodes, in->world_size, ranks_here);
		else if (in->world_size > 0 && ranks_here < in->world_size)
			say(out,
			    "the ranks they wait for are not on this node (world size %d, %d "
			    "here): look at the other nodes' watch reports ('probing merge')\n",
			    in->world_size, ranks_here);
		else
			say(out,
			    "every rank entered it and none completes: the transport (network, "
			    "gloo or NCCL) or a rank's communication thread\n");
		return;
	}
	if (alive) {
		out->kind = DG_NO_PROGRESS;
		say(out, "no rank is in a collective:\n");
		for (i = 0; i < in->n; i++)
			if (!in->r[i].dead)
				say(out, "%s has been in %s for %s s%s%s\n", in->r[i].label,
				    where(&in->r[i], w, sizeof(w)),
				    secs(away(in, &in->r[i]), a, sizeof(a)),
				    how(&in->r[i], h, sizeof(h)),
				    locals_of(&in->r[i], l, sizeof(l)));
	}
}
