// SPDX-License-Identifier: MIT
/* The diagnostics on stderr (base/log.c): prefix, one line, escaped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/log.h"
#include "test.h"

static char captured[8192];
static FILE *capture_file;
static int saved_fd = -1;

/* Send what is written on fd 2 into a temporary file until capture_end. */
static int capture_begin(void)
{
	fflush(stderr);
	capture_file = tmpfile();
	if (!capture_file)
		return -1;
	saved_fd = dup(STDERR_FILENO);
	if (saved_fd < 0 || dup2(fileno(capture_file), STDERR_FILENO) < 0)
		return -1;
	return 0;
}

/* Restore fd 2; return what was written meanwhile (NUL-terminated). */
static const char *capture_end(void)
{
	size_t n;

	fflush(stderr);
	dup2(saved_fd, STDERR_FILENO);
	close(saved_fd);
	rewind(capture_file);
	n = fread(captured, 1, sizeof(captured) - 1, capture_file);
	captured[n] = '\0';
	fclose(capture_file);
	return captured;
}

TEST(log_cmd_prefixes_the_command)
{
	REQUIRE(!capture_begin());
	log_cmd("record", "no such process: %d", 999999);
	CHECK_STR(capture_end(), "probing record: no such process: 999999\n");
}

TEST(log_cmd_escapes_the_arguments)
{
	/* A process name with a newline (a forged second line), a terminal escape sequence and
	 * a byte that is not UTF-8: one line, every one visible. */
	REQUIRE(!capture_begin());
	log_cmd("inject", "process %d (%s) is not a Python process", 42,
		"x\nprobing inject: ok\x1b[2J\xff");
	CHECK_STR(capture_end(), "probing inject: process 42 (x\\nprobing inject: ok\\x1b[2J\\xff) "
				 "is not a Python process\n");
}

TEST(log_cmd_drops_a_trailing_newline_and_ignores_verbosity)
{
	int v = log_verbosity;

	log_verbosity = -1; /* below LOG_WARN: pr_warn is silent, log_cmd is not */
	REQUIRE(!capture_begin());
	pr_warn("not shown");
	log_cmd("watch", "tab\there, é kept\n");
	log_verbosity = v;
	CHECK_STR(capture_end(), "probing watch: tab\\there, é kept\n");
}

TEST(pr_warn_shares_the_escaping)
{
	REQUIRE(!capture_begin());
	pr_warn("thread %s", "a\rb\x7f");
	CHECK_STR(capture_end(), "probing: thread a\\rb\\x7f\n");
}

TEST(usage_error_escapes_and_adds_the_hint)
{
	REQUIRE(!capture_begin());
	CHECK_EQ(cli_usage_error("top", "bad value '%s' for -F", "1\n2"), EXIT_USAGE);
	CHECK_STR(capture_end(), "probing top: bad value '1\\n2' for -F\n"
				 "Try 'probing top --help'.\n");
}

TEST_MAIN()
