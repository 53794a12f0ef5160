/* SPDX-License-Identifier: MIT */
/*
 * pyaiolayout: where the _asyncio module's objects (Modules/_asynciomodule.c: FutureObj,
 * TaskObj) and the interpreter's lists of tasks keep what the task reader (pytasks.c) needs.
 *
 * 3.8-3.13: from the _asyncio module's DWARF, in the version's table (pyoffsets); tasks are
 * found through asyncio's registries. 3.14 rewrote the module: every task of the C class is
 * on a circular list (struct llist_node) of the thread that made it (_PyThreadStateImpl), or
 * of the interpreter once that thread exited, and each thread holds the loop and task it runs
 * now. The module publishes where (struct _Py_AsyncioModuleDebugOffsets, the ELF section
 * .AsyncioDebug of the _asyncio extension, or of the interpreter where it is built in: 3.15).
 * That block is read from the file, and checked like any data from a target.
 */
#ifndef PROBING_PYAIOLAYOUT_H
#define PROBING_PYAIOLAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pyproc;

struct py_aio_layout {
	/* FutureObj / TaskObj (a Task is a Future with more fields after the Future's) */
	uint32_t fut_loop;	  /* the event loop */
	uint32_t fut_state;	  /* int: 0 pending, 1 cancelled, 2 finished */
	uint32_t task_fut_waiter; /* the future it waits on, or NULL */
	uint32_t task_coro;	  /* the coroutine it runs */
	uint32_t task_name;	  /* str, or an int N for a name never asked for (Task-N) */
	/* 3.14+ (lists true): the lists of tasks and what each thread runs now */
	bool lists;
	uint32_t task_node;	  /* TaskObj.task_node: its struct llist_node */
	uint32_t task_is_task;	  /* char: 1 in a Task */
	uint32_t is_tasks_head;	  /* PyInterpreterState: tasks of threads that exited */
	uint32_t ts_tasks_head;	  /* _PyThreadStateImpl: the tasks the thread made */
	uint32_t ts_running_loop; /* PyObject *: the loop the thread runs now, or NULL */
	uint32_t ts_running_task; /* PyObject *: the task that loop runs now, or NULL */
};

/*
 * The layout for the interpreter of @pp into @lay. Return 0, or -ENOTSUP with @why (@len
 * bytes) saying why not: no _asyncio offsets for this version, or (3.14+) no .AsyncioDebug
 * block found in the process's mappings, or one that is not believable (a size or offset
 * out of bounds, or a TaskObj not laid out as 3.14's and 3.15's are).
 */
int pyaio__layout(struct pyproc *pp, struct py_aio_layout *lay, char *why, size_t len);

/*
 * The layout the .AsyncioDebug block @block (@size bytes, read from a file) describes, into
 * @lay. Return 0, or -ENOTSUP with @why (@len bytes) when the block is short, has a size or
 * offset out of bounds, or does not describe 3.14's and 3.15's TaskObj.
 */
int pyaio__from_block(const void *block, size_t size, struct py_aio_layout *lay, char *why,
		      size_t len);

#endif
