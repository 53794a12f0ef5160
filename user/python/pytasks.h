/* SPDX-License-Identifier: MIT */
/*
 * pytasks: the asyncio tasks of a running CPython 3.8-3.15 process, read from outside like
 * its stacks (process_vm_readv only: nothing loaded, nothing stopped, no code of the target
 * run). For every pending task of every event loop: its name, its state, what it waits on
 * (another task, the children of a gather, a plain future) and its coroutine chain (the
 * coroutine, what it awaits, ... down to the one waiting on a future), each with file:line;
 * a task running right now gets its frames from the stack of the thread running its loop.
 *
 * Where the tasks are (docs/python-internals.md, "asyncio tasks"):
 *   asyncio.tasks._all_tasks (3.8-3.11) or _scheduled_tasks (3.12, 3.13): WeakSets of every
 *   task, as the C accelerator _asyncio keeps them; _eager_tasks (3.12+): a set of tasks
 *   running their first step eagerly; _current_tasks: {loop: task running now}. 3.14+: the
 *   lists of tasks of each thread and of the interpreter, and each thread's running loop and
 *   task (pyaiolayout.h).
 *   Task and Future objects: TaskObj / FutureObj of Modules/_asynciomodule.c (offsets from the
 *   _asyncio module's DWARF, pyoffsets; 3.14+: its .AsyncioDebug block); loop._thread_id:
 *   the thread running a loop.
 * Tasks of a class not derived from the C _asyncio.Task (the pure-Python asyncio.tasks._PyTask,
 * used when the accelerator is missing) cannot be read this way: they are counted in
 * pytasks.unreadable, and the agent's python.tasks table serves them.
 */
#ifndef PROBING_PYTASKS_H
#define PROBING_PYTASKS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/frame.h"

struct pyproc;

enum pytask_state {
	PYTASK_RUNNING, /* its loop is running it now (asyncio.current_task(loop)) */
	PYTASK_WAITING, /* suspended, waiting on a future (task_fut_waiter) */
	PYTASK_READY,	/* suspended, scheduled to resume at its loop's next iteration */
};

#define PYTASK_MAX_DEPTH 64 /* coroutines per task at most */

struct pytask {
	uint64_t addr;		 /* the Task object: its id() */
	uint64_t loop;		 /* its event loop's id() */
	const char *name;	 /* Task.get_name() */
	enum pytask_state state; /* pending tasks only: done ones are not listed */
	const char *waits_on;	 /* type name of the future it waits on ("Future", "Task",
				   * "_GatheringFuture"), NULL when not waiting */
	uint64_t *awaits;	 /* the tasks that future stands for: a Task, or a gather's
				   * children that are tasks */
	int nawaits;
	struct frame *frames; /* its coroutine chain, innermost (the one waiting) first */
	int nframes;
	bool truncated; /* more than PYTASK_MAX_DEPTH coroutines, or the chain
				   * changed while it was read */
};

struct pyloop {
	uint64_t addr;	    /* the loop's id() */
	const char *type;   /* its class name: "_UnixSelectorEventLoop" */
	uint64_t ident;	    /* loop._thread_id: the thread running it (pthread_t), 0 if none */
	pid_t tid;	    /* that thread's OS tid (target's namespace), 0 if unknown */
	const char *thread; /* its name, NULL if unknown */
};

struct pytasks {
	struct pyloop *loops;
	int nloops;
	struct pytask *tasks;
	int ntasks;
	int unreadable; /* tasks of a class not derived from _asyncio.Task: not read */
	bool asyncio;	/* asyncio is imported in the process */
	char why[160];	/* with -ENOTSUP: why the tasks cannot be read from outside */
};

/*
 * Read every pending task of the process behind @pp (threads are refreshed first). Strings
 * are owned by @pp (valid until pyproc__free); the arrays by @out (pytasks__release).
 * Return 0 (no asyncio: 0 tasks, asyncio false), -ENOTSUP (the layout of this interpreter's
 * _asyncio is not known: @out->why says why), -ESRCH (the process is gone), -ENOMEM. A task that changes while it is read
 * is skipped or shown with what was read; nothing read from the target is trusted beyond
 * the checks (types by identity, bounded lengths).
 */
int pytasks__read(struct pyproc *pp, struct pytasks *out);

void pytasks__release(struct pytasks *t);

/* "running", "waiting", "ready". */
const char *pytask_state_name(enum pytask_state s);

#endif
