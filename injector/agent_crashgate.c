// SPDX-License-Identifier: MIT
/*
 * agent_crashgate: 'probing run --crash' in a process that starts with the agent preloaded
 * (docs/live.md, "Crash capture"). The constructor installs the fatal-signal handlers
 * (agent_crash.c) before main(), and an audit hook that holds the program's first line until
 * a worker has installed the exception hooks (injector/py/crash.py): the start-up gate.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_crash.h"
#include "agent_int.h"

/* The start-up gate (crash_audit, below). */
#define CRASH_GATE_MS 10000

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;	 /* crash.install ran (or failed): the main thread goes on */
	bool used;	 /* the audit hook did its work: from now on it returns at once */
	char body[8300]; /* the request, made by the constructor */
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

void crash_gate_open(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.done = true;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

/*
 * 'probing run --crash': the exception hooks must be in place before the program's first
 * line. An audit hook (PEP 578), added before the interpreter starts, sees "cpython.run_file"
 * (run_module, run_command, run_stdin...), raised on the main thread just before that line
 * and outside any import: there it queues "crash.install" to the worker, lets the GIL go
 * and waits until the request has run (CRASH_GATE_MS at most), once. The program cannot
 * end while the worker runs Python (which could crash it as the interpreter finalizes). A
 * program that embeds Python and raises no such event gets no exception hooks.
 */
static int crash_audit(const char *event, PyObject *args, void *data)
{
	void *(*save)(void);
	void (*restore)(void *);
	struct timespec until;
	sigset_t all, old;
	bool queued;
	void *ts;

	(void)args;
	(void)data;
	if (gate.used || strncmp(event, "cpython.run_", 12))
		return 0;
	gate.used = true; /* the main thread, GIL held: no race with itself */
	*(void **)&save = dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
	*(void **)&restore = dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
	if (!save || !restore)
		return 0;
	/* The worker, if started here, must not take the program's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	queued = queue_request(-1, "crash.install", gate.body, strlen(gate.body), NULL, 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!queued) {
		fprintf(stderr,
			"probing: crash capture of uncaught exceptions is off in process %d: no "
			"worker thread\n",
			(int)getpid());
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += CRASH_GATE_MS / 1000;
	ts = save();
	pthread_mutex_lock(&gate.lock);
	while (!gate.done)
		if (pthread_cond_timedwait(&gate.cond, &gate.lock, &until))
			break;
	pthread_mutex_unlock(&gate.lock);
	restore(ts);
	return 0;
}

/*
 * Whether this interpreter may use a debug memory allocator (PYTHONMALLOC=*debug, -X dev,
 * PYTHONDEVMODE, a debug build): then an audit hook added before it starts is freed at exit
 * by another allocator than the one that made it, which aborts the process. Read from the
 * environment and /proc/self/cmdline (the constructor runs before main()).
 */
static bool debug_allocator_possible(void)
{
	const char *m = getenv("PYTHONMALLOC"), *d = getenv("PYTHONDEVMODE");
	char buf[8192];
	ssize_t n;
	size_t i;
	int fd;

	if ((m && *m && strcmp(m, "malloc") && strcmp(m, "pymalloc")) || (d && *d) ||
	    dlsym(RTLD_DEFAULT, "_Py_NegativeRefcount"))
		return true;
	fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	for (i = 0; i < (size_t)n; i += strlen(buf + i) + 1) {
		const char *a = buf + i;

		if (!strcmp(a, "-Xdev") ||
		    (!strcmp(a, "-X") && i + 3 < (size_t)n && !strncmp(buf + i + 3, "dev", 3)))
			return true;
	}
	return false;
}

/*
 * 'probing run --crash': install the fatal-signal handlers now (before main(), so that a crash
 * at any point is captured) and the audit hook that installs the Python side (the exception
 * hooks, crash.py) before the program's first line. Inherited by the Python processes the
 * program starts ("%p" in the file name is each one's pid).
 */
void crash_from_env(void)
{
	const char *file = getenv(CRASH_ENV_FILE), *bin = getenv(CRASH_ENV_BIN);
	char err[512], f[4096 + 16], b[4096 + 16];
	int (*add_hook)(int (*)(const char *, PyObject *, void *), void *);

	if (!file || !*file)
		return;
	if (agent_crash_install(bin, file, NULL, 0, err, sizeof(err)) < 0) {
		fprintf(stderr, "probing: crash capture is off in process %d: %s\n", (int)getpid(),
			err);
		return;
	}
	/*
	 * The exception hooks are installed by the worker while the program's first line waits
	 * at the audit hook. Without that hook (a debug allocator, or no PEP 578) the program
	 * would run meanwhile, and a short one could finalize the interpreter under the
	 * worker's feet: then fatal signals only.
	 */
	add_hook = dlsym(RTLD_DEFAULT, "PySys_AddAuditHook");
	if (!add_hook || debug_allocator_possible()) {
		fprintf(stderr,
			"probing: crash capture in process %d covers fatal signals only (uncaught "
			"exceptions need 'probing inject -p PID --crash' with a debug memory "
			"allocator)\n",
			(int)getpid());
		return;
	}
	json_str(f, sizeof(f), file);
	json_str(b, sizeof(b), bin);
	snprintf(gate.body, sizeof(gate.body), "{\"file\": %s, \"bin\": %s, \"boot\": true}", f, b);
	add_hook(crash_audit, NULL);
}
