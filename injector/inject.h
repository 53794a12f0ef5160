/* SPDX-License-Identifier: MIT */
/*
 * inject: run dlopen() (or any exported function) inside a running process with ptrace
 * (docs/design.md §6), on one of its threads, and put that thread back exactly as it was.
 *
 *  1. Permission checks with clear reasons (owner or root only; Yama; another tracer).
 *  2. dlopen and dlerror are resolved in the *target's* libc from its ELF file and
 *     /proc/PID/maps (glibc >= 2.34: libc; older glibc: libdl, else __libc_dlopen_mode).
 *  3. The library path must be reachable from the target: when the target's mount
 *     namespace or root shows another file (or none) at our path, the library is copied into
 *     the target's filesystem (/dev/shm, /tmp or /var/tmp seen through /proc/PID/root) and the
 *     copy is unlinked once loaded.
 *  4. One thread is chosen: threads sleeping in restartable system calls first, then running
 *     ones, last those in calls that return EINTR when interrupted (epoll_wait...). It is
 *     stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (no signal is sent, other threads keep
 *     running), and its stack is unwound (safepoint.h): inside the loader, the allocator,
 *     fork... it is let go, and the next candidate is tried (up to 25 rounds, about 0.3 s).
 *  5. Registers, the extended FP state (XSAVE) and the signal mask are saved; a thread stopped
 *     in a call that returns EINTR when stopped (epoll_wait...) is rewound to restart it at
 *     once, unless a signal with a handler is pending (then the EINTR is genuine).
 *  6. The call runs through a trampoline (trampoline.h) whose code sits in the unused tail of
 *     libc's executable segment and whose data (the call, the registers and FP state to come
 *     back to, the masks) is written below the thread's red zone *before* its registers
 *     change once (rip, rsp; orig_rax = -1 so that the kernel does not restart into it).
 *     The thread blocks signals but synchronous faults, makes the call, then waits up to
 *     50 ms for us: we stop it there and restore everything with ptrace (FP state, mask,
 *     then registers), and the kernel restarts an interrupted system call with its own
 *     rules (-ERESTARTSYS/-ERESTARTNOHAND/-ERESTARTNOINTR: ip -= 2, ax = orig_ax;
 *     -ERESTART_RESTARTBLOCK: restart_syscall; arch/x86 arch_do_signal_or_restart), the
 *     saved rax/orig_rax being put back untouched. If we were killed (SIGKILL) at any
 *     instant, the thread restores itself the same way, deciding EINTR or restart for a
 *     signal that arrived meanwhile as the kernel would.
 * Every failure rolls back (memory, registers, mask, detach) before returning; a call that
 * does not return within 15 s is left to finish (the thread then restores itself). While a
 * thread is held, SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGTSTP/SIGPIPE to probing are blocked and
 * take effect after the thread was let go. The called code must not call nanosleep or
 * clock_nanosleep (they reset the restart block a thread stopped in a relative sleep needs).
 */
#ifndef PROBING_INJECT_H
#define PROBING_INJECT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* What an injection did (for messages and benchmarks); filled on success and failure. */
struct inject_info {
	pid_t tid;		    /* the thread that ran the call (0 if none did) */
	int threads_stopped;	    /* thread stops, including rejected ones */
	uint64_t stopped_ns;	    /* the longest time one thread was held stopped */
	uint64_t total_ns;	    /* the whole operation */
	bool copied;		    /* the library was copied into the target's filesystem */
	char target_path[PATH_MAX]; /* the path dlopen was given, as the target sees it */
	uint64_t ret;		    /* what the call returned (dlopen: the handle) */
	char error[1024];	    /* on failure: what failed and why (may span lines) */
};

/*
 * Load the shared library @lib (a path of ours) into @pid with dlopen(RTLD_NOW). Return 0
 * (@info->ret is the handle), or -errno with @info->error set:
 *   -ESRCH  no such process, or it exited during the injection
 *   -EPERM  ptrace refused (why: owner, Yama, capabilities, another tracer...)
 *   -EBUSY  another tracer is attached, or no thread was at a safe point for 25 rounds
 *   -ENOEXEC  no dlopen in the target (static executable, unknown libc)
 *   -EIO    dlopen failed in the target (dlerror's text in @info->error)
 *   -ETIMEDOUT  the call did not return within 15 s; the thread finishes it on its own
 *   -EFAULT  the call crashed; the thread was restored
 *   -ENOSPC  no room for the trampoline's code in the target
 */
int inject__dlopen(pid_t pid, const char *lib, struct inject_info *info);

/*
 * Call the function @symbol (no arguments; returns int or pointer) exported by the file
 * mapped in @pid at @module (a path as shown in /proc/PID/maps). Same thread choice,
 * rollback and return values as inject__dlopen; the result is in @info->ret.
 */
int inject__call(pid_t pid, const char *module, const char *symbol, struct inject_info *info);

/*
 * Hold one thread still to look at it (probing backtrace --native): stop thread @tid of
 * @pid with PTRACE_SEIZE + PTRACE_INTERRUPT (no signal is sent, the other threads keep
 * running) and read its general registers into @regs (as stopped). Nothing of the thread
 * is changed but the rewind of a call that returns EINTR when stopped (see 5. above), done
 * at once so that the thread is fine even if we are killed while holding it;
 * inject__release() lets it go. While a thread is held, probing's
 * terminating signals are deferred. Return 0 and *@out, or -errno (-ESRCH, -EPERM...) with
 * the reason in @info->error.
 */
struct inject_hold;
struct user_regs_struct;
int inject__hold(pid_t pid, pid_t tid, struct user_regs_struct *regs, struct inject_hold **out,
		 struct inject_info *info);
/* Let the held thread go (NULL is a no-op); how long it was held is in the info given. */
void inject__release(struct inject_hold *h);

/*
 * Is a file whose basename starts with @prefix mapped into @pid? Return 1 and its path (as
 * in maps, without " (deleted)") in @path, 0 if not, or -errno (-ESRCH: no such process).
 */
int inject__find_module(pid_t pid, const char *prefix, char *path, size_t len);

/*
 * Check, before touching anything, that we may inject into @pid: it exists, is not a
 * zombie or stopped, belongs to us (or we are root), is not traced by someone else, and Yama
 * allows it. Return 0, or -ESRCH/-EPERM/-EBUSY/-EAGAIN with a message for the user (what,
 * why, what to do) in @msg.
 */
int inject__check_permission(pid_t pid, char *msg, size_t len);

#endif
