// SPDX-License-Identifier: MIT
/* offcpu: off-CPU segments joined with their blocks' stacks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bmap.h"
#include "base/util.h"
#include "bpf/waitclass.h"
#include "record/offcpu.h"

/* A segment waiting for its block's stack. */
struct waiting {
	int64_t ts;
	uint32_t state;
	uint32_t observations;
	uint64_t ns;
};

struct oc_thread {
	pid_t pid, tid;
	bool known;	   /* block is valid */
	uint64_t block;	   /* its latest block */
	uint64_t stack_id; /* that block's stack; 0: not (yet) known */
	bool fallback;	   /* stack_id is the fallback */
	bool exited;	   /* its exit was seen: a stack of any block is a new thread's */
	uint64_t ip;	   /* its instruction pointer in that block (for the fallback) */
	struct waiting *wait;
	size_t nwait, capwait;
	uint64_t wait_since; /* monotonic ns when the first of them came */
	/* The last on-CPU samples of its latest runs (offcpu__oncpu), by csw: a few, since a
	 * block's segments come after the samples of the run that ends it. */
	struct {
		uint64_t csw, stack_id;
	} runs[4];
	unsigned int nextrun;
};

struct offcpu {
	struct store *st;
	offcpu_fallback_fn fb;
	void *fb_ctx;
	struct oc_thread *threads;
	size_t nthreads, capthreads;
	struct bmap *idx; /* (pid, tid) -> index + 1 */
	struct offcpu_stats stats;
};

struct offcpu *offcpu__new(struct store *st, offcpu_fallback_fn fb, void *ctx)
{
	struct offcpu *oc = calloc(1, sizeof(*oc));

	if (!oc || !(oc->idx = bmap__new())) {
		free(oc);
		errno = ENOMEM;
		return NULL;
	}
	oc->st = st;
	oc->fb = fb;
	oc->fb_ctx = ctx;
	return oc;
}

void offcpu__free(struct offcpu *oc)
{
	size_t i;

	if (!oc)
		return;
	for (i = 0; i < oc->nthreads; i++)
		free(oc->threads[i].wait);
	free(oc->threads);
	bmap__free(oc->idx);
	free(oc);
}

/* The thread's state, created if new; NULL on ENOMEM. */
static struct oc_thread *get_thread(struct offcpu *oc, pid_t pid, pid_t tid)
{
	uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid, *slot;
	struct oc_thread *th;
	int inserted;

	slot = bmap__upsert(oc->idx, &key, sizeof(key), 0, &inserted);
	if (!slot)
		return NULL;
	if (!inserted && *slot)
		return &oc->threads[*slot - 1];
	if (grow_array(&oc->threads, &oc->capthreads, oc->nthreads + 1, sizeof(*oc->threads)))
		return NULL;
	th = &oc->threads[oc->nthreads];
	memset(th, 0, sizeof(*th));
	th->pid = pid;
	th->tid = tid;
	*slot = ++oc->nthreads;
	return th;
}

static int count(struct offcpu *oc, struct oc_thread *th, int64_t ts, uint32_t state,
		 uint32_t observations, uint64_t ns)
{
	oc->stats.segments++;
	oc->stats.observations += observations;
	oc->stats.ns += ns;
	if (th->fallback)
		oc->stats.ns_no_stack += ns;
	return store__count_state(oc->st, th->pid, th->tid, th->stack_id, ts, state, observations,
				  ns);
}

/* Count the waiting segments under the thread's stack, or the fallback if it has none. */
static int release(struct offcpu *oc, struct oc_thread *th)
{
	size_t i;
	int err = 0;

	if (!th->nwait)
		return 0;
	if (!th->stack_id && th->wait[0].state == WAIT_RUNNABLE) {
		/* Preempted: where it was last sampled running, just before. */
		for (i = 0; i < ARRAY_SIZE(th->runs); i++) {
			if (th->runs[i].stack_id && th->runs[i].csw + 1 == th->block) {
				th->stack_id = th->runs[i].stack_id;
				oc->stats.blocks_run_stack++;
				break;
			}
		}
	}
	if (!th->stack_id) {
		err = oc->fb(oc->fb_ctx, th->pid, th->tid, th->ip, &th->stack_id);
		if (err)
			return err;
		th->fallback = true;
		oc->stats.blocks_no_stack++;
	}
	for (i = 0; i < th->nwait && !err; i++)
		err = count(oc, th, th->wait[i].ts, th->wait[i].state, th->wait[i].observations,
			    th->wait[i].ns);
	th->nwait = 0;
	return err;
}

/* Make @block the thread's latest, after counting what waited for the previous one. */
static int new_block(struct offcpu *oc, struct oc_thread *th, uint64_t block)
{
	int err = release(oc, th);

	th->known = true;
	th->block = block;
	th->stack_id = 0;
	th->fallback = false;
	th->ip = 0;
	return err;
}

int offcpu__stack(struct offcpu *oc, pid_t pid, pid_t tid, uint64_t block, uint64_t stack_id)
{
	struct oc_thread *th = get_thread(oc, pid, tid);
	int err = 0;

	if (!th)
		return -ENOMEM;
	/* Block numbers only grow: an older one's stack comes too late to be of use (unless the
	 * tid is a new thread's). */
	if (th->known && block < th->block && !th->exited)
		return 0;
	if (!th->known || block != th->block || th->exited)
		err = new_block(oc, th, block);
	th->exited = false;
	if (th->stack_id && !th->fallback)
		return err; /* taken twice (in the sweep and at the wake-up): the first stays */
	th->stack_id = stack_id;
	th->fallback = false;
	oc->stats.blocks++;
	return release(oc, th) ?: err;
}

int offcpu__segment(struct offcpu *oc, const struct offcpu_event *ev, int64_t ts, uint64_t now_ns)
{
	struct oc_thread *th = get_thread(oc, ev->pid, ev->tid);
	struct waiting *w;
	int err = 0;

	if (!th)
		return -ENOMEM;
	/* After its exit, the segment of its last block may still come (the sweep sends it when
	 * it finds the thread gone); anything else is a new thread with the same tid. */
	if (!th->known || ev->block != th->block)
		err = new_block(oc, th, ev->block);
	th->exited = false;
	if (ev->ip)
		th->ip = ev->ip;
	if (th->stack_id)
		return count(oc, th, ts, ev->state, ev->observations, ev->ns) ?: err;
	if (grow_array(&th->wait, &th->capwait, th->nwait + 1, sizeof(*th->wait)))
		return -ENOMEM;
	if (!th->nwait)
		th->wait_since = now_ns;
	w = &th->wait[th->nwait++];
	w->ts = ts;
	w->state = ev->state;
	w->observations = ev->observations;
	w->ns = ev->ns;
	return err;
}

int offcpu__expire(struct offcpu *oc, uint64_t now_ns, bool all)
{
	struct oc_thread *th;
	size_t i;
	int err = 0;

	for (i = 0; i < oc->nthreads && !err; i++) {
		th = &oc->threads[i];
		if (th->nwait && (all || now_ns - th->wait_since >= OFFCPU_WAIT_NS))
			err = release(oc, th);
	}
	return err;
}

int offcpu__thread_exit(struct offcpu *oc, pid_t pid, pid_t tid)
{
	uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid;
	uint64_t *slot = bmap__find(oc->idx, &key, sizeof(key));
	struct oc_thread *th;
	int err;

	if (!slot || !*slot)
		return 0;
	th = &oc->threads[*slot - 1];
	err = release(oc, th);
	th->exited = true;
	return err;
}

int offcpu__oncpu(struct offcpu *oc, pid_t pid, pid_t tid, uint64_t csw, uint64_t stack_id)
{
	struct oc_thread *th = get_thread(oc, pid, tid);
	unsigned int i;

	if (!th)
		return -ENOMEM;
	for (i = 0; i < ARRAY_SIZE(th->runs); i++) {
		if (th->runs[i].csw == csw) {
			th->runs[i].stack_id = stack_id; /* the latest sample of the run */
			return 0;
		}
	}
	i = th->nextrun++ % ARRAY_SIZE(th->runs);
	th->runs[i].csw = csw;
	th->runs[i].stack_id = stack_id;
	return 0;
}

void offcpu__stats(const struct offcpu *oc, struct offcpu_stats *out)
{
	*out = oc->stats;
}
