// SPDX-License-Identifier: MIT
/*
 * A library whose constructor takes 20 ms and uses the vector registers (large memset and
 * memcpy: glibc's AVX2/EVEX variants): the injector's kill tests load copies of it so that
 * a borrowed call lasts long enough to be killed in the middle of, and clobbers what the
 * thread must get back.
 *
 * It waits with poll(), not nanosleep(): nanosleep and clock_nanosleep reset the calling
 * thread's restart block on entry, which a thread stopped inside a relative sleep needs to
 * resume it (restart_syscall). Code run by the injector must not call them (docs/live.md).
 */
#include <poll.h>
#include <string.h>

static char a[1 << 16], b[1 << 16];
volatile int slowctor_done;

__attribute__((constructor)) static void slow_init(void)
{
	memset(a, 0x5a, sizeof(a));
	poll(NULL, 0, 10);
	memcpy(b, a, sizeof(b));
	poll(NULL, 0, 10);
	slowctor_done = b[100] == 0x5a;
}
