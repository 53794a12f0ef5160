// SPDX-License-Identifier: MIT
/*
 * Ground truth: the hot loop is in hot_inline(), always inlined into outer_work(), which is
 * called from main(). The recording must show hot_inline as its own frame above outer_work.
 */
#include <stdlib.h>

#include "wl.h"

volatile unsigned long wl_sink;

static inline __attribute__((always_inline)) void hot_inline(int n)
{
	for (int i = 0; i < n; i++)
		wl_sink += i * 5; /* HOT_INLINE_LINE */
}

__attribute__((noinline)) void outer_work(void)
{
	hot_inline(200000);
}

int main(int argc, char **argv)
{
	double end = wl_now() + (argc > 1 ? atof(argv[1]) : 3);

	while (wl_now() < end)
		outer_work();
	return 0;
}
