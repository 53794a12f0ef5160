// SPDX-License-Identifier: MIT
/* taskwait: threads of this process blocked in known ways, read from /proc and classified. */
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/taskwait.h"
#include "test.h"

static int pipefd[2];
static uint32_t futex_word, gil_word[52]; /* gil_word stands for a GIL struct */
static volatile pid_t tids[4];

static void *in_read(void *arg)
{
	char c;

	tids[0] = gettid();
	(void)!read(pipefd[0], &c, 1);
	return NULL;
}

static void *in_sleep(void *arg)
{
	struct timespec ts = {30, 0};

	tids[1] = gettid();
	nanosleep(&ts, NULL);
	return NULL;
}

static void *in_futex(void *arg)
{
	uint32_t *w = arg;

	tids[w == &futex_word ? 2 : 3] = gettid();
	syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	return NULL;
}

/* Wait until thread tids[@which] sleeps (state S), up to 2 s. */
static int wait_asleep(int which, struct task_wait *w)
{
	int i;

	for (i = 0; i < 200; i++) {
		if (tids[which] && !taskwait_read(getpid(), tids[which], w) && w->state == 'S' &&
		    w->nr >= 0)
			return 0;
		usleep(10 * 1000);
	}
	return -1;
}

TEST(threads_blocked_in_known_ways)
{
	uint64_t gil_lo = (uint64_t)(uintptr_t)gil_word, gil_hi = gil_lo + sizeof(gil_word);
	pthread_t th[4];
	struct task_wait w;
	char buf[64];

	REQUIRE(pipe(pipefd) == 0);
	pthread_create(&th[0], NULL, in_read, NULL);
	pthread_create(&th[1], NULL, in_sleep, NULL);
	pthread_create(&th[2], NULL, in_futex, &futex_word);
	pthread_create(&th[3], NULL, in_futex, &gil_word[18]);

	REQUIRE(wait_asleep(0, &w) == 0);
	CHECK_EQ(w.nr, 0);
	CHECK_EQ(w.args[0], (uint64_t)pipefd[0]);
	CHECK_EQ(taskwait_classify(&w, gil_lo, gil_hi), WAIT_IO);
	CHECK_STR(taskwait_describe(&w, buf, sizeof(buf)), "read");
	CHECK(w.wchan[0] != '\0');

	REQUIRE(wait_asleep(1, &w) == 0);
	CHECK(w.nr == 35 || w.nr == 230);
	CHECK_EQ(taskwait_classify(&w, gil_lo, gil_hi), WAIT_SLEEP);

	REQUIRE(wait_asleep(2, &w) == 0);
	CHECK_EQ(w.nr, 202);
	CHECK_EQ(taskwait_classify(&w, gil_lo, gil_hi), WAIT_LOCK);
	CHECK_STR(taskwait_describe(&w, buf, sizeof(buf)), "futex");

	REQUIRE(wait_asleep(3, &w) == 0);
	CHECK_EQ(w.nr, 202);
	CHECK_EQ(taskwait_classify(&w, gil_lo, gil_hi), WAIT_GIL);
	CHECK_EQ(taskwait_classify(&w, 0, 0), WAIT_LOCK);

	/* This thread runs. */
	CHECK_EQ(taskwait_read(getpid(), gettid(), &w), 0);
	CHECK_EQ(w.state, 'R');
	CHECK_EQ(taskwait_classify(&w, 0, 0), WAIT_RUNNING);

	CHECK_EQ(taskwait_read(getpid(), 0x7ffffff0, &w), -ENOENT);

	(void)!write(pipefd[1], "x", 1);
	futex_word = gil_word[18] = 1;
	syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	syscall(SYS_futex, &gil_word[18], FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	pthread_cancel(th[1]);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
}

TEST(classify_table)
{
	struct wait_input in = {.nr = 23, .state = WAIT_TASK_INTERRUPTIBLE};

	CHECK_EQ(wait_classify(&in), WAIT_SLEEP); /* select without descriptors */
	in.arg0 = 5;
	CHECK_EQ(wait_classify(&in), WAIT_IO);
	in = (struct wait_input){.nr = 7, .arg1 = 0, .state = WAIT_TASK_INTERRUPTIBLE};
	CHECK_EQ(wait_classify(&in), WAIT_SLEEP); /* poll(NULL, 0, t) */
	in.arg1 = 2;
	CHECK_EQ(wait_classify(&in), WAIT_IO);
	in = (struct wait_input){.nr = 61, .state = WAIT_TASK_INTERRUPTIBLE};
	CHECK_EQ(wait_classify(&in), WAIT_OTHER); /* wait4 */
	in = (struct wait_input){.nr = -1, .state = WAIT_TASK_UNINTERRUPTIBLE};
	CHECK_EQ(wait_classify(&in), WAIT_IO); /* a page fault waiting for the disk */
	in = (struct wait_input){.nr = 202, .state = WAIT_TASK_RUNNING};
	CHECK_EQ(wait_classify(&in), WAIT_RUNNABLE); /* preempted on the way out of futex */
	in.flags = WAITIN_ON_CPU;
	CHECK_EQ(wait_classify(&in), WAIT_RUNNING);
	CHECK_STR(wait_state_name(WAIT_GIL), "gil");
	CHECK_STR(wait_state_name(WAIT_RUNNABLE), "runnable");
}

TEST_MAIN()
