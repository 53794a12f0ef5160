// SPDX-License-Identifier: MIT
/*
 * libprobing-agent.so: the in-process side of live diagnosis (docs/design.md §6, docs/live.md).
 *
 * The constructor only starts one thread (no Python call, no allocation beyond what
 * pthread_create does) and returns. That thread ("probing-agent") serves the abstract Unix
 * socket "@probing-<pid>" (and TCP when asked) with a poll() loop and never touches the GIL,
 * so it always answers "hello" and "list", even when the target never lets the GIL go.
 * Requests that need Python are queued to a worker thread ("probing-python", started on
 * the first such request), which runs them one at a time under PyGILState_Ensure. The
 * CPython C API is resolved with dlsym at run time (RTLD_DEFAULT, then the libpython found
 * with dl_iterate_phdr), so one build serves CPython 3.8-3.13 with a static or a shared
 * libpython. The C side stays small: the worker loads the embedded Python helpers
 * (injector/py/NAME.py) on its first request and hands every request to
 * probing_agent.handle(kind, body).
 *
 * Rules that keep the target safe:
 *  - the agent's threads block every signal (the target's handlers never run on them);
 *  - Python is never called before Py_IsInitialized() nor once finalization began (an atexit
 *    callback registered by the helper tells us), and never with one of our locks held
 *    while waiting for the GIL;
 *  - after fork() the child has no agent threads: an atfork handler closes the inherited
 *    sockets and marks the agent stopped (probing_agent_start() starts it again there);
 *  - a request whose client went away (or cancelled) before the GIL came is dropped;
 *  - a running request whose client disconnects or sends 'C' gets KeyboardInterrupt raised
 *    in it (PyThreadState_SetAsyncExc) by a small watchdog thread ("probing-watch", started
 *    on first use), which waits for the GIL on its own so that nobody else blocks; but only
 *    while it runs code the helper declared interruptible (user code of eval, read-only
 *    kinds): never into the loading of the helpers, nor into code that changes the agent's
 *    state, which an exception at any bytecode could leave half done. A request cancelled
 *    before or between such sections does not enter the next one;
 *  - a cancelled request blocked in C (the interrupt waits for the call to return) does not
 *    block the others: its worker is retired (left to it) and a fresh one serves the queue
 *    (struct worker).
 *
 * This file is the entry and the lifecycle (start, fork, constructor, destructor) and holds
 * the state; the modules that do the work are listed in agent_int.h.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "agent_crash.h"
#include "agent_int.h"

#define EXPORT __attribute__((visibility("default")))

struct agent_state ag = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.listen_fd = -1,
	.tcp_fd = -1,
	.wake = {-1, -1},
};

double wall_time(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

double mono_time(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void json_str(char *out, size_t len, const char *s)
{
	size_t o = 0;

	if (len < 3)
		return;
	out[o++] = '"';
	for (; s && *s && o + 8 < len; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = c;
		} else if (c < 0x20) {
			o += snprintf(out + o, len - o, "\\u%04x", c);
		} else {
			out[o++] = c;
		}
	}
	out[o++] = '"';
	out[o] = '\0';
}

void wake_io(void)
{
	char c = 'w';

	if (ag.wake[1] >= 0) {
		ssize_t r = write(ag.wake[1], &c, 1);
		(void)r;
	}
}

void agent_stop(void)
{
	ag.py_gone = true;
	ag.stop = true;
	wake_io();
}

/*
 * Start serving (idempotent): 0 started, 1 already running, -errno. Called by the
 * constructor, and by the injector (inject__call) when the library is mapped but not serving
 * (in a child after fork, or preloaded without PROBING=1).
 */
EXPORT int probing_agent_start(void)
{
	sigset_t all, old;
	int err = 0;

	pthread_mutex_lock(&ag.lock);
	if (ag.running) {
		err = 1;
		goto cleanup;
	}
	ag.stop = false;
	/* The thread inherits this mask: it never runs the target's signal handlers. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&ag.thread, NULL, agent_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!err) {
		pthread_detach(ag.thread);
		ag.running = true;
	}
cleanup:
	pthread_mutex_unlock(&ag.lock);
	return err;
}

/* fork(): the child has no agent thread and must not serve the parent's sockets. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&ag.lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&ag.lock);
}

static void atfork_child(void)
{
	int i;

	agent_crash_atfork_child();
	/* Only this thread exists in the child: no agent, worker or watchdog. Reset the locks
	 * (another thread may have held them at fork time) and forget the parent's sockets
	 * and queue (leaked on purpose: no free() of state other threads were using). */
	pthread_mutex_init(&ag.lock, NULL);
	workers_atfork_child();
	for (i = 0; i < MAX_CLIENTS; i++) {
		if (ag.clients[i].state != CL_FREE)
			close_fd(&ag.clients[i].fd);
		memset(&ag.clients[i], 0, sizeof(ag.clients[i]));
		ag.clients[i].fd = -1;
	}
	close_fd(&ag.listen_fd);
	close_fd(&ag.tcp_fd);
	close_fd(&ag.wake[0]);
	close_fd(&ag.wake[1]);
	ag.running = false;
	ag.stop = false;
	ag.tcp_addr[0] = '\0';
	auth_atfork_child();
	memset(ag.env_token, 0, sizeof(ag.env_token));
	ag.env_listen[0] = '\0';
	ag.accept_pause = 0;
	ag.io_thread_set = false;
}

/*
 * 'probing run --listen' hands the agent its address and token in PROBING_LISTEN and
 * PROBING_TOKEN. Take both out of the environment before the program runs: otherwise every
 * child it starts (workers, subprocesses, whatever it hands its environment to) would carry
 * the token, and os.environ would show it. The token's bytes are also wiped where they
 * were, so /proc/PID/environ no longer holds it. Only called from the constructor of a
 * preloaded library: the process is still single-threaded, before main().
 */
static void take_listen_env(void)
{
	char *v = getenv("PROBING_LISTEN");
	size_t n;

	/* Without PROBING_LISTEN a PROBING_TOKEN is not ours (a client's, for -t): left alone. */
	if (!v || !*v)
		return;
	snprintf(ag.env_listen, sizeof(ag.env_listen), "%s", v);
	v = getenv("PROBING_TOKEN");
	if (v) {
		n = strlen(v);
		if (n >= 16 && n < sizeof(ag.env_token))
			memcpy(ag.env_token, v, n);
		explicit_bzero(v, n);
	}
	unsetenv("PROBING_LISTEN");
	unsetenv("PROBING_TOKEN");
}

__attribute__((constructor)) static void agent_init(void)
{
	const char *pre = getenv("LD_PRELOAD"), *en = getenv("PROBING");

	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	if (pre && strstr(pre, AGENT_LIB_PREFIX)) {
		/* Preloaded ('probing run', or inherited by a child): serve only when asked, and
		 * only in Python processes (not in the shell or tools a job starts). */
		if (!en || strcmp(en, "1"))
			return;
		if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized"))
			return;
		take_listen_env();
		probing_agent_start();
		crash_from_env();
		return;
	}
	probing_agent_start();
}

__attribute__((destructor)) static void agent_fini(void)
{
	/* exit(): Python is finalized (or about to vanish). Stop touching it. */
	agent_stop();
}
