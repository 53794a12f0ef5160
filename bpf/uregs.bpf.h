/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * A thread's user registers, where its stack ends and a copy of its stack, for BPF programs
 * that send a stack to userspace: the sampler and the collectives probes (the current task,
 * through uctx.bpf.h), the off-CPU fetcher (a task of another process), and the Python
 * walker's reads (pystack.bpf.h). For inclusion after vmlinux.h, bpf_core_read.h and
 * sampler.h.
 *
 * User memory is read with bpf_probe_read_user, which reads the address space loaded on the
 * CPU: the current thread's, or a blocked thread's from a thread of the same process. A
 * sleepable program that reads a thread of another process (the off-CPU stack fetcher)
 * defines UREAD_TASK before including this file: reads then go through
 * bpf_copy_from_user_task on the task given.
 */
#ifndef PROBING_UREGS_BPF_H
#define PROBING_UREGS_BPF_H

#ifdef UREAD_TASK
#define user_read(task, dst, n, src) bpf_copy_from_user_task(dst, n, src, task, 0)
#else
#define user_read(task, dst, n, src) bpf_probe_read_user(dst, n, src)
#endif

/* Sizes of a stack copy area (powers of two, so masks bound offsets for the verifier). */
#define UCTX_STACK_AREA 0x10000 /* >= SAMPLER_MAX_STACK */
#define UCTX_CHUNK_MAX	0x2000	/* a read never exceeds this; slack behind UCTX_STACK_AREA */
#define UCTX_PAGE	4096

_Static_assert(SAMPLER_MAX_STACK <= UCTX_STACK_AREA, "UCTX_STACK_AREA too small");

/* Copy pt_regs into the DWARF-ordered array libdw wants. */
static __always_inline void copy_regs(__u64 *r, const struct pt_regs *p)
{
	r[DWREG_RAX] = p->ax;
	r[DWREG_RDX] = p->dx;
	r[DWREG_RCX] = p->cx;
	r[DWREG_RBX] = p->bx;
	r[DWREG_RSI] = p->si;
	r[DWREG_RDI] = p->di;
	r[DWREG_RBP] = p->bp;
	r[DWREG_RSP] = p->sp;
	r[DWREG_R8] = p->r8;
	r[DWREG_R9] = p->r9;
	r[DWREG_R10] = p->r10;
	r[DWREG_R11] = p->r11;
	r[DWREG_R12] = p->r12;
	r[DWREG_R13] = p->r13;
	r[DWREG_R14] = p->r14;
	r[DWREG_R15] = p->r15;
	r[DWREG_RIP] = p->ip;
}

/*
 * The user registers @p of a thread into @r, or with none (a kernel thread, a thread stopped in
 * the kernel without them) zeros and SAMPLE_F_NO_USER_REGS in *@flags.
 */
static __always_inline void user_regs(__u64 *r, const struct pt_regs *p, __u32 *flags)
{
	if (!p || (p->cs & 3) != 3) {
		*flags |= SAMPLE_F_NO_USER_REGS;
		__builtin_memset(r, 0, sizeof(__u64) * DWREG_COUNT);
	} else {
		copy_regs(r, p);
	}
}

/*
 * Where the thread's stack ends (exclusive): nothing above it is a frame of the thread, so
 * the copy can stop there. The main thread: just above argc, where the kernel started the
 * program (mm->start_stack). Other threads (glibc): the thread control block the fs base
 * points to, which glibc puts right above the thread's stack, in the same mapping. 0 when
 * that does not hold for @sp (another stack: sigaltstack, a coroutine, a foreign runtime).
 */
static __always_inline __u64 stack_top(struct task_struct *task, __u32 tgid, __u32 tid,
				       __u64 fsbase, __u64 sp)
{
	__u64 top = fsbase;

	if (tid == tgid)
		top = BPF_CORE_READ(task, mm, start_stack) + 8;
	return top > sp && top - sp <= SAMPLER_MAX_STACK ? top : 0;
}

struct stack_copy {
	struct task_struct *task; /* whose stack (UREAD_TASK) */
	__u8 *dst;
	__u64 sp;
	__u32 want, off, flags;
};

/* One page (or the part of one from sp on): the bpf_loop callback. Returns 1 to stop. */
static long copy_stack_page(__u32 i, void *arg)
{
	struct stack_copy *c = arg;
	__u32 chunk = UCTX_PAGE - ((c->sp + c->off) & (UCTX_PAGE - 1));

	if (c->off >= c->want)
		return 1;
	if (chunk > c->want - c->off)
		chunk = c->want - c->off;
	chunk &= UCTX_CHUNK_MAX - 1;
	if (user_read(c->task, c->dst + (c->off & (UCTX_STACK_AREA - 1)), chunk,
		      (const void *)(c->sp + c->off))) {
		c->flags |= SAMPLE_F_STACK_SHORT;
		return 1;
	}
	c->off += chunk;
	return 0;
}

/*
 * Copy the user stack of @task (the current one unless UREAD_TASK; may be NULL then) from @sp
 * up to @top (0: unknown), at most @max bytes (a multiple of 8), into @dst (UCTX_STACK_AREA +
 * UCTX_CHUNK_MAX bytes), a page at a time so that a stack ending early (its top is the end of
 * the mapping) still yields what is readable (SAMPLE_F_STACK_SHORT in *@flags when a read
 * fails). Shallow stacks cost only what they use. Returns the number of bytes copied (a
 * multiple of 8).
 */
static __always_inline __u32 copy_user_stack(struct task_struct *task, __u8 *dst, __u64 sp,
					     __u64 top, __u32 max, __u32 *flags)
{
	struct stack_copy c = {.task = task, .dst = dst, .sp = sp, .want = max};

	if (c.want > SAMPLER_MAX_STACK)
		c.want = SAMPLER_MAX_STACK;
	if (top && top - sp <= c.want)
		c.want = (top - sp + 7) & ~7u;
	/* The verifier checks the callback once; an unrolled loop with a bound known only at
	 * run time took it up to a second per load. */
	bpf_loop(SAMPLER_MAX_STACK / UCTX_PAGE + 1, copy_stack_page, &c, 0);
	*flags |= c.flags;
	return c.off & ~7u;
}

#endif /* PROBING_UREGS_BPF_H */
