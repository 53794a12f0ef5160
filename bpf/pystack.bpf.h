/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The BPF side of the Python stack walker, for inclusion by sampler.bpf.c (and the test
 * program pystack_test.bpf.c) after vmlinux.h, bpf_helpers.h, bpf_core_read.h, bpf_tracing.h
 * and sampler.h.
 *
 *   __u32 py_walk(cfg, tgid, fsbase, out, &status, &flags)
 *
 * finds the *sampled* thread's PyThreadState (not the GIL holder: the thread may be running
 * native code with the GIL released) by emulating glibc's pthread_getspecific() on the
 * interpreter's TSS key from the thread's fs base, validates it (tstate->thread_id ==
 * pthread_self() == fs base), falls back to the py_tstates map userspace fills, and copies
 * the frame chain leaf first as struct py_frame_rec. Per frame: one read of the frame header
 * and one of the code object header into a per-CPU scratch buffer, fields extracted from the
 * copies. Runs in the sampled CPU's interrupt context: no sleeping helpers, bounded work.
 */
#ifndef PROBING_PYSTACK_BPF_H
#define PROBING_PYSTACK_BPF_H

_Static_assert((SAMPLER_MAX_PYDEPTH & (SAMPLER_MAX_PYDEPTH - 1)) == 0,
	       "SAMPLER_MAX_PYDEPTH must be a power of two (index masking)");
_Static_assert((PY_HDR_MAX & (PY_HDR_MAX - 1)) == 0, "PY_HDR_MAX must be a power of two");

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps");

struct py_walk_ctx {
	const struct py_proc_cfg *cfg;
	struct py_scratch *s;
	struct py_frame_rec *out;
	__u64 frame; /* next frame to read; 0 = end of the chain */
	__u32 n;     /* records written */
	__u32 max;
	__s32 status;
	__u32 flags;
	bool ended;	 /* the walk reached the end of the chain (a frame pointer of 0) */
	bool last_entry; /* the last frame read was an entry frame (3.11/3.12) */
};

/* Fields out of the local copies; offsets are masked so the verifier sees them bounded. */
static __always_inline __u64 py_ld64(const __u8 *buf, __u16 off)
{
	return *(const __u64 *)(buf + (off & (PY_HDR_MAX - 1)));
}

static __always_inline __u32 py_ld32(const __u8 *buf, __u16 off)
{
	return *(const __u32 *)(buf + (off & (PY_HDR_MAX - 1)));
}

static __always_inline __u8 py_ld8(const __u8 *buf, __u16 off)
{
	return buf[off & (PY_HDR_MAX - 1)];
}

static __always_inline __u32 py_hdr_size(__u16 size)
{
	__u32 sz = size;

	return sz > PY_HDR_MAX ? PY_HDR_MAX : sz;
}

/* One frame: the bpf_loop callback. Returns 1 to stop. */
static long py_walk_step(__u32 idx, void *arg)
{
	struct py_walk_ctx *c = arg;
	const struct py_proc_cfg *cfg = c->cfg;
	struct py_scratch *s = c->s;
	__u64 frame = c->frame, code, prev, name, filename;
	__u32 sz, ver = cfg->version, meta = 0, firstlineno;
	struct py_frame_rec *rec;
	__s32 lasti;

	if (!frame) {
		c->ended = true;
		return 1;
	}
	sz = py_hdr_size(cfg->off.frame_size);
	if (sz < 8 || bpf_probe_read_user(s->frame, sz, (const void *)frame)) {
		c->status = PY_READ_ERROR;
		return 1;
	}
	prev = py_ld64(s->frame, cfg->off.frame_back);
	code = py_ld64(s->frame, cfg->off.frame_code);
	/* 3.12+: a shim frame owned by the C stack sits under each entry into the interpreter:
	 * the frame read before it is the entry frame. Not a Python frame itself. */
	if (ver >= 0x030c && py_ld8(s->frame, cfg->off.frame_owner) == PY_FRAME_OWNED_BY_CSTACK) {
		if (c->n > 0)
			c->out[(c->n - 1) & (SAMPLER_MAX_PYDEPTH - 1)].meta |= PYF_ENTRY;
		c->last_entry = true;
		c->frame = prev;
		return 0;
	}
	if (c->n >= c->max) {
		c->flags |= SAMPLE_F_PY_TRUNCATED;
		return 1;
	}
	sz = py_hdr_size(cfg->off.code_size);
	if (!code || sz < 8 || bpf_probe_read_user(s->code, sz, (const void *)code)) {
		c->status = PY_READ_ERROR;
		return 1;
	}
	if (cfg->code_type_addr && py_ld64(s->code, cfg->off.ob_type) != cfg->code_type_addr) {
		/* 3.13 f_executable can hold a non-code object: not a Python frame. Before 3.13
		 * f_code is always code: the frame changed under us. */
		if (ver >= 0x030d) {
			c->frame = prev;
			return 0;
		}
		c->status = PY_READ_ERROR;
		return 1;
	}
	name = py_ld64(s->code, cfg->off.code_name);
	filename = py_ld64(s->code, cfg->off.code_filename);
	firstlineno = py_ld32(s->code, cfg->off.code_firstlineno);
	if (ver <= 0x030a) {
		lasti = (__s32)py_ld32(s->frame, cfg->off.frame_lasti);
		/* 3.8/3.9 f_lasti counts bytes; 3.10 counts instructions (bpo-27129). */
		if (ver <= 0x0309 && lasti > 0)
			lasti >>= 1;
		meta = PYF_ENTRY; /* <= 3.10: one PyFrameObject per C-level eval call */
	} else {
		__s64 d = (__s64)(py_ld64(s->frame, cfg->off.frame_instr) -
				  (code + cfg->off.code_adaptive));

		/* prev_instr/instr_ptr - first code unit; -1 code unit before the first one. */
		lasti = d < 0 || d > 0x7ffffffe ? -1 : (__s32)(d >> 1);
		if (ver == 0x030b && py_ld8(s->frame, cfg->off.frame_is_entry))
			meta = PYF_ENTRY;
		/* 3.13: an incomplete frame (instr_ptr before _co_firsttraceable) below another
		 * frame is the _Py_InitCleanup shim of CALL_ALLOC_AND_ENTER_INIT: CPython hides
		 * it, so do we. A leaf in its prologue stays (the function being entered). */
		if (ver >= 0x030d && c->n > 0 &&
		    lasti < (__s32)py_ld32(s->code, cfg->off.code_firsttraceable)) {
			c->frame = prev;
			return 0;
		}
	}
	c->last_entry = ver == 0x030b && meta == PYF_ENTRY;
	rec = &c->out[c->n & (SAMPLER_MAX_PYDEPTH - 1)];
	rec->code = code;
	rec->lasti = lasti;
	rec->meta = meta | (py_code_checksum(name, filename, firstlineno) << 1);
	c->n++;
	c->frame = prev;
	return 0;
}

/* pthread_getspecific(key) of the thread whose struct pthread is at @fsbase (glibc). */
static __always_inline __u64 py_tss_tstate(const struct py_proc_cfg *cfg, __u64 fsbase)
{
	__u64 base, slot, l2 = 0, value = 0;
	__s32 initialized = 0;
	__u32 key = 0;

	if (!cfg->tss_key_addr || cfg->pthread_specific < 0 || !fsbase)
		return 0;
	if (bpf_probe_read_user(&initialized, sizeof(initialized),
				(const void *)cfg->tss_key_addr) ||
	    !initialized ||
	    bpf_probe_read_user(&key, sizeof(key),
				(const void *)(cfg->tss_key_addr + cfg->off.tss_key)))
		return 0;
	base = fsbase + (__u32)cfg->pthread_specific;
	/* struct pthread_key_data { uintptr_t seq; void *data; } specific_1stblock[32], then
	 * struct pthread_key_data *specific[32] (glibc nptl/descr.h, pthread_getspecific.c). */
	if (key < 32) {
		slot = base + key * 16 + 8;
	} else if (key < 1024) {
		if (bpf_probe_read_user(&l2, sizeof(l2),
					(const void *)(base + 32 * 16 + (key / 32) * 8)) ||
		    !l2)
			return 0;
		slot = l2 + (key % 32) * 16 + 8;
	} else {
		return 0;
	}
	if (bpf_probe_read_user(&value, sizeof(value), (const void *)slot))
		return 0;
	return value;
}

/* The thread state belongs to the thread at @fsbase: its thread_id is pthread_self(). */
static __always_inline bool py_tstate_valid(const struct py_proc_cfg *cfg, __u64 tstate,
					    __u64 fsbase)
{
	__u64 tid = 0;

	return tstate &&
	       !bpf_probe_read_user(&tid, sizeof(tid),
				    (const void *)(tstate + cfg->off.ts_thread_id)) &&
	       tid == fsbase;
}

/* The innermost frame of @tstate (0 if none); -1 if unreadable. */
static __always_inline long py_first_frame(const struct py_proc_cfg *cfg, __u64 tstate,
					   __u64 *frame)
{
	__u64 cframe = 0;

	*frame = 0;
	if (cfg->version <= 0x030a)
		return bpf_probe_read_user(frame, 8, (const void *)(tstate + cfg->off.ts_frame));
	if (cfg->version >= 0x030d)
		return bpf_probe_read_user(frame, 8,
					   (const void *)(tstate + cfg->off.ts_current_frame));
	if (bpf_probe_read_user(&cframe, 8, (const void *)(tstate + cfg->off.ts_cframe)))
		return -1;
	if (!cframe)
		return 0;
	return bpf_probe_read_user(frame, 8, (const void *)(cframe + cfg->off.cframe_current));
}

/* Walk the Python stack of the current task. @cfg: the process's config; @tgid: its
 * pid as the py_tstates map is keyed (struct py_tstate_key);
 * @fsbase: the task's TLS base (task->thread.fsbase); @out: room for
 * SAMPLER_MAX_PYDEPTH records. Returns the number of frames written; sets
 * *status (enum py_status) and ORs SAMPLE_F_PY_TRUNCATED into *flags. */
static __always_inline __u32 py_walk(const struct py_proc_cfg *cfg, __u32 tgid, __u64 fsbase,
				     struct py_frame_rec *out, __s32 *status, __u32 *flags)
{
	struct py_walk_ctx c = {};
	struct py_tstate_key key = {};
	__u64 tstate, frame, *mapped;
	__u32 zero = 0, max;

	c.s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!c.s) {
		*status = PY_READ_ERROR;
		return 0;
	}
	tstate = py_tss_tstate(cfg, fsbase);
	if (!py_tstate_valid(cfg, tstate, fsbase)) {
		key.pid = tgid;
		key.pthread = fsbase;
		mapped = bpf_map_lookup_elem(&py_tstates, &key);
		if (!mapped) {
			*status = PY_NO_TSTATE;
			return 0;
		}
		tstate = *mapped;
		if (!py_tstate_valid(cfg, tstate, fsbase)) {
			*status = PY_BAD_TSTATE;
			return 0;
		}
	}
	if (py_first_frame(cfg, tstate, &frame)) {
		*status = PY_READ_ERROR;
		return 0;
	}
	max = cfg->max_depth;
	if (max > SAMPLER_MAX_PYDEPTH)
		max = SAMPLER_MAX_PYDEPTH;
	c.cfg = cfg;
	c.out = out;
	c.frame = frame;
	c.max = max;
	c.status = PY_OK;
	/* Each recorded frame may be followed by one shim frame (3.12+). */
	bpf_loop(2 * SAMPLER_MAX_PYDEPTH + 2, py_walk_step, &c, 0);
	*status = c.status;
	*flags |= c.flags;
	/* 3.11/3.12: every whole chain ends at the entry frame of the outermost eval call.
	 * _PyEval_EvalFrameDefault publishes its on-stack _PyCFrame (tstate->cframe) before it
	 * sets that cframe's current_frame: a sample in between reads a stale stack slot, a
	 * chain of old frames that ends anywhere. Send none rather than wrong ones. */
	if ((cfg->version == 0x030b || cfg->version == 0x030c) && c.status == PY_OK && c.ended &&
	    c.n > 0 && !c.last_entry) {
		*status = PY_TORN;
		return 0;
	}
	return c.n;
}

#endif
