/* SPDX-License-Identifier: MIT */
/*
 * tools: what `probing mcp` lets an AI assistant do — the same diagnostics as the commands, run
 * as child processes of this binary (base/subcmd.h), so a tool that crashes or hangs leaves the
 * server running: list_processes, backtrace, record_and_summarize and query, read-only; eval
 * only when the server was started with --allow-eval. docs/serve.md lists them.
 */
#ifndef PROBING_MCP_TOOLS_H
#define PROBING_MCP_TOOLS_H

#include <signal.h>
#include <stdbool.h>

#include "base/util.h"

struct tools_opts {
	bool allow_eval; /* offer the eval tool */
};

/* Set the options; call once before the other functions. */
void tools__init(const struct tools_opts *o);

/* Append the tools offered, as the JSON array of MCP's tools/list result. 0 or -ENOMEM. */
int tools__list(struct strbuf *out);

/* Is @name a tool offered? */
bool tools__offered(const char *name);

/* A tool call in progress, as another thread or a signal handler sees it (tools__cancel). */
struct tool_call {
	volatile sig_atomic_t pid;	 /* the command it runs now (its process group), or 0 */
	volatile sig_atomic_t cancelled; /* set by tools__cancel: start no further command */
};

/*
 * Run tool @name with @args (a JSON object, or NULL for none), in the calling thread; calls
 * may run at once in several threads, each with its own @call (zeroed). On success append
 * the text of the result to @text and set *@is_error when the tool ran but failed (the
 * reason is then in @text, for the assistant to read); return 0. Return -ENOENT for a tool
 * that is not offered, -EINVAL for arguments that do not fit its schema (what is wrong in
 * @text), -ECANCELED when @call was cancelled before a command it needed could start.
 */
int tools__call(const char *name, const char *args, struct tool_call *call, struct strbuf *text,
		bool *is_error);

/*
 * Cancel @call: the command it runs is stopped (SIGTERM to its process group) and no other
 * starts for it. Async-signal-safe, from any thread.
 */
void tools__cancel(struct tool_call *call);

/* Remove the recordings record_and_summarize made (the server is ending). */
void tools__cleanup(void);

#endif
