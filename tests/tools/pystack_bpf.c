// SPDX-License-Identifier: MIT
/*
 * pystack-bpf: sample one process with the BPF Python walker (bpf/pystack_test.bpf.c, which
 * calls py_walk from bpf/pystack.bpf.h) and print what it saw, aggregated. A test tool.
 *
 *   pystack-bpf -p PID [-d SECONDS] [-F HZ] [--depth N] [--no-tss] [--no-map]
 *
 * --no-tss: no TSS lookup (every thread found through the py_tstates map)
 * --no-map: leave the py_tstates map empty (every thread found through its TSS slot)
 *
 * Output (tab-separated), one line per distinct (thread, result, stack):
 *   S  tid  count  status  truncated  nframes  stack
 * with stack root-first as "func:line;func:line" (co_name; "[unknown]" if unresolved), then
 *   SUMMARY  samples  lost  walk_avg_ns  walk_p99_ns  walk_max_ns
 * and per thread the cost of py_walk by stack depth:
 *   W  tid  samples  avg_frames  walk_avg_ns  walk_max_ns
 */
#include <errno.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/bmap.h"
#include "base/log.h"
#include "python/pyproc.h"
#include "bpf/pystack_test.h"
#include "pystack_test.skel.h"
#include "base/util.h"

struct tid_cost {
	uint64_t samples, frames, ns, max_ns;
};

struct state {
	struct pyproc *pp;
	struct bmap *stacks;
	struct bmap *costs; /* tid -> index + 1 into cost[] */
	struct tid_cost cost[4096];
	size_t ncost;
	uint64_t *walk_ns;
	size_t nwalk, capwalk;
	struct strbuf sb;
};

static int on_event(void *ctx, void *data, size_t size)
{
	struct state *st = ctx;
	const struct pystack_test_event *ev = data;
	uint64_t *slot;
	int i;

	if (size < sizeof(*ev))
		return 0;
	if (st->nwalk == st->capwalk) {
		size_t ncap = st->capwalk ? st->capwalk * 2 : 4096;
		uint64_t *tmp = realloc(st->walk_ns, ncap * sizeof(*tmp));

		if (!tmp)
			return -ENOMEM;
		st->walk_ns = tmp;
		st->capwalk = ncap;
	}
	st->walk_ns[st->nwalk++] = ev->walk_ns;
	slot = bmap__upsert(st->costs, &ev->tid, sizeof(ev->tid), 0, NULL);
	if (slot && !*slot && st->ncost < 4096)
		*slot = ++st->ncost;
	if (slot && *slot) {
		struct tid_cost *c = &st->cost[*slot - 1];

		c->samples++;
		c->frames += ev->n;
		c->ns += ev->walk_ns;
		if (ev->walk_ns > c->max_ns)
			c->max_ns = ev->walk_ns;
	}
	sb_reset(&st->sb);
	sb_printf(&st->sb, "%u\t%d\t%d\t%u\t", ev->tid, ev->status,
		  !!(ev->flags & SAMPLE_F_PY_TRUNCATED), ev->n);
	for (i = (int)ev->n - 1; i >= 0; i--) {
		struct frame f;

		pyproc__resolve(st->pp, &ev->frames[i], &f);
		sb_printf(&st->sb, "%s%s:%d", i == (int)ev->n - 1 ? "" : ";", f.func, f.line);
	}
	slot = bmap__upsert(st->stacks, sb_str(&st->sb), st->sb.len, 0, NULL);
	if (!slot)
		return -ENOMEM;
	(*slot)++;
	return 0;
}

static int print_stack(const void *key, size_t len, uint64_t *value, void *ctx)
{
	const char *k = key, *tab = memchr(k, '\t', len);

	/* key: tid \t status \t trunc \t n \t stack -> S tid count status trunc n stack */
	printf("S\t%.*s\t%llu\t%.*s\n", (int)(tab - k), k, (unsigned long long)*value,
	       (int)(len - (tab - k) - 1), tab + 1);
	return 0;
}

static int print_cost(const void *key, size_t len, uint64_t *value, void *ctx)
{
	const struct state *st = ctx;
	const struct tid_cost *c = &st->cost[*value - 1];
	__u32 tid;

	memcpy(&tid, key, sizeof(tid));
	printf("W\t%u\t%llu\t%.1f\t%llu\t%llu\n", tid, (unsigned long long)c->samples,
	       (double)c->frames / c->samples, (unsigned long long)(c->ns / c->samples),
	       (unsigned long long)c->max_ns);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: pystack-bpf -p PID [-d SECONDS] [-F HZ] [--depth N] [--no-tss] "
		   "[--no-map]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"depth", required_argument, NULL, 'D'},
					     {"no-tss", no_argument, NULL, 'T'},
					     {"no-map", no_argument, NULL, 'M'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	struct pystack_test_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct bpf_link **links = NULL;
	struct state st = {0};
	struct py_proc_cfg cfg;
	long pid = 0, hz = 999, depth = SAMPLER_MAX_PYDEPTH;
	double secs = 3;
	bool no_tss = false, no_map = false;
	int c, ncpu, i, err, ret = 1;
	uint64_t deadline, total = 0, lost = 0, sum = 0;
	__u32 tgid, k;

	while ((c = getopt_long(argc, argv, "p:d:F:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_long(optarg, 1, 0x7fffffff, &pid))
				goto bad;
			break;
		case 'd':
			if (parse_seconds(optarg, 0.1, 3600, &secs))
				goto bad;
			break;
		case 'F':
			if (parse_long(optarg, 1, 10000, &hz))
				goto bad;
			break;
		case 'D':
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &depth))
				goto bad;
			break;
		case 'T':
			no_tss = true;
			break;
		case 'M':
			no_map = true;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (!pid || optind != argc)
		goto bad;
	log_setup_libbpf();
	st.stacks = bmap__new();
	st.costs = bmap__new();
	st.pp = pyproc__open((pid_t)pid);
	if (!st.pp || !st.stacks || !st.costs) {
		fprintf(stderr, "pystack-bpf: pid %ld: %s\n", pid, strerror(errno));
		goto cleanup;
	}
	skel = pystack_test_bpf__open();
	if (!skel)
		goto cleanup;
	skel->rodata->target_tgid = (__u32)pid;
	err = pystack_test_bpf__load(skel);
	if (err) {
		fprintf(stderr, "pystack-bpf: loading the BPF program: %s\n", strerror(-err));
		goto cleanup;
	}
	err = pyproc__bpf_cfg(st.pp, (unsigned int)depth, &cfg);
	if (err)
		goto cleanup;
	if (no_tss) {
		cfg.tss_key_addr = 0;
		cfg.pthread_specific = -1;
	}
	tgid = (__u32)pid;
	if (bpf_map_update_elem(bpf_map__fd(skel->maps.test_py_procs), &tgid, &cfg, BPF_ANY))
		goto cleanup;
	if (!no_map) {
		err = pyproc__fill_tstates(st.pp, bpf_map__fd(skel->maps.py_tstates), tgid);
		if (err < 0) {
			fprintf(stderr, "pystack-bpf: filling py_tstates: %s\n", strerror(-err));
			goto cleanup;
		}
	}
	ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0)
		goto cleanup;
	links = calloc(ncpu, sizeof(*links));
	if (!links)
		goto cleanup;
	for (i = 0; i < ncpu; i++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.size = sizeof(attr),
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.freq = 1,
			.sample_freq = (__u64)hz,
		};
		int fd = (int)syscall(__NR_perf_event_open, &attr, -1, i, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0)
			continue; /* offline CPU */
		links[i] = bpf_program__attach_perf_event(skel->progs.pystack_test, fd);
		if (!links[i]) {
			close(fd);
			fprintf(stderr, "pystack-bpf: attaching on CPU %d: %s\n", i,
				strerror(errno));
			goto cleanup;
		}
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.test_events), on_event, &st, NULL);
	if (!rb)
		goto cleanup;
	deadline = now_mono_ns() + (uint64_t)(secs * 1e9);
	while (now_mono_ns() < deadline) {
		err = ring_buffer__poll(rb, 100);
		if (err < 0 && err != -EINTR)
			break;
	}
	for (i = 0; i < ncpu; i++) {
		bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
	ring_buffer__consume(rb);
	for (k = 0; k < 2; k++) {
		__u64 *vals = calloc(ncpu, sizeof(*vals));

		if (vals && !bpf_map_lookup_elem(bpf_map__fd(skel->maps.test_stats), &k, vals))
			for (i = 0; i < ncpu; i++)
				*(k ? &lost : &total) += vals[i];
		free(vals);
	}
	bmap__for_each(st.stacks, print_stack, NULL);
	bmap__for_each(st.costs, print_cost, &st);
	qsort(st.walk_ns, st.nwalk, sizeof(*st.walk_ns), cmp_u64);
	for (size_t j = 0; j < st.nwalk; j++)
		sum += st.walk_ns[j];
	printf("SUMMARY\t%llu\t%llu\t%llu\t%llu\t%llu\n", (unsigned long long)total,
	       (unsigned long long)lost, (unsigned long long)(st.nwalk ? sum / st.nwalk : 0),
	       (unsigned long long)(st.nwalk ? st.walk_ns[st.nwalk * 99 / 100] : 0),
	       (unsigned long long)(st.nwalk ? st.walk_ns[st.nwalk - 1] : 0));
	ret = 0;
cleanup:
	if (links)
		for (i = 0; i < ncpu; i++)
			bpf_link__destroy(links[i]);
	free(links);
	ring_buffer__free(rb);
	pystack_test_bpf__destroy(skel);
	pyproc__free(st.pp);
	bmap__free(st.stacks);
	bmap__free(st.costs);
	free(st.walk_ns);
	sb_free(&st.sb);
	return ret;
bad:
	usage(stderr);
	return 2;
}
