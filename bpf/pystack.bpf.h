/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The BPF side of the Python stack walker, for inclusion by sampler.bpf.c (and the test
 * program tests/bpf/pystack_test.bpf.c) after vmlinux.h, bpf_helpers.h, bpf_core_read.h, bpf_tracing.h
 * and sampler.h. The rules of the walk are in pywalk.h, shared with the userspace walker.
 *
 *   __u32 py_walk_in(cfg, tgid, fsbase, task, out, scratch, &status, &flags)
 *
 * finds the *sampled* thread's PyThreadState (not the GIL holder: the thread may be running
 * native code with the GIL released) by emulating glibc's pthread_getspecific() on the
 * interpreter's TSS key from the thread's fs base, validates it (tstate->thread_id ==
 * pthread_self() == fs base), falls back to the py_tstates map userspace fills, and copies
 * the frame chain leaf first as struct py_frame_rec. Per frame: one read of the frame header
 * and one of the code object header into the caller's scratch (struct py_scratch: each
 * context that can run while another is in a walk on the same CPU has its own), fields
 * extracted from the copies. No sleeping helpers, bounded work: it runs in the sampled CPU's
 * interrupt context, in a thread's task work, or in the fetcher.
 *
 * Memory is read with user_read (uregs.bpf.h): the address space loaded on the CPU (the
 * sampled thread's, or a blocked thread's from a thread of the same process: off-CPU stacks),
 * or with UREAD_TASK that of the task given to py_walk (the off-CPU stack fetcher).
 */
#ifndef PROBING_PYSTACK_BPF_H
#define PROBING_PYSTACK_BPF_H

#include "pywalk.h"
#include "uregs.bpf.h"

/* pthread_t -> PyThreadState *, per process (struct py_tstate_key); filled by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct py_tstate_key);
	__type(value, __u64);
} py_tstates SEC(".maps");

/* Copies of the current frame and code object headers (+ 8: a field read at the last masked
 * offset stays inside). */
struct py_scratch {
	__u8 frame[PY_HDR_MAX + 8];
	__u8 code[PY_HDR_MAX + 8];
};

#ifdef PY_CODE_CACHE
/*
 * Code object headers the off-CPU fetcher read, by process and address, each with the time
 * just before it was read: reading another process's memory (bpf_copy_from_user_task) costs a
 * page walk each time, and the threads of a process run the same functions. A frame holds its
 * code object (or the function that holds it) from the frame's start on, so a blocked thread's
 * code objects stay at their addresses while the thread stays blocked (the fetcher drops a
 * copy whose thread ran meanwhile): a header read after the block began is that object's, and
 * the fields the walk uses (type, name, file, first line, first traceable instruction) never
 * change. One read before the block began is not used: the address may have held another
 * object then (freed since, a process that exec'd, a pid used again).
 */
struct py_code_key {
	__u32 pid, _pad;
	__u64 code;
};

struct py_code_hdr {
	__u64 read_ns;
	__u8 hdr[PY_HDR_MAX + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct py_code_key);
	__type(value, struct py_code_hdr);
} py_code_cache SEC(".maps");

/* Where a header is read before it goes into py_code_cache (too large for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_code_hdr);
} py_code_fill SEC(".maps");

/* The block of the thread being walked began before this time; 0: use no cached header. Set
 * by the program for each thread (one walk at a time: the fetcher's runs do not overlap). */
__u64 py_code_since;
__u64 py_code_hits, py_code_reads;
#endif

#ifdef PY_FRAME_PAGE
/*
 * A copy of the memory page that holds the walked thread's innermost frame, read at once
 * (PY_FRAME_PAGE: the off-CPU fetcher, for which each read of another process's memory is a
 * page walk). From 3.11 on a thread's frames lie side by side in its data stack, the outer
 * ones below the inner ones: most of a stack's frames are in that page, and they are copied
 * from it rather than read one by one. A frame not wholly in it is read as before. The thread
 * stays blocked while it is walked (the fetcher drops a copy whose thread ran meanwhile), so
 * the page's copy holds what each read would have.
 */
#define PY_PAGE_SIZE 4096

struct py_page {
	__u8 b[PY_PAGE_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_page);
} py_frame_page SEC(".maps");

__u64 py_page_frames; /* frames copied from the page rather than read */
#endif

struct py_walk_ctx {
	const struct py_proc_cfg *cfg;
	struct task_struct *task; /* whose memory (UREAD_TASK) */
	struct py_scratch *s;
	struct py_frame_rec *out;
	struct py_walk w;
	__u32 tgid;
#ifdef PY_FRAME_PAGE
	const __u8 *page; /* the copy of the page at page_addr, or NULL */
	__u64 page_addr;
#endif
};

/* Copy @sz (<= PY_HDR_MAX) bytes of the frame at @frame into @dst; 0 or an error. With
 * PY_FRAME_PAGE, from the copy of its page where it lies wholly in it. */
static __always_inline long py_read_frame(struct py_walk_ctx *c, __u8 *dst, __u32 sz, __u64 frame)
{
#ifdef PY_FRAME_PAGE
	if (c->page && frame >= c->page_addr && frame - c->page_addr <= PY_PAGE_SIZE - sz) {
		py_page_frames++;
		return bpf_probe_read_kernel(
			dst, sz, c->page + ((frame - c->page_addr) & (PY_PAGE_SIZE - 1)));
	}
#endif
	return user_read(c->task, dst, sz, (const void *)frame);
}

/* Copy @sz (<= PY_HDR_MAX) bytes of the code object at @code into @dst; 0 or an error. With
 * PY_CODE_CACHE, from py_code_cache where that holds this object's header. */
static __always_inline long py_read_code(struct py_walk_ctx *c, __u8 *dst, __u32 sz, __u64 code)
{
#ifdef PY_CODE_CACHE
	struct py_code_key k = {.pid = c->tgid, .code = code};
	__u64 since = py_code_since;
	struct py_code_hdr *h;
	__u32 zero = 0;

	if (since) {
		h = bpf_map_lookup_elem(&py_code_cache, &k);
		if (h && h->read_ns > since) {
			py_code_hits++;
			return bpf_probe_read_kernel(dst, sz, h->hdr);
		}
		h = bpf_map_lookup_elem(&py_code_fill, &zero);
		if (h) {
			py_code_reads++;
			h->read_ns = bpf_ktime_get_ns();
			if (user_read(c->task, h->hdr, sz, (const void *)code))
				return -1;
			bpf_map_update_elem(&py_code_cache, &k, h, BPF_ANY);
			return bpf_probe_read_kernel(dst, sz, h->hdr);
		}
	}
#endif
	return user_read(c->task, dst, sz, (const void *)code);
}

/* One step of the walk (pywalk.h): the bpf_loop callback. Returns 1 to stop. */
static long py_walk_step(__u32 idx, void *arg)
{
	struct py_walk_ctx *c = arg;
	const struct py_proc_cfg *cfg = c->cfg;
	struct py_scratch *s = c->s;
	__u32 sz;

	if (py_walk_at_end(&c->w))
		return 1;
	sz = py_frame_hdr_size(cfg);
	if (!sz || sz > PY_HDR_MAX || py_read_frame(c, s->frame, sz, c->w.frame)) {
		py_walk_fail(&c->w);
		return 1;
	}
	switch (py_walk_frame(cfg, &c->w, s->frame, c->out)) {
	case PY_NEXT_FRAME:
		return 0;
	case PY_NEXT_CODE:
		break;
	default:
		return 1;
	}
	sz = py_code_hdr_size(cfg);
	if (!sz || py_read_code(c, s->code, sz, c->w.code)) {
		py_walk_fail(&c->w);
		return 1;
	}
	return py_walk_code(cfg, &c->w, s->frame, s->code, c->out) == PY_NEXT_STOP;
}

/* Where the thread state bound to the thread whose struct pthread is at @fsbase is: 3.15+ a
 * thread-local variable (cfg->tls_tstate), before the slot pthread_getspecific(key) reads
 * (glibc). The same for the thread's life while the interpreter lives (its key is made once);
 * 0 if none. */
static __always_inline __u64 py_tss_slot(const struct py_proc_cfg *cfg, __u64 fsbase,
					 struct task_struct *task)
{
	__u64 base, slot, l2 = 0;
	__s32 initialized = 0;
	__u32 key = 0;

	/* 3.15+: a thread-local variable, below the thread pointer (TLS variant II). */
	if (cfg->tls_tstate && fsbase)
		return fsbase + (__s64)cfg->tls_tstate;
	if (!cfg->tss_key_addr || cfg->pthread_specific < 0 || !fsbase)
		return 0;
	if (user_read(task, &initialized, sizeof(initialized), (const void *)cfg->tss_key_addr) ||
	    !initialized ||
	    user_read(task, &key, sizeof(key),
		      (const void *)(cfg->tss_key_addr + cfg->off.tss_key)))
		return 0;
	base = fsbase + (__u32)cfg->pthread_specific;
	/* struct pthread_key_data { uintptr_t seq; void *data; } specific_1stblock[32], then
	 * struct pthread_key_data *specific[32] (glibc nptl/descr.h, pthread_getspecific.c). */
	if (key < 32) {
		slot = base + key * 16 + 8;
	} else if (key < 1024) {
		if (user_read(task, &l2, sizeof(l2),
			      (const void *)(base + 32 * 16 + (key / 32) * 8)) ||
		    !l2)
			return 0;
		slot = l2 + (key % 32) * 16 + 8;
	} else {
		return 0;
	}
	return slot;
}

/* The thread state in the slot @slot (py_tss_slot); 0 if none. */
static __always_inline __u64 py_slot_tstate(__u64 slot, struct task_struct *task)
{
	__u64 value = 0;

	if (!slot || user_read(task, &value, sizeof(value), (const void *)slot))
		return 0;
	return value;
}

/* The thread state bound to the thread whose struct pthread is at @fsbase (py_tss_slot). */
static __always_inline __u64 py_tss_tstate(const struct py_proc_cfg *cfg, __u64 fsbase,
					   struct task_struct *task)
{
	return py_slot_tstate(py_tss_slot(cfg, fsbase, task), task);
}

/* The thread state belongs to the thread at @fsbase: its thread_id is pthread_self(). */
static __always_inline bool py_tstate_valid(const struct py_proc_cfg *cfg, __u64 tstate,
					    __u64 fsbase, struct task_struct *task)
{
	__u64 tid = 0;

	return tstate &&
	       !user_read(task, &tid, sizeof(tid),
			  (const void *)(tstate + cfg->off.ts_thread_id)) &&
	       tid == fsbase;
}

/* The innermost frame of @tstate (0 if none); non-zero if unreadable. */
static __always_inline long py_first_frame(const struct py_proc_cfg *cfg, __u64 tstate,
					   __u64 *frame, struct task_struct *task)
{
	__u16 off, off2;
	__u64 p = 0;

	*frame = 0;
	if (py_first_frame_offsets(cfg, &off, &off2) == 1)
		return user_read(task, frame, 8, (const void *)(tstate + off));
	if (user_read(task, &p, 8, (const void *)(tstate + off)))
		return -1;
	if (!p)
		return 0;
	return user_read(task, frame, 8, (const void *)(p + off2));
}

/* py_walk_in, from @tstate: the thread state the thread's slot holds (py_tss_slot,
 * py_slot_tstate; 0 if none), validated here, the py_tstates map consulted if it fails; for
 * callers that keep a thread's slot. */
static __always_inline __u32 py_walk_in_from(const struct py_proc_cfg *cfg, __u32 tgid,
					     __u64 fsbase, __u64 tstate, struct task_struct *task,
					     struct py_frame_rec *out, struct py_scratch *s,
					     __s32 *status, __u32 *flags)
{
	struct py_walk_ctx c = {.s = s};
	struct py_tstate_key key = {};
	__u64 frame, *mapped;

	if (!py_tstate_valid(cfg, tstate, fsbase, task)) {
		key.pid = tgid;
		key.pthread = fsbase;
		mapped = bpf_map_lookup_elem(&py_tstates, &key);
		if (!mapped) {
			*status = PY_NO_TSTATE;
			return 0;
		}
		tstate = *mapped;
		if (!py_tstate_valid(cfg, tstate, fsbase, task)) {
			*status = PY_BAD_TSTATE;
			return 0;
		}
	}
	if (py_first_frame(cfg, tstate, &frame, task)) {
		*status = PY_READ_ERROR;
		return 0;
	}
	c.cfg = cfg;
	c.task = task;
	c.out = out;
	c.tgid = tgid;
#ifdef PY_FRAME_PAGE
	if (frame) {
		__u32 zero = 0;
		struct py_page *pg = bpf_map_lookup_elem(&py_frame_page, &zero);

		c.page_addr = frame & ~(__u64)(PY_PAGE_SIZE - 1);
		if (pg && !user_read(task, pg->b, PY_PAGE_SIZE, (const void *)c.page_addr))
			c.page = pg->b;
	}
#endif
	py_walk_begin(&c.w, cfg, frame);
	bpf_loop(PY_WALK_MAX_STEPS, py_walk_step, &c, 0);
	py_walk_end(cfg, &c.w);
	*status = c.w.status;
	*flags |= c.w.flags;
	return c.w.n;
}

/*
 * Walk the Python stack of a thread: the current task, a thread of its process, or with
 * UREAD_TASK @task; with the header copies in @s, the scratch of the context it runs in: not
 * one per-CPU map for every program, since a program that can be interrupted or preempted
 * (the off-CPU task work, which runs in the thread with interrupts on; uprobes) would have it
 * overwritten half-way through the walk by a sample taken meanwhile on its CPU (seen: 2 in
 * 14,000 task works at 256 threads). @cfg: the process's config; @tgid: its pid as the py_tstates
 * map is keyed (struct py_tstate_key); @fsbase: the thread's TLS base
 * (task->thread.fsbase); @task: the thread (used by UREAD_TASK only; may be NULL
 * otherwise); @out: room for SAMPLER_MAX_PYDEPTH records. Returns the number of frames
 * written; sets *status (enum py_status) and ORs SAMPLE_F_PY_TRUNCATED into *flags.
 */
static __always_inline __u32 py_walk_in(const struct py_proc_cfg *cfg, __u32 tgid, __u64 fsbase,
					struct task_struct *task, struct py_frame_rec *out,
					struct py_scratch *s, __s32 *status, __u32 *flags)
{
	return py_walk_in_from(cfg, tgid, fsbase, py_tss_tstate(cfg, fsbase, task), task, out, s,
			       status, flags);
}

#endif
