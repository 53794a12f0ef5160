/* SPDX-License-Identifier: MIT */
/*
 * live: what the live-diagnosis commands (inject, eval, repl, config, memory, list, query -p)
 * share: naming the target (-p PID, -t PID or -t HOST:PORT), finding the agent library,
 * making sure the agent runs in the target (injecting it when needed), connecting, and
 * turning every failure into one clear message (what failed, why, what to do).
 * Functions that print return a process exit status (EXIT_OK, EXIT_FAIL, EXIT_USAGE).
 */
#ifndef PROBING_LIVE_H
#define PROBING_LIVE_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include "live/agent_client.h"
#include "injector/inject.h"

#define LIVE_GIL_TIMEOUT_MS 5000 /* default wait for the GIL: then the target "looks hung" */

struct live_target {
	pid_t pid;	    /* the process, or 0 for a TCP target */
	char hostport[256]; /* "HOST:PORT" for a TCP target */
	const char *token;  /* TCP token ($PROBING_TOKEN) */
};

/* The options every command aimed at a live process shares. */
struct live_opts {
	const char *pid_arg; /* -p PID */
	const char *t_arg;   /* -t PID or -t HOST:PORT */
	int gil_ms;	     /* --timeout, for the commands that take it */
	bool children;	     /* --children ('C'), for the commands that take it */
};

#define LIVE_OPTS_INIT                        \
	{                                     \
		.gil_ms = LIVE_GIL_TIMEOUT_MS \
	}
#define LIVE_OPT_NOT_SHARED (-1)

/*
 * Handle option @ch (getopt_long's return) if every live command shares it: 'p', 't', 'v',
 * 'C' (--children, where the command lists it) and, with @timeout, 'T' (--timeout SECONDS).
 * Return EXIT_OK if it was handled, LIVE_OPT_NOT_SHARED if it is not one of them, EXIT_USAGE
 * for a bad value (printed).
 */
int live__shared_option(const char *cmd, int ch, bool timeout, struct live_opts *o);

/*
 * Fill @t from the -p value @pid_arg and/or the -t value @t_arg (a PID or HOST:PORT); one of
 * them is required. Return EXIT_OK or EXIT_USAGE (message printed).
 */
int live__target(const char *cmd, const char *pid_arg, const char *t_arg, struct live_target *t);

/* "process 1234 (python3)" or "the agent at HOST:PORT", into @buf. */
const char *live__describe(const struct live_target *t, char *buf, size_t len);

/*
 * The agent library to inject: $PROBING_AGENT, else libprobing-agent.so next to the probing
 * binary, else ../lib/probing/ relative to it (make install). NULL (message printed) if none
 * exists. The string is static.
 */
const char *live__agent_path(const char *cmd);

/*
 * Does @pid run CPython (a libpython mapped, or an executable exporting Py_IsInitialized)?
 * Return 1, 0, or -errno (-ESRCH: no such process).
 */
int live__is_python(pid_t pid);

enum live_agent_state {
	LIVE_ALREADY = 0, /* the agent was serving already */
	LIVE_INJECTED,	  /* loaded now */
	LIVE_RESTARTED,	  /* it was loaded but not serving (a fork child, preloaded off): started */
};

/*
 * Make sure the agent serves @pid: if its socket answers, nothing is done; if the library is
 * mapped but silent, its start function is called; otherwise it is injected. Waits until the
 * socket accepts connections. *@state and *@info (may be NULL) say what happened. Return
 * EXIT_OK, or EXIT_FAIL with the reason printed.
 */
int live__ensure_agent(const char *cmd, pid_t pid, enum live_agent_state *state,
		       struct inject_info *info);

/*
 * Print why connecting to the TCP agent of @t failed (@err from agent_client__connect_tcp):
 * what, why and what to do (a refused token, a host name that does not resolve, ...).
 */
void live__tcp_error(const char *cmd, const struct live_target *t, int err);

/*
 * Connect to the agent of @t; for a pid target with @inject set, inject it first if needed.
 * Return EXIT_OK and *@out, or EXIT_FAIL (message printed).
 */
int live__connect(const char *cmd, const struct live_target *t, bool inject,
		  struct agent_client **out);

/*
 * Send one request and check its answer. On success *@json is the result object (caller
 * frees) and EXIT_OK is returned; otherwise the failure is printed (the "looks hung" advice
 * when the GIL never came) and EXIT_FAIL returned.
 */
int live__request(const char *cmd, const struct live_target *t, struct agent_client *c,
		  const char *kind, const char *body, int gil_ms, int run_ms,
		  volatile sig_atomic_t *interrupt, char **json);

/*
 * Print what code run by an "eval" request wrote (its answer @json): its stdout on stdout,
 * flushed, then its stderr on stderr. The rest of the answer is the caller's.
 */
void live__print_output(const char *json);

/* Parse a --timeout value (seconds) into milliseconds. EXIT_OK or EXIT_USAGE. */
int live__parse_timeout(const char *cmd, const char *arg, int *ms);

#endif
