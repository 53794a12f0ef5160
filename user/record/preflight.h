/* SPDX-License-Identifier: MIT */
/*
 * preflight: what must hold before a recording starts. Each check says on stderr what is
 * wrong and what to do, and returns EXIT_FAIL (base/cli.h); 0 when it holds.
 */
#ifndef PROBING_PREFLIGHT_H
#define PROBING_PREFLIGHT_H

#include <stdbool.h>
#include <sys/types.h>
#include <linux/types.h>

/*
 * Process @pid can be recorded: it exists, is not a zombie, and is not a kernel thread
 * unless @kernel (kernel stacks are recorded): a kernel thread has no user space to sample.
 */
int preflight_target(pid_t pid, bool kernel);

/*
 * probing may load BPF programs, open perf events and read other processes' memory: it runs
 * as root, or has CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) and CAP_SYS_PTRACE.
 */
int preflight_privileges(void);

/*
 * The PID namespace whose numbers the recording uses: the one probing runs in, whose /proc
 * it reads (a /proc of another namespace is refused). *@inum: its inode number, 0 for the
 * initial namespace (the kernel's own pids, which the sampler gets for free).
 */
int preflight_pidns(__u32 *inum);

#endif
