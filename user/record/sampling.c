// SPDX-License-Identifier: MIT
/* Loading and attaching the sampler BPF program (open -> configure -> load -> attach). */
#include <errno.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "base/log.h"
#include "sampler.skel.h"
#include "record/sampling.h"
#include "base/util.h"

struct sampling {
	struct sampler_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link **links; /* one per perf event */
	int *pfds;
	int nr_cpus; /* possible CPUs */
	int (*cb)(void *ctx, void *data, size_t len);
	void *cb_ctx;
	int cb_err;
};

/*
 * Parse a CPU list file such as /sys/devices/system/cpu/online ("0-3,6") into a malloc'd
 * array of flags, *@n long. Return 0 or -errno.
 */
static int read_cpu_list(const char *path, bool **out, int *n)
{
	char *text = read_file(path, 65536, NULL), *p, *end;
	bool *mask = NULL, *tmp;
	long a, b, i;
	int err = 0, len = 0;

	if (!text)
		return -errno;
	for (p = text; *p && *p != '\n';) {
		a = strtol(p, &end, 10);
		if (end == p || a < 0) {
			err = -EINVAL;
			goto cleanup;
		}
		b = a;
		p = end;
		if (*p == '-') {
			b = strtol(p + 1, &end, 10);
			if (end == p + 1 || b < a) {
				err = -EINVAL;
				goto cleanup;
			}
			p = end;
		}
		if (b >= SAMPLER_MAX_CPUS)
			b = SAMPLER_MAX_CPUS - 1;
		if (b >= len) {
			tmp = realloc(mask, (b + 1) * sizeof(*mask));
			if (!tmp) {
				err = -ENOMEM;
				goto cleanup;
			}
			mask = tmp;
			memset(mask + len, 0, (b + 1 - len) * sizeof(*mask));
			len = b + 1;
		}
		for (i = a; i <= b; i++)
			mask[i] = true;
		if (*p == ',')
			p++;
	}
cleanup:
	free(text);
	if (err) {
		free(mask);
		return err;
	}
	*out = mask;
	*n = len;
	return 0;
}

static int perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu)
{
	return syscall(__NR_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Explain a failure to load BPF in terms the user can act on. */
static void explain_load_error(int err)
{
	if ((err == -EPERM || err == -EACCES) && geteuid() == 0) {
		pr_warn("the kernel's BPF verifier rejected the sampler program (%s); this kernel "
			"may be too old or configured without what it needs (run with -v to see "
			"the "
			"verifier's log)",
			strerror(-err));
	} else if (err == -EPERM || err == -EACCES) {
		pr_warn("the kernel refused to load the BPF sampler: %s.", strerror(-err));
		pr_warn("record needs root, or the capabilities CAP_BPF and CAP_PERFMON "
			"(sudo probing record ...)");
	} else {
		pr_warn("cannot load the BPF sampler: %s (run with -vv for the verifier's log)",
			strerror(-err));
	}
}

static int ring_cb(void *ctx, void *data, size_t len)
{
	struct sampling *s = ctx;
	int ret = s->cb(s->cb_ctx, data, len);

	if (ret < 0) {
		s->cb_err = ret;
		return ret;
	}
	return 0;
}

int sampling__open(const struct sampling_opts *opts, struct sampling **out)
{
	struct perf_event_attr attr;
	struct sampling *s;
	bool *online = NULL;
	int err = 0, i, n_online = 0, attached = 0;
	size_t rb_bytes;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->nr_cpus = libbpf_num_possible_cpus();
	if (s->nr_cpus <= 0) {
		err = s->nr_cpus ? s->nr_cpus : -EINVAL;
		pr_warn("cannot count the CPUs: %s", strerror(-err));
		goto cleanup;
	}
	if (s->nr_cpus > SAMPLER_MAX_CPUS)
		s->nr_cpus = SAMPLER_MAX_CPUS;

	s->skel = sampler_bpf__open();
	if (!s->skel) {
		err = -errno;
		pr_warn("cannot open the BPF sampler: %s", strerror(errno));
		goto cleanup;
	}
	s->skel->rodata->stack_size = opts->stack_size & ~7u;
	s->skel->rodata->want_kernel = opts->kernel;
	s->skel->rodata->want_python = opts->python;
	s->skel->rodata->follow_children = opts->children;
	s->skel->rodata->pidns_inum = opts->pidns_inum;
	bpf_map__set_max_entries(s->skel->maps.scratch, s->nr_cpus);
	rb_bytes = opts->ringbuf_bytes ? opts->ringbuf_bytes : 32u << 20;
	bpf_map__set_max_entries(s->skel->maps.events, rb_bytes);

	err = sampler_bpf__load(s->skel);
	if (err) {
		explain_load_error(err);
		goto cleanup;
	}
	err = sampler_bpf__attach(s->skel); /* the tracepoints */
	if (err) {
		pr_warn("cannot attach the process tracepoints: %s", strerror(-err));
		goto cleanup;
	}

	err = read_cpu_list("/sys/devices/system/cpu/online", &online, &n_online);
	if (err) {
		pr_warn("cannot read the online CPUs: %s", strerror(-err));
		goto cleanup;
	}
	s->links = calloc(s->nr_cpus, sizeof(*s->links));
	s->pfds = malloc(s->nr_cpus * sizeof(*s->pfds));
	if (!s->links || !s->pfds) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < s->nr_cpus; i++)
		s->pfds[i] = -1;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	/* cpu-clock counts nanoseconds: a fixed period gives exactly F samples per second. */
	attr.sample_period = 1000000000ULL / opts->freq;
	for (i = 0; i < s->nr_cpus && i < n_online; i++) {
		if (!online[i])
			continue;
		s->pfds[i] = perf_event_open(&attr, -1, i);
		if (s->pfds[i] < 0) {
			err = -errno;
			if (err == -ENODEV) /* CPU went offline meanwhile */
				continue;
			if (err == -EACCES || err == -EPERM) {
				pr_warn("cannot open a perf event on CPU %d: %s.", i,
					strerror(-err));
				pr_warn("record needs root, or the capability CAP_PERFMON "
					"(see /proc/sys/kernel/perf_event_paranoid)");
			} else {
				pr_warn("cannot open a cpu-clock perf event on CPU %d: %s", i,
					strerror(-err));
			}
			goto cleanup;
		}
		s->links[i] = bpf_program__attach_perf_event(s->skel->progs.on_sample, s->pfds[i]);
		if (!s->links[i]) {
			err = -errno;
			pr_warn("cannot attach the sampler to CPU %d: %s", i, strerror(-err));
			goto cleanup;
		}
		attached++;
	}
	if (!attached) {
		err = -ENODEV;
		pr_warn("no online CPU to sample");
		goto cleanup;
	}

	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.events), ring_cb, s, NULL);
	if (!s->rb) {
		err = -errno;
		pr_warn("cannot set up the ring buffer: %s", strerror(-err));
		goto cleanup;
	}
	free(online);
	*out = s;
	return 0;
cleanup:
	free(online);
	sampling__free(s);
	return err;
}

void sampling__free(struct sampling *s)
{
	int i;

	if (!s)
		return;
	ring_buffer__free(s->rb);
	for (i = 0; s->links && i < s->nr_cpus; i++)
		bpf_link__destroy(s->links[i]);
	for (i = 0; s->pfds && i < s->nr_cpus; i++)
		if (s->pfds[i] >= 0)
			close(s->pfds[i]);
	free(s->links);
	free(s->pfds);
	sampler_bpf__destroy(s->skel);
	free(s);
}

int sampling__add_target(struct sampling *s, pid_t pid)
{
	__u32 key = pid, one = 1;

	if (bpf_map__update_elem(s->skel->maps.targets, &key, sizeof(key), &one, sizeof(one),
				 BPF_ANY))
		return -errno;
	return 0;
}

int sampling__remove_target(struct sampling *s, pid_t pid)
{
	__u32 key = pid;

	if (bpf_map__delete_elem(s->skel->maps.targets, &key, sizeof(key), 0) && errno != ENOENT)
		return -errno;
	bpf_map__delete_elem(s->skel->maps.py_procs, &key, sizeof(key), 0);
	return 0;
}

int sampling__set_python(struct sampling *s, pid_t pid, const struct py_proc_cfg *cfg)
{
	__u32 key = pid;

	if (!cfg) {
		if (bpf_map__delete_elem(s->skel->maps.py_procs, &key, sizeof(key), 0) &&
		    errno != ENOENT)
			return -errno;
		return 0;
	}
	if (bpf_map__update_elem(s->skel->maps.py_procs, &key, sizeof(key), cfg, sizeof(*cfg),
				 BPF_ANY))
		return -errno;
	return 0;
}

int sampling__map_fd(struct sampling *s, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(s->skel->obj, name);

	return m ? bpf_map__fd(m) : -ENOENT;
}

int sampling__consume(struct sampling *s, int (*cb)(void *ctx, void *data, size_t len), void *ctx)
{
	int n;

	s->cb = cb;
	s->cb_ctx = ctx;
	s->cb_err = 0;
	n = ring_buffer__consume(s->rb);
	if (s->cb_err)
		return s->cb_err;
	return n;
}

int sampling__wait(struct sampling *s, int timeout_ms)
{
	struct pollfd pfd = {.fd = ring_buffer__epoll_fd(s->rb), .events = POLLIN};
	int r = poll(&pfd, 1, timeout_ms);

	return r < 0 ? -errno : r;
}

void sampling__stats(struct sampling *s, uint64_t *samples, uint64_t *lost)
{
	__u64 vals[SAMPLER_MAX_CPUS];
	__u32 key;
	int i;

	*samples = *lost = 0;
	for (key = 0; key < 2; key++) {
		uint64_t sum = 0;

		if (bpf_map__lookup_elem(s->skel->maps.stats, &key, sizeof(key), vals,
					 sizeof(__u64) * s->nr_cpus, 0))
			continue;
		for (i = 0; i < s->nr_cpus; i++)
			sum += vals[i];
		if (key == STAT_SAMPLES)
			*samples = sum;
		else
			*lost = sum;
	}
}

uint64_t sampling__lost_events(struct sampling *s)
{
	__u64 vals[SAMPLER_MAX_CPUS];
	__u32 key = STAT_LOST_EVENTS;
	uint64_t sum = 0;
	int i;

	if (bpf_map__lookup_elem(s->skel->maps.stats, &key, sizeof(key), vals,
				 sizeof(__u64) * s->nr_cpus, 0))
		return 0;
	for (i = 0; i < s->nr_cpus; i++)
		sum += vals[i];
	return sum;
}

int sampling__prog_stats(struct sampling *s, uint64_t *run_ns, uint64_t *runs)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	int err;

	*run_ns = *runs = 0;
	err = bpf_obj_get_info_by_fd(bpf_program__fd(s->skel->progs.on_sample), &info, &len);
	if (err)
		return err;
	*run_ns = info.run_time_ns;
	*runs = info.run_cnt;
	return 0;
}
