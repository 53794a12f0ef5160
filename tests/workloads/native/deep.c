// SPDX-License-Identifier: MIT
/*
 * Ground truth: deep_leaf() is reached through exactly DEPTH (48) frames of recurse(),
 * none inlined or tail-called, from main(). Runs for argv[1] seconds (default 3) of wall
 * time, or of its own CPU time when argv[2] is "cpu" (robust to a loaded machine).
 */
#include <stdlib.h>
#include <string.h>

#include "wl.h"

#define DEPTH 48

volatile unsigned long wl_sink;
static double deadline;
static double (*clock_now)(void) = wl_now;

__attribute__((noinline)) unsigned long deep_leaf(void)
{
	unsigned long x = 0;

	while (clock_now() < deadline)
		for (int i = 0; i < 10000; i++)
			x += i ^ wl_sink;
	return x;
}

/* The work after the call keeps it from being a tail call. */
__attribute__((noinline)) unsigned long recurse(int n)
{
	unsigned long r = n ? recurse(n - 1) : deep_leaf();

	wl_sink += r + n;
	return r + 1;
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[2], "cpu"))
		clock_now = wl_cpu_now;
	deadline = clock_now() + (argc > 1 ? atof(argv[1]) : 3);
	recurse(DEPTH - 1);
	return 0;
}
