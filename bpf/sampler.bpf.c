// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The sampler: a perf-event program attached to a cpu-clock event on every CPU. For samples
 * of target processes it sends, through a ring buffer, the thread's user registers, a copy of
 * the top of its user stack, optionally its kernel stack and its Python frames
 * (struct sample_event in sampler.h). Userspace unwinds and symbolizes.
 *
 * Tracepoints keep the target set current: with --children, forked processes of targets
 * become targets; exec and exit of targets are reported so userspace can drop stale state.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "sampler.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace before load. */
const volatile __u32 stack_size = SAMPLER_MAX_STACK; /* most bytes to copy, multiple of 8 */
const volatile bool want_kernel = false;
const volatile bool want_python = true;
const volatile bool follow_children = false;

/* Processes to sample: tgid -> unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");

/* Python configuration of target processes that run CPython: tgid -> config. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_proc_cfg);
} py_procs SEC(".maps");

/* Sizes of the scratch areas (powers of two, so masks bound offsets for the verifier). */
#define PY_AREA	   0x8000  /* >= SAMPLER_MAX_PYDEPTH * 16 + SAMPLER_MAX_KSTACK * 8 */
#define STACK_AREA 0x10000 /* >= SAMPLER_MAX_STACK */
#define CHUNK_MAX  0x2000  /* a read never exceeds this; slack behind STACK_AREA */
#define PAGE	   4096

struct scratch {
	struct sample_event hdr;
	__u8 data[PY_AREA + STACK_AREA + CHUNK_MAX];
};

/* One scratch event per CPU (a plain array: per-CPU values are limited to 32 KiB). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized to the number of possible CPUs before load */
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by userspace */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_NR);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

_Static_assert(SAMPLER_MAX_PYDEPTH * sizeof(struct py_frame_rec) +
			       SAMPLER_MAX_KSTACK * sizeof(__u64) <=
		       PY_AREA,
	       "PY_AREA too small");
_Static_assert(SAMPLER_MAX_STACK <= STACK_AREA, "STACK_AREA too small");

static __always_inline void stat_inc(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);

	if (v)
		*v += 1;
}

#include "pystack.bpf.h"

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

struct stack_copy {
	__u8 *dst;
	__u64 sp;
	__u32 want, off, flags;
};

/* One page (or the part of one from sp on): the bpf_loop callback. Returns 1 to stop. */
static long copy_stack_page(__u32 i, void *arg)
{
	struct stack_copy *c = arg;
	__u32 chunk = PAGE - ((c->sp + c->off) & (PAGE - 1));

	if (c->off >= c->want)
		return 1;
	if (chunk > c->want - c->off)
		chunk = c->want - c->off;
	chunk &= CHUNK_MAX - 1;
	if (bpf_probe_read_user(c->dst + (c->off & (STACK_AREA - 1)), chunk,
				(const void *)(c->sp + c->off))) {
		c->flags |= SAMPLE_F_STACK_SHORT;
		return 1;
	}
	c->off += chunk;
	return 0;
}

/*
 * Copy the user stack from @sp up to @top (0: unknown), at most stack_size bytes, into @dst,
 * a page at a time so that a stack ending early (its top is the end of the mapping) still
 * yields what is readable (SAMPLE_F_STACK_SHORT when a read fails). Shallow stacks cost only
 * what they use. Returns the number of bytes copied (a multiple of 8).
 */
static __always_inline __u32 copy_user_stack(__u8 *dst, __u64 sp, __u64 top, __u32 *flags)
{
	struct stack_copy c = {.dst = dst, .sp = sp, .want = stack_size};

	if (c.want > SAMPLER_MAX_STACK)
		c.want = SAMPLER_MAX_STACK;
	if (top && top - sp <= c.want)
		c.want = (top - sp + 7) & ~7u;
	/* The verifier checks the callback once; an unrolled loop with a bound known only at
	 * run time took it up to a second per load. */
	bpf_loop(SAMPLER_MAX_STACK / PAGE + 1, copy_stack_page, &c, 0);
	*flags |= c.flags;
	return c.off & ~7u;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, cpu, pyb = 0, kb = 0, size;
	struct task_struct *task;
	struct sample_event *e;
	struct scratch *s;
	struct pt_regs uregs;
	__u8 *stack_dst;

	if (!tgid || !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	stat_inc(STAT_SAMPLES);
	cpu = bpf_get_smp_processor_id();
	s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	e = &s->hdr;
	e->type = EVENT_SAMPLE;
	e->pid = tgid;
	e->tid = (__u32)id;
	e->cpu = cpu;
	e->time_ns = bpf_ktime_get_ns();
	e->flags = 0;
	e->stack_len = 0;
	e->py_len = 0;
	e->kstack_len = 0;
	e->py_status = PY_NONE;

	task = bpf_get_current_task_btf();
	e->fsbase = BPF_CORE_READ(task, thread.fsbase);

	/* User registers: the sample's own if it hit user mode, else the task's saved ones. */
	/* Copy first: the context only allows full-width loads, the stack copy anything. */
	uregs = *(struct pt_regs *)&ctx->regs;
	if ((uregs.cs & 3) != 3) {
		e->flags |= SAMPLE_F_KERNEL_MODE;
		if (bpf_probe_read_kernel(&uregs, sizeof(uregs), (void *)bpf_task_pt_regs(task)) ||
		    !(uregs.cs & 3)) {
			e->flags |= SAMPLE_F_NO_USER_REGS;
			stat_inc(STAT_NO_REGS);
			__builtin_memset(&uregs, 0, sizeof(uregs));
		}
	}
	copy_regs(e->regs, &uregs);

	if (want_python) {
		struct py_proc_cfg *cfg = bpf_map_lookup_elem(&py_procs, &tgid);

		if (cfg) {
			__u32 n = py_walk(cfg, e->fsbase, (struct py_frame_rec *)s->data,
					  &e->py_status, &e->flags);

			if (n > SAMPLER_MAX_PYDEPTH)
				n = SAMPLER_MAX_PYDEPTH;
			e->py_len = n;
			pyb = n * sizeof(struct py_frame_rec);
		}
	}

	if (want_kernel && (e->flags & SAMPLE_F_KERNEL_MODE)) {
		long r = bpf_get_stack(ctx, s->data + (pyb & (PY_AREA / 2 - 1)),
				       SAMPLER_MAX_KSTACK * sizeof(__u64), 0);

		if (r > 0) {
			kb = r & ((SAMPLER_MAX_KSTACK * sizeof(__u64)) * 2 - 1);
			e->kstack_len = kb / sizeof(__u64);
			kb = e->kstack_len * sizeof(__u64);
		}
	}

	if (!(e->flags & SAMPLE_F_NO_USER_REGS)) {
		stack_dst = s->data + ((pyb + kb) & (PY_AREA - 1));
		e->stack_len = copy_user_stack(stack_dst, uregs.sp,
					       stack_top(task, tgid, e->tid, e->fsbase, uregs.sp),
					       &e->flags);
	}

	size = sizeof(*e) + pyb + kb + e->stack_len;
	if (size > sizeof(*s))
		return 0;
	if (bpf_ringbuf_output(&events, s, size, BPF_RB_NO_WAKEUP))
		stat_inc(STAT_LOST);
	return 0;
}

static __always_inline void send_proc_event(__u32 change, __u32 pid, __u32 ppid)
{
	struct proc_change_event ev = {
		.type = EVENT_PROC,
		.change = change,
		.pid = pid,
		.ppid = ppid,
		.time_ns = bpf_ktime_get_ns(),
	};

	/* Rare and important: wake the reader. */
	bpf_ringbuf_output(&events, &ev, sizeof(ev), 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ppid = parent->tgid, pid = child->tgid, one = 1;

	/* A new thread of a target is sampled already; only new processes matter. */
	if (!follow_children || pid == ppid || !bpf_map_lookup_elem(&targets, &ppid))
		return 0;
	bpf_map_update_elem(&targets, &pid, &one, BPF_ANY);
	send_proc_event(PROC_FORK, pid, ppid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 pid = p->tgid;

	if (bpf_map_lookup_elem(&targets, &pid)) {
		/* Its interpreter (if any) is gone with the old image. */
		bpf_map_delete_elem(&py_procs, &pid);
		send_proc_event(PROC_EXEC, pid, 0);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 pid = p->tgid;

	/* The group leader exits last (it lingers as a zombie until its threads are gone). */
	if (p->pid != p->tgid || !bpf_map_lookup_elem(&targets, &pid))
		return 0;
	bpf_map_delete_elem(&py_procs, &pid);
	send_proc_event(PROC_EXIT, pid, 0);
	return 0;
}
