/* SPDX-License-Identifier: MIT */
/*
 * tools: what `probing mcp` lets an AI assistant do — the same diagnostics as the commands, run
 * as child processes of this binary (base/subcmd.h), so a tool that crashes or hangs leaves the
 * server running: list_processes, backtrace, record_and_summarize and query, read-only; eval
 * only when the server was started with --allow-eval. docs/serve.md lists them.
 */
#ifndef PROBING_MCP_TOOLS_H
#define PROBING_MCP_TOOLS_H

#include <stdbool.h>

#include "base/util.h"

struct tools_opts {
	bool allow_eval; /* offer the eval tool */
};

/* Set the options; call once before the other functions. */
void tools__init(const struct tools_opts *o);

/* Append the tools offered, as the JSON array of MCP's tools/list result. 0 or -ENOMEM. */
int tools__list(struct strbuf *out);

/*
 * Run tool @name with @args (a JSON object, or NULL for none). On success append the text of
 * the result to @text and set *@is_error when the tool ran but failed (the reason is then in
 * @text, for the assistant to read); return 0. Return -ENOENT for a tool that is not offered
 * and -EINVAL for arguments that do not fit its schema, with what is wrong in @text.
 */
int tools__call(const char *name, const char *args, struct strbuf *text, bool *is_error);

/* Stop the command a tool is running, if any (SIGTERM to it): async-signal-safe. */
void tools__stop(void);

/* Remove the recordings record_and_summarize made (the server is ending). */
void tools__cleanup(void);

#endif
