/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The BPF side of the Python stack walker, for inclusion by sampler.bpf.c, comm.bpf.c,
 * offcpu_fetch.bpf.c (and the test program tests/bpf/pystack_test.bpf.c) after vmlinux.h,
 * bpf_helpers.h, bpf_core_read.h, bpf_tracing.h and sampler.h. The rules of the walk are in
 * pywalk.h, shared with the userspace walker.
 *
 *   __u32 py_walk_in(cfg, tgid, fsbase, task, out, mem, &status, &flags)
 *
 * finds the *sampled* thread's PyThreadState (not the GIL holder: the thread may be running
 * native code with the GIL released) by emulating glibc's pthread_getspecific() on the
 * interpreter's TSS key from the thread's fs base, validates it (tstate->thread_id ==
 * pthread_self() == fs base), falls back to the py_tstates map userspace fills, and copies
 * the frame chain leaf first as struct py_frame_rec. Per frame: one read of the frame header
 * (from 3.11 on, most frames are copied from the innermost frame's page, read at once where
 * the caller gives room for it) and one of the code object header into the caller's memory
 * (struct py_walk_mem: each context that can run while another is in a walk on the same CPU
 * has its own), fields extracted from the copies. A caller that keeps per-thread state may
 * keep where the thread state is (struct py_tss_cache): two or three reads fewer a walk. No
 * sleeping helpers, bounded work: it runs in the sampled CPU's interrupt context, in a
 * thread's task work, in a uprobe, or in the fetcher.
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
	/* Counts for the owner to read and clear: frames copied from a page read at once
	 * (py_walk_mem.page), code object headers found in py_code_cache and read into it. */
	__u64 page_frames, code_hits, code_reads;
};

/* A code object's header as py_code_cache keeps it: with the time just before it was read. */
struct py_code_hdr {
	__u64 read_ns;
	__u8 hdr[PY_HDR_MAX + 8];
};

/*
 * The copy of the memory page that holds the walked thread's innermost frame, read at once
 * where the caller gives room for it (py_walk_mem.page). From 3.11 on a thread's frames lie
 * side by side in its data stack, the outer ones below the inner ones: most of a stack's
 * frames are in that page, and they are copied from it rather than read one by one (each read
 * of user memory has a cost of its own: about 70 ns on this project's virtual machine once the
 * page was touched, a page walk for another process's memory). A frame not wholly in it is
 * read as before. Only the page's part up to the innermost frame's end is read. The thread does
 * not run while it is walked (interrupted, in the kernel, or blocked: the fetcher drops a copy
 * whose thread ran meanwhile), so the page's copy holds what each read would have.
 */
#define PY_PAGE_SIZE 4096

/* The memory a walk works in: its context's own (py_walk_in). */
struct py_walk_mem {
	struct py_scratch *s;	  /* the header copies */
	__u8 *page;		  /* PY_PAGE_SIZE bytes for the innermost frame's page; NULL: the
				   * frames are read one by one */
	struct py_tss_cache *tss; /* the walked thread's kept slot (py_tss_slot_kept); NULL: the
				   * slot is found at each walk */
	/* With PY_CODE_CACHE: where a header is read before it goes into py_code_cache, and the
	 * time before which the walked thread's block began: headers read after it are used.
	 * code_fill NULL or code_since 0: the cache is not used. */
	struct py_code_hdr *code_fill;
	__u64 code_since;
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct py_code_key);
	__type(value, struct py_code_hdr);
} py_code_cache SEC(".maps");
#endif

struct py_walk_ctx {
	const struct py_proc_cfg *cfg;
	struct task_struct *task; /* whose memory (UREAD_TASK) */
	struct py_scratch *s;
	struct py_frame_rec *out;
	struct py_walk w;
	__u32 tgid;
	const __u8 *page; /* the copy of page_len bytes at page_addr, or NULL */
	__u64 page_addr;
	__u32 page_len;
	struct py_code_hdr *code_fill; /* py_walk_mem's */
	__u64 code_since;
};

/* Copy @sz (<= PY_HDR_MAX) bytes of the frame at @frame into @dst; 0 or an error. From the
 * copy of its page where there is one and the frame lies wholly in it (@frame comes from the
 * target's memory: compared so that no value wraps around). */
static __always_inline long py_read_frame(struct py_walk_ctx *c, __u8 *dst, __u32 sz, __u64 frame)
{
	if (c->page && frame >= c->page_addr && c->page_len >= sz &&
	    frame - c->page_addr <= c->page_len - sz) {
		c->s->page_frames++;
		return bpf_probe_read_kernel(
			dst, sz, c->page + ((frame - c->page_addr) & (PY_PAGE_SIZE - 1)));
	}
	return user_read(c->task, dst, sz, (const void *)frame);
}

/* Copy @sz (<= PY_HDR_MAX) bytes of the code object at @code into @dst; 0 or an error. With
 * PY_CODE_CACHE, from py_code_cache where that holds this object's header. */
static __always_inline long py_read_code(struct py_walk_ctx *c, __u8 *dst, __u32 sz, __u64 code)
{
#ifdef PY_CODE_CACHE
	struct py_code_key k = {.pid = c->tgid, .code = code};
	struct py_code_hdr *h = c->code_fill;

	if (h && c->code_since) {
		h = bpf_map_lookup_elem(&py_code_cache, &k);
		if (h && h->read_ns > c->code_since) {
			c->s->code_hits++;
			return bpf_probe_read_kernel(dst, sz, h->hdr);
		}
		h = c->code_fill;
		c->s->code_reads++;
		h->read_ns = bpf_ktime_get_ns();
		if (user_read(c->task, h->hdr, sz, (const void *)code))
			return -1;
		bpf_map_update_elem(&py_code_cache, &k, h, BPF_ANY);
		return bpf_probe_read_kernel(dst, sz, h->hdr);
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

/*
 * Where the thread state of the thread whose struct pthread is at @fsbase is (py_tss_slot),
 * from @tc where it was found for that thread and the process's present key, else found now
 * and kept there. A slot found to hold no thread state of its thread is forgotten
 * (py_tss_slot_judge).
 */
static __always_inline __u64 py_tss_slot_kept(const struct py_proc_cfg *cfg, __u64 fsbase,
					      struct task_struct *task, struct py_tss_cache *tc)
{
	__u64 slot;

	if (tc->fsbase == fsbase && fsbase && tc->key == cfg->tss_key_addr &&
	    tc->tls == cfg->tls_tstate)
		return tc->slot;
	slot = py_tss_slot(cfg, fsbase, task);
	tc->fsbase = fsbase;
	tc->key = cfg->tss_key_addr;
	tc->tls = cfg->tls_tstate;
	tc->slot = slot;
	return slot;
}

/* After a walk from the slot @tc keeps that ended with @status: a slot that held no thread
 * state of its thread (or none was found) is looked for again next time. */
static __always_inline void py_tss_slot_judge(struct py_tss_cache *tc, __s32 status)
{
	if (status == PY_NO_TSTATE || status == PY_BAD_TSTATE || !tc->slot)
		tc->fsbase = 0;
}

/* py_walk_in, from @tstate: the thread state the thread's slot holds (py_tss_slot,
 * py_slot_tstate; 0 if none), validated here, the py_tstates map consulted if it fails. */
static __always_inline __u32 py_walk_in_from(const struct py_proc_cfg *cfg, __u32 tgid,
					     __u64 fsbase, __u64 tstate, struct task_struct *task,
					     struct py_frame_rec *out, const struct py_walk_mem *m,
					     __s32 *status, __u32 *flags)
{
	struct py_walk_ctx c = {.s = m->s};
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
	c.code_fill = m->code_fill;
	c.code_since = m->code_since;
	/* Frames side by side (3.11+): the innermost one's page at once. 3.8-3.10 frames are
	 * heap objects, seldom in one page. */
	if (m->page && frame && cfg->frames != PY_FRAMES_OBJECT) {
		c.page_addr = frame & ~(__u64)(PY_PAGE_SIZE - 1);
		c.page_len = frame - c.page_addr + py_frame_hdr_size(cfg);
		if (c.page_len > PY_PAGE_SIZE)
			c.page_len = PY_PAGE_SIZE;
		if (!user_read(task, m->page, c.page_len, (const void *)c.page_addr))
			c.page = m->page;
	}
	py_walk_begin(&c.w, cfg, frame);
	bpf_loop(PY_WALK_MAX_STEPS, py_walk_step, &c, 0);
	py_walk_end(cfg, &c.w);
	*status = c.w.status;
	*flags |= c.w.flags;
	return c.w.n;
}

/*
 * Walk the Python stack of a thread: the current task, a thread of its process, or with
 * UREAD_TASK @task; in @m, the memory of the context it runs in: not one per-CPU map for
 * every program, since a program that can be interrupted or preempted (the off-CPU task work,
 * which runs in the thread with interrupts on; uprobes) would have it overwritten half-way
 * through the walk by a sample taken meanwhile on its CPU (seen: 2 in 14,000 task works at
 * 256 threads). @cfg: the process's config; @tgid: its pid as the py_tstates map is keyed
 * (struct py_tstate_key); @fsbase: the thread's TLS base (task->thread.fsbase); @task: the
 * thread (used by UREAD_TASK only; may be NULL otherwise); @out: room for SAMPLER_MAX_PYDEPTH
 * records. Returns the number of frames written; sets *status (enum py_status) and ORs
 * SAMPLE_F_PY_TRUNCATED into *flags.
 */
static __always_inline __u32 py_walk_in(const struct py_proc_cfg *cfg, __u32 tgid, __u64 fsbase,
					struct task_struct *task, struct py_frame_rec *out,
					const struct py_walk_mem *m, __s32 *status, __u32 *flags)
{
	struct py_tss_cache *tc = m->tss;
	__u64 slot;
	__u32 n;

	slot = tc ? py_tss_slot_kept(cfg, fsbase, task, tc) : py_tss_slot(cfg, fsbase, task);
	n = py_walk_in_from(cfg, tgid, fsbase, py_slot_tstate(slot, task), task, out, m, status,
			    flags);
	if (tc)
		py_tss_slot_judge(tc, *status);
	return n;
}

#endif
