// SPDX-License-Identifier: MIT
/* Diagnostics on stderr: one line per message, prefixed with the program name. */
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "log.h"

int log_verbosity;

void log_printf(enum log_level level, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	size_t n;

	if ((int)level > log_verbosity)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	n = strlen(buf);
	/* One write per message, so lines from several threads do not interleave. */
	fprintf(stderr, "probing: %s%s", buf, (n && buf[n - 1] == '\n') ? "" : "\n");
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	int want = level == LIBBPF_WARN ? LOG_WARN : level == LIBBPF_INFO ? LOG_DEBUG : 3;

	if (want > log_verbosity)
		return 0;
	fputs("probing: libbpf: ", stderr);
	return vfprintf(stderr, fmt, ap);
}

void log_setup_libbpf(void)
{
	libbpf_set_print(libbpf_print);
}
