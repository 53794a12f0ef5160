// SPDX-License-Identifier: MIT
/*
 * A fixed amount of CPU work through a call tree of moderate depth (recursion of 24 frames
 * into three leaves), built -O2 without frame pointers. Prints its own wall-clock time and
 * CPU time in seconds: "WALL CPU".
 *   work [ITERATIONS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void leaf_hash(int n)
{
	unsigned long h = 1469598103934665603UL;

	for (int i = 0; i < n; i++)
		h = (h ^ i) * 1099511628211UL;
	sink += h;
}

__attribute__((noinline)) static void leaf_sum(int n)
{
	for (int i = 0; i < n; i++)
		sink += i * 3;
}

__attribute__((noinline)) static void leaf_mix(int n)
{
	for (int i = 0; i < n; i++)
		sink ^= (sink << 1) + i;
}

__attribute__((noinline)) static unsigned long descend(int depth, int n)
{
	unsigned long r;

	if (depth == 0) {
		leaf_hash(n);
		leaf_sum(n / 2);
		leaf_mix(n / 3);
		return 1;
	}
	r = descend(depth - 1, n);
	sink += r;
	return r + 1;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 20000;
	struct timespec a, b;
	struct rusage ru;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < iters; i++)
		descend(24, 20000);
	clock_gettime(CLOCK_MONOTONIC, &b);
	getrusage(RUSAGE_SELF, &ru);
	printf("%.6f %.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
		       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}
