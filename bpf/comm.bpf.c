// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * Collective communication calls, seen through uprobes on the libraries that make them
 * (user/record/comm.c attaches them per target process): c10d::ProcessGroupGloo's
 * collectives and their completion on the gloo worker thread, the buffers of send/recv calls
 * (as their work objects take them) and gloo's completion of buffers, NCCL's C API. One program, comm_probe, serves every probe point; the point's BPF cookie
 * (comm.h) says what it is.
 *
 * A call sends its arguments that matter (process group, tag, tensor sizes) and the calling
 * thread's stack as a sample (registers, the Python frames and, the first time from a call
 * site, the user stack in use). Uprobe programs run with preemption enabled, so a per-CPU
 * scratch buffer could be overwritten half-way by another program on the same CPU: a call is
 * built in its thread's task storage, or a stack copy in place in its ring-buffer record. A
 * call from a site userspace has unwound and whose checks hold (comm.h, struct site_checks) sends
 * no copy. The other events are small: which work object the call queued, when a work object
 * completed. Userspace joins them (user/record/collectives.c).
 *
 * comm_mmap (fentry on security_mmap_file), or where the kernel has no BPF trampolines
 * comm_mmap_tp (the mmap system call's tracepoint), tells userspace when a target maps a
 * library whose name says it may have probe points (libtorch*, libgloo*, libnccl*), so that a
 * job recorded from its start is probed as soon as it imports torch.
 *
 * The maps of shared_maps.bpf.h and py_tstates are the sampler's (sampler.bpf.c),
 * shared by userspace before load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "commprobe.h"
#include "shared_maps.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by userspace before load. */
const volatile __u32 stack_size = SAMPLER_MAX_STACK; /* most bytes to copy, multiple of 8 */
const volatile bool want_python = true;
const volatile bool use_tai = true; /* bpf_ktime_get_tai_ns exists (Linux 6.1) */
const volatile __u32 pidns_inum = 0;

__u32 pidns_level = 0;

/* Layouts per library file (comm.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COMM_MAX_LIBS);
	__type(key, __u32);
	__type(value, struct comm_lib_cfg);
} comm_libs SEC(".maps");

/* Threads (kernel tid) in a gloo send/recv call, until its work object takes its unbound
 * buffer: when the call started (now_ns). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} p2p_calls SEC(".maps");

/* Unbound buffers of send/recv calls in flight, with when their call started (now_ns): only
 * their completions are sent. Userspace forgets those of calls issued while the completions'
 * probes were detached (comm.c: forget_unwatched_bufs). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct p2p_buf_key);
	__type(value, __u64);
} p2p_bufs SEC(".maps");

/* Per process (kernel tgid): its threads in a send/recv call (p2p_calls), so that only then are
 * unknown completions kept (p2p_early): an LRU map that gloo's algorithms filled would evict
 * the entry a send or recv is about to take. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __s64);
} p2p_open SEC(".maps");

struct p2p_early {
	__u64 time_ns; /* now_ns() */
	__u32 tid;     /* the completing thread, as the recorder numbers it */
	__u32 _pad;
};

/*
 * Completions of unbound buffers not (yet) known as a send/recv call's: those of gloo's
 * algorithms, and a send or recv that completed before its work object took its buffer (at
 * once, inside the buffer's send/recv). The work object's probe takes its buffer's from here.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct p2p_buf_key);
	__type(value, struct p2p_early);
} p2p_early SEC(".maps");

/* Call sites whose native stack userspace knows (comm.h): written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct site_key);
	__type(value, struct site_checks);
} comm_sites SEC(".maps");

/* Events lost because the ring buffer was full (one counter per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} comm_lost SEC(".maps");

#include "pystack.bpf.h"
#include "uctx.bpf.h"

#define PY_AREA 0x8000 /* >= SAMPLER_MAX_PYDEPTH * sizeof(struct py_frame_rec) */

_Static_assert(SAMPLER_MAX_PYDEPTH * sizeof(struct py_frame_rec) <= PY_AREA, "PY_AREA too small");

/* A call as reserved in the ring buffer: the event, then room for what follows the sample. */
struct comm_call_rec {
	struct comm_call_event e;
	__u8 data[PY_AREA + UCTX_STACK_AREA + UCTX_CHUNK_MAX];
	struct py_scratch ps; /* the Python walk's header copies (not sent: after the data) */
};

/*
 * A call with a shallow stack (most: 3-8 KiB, Python's frames aside) as reserved in the ring
 * buffer: an eighth of the largest record, so that the calls made before the recorder knew
 * their site fill the ring buffer that much later.
 */
#define SMALL_PY    0x1000 /* Python frames: 256 */
#define SMALL_STACK 0x2000
struct comm_call_small {
	struct comm_call_event e;
	__u8 data[SMALL_PY + SMALL_STACK];
};

/* A thread's scratch for a call from a known site: the record, then its Python frames. */
#define SCRATCH_PY (SAMPLER_MAX_PYDEPTH * sizeof(struct py_frame_rec))
_Static_assert((SCRATCH_PY & (SCRATCH_PY - 1)) == 0, "SCRATCH_PY must be a power of two");
#define SITE_COPY_MAX SCRATCH_PY
#include "stacksite.bpf.h"

struct comm_scratch {
	struct task_ids ids;	 /* the thread's, once known (own_ids reads the task) */
	struct py_tss_cache tss; /* where its thread state is */
	struct comm_call_event e;
	__u8 py[SCRATCH_PY + 8]; /* before the walk, the stack words a site checks */
	struct py_scratch ps;	 /* the Python walk's header copies (not sent) */
	__u8 page[PY_PAGE_SIZE]; /* and its copy of the innermost frame's page */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct comm_scratch);
} comm_scratch SEC(".maps");

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&comm_lost, &zero);

	if (v)
		*v += 1;
}

static __always_inline __u64 now_ns(void)
{
	return use_tai ? bpf_ktime_get_tai_ns() : bpf_ktime_get_ns();
}

/* The current thread's pid and tid as the recorder numbers them (view_ids): in the recorder's
 * own PID namespace, the kernel's, from one helper rather than reads of the task. */
static __always_inline void cur_ids(struct task_struct *task, struct task_ids *ids)
{
	__u64 id;

	if (pidns_inum) {
		view_ids(task, ids);
		return;
	}
	id = bpf_get_current_pid_tgid();
	ids->pid = id >> 32;
	ids->tid = (__u32)id;
}

/* Argument @n (1-based) of the function the uprobe stopped at (System V x86-64), from its
 * registers @r (DWARF order, struct sample_event). */
static __always_inline __u64 arg(const __u64 *r, __u32 n)
{
	__u64 v = 0;

	switch (n) {
	case 1:
		return r[DWREG_RDI];
	case 2:
		return r[DWREG_RSI];
	case 3:
		return r[DWREG_RDX];
	case 4:
		return r[DWREG_RCX];
	case 5:
		return r[DWREG_R8];
	case 6:
		return r[DWREG_R9];
	}
	/* On the stack above the return address: the 7th at sp + 8. */
	if (n >= 7 && n <= 8)
		bpf_probe_read_user(&v, sizeof(v), (const void *)(r[DWREG_RSP] + 8 * (n - 6)));
	return v;
}

/* The header every event starts with; the ids must be set. */
static __always_inline void fill_header(struct comm_event *h, __u16 ev, const struct task_ids *ids,
					__u64 cookie, __u64 obj)
{
	h->type = EVENT_COMM;
	h->ev = ev;
	h->flags = use_tai ? COMM_F_TAI : 0;
	h->pid = ids->pid;
	h->tid = ids->tid;
	h->time_ns = now_ns();
	h->obj = obj;
	h->cookie = cookie;
}

/* A small event (not a call). */
/* An event of the thread of @ids, whose ids were read already. */
static __always_inline void send_event_of(const struct task_ids *ids, __u16 ev, __u64 cookie,
					  __u64 obj, __u16 flags, __u64 rb_flags)
{
	struct comm_event h;

	fill_header(&h, ev, ids, cookie, obj);
	h.flags |= flags;
	if (bpf_ringbuf_output(&events, &h, sizeof(h), rb_flags))
		count_lost();
}

static __always_inline void send_event(struct task_struct *task, __u16 ev, __u64 cookie, __u64 obj,
				       __u16 flags, __u64 rb_flags)
{
	struct task_ids ids = {};

	cur_ids(task, &ids);
	if (ids.pid)
		send_event_of(&ids, ev, cookie, obj, flags, rb_flags);
}

/* The sizes of a gloo call's tensors: @vec is a std::vector<at::Tensor>* (or, with @single,
 * one at::Tensor*); an at::Tensor is a pointer to its c10::TensorImpl. Each read of user memory
 * costs about as much as a hundred instructions: the vector's ends, its tensors' pointers and
 * each tensor's size and type are one read each, the first tensor's header is read only while
 * userspace has not checked the layout (COMM_LIB_HDR). */
static __always_inline void read_tensors(struct comm_call_event *e, const struct comm_lib_cfg *lc,
					 __u64 vec, bool single)
{
	__u64 ends[2] = {vec, vec + 8}, impls[COMM_MAX_TENSORS] = {};
	struct {
		__u64 numel;
		__u16 dtype;
	} sz = {};
	__u32 i, n, m;

	if (!vec || lc->ti_numel == COMM_OFF_NONE || lc->ti_dtype == COMM_OFF_NONE)
		return;
	if (!single && bpf_probe_read_user(ends, sizeof(ends), (const void *)vec))
		return;
	if (ends[1] < ends[0] || (ends[1] - ends[0]) % 8 || ends[1] - ends[0] > (1u << 20))
		return;
	n = (ends[1] - ends[0]) / 8;
	e->ntensors = n;
	m = n < COMM_MAX_TENSORS ? n : COMM_MAX_TENSORS;
	if (m && bpf_probe_read_user(impls, m * 8, (const void *)ends[0]))
		return;
	for (i = 0; i < COMM_MAX_TENSORS; i++) {
		if (i >= m)
			break;
		if (!impls[i])
			return;
		/* The header may fail to read where the size fields do not (its end on a page
		 * not faulted in yet): the sizes are still good once the layout is known. */
		if (!i && (lc->flags & COMM_LIB_HDR) &&
		    !bpf_probe_read_user(e->tensor0, sizeof(e->tensor0), (const void *)impls[0]))
			e->h.flags |= COMM_F_HDR;
		if (lc->ti_dtype == lc->ti_numel + 8) {
			if (bpf_probe_read_user(&sz, 10, (const void *)(impls[i] + lc->ti_numel)))
				return;
			e->numel[i] = sz.numel;
			e->dtypes[i] = sz.dtype;
		} else if (bpf_probe_read_user(&e->numel[i], 8,
					       (const void *)(impls[i] + lc->ti_numel)) ||
			   bpf_probe_read_user(&e->dtypes[i], 2,
					       (const void *)(impls[i] + lc->ti_dtype))) {
			return;
		}
	}
	e->h.flags |= COMM_F_TENSORS;
}

/* A gloo call's process group: rank, size and the next tag (rank and size in one read where
 * they are neighbours, as in every known layout). */
static __always_inline void read_group(struct comm_call_event *e, const struct comm_lib_cfg *lc,
				       __u64 pg)
{
	__s32 rs[2];

	e->pg = pg;
	if (!pg)
		return;
	if (lc->pg_rank == COMM_OFF_NONE || lc->pg_size == COMM_OFF_NONE) {
		/* unknown */
	} else if (lc->pg_size == lc->pg_rank + 4) {
		if (!bpf_probe_read_user(rs, sizeof(rs), (const void *)(pg + lc->pg_rank))) {
			e->grp_rank = rs[0];
			e->grp_size = rs[1];
			e->h.flags |= COMM_F_GRP;
		}
	} else if (!bpf_probe_read_user(&e->grp_rank, 4, (const void *)(pg + lc->pg_rank)) &&
		   !bpf_probe_read_user(&e->grp_size, 4, (const void *)(pg + lc->pg_size))) {
		e->h.flags |= COMM_F_GRP;
	}
	if (lc->pg_counter != COMM_OFF_NONE &&
	    !bpf_probe_read_user(&e->seq, 4, (const void *)(pg + lc->pg_counter)))
		e->h.flags |= COMM_F_SEQ;
}

/* An NCCL call's count, datatype, peer and communicator (comm.h, enum comm_nccl_args). */
static __always_inline void read_nccl(const __u64 *r, struct comm_call_event *e, __u32 args)
{
	__u32 c = 3, d = 4, p = 0, m = 6;

	switch (args) {
	case COMM_NCCL_COLL:
		break;
	case COMM_NCCL_BROADCAST:
		p = 5;
		break;
	case COMM_NCCL_BCAST:
		c = 2, d = 3, p = 4, m = 5;
		break;
	case COMM_NCCL_REDUCE:
		p = 6, m = 7;
		break;
	case COMM_NCCL_ALLGATHER:
		m = 5;
		break;
	case COMM_NCCL_P2P:
		c = 2, d = 3, p = 4, m = 5;
		break;
	default:
		return;
	}
	e->count = arg(r, c);
	e->dtype = (__u32)arg(r, d);
	e->peer = p ? (__s32)arg(r, p) : -1;
	e->pg = arg(r, m);
}

/* A call's header, arguments, registers and its stack's header into @e (zeroed first); @ids
 * complete (own_ids). */
static __always_inline void fill_call(struct comm_call_event *e, struct pt_regs *ctx,
				      struct task_struct *task, struct task_ids *ids,
				      const struct comm_lib_cfg *lc, __u64 cookie, __u32 role)
{
	__u32 argb = COMM_COOKIE_ARG(cookie);
	struct sample_event *s = &e->s;
	const __u64 *regs;

	__builtin_memset(e, 0, sizeof(*e));
	fill_header(&e->h, COMM_EV_CALL, ids, cookie, 0);
	e->peer = -1;
	/* The registers first: the arguments are read from the copy. */
	copy_regs(s->regs, ctx);
	regs = s->regs;
	if (role == COMM_R_NCCL_CALL) {
		read_nccl(regs, e, argb);
	} else {
		/* The collectives return c10::intrusive_ptr<Work> by value: its hidden return
		 * slot is argument 1, `this` argument 2. */
		read_group(e, lc, arg(regs, 2));
		if (argb & COMM_ARG_INDEX)
			read_tensors(e, lc, arg(regs, argb & COMM_ARG_INDEX),
				     argb & COMM_ARG_TENSOR);
		if (role == COMM_R_GLOO_P2P) {
			/* send/recv(tensors, peer, tag); recvAnysource(tensors, tag) */
			if (COMM_COOKIE_OP(cookie) == COMM_OP_RECV_ANYSOURCE) {
				e->tag = (__s32)arg(regs, 4);
			} else {
				e->peer = (__s32)arg(regs, 4);
				e->tag = (__s32)arg(regs, 5);
			}
		}
	}

	/* The stack's header, as a sample of the calling thread. */
	s->type = EVENT_SAMPLE;
	s->pid = ids->pid;
	s->tid = ids->tid;
	s->ns_pid = ids->ns_pid;
	s->ns_tid = ids->ns_tid;
	s->cpu = bpf_get_smp_processor_id();
	s->time_ns = bpf_ktime_get_ns();
	s->py_status = PY_NONE;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	s->fsbase = task->thread.fsbase; /* a trusted pointer: a load, not a helper call */
}

/* The Python frames of the calling thread into @out, walked in @m (its tss, where there is
 * one, the thread's: two reads fewer per call). Return the bytes written (py_len set). */
static __always_inline __u32 call_python(struct sample_event *s, struct py_frame_rec *out,
					 const struct py_walk_mem *m)
{
	struct py_proc_cfg *cfg;
	__u32 tgid = s->pid, n;

	if (!want_python)
		return 0;
	cfg = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!cfg)
		return 0;
	n = py_walk_in(cfg, s->pid, s->fsbase, NULL, out, m, &s->py_status, &s->flags);
	if (n > SAMPLER_MAX_PYDEPTH)
		n = SAMPLER_MAX_PYDEPTH;
	s->py_len = n;
	return n * sizeof(struct py_frame_rec);
}

/*
 * The call site of the call @e (its registers set) if userspace knows it and every check holds
 * (stacksite.bpf.h): its id; 0 otherwise. @buf: SCRATCH_PY + 8 bytes.
 */
static __always_inline __u64 known_site(const struct comm_call_event *e, __u8 *buf)
{
	struct site_key k = {.pid = e->s.pid,
			     .tid = e->s.tid,
			     .ip = e->s.regs[DWREG_RIP],
			     .sp = e->s.regs[DWREG_RSP]};

	return site_holds(bpf_map_lookup_elem(&comm_sites, &k), e->s.regs, k.sp, buf);
}

/*
 * The Python frames and the user stack of the call in @r (its event filled by fill_call), and
 * the record submitted. The Python frames are walked here, or with @py already (@pyb bytes,
 * py_len set).
 */
static __always_inline void submit_call_stack(struct task_struct *task, struct comm_call_rec *r,
					      const __u8 *py, __u32 pyb)
{
	struct py_walk_mem m = {.s = &r->ps};
	struct sample_event *s = &r->e.s;
	__u64 sp;

	if (!py)
		pyb = call_python(s, (struct py_frame_rec *)r->data, &m);
	else if (pyb > SCRATCH_PY || bpf_probe_read_kernel(r->data, pyb & (PY_AREA - 1), py))
		pyb = s->py_len = 0;
	sp = s->regs[DWREG_RSP];
	s->stack_len = copy_user_stack(NULL, r->data + (pyb & (PY_AREA - 1)), sp,
				       stack_top(task, s->pid, s->tid, s->fsbase, sp), stack_size,
				       &s->flags);
	bpf_ringbuf_submit(r, events_wakeup());
}

/*
 * The call in @sc (its Python frames, @pyb bytes, walked) with its stack copy in a small record,
 * if they fit and the stack reads at once; false otherwise (send it in a large one).
 */
static __always_inline bool send_small(struct task_struct *task, struct comm_scratch *sc, __u32 pyb)
{
	struct sample_event *s = &sc->e.s;
	__u64 sp = s->regs[DWREG_RSP], top;
	struct comm_call_small *r;
	__u32 want = stack_size;

	/* What copy_user_stack would copy. */
	if (want > SAMPLER_MAX_STACK)
		want = SAMPLER_MAX_STACK;
	top = stack_top(task, s->pid, s->tid, s->fsbase, sp);
	if (top && top - sp <= want)
		want = (top - sp + 7) & ~7u;
	if (pyb >= SMALL_PY || !want || want > SMALL_STACK)
		return false;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count_lost();
		return true;
	}
	__builtin_memcpy(&r->e, &sc->e, sizeof(r->e));
	pyb &= SMALL_PY - 1;
	if ((pyb && bpf_probe_read_kernel(r->data, pyb, sc->py)) ||
	    bpf_probe_read_user(r->data + pyb, want, (const void *)sp)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return false;
	}
	r->e.s.stack_len = want;
	bpf_ringbuf_submit(r, events_wakeup());
	return true;
}

/*
 * A call: its arguments and the calling thread's stack, as one record. From a call site
 * userspace already unwound (known_site), only the Python frames, in a record of the size they
 * take, built in the thread's own scratch (task storage: a uprobe program may be preempted,
 * but not by another run on the same thread); the first call from a site, or any call when the
 * scratch cannot be had, with its stack copy.
 */
static __always_inline int on_call(struct pt_regs *ctx, __u64 cookie, __u32 role)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 lib = COMM_COOKIE_LIB(cookie), pyb;
	const struct comm_lib_cfg *lc;
	struct comm_scratch *sc;
	struct comm_call_rec *r;
	struct task_ids ids = {};
	struct py_walk_mem mem;

	cur_ids(task, &ids);
	if (!ids.pid)
		return 0;
	lc = bpf_map_lookup_elem(&comm_libs, &lib);
	if (!lc)
		return 0;
	sc = bpf_task_storage_get(&comm_scratch, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!sc) {
		r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
		if (!r) {
			count_lost();
			return 0;
		}
		own_ids(task, &ids);
		fill_call(&r->e, ctx, task, &ids, lc, cookie, role);
		submit_call_stack(task, r, NULL, 0);
		return 0;
	}
	/* A thread keeps its ids for life; exec in another thread than the leader gives it the
	 * leader's (de_thread), which the view ids tell. */
	if (sc->ids.pid == ids.pid && sc->ids.tid == ids.tid) {
		ids = sc->ids;
	} else {
		own_ids(task, &ids);
		sc->ids = ids;
	}
	fill_call(&sc->e, ctx, task, &ids, lc, cookie, role);
	sc->e.site = known_site(&sc->e, sc->py);
	if (sc->e.site)
		sc->e.h.flags |= COMM_F_SITE;
	mem = (struct py_walk_mem){.s = &sc->ps, .page = sc->page, .tss = &sc->tss};
	pyb = call_python(&sc->e.s, (struct py_frame_rec *)sc->py, &mem);
	if (pyb > SCRATCH_PY)
		pyb = SCRATCH_PY;
	if (!sc->e.site) {
		if (send_small(task, sc, pyb))
			return 0;
		r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
		if (!r) {
			count_lost();
			return 0;
		}
		__builtin_memcpy(&r->e, &sc->e, sizeof(r->e));
		submit_call_stack(task, r, pyb ? sc->py : NULL, pyb);
		return 0;
	}
	if (bpf_ringbuf_output(&events, &sc->e, sizeof(sc->e) + pyb, events_wakeup()))
		count_lost();
	return 0;
}

/* Process @tgid has @d more threads in a send/recv call (p2p_open). */
static __always_inline void p2p_opened(__u32 tgid, __s64 d)
{
	__s64 *n = bpf_map_lookup_elem(&p2p_open, &tgid), zero = 0;

	if (!n) {
		if (d < 0)
			return;
		bpf_map_update_elem(&p2p_open, &tgid, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&p2p_open, &tgid);
		if (!n)
			return;
	}
	if (d < 0 && *n <= 0)
		return;
	__sync_fetch_and_add(n, d);
}

SEC("uprobe")
int comm_probe(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), id = bpf_get_current_pid_tgid(), work = 0;
	struct task_struct *task;
	__u32 role = COMM_COOKIE_ROLE(cookie), tid = (__u32)id, tgid = id >> 32;
	struct p2p_buf_key bk = {};
	__u64 now, *since;
	struct p2p_early *early;
	struct task_ids ids = {};
	struct comm_event h;

	switch (role) {
	case COMM_R_GLOO_CALL:
	case COMM_R_NCCL_CALL:
		return on_call(ctx, cookie, role);
	case COMM_R_GLOO_P2P:
		now = now_ns();
		/* A thread's call that never reached its work object (it threw) is replaced. */
		if (!bpf_map_lookup_elem(&p2p_calls, &tid))
			p2p_opened(tgid, 1);
		bpf_map_update_elem(&p2p_calls, &tid, &now, BPF_ANY);
		return on_call(ctx, cookie, role);
	}
	task = bpf_get_current_task_btf();
	switch (role) {
	case COMM_R_GLOO_ENQUEUE:
		/* enqueue(this, c10::intrusive_ptr<AsyncWork>): passed by reference to a
		 * temporary, which holds the AsyncWork*. */
		if (bpf_probe_read_user(&work, 8, (const void *)ctx->si))
			return 0;
		send_event(task, COMM_EV_ENQUEUE, cookie, work, 0, events_wakeup());
		break;
	case COMM_R_GLOO_FINISH:
	case COMM_R_GLOO_ERROR:
		send_event(task, COMM_EV_DONE, cookie, ctx->di,
			   role == COMM_R_GLOO_ERROR ? COMM_F_ERROR : 0, events_wakeup());
		break;
	case COMM_R_P2P_WORK:
		/* SendWork/RecvWork(this, tensor, std::unique_ptr<UnboundBuffer> buffer): the
		 * unique_ptr by reference, holding the buffer. Only a send/recv call's, on its
		 * thread. */
		since = bpf_map_lookup_elem(&p2p_calls, &tid);
		if (!since)
			return 0;
		now = *since;
		if (!bpf_map_delete_elem(&p2p_calls, &tid))
			p2p_opened(tgid, -1);
		if (bpf_probe_read_user(&work, 8, (const void *)ctx->dx) || !work)
			return 0;
		cur_ids(task, &ids);
		if (!ids.pid)
			return 0;
		bk.pid = ids.pid;
		bk.ub = work;
		/* The post first, then the buffer known: a completion that finds it is sent
		 * after the post. */
		send_event(task, COMM_EV_UB_POST, cookie, bk.ub, 0, events_wakeup());
		bpf_map_update_elem(&p2p_bufs, &bk, &now, BPF_ANY);
		early = bpf_map_lookup_elem(&p2p_early, &bk);
		if (!early)
			return 0;
		/* Completed already, since this call started (an older completion of a buffer at
		 * the same address is not this one's); unless its completion took it just now. */
		if (early->time_ns >= now && !bpf_map_delete_elem(&p2p_bufs, &bk)) {
			fill_header(&h, COMM_EV_DONE, &ids, cookie, bk.ub);
			h.tid = early->tid;
			h.time_ns = early->time_ns;
			if (bpf_ringbuf_output(&events, &h, sizeof(h), events_wakeup()))
				count_lost();
		}
		bpf_map_delete_elem(&p2p_early, &bk);
		break;
	case COMM_R_UB_DONE:
		cur_ids(task, &ids);
		if (!ids.pid)
			break;
		bk.pid = ids.pid;
		bk.ub = ctx->di;
		if (!bpf_map_delete_elem(&p2p_bufs, &bk)) {
			send_event_of(&ids, COMM_EV_DONE, cookie, bk.ub, 0, events_wakeup());
			break;
		}
		/* Not a known send/recv's buffer (yet): kept for the work object's probe while
		 * one of the process's threads is in a send/recv call. */
		since = bpf_map_lookup_elem(&p2p_open, &tgid);
		if (!since || (__s64)*since <= 0)
			break;
		{
			struct p2p_early v = {.time_ns = now_ns(), .tid = ids.tid};

			bpf_map_update_elem(&p2p_early, &bk, &v, BPF_ANY);
		}
		break;
	case COMM_R_NCCL_GROUP_START:
		send_event(task, COMM_EV_GROUP_START, cookie, 0, 0, events_wakeup());
		break;
	case COMM_R_NCCL_GROUP_END:
		send_event(task, COMM_EV_GROUP_END, cookie, 0, 0, events_wakeup());
		break;
	}
	return 0;
}

#define PROT_EXEC 4

/* Does the file name @n start with one of the prefixes of libraries that may be probed? */
static __always_inline bool maybe_probed(const char *n)
{
	if (n[0] != 'l' || n[1] != 'i' || n[2] != 'b')
		return false;
	if (n[3] == 't' && n[4] == 'o' && n[5] == 'r' && n[6] == 'c' && n[7] == 'h')
		return true; /* libtorch_cpu, libtorch_cuda, libtorch */
	if (n[3] == 'n' && n[4] == 'c' && n[5] == 'c' && n[6] == 'l')
		return true; /* libnccl */
	return n[3] == 'g' && n[4] == 'l' && n[5] == 'o' && n[6] == 'o';
}

/* A target maps @file executable: if its name says it may have probe points, tell userspace. */
static __always_inline void mapped(struct file *file)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct task_ids ids = {};
	char name[16] = {};

	if (!file)
		return;
	view_ids(task, &ids);
	if (!ids.pid || !bpf_map_lookup_elem(&targets, &ids.pid))
		return;
	if (bpf_probe_read_kernel_str(name, sizeof(name),
				      BPF_CORE_READ(file, f_path.dentry, d_name.name)) < 0 ||
	    !maybe_probed(name))
		return;
	/* Rare, and the sooner the probes are in the better: wake the reader. */
	send_event(task, COMM_EV_MAPPED, 0, BPF_CORE_READ(file, f_inode, i_ino), 0, 0);
}

SEC("fentry/security_mmap_file")
int BPF_PROG(comm_mmap, struct file *file, unsigned long prot, unsigned long flags)
{
	if (prot & PROT_EXEC)
		mapped(file);
	return 0;
}

/* The same through a kprobe, where the kernel has no BPF trampolines (fentry loads fail with
 * EPERM): attached by the kprobe PMU, no tracefs needed. */
SEC("kprobe/security_mmap_file")
int BPF_KPROBE(comm_mmap_kp, struct file *file, unsigned long prot)
{
	if (prot & PROT_EXEC)
		mapped(file);
	return 0;
}

/*
 * The same where the kernel has neither BPF trampolines nor kprobes: mmap(2) of a file
 * descriptor with
 * PROT_EXEC, as the dynamic loader maps a library's code; the file is the descriptor's.
 */
SEC("tp/syscalls/sys_enter_mmap")
int comm_mmap_tp(struct trace_event_raw_sys_enter *ctx)
{
	struct task_struct *task;
	struct file **fds, *file = NULL;
	long fd = (long)ctx->args[4];

	if (!(ctx->args[2] & PROT_EXEC) || fd < 0 || fd >= 1 << 20)
		return 0;
	task = bpf_get_current_task_btf();
	if (fd >= BPF_CORE_READ(task, files, fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (!fds || bpf_probe_read_kernel(&file, sizeof(file), fds + fd))
		return 0;
	mapped(file);
	return 0;
}
