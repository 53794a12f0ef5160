/* SPDX-License-Identifier: MIT */
/*
 * merge: several recordings (probing record -o, one per node of a distributed job) made into
 * one recording that every reader (flamegraph, export, query -i) reads as it reads one from
 * probing record; or several backtrace snapshots (probing backtrace -o, live/btjob.h) into
 * one snapshot. docs/jobs.md says how to use it, docs/sql.md "Merged recordings" what a
 * merged recording holds:
 *
 *   - every process keeps its host (processes.host: the process's own, else the recording's
 *     meta 'host') and its pid on that host (processes.host_pid). Its pid is that pid again,
 *     unless a process already merged has it (pids of different nodes, or of different PID
 *     namespaces, collide): then pid + k * 4194304 with the smallest k >= 1 that is free,
 *     above any real pid (the kernel's PID_MAX_LIMIT). threads, sample_counts and a saved
 *     torch_trace follow; ppid follows its parent when the parent was recorded in the same
 *     file;
 *   - frames and stacks are interned again over the whole file (one stack_id per distinct
 *     sequence of frames, as in a recording);
 *   - meta: 'start' is the earliest start, 'end' the latest end, 'duration' the span between;
 *     'samples', 'lost', 'complete_native_stacks', 'recorder_cpu', 'bpf_run_ns', 'bpf_runs'
 *     are sums; 'host' lists the hosts (comma-separated, in the order of the inputs);
 *     'merged' counts the recordings merged; any other key is kept where every input has the
 *     same value and left out (unknown) otherwise.
 *
 * Snapshots are keyed by (host, pid) already: their rows are put together as they are, meta
 * merged by the same rules ('time' the earliest, 'native' 1 if any input has native frames)
 * and odd_one_out computed again over all of them (as backtrace -i does).
 */
#ifndef PROBING_MERGE_H
#define PROBING_MERGE_H

#include <sqlite3.h>

/*
 * What a higher floor adds to a merge. Watch reports (probing watch's: a recording, a
 * snapshot and watch_* tables) merge as both, their watch_ranks and each node's watch_stall
 * row (into watch_node_stalls) with their host; then @reports, when set, runs on the output
 * @db in a transaction before it is written (the job's own diagnosis: watch/jobdiag.h) and
 * returns 0 or -errno, printed. Without it, reports are refused.
 */
struct merge_hooks {
	int (*reports)(sqlite3 *db, void *arg);
	void *arg;
};

/*
 * Merge the @n recordings @inputs into @output, written under the rules of base/outfile.h
 * (OUTFILE_* @out_flags; a recording is a file: no stream, no stdout) through OUTPUT.partial,
 * renamed once complete. Every input is checked before anything is written: each must be a
 * probing recording, or each a backtrace snapshot (another file, or a mix, is refused), with
 * the same tables and columns (the same version of the format), recordings the same
 * sampling clock and frequency (a sample must weigh the same); no file, and no process
 * (recordings: same host, pid and start time; snapshots: same host and pid), may come twice;
 * @output may not be one of the inputs; watch reports merge only with watch reports, and
 * only with @hooks->reports (NULL: no hooks). Return 0, or -errno with what failed, why and
 * what to do printed; nothing is written then (OUTPUT.partial is removed, an existing @output
 * is left as it was).
 */
int merge__recordings(const char *const *inputs, int n, const char *output, unsigned int out_flags,
		      const struct merge_hooks *hooks);

#endif
