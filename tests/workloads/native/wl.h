/* SPDX-License-Identifier: MIT */
/* Shared bits of the native test workloads: a monotonic clock and a sink the optimizer
 * cannot remove. */
#ifndef WL_H
#define WL_H

#include <time.h>

extern volatile unsigned long wl_sink;

static inline double wl_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* CPU time of the calling thread, in seconds. */
static inline double wl_cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#endif
