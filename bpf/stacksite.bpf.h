/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * Whether a thread stopped at a known stack site (sampler.h: struct site_key, struct
 * site_checks): every word and register its checks name holds the value userspace saw when it
 * unwound the site. Shared by the collectives' probes (comm.bpf.c, map comm_sites) and the
 * off-CPU blocks' stacks (sampler.bpf.c, map block_sites). For inclusion where the program
 * defines SITE_COPY_MAX (a power of two): the most bytes of stack copied at once for the checks
 * (a longer span is read word by word).
 */
#ifndef PROBING_STACKSITE_BPF_H
#define PROBING_STACKSITE_BPF_H

struct site_check {
	const struct site_checks *site;
	const __u64 *regs;
	const __u8 *copy; /* the site's span of the stack, copied (NULL: read word by word) */
	__u64 sp;
	__u32 done;
};

/* One check of a site (the bpf_loop callback). Returns 1 to stop. */
static long check_site_word(__u32 i, void *arg)
{
	struct site_check *c = arg;
	__u32 off, k = i & (SITE_CHECKS - 1);
	__u64 v = 0;

	if (i >= c->site->n)
		return 1;
	off = c->site->off[k];
	if (off & SITE_CHECK_REG) {
		if ((off & 0xff) >= DWREG_COUNT)
			return 1;
		v = c->regs[off & 0xff];
	} else if (c->copy) {
		if (off > c->site->span - 8)
			return 1;
		v = *(const __u64 *)(c->copy + (off & (SITE_COPY_MAX - 1)));
	} else if (bpf_probe_read_user(&v, sizeof(v), (const void *)(c->sp + off))) {
		return 1;
	}
	if (v != c->site->val[k])
		return 1;
	c->done = i + 1;
	return 0;
}

/*
 * @site's id if every one of its checks holds on @regs (DWREG_COUNT of them) and the stack at
 * @sp (the current task's memory); 0 otherwise, or for a NULL @site. @buf (SITE_COPY_MAX + 8
 * bytes) takes the stack words checked, read at once where they fit (one read is cheaper than
 * many).
 */
static __always_inline __u64 site_holds(const struct site_checks *site, const __u64 *regs, __u64 sp,
					__u8 *buf)
{
	struct site_check c = {.site = site, .regs = regs, .sp = sp};
	__u32 n, span;

	if (!site)
		return 0;
	n = site->n;
	if (!n || n > SITE_CHECKS)
		return 0;
	span = site->span;
	if (span >= 8 && span <= SITE_COPY_MAX) {
		if (bpf_probe_read_user(buf, span, (const void *)sp))
			return 0;
		c.copy = buf;
	}
	bpf_loop(SITE_CHECKS, check_site_word, &c, 0);
	return c.done == n ? site->id : 0;
}

#endif
