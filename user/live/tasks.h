/* SPDX-License-Identifier: MIT */
/*
 * tasks: the asyncio tasks of a running process as the live table python.tasks and as
 * 'probing backtrace --tasks' prints them. Read from outside (python/pytasks.h) when that
 * works; the agent's own python.tasks (injector/py/tasks.py) when it runs and the outside
 * read cannot see every task. Both give the same rows, one per coroutine of each task:
 *
 *   [thread, tid, loop, task, name, state, waits_on, awaits, depth, func, file, lineno]
 *
 * thread/tid: the thread running the task's event loop (NULL if not running); loop, task:
 * the objects' id(); state: running, waiting, ready; waits_on: the type name of the future
 * it waits on; awaits: the id()s of the tasks that future stands for ("1,2"); depth 0 = the
 * innermost coroutine (a task whose coroutine cannot be read has one row, depth NULL).
 */
#ifndef PROBING_LIVE_TASKS_H
#define PROBING_LIVE_TASKS_H

#include <stdio.h>
#include <sys/types.h>

struct strbuf;

#define TASKS_COLUMNS "thread,tid,loop,task,name,state,waits_on,awaits,depth,func,file,lineno"

/*
 * Append to @rows the JSON array of python.tasks rows of @pid, read from outside. Return 0,
 * or -ESRCH (no such process), -ENOENT (no CPython 3.8-3.13 to read), -ENOTSUP (tasks that
 * only the agent can read: pure-Python tasks, or no _asyncio layout for this interpreter),
 * -errno. The livedb hook of python.tasks.
 */
int tasks__json_rows(pid_t pid, struct strbuf *rows);

/*
 * Print the asyncio tasks of @pid, grouped by event loop and the thread running it, each
 * task with what it waits on and its coroutine chain, awaited tasks under the tasks awaiting
 * them. Read from outside; through the agent when it runs and the outside read cannot see
 * every task (a note on stderr says which). Return 0 or -errno (message printed).
 */
int tasks__print(pid_t pid, FILE *f);

/*
 * Print python.tasks rows (@json: {"rows": [...]}, from either source) as tasks__print does.
 * Return 0 or -EINVAL (not such rows).
 */
int tasks__print_rows(const char *json, FILE *f);

#endif
