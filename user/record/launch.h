/* SPDX-License-Identifier: MIT */
/*
 * launch: start the command of 'record -- CMD' so that none of it runs unrecorded. The child
 * is forked at once but waits on a pipe before exec until the recorder has made it a target
 * (launch__release); a failed exec comes back through a second, close-on-exec pipe. The
 * command does not outlive the recording (launch__end).
 */
#ifndef PROBING_LAUNCH_H
#define PROBING_LAUNCH_H

#include <stdbool.h>
#include <sys/types.h>

struct launch {
	pid_t pid;   /* the child; 0 when there is none (never started, or reaped) */
	int release; /* write end of the pipe it waits on; -1 once released */
	int errfd;   /* read end of the pipe its exec error comes through; -1 when done */
	double cpu;  /* CPU seconds it used (and its reaped children), known once reaped */
};

/* A struct launch with nothing started (launch__end on it is a no-op). */
#define LAUNCH_INIT                                            \
	{                                                      \
		.pid = 0, .release = -1, .errfd = -1, .cpu = 0 \
	}

/*
 * Fork the command @argv (argv[0] looked up in PATH) held before exec: l->pid is its pid, to
 * make a target before launch__release. The child gets the default action for the signals
 * the recorder handles. Return 0, or -errno with nothing started.
 */
int launch__start(struct launch *l, char **argv);

/*
 * Let the held child exec, and wait until it did. Return 0 once it runs the command, or the
 * -errno of its failed exec (the child is reaped then: l->pid is 0).
 */
int launch__release(struct launch *l);

/*
 * true once the child has exited (it is reaped then, without waiting, and l->cpu set); false
 * while it runs or when there is none.
 */
bool launch__reaped(struct launch *l);

/*
 * The end of the recording: a child still running gets SIGTERM (SIGKILL if it was never
 * released: none of the command ran) and is waited for; the pipes are closed. Safe to call
 * twice.
 */
void launch__end(struct launch *l);

#endif
