/* SPDX-License-Identifier: MIT */
/*
 * subcmd: run one of probing's own commands (this very binary, /proc/self/exe) as a child
 * process and collect what it prints — for the servers (`probing serve`, `probing mcp`), which
 * answer requests with the commands users run by hand: the same code, the same messages, and
 * a command that crashes or hangs takes nothing down with it. The child gets the SQL or other
 * input on stdin, runs in a process group of its own (stopped as a whole), with a time limit
 * and a cap on what it may print.
 */
#ifndef PROBING_SUBCMD_H
#define PROBING_SUBCMD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/util.h"

#define SUBCMD_MAX_OUT (16u << 20) /* default cap on stdout kept */
#define SUBCMD_MAX_ERR (64u << 10) /* cap on stderr kept */
#define SUBCMD_KILL_MS 3000	   /* after SIGTERM, SIGKILL this much later */

struct subcmd_opts {
	const char *input; /* given on its stdin (NULL: /dev/null) */
	size_t input_len;
	size_t max_out; /* stdout kept at most (0: SUBCMD_MAX_OUT); beyond, the child is stopped */
	int timeout_ms; /* stop the child after this long (0: never) */
	int watch_fd;	/* -1, or a connected socket: its peer hanging up stops the child */
	/*
	 * Optional: stream stdout instead of keeping it, one chunk at a time; a non-zero return
	 * stops the child (as a hang-up would).
	 */
	int (*on_out)(const char *data, size_t n, void *ctx);
	/* Optional: the child's pid (its process group) once it runs, and 0 once it is reaped. */
	void (*on_pid)(pid_t pid, void *ctx);
	void *ctx;
};

struct subcmd_result {
	struct strbuf out; /* what it printed on stdout (unless streamed) */
	struct strbuf err; /* on stderr, at most SUBCMD_MAX_ERR bytes */
	int status;	   /* exit status, or 128 + the signal that ended it */
	bool truncated;	   /* stdout went past max_out: the child was stopped */
	bool timed_out;	   /* stopped at the time limit */
	bool hung_up;	   /* stopped because watch_fd's peer left or on_out said stop */
};

/*
 * Run `probing ARGS...` (@args: NULL-terminated, without "probing") and wait for it. Stopping
 * the child means SIGTERM to its process group, SIGKILL SUBCMD_KILL_MS later. Its file
 * descriptors are 0-2 only; its signal mask and dispositions are the defaults.
 * Return 0 with *@r filled (free with subcmd__result_free) whatever the child's status, or
 * -errno when it could not be started (*@r is then empty).
 */
int subcmd__run(const char *const *args, const struct subcmd_opts *o, struct subcmd_result *r);

void subcmd__result_free(struct subcmd_result *r);

/*
 * Stop the child @pid (its process group) as subcmd__run does on a time limit: for another
 * thread that was given the pid by on_pid (a "cancel" request). Async-signal-safe (a kill).
 * Return 0 or -errno.
 */
int subcmd__stop(pid_t pid);

#endif
