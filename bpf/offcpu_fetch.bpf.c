// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The off-CPU stack fetcher (record --off-cpu): a sleepable program the recorder runs (one
 * BPF_PROG_TEST_RUN) when the sweep (sampler.bpf.c) left blocks whose stack it could not
 * take: blocked threads that neither shared their memory with the CPU that swept them nor were
 * woken by a thread of their process (a sleep, a timed wait, I/O, a wait that lasts: a hung
 * process). The sweep queues their kernel tids (off_queue); off_fetch takes each from the
 * queue, finds its task (bpf_task_from_pid) and, a sleepable program reading any task's memory
 * (bpf_copy_from_user_task), takes the stack of the block while it lasts, once, as a sample
 * (SAMPLE_F_OFFCPU_FETCH) into the sampler's ring buffer: only the threads that have such a
 * block are looked at, in one system call for all the targets. Where the sweep also asks the
 * threads for their stacks as they resume (sampler.bpf.c, off_resume), only the blocks wanted
 * for fetch_after_ns are taken: the queue's younger ones are left for a later run. Its own
 * scratch memory: it runs preemptible, and the sampler's per-CPU buffers may be in use by an
 * interrupt on the same CPU.
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

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace before load, as the sampler's. */
const volatile __u32 stack_size = SAMPLER_MAX_STACK;
const volatile bool want_kernel = false;
const volatile bool want_python = true;

/* What the runs did, read by the recorder. */
__u64 fetch_sent, fetch_torn, fetch_lost;

/*
 * Set by the recorder: a block is fetched only once its stack has been wanted this long
 * (OFFCPU_FETCH_AFTER_NS where the sweep asks the thread itself for it as it resumes; 0: at
 * once, and for the last fetch of a recording). fetch_next_ns, written by each run: when the
 * oldest block it left in the queue comes due (bpf_ktime_get_ns); 0: none left.
 */
__u64 fetch_after_ns;
__u64 fetch_next_ns;

#define PY_AREA 0x8000 /* as sampler.bpf.c's */

#define UREAD_TASK /* the threads read are another process's: bpf_copy_from_user_task */
#include "uregs.bpf.h"

#define PY_CODE_CACHE /* pystack.bpf.h: code objects' headers kept (py_code_cache) */
#include "pystack.bpf.h"

/* Frames copied from the innermost frame's page rather than read; code object headers found
 * in py_code_cache, and read. */
__u64 py_page_frames, py_code_hits, py_code_reads;

struct fetch_scratch {
	struct sample_event hdr;
	__u8 data[PY_AREA + UCTX_STACK_AREA + UCTX_CHUNK_MAX];
	struct py_scratch ps;	 /* the Python walk's header copies (not sent) */
	__u8 page[PY_PAGE_SIZE]; /* and its copy of the innermost frame's page */
	struct py_code_hdr code_fill;
};

/* One buffer: only the recorder's thread runs this program, one run at a time. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fetch_scratch);
} fetch_scratch SEC(".maps");

#include "samplefill.bpf.h"

/* Take the stack of the block @task (kernel tid @ktid) is in, if the sweep still wants it. */
static __always_inline void fetch_task(struct task_struct *task, __u32 ktid)
{
	__u32 zero = 0, size;
	struct fetch_scratch *s;
	struct py_walk_mem mem;
	struct off_thread *th;
	struct off_want *want;
	__u64 block, since;

	want = bpf_task_storage_get(&off_want, task, 0, 0);
	if (!want || !want->block)
		return; /* taken on its wake-up, or queued twice */
	block = want->block;
	barrier(); /* block before since (struct off_want) */
	since = want->since_block == block ? want->since : 0;
	want->block = 0;
	if (task->on_cpu || task->exit_state || task->nvcsw + task->nivcsw != block)
		return; /* that block is over (or the thread ended) */
	th = off_thread_of(ktid);
	s = bpf_map_lookup_elem(&fetch_scratch, &zero);
	if (!th || !s)
		return;
	mem = (struct py_walk_mem){
		.s = &s->ps, .page = s->page, .code_fill = &s->code_fill, .code_since = since};
	size = sizeof(s->hdr) +
	       blocked_sample(&s->hdr, s->data, task, task, th, block, SAMPLE_F_OFFCPU_FETCH, &mem);
	py_page_frames += s->ps.page_frames;
	py_code_hits += s->ps.code_hits;
	py_code_reads += s->ps.code_reads;
	s->ps.page_frames = s->ps.code_hits = s->ps.code_reads = 0;
	/* Reading may sleep: a thread that ran meanwhile left a torn copy. */
	if (task->on_cpu || task->nvcsw + task->nivcsw != block) {
		fetch_torn++;
		return;
	}
	if (size > sizeof(*s))
		return;
	if (bpf_ringbuf_output(&events, s, size, events_wakeup()))
		fetch_lost++;
	else
		fetch_sent++;
}

/*
 * Whether the block @task is wanted for is not due yet (wanted for less than fetch_after_ns,
 * since the sweep first saw it at want->since): then fetch_next_ns says when it will be.
 */
static __always_inline bool not_due(struct task_struct *task, __u64 now)
{
	struct off_want *want = bpf_task_storage_get(&off_want, task, 0, 0);
	__u64 block, since;

	if (!want)
		return false;
	block = want->block;
	barrier(); /* block before since (struct off_want) */
	since = want->since;
	if (!block || want->since_block != block || now - since >= fetch_after_ns)
		return false;
	fetch_next_ns = since + fetch_after_ns;
	return true;
}

/* One tid from the queue (a bpf_loop callback); 1 once it is empty or its head is not due. */
static long fetch_next(__u32 i, __u64 *now)
{
	struct task_struct *task;
	__u32 ktid;

	if (bpf_map_peek_elem(&off_queue, &ktid))
		return 1;
	task = bpf_task_from_pid(ktid);
	if (task && fetch_after_ns && not_due(task, *now)) {
		bpf_task_release(task);
		return 1; /* the queue is in the order the sweep saw the blocks */
	}
	if (bpf_map_pop_elem(&off_queue, &ktid) || !task) {
		if (task)
			bpf_task_release(task);
		return 0; /* it exited */
	}
	fetch_task(task, ktid);
	bpf_task_release(task);
	return 0;
}

SEC("syscall")
int off_fetch(void *ctx)
{
	__u64 now = bpf_ktime_get_ns();

	fetch_next_ns = 0;
	bpf_loop(OFF_QUEUE_MAX, fetch_next, &now, 0);
	return 0;
}

/*
 * The same for kernels that do not let a syscall program call kfuncs (bpf_task_from_pid; older
 * kernels refuse off_fetch): a sleepable task iterator the recorder runs over every thread of
 * each target, which takes the stacks the sweep wants (task storage) and leaves the queue
 * alone (the sweep does not fill it then: off_queue_on).
 */
SEC("iter.s/task")
int off_fetch_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;

	if (task)
		fetch_task(task, task->pid);
	return 0;
}
