// SPDX-License-Identifier: MIT
/*
 * Ground truth for complete stacks: the main thread and a thread named "wl-plt" call
 * plt_step() of libwlplt.so in a tight loop, through the PLT, so that a large share of the
 * samples interrupt a PLT stub. Every sample's stack starts at _start (main thread) or at
 * clone3/clone (the other thread). Prints "ready" once the thread runs, then runs argv[1]
 * seconds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "wl.h"
#include "wl_threads.h"

volatile unsigned long wl_sink;
unsigned long plt_step(unsigned long x);
static double end;

__attribute__((noinline)) static void call_loop(void)
{
	unsigned long x = 0;

	while (wl_now() < end)
		for (int i = 0; i < 100000; i++)
			x = plt_step(x);
	wl_sink = x;
}

int main(int argc, char **argv)
{
	end = wl_now() + (argc > 1 ? atof(argv[1]) : 3);
	wl_two_threads("wl-plt", call_loop);
	return 0;
}
