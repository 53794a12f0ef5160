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
 *
 * Off-CPU time (record --off-cpu, want_offcpu; the programs below on_exit): a second cpu-clock
 * program sweeps the targets' threads once per period and sums, per thread, the time they spend
 * off their CPU and why (struct offcpu_event, sampler.h); each block's stack is taken once, in
 * the sweep when the interrupted task shares the thread's memory, else by the thread itself as
 * it returns to user mode (a task work the sweep schedules, where the kernel has them:
 * off_resume), else (older kernels) when a thread of the process wakes it (on_waking), else by
 * the recorder's fetcher (offcpu_fetch.bpf.c: blocks that last, or every block without the
 * task work). Nothing runs at context switches, nor, with the task work, at wake-ups.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "sampler.h"
#include "waitclass.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace before load. */
const volatile __u32 stack_size = SAMPLER_MAX_STACK; /* most bytes to copy, multiple of 8 */
const volatile bool want_kernel = false;
const volatile bool want_python = true;
const volatile bool follow_children = false;
const volatile bool want_offcpu = false;
const volatile __u64 period_ns = 1000000000ULL / 99;		/* of the cpu-clock events */
const volatile __u32 offcpu_max_threads = OFFCPU_SWEEP_THREADS; /* threads per sweep */
/* Inode number of the recorder's PID namespace; 0: the initial namespace (kernel pids). */
const volatile __u32 pidns_inum = 0;

/* Level of that namespace, learned from the first task seen in it (0: not yet). */
__u32 pidns_level = 0;

#include "uctx.bpf.h"
#include "shared_maps.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_NR);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_add(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);

	if (v)
		*v += n;
}

static __always_inline void stat_inc(__u32 which)
{
	stat_add(which, 1);
}

#include "pystack.bpf.h"

/* Sizes of the scratch areas (powers of two, so masks bound offsets for the verifier). */
#define PY_AREA 0x8000 /* >= SAMPLER_MAX_PYDEPTH * 16 + SAMPLER_MAX_KSTACK * 8 */

struct scratch {
	struct sample_event hdr;
	__u8 data[PY_AREA + UCTX_STACK_AREA + UCTX_CHUNK_MAX];
	struct py_scratch ps;	 /* the Python walk's header copies (not sent: after the data) */
	__u8 page[PY_PAGE_SIZE]; /* and its copy of the innermost frame's page */
};

/*
 * The Python walk's memory in @s; @tss: where the thread's thread state is kept (or NULL).
 * No code objects' headers kept (py_code_cache, as the fetcher does): in the task work,
 * where a walk of a thread of 256 that block in the same functions found 99.5 % of them
 * there, the walk took as long (median 2.6 us with the page read at once, 3.1 us without it,
 * against 2.6 and 2.9 reading every header): a thread's own pages are what cost, not the
 * code objects its process shares.
 */
static __always_inline struct py_walk_mem scratch_walk_mem(struct scratch *s,
							   struct py_tss_cache *tss)
{
	struct py_walk_mem m = {.s = &s->ps, .page = s->page, .tss = tss};

	return m;
}

/* One scratch event per CPU (a plain array: per-CPU values are limited to 32 KiB). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized to the number of possible CPUs before load */
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

_Static_assert(SAMPLER_MAX_PYDEPTH * sizeof(struct py_frame_rec) +
			       SAMPLER_MAX_KSTACK * sizeof(__u64) <=
		       PY_AREA,
	       "PY_AREA too small");

#include "samplefill.bpf.h"

/*
 * Off-CPU stack sites (sampler.h, struct site_checks): where threads of the targets blocked
 * before, whose native frames userspace has unwound (written by userspace: sampling.h). A
 * block whose stack is taken where its memory is loaded and whose site's checks hold sends no
 * user stack, only the site's id.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BLOCK_SITES_MAX);
	__type(key, struct site_key);
	__type(value, struct site_checks);
} block_sites SEC(".maps");

#define SITE_COPY_MAX 0x8000 /* within the user stack area of struct scratch */
_Static_assert(SITE_COPY_MAX + 8 <= UCTX_STACK_AREA + UCTX_CHUNK_MAX, "SITE_COPY_MAX too large");
#include "stacksite.bpf.h"

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid, cpu, pyb = 0, kb = 0, size;
	struct task_ids ids = {};
	struct sample_event *e;
	struct scratch *s;
	struct py_walk_mem mem;
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
	/* With --off-cpu: the thread's context switches so far, which tell the block that follows
	 * this run (offcpu.h: the stack of a preempted thread). */
	e->block = want_offcpu ? task->nvcsw + task->nivcsw : 0;
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

	mem = scratch_walk_mem(s, NULL);
	pyb = sample_python(e, s->data, NULL, &mem);
	if (want_kernel && (e->flags & SAMPLE_F_KERNEL_MODE))
		kb = sample_kstack(e, bpf_get_stack(ctx, s->data + (pyb & (PY_AREA / 2 - 1)),
						    SAMPLER_MAX_KSTACK * sizeof(__u64), 0));

	if (!(e->flags & SAMPLE_F_NO_USER_REGS)) {
		stack_dst = s->data + ((pyb + kb) & (PY_AREA - 1));
		e->stack_len = copy_user_stack(NULL, stack_dst, uregs.sp,
					       stack_top(task, tgid, e->tid, e->fsbase, uregs.sp),
					       stack_size, &e->flags);
	}

	size = sizeof(*e) + pyb + kb + e->stack_len;
	if (size > sizeof(*s))
		return 0;
	if (bpf_ringbuf_output(&events, s, size, events_wakeup()))
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

/* Changes of thread_births or new_children, counted after each (mmap'ed): the thread-name
 * reader looks at the maps only when it moved. */
__u64 births_changes;

/* After each such change, a record that wakes the thread-name reader (its content unused):
 * it sleeps while no thread is born, and must read a thread that lives 30 ms while it does. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} births_wake SEC(".maps");

/* Count a change of thread_births or new_children for @pid's process, and say so. */
static __always_inline void births_changed(__u32 pid)
{
	__sync_fetch_and_add(&births_changes, 1);
	/* Full (the reader has not run since 256 births): it reads the maps when it does. */
	bpf_ringbuf_output(&births_wake, &pid, sizeof(pid), BPF_RB_FORCE_WAKEUP);
}

/* Scratch for PROC_EXEC events, too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct proc_exec_event);
} exec_scratch SEC(".maps");

static __always_inline void off_register(struct task_struct *task, __u64 flags);

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
		births_changed(p.pid);
		if (want_offcpu)
			off_register(child, BPF_ANY);
		return 0;
	}
	if (!follow_children)
		return 0;
	bpf_map_update_elem(&targets, &c.pid, &one, BPF_ANY);
	if (want_offcpu)
		off_register(child, BPF_ANY);
	own_ids(parent, &p);
	own_ids(child, &c);
	nc.ppid = p.pid;
	nc.fork_ns_tid = p.ns_tid;
	nc.child_ns_pid = c.ns_pid;
	bpf_map_update_elem(&new_children, &c.pid, &nc, BPF_ANY);
	births_changed(c.pid);
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
		/* do_exit set it before the tracepoint (the group's code on a group exit). */
		ev.exit_code = BPF_CORE_READ(p, exit_code);
		bpf_map_delete_elem(&py_procs, &ids.pid);
		bpf_map_delete_elem(&thread_births, &ids.pid);
	} else {
		change = PROC_THREAD_EXIT;
	}
	/* The thread's last name: it may be gone before userspace reads its samples. */
	if (send_proc_event(&ev, sizeof(ev), change, &ids, p,
			    change == PROC_EXIT ? 0 : events_wakeup()))
		stat_inc(STAT_LOST_EVENTS);
	return 0;
}

/* ---- off-CPU time ------------------------------------------------------------------------- */

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

__u64 sweep_last_ns;  /* when the last sweep started: one CPU claims each period */
__u32 sweep_cursor;   /* with more threads than offcpu_max_threads: where the next sweep starts */
__u32 off_slots_used; /* slots of off_slots handed out so far: the sweep walks [0, this) */

/* Slots of off_slots below off_slots_used that the sweep freed (their thread ended). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(value, __u32);
} off_free SEC(".maps");
__u64 off_wants; /* blocks left to the fetcher so far: the recorder polls it (mmap'ed) */
/* Their kernel tids go to off_queue (off_fetch); 0: the fetcher is the task iterator
 * (off_fetch_iter), which finds them by their task storage. Set by the recorder. */
__u32 off_queue_on = 1;
__u32 off_stop; /* set by the recorder when recording ends: no more sweeps */

/*
 * Take a block's stack as its thread returns to user mode (off_resume), where the kernel lets
 * BPF schedule a task work (Linux 6.18: bpf_task_work_schedule_resume_impl; weak, so that the
 * program loads where it is missing and use_resume is false). Set by userspace before load.
 */
const volatile bool use_resume = false;
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					      void *map__map, bpf_task_work_callback_t callback,
					      void *aux__prog) __weak __ksym;

/* The task works, one per thread that had one (kernel tid -> struct off_resume_work): deleted
 * with the thread's entry in off_threads, which cancels a work not run yet. */
struct off_resume_work {
	struct bpf_task_work tw;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct off_resume_work);
} off_resume_works SEC(".maps");

/*
 * The task work's scratch, one per CPU (resized before load), and whether it is in use: the
 * work runs in the thread's context with interrupts on and may be preempted on its CPU (not
 * moved), so the sampler's scratch, which an interrupt on this CPU may be filling, is not
 * its, and a second work on the same CPU finds this one busy and leaves its block to the
 * fetcher.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} resume_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SAMPLER_MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} resume_busy SEC(".maps");

/*
 * Make @task a thread the sweep looks at, if it belongs to a target. @flags: BPF_NOEXIST to
 * keep a thread known already, BPF_ANY for a new thread (its kernel tid may be a dead thread's
 * that the sweep has not cleared yet).
 */
static __always_inline void off_register(struct task_struct *task, __u64 flags)
{
	struct task_ids ids = {};
	__u32 ktid = BPF_CORE_READ(task, pid), slot;
	struct off_thread *th;
	long err;

	if (BPF_CORE_READ(task, exit_state))
		return; /* ended (a zombie the iterator still lists): it waits for nothing */
	view_ids(task, &ids);
	if (!ids.pid || !ids.tid || !bpf_map_lookup_elem(&targets, &ids.pid))
		return;
	if (flags == BPF_NOEXIST && bpf_map_lookup_elem(&off_threads, &ktid))
		return; /* known */
	/* A slot: one freed by the sweep, else the next never used. */
	if (bpf_map_pop_elem(&off_free, &slot)) {
		if (off_slots_used >= SAMPLER_MAX_TARGETS) {
			stat_inc(STAT_OFF_NO_ROOM);
			return;
		}
		slot = __sync_fetch_and_add(&off_slots_used, 1);
	}
	th = bpf_map_lookup_elem(&off_slots, &slot);
	if (!th) {
		stat_inc(STAT_OFF_NO_ROOM);
		return;
	}
	own_ids(task, &ids);
	__builtin_memset(th, 0, sizeof(*th));
	th->pid = ids.pid;
	th->tid = ids.tid;
	th->ns_pid = ids.ns_pid;
	th->ns_tid = ids.ns_tid;
	/* BPF_ANY replaces the slot of a dead thread whose tid this one got (the sweep frees
	 * it: the tid no longer names it). */
	err = bpf_map_update_elem(&off_threads, &ktid, &slot, flags);
	if (err) {
		bpf_map_push_elem(&off_free, &slot, 0);
		if (err != -17 /* EEXIST */)
			stat_inc(STAT_OFF_NO_ROOM);
		return;
	}
	th->ktid = ktid; /* the sweep looks at it from now on */
}

/* The threads of a target (run by the recorder with the target's pid as the filter). */
SEC("iter/task")
int off_seed(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (task)
		off_register(task, BPF_NOEXIST);
	return 0;
}

/* Send what the thread's open segment holds that was not sent yet. @task: the thread, for its
 * name (NULL: gone). */
static __always_inline void off_send(struct off_thread *th, struct task_struct *task)
{
	struct offcpu_event ev = {};

	if (!th->observations)
		return;
	ev.type = EVENT_OFFCPU;
	ev.pid = th->pid;
	ev.tid = th->tid;
	ev.ns_tid = th->ns_tid;
	ev.state = th->state;
	ev.block = th->block;
	ev.time_ns = th->last_ns;
	ev.ns = th->ns;
	ev.observations = th->observations;
	ev.ip = th->ip;
	ev.nr = th->nr;
	if (task)
		BPF_CORE_READ_STR_INTO(&ev.comm, task, comm);
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), events_wakeup()))
		stat_inc(STAT_OFF_LOST);
	th->ns = 0;
	th->observations = 0;
}

/* Slot @i's segment not sent yet, at the end (off_flush; a bpf_loop callback). */
static long flush_one(__u32 i, void *unused)
{
	struct off_thread *th = bpf_map_lookup_elem(&off_slots, &i);

	if (th && th->ktid)
		off_send(th, NULL);
	return 0;
}

/*
 * The end of a recording, once no sweep runs (off_stop): every thread's segment not sent yet
 * goes out through the ring buffer like the sweep's (run by sampling__offcpu_flush: one route
 * for every off-CPU record).
 */
SEC("syscall")
int off_flush(void *ctx)
{
	__u32 n = off_slots_used;

	bpf_loop(n < SAMPLER_MAX_TARGETS ? n : SAMPLER_MAX_TARGETS, flush_one, NULL, 0);
	return 0;
}

/* The task work's runs and their time in the threads (not in the kernel's BPF statistics: the
 * kernel calls it directly), and the frames its walks copied from the innermost frame's page;
 * for the recorder's summary. */
__u64 resume_runs, resume_ns, resume_page_frames;

/*
 * Send the stack of @t, a target's thread off its CPU, for its block @block: what a sample
 * holds (sampler.h), from the registers the thread saved when it entered the kernel. Its user
 * memory must be the one loaded on this CPU (the current task is a thread of its process).
 * @scratch_map: this CPU's scratch is its entry (scratch; resume_scratch for the task work).
 * @want: @t's own (the task work's, @t the current task), whose kept slot the walk uses; NULL
 * otherwise. @how: SAMPLE_F_OFFCPU_* of where it was taken. At a known site whose checks hold
 * (map block_sites), the site's id instead of the user stack. 0 if sent.
 */
static __always_inline int send_blocked_stack(void *scratch_map, struct task_struct *t,
					      const struct off_thread *th, __u64 block,
					      struct off_want *want, __u32 how)
{
	__u32 cpu = bpf_get_smp_processor_id(), size, used, v;
	const struct site_checks *site;
	struct py_walk_mem mem;
	struct site_key k;
	struct scratch *s;

	s = bpf_map_lookup_elem(scratch_map, &cpu);
	if (!s)
		return -1;
	mem = scratch_walk_mem(s, want ? &want->tss : NULL);
	used = blocked_head(&s->hdr, s->data, t, NULL, th, block, how, &mem);
	if (want) {
		__sync_fetch_and_add(&resume_page_frames, s->ps.page_frames);
		s->ps.page_frames = 0;
	}
	k.pid = s->hdr.pid;
	k.tid = s->hdr.tid;
	k.ip = s->hdr.regs[DWREG_RIP];
	k.sp = s->hdr.regs[DWREG_RSP];
	k._pad = 0;
	/* The place's sites until one holds (a variant can be free while a later one is not). */
	for (v = 0; v < SITE_VARIANTS && !(s->hdr.flags & SAMPLE_F_NO_USER_REGS); v++) {
		k.variant = v;
		site = bpf_map_lookup_elem(&block_sites, &k);
		if (!site)
			continue;
		/* A span longer than one copy would be checked a word at a time: dearer than
		 * the copy. */
		if (site->span <= SITE_COPY_MAX &&
		    (s->hdr.site =
			     site_holds(site, s->hdr.regs, k.sp, s->data + (used & (PY_AREA - 1)))))
			break;
	}
	if (s->hdr.site)
		s->hdr.flags |= SAMPLE_F_SITE;
	else
		used += blocked_stack(&s->hdr, s->data, t, NULL, used);
	size = sizeof(s->hdr) + used;
	if (size > sizeof(*s))
		return -1;
	if (bpf_ringbuf_output(&events, s, size, events_wakeup())) {
		stat_inc(STAT_OFF_LOST);
		return -1;
	}
	return 0;
}

/*
 * The task work (a callback of on_sweep): the thread the sweep saw in a block returns to user
 * mode. If the block it returns from is still wanted (not taken at its wake-up: woken by a
 * timer, I/O, another process) and it is that block (no voluntary switch since, the same user
 * instruction and stack pointers: the stack is the one it blocked with, its memory its own and
 * loaded here), its stack is taken now, from its own memory (a few microseconds of its time),
 * instead of by the recorder's fetcher from another process. Anything else leaves the want to
 * the fetcher, which finds the block over.
 */
static __always_inline void off_resume_take(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 cpu = bpf_get_smp_processor_id(), ktid, *busy;
	struct off_thread *th;
	struct off_want *want;
	struct pt_regs *regs;
	__u64 block;

	if (task->flags & 0x4 /* PF_EXITING */)
		return;
	want = bpf_task_storage_get(&off_want, task, 0, 0);
	if (!want || !want->block)
		return;
	block = want->block;
	barrier(); /* block before the fields written before it (struct off_want) */
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (task->nvcsw != want->nvcsw || !regs || regs->ip != want->ip || regs->sp != want->sp) {
		stat_inc(STAT_OFF_RESUME_MISS);
		return;
	}
	ktid = task->pid;
	th = off_thread_of(ktid);
	busy = bpf_map_lookup_elem(&resume_busy, &cpu);
	if (!th || !busy || __sync_val_compare_and_swap(busy, 0, 1))
		return;
	want->block = 0;
	send_blocked_stack(&resume_scratch, task, th, block, want, SAMPLE_F_OFFCPU_RESUME);
	*busy = 0;
}

static int off_resume(struct bpf_map *map, void *key, void *value)
{
	__u64 t0 = bpf_ktime_get_ns();

	off_resume_take();
	__sync_fetch_and_add(&resume_runs, 1);
	__sync_fetch_and_add(&resume_ns, bpf_ktime_get_ns() - t0);
	return 0;
}

/* Ask @t (kernel tid @ktid), in a block the sweep wants the stack of, for it as it resumes. */
static __always_inline void off_resume_schedule(struct task_struct *t, __u32 ktid)
{
	struct off_resume_work *w, empty = {};
	long err;

	w = bpf_map_lookup_elem(&off_resume_works, &ktid);
	if (!w) {
		bpf_map_update_elem(&off_resume_works, &ktid, &empty, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&off_resume_works, &ktid);
		if (!w) {
			stat_inc(STAT_OFF_RESUME_ERR);
			return;
		}
	}
	err = bpf_task_work_schedule_resume_impl(t, &w->tw, &off_resume_works, off_resume, NULL);
	/* -EBUSY: a work scheduled for an earlier block has not run yet (the thread has not
	 * returned to user mode since): it will find this block in the want. */
	if (err && err != -16 /* EBUSY */)
		stat_inc(STAT_OFF_RESUME_ERR);
}

struct sweep_ctx {
	__u64 now;
	struct mm_struct *mm; /* of the interrupted task: the user memory readable here */
};

/*
 * The round-robin of the sweep in progress (one CPU sweeps at a time). Global rather than in
 * sweep_ctx: the verifier checks the callback as a loop until its state stops changing, and
 * counters on the stack would change at every turn.
 */
struct {
	__u32 from;  /* the first slot to look at (sweep_cursor) */
	__u32 done;  /* threads looked at */
	__u32 last;  /* index of the last one */
	__u32 quiet; /* of them, quiet ones (not read) */
} sweep;

/*
 * Free slot @slot of the thread @th, which ended (or, @orphan, whose tid now names another
 * thread's slot), after sending what it had not sent yet.
 */
static __always_inline void off_slot_free(struct off_thread *th, __u32 slot, struct task_struct *t,
					  bool orphan)
{
	__u32 ktid = th->ktid;

	off_send(th, t);
	if (!orphan) {
		bpf_map_delete_elem(&off_threads, &ktid);
		if (use_resume)
			bpf_map_delete_elem(&off_resume_works, &ktid);
	}
	th->ktid = 0;
	bpf_map_push_elem(&off_free, &slot, 0);
}

/*
 * Is the thread of @th still in the block and state of its open segment, as at the sweep's last
 * read of it, without having run since? Read where its task_struct was then (th->task; no
 * reference is held: a task freed since reads as another or as garbage, and is told apart by
 * its tid and state). Its context switches are read before and after its state and whether it
 * is on a CPU: a thread that ran since has switched (a block ends with a wake-up, the thread
 * runs, and it switches out again, voluntarily or not), a woken one not yet run is no longer
 * in a sleeping state, and one preparing to block again is still on its CPU.
 */
static __always_inline bool still_blocked(const struct off_thread *th)
{
	struct task_struct *t;
	__u64 before, after;
	__u32 state, on_cpu;

	if (!th->task)
		return false;
	t = bpf_rdonly_cast((void *)th->task, bpf_core_type_id_kernel(struct task_struct));
	before = t->nvcsw + t->nivcsw;
	barrier();
	state = t->__state;
	on_cpu = t->on_cpu;
	barrier();
	after = t->nvcsw + t->nivcsw;
	return before == th->block && after == before && state == th->task_state && !on_cpu &&
	       t->pid == th->ktid && !t->exit_state;
}

/* Look at the thread in slot @i, if any (a bpf_loop callback over off_slots). */
static long sweep_one(__u32 i, struct sweep_ctx *c)
{
	struct wait_input in = {};
	struct py_proc_cfg *cfg;
	struct task_struct *t;
	struct pt_regs *regs = NULL;
	struct off_want *want;
	struct off_thread *th;
	__u64 w, block;
	__u32 state, ktid, *named;

	if (i < sweep.from)
		return 0;
	if (sweep.done >= offcpu_max_threads)
		return 1;
	th = bpf_map_lookup_elem(&off_slots, &i);
	if (!th || !th->ktid)
		return 0;
	ktid = th->ktid;
	sweep.done++;
	sweep.last = i;
	if (th->quiet && c->now > th->last_ns && still_blocked(th)) {
		th->quiet--;
		/*
		 * Blocked, in the open segment's block and state, at the last read of the task
		 * and now: it has not run since. Most threads of a job at most sweeps (idle
		 * helpers): counted without the pid lookup and the rest of the read. Its name is
		 * not read either.
		 */
		w = c->now - th->last_ns;
		if (w > OFFCPU_MAX_WEIGHT_NS)
			w = OFFCPU_MAX_WEIGHT_NS;
		th->last_ns = c->now;
		th->ns += w;
		th->observations++;
		if (c->now - th->sent_ns >= OFFCPU_SEND_NS) {
			off_send(th, NULL);
			th->sent_ns = c->now;
		}
		sweep.quiet++;
		return 0;
	}
	th->quiet = 0;
	named = bpf_map_lookup_elem(&off_threads, &ktid);
	if (!named || *named != i) {
		/* A dead thread's slot whose tid a new thread got (off_register). */
		off_slot_free(th, i, NULL, true);
		return 0;
	}
	t = bpf_task_from_pid(ktid);
	if (!t) {
		/* It exited: what it had not sent yet, then forget it. */
		off_slot_free(th, i, NULL, false);
		return 0;
	}
	if (t->exit_state) {
		/* A zombie (or dead, not released yet): it ended, it waits for nothing (its parent
		 * may reap it much later). Nothing from its end on is counted: what it had not
		 * sent, then forget it, as for a thread gone. */
		off_slot_free(th, i, t, false);
		goto out;
	}
	/* The time since it was last looked at (by a sweep at every period, or every few with
	 * more threads than offcpu_max_threads); none if a sweep with a later time already did
	 * (never counted twice). */
	if (!th->last_ns)
		w = period_ns;
	else if (c->now > th->last_ns)
		w = c->now - th->last_ns;
	else
		goto out;
	if (w > OFFCPU_MAX_WEIGHT_NS)
		w = OFFCPU_MAX_WEIGHT_NS;
	th->last_ns = c->now;
	th->task = (__u64)t;
	block = t->nvcsw + t->nivcsw;
	if (!t->on_cpu && th->open && th->block == block && th->task_state == t->__state &&
	    th->stack_block == block) {
		/*
		 * Still in the block of the open segment, in the state it was classified in
		 * (blocked, or woken and waiting for a CPU): it has not run since, so its system
		 * call and registers are as they were, and its stack was taken or asked for.
		 * Blocked: quiet (still_blocked checks the next looks). A runnable one may run
		 * without a wake-up: never quiet.
		 */
		th->quiet = th->state != WAIT_RUNNABLE ? OFFCPU_QUIET_LOOKS : 0;
		th->ns += w;
		th->observations++;
		goto sent;
	}
	if (t->on_cpu) {
		/* Running: its CPU's own sample counts it. The block it was in is over. */
		off_send(th, t);
		th->open = 0;
		goto out;
	}
	regs = (struct pt_regs *)bpf_task_pt_regs(t);
	in.state = t->__state;
	if (regs) {
		in.nr = regs->orig_ax;
		in.arg0 = regs->di;
		in.arg1 = regs->si;
	} else {
		in.nr = -1;
	}
	cfg = bpf_map_lookup_elem(&py_procs, &th->pid);
	if (cfg) {
		in.gil_lo = cfg->gil_lo;
		in.gil_hi = cfg->gil_hi;
	}
	state = wait_classify(&in);
	if (th->open && (th->block != block || th->state != state)) {
		off_send(th, t);
		th->open = 0;
	}
	if (!th->open) {
		th->open = 1;
		th->block = block;
		th->state = state;
		th->sent_ns = c->now;
	}
	th->task_state = in.state;
	th->ns += w;
	th->observations++;
	th->ip = regs && (regs->cs & 3) == 3 ? regs->ip : 0;
	th->nr = in.nr;
sent:
	/* A long block is sent every second, so that its time falls in the right second. */
	if (c->now - th->sent_ns >= OFFCPU_SEND_NS) {
		off_send(th, t);
		th->sent_ns = c->now;
	}
	if (block != th->stack_block) {
		/* A block not seen before: its stack, once. Here if this CPU has its memory; else
		 * asked of the wake-up and the fetcher. If neither works now (no room in the ring
		 * buffer; task storage busy: this interrupt came in the middle of a task storage
		 * operation on this CPU), the next sweep tries again. */
		if (c->mm && c->mm == t->mm) {
			if (!send_blocked_stack(&scratch, t, th, block, NULL, 0))
				th->stack_block = block;
		} else {
			__u32 qtid = ktid;

			want = bpf_task_storage_get(&off_want, t, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (want && (!off_queue_on || !bpf_map_push_elem(&off_queue, &qtid, 0))) {
				th->stack_block = block;
				want->since = bpf_ktime_get_ns();
				want->since_block = block;
				want->nvcsw = t->nvcsw;
				want->ip = regs ? regs->ip : 0;
				want->sp = regs ? regs->sp : 0;
				barrier(); /* the fields before the block (struct off_want) */
				want->block = block;
				__sync_fetch_and_add(&off_wants, 1);
				stat_inc(STAT_OFF_WANTED);
				if (use_resume && regs && (regs->cs & 3) == 3 &&
				    bpf_task_work_schedule_resume_impl)
					off_resume_schedule(t, qtid);
			}
		}
	}
out:
	bpf_task_release(t);
	return 0;
}

/*
 * The sweep: attached to cpu-clock events of its own (one per CPU, the sampling period), so
 * that on_sample stays as it is. The first CPU whose timer fires at least 0.9 periods after
 * the last sweep takes the next one: one sweep per period, in interrupt context, where no
 * task has to be scheduled to take it (which would disturb what it measures).
 */
SEC("perf_event")
int on_sweep(struct bpf_perf_event_data *ctx)
{
	/*
	 * The last sweep's start is read before the clock: read after it, it could be a later
	 * start (another CPU's sweep that began in between), now - last would wrap around and
	 * this CPU would sweep too, with a time behind the threads' last_ns.
	 */
	__u64 last = *(volatile __u64 *)&sweep_last_ns, now = bpf_ktime_get_ns();
	struct sweep_ctx c = {};
	__u32 used;

	if (!want_offcpu || off_stop || now - last < period_ns * 9 / 10)
		return 0;
	if (__sync_val_compare_and_swap(&sweep_last_ns, last, now) != last)
		return 0; /* another CPU took this one */
	stat_inc(STAT_OFF_SWEEPS);
	c.now = now;
	c.mm = BPF_CORE_READ((struct task_struct *)bpf_get_current_task_btf(), mm);
	used = off_slots_used;
	sweep.from = sweep_cursor;
	sweep.done = 0;
	sweep.last = 0;
	sweep.quiet = 0;
	bpf_loop(used < SAMPLER_MAX_TARGETS ? used : SAMPLER_MAX_TARGETS, sweep_one, &c, 0);
	stat_add(STAT_OFF_LOOKS, sweep.done);
	stat_add(STAT_OFF_QUIET, sweep.quiet);
	/* All looked at: start at the beginning next time; else where this one stopped. */
	sweep_cursor =
		sweep.done >= offcpu_max_threads && used > sweep.last + 1 ? sweep.last + 1 : 0;
	return 0;
}

/*
 * A thread is being woken (@p). If the sweep wants the stack of the block it is ending and the
 * waker is a thread of the same process, the stack is taken now: the wakee cannot run before
 * this returns, and its memory is the waker's. Else the block is over for the fetcher. Loaded
 * only without the task work (use_resume), which takes every such stack as the thread resumes.
 */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	struct off_want *want = bpf_task_storage_get(&off_want, p, 0, 0);
	struct task_struct *cur;
	struct off_thread *th;
	__u64 block;

	if (!want || !want->block)
		return 0; /* no block of a watched thread whose stack is wanted */
	block = want->block;
	if (block != p->nvcsw + p->nivcsw) {
		want->block = 0;
		return 0; /* that block is over */
	}
	cur = bpf_get_current_task_btf();
	if (!cur->mm || cur->mm != p->mm) {
		/* Woken from elsewhere (a timer, I/O, another process): the block is over. */
		want->block = 0;
		return 0;
	}
	want->block = 0;
	th = off_thread_of(p->pid);
	if (th)
		send_blocked_stack(&scratch, p, th, block, NULL, SAMPLE_F_OFFCPU_WAKE);
	return 0;
}
