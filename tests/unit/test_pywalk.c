// SPDX-License-Identifier: MIT
/* The walk rules shared by the BPF walker and the reader from outside (bpf/pywalk.h). */
#include <stdbool.h>
#include <string.h>

#include "bpf/pywalk.h"
#include "test.h"

#define OFF_CODE  0
#define OFF_BACK  8
#define OFF_OWNER 70

static void cfg_314(struct py_proc_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->frames = PY_FRAMES_CURRENT;
	c->rules = PY_RULE_ENTRY_SHIM | PY_RULE_EXEC_ANY | PY_RULE_STACKREF;
	c->max_depth = 64;
	c->off.frame_code = OFF_CODE;
	c->off.frame_back = OFF_BACK;
	c->off.frame_owner = OFF_OWNER;
}

static struct py_proc_cfg cfg;
static struct py_walk w;

/*
 * One step of the walk over a frame whose header holds executable @exec (a _PyStackRef) and
 * previous @prev; @first starts a walk at that frame.
 */
static int step(bool first, uint64_t exec, uint64_t prev)
{
	static struct py_frame_rec out[SAMPLER_MAX_PYDEPTH];
	uint8_t fb[PY_HDR_MAX + 8] = {0};

	if (first)
		py_walk_begin(&w, &cfg, 0x1000);
	memcpy(fb + OFF_CODE, &exec, 8);
	memcpy(fb + OFF_BACK, &prev, 8);
	return py_walk_frame(&cfg, &w, fb, out);
}

TEST(a_popped_leaf_is_passed_over_once)
{
	cfg_314(&cfg);
	/* The leaf was cleared after current_frame was read: f_executable PyStackRef_NULL. */
	CHECK_EQ(step(true, 1, 0x2000), PY_NEXT_FRAME);
	CHECK_EQ(w.frame, 0x2000);
	CHECK_EQ(w.status, PY_OK);
	/* Its caller: a code object to read next. */
	CHECK_EQ(step(false, 0x5000 | 1, 0x3000), PY_NEXT_CODE);
	CHECK_EQ(w.code, 0x5000);
}

TEST(a_cleared_frame_anywhere_else_fails_the_walk)
{
	cfg_314(&cfg);
	/* Two cleared frames in a row: only the first is a leaf popped meanwhile. */
	CHECK_EQ(step(true, 1, 0x2000), PY_NEXT_FRAME);
	CHECK_EQ(step(false, 1, 0x3000), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
	/* A cleared frame with no frame under it. */
	CHECK_EQ(step(true, 1, 0), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
	/* Before 3.14 (no _PyStackRef) a NULL executable is never passed over. */
	cfg.rules &= ~PY_RULE_STACKREF;
	CHECK_EQ(step(true, 0, 0x2000), PY_NEXT_STOP);
	CHECK_EQ(w.status, PY_READ_ERROR);
}

TEST_MAIN()
