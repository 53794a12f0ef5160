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

/*
 * @pid's name (its main thread's comm) as it may be shown to a user: escaped (escape.h), as
 * the process chose it; "?" if it cannot be read. Into @buf; returns @buf.
 */
const char *procinfo_comm_shown(pid_t pid, char *buf, size_t size);

/* Value of environment variable @name of @pid, malloc'd; NULL (errno ENOENT) if unset. */
char *procinfo_getenv(pid_t pid, const char *name);

/* Real uid of @pid (the first of status Uid's four), or -errno. */
long procinfo_uid(pid_t pid);

/*
 * The state letter of @pid, or of its thread @tid when @tid is not 0, from stat: 'R'
 * running, 'S' sleeping, 'D' disk wait, 'T' stopped, 't' traced, 'Z' zombie, 'X' dead...;
 * 0 if it cannot be read (the process or thread is gone).
 */
char procinfo_state(pid_t pid, pid_t tid);

/* Is a process or thread in state @state (procinfo_state's letter) alive: readable, and
 * neither a zombie nor dead? */
static inline bool procinfo_state_alive(char state)
{
	return state && state != 'Z' && state != 'X';
}

/*
 * Field @n (1-based, as proc(5) numbers them; n >= 3: after the pid and the comm, which may
 * hold anything) of /proc/@pid/stat, or of /proc/@pid/task/@tid/stat when @tid is not 0, as a
 * number into *@out. 0 or -errno (-EINVAL: no such field); *@out is left as it was on error.
 */
int procinfo_stat_field(pid_t pid, pid_t tid, int n, unsigned long long *out);

/*
 * The value after "@key:" on its line of /proc/@pid/status, or of /proc/@pid/task/@tid/status
 * when @tid is not 0, without the blanks that follow the colon; malloc'd. NULL with errno set
 * (ENOENT: no such field, or no such process).
 */
char *procinfo_status_field(pid_t pid, pid_t tid, const char *key);

/*
 * That field as a number in @base: 10 for counts and ids (TracerPid, the first of Uid's four),
 * 16 for the masks (SigPnd, SigCgt, CapEff). 0 or -errno (-EINVAL: not a number); *@out is
 * left as it was on error, so it may hold a default.
 */
int procinfo_status_number(pid_t pid, pid_t tid, const char *key, int base,
			   unsigned long long *out);

/*
 * The fields @keys[0..@n) of one read of that status file, as numbers in @base, into
 * @out[0..@n) (1 <= @n <= PROCINFO_STATUS_MAX). 0, or -errno (-ENOENT: a field missing, or no
 * such process; -EINVAL: not a number); @out is left as it was on error.
 */
#define PROCINFO_STATUS_MAX 8
int procinfo_status_numbers(pid_t pid, pid_t tid, const char *const *keys, size_t n, int base,
			    unsigned long long *out);

/*
 * true if capability @cap (CAP_SYS_PTRACE, CAP_BPF... from linux/capability.h) is in @pid's
 * effective set (status CapEff); false if not, or if that cannot be read.
 */
bool procinfo_has_cap(pid_t pid, int cap);

/* 1 if @pid is a kernel thread (no user space: nothing to unwind), 0 if not, or -errno. */
int procinfo_is_kernel_thread(pid_t pid);

/* CPU time @pid (all its threads, living and exited) has used, in clock ticks
 * (sysconf(_SC_CLK_TCK)), or -errno. */
long long procinfo_cpu_ticks(pid_t pid);

/*
 * procinfo_state(@pid, 0) and procinfo_cpu_ticks(@pid) from one read of its stat (the kernel
 * sums the CPU time of every thread at each read): the state letter, 0 if it cannot be read
 * (errno set; *@ticks untouched), and the ticks into *@ticks (-EINVAL if they are missing).
 */
char procinfo_state_cpu(pid_t pid, long long *ticks);

/* @pid's pid in its own (innermost) PID namespace (the last NSpid field), or -errno. */
pid_t procinfo_ns_pid(pid_t pid);

/*
 * The stack pointer @pid's main thread started its program with (/proc/PID/stat
 * "startstack": the address of argc, set at exec) into *@start_stack; 0 when the kernel
 * withholds it (no ptrace access to @pid). Returns 0 or -errno.
 */
int procinfo_start_stack(pid_t pid, uint64_t *start_stack);

#endif
