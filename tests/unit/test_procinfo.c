// SPDX-License-Identifier: MIT
/* procinfo against what the kernel says otherwise: getppid, capget, our own threads, children
 * stopped and exited. */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/times.h>
#include <sys/wait.h>

#include "base/procinfo.h"
#include "test.h"

/* A child that sleeps until killed. */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

/* Wait until @pid's (or its thread @tid's) state is @want (it gets there asynchronously). */
static char wait_state(pid_t pid, pid_t tid, char want)
{
	char st = 0;
	int i;

	for (i = 0; i < 2000 && (st = procinfo_state(pid, tid)) != want; i++)
		usleep(1000);
	return st;
}

TEST(state_follows_the_process)
{
	pid_t pid = sleeper();

	REQUIRE(pid > 0);
	CHECK_EQ(procinfo_state(getpid(), 0), 'R');
	CHECK_EQ(procinfo_state(getpid(), (pid_t)syscall(SYS_gettid)), 'R');
	CHECK_EQ(wait_state(pid, 0, 'S'), 'S');
	kill(pid, SIGSTOP);
	CHECK_EQ(wait_state(pid, 0, 'T'), 'T');
	CHECK(procinfo_alive(pid));
	kill(pid, SIGKILL);
	CHECK_EQ(wait_state(pid, 0, 'Z'), 'Z'); /* not reaped yet */
	CHECK(!procinfo_alive(pid));
	waitpid(pid, NULL, 0);
	CHECK_EQ(procinfo_state(pid, 0), 0);
	CHECK(!procinfo_alive(pid));
}

/* State and CPU time from one read, as procinfo_state and times() say them. */
TEST(state_and_cpu_of_one_read)
{
	struct tms before, after;
	long long ticks = -1, gone = 42;
	volatile unsigned long x = 0;
	pid_t pid = sleeper();

	REQUIRE(pid > 0);
	times(&before);
	while (times(&after),
	       after.tms_utime + after.tms_stime < before.tms_utime + before.tms_stime + 3)
		x++;
	CHECK_EQ(procinfo_state_cpu(getpid(), &ticks), 'R');
	times(&after);
	CHECK(ticks >= (long long)(before.tms_utime + before.tms_stime + 3));
	CHECK(ticks <= (long long)(after.tms_utime + after.tms_stime));
	CHECK(procinfo_cpu_ticks(getpid()) >= ticks);
	CHECK_EQ(wait_state(pid, 0, 'S'), 'S');
	CHECK_EQ(procinfo_state_cpu(pid, &ticks), 'S');
	CHECK(ticks >= 0);
	kill(pid, SIGKILL);
	CHECK_EQ(wait_state(pid, 0, 'Z'), 'Z');
	CHECK_EQ(procinfo_state_cpu(pid, &ticks), 'Z');
	waitpid(pid, NULL, 0);
	CHECK_EQ(procinfo_state_cpu(pid, &gone), 0);
	CHECK_EQ(gone, 42);
	CHECK(procinfo_cpu_ticks(pid) < 0);
}

/* A name with the characters that break naive parsers of stat: spaces and parentheses. */
TEST(stat_fields_after_a_hostile_comm)
{
	unsigned long long v = 42;
	char old[32] = "";

	prctl(PR_GET_NAME, old);
	REQUIRE(!prctl(PR_SET_NAME, "a) (b ) 9 9"));
	CHECK_EQ(procinfo_state(getpid(), 0), 'R');
	CHECK_EQ(procinfo_stat_field(getpid(), 0, 4, &v), 0);
	CHECK_EQ(v, getppid());
	CHECK_EQ(procinfo_ppid(getpid()), getppid());
	CHECK_EQ(procinfo_stat_field(getpid(), 0, 5, &v), 0); /* pgrp */
	CHECK_EQ(v, getpgrp());
	v = 42;
	CHECK_EQ(procinfo_stat_field(getpid(), 0, 999, &v), -EINVAL);
	CHECK_EQ(v, 42); /* untouched */
	CHECK_EQ(procinfo_is_kernel_thread(getpid()), 0);
	CHECK_EQ(procinfo_is_kernel_thread(2), 1); /* kthreadd */
	prctl(PR_SET_NAME, old);
}

struct named_thread {
	pthread_t th;
	pid_t tid;
	int ready[2]; /* it says it is named */
	int stay[2];  /* it waits until this closes */
};

static void *named_fn(void *arg)
{
	struct named_thread *t = arg;
	char c;

	prctl(PR_SET_NAME, "pi (w) 1");
	t->tid = (pid_t)syscall(SYS_gettid);
	if (write(t->ready[1], "r", 1) != 1)
		return NULL;
	while (read(t->stay[0], &c, 1) > 0)
		;
	return NULL;
}

TEST(status_fields_of_a_thread)
{
	struct named_thread t = {.tid = 0};
	unsigned long long v = 7;
	char *s, name[64], c;

	REQUIRE(!pipe(t.ready) && !pipe(t.stay));
	REQUIRE(!pthread_create(&t.th, NULL, named_fn, &t));
	REQUIRE(read(t.ready[0], &c, 1) == 1);
	/* The thread's own status: its tid, our tgid. */
	CHECK_EQ(procinfo_status_number(getpid(), t.tid, "Pid", 10, &v), 0);
	CHECK_EQ(v, t.tid);
	CHECK_EQ(procinfo_status_number(getpid(), t.tid, "Tgid", 10, &v), 0);
	CHECK_EQ(v, getpid());
	{
		/* Several fields of one read, in any order; all or nothing. */
		static const char *const keys[] = {"Tgid", "Pid", "Vm"}, *const bad[] = {"Pid",
											 "Name"};
		unsigned long long two[3] = {7, 7, 7};

		CHECK_EQ(procinfo_status_numbers(getpid(), t.tid, keys, 2, 10, two), 0);
		CHECK_EQ(two[0], getpid());
		CHECK_EQ(two[1], t.tid);
		two[0] = two[1] = 7;
		CHECK_EQ(procinfo_status_numbers(getpid(), t.tid, keys, 3, 10, two), -ENOENT);
		CHECK_EQ(procinfo_status_numbers(getpid(), t.tid, bad, 2, 10, two), -EINVAL);
		CHECK_EQ(procinfo_status_numbers(getpid(), t.tid, keys, 0, 10, two), -EINVAL);
		CHECK(two[0] == 7 && two[1] == 7 && two[2] == 7);
	}
	CHECK_EQ(procinfo_status_number(getpid(), 0, "Uid", 10, &v), 0);
	CHECK_EQ(v, getuid());
	CHECK_EQ(procinfo_uid(getpid()), getuid());
	CHECK_EQ(procinfo_status_number(getpid(), 0, "TracerPid", 10, &v), 0);
	CHECK_EQ(v, 0);
	s = procinfo_status_field(getpid(), t.tid, "Name");
	CHECK_STR(s, "pi (w) 1");
	free(s);
	/* No such field; no such field as a prefix of another ("Vm" of "VmRSS"). */
	errno = 0;
	CHECK(procinfo_status_field(getpid(), 0, "NoSuchField") == NULL);
	CHECK_EQ(errno, ENOENT);
	CHECK(procinfo_status_field(getpid(), 0, "Vm") == NULL);
	v = 7;
	CHECK_EQ(procinfo_status_number(getpid(), 0, "Vm", 10, &v), -ENOENT);
	CHECK_EQ(v, 7);
	CHECK_EQ(procinfo_status_number(getpid(), 0, "Name", 10, &v), -EINVAL);
	CHECK_EQ(v, 7);
	CHECK_EQ(procinfo_thread_name(getpid(), t.tid, name, sizeof(name)), 0);
	CHECK_STR(name, "pi (w) 1");
	CHECK_EQ(wait_state(getpid(), t.tid, 'S'), 'S'); /* in read() */
	close(t.stay[1]);
	pthread_join(t.th, NULL);
	close(t.stay[0]);
	close(t.ready[0]);
	close(t.ready[1]);
}

TEST(comm_shown_is_escaped)
{
	char old[32] = "", buf[64];
	pid_t pid;

	prctl(PR_GET_NAME, old);
	REQUIRE(!prctl(PR_SET_NAME, "ev\nil\x1b"));
	CHECK_STR(procinfo_comm_shown(getpid(), buf, sizeof(buf)), "ev\\nil\\x1b");
	prctl(PR_SET_NAME, old);
	pid = fork();
	if (pid == 0)
		_exit(0);
	REQUIRE(pid > 0);
	waitpid(pid, NULL, 0);
	CHECK_STR(procinfo_comm_shown(pid, buf, sizeof(buf)), "?");
}

TEST(capabilities_as_capget_says)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2] = {};
	uint64_t eff;
	int cap;

	REQUIRE(!syscall(SYS_capget, &h, d));
	eff = d[0].effective | (uint64_t)d[1].effective << 32;
	for (cap = 0; cap <= CAP_LAST_CAP; cap++)
		CHECK_EQ(procinfo_has_cap(getpid(), cap), (eff >> cap) & 1);
	CHECK(!procinfo_has_cap(getpid(), 64));
	CHECK(!procinfo_has_cap(-1, CAP_SYS_PTRACE));
}

TEST(ns_pid_outside_a_namespace)
{
	/* The innermost of its pids is the one it has in its own namespace: getpid(). */
	CHECK_EQ(procinfo_ns_pid(getpid()), getpid());
}

TEST_MAIN()
