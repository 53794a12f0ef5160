// SPDX-License-Identifier: MIT
/* Diagnostics on stderr: one line per message, prefixed with the program name, escaped. */
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "base/escape.h"
#include "base/log.h"

int log_verbosity;

/*
 * Print "probing[ CMD]: <message>\n" on stderr, the message formatted from @fmt and @ap, made
 * one line and escaped: the one implementation of log_printf and log_cmd.
 */
static void log_vline(const char *cmd, const char *fmt, va_list ap)
{
	struct strbuf line = {0};
	const char *text;
	char buf[4096];
	size_t n, i;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	/*
	 * Messages name things read from targets and recordings (commands, thread and file
	 * names, SQLite errors quoting a crafted view): one line, nothing that could drive the
	 * terminal. Out of memory, control characters become '?'.
	 */
	if (!text_escape(&line, buf, n, 0)) {
		text = line.buf;
	} else {
		for (i = 0; i < n; i++)
			if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
				buf[i] = '?';
		text = buf;
	}
	/* One write per message, so lines from several threads do not interleave. */
	fprintf(stderr, "probing%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", text);
	sb_free(&line);
}

void log_printf(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	if ((int)level > log_verbosity)
		return;
	va_start(ap, fmt);
	log_vline(NULL, fmt, ap);
	va_end(ap);
}

void log_cmd(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vline(cmd, fmt, ap);
	va_end(ap);
}

static bool libbpf_quiet;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	int want = level == LIBBPF_WARN ? LOG_WARN : level == LIBBPF_INFO ? LOG_DEBUG : 3;

	if (libbpf_quiet)
		want = 3;
	if (want > log_verbosity)
		return 0;
	/* libbpf's own messages start with "libbpf: " already. */
	fputs(strncmp(fmt, "libbpf: ", 8) ? "probing: libbpf: " : "probing: ", stderr);
	return vfprintf(stderr, fmt, ap);
}

void log_setup_libbpf(void)
{
	libbpf_set_print(libbpf_print);
}

void log_libbpf_quiet(bool quiet)
{
	libbpf_quiet = quiet;
}
