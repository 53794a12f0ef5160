/* SPDX-License-Identifier: MIT */
/*
 * borrow: how the injector borrows one thread of a running process (steps 4-6 of inject.h)
 * and gives it back exactly as it was. A thread is chosen (sleeping in a restartable call
 * first), stopped with PTRACE_SEIZE + PTRACE_INTERRUPT, its state saved (registers, XSAVE
 * area, signal mask; an EINTR call rewound), and let go only at a safe point (safepoint.h).
 * A call then runs on it through the trampoline (trampoline.h), after which the thread is
 * restored with ptrace, or restores itself if we are gone. inject.c says what to call
 * (dlopen, a symbol); inject__hold() and inject__release() (inject.h) are here too: a hold
 * is a borrowed thread that runs nothing.
 */
#ifndef PROBING_BORROW_H
#define PROBING_BORROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "inject.h"
#include "trampoline.h"

/* How a stopped thread is let go. */
enum borrow_fate {
	FATE_UNTOUCHED, /* its registers are as stopped (an EINTR call maybe rewound) */
	FATE_RESTORE,	/* registers, FP state, mask and stack are put back with ptrace */
	FATE_CURRENT,	/* it runs its own course (restoring itself, or still in the call) */
};

/* One thread, stopped and borrowed. */
struct borrowed {
	pid_t pid, tid;
	bool seized;  /* we are its tracer */
	bool stopped; /* it sits in a ptrace-stop */
	bool rewound; /* an EINTR call was rewound at the stop (see save_state) */
	enum borrow_fate fate;
	struct user_regs_struct regs; /* as stopped, before any change */
	unsigned char *xstate;
	size_t xstate_len;
	bool xstate_legacy; /* no XSAVE: the FXSAVE area (NT_PRFPREG) */
	uint64_t sigmask;
	bool have_mask;
	/* A borrowed call: its data block below the red zone, and what was there. */
	uint64_t d_addr;
	unsigned char *d_saved;
	size_t d_len;
	uint64_t token;
	uint64_t tramp; /* the trampoline's address in the target */
	struct tramp_code code;
	uint64_t t_stop;
	struct inject_info *info;
};

/* A call to make on a borrowed thread: fn(arg0, arg1), then err_fn() if it returned 0. */
struct remote_call {
	uint64_t fn, arg1, err_fn;
	const char *str; /* arg0: a string copied into the target (NULL: arg0 = 0) */
	uint64_t ret, err_ret;
	bool ret_known;
};

/* What to do with a thread once it is stopped at a safe point and its state saved. */
struct borrow_op {
	int (*fn)(struct borrowed *s, void *ctx);
	void *ctx;
};

/*
 * Stop a thread of @pid at a safe point, run @op on it, and let it go as its fate says. The
 * threads are tried in order (restartable sleepers first), up to MAX_CANDIDATES per round
 * for ROUNDS rounds; probing's terminating signals wait meanwhile. Return what @op returned,
 * or -errno with @info->error set (-EBUSY: no thread was at a safe point; -ESRCH: the process
 * exited; -ENOSPC: no room for the trampoline).
 */
int borrow__on_safe_thread(pid_t pid, const struct borrow_op *op, struct inject_info *info);

/*
 * Run @c on the stopped thread @s through the trampoline. The thread's registers change once
 * (rip, rsp into the trampoline) after everything it needs is in its memory; from then on it
 * finishes the call and restores itself even if we die. Return 0 (the results in @c) or
 * -errno with the reason; @s's fate says how the thread is let go.
 */
int borrow__call(struct borrowed *s, struct remote_call *c);

/* Read the NUL-terminated string at @addr of @pid into @out (@len bytes; cut short if
 * longer). 0, or -EFAULT when nothing could be read. */
int borrow__read_string(pid_t pid, uint64_t addr, char *out, size_t len);

/* Set @info->error, printf-style: what failed and why. */
void borrow__seterr(struct inject_info *info, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Is @b (a file's basename) a C library (glibc, musl)? dlopen and the trampoline live there. */
bool borrow__is_libc(const char *b);

#endif
