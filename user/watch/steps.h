/* SPDX-License-Identifier: MIT */
/*
 * steps: the training steps of the watched processes where the PyTorch hooks are in
 * (`probing inject --torch`: the step of python.torch_status, docs/torch.md), asked of each
 * process's agent about once a second on a thread of its own, so that the stall detector has a
 * measure of progress for a job whose collectives show none (a single process, a job whose
 * collectives cannot be probed). Nothing is injected: a process without the agent, or whose
 * agent has no hooks installed, is asked again only every STEPS_RETRY_S seconds (the hooks
 * may be put in later). A request waits at most a second for the target's GIL.
 */
#ifndef PROBING_STEPS_H
#define PROBING_STEPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define STEPS_RETRY_S	10.0
#define STEP_PACE_MOVES 64 /* moves remembered per process */

/* The pace of one process's steps, from readings of its step count. Zeroed: nothing read. */
struct step_pace {
	bool known;		      /* a step was read */
	int64_t step;		      /* the latest read */
	double seen;		      /* when it was first read at that step (seconds) */
	double gaps[STEP_PACE_MOVES]; /* seconds per step of the latest moves counted */
	unsigned int ngaps;	      /* moves counted (the ring holds the last STEP_PACE_MOVES) */
	/* seconds per step of the latest move, counted at the next one; 0: none */
	double pending;
};

/*
 * A reading of the step, @step at @t seconds, into @p. A move counts once the process is read
 * to move again after it. Return true if the step moved (or was first read, or went back: a
 * new count, judged from now).
 */
bool step_pace__read(struct step_pace *p, int64_t step, double t);

/*
 * The longest time a step took among the moves counted (the time between two readings over
 * the steps made between them); the one move not yet counted while there is no other; 0:
 * no move yet.
 */
double step_pace__longest(const struct step_pace *p);

struct steps;

/*
 * Start the thread, asking every @interval_s seconds (no process yet: steps__set_pids).
 * Return 0 and *@out, or -errno.
 */
int steps__start(double interval_s, struct steps **out);

/* Stop the thread (within a request's time-out, about 2 s at most) and free. NULL: no-op. */
void steps__stop(struct steps *st);

/*
 * The processes to ask from now on: @pids (@n of them). What was learnt of a process that
 * stays is kept. Return 0 or -ENOMEM.
 */
int steps__set_pids(struct steps *st, const pid_t *pids, int n);

/* What the processes' steps say of the job's progress. */
struct step_progress {
	int procs;	   /* processes whose hooks answered with a step */
	int64_t step;	   /* the highest step among them */
	double last_move;  /* unix seconds: when a process's step was last seen to move (or
			     * first read); 0: none */
	double max_step_s; /* the longest time a step took among the last 64 moves of each
			     * process (the time between two sightings over the steps made
			     * between them), a move counted once the process moved again
			     * after it (its only move while there is no other); 0: no move
			     * seen yet */
};

/* The progress now, into @out. */
void steps__progress(struct steps *st, struct step_progress *out);

/* Unix seconds when @pid's step was last seen to move (or first read); 0: no step known. */
double steps__last_move(struct steps *st, pid_t pid);

#endif
