// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "record/stacksites.h"

struct stacksites {
	struct bmap *by_id;  /* site id -> struct stack_site * (0 once forgotten) */
	struct bmap *by_key; /* struct site_key (with its variant) -> a site's id */
	struct bmap *seen;   /* struct site_key asked about (stacksites__seen) */
	uint64_t next_id;
	size_t max, live; /* the limit (0: none), sites allocated */
	pid_t forgetting; /* stacksites__forget's pid, for its callback */
};

/* @k (its variant 0) as its @variant (sampler.h: SITE_VARIANTS). */
static struct site_key variant_key(const struct site_key *k, uint32_t variant)
{
	struct site_key vk = *k;

	vk.variant = variant;
	return vk;
}

struct stacksites *stacksites__new(size_t max)
{
	struct stacksites *ss = calloc(1, sizeof(*ss));

	if (!ss)
		return NULL;
	ss->max = max;
	ss->by_id = bmap__new();
	ss->by_key = bmap__new();
	ss->seen = bmap__new();
	if (!ss->by_id || !ss->by_key || !ss->seen) {
		stacksites__free(ss);
		errno = ENOMEM;
		return NULL;
	}
	return ss;
}

/* Free every site and forget every key; ids keep counting up (the probes may hold old ones). */
static void clear(struct stacksites *ss)
{
	bmap__free_values(ss->by_id);
	bmap__clear(ss->by_id);
	bmap__clear(ss->by_key);
	bmap__clear(ss->seen);
	ss->live = 0;
}

void stacksites__free(struct stacksites *ss)
{
	if (!ss)
		return;
	bmap__free_values(ss->by_id);
	bmap__free(ss->by_id);
	bmap__free(ss->by_key);
	bmap__free(ss->seen);
	free(ss);
}

const struct stack_site *stacksites__by_id(const struct stacksites *ss, uint64_t id)
{
	uint64_t *slot = bmap__find(ss->by_id, &id, sizeof(id));

	return slot ? (const void *)(uintptr_t)*slot : NULL;
}

/* Whether every check of @site holds on @regs and the copy @stack of @stack_len bytes. */
static bool checks_hold(const struct stack_site *site, const uint64_t *regs, const uint8_t *stack,
			size_t stack_len)
{
	uint32_t i, off;
	uint64_t v;

	for (i = 0; i < site->chk.n; i++) {
		off = site->chk.off[i];
		if (off & SITE_CHECK_REG) {
			if ((off & 0xff) >= DWREG_COUNT)
				return false;
			v = regs[off & 0xff];
		} else if (off + 8ull <= stack_len) {
			memcpy(&v, stack + off, 8);
		} else {
			return false;
		}
		if (v != site->chk.val[i])
			return false;
	}
	return true;
}

const struct stack_site *stacksites__match(const struct stacksites *ss, const struct site_key *k,
					   const uint64_t *regs, const uint8_t *stack,
					   size_t stack_len)
{
	const struct stack_site *site;
	struct site_key vk;
	uint64_t *id;
	uint32_t v;

	for (v = 0; v < SITE_VARIANTS; v++) {
		vk = variant_key(k, v);
		id = bmap__find(ss->by_key, &vk, sizeof(vk));
		site = id ? stacksites__by_id(ss, *id) : NULL;
		if (site && site->pid == (pid_t)k->pid && checks_hold(site, regs, stack, stack_len))
			return site;
	}
	return NULL;
}

/*
 * The variant of @k a new site takes: the first free one, else the one of the oldest site
 * (the lowest id; one forgotten counts as free).
 */
static uint32_t free_variant(const struct stacksites *ss, const struct site_key *k)
{
	uint64_t *id, oldest = UINT64_MAX;
	struct site_key vk;
	uint32_t v, pick = 0;

	for (v = 0; v < SITE_VARIANTS; v++) {
		vk = variant_key(k, v);
		id = bmap__find(ss->by_key, &vk, sizeof(vk));
		if (!id || !stacksites__by_id(ss, *id))
			return v;
		if (*id < oldest) {
			oldest = *id;
			pick = v;
		}
	}
	return pick;
}

const struct stack_site *stacksites__learn(struct stacksites *ss, const struct site_key *k,
					   struct dwproc *dp, const uint64_t *regs,
					   const void *stack, size_t stack_len,
					   const struct dwproc_frame *nat, int nnat,
					   const struct pym_frame *f, int nn)
{
	struct stack_site *site;
	struct site_key vk;
	uint64_t *slot, *kslot;
	int n, i;

	_Static_assert(DWPROC_CHECK_REG == SITE_CHECK_REG, "check of a register");
	if (nn <= 0 || nnat <= 0)
		return NULL;
	site = calloc(1, sizeof(*site) + sizeof(site->f[0]) * nn);
	if (!site)
		return NULL;
	n = dwproc__unwind_checks(dp, k->tid, regs, stack, stack_len, nat, nnat, true,
				  site->chk.off, (uint64_t *)site->chk.val, SITE_CHECKS);
	if (n <= 0)
		goto fail;
	if (ss->max && ss->live >= ss->max)
		clear(ss);
	vk = variant_key(k, free_variant(ss, k));
	kslot = bmap__upsert(ss->by_key, &vk, sizeof(vk), 0, NULL);
	slot = kslot ? bmap__upsert(ss->by_id, &(uint64_t){ss->next_id + 1}, sizeof(uint64_t), 0,
				    NULL)
		     : NULL;
	if (!slot)
		goto fail;
	site->pid = k->pid;
	site->variant = vk.variant;
	site->nn = nn;
	memcpy(site->f, f, sizeof(site->f[0]) * nn);
	site->chk.id = ++ss->next_id;
	site->chk.n = n;
	for (i = 0; i < n; i++)
		if (!(site->chk.off[i] & SITE_CHECK_REG) && site->chk.off[i] + 8 > site->chk.span)
			site->chk.span = site->chk.off[i] + 8;
	*slot = (uintptr_t)site;
	*kslot = site->chk.id;
	ss->live++;
	return site;
fail:
	free(site);
	return NULL;
}

bool stacksites__seen(struct stacksites *ss, const struct site_key *k)
{
	int inserted = 0;

	/* Keys of threads that stop in ever new places: bounded as the sites are. */
	if (ss->max && bmap__size(ss->seen) >= 4 * ss->max)
		clear(ss);
	return bmap__upsert(ss->seen, k, sizeof(*k), 1, &inserted) && !inserted;
}

static int forget_pid(const void *key, size_t len, uint64_t *value, void *arg)
{
	struct stack_site *site = (struct stack_site *)(uintptr_t)*value;
	struct stacksites *ss = arg;

	if (site && site->pid == ss->forgetting) {
		free(site);
		*value = 0;
		ss->live--;
	}
	return 0;
}

void stacksites__forget(struct stacksites *ss, pid_t pid)
{
	ss->forgetting = pid;
	bmap__for_each(ss->by_id, forget_pid, ss);
}

size_t stacksites__count(const struct stacksites *ss)
{
	return ss->live;
}
