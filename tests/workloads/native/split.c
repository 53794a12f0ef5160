// SPDX-License-Identifier: MIT
/*
 * Ground truth: 60 % of the CPU time in leaf_a, 40 % in leaf_b (by slices of 6 ms and 4 ms
 * of the thread's own CPU time, so the split holds however busy the machine is: cpu-clock
 * samples land in proportion to CPU time, not wall time), for argv[1] seconds (default 3).
 * "split SECONDS cpu": for SECONDS of its own CPU time instead, so that a test expecting a
 * number of samples gets it however busy the machine is.
 */
#include <stdlib.h>
#include <string.h>

#include "wl.h"

volatile unsigned long wl_sink;

__attribute__((noinline)) void leaf_a(void)
{
	for (int i = 0; i < 2000; i++)
		wl_sink += i * 7;
}

__attribute__((noinline)) void leaf_b(void)
{
	for (int i = 0; i < 2000; i++)
		wl_sink ^= i * 13;
}

int main(int argc, char **argv)
{
	double (*clock)(void) = argc > 2 && !strcmp(argv[2], "cpu") ? wl_cpu_now : wl_now;
	double secs = argc > 1 ? atof(argv[1]) : 3, t0 = clock(), s;

	while (clock() - t0 < secs) {
		for (s = wl_cpu_now(); wl_cpu_now() - s < 0.006;)
			leaf_a();
		for (s = wl_cpu_now(); wl_cpu_now() - s < 0.004;)
			leaf_b();
	}
	return 0;
}
