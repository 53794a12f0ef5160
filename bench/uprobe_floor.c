/* SPDX-License-Identifier: MIT */
/*
 * The floor of a uprobe on this machine: what one trap costs the probed thread when the BPF
 * program attached to it returns at once. The collectives' probes (bench/bench_comm.py) cost
 * their traps plus their program's run time; this says how much of a call's cost is the
 * kernel's trap, which no program can make cheaper.
 *
 *     build/bench/uprobe_floor [CALLS] [ROUNDS]
 *
 * A loop calls two functions that start as the probed gloo functions do (endbr64, then
 * `push %rbp`). Per round, interleaved: no probe; a uprobe after the endbr64 (where probing
 * puts its probes: the push is emulated by the kernel); a uprobe on the endbr64 itself (which
 * the kernel single-steps out of line: what a probe at a function's symbol address costs).
 * Each probe is a perf event of the uprobe PMU with a two-instruction BPF program (r0 = 0;
 * exit). Prints the median over rounds of the loop's time per call in each state and the
 * difference to no probe. Needs root (or CAP_PERFMON and CAP_BPF).
 */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

long probed_push(long x);
long probed_endbr(long x);

/* Two functions laid out as a CET-enabled compiler lays out a function with a frame. */
__asm__(".text\n"
	".globl probed_push\n.type probed_push,@function\nprobed_push:\n"
	"endbr64\npush %rbp\nmov %rsp,%rbp\nlea 1(%rdi,%rdi,2),%rax\npop %rbp\nret\n"
	".size probed_push,.-probed_push\n"
	".globl probed_endbr\n.type probed_endbr,@function\nprobed_endbr:\n"
	"endbr64\npush %rbp\nmov %rsp,%rbp\nlea 1(%rdi,%rdi,2),%rax\npop %rbp\nret\n"
	".size probed_endbr,.-probed_endbr\n");

enum state { S_NONE, S_PUSH, S_ENDBR, S_NR };

static const char *const state_name[S_NR] = {
	[S_NONE] = "no probe",
	[S_PUSH] = "uprobe after endbr64 (push emulated)",
	[S_ENDBR] = "uprobe on endbr64 (single-stepped)",
};

/* The file offset of @fn in this executable: its address minus the start of the mapping of
 * /proc/self/exe that holds it, plus that mapping's offset. Negative errno on failure. */
static long file_offset(const void *fn)
{
	uintptr_t a = (uintptr_t)fn, lo, hi;
	unsigned long off;
	char exe[4096], line[4352], path[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	long ret = -ENOENT;
	FILE *f;

	if (n < 0)
		return -errno;
	exe[n] = 0;
	f = fopen("/proc/self/maps", "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		path[0] = 0;
		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %4095s", &lo, &hi, &off, path) < 3)
			continue;
		if (a >= lo && a < hi && !strcmp(path, exe)) {
			ret = (long)(a - lo + off);
			break;
		}
	}
	fclose(f);
	return ret;
}

/* A uprobe at @offset of /proc/self/exe running @prog: the perf event's fd, or negative
 * errno. */
static int attach(int prog, long offset)
{
	struct perf_event_attr attr = {.size = sizeof(attr)};
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "r");
	int type = -1, fd;

	if (!f)
		return -errno;
	if (fscanf(f, "%d", &type) != 1)
		type = -1;
	fclose(f);
	if (type < 0 || n < 0)
		return -ENOENT;
	exe[n] = 0;
	attr.type = type;
	attr.config1 = (uint64_t)(uintptr_t)exe; /* uprobe_path */
	attr.config2 = offset;			 /* probe_offset */
	fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog) || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Microseconds per call of @calls calls of @fn. */
static double time_calls(long (*fn)(long), long calls)
{
	volatile long sink = 0;
	double t0 = now_s();

	for (long i = 0; i < calls; i++)
		sink += fn(i);
	return (now_s() - t0) * 1e6 / calls;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct bpf_insn insns[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
		{.code = BPF_JMP | BPF_EXIT},
	};
	long calls = argc > 1 ? atol(argv[1]) : 200000;
	int rounds = argc > 2 ? atoi(argv[2]) : 7, prog, s, r, fd, ret = 1;
	long off_push = file_offset((const void *)probed_push);
	long off_endbr = file_offset((const void *)probed_endbr);
	double *t[S_NR], med[S_NR];

	if (calls < 1000 || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "usage: %s [CALLS >= 1000] [ROUNDS 1-1000]\n", argv[0]);
		return 2;
	}
	if (off_push < 0 || off_endbr < 0) {
		fprintf(stderr, "uprobe_floor: cannot find its own functions in /proc/self/maps\n");
		return 1;
	}
	prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "floor", "GPL", insns, 2, NULL);
	if (prog < 0) {
		fprintf(stderr, "uprobe_floor: cannot load a BPF program: %s (run as root)\n",
			strerror(-prog));
		return 1;
	}
	for (s = 0; s < S_NR; s++)
		t[s] = calloc(rounds, sizeof(double));
	/* The single-stepped probe costs ~30 times more: a tenth of the calls. */
	for (r = 0; r < rounds; r++) {
		for (s = 0; s < S_NR; s++) {
			long n = s == S_ENDBR ? calls / 10 : calls;
			long (*fn)(long) = s == S_ENDBR ? probed_endbr : probed_push;

			fd = s == S_NONE ? 0 : attach(prog, s == S_PUSH ? off_push + 4 : off_endbr);
			if (fd < 0) {
				fprintf(stderr, "uprobe_floor: cannot attach a uprobe: %s\n",
					strerror(-fd));
				goto out;
			}
			time_calls(fn, n / 20); /* warm */
			t[s][r] = time_calls(fn, n);
			if (fd > 0)
				close(fd);
		}
	}
	for (s = 0; s < S_NR; s++) {
		qsort(t[s], rounds, sizeof(double), cmp_double);
		med[s] = t[s][rounds / 2];
	}
	printf("uprobe floor: %ld calls x %d rounds, interleaved; medians (min-max) per call\n",
	       calls, rounds);
	for (s = 0; s < S_NR; s++) {
		printf("  %-40s %8.3f us (%.3f-%.3f)", state_name[s], med[s], t[s][0],
		       t[s][rounds - 1]);
		if (s != S_NONE)
			printf("  trap: +%.3f us", med[s] - med[S_NONE]);
		printf("\n");
	}
	printf("TRAP_US %.3f\n", med[S_PUSH] - med[S_NONE]);
	ret = 0;
out:
	for (s = 0; s < S_NR; s++)
		free(t[s]);
	close(prog);
	return ret;
}
