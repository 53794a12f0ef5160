// SPDX-License-Identifier: MIT
/* taskwait: a thread's scheduler state, system call and wait channel, from /proc. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/taskwait.h"
#include "base/util.h"

/* Names of the x86_64 system calls a thread is commonly found waiting in. */
static const struct {
	int nr;
	const char *name;
} syscall_names[] = {
	{0, "read"},
	{1, "write"},
	{7, "poll"},
	{17, "pread64"},
	{18, "pwrite64"},
	{19, "readv"},
	{20, "writev"},
	{23, "select"},
	{26, "msync"},
	{34, "pause"},
	{35, "nanosleep"},
	{40, "sendfile"},
	{42, "connect"},
	{43, "accept"},
	{44, "sendto"},
	{45, "recvfrom"},
	{46, "sendmsg"},
	{47, "recvmsg"},
	{61, "wait4"},
	{74, "fsync"},
	{75, "fdatasync"},
	{128, "rt_sigtimedwait"},
	{130, "rt_sigsuspend"},
	{202, "futex"},
	{208, "io_getevents"},
	{230, "clock_nanosleep"},
	{232, "epoll_wait"},
	{247, "waitid"},
	{257, "openat"},
	{270, "pselect6"},
	{271, "ppoll"},
	{275, "splice"},
	{277, "sync_file_range"},
	{281, "epoll_pwait"},
	{288, "accept4"},
	{295, "preadv"},
	{296, "pwritev"},
	{299, "recvmmsg"},
	{307, "sendmmsg"},
	{327, "preadv2"},
	{328, "pwritev2"},
	{426, "io_uring_enter"},
	{441, "epoll_pwait2"},
	{449, "futex_waitv"},
};

const char *taskwait_syscall_name(long long nr)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(syscall_names); i++)
		if (syscall_names[i].nr == nr)
			return syscall_names[i].name;
	return NULL;
}

/* Read /proc/PID/task/TID/@file into @buf (NUL-terminated, trailing newline cut). */
static int read_task_file(pid_t pid, pid_t tid, const char *file, char *buf, size_t size)
{
	char path[96];
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/%s", (int)pid, (int)tid, file);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	len = fread(buf, 1, size - 1, f);
	if (ferror(f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[len] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

#define NR_RESTART_SYSCALL 219

/*
 * A thread in restart_syscall resumes a timed wait (futex, nanosleep, poll...) that a stop or
 * a signal interrupted: a debugger, or probing's own 'backtrace --native'. /proc shows the
 * restart, not the call; its wait channel says which kind of wait it is.
 */
static void infer_restarted(struct task_wait *w)
{
	static const struct {
		const char *wchan;
		int nr;
		uint64_t arg1; /* poll's nfds: descriptors, so I/O */
	} calls[] = {
		{"futex_", WAIT_NR_FUTEX, 0},
		{"hrtimer_nanosleep", WAIT_NR_CLOCK_NANOSLEEP, 0},
		{"do_nanosleep", WAIT_NR_CLOCK_NANOSLEEP, 0},
		{"poll_schedule_timeout", WAIT_NR_POLL, 1},
		{"do_sys_poll", WAIT_NR_POLL, 1},
		{"do_select", WAIT_NR_POLL, 1},
		{"do_epoll_wait", WAIT_NR_EPOLL_WAIT, 0},
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(calls); i++)
		if (!strncmp(w->wchan, calls[i].wchan, strlen(calls[i].wchan))) {
			w->nr = calls[i].nr;
			memset(w->args, 0, sizeof(w->args));
			w->args[1] = calls[i].arg1;
			w->restarted = true;
			return;
		}
}

int taskwait_read(pid_t pid, pid_t tid, struct task_wait *out)
{
	char buf[512], *p;
	unsigned long long v[8];
	int err, n, i;

	memset(out, 0, sizeof(*out));
	out->state = '?';
	out->nr = -2;
	err = read_task_file(pid, tid, "stat", buf, sizeof(buf));
	if (err)
		return err;
	/* "tid (comm) S ...": comm may hold spaces and ')' — the state follows the last ')'. */
	p = strrchr(buf, ')');
	if (p && p[1] == ' ' && p[2])
		out->state = p[2];
	/* "NR ARG1..ARG6 SP PC" in a system call, "-1 SP PC" outside, "running" when running. */
	if (!read_task_file(pid, tid, "syscall", buf, sizeof(buf))) {
		if (!strncmp(buf, "-1", 2)) {
			out->nr = -1;
		} else if (!strcmp(buf, "running")) {
			out->state = 'R'; /* it woke up since stat was read */
		} else {
			n = sscanf(buf, "%llu %llx %llx %llx %llx %llx %llx", &v[0], &v[1], &v[2],
				   &v[3], &v[4], &v[5], &v[6]);
			if (n == 7) {
				out->nr = (long long)v[0];
				for (i = 0; i < 6; i++)
					out->args[i] = v[i + 1];
			}
		}
	}
	/* "0" when the thread is not sleeping. */
	if (!read_task_file(pid, tid, "wchan", buf, sizeof(buf)) && strcmp(buf, "0"))
		snprintf(out->wchan, sizeof(out->wchan), "%.63s", buf);
	if (out->nr == NR_RESTART_SYSCALL)
		infer_restarted(out);
	return 0;
}

/* Kernel functions a thread sleeps in while it waits for the disk (a page fault, direct I/O). */
static bool disk_wchan(const char *w)
{
	static const char *const names[] = {
		"io_schedule", "folio_wait",  "filemap_fault", "wait_on_page_bit",
		"__lock_page", "bit_wait_io", "blk_"};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(names); i++)
		if (!strncmp(w, names[i], strlen(names[i])))
			return true;
	return false;
}

enum wait_state taskwait_classify(const struct task_wait *w, uint64_t gil_lo, uint64_t gil_hi)
{
	struct wait_input in = {
		.nr = w->nr == -2 ? -1 : w->nr,
		.arg0 = w->args[0],
		.arg1 = w->args[1],
		.gil_lo = gil_lo,
		.gil_hi = gil_hi,
	};

	switch (w->state) {
	case 'R':
		in.flags |= WAITIN_ON_CPU; /* /proc cannot tell running from runnable */
		break;
	case 'D':
		in.state = WAIT_TASK_UNINTERRUPTIBLE;
		break;
	default:
		in.state = WAIT_TASK_INTERRUPTIBLE;
		break;
	}
	if (disk_wchan(w->wchan))
		in.flags |= WAITIN_DISK_KSTACK;
	return wait_classify(&in);
}

char *taskwait_describe(const struct task_wait *w, char *buf, size_t size)
{
	const char *name = taskwait_syscall_name(w->nr);

	if (w->state == 'R')
		snprintf(buf, size, "%s", "");
	else if (name)
		snprintf(buf, size, "%s", name);
	else if (w->nr >= 0)
		snprintf(buf, size, "syscall %lld", w->nr);
	else if (w->state == 'D' && disk_wchan(w->wchan))
		snprintf(buf, size, "page fault (disk)");
	else
		snprintf(buf, size, "%s", w->wchan);
	return buf;
}
