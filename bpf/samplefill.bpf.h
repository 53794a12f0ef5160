/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The stacks of a sample (sampler.h: struct sample_event, then Python frames, kernel stack
 * and user stack copy), filled the same way by the programs that send one: the on-CPU
 * sampler and the off-CPU sweep (sampler.bpf.c) and the off-CPU stack fetcher
 * (offcpu_fetch.bpf.c). For inclusion after pystack.bpf.h, where the program defines
 * PY_AREA (a power of two, the Python frames and kernel stack area), the map py_procs and
 * the load-time settings want_python, want_kernel and stack_size.
 */
#ifndef PROBING_SAMPLEFILL_BPF_H
#define PROBING_SAMPLEFILL_BPF_H

/*
 * The Python frames of @e's thread (pid, fsbase set) into @data, when its process runs
 * CPython (py_procs) and they are wanted: py_len, py_status and flags set. @remote: NULL for
 * a thread whose memory is loaded on this CPU, else the task to read (py_walk_in); @m: the
 * walk's memory, this context's own. Return the bytes written.
 */
static __always_inline __u32 sample_python(struct sample_event *e, __u8 *data,
					   struct task_struct *remote, const struct py_walk_mem *m)
{
	struct py_proc_cfg *cfg;
	__u32 n;

	if (!want_python)
		return 0;
	cfg = bpf_map_lookup_elem(&py_procs, &e->pid);
	if (!cfg)
		return 0;
	n = py_walk_in(cfg, e->pid, e->fsbase, remote, (struct py_frame_rec *)data, m,
		       &e->py_status, &e->flags);
	if (n > SAMPLER_MAX_PYDEPTH)
		n = SAMPLER_MAX_PYDEPTH;
	e->py_len = n;
	return n * sizeof(struct py_frame_rec);
}

/*
 * Record in @e the kernel stack that bpf_get_stack or bpf_get_task_stack returned (@r, its
 * bytes or -errno). Return the bytes kept (a whole number of addresses, 0 on an error).
 */
static __always_inline __u32 sample_kstack(struct sample_event *e, long r)
{
	__u32 kb;

	if (r <= 0)
		return 0;
	kb = r & ((SAMPLER_MAX_KSTACK * sizeof(__u64)) * 2 - 1);
	e->kstack_len = kb / sizeof(__u64);
	return e->kstack_len * sizeof(__u64);
}

/*
 * Fill @e and @data with the head of the sample of @t, a target's thread off its CPU (@th),
 * for its block @block: header, Python frames and kernel stack (from __schedule down to the
 * system call), from the registers the thread saved when it entered the kernel. @remote and @m
 * as for sample_python (@remote also for copy_user_stack); @how: SAMPLE_F_OFFCPU_* of where it
 * was taken. Return
 * the bytes of @data used; blocked_stack adds the user stack after them.
 */
static __always_inline __u32 blocked_head(struct sample_event *e, __u8 *data, struct task_struct *t,
					  struct task_struct *remote, const struct off_thread *th,
					  __u64 block, __u32 how, const struct py_walk_mem *m)
{
	__u32 pyb, kb = 0;

	e->type = EVENT_SAMPLE;
	e->pid = th->pid;
	e->tid = th->tid;
	e->ns_pid = th->ns_pid;
	e->ns_tid = th->ns_tid;
	BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
	e->cpu = bpf_get_smp_processor_id();
	e->time_ns = bpf_ktime_get_ns();
	e->flags = SAMPLE_F_OFFCPU | how;
	e->block = block;
	e->site = 0;
	e->stack_len = 0;
	e->py_len = 0;
	e->kstack_len = 0;
	e->py_status = PY_NONE;
	e->fsbase = BPF_CORE_READ(t, thread.fsbase);
	user_regs(e->regs, (struct pt_regs *)bpf_task_pt_regs(t), &e->flags); /* none: kthread */

	pyb = sample_python(e, data, remote, m);
	if (want_kernel)
		kb = sample_kstack(e, bpf_get_task_stack(t, data + (pyb & (PY_AREA / 2 - 1)),
							 SAMPLER_MAX_KSTACK * sizeof(__u64), 0));
	return pyb + kb;
}

/*
 * The user stack of the sample blocked_head began (@used bytes of @data), after them. Return
 * its bytes (e->stack_len).
 */
static __always_inline __u32 blocked_stack(struct sample_event *e, __u8 *data,
					   struct task_struct *t, struct task_struct *remote,
					   __u32 used)
{
	__u64 sp;

	if (e->flags & SAMPLE_F_NO_USER_REGS)
		return 0;
	sp = e->regs[DWREG_RSP];
	e->stack_len =
		copy_user_stack(remote, data + (used & (PY_AREA - 1)), sp,
				stack_top(t, e->pid, e->tid, e->fsbase, sp), stack_size, &e->flags);
	return e->stack_len;
}

/* The whole sample of blocked_head and blocked_stack. Return the bytes of @data used. */
static __always_inline __u32 blocked_sample(struct sample_event *e, __u8 *data,
					    struct task_struct *t, struct task_struct *remote,
					    const struct off_thread *th, __u64 block, __u32 how,
					    const struct py_walk_mem *m)
{
	__u32 used = blocked_head(e, data, t, remote, th, block, how, m);

	return used + blocked_stack(e, data, t, remote, used);
}

#endif
