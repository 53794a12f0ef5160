// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The off-CPU stack fetcher (record --off-cpu): a sleepable task iterator the recorder runs over
 * the threads of a target when the sweep (sampler.bpf.c) left blocks whose stack it could not
 * take: blocked threads that neither shared their memory with the CPU that swept them nor were
 * woken by a thread of their process (a sleep, a timed wait, I/O, a wait that lasts: a hung
 * process). A sleepable program reads any task's memory (bpf_copy_from_user_task), so it takes
 * the stack of such a block while it lasts, once, as a sample (SAMPLE_F_OFFCPU_ITER) into the
 * sampler's ring buffer. Its own scratch memory: it runs preemptible, and the sampler's per-CPU
 * buffers may be in use by an interrupt on the same CPU.
 *
 * The maps of shared_maps.bpf.h and py_tstates are the sampler's (sampling__share_maps gives
 * them to this object before it is loaded).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "sampler.h"
#include "shared_maps.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace before load, as the sampler's. */
const volatile __u32 stack_size = SAMPLER_MAX_STACK;
const volatile bool want_kernel = false;
const volatile bool want_python = true;

/* What the runs did, read by the recorder. */
__u64 iter_sent, iter_torn, iter_lost;

#define PY_AREA 0x8000 /* as sampler.bpf.c's */

#define UREAD_TASK /* the threads read are another process's: bpf_copy_from_user_task */
#include "uregs.bpf.h"

struct iter_scratch {
	struct sample_event hdr;
	__u8 data[PY_AREA + UCTX_STACK_AREA + UCTX_CHUNK_MAX];
};

/* One buffer: only the recorder's thread runs this program, one run at a time. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iter_scratch);
} iter_scratch SEC(".maps");

#define PY_CODE_CACHE /* pystack.bpf.h: code objects' headers kept (py_code_cache) */
#include "pystack.bpf.h"
#include "samplefill.bpf.h"

SEC("iter.s/task")
int off_fetch(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	__u32 zero = 0, ktid, size;
	struct iter_scratch *s;
	struct off_thread *th;
	struct off_want *want;
	__u64 block;

	if (!task)
		return 0;
	want = bpf_task_storage_get(&off_want, task, 0, 0);
	if (!want || !want->block)
		return 0;
	block = want->block;
	barrier(); /* block before since (struct off_want) */
	py_code_since = want->since_block == block ? want->since : 0;
	want->block = 0;
	if (task->on_cpu || task->exit_state || task->nvcsw + task->nivcsw != block)
		return 0; /* that block is over (or the thread ended) */
	ktid = task->pid;
	th = bpf_map_lookup_elem(&off_threads, &ktid);
	s = bpf_map_lookup_elem(&iter_scratch, &zero);
	if (!th || !s)
		return 0;
	size = sizeof(s->hdr) +
	       blocked_sample(&s->hdr, s->data, task, task, th, block, SAMPLE_F_OFFCPU_ITER);
	/* Reading may sleep: a thread that ran meanwhile left a torn copy. */
	if (task->on_cpu || task->nvcsw + task->nivcsw != block) {
		iter_torn++;
		return 0;
	}
	if (size > sizeof(*s))
		return 0;
	if (bpf_ringbuf_output(&events, s, size, BPF_RB_NO_WAKEUP))
		iter_lost++;
	else
		iter_sent++;
	return 0;
}
