// SPDX-License-Identifier: MIT
/*
 * pystack-bpf: sample one process with the BPF Python walker (tests/bpf/pystack_test.bpf.c, which
 * calls py_walk from bpf/pystack.bpf.h) and print what it saw, aggregated. A test tool.
 *
 *   pystack-bpf -p PID [-d SECONDS] [-F HZ] [--depth N] [--no-tss] [--no-map] [--no-page]
 *   pystack-bpf -p PID --compare ROUNDS [-F HZ] [--depth N]
 *
 * --no-tss: no TSS lookup (every thread found through the py_tstates map)
 * --no-map: leave the py_tstates map empty (every thread found through its TSS slot)
 * --no-page: every frame read by itself, not copied from one read of the innermost frame's
 *            page (as the sampler walks: the walk's cost either way, SUMMARY and W lines)
 *
 * --compare: the BPF walker and the userspace one (pyproc__walk_ex) on the same memory,
 * ROUNDS times: the BPF program walks one sample and stops the process (SIGSTOP) before the
 * sampled thread runs any more user code; the tool waits until every thread is stopped,
 * walks the same thread from outside, compares, and lets the process go on (SIGCONT). One
 * line per round:
 *   C  tid  equal  bpf_status  bpf_n  bpf_truncated  user_status  user_n  user_truncated  stack
 * (statuses as enum py_status; the stack as for S lines, from the BPF records), then for a
 * round that differs one line per record index, "D  i  bpf(code lasti meta)  user(...)", and
 * a round where the thread's user pc or sp moved between the walk and the stop (then the two
 * walks did not see the same memory; not compared) is "M  tid". Last:
 *   COMPARE  rounds  equal  moved  page
 * (page: the compared walks' frames the BPF walker copied from its one read of the innermost
 * frame's page, as the sampler walks, rather than read one by one).
 *
 * Output (tab-separated), one line per distinct (thread, result, stack):
 *   S  tid  count  status  truncated  nframes  stack
 * with stack root-first as "func:line;func:line" (co_name; "[unknown]" if unresolved), then
 *   SUMMARY  samples  lost  walk_avg_ns  walk_p99_ns  walk_max_ns
 * and per thread the cost of py_walk by stack depth:
 *   W  tid  samples  avg_frames  walk_avg_ns  walk_max_ns
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <signal.h>
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
#include "tests/bpf/pystack_test.h"
#include "tests/bpf/pystack_test.skel.h"
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
	bool compare;		       /* --compare: keep the one event of the round */
	struct pystack_test_event *ev; /* --compare: that event */
	bool have_ev;
};

/* --compare: the process this tool stopped, to let go on any exit. */
static volatile pid_t stopped_pid;

static void let_go(void)
{
	if (stopped_pid)
		kill(stopped_pid, SIGCONT);
	stopped_pid = 0;
}

static void on_signal(int sig)
{
	let_go();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct state *st = ctx;
	const struct pystack_test_event *ev = data;
	uint64_t *slot;
	int i;

	if (size < sizeof(*ev))
		return 0;
	if (st->compare) {
		memcpy(st->ev, ev, sizeof(*ev)); /* one event per arming */
		st->have_ev = true;
		return 0;
	}
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
		   "[--no-map] [--no-page]\n"
		   "       pystack-bpf -p PID --compare ROUNDS [-F HZ] [--depth N]\n");
}

/* The state letter of thread @tid of @pid ('R', 'S', 'T'...); 0 if unreadable. */
static char thread_state(pid_t pid, pid_t tid)
{
	char path[64], *s, *p, state = 0;
	size_t len;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	s = read_file(path, 4096, &len);
	if (!s)
		return 0;
	p = strrchr(s, ')'); /* the name may hold anything: the state follows its last ')' */
	if (p && p[1] == ' ')
		state = p[2];
	free(s);
	return state;
}

/* Wait until every thread of @pid is stopped (group stop). 0, or -ETIMEDOUT / -ESRCH. */
static int wait_stopped(pid_t pid)
{
	uint64_t deadline = now_mono_ns() + 5000000000ull;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	while (now_mono_ns() < deadline) {
		DIR *d = opendir(path);
		struct dirent *de;
		bool all = true;

		if (!d)
			return -ESRCH;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.' &&
			    thread_state(pid, (pid_t)atoi(de->d_name)) != 'T')
				all = false;
		closedir(d);
		if (all)
			return 0;
		usleep(200);
	}
	return -ETIMEDOUT;
}

/* The user pc and sp of stopped thread @tid (/proc/PID/task/TID/syscall: last two fields). */
static int user_pc_sp(pid_t pid, pid_t tid, uint64_t *pc, uint64_t *sp)
{
	char path[64], *s, *last, *prev;
	size_t len;
	int err = -EINVAL;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	s = read_file(path, 4096, &len);
	if (!s)
		return -errno;
	while (len && s[len - 1] == '\n')
		s[--len] = 0;
	last = strrchr(s, ' ');
	if (last) {
		*last = 0;
		prev = strrchr(s, ' ');
		if (prev) {
			*sp = strtoull(prev + 1, NULL, 0);
			*pc = strtoull(last + 1, NULL, 0);
			err = 0;
		}
	}
	free(s);
	return err;
}

/* The userspace walk of the thread whose pthread_t is @fsbase, as enum py_status. */
static __s32 user_walk(struct pyproc *pp, uint64_t fsbase, unsigned int depth,
		       struct py_frame_rec *out, __u32 *n, bool *truncated)
{
	const struct pythread *th;
	unsigned int partial = 0;
	int r;

	*n = 0;
	*truncated = false;
	if (pyproc__refresh_threads(pp) < 0)
		return PY_READ_ERROR;
	th = pyproc__thread_by_pthread(pp, fsbase);
	if (!th)
		return PY_NO_TSTATE;
	r = pyproc__walk_ex(pp, th->tstate, out, NULL, depth, truncated, &partial);
	if (r >= 0) {
		*n = (__u32)r;
		return PY_OK;
	}
	if (r == -EAGAIN)
		return PY_TORN;
	*n = partial;
	return PY_READ_ERROR;
}

static void print_stack_of(struct pyproc *pp, const struct py_frame_rec *recs, __u32 n)
{
	for (int i = (int)n - 1; i >= 0; i--) {
		struct frame f;

		pyproc__resolve(pp, &recs[i], &f);
		printf("%s%s:%d", i == (int)n - 1 ? "" : ";", f.func, f.line);
	}
}

/*
 * --compare: @rounds rounds of one BPF walk + stop, one userspace walk, SIGCONT. Return 0
 * (whatever the comparisons found: the output says) or -errno.
 */
static int compare(struct state *st, struct pystack_test_bpf *skel, struct ring_buffer *rb,
		   pid_t pid, unsigned int depth, long rounds)
{
	struct py_frame_rec *user = calloc(SAMPLER_MAX_PYDEPTH, sizeof(*user));
	int armed_fd = bpf_map__fd(skel->maps.test_armed);
	long done = 0, equal = 0, moved = 0, page = 0;
	__u32 zero = 0, one = 1;
	int err = 0;

	if (!user)
		return -ENOMEM;
	while (done < rounds) {
		const struct pystack_test_event *ev = st->ev;
		uint64_t deadline = now_mono_ns() + 10000000000ull, pc = 0, sp = 0;
		__u32 un;
		bool ut, same;
		__s32 us;

		st->have_ev = false;
		if (bpf_map_update_elem(armed_fd, &zero, &one, BPF_ANY)) {
			err = -errno;
			break;
		}
		while (!st->have_ev && now_mono_ns() < deadline) {
			int r = ring_buffer__poll(rb, 100);

			if (r < 0 && r != -EINTR) {
				err = r;
				break;
			}
		}
		if (err)
			break;
		if (!st->have_ev) {
			fprintf(stderr, "pystack-bpf: no sample of pid %d in 10 s\n", (int)pid);
			err = -ETIMEDOUT;
			break;
		}
		if (ev->stop_err) {
			/* Not stopped (the signal could not be queued): no round. */
			continue;
		}
		stopped_pid = pid;
		err = wait_stopped(pid);
		if (err) {
			fprintf(stderr, "pystack-bpf: pid %d did not stop: %s\n", (int)pid,
				strerror(-err));
			break;
		}
		done++;
		if (user_pc_sp(pid, (pid_t)ev->tid, &pc, &sp) || pc != ev->user_ip ||
		    sp != ev->user_sp || !ev->user_ip) {
			moved++;
			printf("M\t%u\n", ev->tid);
			let_go();
			continue;
		}
		us = user_walk(st->pp, ev->fsbase, depth, user, &un, &ut);
		same = us == ev->status && un == ev->n &&
		       ut == !!(ev->flags & SAMPLE_F_PY_TRUNCATED) &&
		       !memcmp(user, ev->frames, un * sizeof(*user));
		equal += same;
		page += ev->page_frames;
		printf("C\t%u\t%d\t%d\t%u\t%d\t%d\t%u\t%d\t", ev->tid, same, ev->status, ev->n,
		       !!(ev->flags & SAMPLE_F_PY_TRUNCATED), us, un, ut);
		print_stack_of(st->pp, ev->frames, ev->n);
		printf("\n");
		for (__u32 i = 0; !same && i < (un > ev->n ? un : ev->n); i++) {
			const struct py_frame_rec *b = &ev->frames[i], *u = &user[i];

			printf("D\t%u\t%#llx %d %#x\t%#llx %d %#x\n", i,
			       i < ev->n ? (unsigned long long)b->code : 0ull,
			       i < ev->n ? b->lasti : 0, i < ev->n ? b->meta : 0,
			       i < un ? (unsigned long long)u->code : 0ull, i < un ? u->lasti : 0,
			       i < un ? u->meta : 0);
		}
		let_go();
	}
	let_go();
	printf("COMPARE\t%ld\t%ld\t%ld\t%ld\n", done, equal, moved, page);
	free(user);
	return err;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"depth", required_argument, NULL, 'D'},
					     {"compare", required_argument, NULL, 'C'},
					     {"no-tss", no_argument, NULL, 'T'},
					     {"no-map", no_argument, NULL, 'M'},
					     {"no-page", no_argument, NULL, 'P'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	struct pystack_test_bpf *skel = NULL;
	struct ring_buffer *rb = NULL;
	struct bpf_link **links = NULL;
	struct state st = {0};
	struct py_proc_cfg cfg;
	long pid = 0, hz = 999, depth = SAMPLER_MAX_PYDEPTH, rounds = 0;
	double secs = 3;
	bool no_tss = false, no_map = false, no_page = false;
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
		case 'C':
			if (parse_long(optarg, 1, 1000000, &rounds))
				goto bad;
			break;
		case 'T':
			no_tss = true;
			break;
		case 'M':
			no_map = true;
			break;
		case 'P':
			no_page = true;
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
	skel->rodata->stop_after_walk = rounds > 0;
	skel->rodata->no_page = no_page;
	if (rounds) {
		st.compare = true;
		st.ev = malloc(sizeof(*st.ev));
		if (!st.ev)
			goto cleanup;
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		signal(SIGHUP, on_signal);
	}
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
	if (rounds) {
		err = compare(&st, skel, rb, (pid_t)pid, (unsigned int)depth, rounds);
		if (err)
			fprintf(stderr, "pystack-bpf: --compare: %s\n", strerror(-err));
		ret = err ? 1 : 0;
		goto cleanup;
	}
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
	let_go();
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
	free(st.ev);
	sb_free(&st.sb);
	return ret;
bad:
	usage(stderr);
	return 2;
}
