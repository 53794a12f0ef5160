/* SPDX-License-Identifier: MIT */
/* Diagnostics on stderr. stdout carries data only. */
#ifndef PROBING_LOG_H
#define PROBING_LOG_H

#include <stdbool.h>
#include <stdarg.h>

enum log_level {
	LOG_WARN = 0, /* always shown */
	LOG_INFO = 1, /* shown with -v */
	LOG_DEBUG = 2 /* shown with -vv */
};

/* Current verbosity; commands raise it for each -v. */
extern int log_verbosity;

/*
 * Print "probing: <message>\n" on stderr if @level <= log_verbosity. The message is one
 * line: a trailing newline is dropped, and control characters (newlines too) and invalid
 * UTF-8 in it are escaped (text_escape, escape.h), so names from a target are safe in it.
 */
void log_printf(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A diagnostic of the command @cmd (its name, e.g. "record"; a constant of the program):
 * print "probing CMD: <message>\n" on stderr, always (whatever log_verbosity), as one line
 * escaped as by log_printf, so text read from a target (names, paths, agent replies) or a
 * recording cannot forge a line nor drive the terminal. A message of several lines is one
 * call per line; a line meant to follow without the prefix (a hint) is not for log_cmd.
 */
void log_cmd(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define pr_warn(...)  log_printf(LOG_WARN, __VA_ARGS__)
#define pr_info(...)  log_printf(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) log_printf(LOG_DEBUG, __VA_ARGS__)

/* Route libbpf's messages through our levels (warnings always, the rest with -vv). */
void log_setup_libbpf(void);

/*
 * While @quiet, every libbpf message, warnings included, waits for -vv: for the attempts whose
 * failure is expected on some kernels and has a fallback (a hook a kernel lacks, tracefs not
 * mounted). Not thread-safe: call from the thread that loads BPF objects.
 */
void log_libbpf_quiet(bool quiet);

#endif
