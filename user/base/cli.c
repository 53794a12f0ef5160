// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"

/* The command table (COMMAND(), cli.h): weak, defined by the linker when a command exists. */
extern const struct command __start_probing_commands[] __attribute__((weak));
extern const struct command __stop_probing_commands[] __attribute__((weak));

int cli_run_command(int argc, char **argv)
{
	const struct command *c;

	for (c = __start_probing_commands; c < __stop_probing_commands; c++)
		if (!strcmp(c->name, argv[0]))
			return c->fn(argc, argv);
	pr_warn("unknown command '%s'", argv[0]);
	return EXIT_USAGE;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_cmd(cmd, "%s", msg);
	fprintf(stderr, "Try 'probing %s --help'.\n", cmd);
	return EXIT_USAGE;
}

int cli_parse_id(const char *cmd, const char *opt, const char *arg, pid_t *out)
{
	long v;

	if (parse_long(arg, 1, INT_MAX, &v))
		return cli_usage_error(cmd, "invalid %s '%s': expected a positive integer", opt,
				       arg);
	*out = v;
	return 0;
}

int cli_parse_last(const char *cmd, const char *arg, double *out)
{
	if (parse_duration(arg, 1, 3650 * 86400.0, out))
		return cli_usage_error(
			cmd, "invalid --last '%s': expected a duration (90s, 5m, 2h, 1d)", arg);
	return 0;
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : NULL;

	if (c == ':')
		return cli_usage_error(cmd, "option '%s' needs a value", arg ? arg : "?");
	if (optopt) /* an unknown short option */
		return cli_usage_error(cmd, "unknown option '-%c'", optopt);
	return cli_usage_error(cmd, "unknown option '%s'", arg ? arg : "?");
}

int cli_command_after_dashdash(const char *cmd, int argc, char **argv, char ***command)
{
	if (optind >= argc)
		return 0;
	/* "--" ends the options; getopt leaves optind after it. */
	if (strcmp(argv[optind - 1], "--"))
		return cli_usage_error(cmd,
				       "unexpected argument '%s' (put the command to run after "
				       "'--')",
				       argv[optind]);
	*command = argv + optind;
	return 0;
}

void cli_getopt_reset(void)
{
	optind = 0; /* 0 makes glibc re-initialise its internal state */
	opterr = 0;
}

int cli_parse_pids(const char *s, pid_t **pids, int *nr)
{
	char *copy = strdup(s), *tok, *save = NULL;
	pid_t *out = NULL, *tmp;
	int n = 0, err = 0;
	long v;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (parse_long(tok, 1, 0x7fffffff, &v)) {
			err = -EINVAL;
			goto cleanup;
		}
		tmp = realloc(out, (n + 1) * sizeof(*out));
		if (!tmp) {
			err = -ENOMEM;
			goto cleanup;
		}
		out = tmp;
		out[n++] = v;
	}
	if (!n)
		err = -EINVAL;
cleanup:
	free(copy);
	if (err) {
		free(out);
		return err;
	}
	*pids = out;
	*nr = n;
	return 0;
}

int cli_check_pid(const char *cmd, pid_t pid)
{
	char state;

	if (kill(pid, 0) && errno == ESRCH) {
		log_cmd(cmd, "no such process: %d", pid);
		fputs("Check the PID (e.g. with 'ps aux' or 'pgrep -f NAME').\n", stderr);
		return EXIT_FAIL;
	}
	state = procinfo_state(pid, 0);
	if (state == 'Z' || state == 'X') {
		log_cmd(cmd, "process %d has exited (it is a zombie)", pid);
		return EXIT_FAIL;
	}
	return 0;
}
