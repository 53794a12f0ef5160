/* SPDX-License-Identifier: MIT */
/*
 * stackbuild: turn unwound native pcs into frames ready for the Python merge (pymerge):
 * symbolized, inline chains expanded, each classified (eval loop, interpreter plumbing).
 * Shared by record (samples) and backtrace (live threads).
 */
#ifndef PROBING_STACKBUILD_H
#define PROBING_STACKBUILD_H

#include "native/dwproc.h"
#include "python/pymerge.h"
#include "python/pyproc.h"
#include "native/symbolize.h"

/*
 * Symbolize @pcs (@n, innermost first) of the process behind @dp into @out (room for @max).
 * With @py (the process's interpreter, or NULL), pcs in the eval loop are not symbolized at
 * all — they stand for Python frames and every instruction of the loop would be another
 * cache entry — but become one PYM_EVAL frame. Modules that appeared since the maps were
 * read (dlopen) are picked up. Return the number of frames.
 */
int stackbuild_native(struct dwproc *dp, struct symbolizer *sym, struct pyproc *py,
		      const struct dwproc_frame *pcs, int n, struct pym_frame *out, int max);

#endif
