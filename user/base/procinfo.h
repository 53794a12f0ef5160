/* SPDX-License-Identifier: MIT */
/* procinfo: facts about a process or thread from /proc. */
#ifndef PROBING_PROCINFO_H
#define PROBING_PROCINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* true if @pid exists and is not a zombie. */
bool procinfo_alive(pid_t pid);

/* Command line with arguments joined by spaces, malloc'd; NULL with errno set. */
char *procinfo_cmdline(pid_t pid);

/* Executable path (readlink /proc/PID/exe), malloc'd; NULL with errno set. */
char *procinfo_exe(pid_t pid);

/* Parent pid, or -errno. */
pid_t procinfo_ppid(pid_t pid);

/* Thread name (/proc/PID/task/TID/comm) into @buf (16+ bytes). 0 or -errno. */
int procinfo_thread_name(pid_t pid, pid_t tid, char *buf, size_t size);

/* Value of environment variable @name of @pid, malloc'd; NULL (errno ENOENT) if unset. */
char *procinfo_getenv(pid_t pid, const char *name);

/* Real uid of @pid, or -errno. */
long procinfo_uid(pid_t pid);

/* 1 if @pid is a kernel thread (no user space: nothing to unwind), 0 if not, or -errno. */
int procinfo_is_kernel_thread(pid_t pid);

/* CPU time @pid (all its threads, living and exited) has used, in clock ticks
 * (sysconf(_SC_CLK_TCK)), or -errno. */
long long procinfo_cpu_ticks(pid_t pid);

/* @pid's pid in its own (innermost) PID namespace (the last NSpid field), or -errno. */
pid_t procinfo_ns_pid(pid_t pid);

/*
 * The stack pointer @pid's main thread started its program with (/proc/PID/stat
 * "startstack": the address of argc, set at exec) into *@start_stack; 0 when the kernel
 * withholds it (no ptrace access to @pid). Returns 0 or -errno.
 */
int procinfo_start_stack(pid_t pid, uint64_t *start_stack);

#endif
