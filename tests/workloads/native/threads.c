// SPDX-License-Identifier: MIT
/*
 * Ground truth: three busy threads named "wl-alpha", "wl-beta", "wl-gamma" spin in
 * alpha_work(), beta_work() and gamma_work() respectively; the main thread sleeps.
 * Prints "tid name" lines on stdout once all threads run, then runs argv[1] seconds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wl.h"

volatile unsigned long wl_sink;
static double end;

#define WORK(name)                                      \
	__attribute__((noinline)) void name(void)       \
	{                                               \
		while (wl_now() < end)                  \
			for (int i = 0; i < 10000; i++) \
				wl_sink += i;           \
	}
WORK(alpha_work)
WORK(beta_work)
WORK(gamma_work)

struct job {
	const char *name;
	void (*fn)(void);
};

static pthread_barrier_t ready;

static void *run(void *arg)
{
	struct job *j = arg;

	pthread_setname_np(pthread_self(), j->name);
	printf("%ld %s\n", (long)syscall(SYS_gettid), j->name);
	fflush(stdout);
	pthread_barrier_wait(&ready);
	j->fn();
	return NULL;
}

int main(int argc, char **argv)
{
	struct job jobs[] = {
		{"wl-alpha", alpha_work}, {"wl-beta", beta_work}, {"wl-gamma", gamma_work}};
	pthread_t t[3];
	int i;

	end = wl_now() + (argc > 1 ? atof(argv[1]) : 3);
	pthread_barrier_init(&ready, NULL, 4);
	for (i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, run, &jobs[i]);
	pthread_barrier_wait(&ready);
	for (i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	return 0;
}
