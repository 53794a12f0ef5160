/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * A thread's user registers and where its stack ends, for BPF programs that send a stack to
 * userspace: uctx.bpf.h (the current task) and offcpu_iter.bpf.c (a task of an iterator).
 * For inclusion after vmlinux.h, bpf_core_read.h and sampler.h.
 */
#ifndef PROBING_UREGS_BPF_H
#define PROBING_UREGS_BPF_H

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

#endif /* PROBING_UREGS_BPF_H */
