// SPDX-License-Identifier: MIT
/* Loading and attaching the sampler BPF program (open -> configure -> load -> attach). */
#include <errno.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "base/log.h"
#include "python/pyproc.h"
#include "offcpu_fetch.skel.h"
#include "sampler.skel.h"
#include "record/sampling.h"
#include "base/util.h"

struct sampling {
	struct sampling_opts opts;
	struct sampler_bpf *skel;
	struct offcpu_fetch_bpf *fetch; /* off_cpu: the stack fetcher */
	bool fetch_iter;		/* it is the task iterator (off_fetch_iter) */
	struct ring_buffer *rb;
	struct bpf_link **links; /* one per perf event */
	int *pfds;
	struct bpf_link **sweep_links; /* off_cpu: the sweep's perf events */
	int *sweep_pfds;
	int nr_cpus; /* possible CPUs */
	bool off_cpu;
	bool resume; /* blocks' stacks taken as their threads resume (use_resume) */
	/* The fetcher runs on the reader thread and, at the end, on the caller's: one run at a
	 * time, and the fields below, under the lock. */
	pthread_mutex_t fetch_lock;
	uint64_t wants_seen; /* sampler's off_wants at the last look (offcpu_pending) */
	uint64_t fetch_last; /* when the fetcher last ran (monotonic ns) */
	uint64_t fetch_runs;
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

/* Is @name a member of struct @type in @btf? */
static bool btf_has_member(const struct btf *btf, const char *type, const char *name)
{
	const struct btf_member *m;
	const struct btf_type *t;
	__s32 id = btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT);
	int i;

	if (id < 0 || !(t = btf__type_by_id(btf, id)))
		return false;
	m = btf_members(t);
	for (i = 0; i < btf_vlen(t); i++, m++)
		if (!strcmp(btf__name_by_offset(btf, m->name_off), name))
			return true;
	return false;
}

/*
 * Does the kernel have what off-CPU recording needs? Say what it lacks, by name, and return
 * -EOPNOTSUPP; 0 if it has everything. *@task_work: whether it also lets BPF schedule a task
 * work (the kfunc bpf_task_work_schedule_resume_impl, Linux 6.18: offcpu_resume_usable).
 */
static int offcpu_kernel_check(bool *task_work)
{
	static const struct {
		const char *name;
		int kind;
		const char *what;
	} needs[] = {
		{"btf_trace_sched_waking", BTF_KIND_TYPEDEF, "the tracepoint sched_waking"},
		{"bpf_task_from_pid", BTF_KIND_FUNC,
		 "the BPF kfunc bpf_task_from_pid (Linux 6.2 or later)"},
		{"bpf_rdonly_cast", BTF_KIND_FUNC,
		 "the BPF kfunc bpf_rdonly_cast (Linux 6.2 or later)"},
		{"bpf_iter__task", BTF_KIND_STRUCT, "BPF task iterators (Linux 5.8 or later)"},
		{"btf_bpf_copy_from_user_task", BTF_KIND_TYPEDEF,
		 "the BPF helper bpf_copy_from_user_task (Linux 5.18 or later)"},
	};
	static const char *const fields[] = {"on_cpu", "__state", "nvcsw", "nivcsw"};
	struct btf *btf = btf__load_vmlinux_btf();
	size_t i;
	int err = 0;

	if (!btf) {
		pr_warn("--off-cpu needs the kernel's BTF type information "
			"(/sys/kernel/btf/vmlinux, "
			"CONFIG_DEBUG_INFO_BTF), which this kernel does not provide");
		return -EOPNOTSUPP;
	}
	for (i = 0; i < ARRAY_SIZE(needs) && !err; i++) {
		if (btf__find_by_name_kind(btf, needs[i].name, needs[i].kind) < 0) {
			pr_warn("--off-cpu needs %s, which this kernel does not have",
				needs[i].what);
			err = -EOPNOTSUPP;
		}
	}
	for (i = 0; i < ARRAY_SIZE(fields) && !err; i++) {
		if (!btf_has_member(btf, "task_struct", fields[i])) {
			pr_warn("--off-cpu needs the field task_struct.%s, which this kernel "
				"does not have",
				fields[i]);
			err = -EOPNOTSUPP;
		}
	}
	*task_work = btf__find_by_name_kind(btf, "bpf_task_work_schedule_resume_impl",
					    BTF_KIND_FUNC) > 0;
	if (!err && libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) != 1) {
		pr_warn("--off-cpu needs BPF task storage maps (Linux 5.11 or later), which this "
			"kernel does not allow");
		err = -EOPNOTSUPP;
	}
	btf__free(btf);
	if (err)
		pr_warn("record without --off-cpu (on-CPU time only), or on a newer kernel");
	return err;
}

/*
 * Whether the sweep may ask a blocked thread for its block's stack as it resumes, on a kernel
 * with BPF task works (@task_work, offcpu_kernel_check). Not with @opts->kernel: the block's
 * kernel stack is gone by then. PROBING_OFFCPU_NO_RESUME=1 and PROBING_OFFCPU_FETCH_ITER=1
 * (the fetcher's paths, tested alone) say no.
 */
static bool offcpu_resume_usable(const struct sampling_opts *opts, bool task_work)
{
	return task_work && !opts->kernel && !getenv("PROBING_OFFCPU_NO_RESUME") &&
	       !getenv("PROBING_OFFCPU_FETCH_ITER");
}

/*
 * Open and load the off-CPU stack fetcher (offcpu_fetch.bpf.c) on the maps of the loaded
 * sampler, with only its program @iter (off_fetch_iter) or only off_fetch. 0 or -errno; an
 * error other than the kernel's refusal is said.
 */
static int offcpu_fetch_load(struct sampling *s, const struct sampling_opts *opts, bool iter)
{
	int err;

	s->fetch = offcpu_fetch_bpf__open();
	if (!s->fetch) {
		err = -errno;
		pr_warn("cannot open the off-CPU stack fetcher: %s", strerror(-err));
		return err;
	}
	s->fetch->rodata->stack_size = opts->stack_size & ~7u;
	s->fetch->rodata->want_kernel = opts->kernel;
	s->fetch->rodata->want_python = opts->python;
	bpf_program__set_autoload(s->fetch->progs.off_fetch, !iter);
	bpf_program__set_autoload(s->fetch->progs.off_fetch_iter, iter);
	err = sampling__share_maps(s, s->fetch->obj);
	if (err) {
		pr_warn("cannot share the sampler's maps with the off-CPU stack fetcher: %s",
			strerror(-err));
		return err;
	}
	return offcpu_fetch_bpf__load(s->fetch);
}

/*
 * Load the off-CPU stack fetcher: the syscall program over the sweep's queue, or where the
 * kernel refuses it (a syscall program calling kfuncs) the task iterator over each target's
 * threads (s->fetch_iter; the sweep told to leave the queue alone). 0 or -errno, said.
 */
static int offcpu_fetch_open(struct sampling *s, const struct sampling_opts *opts)
{
	int err;

	/* The first refusal is expected on older kernels: its verifier log only at -vv.
	 * PROBING_OFFCPU_FETCH_ITER=1 takes the iterator at once (the tests of that path). */
	if (getenv("PROBING_OFFCPU_FETCH_ITER")) {
		err = -EOPNOTSUPP;
	} else {
		log_libbpf_quiet(log_verbosity < 2);
		err = offcpu_fetch_load(s, opts, false);
		log_libbpf_quiet(false);
	}
	if (err) {
		pr_info("off-CPU stacks of blocked threads fetched by a task iterator over each "
			"target's threads (the kernel refused the fetcher's syscall program: %s)",
			strerror(-err));
		offcpu_fetch_bpf__destroy(s->fetch);
		s->fetch = NULL;
		err = offcpu_fetch_load(s, opts, true);
		if (!err) {
			s->fetch_iter = true;
			s->skel->data->off_queue_on = 0;
		}
	}
	/* Where threads give their blocks' stacks as they resume, the fetcher takes only the
	 * blocks that last (the task iterator takes every block it finds wanted). */
	if (!err)
		s->fetch->bss->fetch_after_ns =
			s->resume && !s->fetch_iter ? OFFCPU_FETCH_AFTER_NS : 0;
	if (err) {
		pr_warn("the kernel refused the off-CPU stack fetcher, a sleepable BPF program "
			"(%s; Linux 6.2 or later; -vv shows the verifier's log)",
			strerror(-err));
		pr_warn("record without --off-cpu (on-CPU time only)");
	}
	return err;
}

/*
 * Open a cpu-clock perf event of @period_ns on every online CPU and attach @prog to each:
 * *@pfds and *@links, nr_cpus long. 0 or -errno, said.
 */
static int attach_cpu_clock(struct sampling *s, struct bpf_program *prog, __u64 period_ns,
			    int **pfds, struct bpf_link ***links)
{
	struct perf_event_attr attr;
	bool *online = NULL;
	int err, i, n_online = 0, attached = 0;

	err = read_cpu_list("/sys/devices/system/cpu/online", &online, &n_online);
	if (err) {
		pr_warn("cannot read the online CPUs: %s", strerror(-err));
		return err;
	}
	*links = calloc(s->nr_cpus, sizeof(**links));
	*pfds = malloc(s->nr_cpus * sizeof(**pfds));
	if (!*links || !*pfds) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < s->nr_cpus; i++)
		(*pfds)[i] = -1;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	/* cpu-clock counts nanoseconds: a fixed period gives exactly F samples per second. */
	attr.sample_period = period_ns;
	for (i = 0; i < s->nr_cpus && i < n_online; i++) {
		if (!online[i])
			continue;
		(*pfds)[i] = perf_event_open(&attr, -1, i);
		if ((*pfds)[i] < 0) {
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
		(*links)[i] = bpf_program__attach_perf_event(prog, (*pfds)[i]);
		if (!(*links)[i]) {
			err = -errno;
			pr_warn("cannot attach the sampler to CPU %d: %s", i, strerror(-err));
			goto cleanup;
		}
		attached++;
	}
	err = 0;
	if (!attached) {
		err = -ENODEV;
		pr_warn("no online CPU to sample");
	}
cleanup:
	free(online);
	return err;
}

/* Detach and close what attach_cpu_clock opened. */
static void detach_cpu_clock(struct sampling *s, int *pfds, struct bpf_link **links)
{
	int i;

	for (i = 0; links && i < s->nr_cpus; i++)
		bpf_link__destroy(links[i]);
	for (i = 0; pfds && i < s->nr_cpus; i++)
		if (pfds[i] >= 0)
			close(pfds[i]);
	free(links);
	free(pfds);
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
	struct sampling *s;
	__u64 period_ns = hz_period_ns(opts->freq);
	bool task_work = false;
	int err = 0;
	size_t rb_bytes;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->fetch_lock, NULL);
	s->opts = *opts;
	s->off_cpu = opts->off_cpu;
	s->nr_cpus = libbpf_num_possible_cpus();
	if (s->nr_cpus <= 0) {
		err = s->nr_cpus ? s->nr_cpus : -EINVAL;
		pr_warn("cannot count the CPUs: %s", strerror(-err));
		goto cleanup;
	}
	if (s->nr_cpus > SAMPLER_MAX_CPUS)
		s->nr_cpus = SAMPLER_MAX_CPUS;
	if (s->off_cpu) {
		err = offcpu_kernel_check(&task_work);
		if (err)
			goto cleanup;
		s->resume = offcpu_resume_usable(opts, task_work);
	}

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
	s->skel->rodata->want_offcpu = opts->off_cpu;
	s->skel->rodata->period_ns = period_ns;
	s->skel->rodata->use_resume = s->resume;
	/* Off-CPU programs are loaded only when asked for: on-CPU recording is left as it was,
	 * and works on kernels without what they need. */
	bpf_program__set_autoload(s->skel->progs.on_sweep, opts->off_cpu);
	/* Where the thread gives its block's stack itself as it resumes (the task work), the
	 * wake-ups are not watched at all: on_waking would run for every wake-up on the machine
	 * (13,000 a second beside an 8-rank job) to take a few hundred stacks a second early. */
	bpf_program__set_autoload(s->skel->progs.on_waking, opts->off_cpu && !s->resume);
	bpf_program__set_autoload(s->skel->progs.off_seed, opts->off_cpu);
	bpf_program__set_autoload(s->skel->progs.off_flush, opts->off_cpu);
	bpf_program__set_autoattach(s->skel->progs.off_seed, false); /* run on demand */
	bpf_map__set_max_entries(s->skel->maps.scratch, s->nr_cpus);
	bpf_map__set_max_entries(s->skel->maps.resume_scratch, s->resume ? s->nr_cpus : 1);
	rb_bytes = opts->ringbuf_bytes ? opts->ringbuf_bytes : 32u << 20;
	bpf_map__set_max_entries(s->skel->maps.events, rb_bytes);

	err = sampler_bpf__load(s->skel);
	if (err) {
		explain_load_error(err);
		goto cleanup;
	}
	if (s->off_cpu) {
		err = offcpu_fetch_open(s, opts);
		if (err)
			goto cleanup;
		if (s->resume)
			pr_info("off-CPU stacks of blocks woken from outside their process taken "
				"as their threads resume (a BPF task work); blocks that last over "
				"%.0f s fetched while they last",
				OFFCPU_FETCH_AFTER_NS / 1e9);
	}
	err = sampler_bpf__attach(s->skel); /* the tracepoints */
	if (err) {
		pr_warn("cannot attach the %stracepoints: %s",
			s->off_cpu ? "process and scheduler (sched_waking) " : "process ",
			strerror(-err));
		goto cleanup;
	}
	err = attach_cpu_clock(s, s->skel->progs.on_sample, period_ns, &s->pfds, &s->links);
	if (!err && s->off_cpu)
		err = attach_cpu_clock(s, s->skel->progs.on_sweep, period_ns, &s->sweep_pfds,
				       &s->sweep_links);
	if (err)
		goto cleanup;

	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.events), ring_cb, s, NULL);
	if (!s->rb) {
		err = -errno;
		pr_warn("cannot set up the ring buffer: %s", strerror(-err));
		goto cleanup;
	}
	*out = s;
	return 0;
cleanup:
	sampling__free(s);
	return err;
}

void sampling__free(struct sampling *s)
{
	if (!s)
		return;
	ring_buffer__free(s->rb);
	detach_cpu_clock(s, s->sweep_pfds, s->sweep_links);
	detach_cpu_clock(s, s->pfds, s->links);
	offcpu_fetch_bpf__destroy(s->fetch);
	sampler_bpf__destroy(s->skel);
	pthread_mutex_destroy(&s->fetch_lock);
	free(s);
}

/*
 * Run the iterator program @prog over the threads of process @pid (in probing's PID
 * namespace): attach it with @pid as the filter, read the iterator to its end. 0 or -errno.
 */
static int run_task_iter(struct bpf_program *prog, pid_t pid)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;
	struct bpf_link *link;
	char buf[64];
	ssize_t n;
	int fd, err = 0;

	memset(&linfo, 0, sizeof(linfo));
	linfo.task.pid = pid;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	link = bpf_program__attach_iter(prog, &opts);
	if (!link)
		return -errno;
	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0) {
		err = -errno;
		goto cleanup;
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		;
	if (n < 0)
		err = -errno;
	close(fd);
cleanup:
	bpf_link__destroy(link);
	return err;
}

/* The fetcher runs at most this often while what it left in the queue is not due. */
#define FETCH_GAP_NS 20000000ULL

/* Locked: is there work for the fetcher (sampling.h, sampling__offcpu_fetch_due)? */
static bool offcpu_pending(struct sampling *s)
{
	uint64_t wants, next, now;
	bool more;

	wants = __atomic_load_n(&s->skel->bss->off_wants, __ATOMIC_RELAXED);
	more = wants != s->wants_seen;
	s->wants_seen = wants;
	next = __atomic_load_n(&s->fetch->bss->fetch_next_ns, __ATOMIC_RELAXED);
	if (!next)
		return more; /* the queue was left empty: new blocks are to be looked at */
	/* Blocks wait in the queue until they are due: look again then, not at every new one. */
	now = now_mono_ns();
	return now >= next && now - s->fetch_last >= FETCH_GAP_NS;
}

/*
 * Locked: run the fetcher: its syscall program once over the queue of every target, or the
 * task iterator once per target (the sampler's targets map). 0 or the first -errno.
 */
static int offcpu_fetch(struct sampling *s)
{
	LIBBPF_OPTS(bpf_test_run_opts, run);
	struct bpf_map *targets = s->skel->maps.targets;
	__u32 key, next, *prev = NULL, n, max = bpf_map__max_entries(targets);
	int err = 0, e;

	s->fetch_runs++;
	s->fetch_last = now_mono_ns();
	if (!s->fetch_iter)
		return bpf_prog_test_run_opts(bpf_program__fd(s->fetch->progs.off_fetch), &run)
			       ? -errno
			       : 0;
	/* Bounded: a key deleted meanwhile restarts the walk at the first. */
	for (n = 0; n < max && !bpf_map__get_next_key(targets, prev, &next, sizeof(next)); n++) {
		key = next;
		prev = &key;
		e = run_task_iter(s->fetch->progs.off_fetch_iter, key);
		if (e && e != -ESRCH && e != -ENOENT) {
			pr_debug("pid %u: cannot fetch stacks of blocked threads: %s", key,
				 strerror(-e));
			err = err ?: e;
		}
	}
	return err;
}

int sampling__offcpu_fetch_due(struct sampling *s)
{
	int err = 0;

	if (!s->off_cpu)
		return 0;
	pthread_mutex_lock(&s->fetch_lock);
	if (offcpu_pending(s))
		err = offcpu_fetch(s);
	pthread_mutex_unlock(&s->fetch_lock);
	return err;
}

int sampling__offcpu_stop(struct sampling *s)
{
	int err;

	if (!s->off_cpu)
		return 0;
	__atomic_store_n(&s->skel->bss->off_stop, 1, __ATOMIC_RELEASE);
	/* A sweep that started before the flag was set ends within microseconds. */
	usleep(2000);
	/* What waits in the fetcher's queue is due now: blocks still going on at the end. */
	pthread_mutex_lock(&s->fetch_lock);
	s->fetch->bss->fetch_after_ns = 0;
	__atomic_store_n(&s->fetch->bss->fetch_next_ns, 0, __ATOMIC_RELAXED);
	err = offcpu_fetch(s);
	pthread_mutex_unlock(&s->fetch_lock);
	return err;
}

int sampling__offcpu_flush(struct sampling *s)
{
	LIBBPF_OPTS(bpf_test_run_opts, run);

	if (!s->off_cpu)
		return 0;
	return bpf_prog_test_run_opts(bpf_program__fd(s->skel->progs.off_flush), &run) ? -errno : 0;
}

int sampling__add_target(struct sampling *s, pid_t pid)
{
	__u32 key = pid, one = 1;
	int err;

	if (bpf_map__update_elem(s->skel->maps.targets, &key, sizeof(key), &one, sizeof(one),
				 BPF_ANY))
		return -errno;
	/* Its threads, for the sweep: after it became a target, so that a thread it starts
	 * meanwhile registers itself (on_fork) or is found here. */
	if (s->off_cpu) {
		err = run_task_iter(s->skel->progs.off_seed, pid);
		if (err) {
			pr_warn("pid %d: cannot list its threads for off-CPU recording: %s", pid,
				strerror(-err));
			return err;
		}
	}
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

int sampling__block_site_put(struct sampling *s, const struct site_key *k,
			     const struct site_checks *site)
{
	if (bpf_map__update_elem(s->skel->maps.block_sites, k, sizeof(*k), site, sizeof(*site),
				 BPF_ANY))
		return -errno;
	return 0;
}

void sampling__block_site_drop(struct sampling *s, const struct site_key *k)
{
	bpf_map__delete_elem(s->skel->maps.block_sites, k, sizeof(*k), 0);
}

void sampling__block_sites_forget(struct sampling *s, pid_t pid)
{
	site_map__forget(s->skel->maps.block_sites, pid);
}

void site_map__forget(struct bpf_map *m, pid_t pid)
{
	struct site_key last, next;
	bool have_last = false;

	while (!bpf_map__get_next_key(m, have_last ? &last : NULL, &next, sizeof(next))) {
		if ((!pid || next.pid == (__u32)pid) &&
		    !bpf_map__delete_elem(m, &next, sizeof(next), 0))
			continue; /* the key after the last one kept is the next one */
		last = next;
		have_last = true;
	}
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

int sampling__use_python(struct sampling *s, pid_t pid, struct pyproc *pp,
			 const struct py_proc_cfg *cfg)
{
	int err = sampling__set_python(s, pid, cfg);

	if (!err)
		pyproc__fill_tstates(pp, bpf_map__fd(s->skel->maps.py_tstates), pid);
	return err;
}

/* File descriptor of the sampler's map called @name, or -ENOENT. */
static int own_map_fd(struct sampling *s, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(s->skel->obj, name);

	return m ? bpf_map__fd(m) : -ENOENT;
}

/* The sampler's maps other programs use (bpf/shared_maps.bpf.h, py_tstates). */
static const char *const shared_maps[] = {"targets",   "py_procs", "events",	"off_threads",
					  "off_slots", "off_want", "off_queue", "py_tstates"};

int sampling__share_maps(struct sampling *s, struct bpf_object *obj)
{
	struct bpf_map *m;
	size_t i;
	int err;

	bpf_object__for_each_map(m, obj)
	{
		for (i = 0; i < ARRAY_SIZE(shared_maps); i++)
			if (!strcmp(bpf_map__name(m), shared_maps[i]))
				break;
		if (i == ARRAY_SIZE(shared_maps))
			continue;
		err = bpf_map__reuse_fd(m, own_map_fd(s, shared_maps[i]));
		if (err)
			return err;
	}
	return 0;
}

const struct sampling_opts *sampling__opts(const struct sampling *s)
{
	return &s->opts;
}

int sampling__tstates_fd(struct sampling *s)
{
	return bpf_map__fd(s->skel->maps.py_tstates);
}

void sampling__thread_maps(struct sampling *s, int *births_fd, int *children_fd,
			   const uint64_t **changes, int *wake_rb_fd)
{
	*wake_rb_fd = bpf_map__fd(s->skel->maps.births_wake);
	*births_fd = bpf_map__fd(s->skel->maps.thread_births);
	*children_fd = bpf_map__fd(s->skel->maps.new_children);
	*changes = (const uint64_t *)&s->skel->bss->births_changes;
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

int sampling__wait(struct sampling *s, int also_fd, int timeout_ms)
{
	struct pollfd pfd[2] = {{.fd = ring_buffer__epoll_fd(s->rb), .events = POLLIN},
				{.fd = also_fd, .events = POLLIN}};
	int r = poll(pfd, also_fd >= 0 ? 2 : 1, timeout_ms);

	return r < 0 ? -errno : r;
}

/* The sum over the CPUs of counter @key of the map stats. */
static uint64_t stat_sum(struct sampling *s, __u32 key)
{
	__u64 vals[SAMPLER_MAX_CPUS];
	uint64_t sum = 0;
	int i;

	if (bpf_map__lookup_elem(s->skel->maps.stats, &key, sizeof(key), vals,
				 sizeof(__u64) * s->nr_cpus, 0))
		return 0;
	for (i = 0; i < s->nr_cpus; i++)
		sum += vals[i];
	return sum;
}

void sampling__offcpu_stats(struct sampling *s, struct sampling_offcpu_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s->off_cpu)
		return;
	out->sweeps = stat_sum(s, STAT_OFF_SWEEPS);
	out->looks = stat_sum(s, STAT_OFF_LOOKS);
	out->quiet = stat_sum(s, STAT_OFF_QUIET);
	out->wanted = stat_sum(s, STAT_OFF_WANTED);
	out->lost = stat_sum(s, STAT_OFF_LOST) + s->fetch->bss->fetch_lost;
	out->no_room = stat_sum(s, STAT_OFF_NO_ROOM);
	out->resume_err = stat_sum(s, STAT_OFF_RESUME_ERR);
	out->resume_miss = stat_sum(s, STAT_OFF_RESUME_MISS);
	out->resume_runs = s->skel->bss->resume_runs;
	out->resume_ns = s->skel->bss->resume_ns;
	out->resume_page_frames = s->skel->bss->resume_page_frames;
	pthread_mutex_lock(&s->fetch_lock); /* the fetcher's counters, not in a run */
	out->fetched = s->fetch->bss->fetch_sent;
	out->torn = s->fetch->bss->fetch_torn;
	out->fetch_runs = s->fetch_runs;
	out->code_cached = s->fetch->bss->py_code_hits;
	out->code_read = s->fetch->bss->py_code_reads;
	out->page_frames = s->fetch->bss->py_page_frames;
	pthread_mutex_unlock(&s->fetch_lock);
}

void sampling__stats(struct sampling *s, uint64_t *samples, uint64_t *lost)
{
	*samples = stat_sum(s, STAT_SAMPLES);
	*lost = stat_sum(s, STAT_LOST);
}

uint64_t sampling__lost_events(struct sampling *s)
{
	return stat_sum(s, STAT_LOST_EVENTS);
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
