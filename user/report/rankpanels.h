/* SPDX-License-Identifier: MIT */
/*
 * rankpanels: the flame graphs of a distributed job's ranks side by side (flamegraph --by
 * rank): one call tree per rank, from a loaded profile, in rank order, then one for the
 * processes without a rank if they have samples; each headed "rank 3 (pid 1234)" with its
 * samples, and the late rank (the one that entered most collectives last), else the rank
 * furthest from the median (profile__rank_deviation), flagged with the function where it
 * spends its extra time and how often it was last.
 */
#ifndef PROBING_RANKPANELS_H
#define PROBING_RANKPANELS_H

#include <stddef.h>

#include "base/util.h"
#include "report/flamegraph.h"
#include "report/profile.h"

struct rankpanels {
	struct fg_panel *panels; /* n of them: for fg__svg_panels */
	size_t n;
	int *ranks;    /* each panel's rank; -1: the processes without a rank */
	size_t nranks; /* panels of ranks (the others: the processes without one) */
	int flagged;   /* the rank flagged as the most different, or -1 */
	const struct profile_rank_deviation *flag; /* its row, or NULL */
};

/*
 * Build the panels of @p's samples; @dev (@ndev rows, most deviating first, may be NULL)
 * names the rank to flag: the first, if it is the late rank (it entered most collectives
 * last), or if there are three ranks or more (with two, the median is their mean and they
 * differ from it equally) and it exceeds the median somewhere.
 * Return 0, -ENODATA (no sample of a process with a rank: nothing is built) or -ENOMEM.
 * Free with rankpanels__free.
 */
int rankpanels__build(const struct profile *p, const struct profile_rank_deviation *dev,
		      size_t ndev, struct rankpanels *out);

/* Free what rankpanels__build made (the deviation rows stay the caller's). */
void rankpanels__free(struct rankpanels *rp);

/*
 * Append every panel's folded stacks (fg__folded), each line led by its panel as a frame,
 * "rank 3;root;...;leaf COUNT" ("no rank;..." for the processes without one), panels in
 * order. Return 0 or -ENOMEM.
 */
int rankpanels__folded(const struct rankpanels *rp, struct strbuf *out);

#endif
