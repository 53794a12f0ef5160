/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The sampler's maps that the other programs use too, declared once, here: sampler.bpf.c
 * owns them (userspace sizes them before load), comm.bpf.c and offcpu_fetch.bpf.c include this
 * header and, before they are loaded, get the sampler's maps in place of their own copies
 * (sampling__share_maps, user/record/sampling.c, by these names). py_tstates is the walker's:
 * pystack.bpf.h. For inclusion after vmlinux.h, bpf_helpers.h and sampler.h.
 */
#ifndef PROBING_SHARED_MAPS_BPF_H
#define PROBING_SHARED_MAPS_BPF_H

/* Processes to sample: tgid -> unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");

/* Python configuration of target processes that run CPython: tgid -> config. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct py_proc_cfg);
} py_procs SEC(".maps");

/* Every event to userspace: samples, process events, off-CPU records, collectives. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by userspace */
} events SEC(".maps");

/*
 * The flags of a record sent to events: no wake-up (the reader drains the buffer at its own
 * pace) while it is less than an eighth full; past that, wake the reader at once, so that a
 * burst does not fill it while the reader sleeps.
 */
static __always_inline __u64 events_wakeup(void)
{
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);

	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > size / 8 ? BPF_RB_FORCE_WAKEUP
									: BPF_RB_NO_WAKEUP;
}

/* The threads of the targets the off-CPU sweep looks at (sampler.h: struct off_thread): kernel
 * tid -> slot in off_slots. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} off_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SAMPLER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct off_thread);
} off_slots SEC(".maps");

/* The sweep's thread @ktid (its slot), or NULL. */
static __always_inline struct off_thread *off_thread_of(__u32 ktid)
{
	__u32 *slot = bpf_map_lookup_elem(&off_threads, &ktid);
	struct off_thread *th;

	if (!slot)
		return NULL;
	th = bpf_map_lookup_elem(&off_slots, slot);
	return th && th->ktid == ktid ? th : NULL;
}

/* A block whose stack the sweep could not take (struct off_want), for on_waking and the
 * fetcher. Task storage: on_waking runs for every wake-up on the machine, and a task without
 * storage is told apart at once, without a hash lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct off_want);
} off_want SEC(".maps");

/* The kernel tids of the threads with such a block, in the order the sweep found them: the
 * fetcher (offcpu_fetch.bpf.c) takes them out. A tid may be there twice (a later block of a
 * thread whose earlier one was not fetched yet): off_want says which block is wanted. */
struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, OFF_QUEUE_MAX);
	__type(value, __u32);
} off_queue SEC(".maps");
#endif
