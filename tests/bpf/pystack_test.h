/* SPDX-License-Identifier: MIT */
/* What the test program pystack_test.bpf.c sends for each sample (tests/tools/pystack_bpf.c). */
#ifndef PROBING_PYSTACK_TEST_H
#define PROBING_PYSTACK_TEST_H

#include "bpf/sampler.h"

struct pystack_test_event {
	__u32 pid, tid;
	__u64 fsbase;
	__u64 walk_ns; /* time py_walk took */
	__s32 status;  /* enum py_status */
	__u32 flags;   /* SAMPLE_F_PY_TRUNCATED */
	__u32 n;       /* frames[] used */
	__u32 user_mode;
	__s32 stop_err;	   /* stop_after_walk: what bpf_send_signal(SIGSTOP) returned */
	__u32 page_frames; /* frames copied from the innermost frame's page (py_walk_mem.page) */
	__u64 user_ip, user_sp; /* the thread's user-mode pc and sp (0 if unknown) */
	struct py_frame_rec frames[SAMPLER_MAX_PYDEPTH];
};

#endif
