// SPDX-License-Identifier: MIT
/*
 * Ground truth for complete stacks through frame pointers: built with frame pointers (the
 * only workload that is, like Debian's python3.14 and python3.15), so every caller's CFA is
 * rbp + 16. The main thread and a thread named "wl-fpret" call fp_leave(), which calls fp_pop():
 * functions so short that a large share of the samples interrupt their `ret`, where their
 * CFI still says the caller's rbp is saved at CFA - 16: below the stack pointer, already
 * popped (by `pop %rbp` and by `leave`). Every
 * sample's stack starts at _start (main thread) or at clone3/clone (the other thread).
 * Prints "ready" once the thread runs, then runs argv[1] seconds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "wl.h"
#include "wl_threads.h"

volatile unsigned long wl_sink;
static double end;

/* Its epilogue: pop %rbp; ret (a leaf: its local is in the red zone). */
__attribute__((noinline)) unsigned long fp_pop(unsigned long x)
{
	volatile unsigned long local = x;

	return local * 3 + 1;
}

/* Its epilogue: leave; ret (its locals are below its frame pointer). */
__attribute__((noinline)) unsigned long fp_leave(unsigned long x)
{
	volatile unsigned long local[2] = {x, x};

	return fp_pop(local[0]) + local[1];
}

__attribute__((noinline)) static void call_loop(void)
{
	unsigned long x = 0;

	while (wl_now() < end)
		for (int i = 0; i < 100000; i++)
			x = fp_leave(x);
	wl_sink = x;
}

int main(int argc, char **argv)
{
	end = wl_now() + (argc > 1 ? atof(argv[1]) : 3);
	wl_two_threads("wl-fpret", call_loop);
	return 0;
}
