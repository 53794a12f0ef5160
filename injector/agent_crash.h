/* SPDX-License-Identifier: MIT */
/*
 * agent_crash: crash capture inside the target (probing inject/run --crash; docs/live.md
 * "Crash capture"). On a fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) the handler
 * starts 'probing crashdump' (vfork + execve: async-signal-safe), which reads every thread's
 * Python and native stacks and locals from outside into a snapshot file and prints a summary
 * on stderr; then it puts back the disposition it found and lets the signal take its course,
 * so that the process ends as it would have (the same signal, the same core dump, or the
 * previous handler, e.g. faulthandler's, run as before). Uncaught Python exceptions are the
 * business of injector/py/crash.py, which calls the same program.
 */
#ifndef PROBING_AGENT_CRASH_H
#define PROBING_AGENT_CRASH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* The environment of 'probing run --crash': the file (with %p for the pid) and the program. */
#define CRASH_ENV_FILE "PROBING_CRASH"
#define CRASH_ENV_BIN  "PROBING_CRASH_BIN"
/* The file when none is given: in the working directory of the process. */
#define CRASH_DEFAULT_FILE "probing-crash-%p.db"

/*
 * "SIGSEGV"... for the fatal signals the handlers catch, NULL for any other signal. Shared by
 * the handler (async-signal-safe) and the crash file's writer (user/live/crashsnap.c).
 */
static inline const char *crash_signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV:
		return "SIGSEGV";
	case SIGBUS:
		return "SIGBUS";
	case SIGABRT:
		return "SIGABRT";
	case SIGFPE:
		return "SIGFPE";
	case SIGILL:
		return "SIGILL";
	}
	return NULL;
}

/*
 * Install the fatal-signal handlers (once; later calls only change the file): on a crash,
 * run @bin (an absolute path to probing) to write @file (absolute; "%p" is replaced by the
 * pid). Return 0 (installed now), 1 (was installed: the file is replaced, the old one is in
 * @was) or -errno with why in @err. Not async-signal-safe; any thread.
 */
int agent_crash_install(const char *bin, const char *file, char *was, size_t waslen, char *err,
			size_t errlen);

/* Whether the handlers are installed; the file they write into @file. */
bool agent_crash_installed(char *file, size_t len);

/* In a child after fork(): its own pid in the file name ("%p") and in the capture. */
void agent_crash_atfork_child(void);

#endif
