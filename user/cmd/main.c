// SPDX-License-Identifier: MIT
/* probing: dispatch "probing [GLOBAL OPTIONS] COMMAND [OPTIONS]" to the command table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"

/* The commands registered with COMMAND() (cli.h), in link order. Weak: the linker defines
 * them only when the section exists, i.e. when at least one command is linked in. */
extern const struct command __start_probing_commands[] __attribute__((weak));
extern const struct command __stop_probing_commands[] __attribute__((weak));
#define commands    __start_probing_commands
#define nr_commands ((size_t)(__stop_probing_commands - __start_probing_commands))

static void usage(FILE *f)
{
	size_t i, j;
	int last = -1000000, next;

	fprintf(f, "Usage: probing [-v] [-t TARGET] COMMAND [OPTIONS] [ARGS]\n"
		   "\n"
		   "A profiler and live-diagnosis tool for Python and native processes.\n"
		   "\n"
		   "Commands:\n");
	/* In ascending .order (a selection walk: the table is a dozen entries). */
	for (i = 0; i < nr_commands; i++) {
		next = 1000000;
		for (j = 0; j < nr_commands; j++)
			if (commands[j].order > last && commands[j].order < next)
				next = commands[j].order;
		for (j = 0; j < nr_commands; j++)
			if (commands[j].order == next)
				fprintf(f, "  %-11s %s\n", commands[j].name, commands[j].summary);
		last = next;
	}
	fprintf(f, "\n"
		   "Global options:\n"
		   "  -t TARGET   the target of COMMAND: a PID (same as 'COMMAND -p PID')\n"
		   "              or HOST:PORT of an agent serving TCP\n"
		   "  -v          more diagnostics on stderr (repeat for more)\n"
		   "  -h, --help  this help; 'probing COMMAND --help' documents each command\n"
		   "  --version   print the version\n"
		   "\n"
		   "Examples:\n"
		   "  sudo probing record -p 1234 -d 10 -o app.db\n"
		   "  probing flamegraph -i app.db -o app.svg\n"
		   "  probing query -i app.db \"SELECT * FROM samples ORDER BY count DESC LIMIT "
		   "5\"\n");
}

int main(int argc, char **argv)
{
	const char *target = NULL;
	char **args;
	size_t i;
	int a = 1, n;

	log_setup_libbpf();
	/* Global options come before the command name. */
	while (a < argc && argv[a][0] == '-') {
		if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) {
			usage(stdout);
			return EXIT_OK;
		} else if (!strcmp(argv[a], "--version")) {
			printf("probing %s\n", PROBING_VERSION);
			return EXIT_OK;
		} else if (!strncmp(argv[a], "-v", 2) &&
			   strspn(argv[a] + 1, "v") == strlen(argv[a] + 1)) {
			log_verbosity += strlen(argv[a]) - 1;
		} else if (!strcmp(argv[a], "-t") || !strcmp(argv[a], "--target")) {
			if (a + 1 >= argc) {
				pr_warn("option '%s' needs a value (a PID or HOST:PORT)", argv[a]);
				return EXIT_USAGE;
			}
			target = argv[++a];
		} else {
			pr_warn("unknown option '%s'", argv[a]);
			fputs("Try 'probing --help'.\n", stderr);
			return EXIT_USAGE;
		}
		a++;
	}
	if (a >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	for (i = 0; i < nr_commands; i++) {
		if (strcmp(argv[a], commands[i].name))
			continue;
		if (!target)
			return commands[i].fn(argc - a, argv + a);
		/* "probing -t T CMD ARGS" is "probing CMD -t T ARGS". */
		n = argc - a;
		args = calloc(n + 3, sizeof(*args));
		if (!args) {
			pr_warn("out of memory");
			return EXIT_FAIL;
		}
		args[0] = argv[a];
		args[1] = "-t";
		args[2] = (char *)target;
		memcpy(args + 3, argv + a + 1, (n - 1) * sizeof(*args));
		n = commands[i].fn(n + 2, args);
		free(args);
		return n;
	}
	pr_warn("unknown command '%s'", argv[a]);
	fputs("Try 'probing --help'.\n", stderr);
	return EXIT_USAGE;
}
