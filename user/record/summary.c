// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
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
		fprintf(stderr,
			"probing record: no samples, although the recorded processes used %.2f s "
			"of "
			"CPU time while recorded (about %.0f samples at %u Hz): the sampler did "
			"not "
			"see them run.\n"
			"This is a fault of probing; please report it with the output of 'probing "
			"record -vv ...'.\n",
			cpu, cpu * freq, freq);
		return EXIT_FAIL;
	}
	if (t->live)
		fprintf(stderr,
			"probing: no samples: the recorded process%s did not run on a CPU at any "
			"sampling tick (%.0f ms of CPU time in %.1f s): %s blocked or sleeping. "
			"Sampling records threads only while they run on a CPU.\n",
			t->live == 1 ? "" : "es", cpu * 1000, t->seconds,
			t->live == 1 ? "it was" : "they were");
	else
		fprintf(stderr,
			"probing: no samples: the recorded processes exited after %.1f ms of CPU "
			"time, %s one sampling period (%.1f ms at %u Hz), and were not running at "
			"any sampling tick. A higher -F may catch them.\n",
			cpu * 1000, cpu * 1000 < period_ms ? "less than" : "about", period_ms,
			freq);
	return EXIT_OK;
}

/* With -v: what recording cost, and how the Python stack walks went. */
static void print_costs(const struct record_totals *t)
{
	const struct recorder_stats *rs = &t->rs;

	pr_info("recorder CPU time: %.3f s (%.1f us per sample)", t->recorder_cpu,
		rs->samples ? 1e6 * t->recorder_cpu / rs->samples : 0.0);
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
	fprintf(stderr, "probing: %llu collective calls (%llu seen completing) in %llu process%s\n",
		(unsigned long long)t->comm_rows, (unsigned long long)t->comm_completed,
		(unsigned long long)t->comm_processes, t->comm_processes == 1 ? "" : "es");
	while (*line) {
		end = strchrnul(line, '\n');
		fprintf(stderr, "probing:   %.*s\n", (int)(end - line), line);
		line = *end ? end + 1 : end;
	}
	if (t->comm_lost)
		fprintf(stderr,
			"probing: %llu events of collective calls were lost because the recorder "
			"could not keep up: some rows lack their completion\n",
			(unsigned long long)t->comm_lost);
}

int summary__print(const struct record_totals *t, const struct session_opts *o)
{
	const struct recorder_stats *rs = &t->rs;
	int ret = EXIT_OK;

	if (t->stop_signal)
		pr_info("stopping on signal %d", t->stop_signal);
	fprintf(stderr,
		"probing: recorded %llu samples (%llu lost) of %llu thread%s in %llu process%s "
		"over %.1f s -> %s\n",
		(unsigned long long)rs->samples, (unsigned long long)t->lost,
		(unsigned long long)rs->threads, rs->threads == 1 ? "" : "s",
		(unsigned long long)rs->processes, rs->processes == 1 ? "" : "es", t->seconds,
		o->output);
	if (t->lost)
		fprintf(stderr,
			"probing: %llu samples were lost because the recorder could not "
			"keep up; try a lower -F or a smaller --stack-size\n",
			(unsigned long long)t->lost);
	if (t->lost_events)
		fprintf(stderr,
			"probing: %llu process events (new processes, exits, thread names) were "
			"lost because the recorder could not keep up; some processes may lack "
			"their "
			"command line or end time\n",
			(unsigned long long)t->lost_events);
	print_collectives(t);
	if (!rs->samples)
		ret = explain_no_samples(t, o->sampling.freq);
	print_costs(t);
	if (rs->unresolved)
		fprintf(stderr,
			"probing: %llu samples of processes that exited before their "
			"memory maps could be read have no stack\n",
			(unsigned long long)rs->unresolved);
	return ret;
}
