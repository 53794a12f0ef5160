// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The sampler: a perf-event program attached to a cpu-clock event on every CPU. For samples
 * of target processes it sends, through a ring buffer, the thread's user registers, a copy of
 * the top of its user stack, optionally its kernel stack and its Python frames
 * (struct sample_event in sampler.h). Userspace unwinds and symbolizes.
 *
 * Tracepoints keep the target set current: with --children, forked processes of targets
 * become targets; exec and exit of targets (every thread's, with its last name) are reported
 * so userspace can drop stale state and name threads that are gone.
 *
 * Pids are numbered as the recorder's PID namespace numbers them (sampler.h): the kernel's
 * numbers when it runs in the initial namespace; otherwise they are looked up in the tasks'
 * struct pid, so that a recorder inside a container matches the pids it sees in its /proc.
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
/* Inode number of the recorder's PID namespace; 0: the initial namespace (kernel pids). */
const volatile __u32 pidns_inum = 0;

/* Level of that namespace, learned from the first task seen in it (0: not yet). */
__u32 pidns_level = 0;

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

#define MAX_PIDNS_LEVEL 32 /* the kernel's limit on nested PID namespaces */

/* The upid (number, namespace) of @pid at namespace level @level. */
static __always_inline int read_upid(struct pid *pid, __u32 level, int *nr,
				     struct pid_namespace **ns)
{
	const __u8 *u = (const __u8 *)pid + bpf_core_field_offset(struct pid, numbers) +
			(__u64)level * bpf_core_type_size(struct upid);

	if (bpf_probe_read_kernel(nr, sizeof(*nr), u + bpf_core_field_offset(struct upid, nr)))
		return -1;
	return bpf_probe_read_kernel(ns, sizeof(*ns), u + bpf_core_field_offset(struct upid, ns));
}

/* The number @pid has in the recorder's PID namespace; 0 if it has none there. */
static __always_inline __u32 view_nr(struct pid *pid)
{
	struct pid_namespace *ns;
	__u32 level, i;
	int nr;

	if (!pid)
		return 0;
	level = BPF_CORE_READ(pid, level);
	if (pidns_level) {
		if (level < pidns_level || read_upid(pid, pidns_level, &nr, &ns) ||
		    BPF_CORE_READ(ns, ns.inum) != pidns_inum)
			return 0;
		return nr;
	}
	for (i = 1; i <= MAX_PIDNS_LEVEL; i++) {
		if (i > level)
			break;
		if (read_upid(pid, i, &nr, &ns))
			return 0;
		if (BPF_CORE_READ(ns, ns.inum) == pidns_inum) {
			pidns_level = i;
			return nr;
		}
	}
	return 0;
}

/* The number @pid has in its own (innermost) PID namespace. */
static __always_inline __u32 own_nr(struct pid *pid)
{
	struct pid_namespace *ns;
	int nr;

	if (!pid || read_upid(pid, BPF_CORE_READ(pid, level), &nr, &ns))
		return 0;
	return nr;
}

struct task_ids {
	__u32 pid, tid;	      /* as the recorder numbers them */
	__u32 ns_pid, ns_tid; /* in the task's own namespace */
};

/* The pid (tgid) and tid of @task in the recorder's PID namespace; 0 where it has none. */
static __always_inline void view_ids(struct task_struct *task, struct task_ids *ids)
{
	if (!pidns_inum) {
		ids->pid = BPF_CORE_READ(task, tgid);
		ids->tid = BPF_CORE_READ(task, pid);
		return;
	}
	ids->pid = view_nr(BPF_CORE_READ(task, group_leader, thread_pid));
	ids->tid = view_nr(BPF_CORE_READ(task, thread_pid));
}

/* ids->ns_pid and ns_tid of @task; its view ids must be set. */
static __always_inline void own_ids(struct task_struct *task, struct task_ids *ids)
{
	struct pid *tp = BPF_CORE_READ(task, thread_pid);

	/* In the recorder's own namespace (the common case) the numbers are the same. */
	if (tp && BPF_CORE_READ(tp, level) == (pidns_inum ? pidns_level : 0)) {
		ids->ns_pid = ids->pid;
		ids->ns_tid = ids->tid;
		return;
	}
	ids->ns_tid = own_nr(tp);
	ids->ns_pid = own_nr(BPF_CORE_READ(task, group_leader, thread_pid));
}

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
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid, cpu, pyb = 0, kb = 0, size;
	struct task_ids ids = {};
	struct sample_event *e;
	struct scratch *s;
	struct pt_regs uregs;
	__u8 *stack_dst;

	if (!pidns_inum) {
		__u64 id = bpf_get_current_pid_tgid();

		ids.pid = id >> 32;
		ids.tid = (__u32)id;
	} else {
		view_ids(task, &ids);
	}
	tgid = ids.pid;
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
	e->tid = ids.tid;
	own_ids(task, &ids);
	e->ns_pid = ids.ns_pid;
	e->ns_tid = ids.ns_tid;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->cpu = cpu;
	e->time_ns = bpf_ktime_get_ns();
	e->flags = 0;
	e->stack_len = 0;
	e->py_len = 0;
	e->kstack_len = 0;
	e->py_status = PY_NONE;

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
			__u32 n = py_walk(cfg, tgid, e->fsbase, (struct py_frame_rec *)s->data,
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

/* Thread creations in each target (tgid -> count): userspace reads Python thread names soon
 * after a change, while the new threads live. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} thread_births SEC(".maps");

/* Children followed since userspace last looked (child tgid -> struct new_child): a forked
 * child runs its parent's interpreter at the same addresses, so its thread names can be read
 * at once, long before its fork event is handled. Userspace deletes what it has seen. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct new_child);
} new_children SEC(".maps");

/* Scratch for PROC_EXEC events, too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct proc_exec_event);
} exec_scratch SEC(".maps");

/* A process event about @task; the ids must be set. Returns 0 or what the ring buffer said. */
static __always_inline long send_proc_event(struct proc_change_event *ev, __u32 size, __u32 change,
					    const struct task_ids *ids, struct task_struct *task,
					    __u64 flags)
{
	ev->type = EVENT_PROC;
	ev->change = change;
	ev->pid = ids->pid;
	ev->tid = ids->tid;
	ev->ns_pid = ids->ns_pid;
	ev->ns_tid = ids->ns_tid;
	ev->time_ns = bpf_ktime_get_ns();
	BPF_CORE_READ_STR_INTO(&ev->comm, task, comm);
	return bpf_ringbuf_output(&events, ev, size, flags);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct proc_change_event ev = {};
	struct task_ids p = {}, c = {};
	struct new_child nc;
	__u32 one = 1;
	__u64 *births, first = 1;

	view_ids(parent, &p);
	view_ids(child, &c);
	if (!p.pid || !c.pid || !bpf_map_lookup_elem(&targets, &p.pid))
		return 0;
	if (c.pid == p.pid) {
		/* A new thread of a target: it is sampled already; say it was born. */
		births = bpf_map_lookup_elem(&thread_births, &p.pid);
		if (births)
			__sync_fetch_and_add(births, 1);
		else
			bpf_map_update_elem(&thread_births, &p.pid, &first, BPF_NOEXIST);
		return 0;
	}
	if (!follow_children)
		return 0;
	bpf_map_update_elem(&targets, &c.pid, &one, BPF_ANY);
	own_ids(parent, &p);
	own_ids(child, &c);
	nc.ppid = p.pid;
	nc.fork_ns_tid = p.ns_tid;
	nc.child_ns_pid = c.ns_pid;
	bpf_map_update_elem(&new_children, &c.pid, &nc, BPF_ANY);
	ev.ppid = p.pid;
	/* Rare and important: wake the reader. */
	if (send_proc_event(&ev, sizeof(ev), PROC_FORK, &c, child, 0))
		stat_inc(STAT_LOST_EVENTS);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct proc_exec_event *ev;
	struct task_ids ids = {};
	__u64 start, end, len;
	__u32 zero = 0;

	view_ids(p, &ids);
	if (!ids.pid || !bpf_map_lookup_elem(&targets, &ids.pid))
		return 0;
	/* Its interpreter (if any) is gone with the old image. */
	bpf_map_delete_elem(&py_procs, &ids.pid);
	ev = bpf_map_lookup_elem(&exec_scratch, &zero);
	if (!ev)
		return 0;
	own_ids(p, &ids);
	ev->h.ppid = 0;
	ev->h.flags = 0;
	ev->h.args_len = 0;
	/* The new command line, from the new image's stack (p is the current task). */
	start = BPF_CORE_READ(p, mm, arg_start);
	end = BPF_CORE_READ(p, mm, arg_end);
	len = end - start;
	if (end > start) {
		if (len > PROC_ARGS_MAX) {
			len = PROC_ARGS_MAX;
			ev->h.flags |= PROC_F_ARGS_TRUNCATED;
		}
		if (!bpf_probe_read_user(ev->args, len, (void *)start))
			ev->h.args_len = len;
	}
	if (bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), BPF_CORE_READ(bprm, filename)) <
	    0)
		ev->path[0] = 0;
	if (send_proc_event(&ev->h, sizeof(*ev), PROC_EXEC, &ids, p, 0))
		stat_inc(STAT_LOST_EVENTS);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	struct proc_change_event ev = {};
	struct task_ids ids = {};
	__u32 change;

	view_ids(p, &ids);
	if (!ids.pid || !bpf_map_lookup_elem(&targets, &ids.pid))
		return 0;
	own_ids(p, &ids);
	/*
	 * The tracepoint fires for every thread, the group leader included, which may exit
	 * before the others (pthread_exit in main). The process ends with its last thread: the
	 * one that brought signal->live to 0 before the tracepoint.
	 */
	if (BPF_CORE_READ(p, signal, live.counter) == 0) {
		change = PROC_EXIT;
		bpf_map_delete_elem(&py_procs, &ids.pid);
		bpf_map_delete_elem(&thread_births, &ids.pid);
	} else {
		change = PROC_THREAD_EXIT;
	}
	/* The thread's last name: it may be gone before userspace reads its samples. */
	if (send_proc_event(&ev, sizeof(ev), change, &ids, p,
			    change == PROC_EXIT ? 0 : BPF_RB_NO_WAKEUP))
		stat_inc(STAT_LOST_EVENTS);
	return 0;
}
