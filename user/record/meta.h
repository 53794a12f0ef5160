/* SPDX-License-Identifier: MIT */
/* meta: the recording's own facts, the rows of its table meta (docs/sql.md lists the keys). */
#ifndef PROBING_META_H
#define PROBING_META_H

#include "record/session.h"
#include "record/store.h"

/*
 * The facts known when sampling starts at @start (unix seconds): kernel, host, command
 * (probing's, from @o->argc/argv), frequency, stack_size, clock, probing_version, start.
 * Queued in @st like every meta row (written at its next flush).
 */
void meta__write_start(struct store *st, const struct session_opts *o, double start);

/*
 * The facts known at the end, from @t: end, duration, samples, lost, complete_native_stacks,
 * recorder_cpu, comm (collectives recorded: on, off or unavailable), collectives and
 * comm_notes, and bpf_run_ns and bpf_runs when the kernel counted them.
 */
void meta__write_end(struct store *st, const struct record_totals *t);

#endif
