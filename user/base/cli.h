/* SPDX-License-Identifier: MIT */
/* Command-line plumbing shared by the cmd_*.c files: the command table, usage errors. */
#ifndef PROBING_CLI_H
#define PROBING_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <sys/types.h>

/* probing's version (--version, the servers' self-description). */
#ifndef PROBING_VERSION
#define PROBING_VERSION "0.1.0"
#endif

/* Exit statuses (docs/design.md §3): 1 = the operation failed, 2 = usage error. */
#define EXIT_OK	   0
#define EXIT_FAIL  1
#define EXIT_USAGE 2

/* One sub-command. @fn gets argv with argv[0] = the command name; returns the exit status. */
struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
	int order; /* position in 'probing --help' */
};

/*
 * Register a command: each cmd_*.c says COMMAND(record, cmd_record, "...", 10) once. The
 * entries land in one ELF section that main.c walks, so adding a command touches no
 * central table.
 */
#define COMMAND(name_, fn_, summary_, order_)                                      \
	static const struct command command_##name_                                \
		__attribute__((used, section("probing_commands"), aligned(8))) = { \
			.name = #name_, .fn = fn_, .summary = summary_, .order = order_}

/*
 * Run the registered command argv[0] with @argc/@argv, as 'probing ARGV...' would (one
 * command handing its result to another, e.g. 'record -o x.svg' drawing the flame graph).
 * Return its exit status, or EXIT_USAGE (printed) when no command has that name.
 */
int cli_run_command(int argc, char **argv);

/*
 * Print "probing CMD: <message>" and the hint to use --help on stderr; return EXIT_USAGE.
 */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * After getopt_long (with "+" in its option string): the command to run that follows "--"
 * in @argv, for the commands that take either -p PID or "-- COMMAND" (record, watch).
 * *@command is argv + optind, or stays as it was when nothing follows the options.
 * Returns 0, or the usage error (said) of an argument not after "--".
 */
int cli_command_after_dashdash(const char *cmd, int argc, char **argv, char ***command);

/*
 * Parse @arg, the value of option @opt of @cmd, as a process or thread id into *@out.
 * Return 0, or EXIT_USAGE with "invalid --pid 'x': expected a positive integer" printed.
 */
int cli_parse_id(const char *cmd, const char *opt, const char *arg, pid_t *out);

/*
 * Parse @arg, the value of --last of @cmd (how much of the end of a recording to read), as a
 * duration (parse_duration: 90s, 5m, 2h, 1d; from a second to ten years) into *@out seconds.
 * Return 0, or EXIT_USAGE with "invalid --last 'x': expected a duration" printed.
 */
int cli_parse_last(const char *cmd, const char *arg, double *out);

/*
 * Turn what getopt_long returned for a bad option ('?' or ':') into a usage error that names
 * the option. Call with opterr = 0 set. Returns EXIT_USAGE.
 */
int cli_bad_option(const char *cmd, int c, char **argv);

/*
 * Reset getopt's state and parse @argv with getopt_long, quietly (opterr = 0); a leading '+'
 * in @optstring stops at the first non-option (used by commands that take "-- CMD ARGS").
 */
void cli_getopt_reset(void);

/*
 * Parse "PID[,PID...]" into a malloc'd array (*@pids, *@nr). Each must be a positive integer.
 * Return 0, -EINVAL (not a list of numbers) or -ENOMEM.
 */
int cli_parse_pids(const char *s, pid_t **pids, int *nr);

/*
 * Check that @pid names a live process. Return 0, or print a clear message (what, why,
 * what to do) for @cmd and return EXIT_FAIL.
 */
int cli_check_pid(const char *cmd, pid_t pid);

#endif
