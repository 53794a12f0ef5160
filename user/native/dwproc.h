/* SPDX-License-Identifier: MIT */
/*
 * dwproc: the libdw (libdwfl) view of one target process — its ELF modules, reported from a
 * snapshot of /proc/PID/maps (so samples can still be unwound after the process exits), and
 * DWARF CFI unwinding of a sample from its registers and a copy of the top of its stack.
 */
#ifndef PROBING_DWPROC_H
#define PROBING_DWPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <elfutils/libdwfl.h>

#include "base/procmaps.h"

struct dwproc;

/*
 * Build the view of process @pid from its current maps. Return it, or NULL with errno set
 * (ESRCH: the process is gone).
 */
struct dwproc *dwproc__new(pid_t pid);

/*
 * The creator's release (the holder that made @dp with dwproc__new): from now on @dp is
 * never refreshed from its process's maps, which may no longer describe it (an exec, or the
 * pid reused); it is freed once no shared reference remains. NULL is a no-op.
 */
void dwproc__free(struct dwproc *dp);

/*
 * A new reference to @dp for a process just forked from its process: until the child execs
 * it has its parent's address space, so the parent's view unwinds and symbolizes its
 * samples, even once the child has exited (short-lived children often exit before their
 * own maps could be read). Modules the parent maps later are added to the view while its
 * creator holds it; what the child maps itself is not (see dwproc__frame_outside). Released
 * with dwproc__unshare. Return @dp.
 */
struct dwproc *dwproc__share(struct dwproc *dp);

/* Release a reference taken with dwproc__share; the last one frees. NULL is a no-op. */
void dwproc__unshare(struct dwproc *dp);

/* Longest wait between two re-reads of the maps that find nothing new (ms). */
#define REFRESH_MAX_GAP_MS 100

/*
 * Re-read the maps and report modules that appeared (dlopen, a starting process) or moved.
 * Rate-limited with a back-off: right after a refresh that found a new module the next one
 * may run at once; each refresh that finds nothing doubles the gap, up to
 * @max_interval_ms. A view its creator let go while shared (dwproc__free) is never re-read.
 * Returns 1 if it re-read, 0 if skipped, -errno on failure.
 */
int dwproc__refresh(struct dwproc *dp, unsigned int max_interval_ms);

/* One unwound frame. */
struct dwproc_frame {
	uint64_t pc;
	bool activation; /* true for the interrupted frame (and signal frames): pc is exact;
			  * false for return addresses: symbolize pc - 1 */
};

/*
 * Unwind thread @tid from @regs (DWARF numbering, DWREG_COUNT of them, bpf/sampler.h) and the
 * @stack_len bytes of @stack copied from regs[DWREG_RSP]. Store up to @max frames, innermost
 * first, in @out. The frames are libdwfl's; where every frame's .eh_frame rule has the simple
 * shape of cfirule.h they are found by those rules, cached per address, without libdwfl's
 * frame states (the same frames, in a few loads each). An unwind that stops at an address in
 * no known module re-reads the maps (dwproc__module_refreshed) and, if that finds the
 * address's module, runs again.
 *
 * *@complete is set only when the last frame is, by evidence, the thread's outermost one:
 *  - its CFI says its return address is undefined, the ABI's end-of-stack mark (glibc:
 *    _start of the executable; clone3/clone for every other thread). It lives in .eh_frame,
 *    which stripping keeps, so stripped binaries and libraries count the same; or
 *  - its stack pointer is the one the kernel started the program with (/proc/PID/stat
 *    startstack): the dynamic loader's entry code, which has no CFI.
 * A stop for any other reason (stack copy too short, a read outside it, missing CFI, the
 * @max limit) leaves it false, even where libdwfl calls it the end of the stack.
 * Return the number of frames (>= 1 when the pc is non-zero) or -errno.
 */
int dwproc__unwind(struct dwproc *dp, pid_t tid, const uint64_t *regs, const void *stack,
		   size_t stack_len, struct dwproc_frame *out, int max, bool *complete);

/* How stacks were unwound, of every process since the start (dwproc__unwind_counts). */
struct dwproc_unwinds {
	unsigned long by_rules;	  /* by the cached call-frame rules alone (cfirule.h) */
	unsigned long by_libdwfl; /* a frame whose rule has another shape, or all of them with
				   * PROBING_UNWIND_LIBDWFL in the environment (benchmarks) */
	unsigned long differ;	  /* of by_rules, those that differed from libdwfl's */
	unsigned long ns;	  /* the time dwproc__unwind took in all */
	bool checked; /* PROBING_UNWIND_CHECK is set: each of by_rules was unwound both ways,
		       * libdwfl's kept and a difference logged as a warning (differ counts) */
};

/* The counts so far, into @out. */
void dwproc__unwind_counts(struct dwproc_unwinds *out);

/* A check of dwproc__unwind_checks that is a register's value (DWREG_* in the low bits). */
#define DWPROC_CHECK_REG 0x80000000u

/*
 * What decided the unwind of @n @frames (and @complete) that dwproc__unwind gave for @regs and
 * @stack (@stack_len bytes from regs[DWREG_RSP]): checks, each the word at offset off[i] of the
 * stack, or with DWPROC_CHECK_REG a register, and the value val[i] it had. Any unwind of @tid
 * from the same rip and rsp whose checked words and registers have these values gives the same
 * frames. Chosen as the words read that are a frame's return address or point into the stack
 * (saved frame pointers) and the registers that point into the stack, then proven: the unwind
 * redone with every other word of the copy and every other register replaced by a
 * non-canonical address must give the same frames (any use of a replaced value as an address
 * or a return address would derail it). Meant for a @complete unwind: one that stopped early
 * may have stopped on a value that no check covers. Return the number of checks (at most @max),
 * 0 when no such set of @max checks was found (the caller copies the stack each time), or
 * -errno.
 */
int dwproc__unwind_checks(struct dwproc *dp, pid_t tid, const uint64_t *regs, const void *stack,
			  size_t stack_len, const struct dwproc_frame *frames, int n, bool complete,
			  uint32_t *off, uint64_t *val, int max);

/* The module holding @pc, or NULL (anonymous memory, JIT code, unknown). */
Dwfl_Module *dwproc__module(struct dwproc *dp, uint64_t pc);

/*
 * The address of the first of @frames (@n of them, as dwproc__unwind gives them: a return
 * address as pc - 1) that lies in no module of @dp, or 0 if all do. Addresses in the first
 * page (a null call) do not count.
 */
uint64_t dwproc__frame_outside(struct dwproc *dp, const struct dwproc_frame *frames, int n);

/*
 * As dwproc__module, but when no module holds @pc (and it is not a null-page address) the
 * maps are re-read first (dwproc__refresh, at most every REFRESH_MAX_GAP_MS while nothing
 * new turns up): a library may have been mapped since (dlopen, a process starting).
 */
Dwfl_Module *dwproc__module_refreshed(struct dwproc *dp, uint64_t pc);

#endif
