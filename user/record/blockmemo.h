/* SPDX-License-Identifier: MIT */
/*
 * blockmemo: the stack id of a thread's last block, kept with what decided it. A thread that
 * blocks again and again in the same place (a worker waiting on its queue with a timeout)
 * sends, for each block, its site's id (stacksites.h: its native frames, exactly), its kernel
 * stack and its Python frames as the probe read them (code object, instruction, checksum).
 * When all of that is what the thread's previous block sent, and the interpreter the frames
 * were resolved against is the same one, the stack is the same: its interned id is reused
 * instead of resolving and interning every frame again. The comparison is exact (the bytes
 * themselves, not a hash of them).
 */
#ifndef PROBING_BLOCKMEMO_H
#define PROBING_BLOCKMEMO_H

#include <stdbool.h>
#include <stdint.h>

#include "bpf/sampler.h"

/* What decides the stack of a block whose native frames are a known site's. */
struct block_stack_key {
	uint64_t site_id; /* the site (stack_site.chk.id): its native frames */
	uint64_t py_gen;  /* the interpreter object the Python frames are resolved against */
	uint32_t flags;	  /* the sample's flags that change the stack (SAMPLE_F_PY_TRUNCATED) */
	uint32_t py_len, kstack_len;
	const struct py_frame_rec *py; /* @py_len frames, innermost first */
	const uint64_t *kst;	       /* @kstack_len kernel addresses */
};

/* One thread's memo: zeroed is empty. */
struct blockmemo {
	uint64_t site_id, py_gen, stack_id;
	uint32_t flags, py_len, kstack_len;
	uint32_t cap;	/* bytes allocated at words */
	uint8_t *words; /* the Python frames, then the kernel addresses */
};

/* Whether @m holds @k; then its stack id is *@stack_id. */
bool blockmemo__get(const struct blockmemo *m, const struct block_stack_key *k, uint64_t *stack_id);

/*
 * Keep @k and its @stack_id in @m (replacing what it held). Only a stack whose every frame
 * was resolved for good may be kept: one with a frame named "[unknown]" for now (a code object
 * not readable yet) must be resolved again. 0, or -ENOMEM (@m is then empty).
 */
int blockmemo__put(struct blockmemo *m, const struct block_stack_key *k, uint64_t stack_id);

/* Free what @m holds and leave it empty. */
void blockmemo__release(struct blockmemo *m);

#endif
