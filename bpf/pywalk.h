/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * pywalk: the rules of the Python frame walk, written once for the two walkers that use them:
 * the BPF one (pystack.bpf.h, in the sampled thread at sample time) and the userspace one
 * (user/python/pyproc.c, from outside: backtrace, pystacks). Each walker reads memory its own
 * way (bpf_probe_read_user; process_vm_readv) into copies of one frame's header and one code
 * object's header, and these functions say what the copies mean: where a thread's chain
 * starts, which frames are not Python frames, the instruction index, which frames are entry
 * frames, when a chain is torn. Given the same memory, both walkers give the same records
 * (tests/integration/test_python_bpf.py runs both on the same stopped threads and compares).
 *
 * One walk:
 *   py_walk_begin(&w, cfg, first frame)            first frame: py_first_frame_offsets
 *   while (!py_walk_at_end(&w), at most PY_WALK_MAX_STEPS times):
 *       copy py_frame_hdr_size(cfg) bytes at w.frame   (failed: py_walk_fail, stop)
 *       next = py_walk_frame(cfg, &w, frame copy, out)
 *       PY_NEXT_CODE: copy py_code_hdr_size(cfg) bytes at w.code   (failed: py_walk_fail)
 *                     next = py_walk_code(cfg, &w, frame copy, code copy, out)
 *       PY_NEXT_STOP: stop
 *   py_walk_end(cfg, &w)                           w.n records in out, w.status, w.flags
 *
 * Pure functions over fixed-width values: no reads of their own, offsets masked so that the
 * BPF verifier sees every access bounded, no loops. Header copies hold PY_HDR_MAX + 8 bytes;
 * @out has room for min(max_depth, SAMPLER_MAX_PYDEPTH) records.
 */
#ifndef PROBING_PYWALK_H
#define PROBING_PYWALK_H

#include "sampler.h"

#define PYW_INLINE static inline __attribute__((always_inline))

_Static_assert((SAMPLER_MAX_PYDEPTH & (SAMPLER_MAX_PYDEPTH - 1)) == 0,
	       "SAMPLER_MAX_PYDEPTH must be a power of two (index masking)");
_Static_assert((PY_HDR_MAX & (PY_HDR_MAX - 1)) == 0, "PY_HDR_MAX must be a power of two");

/*
 * How a thread's Python frames are laid out (py_proc_cfg.frames): the userspace reader picks
 * it once per process from the interpreter's version (pyproc__open).
 */
enum py_frames {
	PY_FRAMES_OBJECT = 1,  /* 3.8-3.10: tstate->frame, a chain of PyFrameObject (f_back),
				* f_lasti; one frame per C-level call of the eval loop */
	PY_FRAMES_CFRAME = 2,  /* 3.11, 3.12: tstate->cframe->current_frame, a chain of
				* _PyInterpreterFrame (previous), prev_instr */
	PY_FRAMES_CURRENT = 3, /* 3.13+: tstate->current_frame, _PyInterpreterFrame, instr_ptr */
};

/*
 * Rules within a layout (py_proc_cfg.rules), also picked once per process:
 *   LASTI_BYTES      f_lasti counts bytes, not code units (3.8, 3.9)
 *   ENTRY_FLAG       entry frames have is_entry set (3.11)
 *   ENTRY_SHIM       a C-stack-owned shim frame sits under each entry frame; the shim is no
 *                    Python frame (3.12+)
 *   ENDS_AT_ENTRY    a whole chain ends at an entry frame; one that does not was caught torn
 *                    (3.11, 3.12: py_walk_end)
 *   EXEC_ANY         f_executable may hold a non-code object: no Python frame (3.13+)
 *   HIDE_INCOMPLETE  a frame below the leaf that has not finished its prologue is hidden, as
 *                    CPython hides it (3.13+)
 *   STACKREF         f_executable is a _PyStackRef: a tagged pointer whose low bits
 *                    (PY_STACKREF_TAG) are not part of the address (3.14+)
 */
#define PY_RULE_LASTI_BYTES	0x01
#define PY_RULE_ENTRY_FLAG	0x02
#define PY_RULE_ENTRY_SHIM	0x04
#define PY_RULE_ENDS_AT_ENTRY	0x08
#define PY_RULE_EXEC_ANY	0x10
#define PY_RULE_HIDE_INCOMPLETE 0x20
#define PY_RULE_STACKREF	0x40

/* The tag bits of a _PyStackRef of the default build (3.14+: Py_TAG_BITS in
 * Include/internal/pycore_stackref.h; deferred and immortal references set bit 0, tagged
 * ints are 0b11): the object is at bits & ~PY_STACKREF_TAG. */
#define PY_STACKREF_TAG 3ULL

/* Steps of one walk: a frame pointer is followed at most this many times (each recorded
 * frame may be followed by one shim frame). */
#define PY_WALK_MAX_STEPS (2 * SAMPLER_MAX_PYDEPTH + 2)

/* The state of one walk. */
struct py_walk {
	__u64 frame;	 /* the frame to read next; 0: the chain ends */
	__u64 code;	 /* PY_NEXT_CODE: the code object to read */
	__u64 prev;	 /* the frame after the one being read */
	__u32 n;	 /* records written */
	__u32 max;	 /* records wanted at most */
	__s32 status;	 /* enum py_status */
	__u32 flags;	 /* SAMPLE_F_PY_TRUNCATED */
	__u8 done;	 /* the walk stopped by itself (end, limit, failure) */
	__u8 ended;	 /* it reached the end of the chain (a frame pointer of 0) */
	__u8 last_entry; /* the last frame looked at was an entry frame */
	__u8 popped;	 /* a popped leaf was passed over (py_walk_frame) */
	__u8 _pad[4];
};

/* What the walker reads next. */
enum py_walk_next {
	PY_NEXT_FRAME = 0, /* the frame at w->frame (after py_walk_at_end) */
	PY_NEXT_CODE = 1,  /* the code object at w->code, then py_walk_code */
	PY_NEXT_STOP = 2,  /* nothing: py_walk_end */
};

/* Fields out of a header copy; offsets masked so that the verifier sees them bounded. */
PYW_INLINE __u64 py_ld64(const __u8 *buf, __u16 off)
{
#ifdef __bpf__
	return *(const __u64 *)(buf + (off & (PY_HDR_MAX - 1)));
#else
	__u64 v;

	__builtin_memcpy(&v, buf + (off & (PY_HDR_MAX - 1)), sizeof(v));
	return v;
#endif
}

PYW_INLINE __u32 py_ld32(const __u8 *buf, __u16 off)
{
#ifdef __bpf__
	return *(const __u32 *)(buf + (off & (PY_HDR_MAX - 1)));
#else
	__u32 v;

	__builtin_memcpy(&v, buf + (off & (PY_HDR_MAX - 1)), sizeof(v));
	return v;
#endif
}

PYW_INLINE __u8 py_ld8(const __u8 *buf, __u16 off)
{
	return buf[off & (PY_HDR_MAX - 1)];
}

/* Bytes of a frame / code object header to copy; 0 if the config is unusable. */
PYW_INLINE __u32 py_hdr_size(__u16 size)
{
	__u32 sz = size;

	return sz < 8 ? 0 : sz > PY_HDR_MAX ? PY_HDR_MAX : sz;
}

PYW_INLINE __u32 py_frame_hdr_size(const struct py_proc_cfg *cfg)
{
	return py_hdr_size(cfg->off.frame_size);
}

PYW_INLINE __u32 py_code_hdr_size(const struct py_proc_cfg *cfg)
{
	return py_hdr_size(cfg->off.code_size);
}

/*
 * Where the innermost frame of a thread state is: the pointer at tstate + *@off; with
 * PY_FRAMES_CFRAME that pointer is the thread's _PyCFrame, and the frame is the pointer at
 * (_PyCFrame + *@off2) — no frame when the _PyCFrame pointer is 0. Returns the number of
 * pointers to follow: 1 or 2.
 */
PYW_INLINE int py_first_frame_offsets(const struct py_proc_cfg *cfg, __u16 *off, __u16 *off2)
{
	*off2 = 0;
	switch (cfg->frames) {
	case PY_FRAMES_OBJECT:
		*off = cfg->off.ts_frame;
		return 1;
	case PY_FRAMES_CFRAME:
		*off = cfg->off.ts_cframe;
		*off2 = cfg->off.cframe_current;
		return 2;
	default:
		*off = cfg->off.ts_current_frame;
		return 1;
	}
}

/* Start a walk at @frame (0: no Python frames), for cfg->max_depth records. */
PYW_INLINE void py_walk_begin(struct py_walk *w, const struct py_proc_cfg *cfg, __u64 frame)
{
	__builtin_memset(w, 0, sizeof(*w));
	w->frame = frame;
	w->max = cfg->max_depth < SAMPLER_MAX_PYDEPTH ? cfg->max_depth : SAMPLER_MAX_PYDEPTH;
	w->status = PY_OK;
}

/* The walk is over (stopped, or the chain ended: then w->ended is set). */
PYW_INLINE int py_walk_at_end(struct py_walk *w)
{
	if (w->done)
		return 1;
	if (!w->frame) {
		w->ended = 1;
		w->done = 1;
		return 1;
	}
	return 0;
}

/* A read the walk asked for failed: it stops with the records so far. */
PYW_INLINE void py_walk_fail(struct py_walk *w)
{
	w->status = PY_READ_ERROR;
	w->done = 1;
}

/* The instruction index of the frame in @fb running the code object at @code: code units
 * (16 bits) from the first one; -1 before the first instruction. */
PYW_INLINE __s32 py_frame_lasti(const struct py_proc_cfg *cfg, const __u8 *fb, __u64 code)
{
	__s64 d;
	__s32 lasti;

	if (cfg->frames == PY_FRAMES_OBJECT) {
		lasti = (__s32)py_ld32(fb, cfg->off.frame_lasti);
		/* 3.8/3.9 f_lasti counts bytes; 3.10 counts instructions (bpo-27129). */
		if ((cfg->rules & PY_RULE_LASTI_BYTES) && lasti > 0)
			lasti >>= 1;
		return lasti;
	}
	/* prev_instr/instr_ptr - first code unit; -1 code unit before the first one. */
	d = (__s64)(py_ld64(fb, cfg->off.frame_instr) - (code + cfg->off.code_adaptive));
	return d < 0 || d > 0x7ffffffe ? -1 : (__s32)(d >> 1);
}

/* PYF_ENTRY if the frame in @fb is known to be an entry frame from its own fields: every
 * PyFrameObject (one per C-level eval call), a 3.11 frame with is_entry set. 3.12+ entry
 * frames are found by the shim under them (py_walk_frame). */
PYW_INLINE __u32 py_frame_entry(const struct py_proc_cfg *cfg, const __u8 *fb)
{
	if (cfg->frames == PY_FRAMES_OBJECT)
		return PYF_ENTRY;
	if ((cfg->rules & PY_RULE_ENTRY_FLAG) && py_ld8(fb, cfg->off.frame_is_entry))
		return PYF_ENTRY;
	return 0;
}

/*
 * The frame at w->frame was copied to @fb. A shim frame (3.12+: owner
 * PY_FRAME_OWNED_BY_SHIM or above) marks the record before it as an entry frame and is
 * passed over; past w->max records the walk stops truncated; otherwise
 * its code object is read next.
 */
PYW_INLINE int py_walk_frame(const struct py_proc_cfg *cfg, struct py_walk *w, const __u8 *fb,
			     struct py_frame_rec *out)
{
	w->prev = py_ld64(fb, cfg->off.frame_back);
	w->code = py_ld64(fb, cfg->off.frame_code);
	if (cfg->rules & PY_RULE_STACKREF)
		w->code &= ~PY_STACKREF_TAG;
	if ((cfg->rules & PY_RULE_ENTRY_SHIM) &&
	    py_ld8(fb, cfg->off.frame_owner) >= PY_FRAME_OWNED_BY_SHIM) {
		if (w->n > 0)
			out[(w->n - 1) & (SAMPLER_MAX_PYDEPTH - 1)].meta |= PYF_ENTRY;
		w->last_entry = 1;
		w->frame = w->prev;
		return PY_NEXT_FRAME;
	}
	if (w->n >= w->max) {
		w->flags |= SAMPLE_F_PY_TRUNCATED;
		w->done = 1;
		return PY_NEXT_STOP;
	}
	if (!w->code) {
		/*
		 * 3.14+: a leaf whose executable is PyStackRef_NULL was popped and cleared
		 * after the thread's current_frame was read (only a reader from outside sees
		 * that: the thread has returned into the frame under it, which previous still
		 * names). Passed over once; anywhere else the frame changed under us.
		 */
		if ((cfg->rules & PY_RULE_STACKREF) && !w->n && !w->popped && w->prev) {
			w->popped = 1;
			w->frame = w->prev;
			return PY_NEXT_FRAME;
		}
		py_walk_fail(w);
		return PY_NEXT_STOP;
	}
	return PY_NEXT_CODE;
}

/*
 * The code object at w->code was copied to @cb (the frame's copy is still in @fb): the frame
 * becomes record out[w->n], or is passed over (3.13: not a code object, or an incomplete frame
 * below the leaf), or the walk fails (before 3.13 f_code is always code: the frame changed
 * under us).
 */
PYW_INLINE int py_walk_code(const struct py_proc_cfg *cfg, struct py_walk *w, const __u8 *fb,
			    const __u8 *cb, struct py_frame_rec *out)
{
	struct py_frame_rec *rec;
	__u32 meta;
	__s32 lasti;

	if (cfg->code_type_addr && py_ld64(cb, cfg->off.ob_type) != cfg->code_type_addr) {
		if (cfg->rules & PY_RULE_EXEC_ANY) {
			w->frame = w->prev;
			return PY_NEXT_FRAME;
		}
		py_walk_fail(w);
		return PY_NEXT_STOP;
	}
	lasti = py_frame_lasti(cfg, fb, w->code);
	meta = py_frame_entry(cfg, fb);
	/* 3.13: an incomplete frame (instr_ptr before _co_firsttraceable) below another frame
	 * is the _Py_InitCleanup shim of CALL_ALLOC_AND_ENTER_INIT: CPython hides it, so do we.
	 * A leaf in its prologue stays (the function being entered). */
	if ((cfg->rules & PY_RULE_HIDE_INCOMPLETE) && w->n > 0 &&
	    lasti < (__s32)py_ld32(cb, cfg->off.code_firsttraceable)) {
		w->frame = w->prev;
		return PY_NEXT_FRAME;
	}
	w->last_entry = meta == PYF_ENTRY;
	rec = &out[w->n & (SAMPLER_MAX_PYDEPTH - 1)];
	rec->code = w->code;
	rec->lasti = lasti;
	rec->meta = meta | (py_code_checksum(py_ld64(cb, cfg->off.code_name),
					     py_ld64(cb, cfg->off.code_filename),
					     py_ld32(cb, cfg->off.code_firstlineno))
			    << 1);
	w->n++;
	w->frame = w->prev;
	return PY_NEXT_FRAME;
}

/*
 * After the last step. A walk that used up PY_WALK_MAX_STEPS without stopping is truncated.
 * With PY_RULE_ENDS_AT_ENTRY every whole chain ends at the entry frame of the outermost eval
 * call: _PyEval_EvalFrameDefault publishes its on-stack _PyCFrame (tstate->cframe) before it
 * sets that cframe's current_frame, and a sample in between reads a stale stack slot, a chain
 * of old frames that ends anywhere. Such a chain gives PY_TORN and no records rather than
 * wrong ones.
 */
PYW_INLINE void py_walk_end(const struct py_proc_cfg *cfg, struct py_walk *w)
{
	if (!w->done)
		w->flags |= SAMPLE_F_PY_TRUNCATED;
	if ((cfg->rules & PY_RULE_ENDS_AT_ENTRY) && w->status == PY_OK && w->ended && w->n > 0 &&
	    !w->last_entry) {
		w->status = PY_TORN;
		w->n = 0;
	}
}

#endif
