// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * Test program for the Python stack walker (pystack.bpf.h): a perf-event program on
 * cpu-clock that, for samples of one process, calls py_walk and sends the frames through a
 * ring buffer. Loaded by tests/tools/pystack_bpf.c; not part of probing itself.
 *
 * With stop_after_walk (pystack-bpf --compare) it walks one sample per arming (test_armed
 * set to 1 by userspace) and stops the process (SIGSTOP) right after: the sampled thread runs
 * no more user code, so userspace can walk the same memory with its own walker.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "sampler.h"
#include "pystack.bpf.h"
#include "pystack_test.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 target_tgid = 0;
const volatile __u32 stop_after_walk = 0;
const volatile __u32 no_page = 0; /* every frame read by itself */

#define SIGSTOP 19

/* [0]: 1 = walk the next sample (stop_after_walk), set by userspace, cleared by the walk */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} test_armed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct py_proc_cfg);
} test_py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} test_events SEC(".maps");

/* The walk's memory, as the sampler gives it (a perf event: not preempted, one walk per CPU at
 * a time). */
struct test_scratch {
	struct py_scratch ps;
	__u8 page[PY_PAGE_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct test_scratch);
} test_scratch SEC(".maps");

/* [0] samples of the target, [1] lost (ring buffer full) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} test_stats SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&test_stats, &which);

	if (v)
		(*v)++;
}

SEC("perf_event")
int pystack_test(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), t0;
	__u32 tgid = id >> 32;
	struct pystack_test_event *ev;
	const struct py_proc_cfg *cfg;
	struct task_struct *task;
	struct py_walk_mem mem;
	struct test_scratch *ps;
	struct pt_regs uregs;
	__u32 zero = 0;

	if (tgid != target_tgid)
		return 0;
	cfg = bpf_map_lookup_elem(&test_py_procs, &tgid);
	if (!cfg)
		return 0;
	if (stop_after_walk) {
		__u32 *armed = bpf_map_lookup_elem(&test_armed, &zero);

		if (!armed || __sync_val_compare_and_swap(armed, 1, 0) != 1)
			return 0;
	}
	count(0);
	ev = bpf_ringbuf_reserve(&test_events, sizeof(*ev), 0);
	if (!ev) {
		count(1);
		return 0;
	}
	task = bpf_get_current_task_btf();
	ev->pid = tgid;
	ev->tid = (__u32)id;
	ev->fsbase = BPF_CORE_READ(task, thread.fsbase);
	ev->status = 0;
	ev->flags = 0;
	ev->user_mode = ctx->regs.ip < 0x800000000000ULL; /* the sample hit user code */
	/* Where the thread is in user space: the sample's registers, or those saved at kernel
	 * entry. */
	uregs = *(struct pt_regs *)&ctx->regs;
	if (!ev->user_mode &&
	    bpf_probe_read_kernel(&uregs, sizeof(uregs), (void *)bpf_task_pt_regs(task)))
		__builtin_memset(&uregs, 0, sizeof(uregs));
	ev->user_ip = uregs.ip;
	ev->user_sp = uregs.sp;
	t0 = bpf_ktime_get_ns();
	ps = bpf_map_lookup_elem(&test_scratch, &zero);
	if (!ps) {
		bpf_ringbuf_discard(ev, 0);
		return 0;
	}
	mem = (struct py_walk_mem){.s = &ps->ps, .page = no_page ? NULL : ps->page};
	ps->ps.page_frames = 0;
	ev->n = py_walk_in(cfg, bpf_get_current_pid_tgid() >> 32, ev->fsbase, NULL, ev->frames,
			   &mem, &ev->status, &ev->flags);
	ev->page_frames = ps->ps.page_frames;
	ev->walk_ns = bpf_ktime_get_ns() - t0;
	/* The signal is delivered before the thread returns to user mode. */
	ev->stop_err = stop_after_walk ? bpf_send_signal(SIGSTOP) : 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}
