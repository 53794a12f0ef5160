// SPDX-License-Identifier: MIT
/*
 * Threads that block at one place from two callers: each of THREADS threads sleeps 10 ms at a
 * time, alternately through wait_via_a() and wait_via_b(), for SECONDS. The two have frames
 * of one size and are called from one loop, so every sleep stops at the same instruction
 * (libc's system call) with the same stack pointer: the place is the same, the native stacks
 * differ only in the return address into wait_via_a or wait_via_b (the off-CPU stack sites of
 * one place: user/record/stacksites.h). Ground truth: half of each thread's sleeps under each.
 *
 *   twowaits THREADS SECONDS
 *
 * Prints "READY <pid>", then at the end "DONE a=<sleeps> b=<sleeps>" over all threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "wl.h"

volatile unsigned long wl_sink;
static double seconds;
static unsigned long count_a, count_b;

static __attribute__((noinline)) void nap(void)
{
	struct timespec ts = {0, 10 * 1000 * 1000};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	wl_sink++;
}

/* One frame size, one call of nap each, and work after it (no tail call). */
static __attribute__((noinline)) void wait_via_a(void)
{
	nap();
	__atomic_add_fetch(&count_a, 1, __ATOMIC_RELAXED);
}

static __attribute__((noinline)) void wait_via_b(void)
{
	nap();
	__atomic_add_fetch(&count_b, 1, __ATOMIC_RELAXED);
}

static void *sleeper(void *arg)
{
	void (*const waits[2])(void) = {wait_via_a, wait_via_b};
	double end = wl_now() + seconds;
	unsigned long i;

	(void)arg;
	for (i = 0; wl_now() < end; i++)
		waits[i & 1]();
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4, i;
	pthread_t *t;

	seconds = argc > 2 ? atof(argv[2]) : 3;
	if (n < 1 || n > 64 || seconds <= 0) {
		fprintf(stderr, "usage: twowaits THREADS(1-64) SECONDS\n");
		return 2;
	}
	t = calloc(n, sizeof(*t));
	if (!t)
		return 1;
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	for (i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, sleeper, NULL))
			return 1;
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("DONE a=%lu b=%lu\n", count_a, count_b);
	return 0;
}
