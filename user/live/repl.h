/* SPDX-License-Identifier: MIT */
/*
 * repl: an interactive Python prompt whose code runs inside the target (through the agent).
 * Line editing and history (~/.probing_history) with libedit; the agent decides when a
 * multi-line block is complete (codeop.compile_command, as Python's own prompt does).
 * Ctrl-C discards the current input (or interrupts code that is running in the target);
 * Ctrl-D leaves, with the target and its agent left running exactly as they were.
 * Without a terminal on stdin, lines are read from stdin without prompts or editing.
 */
#ifndef PROBING_REPL_H
#define PROBING_REPL_H

#include "live/live.h"

/*
 * Run the prompt against @t until end of input. @c is a connected client (taken over and
 * freed). Return the exit status (EXIT_OK; EXIT_FAIL if the agent went away).
 */
int repl__run(const char *cmd, const struct live_target *t, struct agent_client *c, int gil_ms);

#endif
