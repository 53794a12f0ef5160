// SPDX-License-Identifier: MIT
/*
 * Ground truth for recording with --children: threads and processes that come and go.
 *
 *   churn SECONDS TRUTHFILE
 *
 * The main thread names itself "churn-main" and, for SECONDS, runs rounds. Round R starts
 * three threads named "thr-R-K" (K = 0..2) that spin ~15 ms and exit, and forks a child
 * process that names itself "proc-R", starts two threads "pthr-R-K" that spin ~15 ms, and
 * ends in one of three ways (R % 3):
 *   0: its threads are joined and it exits;
 *   1: its main thread leaves first (pthread_exit) while the two threads still spin: the
 *      process ends when the last of them exits;
 *   2: it execs "churn --exec-child R TRUTHFILE", which names itself "exec-R", spins ~15 ms
 *      and exits.
 * Every thread, once named, appends "T PID TID NAME" to TRUTHFILE; every process appends
 * "E PID UNIXTIME" as the last thing it does before it ends (its end is later than that).
 * Lines are written with one write(2) in O_APPEND mode, so processes do not mix them.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wl.h"

volatile unsigned long wl_sink;
static int truth_fd = -1;
static const char *self_exe, *truth_path;

static void truth(const char *fmt, ...)
{
	char line[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(line))
		_exit(3);
	if (write(truth_fd, line, n) != n)
		_exit(3);
}

static double unix_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static __attribute__((noinline)) void spin(double seconds)
{
	double end = wl_now() + seconds;

	while (wl_now() < end)
		for (int i = 0; i < 1000; i++)
			wl_sink += i;
}

/* Name the calling thread and say so. */
static void name_self(const char *name)
{
	prctl(PR_SET_NAME, name);
	truth("T %d %ld %s\n", (int)getpid(), (long)syscall(SYS_gettid), name);
}

struct job {
	char name[16];
	bool last; /* announce the process's end (mode 1: the last thread to exit) */
};

static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static int left; /* threads of this process still running their job */

static void *thread_main(void *arg)
{
	struct job *j = arg;
	bool last;

	name_self(j->name);
	spin(0.015);
	pthread_mutex_lock(&left_lock);
	last = --left == 0 && j->last;
	if (last)
		truth("E %d %.6f\n", (int)getpid(), unix_now());
	pthread_mutex_unlock(&left_lock);
	return NULL;
}

static void child(int round)
{
	struct job jobs[2];
	pthread_t t[2];
	char name[16], rs[16];
	int mode = round % 3, k;

	/* fork() copied the lock in whatever state another thread held it. */
	pthread_mutex_init(&left_lock, NULL);
	snprintf(name, sizeof(name), "proc-%d", round);
	name_self(name);
	if (mode == 2) {
		snprintf(rs, sizeof(rs), "%d", round);
		execl(self_exe, self_exe, "--exec-child", rs, truth_path, (char *)NULL);
		_exit(4);
	}
	left = 2;
	for (k = 0; k < 2; k++) {
		snprintf(jobs[k].name, sizeof(jobs[k].name), "pthr-%d-%d", round, k);
		jobs[k].last = mode == 1;
		pthread_create(&t[k], NULL, thread_main, &jobs[k]);
	}
	spin(0.005);
	if (mode == 1)
		pthread_exit(NULL); /* the others finish; the last one ends the process */
	for (k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	truth("E %d %.6f\n", (int)getpid(), unix_now());
	_exit(0);
}

int main(int argc, char **argv)
{
	struct job jobs[3];
	pthread_t t[3];
	double end;
	int round, k;
	pid_t pid;

	if (argc < 3) {
		fprintf(stderr, "usage: churn SECONDS TRUTHFILE | --exec-child ROUND TRUTHFILE\n");
		return 2;
	}
	self_exe = "/proc/self/exe";
	truth_path = argv[2];
	if (!strcmp(argv[1], "--exec-child")) {
		char name[16];

		truth_fd = open(argv[3], O_WRONLY | O_APPEND | O_CLOEXEC);
		if (truth_fd < 0)
			return 3;
		snprintf(name, sizeof(name), "exec-%s", argv[2]);
		name_self(name);
		spin(0.015);
		truth("E %d %.6f\n", (int)getpid(), unix_now());
		return 0;
	}
	truth_fd = open(truth_path, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (truth_fd < 0)
		return 3;
	name_self("churn-main");
	end = wl_now() + atof(argv[1]);
	for (round = 0; wl_now() < end; round++) {
		left = 3;
		for (k = 0; k < 3; k++) {
			snprintf(jobs[k].name, sizeof(jobs[k].name), "thr-%d-%d", round, k);
			jobs[k].last = false;
			pthread_create(&t[k], NULL, thread_main, &jobs[k]);
		}
		pid = fork();
		if (pid == 0)
			child(round);
		for (k = 0; k < 3; k++)
			pthread_join(t[k], NULL);
		if (pid > 0)
			waitpid(pid, NULL, 0);
	}
	printf("%d rounds\n", round);
	truth("E %d %.6f\n", (int)getpid(), unix_now());
	return 0;
}
