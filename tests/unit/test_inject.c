// SPDX-License-Identifier: MIT
/*
 * inject: remote calls into a forked child whose state is checked by the child itself:
 * general-purpose and vector registers (xmm/ymm/zmm, mask registers) hold known values
 * across the injection, system calls neither fail with EINTR nor return early.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include "injector/inject.h"
#include "base/procmaps.h"
#include "test.h"
#include "base/util.h"

struct regs {
	uint64_t g[5];
	unsigned char v[32][32];
	uint64_t k[8];
};

/* A distinct 32-byte pattern per vector register. */
static unsigned char pat[32][32];

static void fill_patterns(void)
{
	int i, j;

	for (i = 0; i < 32; i++)
		for (j = 0; j < 32; j++)
			pat[i][j] = (unsigned char)(i * 37 + j * 11 + 1);
}

/*
 * Load known values into the callee-saved general registers, every vector register and
 * (AVX-512) every mask register, spin @n times, store what they hold then. dlopen's string
 * and memory functions (AVX2 or EVEX variants) use many of them: a restore that missed the
 * extended state would show here.
 */
static void hold_sse(struct regs *out, long n)
{
	__asm__ volatile("mov $0x1111111111111111, %%rbx\n\t"
			 "mov $0x2222222222222222, %%r12\n\t"
			 "mov $0x3333333333333333, %%r13\n\t"
			 "mov $0x4444444444444444, %%r14\n\t"
			 "mov $0x5555555555555555, %%r15\n\t"
			 "movdqu 0(%[p]), %%xmm0\n\t"
			 "movdqu 32(%[p]), %%xmm1\n\t"
			 "movdqu 64(%[p]), %%xmm2\n\t"
			 "movdqu 96(%[p]), %%xmm3\n\t"
			 "movdqu 128(%[p]), %%xmm4\n\t"
			 "movdqu 160(%[p]), %%xmm5\n\t"
			 "movdqu 192(%[p]), %%xmm6\n\t"
			 "movdqu 224(%[p]), %%xmm7\n\t"
			 "movdqu 256(%[p]), %%xmm8\n\t"
			 "movdqu 288(%[p]), %%xmm9\n\t"
			 "movdqu 320(%[p]), %%xmm10\n\t"
			 "movdqu 352(%[p]), %%xmm11\n\t"
			 "movdqu 384(%[p]), %%xmm12\n\t"
			 "movdqu 416(%[p]), %%xmm13\n\t"
			 "movdqu 448(%[p]), %%xmm14\n\t"
			 "movdqu 480(%[p]), %%xmm15\n\t"
			 "1: pause\n\t"
			 "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 "mov %%rbx, 0(%[o])\n\t"
			 "mov %%r12, 8(%[o])\n\t"
			 "mov %%r13, 16(%[o])\n\t"
			 "mov %%r14, 24(%[o])\n\t"
			 "mov %%r15, 32(%[o])\n\t"
			 "movdqu %%xmm0, 40(%[o])\n\t"
			 "movdqu %%xmm1, 72(%[o])\n\t"
			 "movdqu %%xmm2, 104(%[o])\n\t"
			 "movdqu %%xmm3, 136(%[o])\n\t"
			 "movdqu %%xmm4, 168(%[o])\n\t"
			 "movdqu %%xmm5, 200(%[o])\n\t"
			 "movdqu %%xmm6, 232(%[o])\n\t"
			 "movdqu %%xmm7, 264(%[o])\n\t"
			 "movdqu %%xmm8, 296(%[o])\n\t"
			 "movdqu %%xmm9, 328(%[o])\n\t"
			 "movdqu %%xmm10, 360(%[o])\n\t"
			 "movdqu %%xmm11, 392(%[o])\n\t"
			 "movdqu %%xmm12, 424(%[o])\n\t"
			 "movdqu %%xmm13, 456(%[o])\n\t"
			 "movdqu %%xmm14, 488(%[o])\n\t"
			 "movdqu %%xmm15, 520(%[o])\n\t"
			 : [n] "+r"(n)
			 : [o] "r"(out), [p] "r"(pat)
			 : "rax", "rbx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3",
			   "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
			   "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}

__attribute__((target("avx"))) static void hold_avx(struct regs *out, long n)
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
			 "mov %%rbx, 0(%[o])\n\t"
			 "mov %%r12, 8(%[o])\n\t"
			 "mov %%r13, 16(%[o])\n\t"
			 "mov %%r14, 24(%[o])\n\t"
			 "mov %%r15, 32(%[o])\n\t"
			 "vmovdqu %%ymm0, 40(%[o])\n\t"
			 "vmovdqu %%ymm1, 72(%[o])\n\t"
			 "vmovdqu %%ymm2, 104(%[o])\n\t"
			 "vmovdqu %%ymm3, 136(%[o])\n\t"
			 "vmovdqu %%ymm4, 168(%[o])\n\t"
			 "vmovdqu %%ymm5, 200(%[o])\n\t"
			 "vmovdqu %%ymm6, 232(%[o])\n\t"
			 "vmovdqu %%ymm7, 264(%[o])\n\t"
			 "vmovdqu %%ymm8, 296(%[o])\n\t"
			 "vmovdqu %%ymm9, 328(%[o])\n\t"
			 "vmovdqu %%ymm10, 360(%[o])\n\t"
			 "vmovdqu %%ymm11, 392(%[o])\n\t"
			 "vmovdqu %%ymm12, 424(%[o])\n\t"
			 "vmovdqu %%ymm13, 456(%[o])\n\t"
			 "vmovdqu %%ymm14, 488(%[o])\n\t"
			 "vmovdqu %%ymm15, 520(%[o])\n\t"
			 "vzeroupper\n\t"
			 : [n] "+r"(n)
			 : [o] "r"(out), [p] "r"(pat)
			 : "rax", "rbx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3",
			   "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
			   "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void hold_avx512(struct regs *out,
									     long n)
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
			 "vmovdqu64 512(%[p]), %%ymm16\n\t"
			 "vmovdqu64 544(%[p]), %%ymm17\n\t"
			 "vmovdqu64 576(%[p]), %%ymm18\n\t"
			 "vmovdqu64 608(%[p]), %%ymm19\n\t"
			 "vmovdqu64 640(%[p]), %%ymm20\n\t"
			 "vmovdqu64 672(%[p]), %%ymm21\n\t"
			 "vmovdqu64 704(%[p]), %%ymm22\n\t"
			 "vmovdqu64 736(%[p]), %%ymm23\n\t"
			 "vmovdqu64 768(%[p]), %%ymm24\n\t"
			 "vmovdqu64 800(%[p]), %%ymm25\n\t"
			 "vmovdqu64 832(%[p]), %%ymm26\n\t"
			 "vmovdqu64 864(%[p]), %%ymm27\n\t"
			 "vmovdqu64 896(%[p]), %%ymm28\n\t"
			 "vmovdqu64 928(%[p]), %%ymm29\n\t"
			 "vmovdqu64 960(%[p]), %%ymm30\n\t"
			 "vmovdqu64 992(%[p]), %%ymm31\n\t"
			 "mov $0x7777777777777777, %%rax\n\t"
			 "kmovq %%rax, %%k0\n\t"
			 "mov $0x8888888888888888, %%rax\n\t"
			 "kmovq %%rax, %%k1\n\t"
			 "mov $0x9999999999999999, %%rax\n\t"
			 "kmovq %%rax, %%k2\n\t"
			 "mov $0xaaaaaaaaaaaaaaaa, %%rax\n\t"
			 "kmovq %%rax, %%k3\n\t"
			 "mov $0xbbbbbbbbbbbbbbbb, %%rax\n\t"
			 "kmovq %%rax, %%k4\n\t"
			 "mov $0xcccccccccccccccc, %%rax\n\t"
			 "kmovq %%rax, %%k5\n\t"
			 "mov $0xdddddddddddddddd, %%rax\n\t"
			 "kmovq %%rax, %%k6\n\t"
			 "mov $0xeeeeeeeeeeeeeeee, %%rax\n\t"
			 "kmovq %%rax, %%k7\n\t"
			 "1: pause\n\t"
			 "dec %[n]\n\t"
			 "jnz 1b\n\t"
			 "mov %%rbx, 0(%[o])\n\t"
			 "mov %%r12, 8(%[o])\n\t"
			 "mov %%r13, 16(%[o])\n\t"
			 "mov %%r14, 24(%[o])\n\t"
			 "mov %%r15, 32(%[o])\n\t"
			 "vmovdqu %%ymm0, 40(%[o])\n\t"
			 "vmovdqu %%ymm1, 72(%[o])\n\t"
			 "vmovdqu %%ymm2, 104(%[o])\n\t"
			 "vmovdqu %%ymm3, 136(%[o])\n\t"
			 "vmovdqu %%ymm4, 168(%[o])\n\t"
			 "vmovdqu %%ymm5, 200(%[o])\n\t"
			 "vmovdqu %%ymm6, 232(%[o])\n\t"
			 "vmovdqu %%ymm7, 264(%[o])\n\t"
			 "vmovdqu %%ymm8, 296(%[o])\n\t"
			 "vmovdqu %%ymm9, 328(%[o])\n\t"
			 "vmovdqu %%ymm10, 360(%[o])\n\t"
			 "vmovdqu %%ymm11, 392(%[o])\n\t"
			 "vmovdqu %%ymm12, 424(%[o])\n\t"
			 "vmovdqu %%ymm13, 456(%[o])\n\t"
			 "vmovdqu %%ymm14, 488(%[o])\n\t"
			 "vmovdqu %%ymm15, 520(%[o])\n\t"
			 "vmovdqu64 %%ymm16, 552(%[o])\n\t"
			 "vmovdqu64 %%ymm17, 584(%[o])\n\t"
			 "vmovdqu64 %%ymm18, 616(%[o])\n\t"
			 "vmovdqu64 %%ymm19, 648(%[o])\n\t"
			 "vmovdqu64 %%ymm20, 680(%[o])\n\t"
			 "vmovdqu64 %%ymm21, 712(%[o])\n\t"
			 "vmovdqu64 %%ymm22, 744(%[o])\n\t"
			 "vmovdqu64 %%ymm23, 776(%[o])\n\t"
			 "vmovdqu64 %%ymm24, 808(%[o])\n\t"
			 "vmovdqu64 %%ymm25, 840(%[o])\n\t"
			 "vmovdqu64 %%ymm26, 872(%[o])\n\t"
			 "vmovdqu64 %%ymm27, 904(%[o])\n\t"
			 "vmovdqu64 %%ymm28, 936(%[o])\n\t"
			 "vmovdqu64 %%ymm29, 968(%[o])\n\t"
			 "vmovdqu64 %%ymm30, 1000(%[o])\n\t"
			 "vmovdqu64 %%ymm31, 1032(%[o])\n\t"
			 "kmovq %%k0, %%rax\n\t"
			 "mov %%rax, 1064(%[o])\n\t"
			 "kmovq %%k1, %%rax\n\t"
			 "mov %%rax, 1072(%[o])\n\t"
			 "kmovq %%k2, %%rax\n\t"
			 "mov %%rax, 1080(%[o])\n\t"
			 "kmovq %%k3, %%rax\n\t"
			 "mov %%rax, 1088(%[o])\n\t"
			 "kmovq %%k4, %%rax\n\t"
			 "mov %%rax, 1096(%[o])\n\t"
			 "kmovq %%k5, %%rax\n\t"
			 "mov %%rax, 1104(%[o])\n\t"
			 "kmovq %%k6, %%rax\n\t"
			 "mov %%rax, 1112(%[o])\n\t"
			 "kmovq %%k7, %%rax\n\t"
			 "mov %%rax, 1120(%[o])\n\t"
			 "vzeroupper\n\t"
			 : [n] "+r"(n)
			 : [o] "r"(out), [p] "r"(pat)
			 : "rax", "rbx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm2", "xmm3",
			   "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
			   "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",
			   "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27",
			   "xmm28", "xmm29", "xmm30", "xmm31", "k0", "k1", "k2", "k3", "k4", "k5",
			   "k6", "k7", "memory", "cc");
}

static int level(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl"))
		return 2;
	return __builtin_cpu_supports("avx") ? 1 : 0;
}

/* The child: spins with registers loaded, or sleeps/reads, and reports on @wfd. */
static void child_main(int wfd, int mode, int rfd)
{
	uint64_t end = now_mono_ns() + 1500000000ULL;
	char msg[128] = "OK";
	int lv = level(), vecs = lv == 2 ? 32 : 16, rounds = 0, i;

	fill_patterns();

	while (now_mono_ns() < end && !strcmp(msg, "OK")) {
		if (mode == 0) {
			struct regs r;

			memset(&r, 0, sizeof(r));
			if (lv == 2)
				hold_avx512(&r, 2000000);
			else if (lv == 1)
				hold_avx(&r, 2000000);
			else
				hold_sse(&r, 2000000);
			for (i = 0; i < 5; i++)
				if (r.g[i] != 0x1111111111111111ULL * (i + 1))
					snprintf(msg, sizeof(msg), "BAD general register %d", i);
			for (i = 0; i < vecs; i++)
				if (memcmp(r.v[i], pat[i], lv ? 32 : 16))
					snprintf(msg, sizeof(msg), "BAD vector register %d", i);
			for (i = 0; lv == 2 && i < 8; i++)
				if (r.k[i] != 0x1111111111111111ULL * (i + 7))
					snprintf(msg, sizeof(msg), "BAD mask register k%d", i);
		} else if (mode == 1) {
			struct timespec ts = {0, 30000000};
			uint64_t t0 = now_mono_ns();

			if (nanosleep(&ts, NULL))
				snprintf(msg, sizeof(msg), "BAD nanosleep: %s", strerror(errno));
			else if (now_mono_ns() - t0 < 30000000ULL)
				snprintf(msg, sizeof(msg), "BAD nanosleep returned early");
		} else {
			char c;
			ssize_t n = read(rfd, &c, 1);

			if (n != 1)
				snprintf(msg, sizeof(msg), "BAD read: %zd %s", n, strerror(errno));
			else if (c != (char)('a' + rounds % 26))
				snprintf(msg, sizeof(msg), "BAD read byte");
		}
		rounds++;
	}
	if (!strcmp(msg, "OK"))
		snprintf(msg, sizeof(msg), "OK %d", rounds);
	if (write(wfd, msg, strlen(msg) + 1) < 0)
		_exit(2);
	_exit(0);
}

struct kid {
	pid_t pid;
	int rfd;  /* its report */
	int feed; /* for mode 2: the pipe it reads */
};

static struct kid start_child(int mode)
{
	int rep[2], data[2];
	struct kid k = {-1, -1, -1};

	if (pipe(rep) || pipe(data))
		return k;
	k.pid = fork();
	if (k.pid == 0) {
		close(rep[0]);
		close(data[1]);
		child_main(rep[1], mode, data[0]);
	}
	close(rep[1]);
	close(data[0]);
	k.rfd = rep[0];
	k.feed = data[1];
	return k;
}

/* Feed a reading child one byte every 5 ms until it ends; return its report. */
static void finish(struct kid *k, char *msg, size_t len)
{
	ssize_t n = 0;
	int i = 0, st;

	fcntl(k->rfd, F_SETFL, O_NONBLOCK);
	for (;;) {
		struct timespec ts = {0, 5000000};
		char c = 'a' + i % 26;

		n = read(k->rfd, msg, len - 1);
		if (n > 0)
			break;
		if (k->feed >= 0 && write(k->feed, &c, 1) == 1)
			i++;
		nanosleep(&ts, NULL);
	}
	msg[n] = '\0';
	waitpid(k->pid, &st, 0);
	close(k->rfd);
	if (k->feed >= 0)
		close(k->feed);
}

static const char *some_library(void)
{
	/* Libraries this test binary does not link (it has libdw's libbz2, liblzma...). */
	static const char *const libs[] = {"/lib/x86_64-linux-gnu/libexpat.so.1",
					   "/lib/x86_64-linux-gnu/libuuid.so.1",
					   "/lib/x86_64-linux-gnu/libffi.so.8"};
	size_t i;

	for (i = 0; i < sizeof(libs) / sizeof(libs[0]); i++)
		if (!access(libs[i], R_OK))
			return libs[i];
	return NULL;
}

static bool mapped(pid_t pid, const char *path)
{
	struct procmaps pm = {};
	char real[4096];
	bool found = false;
	int i;

	if (!realpath(path, real) || procmaps__read(pid, &pm))
		return false;
	for (i = 0; i < (int)pm.nr; i++)
		if (!strcmp(pm.maps[i].path, real))
			found = true;
	procmaps__release(&pm);
	return found;
}

static void inject_into(int mode)
{
	const char *lib = some_library();
	struct inject_info info;
	struct kid k = start_child(mode);
	struct timespec ts = {0, 100000000};
	char msg[128], libc[4096] = "";
	int err;

	REQUIRE(lib && k.pid > 0);
	REQUIRE(!mapped(getpid(), lib));
	nanosleep(&ts, NULL);
	err = inject__dlopen(k.pid, lib, &info);
	CHECK_EQ(err, 0);
	if (err)
		printf("    %s\n", info.error);
	CHECK(info.ret != 0);
	CHECK_EQ(info.tid, k.pid);
	CHECK(mapped(k.pid, lib));
	/* A second call: a function of libc, returning a value. */
	CHECK_EQ(inject__find_module(k.pid, "libc.so", libc, sizeof(libc)), 1);
	err = inject__call(k.pid, libc, "getpid", &info);
	CHECK_EQ(err, 0);
	CHECK_EQ(info.ret, k.pid);
	finish(&k, msg, sizeof(msg));
	if (strncmp(msg, "OK", 2))
		TEST_FAIL_("child says: %s", msg);
}

TEST(registers_survive)
{
	inject_into(0);
}

TEST(nanosleep_is_restarted)
{
	inject_into(1);
}

TEST(read_is_restarted)
{
	inject_into(2);
}

/*
 * The same, with the thread restoring itself from the trampoline's data (xrstor, the signal
 * mask, every register, iretq; restart_syscall for the nanosleep) instead of being put back
 * by us: what it does when the injector is killed during the call. A park of 0 ms makes the
 * thread restore itself before we come for it.
 */
static void inject_self_restoring(int mode)
{
	const char *lib = some_library();
	struct inject_info info;
	struct kid k = start_child(mode);
	struct timespec ts = {0, 100000000};
	char msg[128];
	int err;

	REQUIRE(lib && k.pid > 0);
	nanosleep(&ts, NULL);
	setenv("PROBING_INJECT_PARK_MS", "0", 1);
	err = inject__dlopen(k.pid, lib, &info);
	unsetenv("PROBING_INJECT_PARK_MS");
	CHECK_EQ(err, 0);
	if (err)
		printf("    %s\n", info.error);
	CHECK(mapped(k.pid, lib));
	finish(&k, msg, sizeof(msg));
	if (strncmp(msg, "OK", 2))
		TEST_FAIL_("child says: %s", msg);
}

TEST(registers_survive_self_restore)
{
	inject_self_restoring(0);
}

TEST(nanosleep_is_restarted_self_restore)
{
	inject_self_restoring(1);
}

TEST(read_is_restarted_self_restore)
{
	inject_self_restoring(2);
}

TEST(dlopen_failure_reports_dlerror)
{
	char path[] = "/tmp/probing-notelf-XXXXXX";
	char junk[2048];
	struct inject_info info;
	struct kid k = start_child(1);
	char msg[128];
	int fd, err;

	REQUIRE(k.pid > 0);
	fd = mkstemp(path);
	REQUIRE(fd >= 0);
	memset(junk, 'j', sizeof(junk));
	REQUIRE(write(fd, junk, sizeof(junk)) == sizeof(junk));
	close(fd);
	err = inject__dlopen(k.pid, path, &info);
	CHECK_EQ(err, -EIO);
	CHECK(strstr(info.error, "invalid ELF header") != NULL);
	unlink(path);
	finish(&k, msg, sizeof(msg));
	if (strncmp(msg, "OK", 2))
		TEST_FAIL_("child says: %s", msg);
}

/* A callback that says it is inside dl_iterate_phdr (a byte on the pipe @arg), i.e. with the
 * loader's lock held, and sleeps there. */
static int sleepy_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct timespec ts = {1, 500000000};

	if (write(*(int *)arg, "i", 1) != 1)
		_exit(3);
	nanosleep(&ts, NULL);
	return 1;
}

static void *sleeper_thread(void *arg)
{
	struct timespec ts = {2, 0};

	nanosleep(&ts, NULL);
	return NULL;
}

/* A child whose main thread sits inside dl_iterate_phdr; with @other, a second thread
 * sleeps in plain nanosleep. */
static pid_t start_locked_child(bool other)
{
	int fds[2];
	pid_t pid;
	pthread_t t;
	char c;

	/* The child is inside the loader once it says so: on a loaded machine, a fixed wait
	 * was not always enough for it to get there. */
	if (pipe(fds))
		return -1;
	pid = fork();
	if (pid == 0) {
		struct timespec ts = {1, 500000000};

		close(fds[0]);
		if (other)
			pthread_create(&t, NULL, sleeper_thread, NULL);
		dl_iterate_phdr(sleepy_cb, &fds[1]);
		/* Live on: a dlopen in another thread waited for that lock, and must finish. */
		nanosleep(&ts, NULL);
		_exit(0);
	}
	close(fds[1]);
	if (pid > 0 && read(fds[0], &c, 1) != 1)
		pid = -1;
	close(fds[0]);
	return pid;
}

TEST(never_uses_a_thread_inside_the_loader)
{
	const char *lib = some_library();
	struct inject_info info;
	struct timespec ts = {0, 100000000};
	pid_t pid;
	int err, st;

	REQUIRE(lib);
	/* Only thread inside dl_iterate_phdr: refused, with the reason. */
	pid = start_locked_child(false);
	REQUIRE(pid > 0);
	nanosleep(&ts, NULL);
	err = inject__dlopen(pid, lib, &info);
	CHECK_EQ(err, -EBUSY);
	CHECK(strstr(info.error, "inside dl_iterate_phdr") != NULL);
	CHECK(!mapped(pid, lib));
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Another thread is free: that one runs dlopen (which waits for the lock the first
	 * thread holds, as any dlopen would). */
	pid = start_locked_child(true);
	REQUIRE(pid > 0);
	nanosleep(&ts, NULL);
	err = inject__dlopen(pid, lib, &info);
	CHECK_EQ(err, 0);
	if (err)
		printf("    %s\n", info.error);
	CHECK(info.tid != pid && info.tid > 0);
	CHECK(info.threads_stopped >= 2);
	CHECK(mapped(pid, lib));
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(refuses_missing_processes)
{
	struct inject_info info;
	char msg[512];

	CHECK_EQ(inject__dlopen(999999, "/lib/x86_64-linux-gnu/libc.so.6", &info), -ESRCH);
	CHECK(strstr(info.error, "no such process") != NULL);
	CHECK_EQ(inject__check_permission(999999, msg, sizeof(msg)), -ESRCH);
	CHECK_EQ(inject__check_permission(getpid(), msg, sizeof(msg)), 0);
}

TEST_MAIN()
