// SPDX-License-Identifier: MIT
/* The walk rules shared by the BPF walker and the reader from outside (bpf/pywalk.h). */
#include <string.h>

#include "bpf/pywalk.h"
#include "test.h"

#define OFF_CODE  0
#define OFF_BACK  8
#define OFF_OWNER 70

static void cfg_314(struct py_proc_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->frames = PY_FRAMES_CURRENT;
	cfg->rules = PY_RULE_ENTRY_SHIM | PY_RULE_EXEC_ANY | PY_RULE_STACKREF;
	cfg->max_depth = 64;
	cfg->off.frame_code = OFF_CODE;
	cfg->off.frame_back = OFF_BACK;
	cfg->off.frame_owner = OFF_OWNER;
}

/* A frame header: its executable (a _PyStackRef) and previous. */
static void frame(uint8_t *fb, uint64_t exec, uint64_t prev)
{
	memset(fb, 0, PY_HDR_MAX + 8);
	memcpy(fb + OFF_CODE, &exec, 8);
	memcpy(fb + OFF_BACK, &prev, 8);
}

TEST(a_popped_leaf_is_passed_over_once)
{
	struct py_frame_rec out[SAMPLER_MAX_PYDEPTH];
	struct py_proc_cfg cfg;
	uint8_t fb[PY_HDR_MAX + 8];
	struct py_walk w;

	cfg_314(&cfg);
	py_walk_begin(&w, &cfg, 0x1000);
	/* The leaf was cleared after current_frame was read: f_executable PyStackRef_NULL. */
	frame(fb, 1, 0x2000);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_FRAME);
	CHECK_EQ(w.frame, 0x2000);
	CHECK_EQ(w.status, PY_OK);
	/* Its caller: a code object to read next. */
	frame(fb, 0x5000 | 1, 0x3000);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_CODE);
	CHECK_EQ(w.code, 0x5000);
}

TEST(a_cleared_frame_anywhere_else_fails_the_walk)
{
	struct py_frame_rec out[SAMPLER_MAX_PYDEPTH];
	struct py_proc_cfg cfg;
	uint8_t fb[PY_HDR_MAX + 8];
	struct py_walk w;

	cfg_314(&cfg);
	/* Two cleared frames in a row: only the first is a leaf popped meanwhile. */
	py_walk_begin(&w, &cfg, 0x1000);
	frame(fb, 1, 0x2000);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_FRAME);
	frame(fb, 1, 0x3000);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
	/* A cleared frame with no frame under it. */
	py_walk_begin(&w, &cfg, 0x1000);
	frame(fb, 1, 0);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
	/* Before 3.14 (no _PyStackRef) a NULL executable is never passed over. */
	cfg.rules &= ~PY_RULE_STACKREF;
	py_walk_begin(&w, &cfg, 0x1000);
	frame(fb, 0, 0x2000);
	CHECK_EQ(py_walk_frame(&cfg, &w, fb, out), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
}

TEST_MAIN()
