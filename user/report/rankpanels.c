// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/escape.h"
#include "base/jobinfo.h"
#include "report/rankpanels.h"

/* What the samples of one panel's processes add up to. */
struct tally {
	int rank;      /* -1: the processes without a rank */
	pid_t top_pid; /* its process with the most samples */
	uint64_t top_samples, samples;
	int npids;
	const char *host;
};

static int cmp_tally(const void *a, const void *b)
{
	const struct tally *x = a, *y = b;

	/* Ranks in order; the processes without a rank (-1) last. */
	if ((x->rank < 0) != (y->rank < 0))
		return x->rank < 0 ? 1 : -1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Per-process sample counts of @p (its samples are sorted by pid). */
static int tally_ranks(const struct profile *p, struct tally **out, size_t *n, bool *hosts)
{
	struct tally *t = NULL, *tmp;
	const struct profile_process *pr;
	const char *host0 = NULL;
	size_t i, k, cap = 0, nt = 0;
	uint64_t count;
	int rank;
	pid_t pid;

	*hosts = false;
	for (i = 0; i < p->nsamples; i = k) {
		pid = p->samples[i].pid;
		for (count = 0, k = i; k < p->nsamples && p->samples[k].pid == pid; k++)
			count += p->samples[k].count;
		pr = profile__process(p, pid);
		rank = pr ? pr->rank : -1;
		if (pr && pr->host) {
			if (host0 && strcmp(host0, pr->host))
				*hosts = true;
			host0 = host0 ? host0 : pr->host;
		}
		for (tmp = t; tmp < t + nt && tmp->rank != rank; tmp++)
			;
		if (tmp == t + nt) {
			if (grow_array(&t, &cap, nt + 1, sizeof(*t))) {
				free(t);
				return -ENOMEM;
			}
			tmp = &t[nt++];
			memset(tmp, 0, sizeof(*tmp));
			tmp->rank = rank;
		}
		tmp->samples += count;
		tmp->npids++;
		if (count > tmp->top_samples) {
			tmp->top_samples = count;
			tmp->top_pid = pid;
			tmp->host = pr ? pr->host : NULL;
		}
	}
	qsort(t, nt, sizeof(*t), cmp_tally);
	*out = t;
	*n = nt;
	return 0;
}

/*
 * "rank 3 (pid 1234)", "rank 3 (pid 1234 on node2 and 2 more processes)", "no rank (...)",
 * escaped for display (the host name is the recording's text).
 */
static char *panel_label(const struct tally *t, bool with_host)
{
	struct job_identity j = {0};
	struct strbuf sb = {0};
	char buf[160], *s = NULL, *paren;

	jobinfo_free(&j); /* all unknown */
	j.rank = t->rank;
	if (t->host)
		snprintf(j.host, sizeof(j.host), "%s", t->host);
	jobinfo_label(&j, t->top_pid, with_host, buf, sizeof(buf));
	if (t->rank < 0 && asprintf(&s, "no rank (%s)", buf) < 0)
		return NULL;
	if (s)
		snprintf(buf, sizeof(buf), "%s", s);
	free(s);
	s = NULL;
	paren = strrchr(buf, ')');
	if (t->npids > 1 && paren &&
	    asprintf(&s, "%.*s and %d more process%s)", (int)(paren - buf), buf, t->npids - 1,
		     t->npids == 2 ? "" : "es") < 0)
		return NULL;
	if (text_escape(&sb, s ? s : buf, strlen(s ? s : buf), 0)) {
		sb_free(&sb);
		sb.buf = NULL;
	}
	free(s);
	return sb.buf;
}

/*
 * "1,234 samples", and for the flagged rank where it differs and, if it is the late rank, how
 * often it entered a collective last. Escaped for display. A late rank of an on-CPU recording
 * is not late by its CPU time: the function is left out, --off-cpu is named instead.
 */
static char *panel_note(const struct profile *p, const struct tally *t,
			const struct profile_rank_deviation *flag)
{
	struct strbuf sb = {0}, name = {0};
	const char *base;
	char cnt[32];
	int err;

	fmt_thousands(cnt, sizeof(cnt), t->samples);
	err = sb_printf(&sb, "%s sample%s", cnt, t->samples == 1 ? "" : "s");
	if (!err && flag && flag->late)
		err = sb_printf(&sb,
				" \xc2\xb7 entered last in %" PRIu64 " of %" PRIu64
				" collectives (the others waited %.1f ms)",
				flag->entered_last, flag->collectives, flag->others_wait_ms);
	if (!err && flag && flag->late && !p->wall)
		err = sb_puts(&sb, " \xc2\xb7 its late time is off its CPU: record with "
				   "--off-cpu to see where it goes");
	if (!err && flag && flag->func && (p->wall || !flag->late)) {
		err = text_escape(&name, flag->func, strlen(flag->func), 0);
		base = flag->file ? strrchr(flag->file, '/') : NULL;
		base = base ? base + 1 : flag->file;
		if (!err && base && flag->kind == FRAME_PYTHON)
			err = sb_puts(&name, " (") ?: text_escape(&name, base, strlen(base), 0)
							  ?: sb_puts(&name, ")");
		err = err
			      ?: sb_printf(&sb, " \xc2\xb7 %s: %.0f%%, median rank %.0f%%",
					   sb_str(&name), 100 * flag->share,
					   100 * flag->median_share);
	}
	sb_free(&name);
	if (err) {
		sb_free(&sb);
		return NULL;
	}
	return sb.buf;
}

int rankpanels__build(const struct profile *p, const struct profile_rank_deviation *dev,
		      size_t ndev, struct rankpanels *out)
{
	struct tally *t = NULL;
	size_t i, n = 0;
	bool hosts;
	int err;

	memset(out, 0, sizeof(*out));
	out->flagged = -1;
	err = tally_ranks(p, &t, &n, &hosts);
	if (err)
		return err;
	for (i = 0; i < n; i++)
		out->nranks += t[i].rank >= 0;
	if (!out->nranks) {
		free(t);
		return -ENODATA;
	}
	if (dev && ndev &&
	    (dev[0].late || (out->nranks >= 3 && dev[0].func && dev[0].deviation > 0))) {
		out->flagged = dev[0].rank;
		out->flag = &dev[0];
	}
	out->panels = calloc(n, sizeof(*out->panels));
	out->ranks = calloc(n, sizeof(*out->ranks));
	if (!out->panels || !out->ranks)
		goto nomem;
	for (i = 0; i < n; i++, out->n++) {
		struct fg_panel *pn = &out->panels[i];
		bool flagged = t[i].rank >= 0 && t[i].rank == out->flagged;

		out->ranks[i] = t[i].rank;
		pn->flagged = flagged;
		pn->g = fg__new();
		pn->label = panel_label(&t[i], hosts);
		pn->note = panel_note(p, &t[i], flagged ? out->flag : NULL);
		if (!pn->g || !pn->label || !pn->note || fg__add_profile_rank(pn->g, p, t[i].rank))
			goto nomem_panel;
	}
	free(t);
	return 0;
nomem_panel:
	out->n++; /* free it too */
nomem:
	free(t);
	rankpanels__free(out);
	return -ENOMEM;
}

void rankpanels__free(struct rankpanels *rp)
{
	size_t i;

	if (!rp)
		return;
	for (i = 0; rp->panels && i < rp->n; i++) {
		fg__free(rp->panels[i].g);
		free((char *)rp->panels[i].label);
		free((char *)rp->panels[i].note);
	}
	free(rp->panels);
	free(rp->ranks);
	memset(rp, 0, sizeof(*rp));
	rp->flagged = -1;
}

int rankpanels__folded(const struct rankpanels *rp, struct strbuf *out)
{
	struct strbuf lines = {0};
	char lead[32];
	const char *line, *nl;
	size_t i;
	int err = 0;

	for (i = 0; !err && i < rp->n; i++) {
		if (rp->ranks[i] >= 0)
			snprintf(lead, sizeof(lead), "rank %d;", rp->ranks[i]);
		else
			snprintf(lead, sizeof(lead), "no rank;");
		sb_reset(&lines);
		err = fg__folded(rp->panels[i].g, &lines);
		for (line = sb_str(&lines); !err && *line; line = nl + 1) {
			nl = strchr(line, '\n');
			if (!nl)
				break;
			err = sb_puts(out, lead) ?: sb_append(out, line, nl + 1 - line);
		}
	}
	sb_free(&lines);
	return err;
}
