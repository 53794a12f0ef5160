// SPDX-License-Identifier: MIT
#include "python/pymerge.h"
#include "bpf/sampler.h"
#include "test.h"

#define LIBPY "/usr/lib/libpython3.12.so.1.0"

static struct pym_frame nat(const char *func, const char *module)
{
	struct pym_frame p = {.f = {.kind = FRAME_NATIVE, .func = func, .module = module}};

	p.flags = pymerge_classify(&p.f, LIBPY);
	return p;
}

static struct pym_frame pyf(const char *func, bool entry)
{
	return (struct pym_frame){.f = {.kind = FRAME_PYTHON, .func = func, .file = "a.py"},
				  .flags = entry ? PYF_ENTRY : 0};
}

/* "a;b;c" of the merged stack, leaf first. */
static const char *names(const struct pym_frame *f, int n)
{
	static char buf[1024];
	int i, off = 0;

	buf[0] = '\0';
	for (i = 0; i < n; i++)
		off += snprintf(buf + off, sizeof(buf) - off, "%s%s", i ? ";" : "", f[i].f.func);
	return buf;
}

TEST(classify)
{
	struct frame f = {.kind = FRAME_NATIVE, .module = LIBPY};

	f.func = "_PyEval_EvalFrameDefault";
	CHECK_EQ(pymerge_classify(&f, LIBPY), PYM_EVAL | PYM_PLUMBING);
	f.func = "_PyEval_EvalFrameDefault.cold";
	CHECK_EQ(pymerge_classify(&f, LIBPY), PYM_EVAL | PYM_PLUMBING);
	f.func = "_PyEval_EvalFrameDefaultX";
	CHECK_EQ(pymerge_classify(&f, LIBPY), PYM_PLUMBING); /* still _PyEval_ plumbing */
	f.func = "_PyObject_VectorcallTstate";
	CHECK_EQ(pymerge_classify(&f, LIBPY), PYM_PLUMBING);
	f.func = "list_sort_impl";
	CHECK_EQ(pymerge_classify(&f, LIBPY), 0);
	f.func = "[python3.11]";
	CHECK_EQ(pymerge_classify(&f, LIBPY), PYM_PLUMBING);
	/* Another module's frames are never folded, whatever their name. */
	f.module = "/usr/lib/libz.so.1";
	f.func = "PyObject_Call";
	CHECK_EQ(pymerge_classify(&f, LIBPY), 0);
	f.kind = FRAME_PYTHON;
	CHECK_EQ(pymerge_classify(&f, LIBPY), 0);
}

TEST(eval_frames_replaced_by_groups_311_style)
{
	/* 3.11+: one eval call runs inner()+outer() (inlined calls), another runs main(). */
	struct pym_frame n[] = {
		nat("deflate", "/usr/lib/libz.so.1"),	nat("zlib_compress", "/lib/zlib.so"),
		nat("cfunction_vectorcall_O", LIBPY),	nat("_PyEval_EvalFrameDefault", LIBPY),
		nat("_PyFunction_Vectorcall", LIBPY),	nat("builtin_sorted", LIBPY),
		nat("_PyEval_EvalFrameDefault", LIBPY), nat("PyEval_EvalCode", LIBPY),
		nat("pymain_run_python", LIBPY),	nat("main", "/usr/bin/python3"),
		nat("_start", "/usr/bin/python3"),
	};
	struct pym_frame p[] = {pyf("inner", false), pyf("outer", true), pyf("main_py", true)};
	struct pym_frame out[32];
	int k = pymerge(n, 11, p, 3, out, 32);

	CHECK_STR(names(out, k),
		  "deflate;zlib_compress;inner;outer;builtin_sorted;main_py;main;_start");
	CHECK(out[2].f.kind == FRAME_PYTHON);
}

TEST(leftover_python_frames_go_rootward)
{
	/* Native unwinding stopped after the first eval frame. */
	struct pym_frame n[] = {nat("_PyEval_EvalFrameDefault", LIBPY)};
	struct pym_frame p[] = {pyf("f", true), pyf("g", true), pyf("h", true)};
	struct pym_frame out[8];
	int k = pymerge(n, 1, p, 3, out, 8);

	CHECK_STR(names(out, k), "f;g;h");
}

TEST(leftover_eval_frames_stay_native)
{
	struct pym_frame n[] = {nat("_PyEval_EvalFrameDefault", LIBPY),
				nat("_PyEval_EvalFrameDefault.cold", LIBPY), nat("main", "/bin/p")};
	struct pym_frame p[] = {pyf("f", true)};
	struct pym_frame out[8];
	int k = pymerge(n, 3, p, 1, out, 8);

	CHECK_STR(names(out, k), "f;_PyEval_EvalFrameDefault.cold;main");
}

TEST(no_python_frames_nothing_folded)
{
	struct pym_frame n[] = {nat("PyObject_Call", LIBPY), nat("_PyEval_EvalFrameDefault", LIBPY),
				nat("main", "/bin/p")};
	struct pym_frame out[8];
	int k = pymerge(n, 3, NULL, 0, out, 8);

	CHECK_STR(names(out, k), "PyObject_Call;_PyEval_EvalFrameDefault;main");
}

TEST(output_bounded)
{
	struct pym_frame n[] = {nat("a", "/x"), nat("b", "/x"), nat("c", "/x")};
	struct pym_frame out[2];

	CHECK_EQ(pymerge(n, 3, NULL, 0, out, 2), 2);
}

TEST_MAIN()
