/* SPDX-License-Identifier: MIT */
/* Diagnostics on stderr. stdout carries data only. */
#ifndef PROBING_LOG_H
#define PROBING_LOG_H

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

#define pr_warn(...)  log_printf(LOG_WARN, __VA_ARGS__)
#define pr_info(...)  log_printf(LOG_INFO, __VA_ARGS__)
#define pr_debug(...) log_printf(LOG_DEBUG, __VA_ARGS__)

/* Route libbpf's messages through our levels (warnings always, the rest with -vv). */
void log_setup_libbpf(void);

#endif
