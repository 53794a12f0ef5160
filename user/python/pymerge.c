// SPDX-License-Identifier: MIT
#include <string.h>

#include "python/pymerge.h"
#include "bpf/sampler.h"

/*
 * Interpreter functions that only pass a call along (CPython 3.8-3.13: Objects/call.c,
 * Python/ceval.c, Objects/methodobject.c, Objects/descrobject.c, Modules/main.c,
 * Python/pythonrun.c, Modules/_threadmodule.c). Prefix match.
 */
static const char *const plumbing[] = {
	"_PyEval_",
	"PyEval_",
	"_PyFunction_",
	"PyObject_Call",
	"_PyObject_Call",
	"PyObject_Vectorcall",
	"_PyObject_Vectorcall",
	"_PyObject_FastCall",
	"_PyObject_MakeTpCall",
	"PyVectorcall_",
	"_PyVectorcall_",
	"method_vectorcall",
	"cfunction_call",
	"cfunction_vectorcall",
	"function_code_fastcall",
	"slot_tp_call",
	"vectorcall_",
	"call_function",
	"do_call_core",
	"object_vacall",
	"Py_RunMain",
	"Py_BytesMain",
	"pymain_",
	"_PyRun_",
	"PyRun_",
	"pyrun_",
	"run_mod",
	"run_eval_code_obj",
	"thread_run",
	"t_bootstrap",
	"pythread_wrapper",
	"builtin_exec",
	"exec_code_in_module",
	"_Py_RunMain",
	"partial_call",
	"partial_vectorcall",
	"method_call",
	"PyCFunction_Call",
	"_PyCFunction_",
	"wrapperdescr_call",
	"wrapper_call",
	"_PyMethodDef_",
	"context_run",
	"gen_send_ex",
	"gen_iternext",
	"gen_send",
	"_PyGen_",
	"task_step",
	"task_wakeup",
};

static bool is_eval_name(const char *name)
{
	static const char eval[] = "_PyEval_EvalFrameDefault";
	size_t n = sizeof(eval) - 1;

	/* The hot function and its GCC-split parts (".cold", ".part.0"). */
	return !strncmp(name, eval, n) && (name[n] == '\0' || name[n] == '.');
}

unsigned int pymerge_classify(const struct frame *f, const char *interp_module)
{
	size_t i;

	if (f->kind != FRAME_NATIVE || !f->func)
		return 0;
	if (is_eval_name(f->func))
		return PYM_EVAL | PYM_PLUMBING;
	if (!interp_module || !f->module || strcmp(f->module, interp_module))
		return 0;
	/* Unnamed code of a stripped interpreter: internals we cannot tell apart. */
	if (f->func[0] == '[')
		return PYM_PLUMBING;
	for (i = 0; i < sizeof(plumbing) / sizeof(plumbing[0]); i++)
		if (!strncmp(f->func, plumbing[i], strlen(plumbing[i])))
			return PYM_PLUMBING;
	return 0;
}

/* Copy the Python group starting at py[*pi] (up to and including its entry frame). */
static int emit_group(const struct pym_frame *py, int np, int *pi, struct pym_frame *out, int n,
		      int max)
{
	while (*pi < np && n < max) {
		out[n++] = py[(*pi)++];
		if (out[n - 1].flags & PYF_ENTRY)
			break;
	}
	return n;
}

int pymerge(const struct pym_frame *native, int nn, const struct pym_frame *py, int np,
	    struct pym_frame *out, int max)
{
	int i, pi = 0, n = 0;

	for (i = 0; i < nn && n < max; i++) {
		if (np && (native[i].flags & PYM_EVAL) && pi < np) {
			n = emit_group(py, np, &pi, out, n, max);
			continue;
		}
		if (np && (native[i].flags & PYM_PLUMBING) && !(native[i].flags & PYM_EVAL))
			continue;
		out[n++] = native[i];
	}
	/* Python frames the native unwind did not reach: on the root side, in order. */
	while (pi < np && n < max)
		out[n++] = py[pi++];
	return n;
}
