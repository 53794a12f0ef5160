// SPDX-License-Identifier: MIT
/* Ground truth: the time is spent in shared_leaf() of libwlshared.so, called from main(). */
#include <stdlib.h>

#include "wl.h"

volatile unsigned long wl_sink;
void shared_leaf(void);

int main(int argc, char **argv)
{
	double end = wl_now() + (argc > 1 ? atof(argv[1]) : 3);

	while (wl_now() < end)
		shared_leaf();
	return 0;
}
