/* SPDX-License-Identifier: MIT */
/*
 * safepoint: decide whether a ptrace-stopped thread may run dlopen() right now. Running the
 * loader on a thread that is itself inside the loader, inside the allocator, or inside
 * fork()/pthread_create() (which hold the locks dlopen and the agent's constructor need)
 * would deadlock the thread on a lock it already holds, or corrupt state it is in the middle
 * of changing. The check unwinds the stopped thread's stack with libdw (DWARF CFI from
 * .eh_frame, so frame pointers are not needed) and looks for any frame inside:
 *   - the dynamic loader (ld.so, found from AT_BASE in /proc/PID/auxv): dlopen, lazy binding,
 *     TLS setup, dl_iterate_phdr callbacks' callers;
 *   - the allocator entry points of libc and of any preloaded allocator (jemalloc,
 *     tcmalloc, mimalloc): malloc, free, realloc, ...;
 *   - functions that hold loader/allocator/stdio-list locks across calls: fork,
 *     pthread_create, dl_iterate_phdr, dlopen/dlclose/dlsym, exit, fflush, fopen, fclose...
 */
#ifndef PROBING_SAFEPOINT_H
#define PROBING_SAFEPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct safepoint;

/*
 * Prepare for checking threads of @pid: read its mappings, find ld.so and the allocator
 * functions. Done before any thread is stopped, so the stop stays short. Return the object
 * (free with safepoint__free) or NULL with errno.
 */
struct safepoint *safepoint__new(pid_t pid);
void safepoint__free(struct safepoint *sp);

/*
 * Check thread @tid of the process, stopped by the caller with registers @regs. Return 0 if
 * it is safe to run the loader on it, 1 if not (then @why gets a short reason such as
 * "inside malloc"), or -errno if the check itself failed (then the caller decides; the
 * injector treats a failed unwind of the innermost frame as unsafe).
 */
int safepoint__check(struct safepoint *sp, pid_t tid, const struct user_regs_struct *regs,
		     char *why, size_t whylen);

#endif
