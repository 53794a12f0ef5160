// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include "base/cli.h"
#include "base/util.h"
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
	store__meta_text(st, "clock", "cpu-clock");
	store__meta_text(st, "probing_version", PROBING_VERSION);
	store__meta_real(st, "start", start);
}

void meta__write_end(struct store *st, const struct record_totals *t)
{
	store__meta_real(st, "end", t->start + t->seconds);
	store__meta_real(st, "duration", t->seconds);
	store__meta_int(st, "samples", t->rs.samples);
	store__meta_int(st, "lost", t->lost);
	store__meta_int(st, "complete_native_stacks", t->rs.complete);
	store__meta_real(st, "recorder_cpu", t->recorder_cpu);
	store__meta_text(st, "comm", t->comm_state);
	if (t->comm_state && !strcmp(t->comm_state, "on"))
		store__meta_int(st, "collectives", t->comm_rows);
	if (t->comm_notes[0])
		store__meta_text(st, "comm_notes", t->comm_notes);
	if (t->bpf_runs) {
		store__meta_int(st, "bpf_run_ns", t->bpf_ns);
		store__meta_int(st, "bpf_runs", t->bpf_runs);
	}
}
