// SPDX-License-Identifier: MIT
/* probing backtrace: every thread's current stack of a running process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backtrace.h"
#include "cli.h"
#include "log.h"
#include "sampler.h"
#include "util.h"

#define CMD "backtrace"

static const char usage_text[] =
	"Usage: probing backtrace -p PID [--native] [--depth N]\n"
	"\n"
	"Print the current stack of every thread of a running process: its Python frames\n"
	"(CPython 3.8-3.13), read from outside without stopping it or loading anything into\n"
	"it, and with --native its native frames too (C extensions, libraries, the\n"
	"interpreter), merged the way 'probing record' merges them. For --native each thread\n"
	"is held still with ptrace for a moment (well under a millisecond) while its registers\n"
	"and stack are copied; nothing in it is changed and an interrupted system call resumes\n"
	"as if nothing happened. A hung process is fine: no cooperation from it is needed.\n"
	"A process that runs no Python gets its native stacks (--native is implied).\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID     the process (-t PID works too)\n"
	"      --native      also native frames (needs ptrace: same user, or root)\n"
	"      --depth N     Python frames per thread at most (default 1024)\n"
	"  -v, --verbose     more diagnostics\n"
	"  -h, --help        this help\n"
	"\n"
	"Examples:\n"
	"  probing backtrace -p 1234\n"
	"  sudo probing backtrace -p 1234 --native\n"
	"  probing query -p 1234 \"SELECT thread, depth, func, lineno FROM python.backtrace\"\n";

enum { OPT_NATIVE = 256, OPT_DEPTH };

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"target", required_argument, NULL, 't'},
	{"native", no_argument, NULL, OPT_NATIVE},
	{"depth", required_argument, NULL, OPT_DEPTH},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{},
};

int cmd_backtrace(int argc, char **argv)
{
	struct bt_opts o = {.py_depth = SAMPLER_MAX_PYDEPTH};
	struct bt_process *p = NULL;
	long pid = 0, v;
	int c, err;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":p:t:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 't':
			if (parse_long(optarg, 1, 0x7fffffff, &pid))
				return cli_usage_error(CMD, "'%s' is not a process id", optarg);
			break;
		case OPT_NATIVE:
			o.native = true;
			break;
		case OPT_DEPTH:
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &v))
				return cli_usage_error(CMD, "depth '%s' must be from 1 to %d",
						       optarg, SAMPLER_MAX_PYDEPTH);
			o.py_depth = v;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return EXIT_OK;
		default:
			return cli_bad_option(CMD, c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if (!pid)
		return cli_usage_error(CMD, "say which process: -p PID");
	if (cli_check_pid(CMD, pid))
		return EXIT_FAIL;
	err = backtrace__collect(pid, &o, &p);
	if (err == -ENOENT) {
		/* Not Python: its native stacks are what there is. */
		o.native = true;
		err = backtrace__collect(pid, &o, &p);
	}
	if (err)
		return EXIT_FAIL;
	backtrace__print(p, stdout);
	backtrace__free(p);
	return EXIT_OK;
}

COMMAND(backtrace, cmd_backtrace, "print every thread's current stack (Python and native)", 50);
