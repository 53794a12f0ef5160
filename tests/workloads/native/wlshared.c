// SPDX-License-Identifier: MIT
/* libwlshared.so: a function in a shared library (ground truth for module attribution). */
volatile unsigned long wlshared_sink;

__attribute__((noinline)) void shared_leaf(void)
{
	for (int i = 0; i < 100000; i++)
		wlshared_sink += i * 3;
}
