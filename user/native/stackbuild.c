// SPDX-License-Identifier: MIT
#include <string.h>

#include "native/stackbuild.h"

int stackbuild_native(struct dwproc *dp, struct symbolizer *sym, struct pyproc *py,
		      const struct dwproc_frame *pcs, int n, struct pym_frame *out, int max)
{
	/* One frame stands for every pc of the eval loop; its address is its identity. */
	static struct frame eval_frame = {.kind = FRAME_NATIVE, .func = "_PyEval_EvalFrameDefault"};
	const char *interp = py ? pyproc__elf_path(py) : NULL;
	const struct frame *fr;
	Dwfl_Module *mod;
	int i, j, cnt, k = 0;

	for (i = 0; i < n && k < max; i++) {
		uint64_t pc = pcs[i].pc, at = pcs[i].activation || !pc ? pc : pc - 1;

		if (py && pyproc__in_eval(py, at)) {
			out[k].f = eval_frame;
			out[k].f.module = interp;
			/* The module differs per interpreter: interned by content. */
			out[k].stable = NULL;
			out[k++].flags = PYM_EVAL | PYM_PLUMBING;
			continue;
		}
		mod = dwproc__module_refreshed(dp, pc);
		if (symbolizer__lookup(sym, mod, pc, pcs[i].activation, &fr, &cnt))
			continue;
		for (j = 0; j < cnt && k < max; j++, k++) {
			out[k].f = fr[j];
			out[k].stable = &fr[j];
			out[k].flags = pymerge_classify(&fr[j], interp);
		}
	}
	return k;
}
