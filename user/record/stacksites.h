/* SPDX-License-Identifier: MIT */
/*
 * stacksites: native stacks known by their site. A thread that stops at the same instruction
 * with the same stack pointer, and whose stack holds the same words where the unwind of its
 * first stop read them (return addresses, saved frame pointers: dwproc__unwind_checks), has
 * the same native frames, exactly: those are unwound once and kept. The collectives probes
 * learn their call sites here (and are told them: comm__site_put), and the off-CPU stacks of
 * threads that block again and again in the same place (a worker waiting on its queue with a
 * timeout) are checked against here before they are unwound.
 */
#ifndef PROBING_STACKSITES_H
#define PROBING_STACKSITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/commprobe.h"
#include "native/dwproc.h"
#include "python/pymerge.h"

/* A known site: its checks, as the probes have them, and its native frames. */
struct stack_site {
	pid_t pid;
	uint32_t variant;	/* which of its place's (struct site_key) */
	struct site_checks chk; /* chk.id: the site's id */
	int nn;
	struct pym_frame f[]; /* as stackbuild_native built them, leaf first */
};

struct stacksites;

/*
 * A new, empty table that holds at most @max sites (0: no limit): learning one more past it
 * forgets them all first, so that a table fed by threads that come and go stays bounded.
 * NULL with errno set on failure.
 */
struct stacksites *stacksites__new(size_t max);

/* Free @ss and its sites. NULL is a no-op. */
void stacksites__free(struct stacksites *ss);

/* The site with id @id, or NULL (unknown, or its process forgotten). */
const struct stack_site *stacksites__by_id(const struct stacksites *ss, uint64_t id);

/*
 * The site of @k (the thread, its instruction and stack pointers) whose checks hold on
 * @regs (DWREG_COUNT of them) and the copy @stack of @stack_len bytes from regs[DWREG_RSP],
 * any of its variants (sampler.h: SITE_VARIANTS); NULL if none. Its frames are then those of
 * this stack.
 */
const struct stack_site *stacksites__match(const struct stacksites *ss, const struct site_key *k,
					   const uint64_t *regs, const uint8_t *stack,
					   size_t stack_len);

/*
 * Learn the site of @k, whose stack (@regs, @stack, @stack_len) @dp just unwound into the
 * @nnat frames @nat, complete, which stackbuild made into the @nn frames @f: only where
 * dwproc__unwind_checks proves which words decided them. It becomes @k's latest site; the
 * oldest of STACKSITES_VARIANTS is then no longer matched (still found by its id). Return the
 * site (its id new), or NULL when nothing was learned (not provable, or no memory).
 */
const struct stack_site *stacksites__learn(struct stacksites *ss, const struct site_key *k,
					   struct dwproc *dp, const uint64_t *regs,
					   const void *stack, size_t stack_len,
					   const struct dwproc_frame *nat, int nnat,
					   const struct pym_frame *f, int nn);

/*
 * Whether @k was asked about before (since the table last forgot everything): learning a site
 * costs a few unwinds (dwproc__unwind_checks), worth it only where threads stop again. Records
 * @k. False also when out of memory.
 */
bool stacksites__seen(struct stacksites *ss, const struct site_key *k);

/* Forget the sites of process @pid (it exited, or exec'd another program). */
void stacksites__forget(struct stacksites *ss, pid_t pid);

/* Sites known now. */
size_t stacksites__count(const struct stacksites *ss);

#endif
