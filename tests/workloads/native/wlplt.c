// SPDX-License-Identifier: MIT
/* libwlplt.so: a function so short that its callers spend much of their time in its PLT stub. */
__attribute__((noinline)) unsigned long plt_step(unsigned long x)
{
	return x * 3 + 1;
}
