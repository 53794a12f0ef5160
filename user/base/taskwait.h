/* SPDX-License-Identifier: MIT */
/*
 * taskwait: what a thread is doing right now, read from /proc/PID/task/TID without stopping
 * it (stat, syscall, wchan), and why it waits, classified as the off-CPU recorder does
 * (bpf/waitclass.h).
 */
#ifndef PROBING_TASKWAIT_H
#define PROBING_TASKWAIT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/waitclass.h"

struct task_wait {
	char state;	  /* /proc stat letter: R running, S sleeping, D disk wait, T stopped,
			   * t traced, Z zombie, I idle; '?' if unknown */
	long long nr;	  /* system call in flight, -1 none, -2 unknown (running, unreadable) */
	uint64_t args[6]; /* its arguments, when nr >= 0 */
	char wchan[64];	  /* the kernel function it sleeps in; "" when running or unknown */
	bool restarted;	  /* nr is the call inferred from the wait channel of a thread in
			   * restart_syscall (a timed wait interrupted by a stop or a signal, and
			   * resumed by the kernel); its arguments are unknown (0) */
};

/*
 * Read thread @tid of @pid. The syscall file needs ptrace access to the process (its owner or
 * root); without it nr is -2 and the rest is still filled. Return 0, or -errno when the
 * thread is gone (-ENOENT, -ESRCH).
 */
int taskwait_read(pid_t pid, pid_t tid, struct task_wait *out);

/*
 * Why @w waits (WAIT_RUNNING when it runs). [@gil_lo, @gil_hi) is the GIL struct of the
 * thread's interpreter (python/pyproc.h), 0, 0 for a process without one.
 */
enum wait_state taskwait_classify(const struct task_wait *w, uint64_t gil_lo, uint64_t gil_hi);

/* The name of system call @nr ("futex", "epoll_wait", ...), or NULL if not a known one. */
const char *taskwait_syscall_name(long long nr);

/*
 * A short human description of the wait into @buf: "futex", "epoll_wait", "read",
 * "page fault (disk)", "wait4" — the system call's name, else the wait channel; "" when the
 * thread runs. Returns @buf.
 */
char *taskwait_describe(const struct task_wait *w, char *buf, size_t size);

#endif
