// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/util.h"
#include "record/summary.h"

/*
 * A recording without samples says why. @t->target_cpu: CPU seconds the targets used while
 * recorded (from /proc: 10 ms granularity); @t->seen: samples of targets the sampler took.
 */
static int explain_no_samples(const struct record_totals *t, unsigned int freq)
{
	double cpu = t->target_cpu, period_ms = 1000.0 / freq;

	if (t->seen)
		return EXIT_OK; /* sampled, but every sample was lost: said above */
	if (cpu * freq >= 5) {
		log_cmd("record",
			"no samples, although the recorded processes used %.2f s of CPU time while "
			"recorded (about %.0f samples at %u Hz): the sampler did not see them run.",
			cpu, cpu * freq, freq);
		fputs("This is a fault of probing; please report it with the output of 'probing "
		      "record -vv ...'.\n",
		      stderr);
		return EXIT_FAIL;
	}
	if (t->live)
		pr_warn("no samples: the recorded process%s did not run on a CPU at any sampling "
			"tick (%.0f ms of CPU time in %.1f s): %s blocked or sleeping. Sampling "
			"records threads only while they run on a CPU.",
			t->live == 1 ? "" : "es", cpu * 1000, t->seconds,
			t->live == 1 ? "it was" : "they were");
	else
		pr_warn("no samples: the recorded processes exited after %.1f ms of CPU time, %s "
			"one sampling period (%.1f ms at %u Hz), and were not running at any "
			"sampling tick. A higher -F may catch them.",
			cpu * 1000, cpu * 1000 < period_ms ? "less than" : "about", period_ms,
			freq);
	return EXIT_OK;
}

#define MAX_RANK_LINES 64 /* a bigger job is summed up; the recording has every process */

static int cmp_proc_rank(const void *a, const void *b)
{
	const struct recorder_process *x = a, *y = b;

	if (x->job->rank != y->job->rank)
		return x->job->rank < y->job->rank ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/*
 * The ranks of a distributed job among the recorded processes, one line each: "rank 3 (pid
 * 1234)" and its samples (a rank's other processes, such as its data loader workers, which
 * inherit its RANK, are counted with it); the ranks its world size says are missing; the
 * processes without a rank. Nothing when no process has a rank.
 */
static void print_ranks(const struct record_totals *t)
{
	struct recorder_process *p = NULL;
	int i, j, n = 0, lines = 0, world = -1, missing = 0, norank = 0;
	uint64_t samples, norank_samples = 0;
	char label[96], cnt[32];
	const char *job_id = NULL;

	for (i = 0; i < t->nprocs; i++)
		n += jobinfo_has_rank(t->procs[i].job);
	if (!n)
		return;
	p = malloc(n * sizeof(*p));
	if (!p)
		return;
	for (i = n = 0; i < t->nprocs; i++) {
		if (jobinfo_has_rank(t->procs[i].job)) {
			p[n++] = t->procs[i];
		} else {
			norank++;
			norank_samples += t->procs[i].samples;
		}
	}
	qsort(p, n, sizeof(*p), cmp_proc_rank);
	for (i = 0; i < n; i++) {
		if (p[i].job->world_size > world)
			world = p[i].job->world_size;
		if (!job_id)
			job_id = jobinfo_job_name(p[i].job);
	}
	/* The heading, then the table's rows as they are (no user text in them). */
	if (world > 0)
		pr_warn("ranks of %s%s (world size %d):", job_id ? "job " : "a distributed job",
			job_id ? job_id : "", world);
	else
		pr_warn("ranks of %s%s:", job_id ? "job " : "a distributed job",
			job_id ? job_id : "");
	for (i = 0; i < n; i = j) {
		samples = 0;
		for (j = i; j < n && p[j].job->rank == p[i].job->rank; j++)
			samples += p[j].samples;
		if (++lines > MAX_RANK_LINES)
			continue;
		if (j - i == 1)
			jobinfo_label(p[i].job, p[i].pid, false, label, sizeof(label));
		else
			snprintf(label, sizeof(label), "rank %d (pid %d and %d more process%s)",
				 p[i].job->rank, p[i].pid, j - i - 1, j - i - 1 == 1 ? "" : "es");
		fmt_thousands(cnt, sizeof(cnt), samples);
		fprintf(stderr, "  %-40s %12s samples\n", label, cnt);
	}
	if (lines > MAX_RANK_LINES)
		fprintf(stderr, "  ... and %d more ranks (SELECT * FROM processes)\n",
			lines - MAX_RANK_LINES);
	/* Ranks 0..world-1 not among them: on other nodes, or not started yet. */
	for (i = 0, j = 0; world > 0 && i < world && world <= (1 << 20); i++) {
		while (j < n && p[j].job->rank < i)
			j++;
		missing += !(j < n && p[j].job->rank == i);
	}
	if (missing)
		pr_warn("%d of the job's %d ranks %s not among the recorded processes (on other "
			"nodes, or not running when recording started?)",
			missing, world, missing == 1 ? "is" : "are");
	if (norank) {
		fmt_thousands(cnt, sizeof(cnt), norank_samples);
		pr_warn("and %d process%s without a rank (%s samples)", norank,
			norank == 1 ? "" : "es", cnt);
	}
	free(p);
}

/* With -v: what recording cost, and how the Python stack walks went. */
static void print_costs(const struct record_totals *t)
{
	const struct recorder_stats *rs = &t->rs;

	pr_info("recorder CPU time: %.3f s (%.1f us per sample)", t->recorder_cpu,
		rs->samples ? 1e6 * t->recorder_cpu / rs->samples : 0.0);
	if (t->off.sweeps)
		pr_info("off-CPU: %llu sweeps (%llu looks at a thread, %llu of them at a quiet "
			"one, "
			"not read), %llu segments; stacks of %llu blocks (%llu taken in "
			"the sweep, %llu at the wake-up, %llu as the thread resumed, %llu by the "
			"fetcher in %llu runs, %llu torn and dropped; %llu at a known site, not "
			"unwound again, %llu of them sent as the site's id); %llu preempted "
			"blocks under their run's last on-CPU "
			"stack; %llu blocks without a stack: %.3f s of %.3f s",
			(unsigned long long)t->off.sweeps, (unsigned long long)t->off.looks,
			(unsigned long long)t->off.quiet, (unsigned long long)rs->off_segments,
			(unsigned long long)rs->off_blocks,
			(unsigned long long)rs->off_stacks_sweep,
			(unsigned long long)rs->off_stacks_wake,
			(unsigned long long)rs->off_stacks_resume,
			(unsigned long long)rs->off_stacks_fetch,
			(unsigned long long)t->off.fetch_runs, (unsigned long long)t->off.torn,
			(unsigned long long)rs->off_stacks_site,
			(unsigned long long)rs->off_stacks_by_id,
			(unsigned long long)rs->off_blocks_run_stack,
			(unsigned long long)rs->off_blocks_no_stack, rs->off_ns_no_stack / 1e9,
			rs->off_ns / 1e9);
	if (t->off.resume_runs)
		pr_info("off-CPU task work in the threads: %.2f ms in %llu runs (%.2f us each)",
			t->off.resume_ns / 1e6, (unsigned long long)t->off.resume_runs,
			t->off.resume_ns / 1e3 / t->off.resume_runs);
	if (t->bpf_runs)
		/* Only with kernel.bpf_stats_enabled=1: the cost inside the sampled context. */
		pr_info("BPF program: %.2f ms in %llu runs, %.2f us per recorded sample",
			t->bpf_ns / 1e6, (unsigned long long)t->bpf_runs,
			rs->samples ? t->bpf_ns / 1e3 / rs->samples : 0.0);
	if (rs->py_status[PY_OK] + rs->py_status[PY_NO_TSTATE] + rs->py_status[PY_READ_ERROR] +
	    rs->py_status[PY_BAD_TSTATE] + rs->py_status[PY_TORN])
		pr_info("Python walk: %llu ok, %llu without a thread state, %llu read errors, "
			"%llu invalid thread states, %llu caught entering the eval loop, %llu not "
			"configured yet",
			(unsigned long long)rs->py_status[PY_OK],
			(unsigned long long)rs->py_status[PY_NO_TSTATE],
			(unsigned long long)rs->py_status[PY_READ_ERROR],
			(unsigned long long)rs->py_status[PY_BAD_TSTATE],
			(unsigned long long)rs->py_status[PY_TORN],
			(unsigned long long)rs->py_status[PY_NONE]);
}

/* The collectives recorded, and who the others waited for (docs/sql.md, "Stragglers"). */
static void print_collectives(const struct record_totals *t)
{
	const char *line = t->comm_summary, *end;

	if (!t->comm_rows)
		return;
	pr_warn("%llu collective calls (%llu seen completing) in %llu process%s",
		(unsigned long long)t->comm_rows, (unsigned long long)t->comm_completed,
		(unsigned long long)t->comm_processes, t->comm_processes == 1 ? "" : "es");
	while (*line) {
		end = strchrnul(line, '\n');
		pr_warn("  %.*s", (int)(end - line), line);
		line = *end ? end + 1 : end;
	}
	if (t->comm_lost)
		pr_warn("%llu events of collective calls were lost because the recorder could not "
			"keep up: some rows lack their completion",
			(unsigned long long)t->comm_lost);
}

int summary__print(const struct record_totals *t, const struct session_opts *o)
{
	const struct recorder_stats *rs = &t->rs;
	int ret = EXIT_OK;

	char off[96] = "";

	if (t->stop_signal)
		pr_info("stopping on signal %d", t->stop_signal);
	if (o->sampling.off_cpu)
		snprintf(off, sizeof(off), " and %.1f s of off-CPU time", rs->off_ns / 1e9);
	pr_warn("recorded %llu samples (%llu lost)%s of %llu thread%s in %llu process%s over %.1f "
		"s -> %s",
		(unsigned long long)rs->samples, (unsigned long long)t->lost, off,
		(unsigned long long)rs->threads, rs->threads == 1 ? "" : "s",
		(unsigned long long)rs->processes, rs->processes == 1 ? "" : "es", t->seconds,
		o->output);
	if (t->off.lost)
		pr_warn("%llu off-CPU records were lost because the recorder could not keep up; "
			"try a lower -F",
			(unsigned long long)t->off.lost);
	if (t->off.no_room)
		pr_warn("%llu threads had no room in the off-CPU sweep (more than 16384 threads): "
			"their off-CPU time is missing",
			(unsigned long long)t->off.no_room);
	if (t->lost)
		pr_warn("%llu samples were lost because the recorder could not keep up; try a "
			"lower -F or a smaller --stack-size",
			(unsigned long long)t->lost);
	if (t->lost_events)
		pr_warn("%llu process events (new processes, exits, thread names) were lost "
			"because the recorder could not keep up; some processes may lack their "
			"command line or end time",
			(unsigned long long)t->lost_events);
	print_ranks(t);
	print_collectives(t);
	if (!rs->samples && !rs->off_segments)
		ret = explain_no_samples(t, o->sampling.freq);
	print_costs(t);
	if (rs->unresolved)
		pr_warn("%llu samples of processes that exited before their memory maps could be "
			"read have no stack",
			(unsigned long long)rs->unresolved);
	return ret;
}
