// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include "base/cli.h"
#include "base/util.h"
#include "native/dwproc.h"
#include "record/meta.h"

void meta__write_start(struct store *st, const struct session_opts *o, double start)
{
	struct strbuf cmd = {};
	struct utsname u;
	char host[256] = "";
	int i;

	if (!uname(&u)) {
		store__meta_text(st, "kernel", u.release);
		snprintf(host, sizeof(host), "%s", u.nodename);
		store__meta_text(st, "host", host);
	}
	for (i = 0; i < o->argc; i++)
		sb_printf(&cmd, "%s%s", i ? " " : "probing ", o->argv[i]);
	store__meta_text(st, "command", sb_str(&cmd));
	sb_free(&cmd);
	store__meta_int(st, "frequency", o->sampling.freq);
	store__meta_int(st, "stack_size", o->sampling.stack_size);
	/* Off-CPU recording samples every thread's whole time, on its CPU or off it. */
	store__meta_text(st, "clock", o->sampling.off_cpu ? "wall-clock" : "cpu-clock");
	store__meta_int(st, "off_cpu", o->sampling.off_cpu);
	if (o->sampling.off_cpu) {
		/* How: threads off their CPU observed once per sampling period (sampler.h), at most
		 * OFFCPU_SWEEP_THREADS per sweep; no threshold on the length of a block. */
		store__meta_text(st, "off_cpu_mode", "sampled");
		store__meta_int(st, "off_cpu_period_ns", hz_period_ns(o->sampling.freq));
		store__meta_int(st, "off_cpu_threads_per_sweep", OFFCPU_SWEEP_THREADS);
	}
	store__meta_text(st, "probing_version", PROBING_VERSION);
	store__meta_real(st, "start", start);
}

/* What off-CPU recording did (docs/sql.md, "Off-CPU time"). */
static void meta_offcpu(struct store *st, const struct record_totals *t)
{
	const struct recorder_stats *rs = &t->rs;

	store__meta_int(st, "off_cpu_ns", rs->off_ns);
	store__meta_int(st, "off_cpu_observations", rs->off_observations);
	store__meta_int(st, "off_cpu_sweeps", t->off.sweeps);
	store__meta_int(st, "off_cpu_looks", t->off.looks);
	store__meta_int(st, "off_cpu_looks_quiet", t->off.quiet);
	store__meta_int(st, "off_cpu_blocks", rs->off_blocks);
	store__meta_int(st, "off_cpu_stacks_sweep", rs->off_stacks_sweep);
	store__meta_int(st, "off_cpu_stacks_wake", rs->off_stacks_wake);
	store__meta_int(st, "off_cpu_stacks_iterator", rs->off_stacks_fetch);
	store__meta_int(st, "off_cpu_stacks_resume", rs->off_stacks_resume);
	store__meta_int(st, "off_cpu_resume_missed", t->off.resume_miss);
	store__meta_int(st, "off_cpu_resume_not_scheduled", t->off.resume_err);
	store__meta_int(st, "off_cpu_resume_runs", t->off.resume_runs);
	store__meta_int(st, "off_cpu_resume_ns", t->off.resume_ns);
	store__meta_int(st, "off_cpu_resume_frames_from_page", t->off.resume_page_frames);
	store__meta_int(st, "off_cpu_stacks_known_site", rs->off_stacks_site);
	store__meta_int(st, "off_cpu_stacks_site_id", rs->off_stacks_by_id);
	store__meta_int(st, "off_cpu_stacks_site_lost", rs->off_stacks_site_lost);
	store__meta_int(st, "off_cpu_stacks_memo", rs->off_stacks_memo);
	store__meta_int(st, "off_cpu_stacks_torn", t->off.torn);
	store__meta_int(st, "off_cpu_iterator_code_cached", t->off.code_cached);
	store__meta_int(st, "off_cpu_iterator_code_read", t->off.code_read);
	store__meta_int(st, "off_cpu_fetch_frames_from_page", t->off.page_frames);
	store__meta_int(st, "off_cpu_blocks_no_stack", rs->off_blocks_no_stack);
	store__meta_int(st, "off_cpu_blocks_preempted_run_stack", rs->off_blocks_run_stack);
	store__meta_int(st, "off_cpu_ns_no_stack", rs->off_ns_no_stack);
	store__meta_int(st, "off_cpu_lost", t->off.lost);
	store__meta_int(st, "off_cpu_threads_not_swept", t->off.no_room);
}

/* How native stacks were unwound, in this run of probing (docs/sql.md, "meta"). */
static void meta_unwinds(struct store *st)
{
	struct dwproc_unwinds u;

	dwproc__unwind_counts(&u);
	store__meta_int(st, "native_unwinds_by_rules", u.by_rules);
	store__meta_int(st, "native_unwinds_by_libdwfl", u.by_libdwfl);
	store__meta_int(st, "native_unwind_ns", u.ns);
	if (u.checked)
		store__meta_int(st, "native_unwinds_differ", u.differ);
}

void meta__write_end(struct store *st, const struct record_totals *t)
{
	store__meta_real(st, "end", t->start + t->seconds);
	store__meta_real(st, "duration", t->seconds);
	store__meta_int(st, "samples", t->rs.samples + t->rs.off_observations);
	store__meta_int(st, "lost", t->lost);
	store__meta_int(st, "complete_native_stacks", t->rs.complete);
	meta_unwinds(st);
	store__meta_real(st, "recorder_cpu", t->recorder_cpu);
	store__meta_text(st, "comm", t->comm_state);
	if (t->comm_state && !strcmp(t->comm_state, "on")) {
		store__meta_int(st, "collectives", t->comm_rows);
		store__meta_int(st, "comm_stack_copies", t->comm_copies);
		store__meta_int(st, "comm_site_calls", t->comm_site_calls);
		store__meta_int(st, "comm_buffer_probes_detached", t->comm_ub_detached);
		store__meta_int(st, "comm_buffer_probes_attached_again", t->comm_ub_attached_again);
		store__meta_int(st, "comm_p2p_unwatched", t->comm_p2p_unwatched);
	}
	if (t->comm_notes[0])
		store__meta_text(st, "comm_notes", t->comm_notes);
	if (t->bpf_runs) {
		store__meta_int(st, "bpf_run_ns", t->bpf_ns);
		store__meta_int(st, "bpf_runs", t->bpf_runs);
	}
	if (t->off.sweeps)
		meta_offcpu(st, t);
}
