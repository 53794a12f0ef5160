// SPDX-License-Identifier: MIT
/*
 * A single-threaded target for the injector's kill tests: it sits in one kind of system
 * call (or spins with known register values) and checks every result itself.
 *
 *   blocker MODE SECONDS
 *
 * Prints "READY <pid>", works for SECONDS (0: until stdin is closed; the read modes: until
 * stdin ends), then prints "RESULT ok MODE n=<count>" or "RESULT fail MODE <what went
 * wrong>" (exit 0 / 1).
 *
 *   nanosleep  20 ms sleeps (restarted through restart_syscall when interrupted), each at
 *              least 20 ms long
 *   futex      20 ms FUTEX_WAIT time-outs (restart_syscall too), each ETIMEDOUT after 20 ms
 *   poll       20 ms poll() time-outs (restart_syscall too)
 *   epoll      20 ms epoll_wait time-outs (a call that returns EINTR when stopped)
 *   read       reads stdin byte by byte: 'a', 'b', ... 'z', 'a'... (a plain -ERESTARTSYS)
 *   vector     spins with known values in rbx, r12-r15 and every xmm/ymm register, checks
 *              them after each spin
 *   longsleep  one nanosleep of SECONDS; prints "SLEPT <seconds it took>"
 *   sigread-restart, sigread-intr
 *              SIGUSR1 has a handler, with SA_RESTART or without; reads stdin and prints
 *              "read rc=N errno=NAME handled=N" after every read() until end of file
 * No EINTR is expected anywhere but in sigread-intr after a SIGUSR1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/syscall.h>

#include "wl.h"

volatile unsigned long wl_sink;
static const char *mode;
static volatile sig_atomic_t handled;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("RESULT fail %s ", mode);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

#define STEP 0.020

static void check_step(double t0, int rc, int err, int want_rc, int want_err, const char *what)
{
	double el = wl_now() - t0;

	if (rc != want_rc || (want_rc < 0 && err != want_err))
		fail("%s returned %d errno %s", what, rc, strerrorname_np(err));
	if (el < STEP - 0.0005)
		fail("%s returned after %.4f s < %.3f s", what, el, STEP);
}

static unsigned char pat[16][32];

/* Load known values, spin, store what the registers hold then (AVX: the whole ymm). */
__attribute__((target("avx"))) static void spin_avx(uint64_t *g, unsigned char (*v)[32], long n)
{
	__asm__ volatile("mov $0x1111111111111111, %%rbx\n\t"
			 "mov $0x2222222222222222, %%r12\n\t"
			 "mov $0x3333333333333333, %%r13\n\t"
			 "mov $0x4444444444444444, %%r14\n\t"
			 "mov $0x5555555555555555, %%r15\n\t"
			 "vmovdqu 0(%[p]), %%ymm0\n\t"
			 "vmovdqu 32(%[p]), %%ymm1\n\t"
			 "vmovdqu 64(%[p]), %%ymm2\n\t"
			 "vmovdqu 96(%[p]), %%ymm3\n\t"
			 "vmovdqu 128(%[p]), %%ymm4\n\t"
			 "vmovdqu 160(%[p]), %%ymm5\n\t"
			 "vmovdqu 192(%[p]), %%ymm6\n\t"
			 "vmovdqu 224(%[p]), %%ymm7\n\t"
			 "vmovdqu 256(%[p]), %%ymm8\n\t"
			 "vmovdqu 288(%[p]), %%ymm9\n\t"
			 "vmovdqu 320(%[p]), %%ymm10\n\t"
			 "vmovdqu 352(%[p]), %%ymm11\n\t"
			 "vmovdqu 384(%[p]), %%ymm12\n\t"
			 "vmovdqu 416(%[p]), %%ymm13\n\t"
			 "vmovdqu 448(%[p]), %%ymm14\n\t"
			 "vmovdqu 480(%[p]), %%ymm15\n\t"
			 "1: pause\n\t"
			 "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 "mov %%rbx, 0(%[g])\n\t"
			 "mov %%r12, 8(%[g])\n\t"
			 "mov %%r13, 16(%[g])\n\t"
			 "mov %%r14, 24(%[g])\n\t"
			 "mov %%r15, 32(%[g])\n\t"
			 "vmovdqu %%ymm0, 0(%[v])\n\t"
			 "vmovdqu %%ymm1, 32(%[v])\n\t"
			 "vmovdqu %%ymm2, 64(%[v])\n\t"
			 "vmovdqu %%ymm3, 96(%[v])\n\t"
			 "vmovdqu %%ymm4, 128(%[v])\n\t"
			 "vmovdqu %%ymm5, 160(%[v])\n\t"
			 "vmovdqu %%ymm6, 192(%[v])\n\t"
			 "vmovdqu %%ymm7, 224(%[v])\n\t"
			 "vmovdqu %%ymm8, 256(%[v])\n\t"
			 "vmovdqu %%ymm9, 288(%[v])\n\t"
			 "vmovdqu %%ymm10, 320(%[v])\n\t"
			 "vmovdqu %%ymm11, 352(%[v])\n\t"
			 "vmovdqu %%ymm12, 384(%[v])\n\t"
			 "vmovdqu %%ymm13, 416(%[v])\n\t"
			 "vmovdqu %%ymm14, 448(%[v])\n\t"
			 "vmovdqu %%ymm15, 480(%[v])\n\t"
			 "vzeroupper\n\t"
			 : [n] "+r"(n)
			 : [g] "r"(g), [v] "r"(v), [p] "r"(pat)
			 : "rbx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3",
			   "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
			   "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}

static void on_usr1(int sig)
{
	handled++;
}

static double end;

/* Keep going? Until the end time, or (no time given) until stdin is closed. */
static bool running(void)
{
	struct pollfd p = {0, POLLIN, 0};
	char c;

	if (end > 0)
		return wl_now() < end;
	return !(poll(&p, 1, 0) == 1 && read(0, &c, 1) <= 0);
}

int main(int argc, char **argv)
{
	double seconds, t0;
	long n = 0;
	int rc, i, j;

	if (argc != 3) {
		fprintf(stderr, "usage: blocker MODE SECONDS\n");
		return 2;
	}
	mode = argv[1];
	seconds = atof(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strncmp(mode, "sigread-", 8)) {
		struct sigaction sa = {.sa_handler = on_usr1};

		sa.sa_flags = !strcmp(mode, "sigread-restart") ? SA_RESTART : 0;
		sigaction(SIGUSR1, &sa, NULL);
	}
	printf("READY %d\n", getpid());
	end = seconds > 0 ? wl_now() + seconds : 0;
	if (!strcmp(mode, "nanosleep")) {
		for (; running(); n++) {
			struct timespec ts = {0, STEP * 1e9};

			t0 = wl_now();
			rc = nanosleep(&ts, NULL);
			check_step(t0, rc, errno, 0, 0, "nanosleep");
		}
	} else if (!strcmp(mode, "futex")) {
		int word = 0;

		for (; running(); n++) {
			struct timespec ts = {0, STEP * 1e9};

			t0 = wl_now();
			rc = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
			check_step(t0, rc, errno, -1, ETIMEDOUT, "futex wait");
		}
	} else if (!strcmp(mode, "poll")) {
		for (; running(); n++) {
			t0 = wl_now();
			rc = poll(NULL, 0, STEP * 1000);
			check_step(t0, rc, errno, 0, 0, "poll");
		}
	} else if (!strcmp(mode, "epoll")) {
		struct epoll_event ev;
		int ep = epoll_create1(0);

		for (; running(); n++) {
			t0 = wl_now();
			rc = epoll_wait(ep, &ev, 1, STEP * 1000);
			check_step(t0, rc, errno, 0, 0, "epoll_wait");
		}
	} else if (!strcmp(mode, "read")) {
		char c;

		while ((rc = read(0, &c, 1)) != 0) {
			if (rc != 1)
				fail("read returned %d errno %s", rc, strerrorname_np(errno));
			if (c != 'a' + n % 26)
				fail("read byte %d is '%c'", (int)n, c);
			n++;
		}
	} else if (!strcmp(mode, "vector")) {
		uint64_t g[5];
		unsigned char v[16][32];

		for (i = 0; i < 16; i++)
			for (j = 0; j < 32; j++)
				pat[i][j] = (unsigned char)(i * 37 + j * 11 + 1);
		__builtin_cpu_init();
		if (!__builtin_cpu_supports("avx"))
			fail("no AVX on this CPU");
		for (; running(); n++) {
			memset(g, 0, sizeof(g));
			memset(v, 0, sizeof(v));
			spin_avx(g, v, 200000);
			for (i = 0; i < 5; i++)
				if (g[i] != 0x1111111111111111ULL * (i + 1))
					fail("general register %d changed", i);
			for (i = 0; i < 16; i++)
				if (memcmp(v[i], pat[i], 32))
					fail("ymm%d changed", i);
		}
	} else if (!strcmp(mode, "longsleep")) {
		struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};

		t0 = wl_now();
		rc = nanosleep(&ts, NULL);
		if (rc)
			fail("nanosleep returned %d errno %s", rc, strerrorname_np(errno));
		printf("SLEPT %.4f\n", wl_now() - t0);
		n = 1;
	} else if (!strncmp(mode, "sigread-", 8)) {
		char c;

		do {
			errno = 0;
			rc = read(0, &c, 1);
			printf("read rc=%d errno=%s handled=%d\n", rc,
			       errno ? strerrorname_np(errno) : "0", (int)handled);
			n++;
		} while (rc != 0);
	} else {
		fail("unknown mode");
	}
	printf("RESULT ok %s n=%ld\n", mode, n);
	return 0;
}
