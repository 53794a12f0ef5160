/* SPDX-License-Identifier: MIT */
/*
 * session: one recording from start to end. It opens the pipeline — the recording file
 * (store), the BPF sampler (sampling), the recorder that turns its records into stacks and
 * the reader thread that drains the ring buffer (evqueue) — makes the targets (running
 * processes, or a command it launches held before exec: launch.h) and runs the loop that
 * feeds the records to the recorder until a stop condition. What it counted comes out as
 * struct record_totals, for the meta table (meta.h) and the user (summary.h).
 *
 *   session__open -> session__run -> session__finish -> (summary) -> session__close
 */
#ifndef PROBING_SESSION_H
#define PROBING_SESSION_H

#include <stdint.h>
#include <sys/types.h>

#include "record/recorder.h"
#include "record/sampling.h"

struct session;

struct session_opts {
	struct sampling_opts sampling;
	struct recorder_opts recorder;
	const char *output;	  /* the recording file */
	unsigned int store_flags; /* STORE_FORCE */
	bool comm;		  /* record collective communication calls (comm.h) */
	double duration;	  /* seconds; 0: until a signal or every target has exited */
	const pid_t *pids;	  /* running processes to record (checked by preflight.h) ... */
	int npids;
	char **command; /* ... or a command to start (argv, NULL-terminated) */
	int argc;	/* probing's own arguments ("record", options...), for meta */
	char **argv;
	/*
	 * Called by session__run at every turn of its loop (every few milliseconds), with
	 * @second set about once a second, after the recording was flushed. A non-zero return
	 * stops the loop; a negative one is returned by session__run. NULL: none.
	 */
	int (*on_turn)(void *ctx, struct session *s, bool second);
	void *turn_ctx;
	bool quiet; /* no progress line on a terminal */
	/*
	 * Records of processes (fork, exec, exit) and of collectives are handled ahead of the
	 * samples waiting (in their own order), so that what the recorder knows of them is
	 * behind by one record's handling, not by a backlog of samples (probing watch). A
	 * sample from before its process's exec, handled after it, is then dropped. false: the
	 * kernel's order.
	 */
	bool urgent_first;
	/*
	 * Milliseconds between two drains of the kernel's records when nothing wakes the reader
	 * (0: EVQUEUE_DEFAULT_PACE_MS), and at most between two turns of the loop. Longer:
	 * fewer wake-ups of probing, records handled later (a watch takes 500, and reads at
	 * once what it judges by: session__sync, session__wake_by).
	 */
	unsigned int pace_ms;
};

/* What a finished recording counted (session__finish). */
struct record_totals {
	double start;	      /* unix seconds when sampling started */
	double seconds;	      /* how long it recorded */
	int stop_signal;      /* the signal that stopped it, 0 if none did */
	uint64_t seen;	      /* samples of targets the BPF program took */
	uint64_t lost;	      /* samples lost: ring buffer full, or the queue over its limit */
	uint64_t lost_events; /* process events (fork, exec, exit, names) lost the same way */
	struct recorder_stats rs;
	double target_cpu;	   /* CPU seconds the targets used while recorded */
	int live;		   /* targets still running at the end */
	double recorder_cpu;	   /* CPU seconds probing's own threads used */
	uint64_t bpf_ns, bpf_runs; /* the BPF program's cost (kernel.bpf_stats_enabled=1; else 0) */
	/* The processes recorded and their place in a job; owned by the session (valid until
	 * session__close). */
	const struct recorder_process *procs;
	int nprocs;
	struct sampling_offcpu_stats off; /* with --off-cpu */
	/* Collectives (comm.h, collectives.h). */
	const char *comm_state;	 /* "on", "off" (--no-comm) or "unavailable" */
	uint64_t comm_rows;	 /* collectives recorded */
	uint64_t comm_completed; /* of which seen completing */
	uint64_t comm_processes; /* processes that issued them */
	uint64_t comm_lost;	 /* events lost (ring buffer full) */
	uint64_t comm_ub_detached, comm_ub_attached_again, comm_p2p_unwatched; /* comm_stats */
	uint64_t comm_copies;	  /* calls whose stack was copied (the first of each call site) */
	uint64_t comm_site_calls; /* calls from a known call site: no copy */
	char comm_summary[1024];  /* the stragglers, a line per kind of collective */
	char comm_notes[2048];	  /* what comm noted ("; "-separated), or "" */
};

/*
 * Start recording as @o says: SIGINT, SIGTERM and SIGHUP stop the recording from now on
 * (SIGPIPE is ignored); the file is created, the sampler loaded, every target added (the
 * command started and let go only once it is one), the meta facts known at the start
 * written. @o and what it points to must outlive the session. Return 0 and *@out, or -errno
 * after saying what went wrong, with nothing left behind (no file, no child).
 */
int session__open(const struct session_opts *o, struct session **out);

/*
 * The recording loop: hand each record to the recorder, and once a second flush the file
 * (recorder__tick) and show the progress on a terminal. It stops on a signal, when every
 * target has exited, after the duration, or on an error (said on stderr). Return 0, or the
 * -errno that stopped it; what was recorded until then is kept either way.
 */
int session__run(struct session *s);

/*
 * Go on in a new file @path (a session whose store_flags have STORE_ROTATE): the file being
 * written gets its meta 'end' and 'duration' and is completed under its name, @path gets
 * meta 'start' now, and the collectives under way are written in it again. Return 0, or
 * -errno said (store__rotate: nothing is written until a rotation succeeds).
 */
int session__rotate(struct session *s, const char *path);

/*
 * Handle the records the kernel sent that wait in the queue, for at most @budget_s seconds
 * (from session__run's on_turn: what the recorder knows is then up to date, or nearly).
 * Return the number handled.
 */
int session__drain(struct session *s, double budget_s);

/*
 * Handle the records of processes and collectives that wait (urgent_first), for at most
 * @budget_s seconds. Return 0 when none waits any more, -EAGAIN when the budget ran out
 * first.
 */
int session__drain_urgent(struct session *s, double budget_s);

/*
 * Bring what the kernel recorded up to now into the queue (a drain of the ring buffer now,
 * not at the pace), waiting up to @timeout_ms: then session__drain_urgent handles every
 * collective and exit recorded before the call. 0, or -ETIMEDOUT.
 */
int session__sync(struct session *s, int timeout_ms);

/*
 * Wake the loop by @mono_s (CLOCK_MONOTONIC seconds) at the latest, rather than after the
 * whole pace (session_opts.pace_ms): for a caller whose turn has something due then (a
 * stall's threshold). Kept until that time is reached or it is set again; 0 clears it.
 */
void session__wake_by(struct session *s, double mono_s);

/* The store, the recorder, and the command started (0 if none) of @s. */
struct store *session__store(const struct session *s);
struct recorder *session__recorder(const struct session *s);
pid_t session__child(const struct session *s);

/*
 * Stop sampling, store every record the kernel sent before, and fill *@t; its meta rows are
 * written (meta.h).
 */
void session__finish(struct session *s, struct record_totals *t);

/*
 * End the session: stop a command it started that still runs (launch__end), free the
 * pipeline, and complete the recording file (store__close). NULL is a no-op. Return 0, or
 * -errno when the file could not be completed (the reason and where the data is were said).
 */
int session__close(struct session *s);

#endif
