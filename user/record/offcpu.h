/* SPDX-License-Identifier: MIT */
/*
 * offcpu: off-CPU time into the recording (record --off-cpu). The sweep (bpf/sampler.bpf.c)
 * sends segments, time a thread spent off its CPU in one block and one state (struct
 * offcpu_event), and, once per block, the block's stack (a SAMPLE_F_OFFCPU sample, which the
 * recorder turns into a stack id). This module joins the two and counts each segment under its
 * block's stack in the store (store__count_state).
 *
 * A block's stack usually comes before its segments (it is taken when the block is first seen,
 * at its wake-up, by the thread as it resumes, or by the fetcher while the block lasts);
 * segments that come first wait for
 * it. A block whose stack never comes (a short block woken from outside the process, a thread
 * preempted) is counted, once another block of the thread begins, after OFFCPU_WAIT_NS, or at
 * the end: a block that began preempted (its first segment 'runnable') under the stack of the
 * thread's last on-CPU sample of the run just before it (offcpu__oncpu), if there was one;
 * else under a stack the caller builds from the thread's instruction pointer (the fallback).
 *
 * Ordering comes from the ring buffer: records are read in the order they were reserved.
 */
#ifndef PROBING_OFFCPU_H
#define PROBING_OFFCPU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/sampler.h"
#include "record/store.h"

struct offcpu;

/* How long segments wait for their block's stack (monotonic ns). */
#define OFFCPU_WAIT_NS 2000000000ULL

/*
 * The fallback stack of a block of thread @tid of @pid whose stack was not taken: built from
 * @ip, its user instruction pointer (0: unknown). 0 and *@stack_id, or -errno.
 */
typedef int (*offcpu_fallback_fn)(void *ctx, pid_t pid, pid_t tid, uint64_t ip, uint64_t *stack_id);

struct offcpu_stats {
	uint64_t segments;	   /* segments counted */
	uint64_t observations;	   /* sweeps that found a thread off its CPU */
	uint64_t ns;		   /* off-CPU nanoseconds counted */
	uint64_t blocks;	   /* blocks with a stack taken */
	uint64_t blocks_run_stack; /* preempted blocks counted under the run's last sample */
	uint64_t blocks_no_stack;  /* blocks counted under the fallback stack */
	uint64_t ns_no_stack;	   /* their nanoseconds */
};

/* New joiner counting into @st, building fallback stacks with @fb(@ctx, ...). NULL on ENOMEM. */
struct offcpu *offcpu__new(struct store *st, offcpu_fallback_fn fb, void *ctx);

/* Free (what still waits is dropped: call offcpu__expire with @all first). NULL is a no-op. */
void offcpu__free(struct offcpu *oc);

/*
 * The stack of block @block of thread @tid of @pid is @stack_id: count the segments of the
 * block that wait for it. A stack of an older block than the thread's latest is ignored.
 * 0 or -errno.
 */
int offcpu__stack(struct offcpu *oc, pid_t pid, pid_t tid, uint64_t block, uint64_t stack_id);

/*
 * A segment (@ev, its pid and tid as the recorder numbers them; @ts its second, unix time):
 * counted under its block's stack, or kept until the stack comes. A segment of another block
 * than the thread's latest ends that block: what still waited for its stack is counted under
 * the fallback. @now_ns: monotonic now. 0 or -errno.
 */
int offcpu__segment(struct offcpu *oc, const struct offcpu_event *ev, int64_t ts, uint64_t now_ns);

/*
 * Count what has waited for a stack since before @now_ns - OFFCPU_WAIT_NS, or with @all
 * everything, under the fallback. 0 or -errno.
 */
int offcpu__expire(struct offcpu *oc, uint64_t now_ns, bool all);

/*
 * Thread @tid of @pid exited: count what waits. Its last segment may still come; after that,
 * its tid may be a new thread's.
 */
int offcpu__thread_exit(struct offcpu *oc, pid_t pid, pid_t tid);

/*
 * An on-CPU sample of thread @tid of @pid with stack @stack_id, taken when the thread had made
 * @csw context switches (sample_event.block): the stack a preempted block @csw + 1 is counted
 * under if its own is not taken. 0 or -errno.
 */
int offcpu__oncpu(struct offcpu *oc, pid_t pid, pid_t tid, uint64_t csw, uint64_t stack_id);

void offcpu__stats(const struct offcpu *oc, struct offcpu_stats *out);

#endif
