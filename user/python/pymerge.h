/* SPDX-License-Identifier: MIT */
/*
 * pymerge: merge a sample's native frames with its Python frames (docs/design.md §5 "Merge").
 * Each native frame of the interpreter's eval loop (_PyEval_EvalFrameDefault, including its
 * .cold part) is replaced by the Python frames it was running; interpreter call plumbing
 * (vectorcall trampolines, PyObject_Call, the start-up chain) is folded away; every other
 * native frame — C extensions, libraries, the interpreter's own builtins — stays where it
 * is, so library frames sit right below the Python frame that called them.
 */
#ifndef PROBING_PYMERGE_H
#define PROBING_PYMERGE_H

#include <stdbool.h>

#include "base/frame.h"

/* Classification of a native frame. */
#define PYM_EVAL     1u /* an eval-loop frame: stands for one group of Python frames */
#define PYM_PLUMBING 2u /* interpreter internals that add nothing to a Python stack */

/*
 * Classify native frame @f: @interp_module is the path of the ELF that holds the
 * interpreter (frames of other modules are never plumbing). Pure function of the names.
 */
unsigned int pymerge_classify(const struct frame *f, const char *interp_module);

/* One frame of either kind as the merge sees it. */
struct pym_frame {
	struct frame f;
	const struct frame *stable; /* cached source of f, or NULL (passed through) */
	unsigned int flags;	    /* native: PYM_*; Python: PYF_ENTRY (bpf/sampler.h) */
};

/*
 * Merge @native (leaf first, @nn) with @py (leaf first, @np; a group of frames ends with a
 * PYF_ENTRY frame — the outermost frame run by one eval call) into @out (room for @max).
 * Python groups replace eval frames in order; groups left over (native unwinding stopped
 * early) go on the root side; eval frames left over (a truncated Python stack) stay as
 * native frames. With no Python frames nothing is folded. Returns the number of frames.
 */
int pymerge(const struct pym_frame *native, int nn, const struct pym_frame *py, int np,
	    struct pym_frame *out, int max);

#endif
