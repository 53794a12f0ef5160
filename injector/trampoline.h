/* SPDX-License-Identifier: MIT */
/*
 * trampoline: the code and the data with which a borrowed thread runs one call and then puts
 * itself back exactly as it was, without needing the injector (inject.c) to be alive.
 *
 * The injector writes the code once into the unused tail of the last page of an executable
 * mapping that is never unloaded (libc, ld.so, the executable: see inject.c) and, for each
 * call, a data block (struct tramp_data) on the thread's stack below its red zone. Then it
 * changes the thread's registers once: rip = the code, rsp = the block. From there on the
 * thread does everything by itself:
 *
 *  1. blocks every signal but synchronous faults (rt_sigprocmask), resets x87/MXCSR;
 *  2. calls fn(arg0, arg1); if that returned 0 and err_fn is set, calls err_fn() (dlerror);
 *     stores both results and marks the block PARKED;
 *  3. waits up to park_ts in ppoll(), for the injector to take over (it stops the thread
 *     there and restores it with ptrace, letting the kernel apply its own restart rules);
 *  4. if nobody came (the injector was killed), restores itself: decides as the kernel would
 *     whether an interrupted system call is restarted or returns EINTR (a signal that arrived
 *     meanwhile and runs a handler: SA_RESTART, -ERESTARTSYS/-ERESTARTNOHAND/
 *     -ERESTART_RESTARTBLOCK, see arch/x86/kernel/signal.c handle_signal()), reloads the
 *     extended FP state (xrstor, or fxrstor without XSAVE), the signal mask, every general
 *     register, and returns with iretq to the interrupted instruction (or to the system call
 *     instruction, restarting it; -ERESTART_RESTARTBLOCK through restart_syscall, whose
 *     saved state nothing here has touched). No rt_sigreturn: it would reset the thread's
 *     restart block, and a restarted nanosleep/poll/futex wait would fail with EINTR.
 *
 * The offsets below are shared by the assembly and the C structure (checked at compile time).
 */
#ifndef PROBING_TRAMPOLINE_H
#define PROBING_TRAMPOLINE_H

#define TR_TOKEN      0
#define TR_STATE      8
#define TR_FN	      16
#define TR_ARG0	      24
#define TR_ARG1	      32
#define TR_ERR_FN     40
#define TR_RESULT     48
#define TR_ERR_RESULT 56
#define TR_CALL_MASK  64
#define TR_MASK	      72
#define TR_PARK_TS    80
#define TR_KIND	      96
#define TR_FXONLY     100
#define TR_RFBM	      104
#define TR_MXCSR      112
#define TR_EINTR_RIP  120
#define TR_PENDING    128
#define TR_ACT	      136
#define TR_GPR	      168
#define TR_IRET	      288
#define TR_XSAVE      384

/* state = token + one of these (a value the stack would not hold by chance). */
#define TR_CALLING   0
#define TR_PARKED    1
#define TR_RESTORING 2

/* kind: what the thread was doing when it was stopped, for the restart decision. */
#define TR_KIND_NONE	0 /* not in a system call: resume where it was */
#define TR_KIND_NOINTR	1 /* -ERESTARTNOINTR: always restarted */
#define TR_KIND_RESTART 2 /* -ERESTARTSYS: restarted unless a handler without SA_RESTART runs */
#define TR_KIND_HANDLER \
	3 /* -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK, EINTR calls: EINTR
			    * if a handler runs, else restarted */

#ifndef __ASSEMBLER__
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/user.h>

struct tramp_data {
	uint64_t token;
	uint64_t state;
	uint64_t fn, arg0, arg1, err_fn;
	uint64_t result, err_result;
	uint64_t call_mask; /* signal mask during the call */
	uint64_t mask;	    /* the thread's own mask, restored */
	int64_t park_ts[2]; /* struct timespec: how long to wait for the injector */
	uint32_t kind;
	uint32_t fxonly; /* no XSAVE: restore with fxrstor */
	uint64_t rfbm;	 /* xrstor's component mask */
	uint32_t mxcsr;	 /* MXCSR during the call */
	uint32_t pad0;
	uint64_t eintr_rip; /* where an interrupted call returns EINTR (rax = -EINTR) */
	uint64_t pending;   /* scratch: rt_sigpending */
	uint64_t act[4];    /* scratch: the kernel's struct sigaction */
	/* r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi: the restart variant */
	uint64_t gpr[15];
	uint64_t iret[5]; /* rip cs rflags rsp ss, popped by iretq */
	uint8_t pad1[TR_XSAVE - TR_IRET - 40];
	/* TR_XSAVE: the XSAVE (or FXSAVE) image, 64-byte aligned; then the call's strings */
};

/* The machine code: copy @len bytes from @bytes; the sections at the offsets given. */
struct tramp_code {
	const unsigned char *bytes;
	size_t len;
	size_t park;	/* the park (step 3) starts here */
	size_t restore; /* the self-restore (step 4) starts here, up to len */
};

/* The trampoline's code (static, position-independent, no relocation). */
void tramp__code(struct tramp_code *c);

/*
 * Fill the register part of @d for a thread stopped with registers @r: what it resumes with
 * (the kernel's restart already applied when @r is a system call interrupted with an
 * -ERESTART* code, or with -EINTR and @eintr_call set), and the restart kind.
 */
void tramp__set_regs(struct tramp_data *d, const struct user_regs_struct *r, bool eintr_call);

#endif
#endif
