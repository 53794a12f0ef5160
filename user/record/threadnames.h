/* SPDX-License-Identifier: MIT */
/*
 * threadnames: the Python threading names of the recorded processes' threads, read by a thread
 * of its own while those threads live.
 *
 * CPython keeps a thread's name in its threading.Thread object, not in the OS: it can only
 * be read from the process's memory, and only while the thread runs. The recorder handles
 * samples some time after they were taken (unwinding and symbolizing can fall behind, the
 * first samples of a library take long), so a thread that lived 30 ms is gone by then.
 * This module reads threading._active of each watched process right after the sampler
 * reports new threads in it (the BPF map thread_births, and a wake-up through the ring
 * buffer births_wake): every 5 ms for 100 ms, and for as long as threads started there still
 * wait for the GIL to run (threading._limbo); in between it sleeps. It keeps each
 * (pid, tid) -> name until a second after the recorder says the thread has exited. A child
 * forked by a watched process (new_children) is watched at once, through its parent's
 * interpreter.
 *
 * Thread-safe: every function may be called from any thread (the recorder's; the interpreter
 * finder's calls threadnames__watch); the reads happen on ours.
 */
#ifndef PROBING_THREADNAMES_H
#define PROBING_THREADNAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct threadnames;

/*
 * Start the reading thread. @births_fd: the sampler's thread_births map (tgid -> number of
 * threads created), or -1 to read only on request; @children_fd: its new_children map (child
 * -> parent, entries deleted once seen), or -1; @changes: a counter the sampler increments
 * after each change of either (the maps are read only when it moved), or NULL (read at every
 * round); @births_rb_fd: a ring buffer the sampler writes to, with a wake-up, after each such
 * change (the thread then sleeps while no thread starts), or -1 (it looks every 5 ms). NULL
 * with errno on failure.
 */
struct threadnames *threadnames__start(int births_fd, int children_fd, const uint64_t *changes,
				       int births_rb_fd);

/* Stop the thread and free everything. NULL is a no-op. */
void threadnames__free(struct threadnames *tn);

struct pyproc;

/*
 * Read the names of @pid's Python threads from now on, through a copy of @pp (the interpreter
 * of the program it ran at @since_ns, monotonic: when that program began, or any time after;
 * the caller keeps @pp). Idempotent while @pid is watched. 0 or -errno.
 */
int threadnames__watch(struct threadnames *tn, pid_t pid, const struct pyproc *pp,
		       uint64_t since_ns);

/*
 * Stop reading @pid (it exec'd or exited) if its watched program began before @before_ns
 * (UINT64_MAX: whichever). The names read stay until threadnames__drop. Return false if a
 * newer program is watched (kept: the interpreter finder watches the new program of an exec
 * before the recorder handles the exec), true otherwise.
 */
bool threadnames__unwatch(struct threadnames *tn, pid_t pid, uint64_t before_ns);

/* Drop every name kept for @pid (its program changed, or its last samples were handled). */
void threadnames__drop(struct threadnames *tn, pid_t pid);

/*
 * The Python name of thread @ns_tid (its tid in its own PID namespace, as Python knows it) of
 * @pid into @buf, if one was read. Return true if so.
 */
bool threadnames__lookup(struct threadnames *tn, pid_t pid, pid_t ns_tid, char *buf, size_t size);

/* The thread exited and its name was taken: drop it (a second later: samples of its way
 * out of the kernel may follow). */
void threadnames__forget(struct threadnames *tn, pid_t pid, pid_t ns_tid);

/* Re-read every watched process soon (names can change: thread.name = ...). */
void threadnames__refresh(struct threadnames *tn);

/* A number that changes whenever a name is added or changed: look up again only then. */
uint64_t threadnames__version(struct threadnames *tn);

#endif
