// SPDX-License-Identifier: MIT
/* probing repl: an interactive Python prompt inside a running process. */
#include <stdio.h>

#include "base/cli.h"
#include "live/live.h"
#include "live/livejob.h"
#include "base/log.h"
#include "live/repl.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing repl -p PID [OPTIONS]\n"
		"       probing -t PID|HOST:PORT repl\n"
		"\n"
		"An interactive Python prompt whose code runs inside a running process, in its\n"
		"__main__ namespace, injecting the agent first if needed. Line editing and "
		"history\n"
		"(~/.probing_history); multi-line blocks end with an empty line, as in Python.\n"
		"Ctrl-C discards the current input, or interrupts code running in the target\n"
		"(KeyboardInterrupt in that code only). Ctrl-D leaves; the process and its agent\n"
		"keep running. Without a terminal, lines are read from stdin.\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID        the process\n"
		"  -t, --target T       a PID, or HOST:PORT of an agent serving TCP "
		"($PROBING_TOKEN)\n"
		"      --timeout SEC    how long to wait for the GIL before saying the target "
		"looks\n"
		"                       hung (default 5)\n"
		"      --no-inject      fail instead of loading the agent\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing repl -p 1234\n"
		"  >>> import threading; threading.enumerate()\n"
		"  >>> for t in threading.enumerate():\n"
		"  ...     print(t.name, t.native_id)\n"
		"  ...\n");
}

static int cmd_repl(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"target", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'},
		{"no-inject", no_argument, NULL, 'N'},
		{"children", no_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct live_opts lo = LIVE_OPTS_INIT;
	struct live_target t;
	struct agent_client *c = NULL;
	int ch, rc;
	bool inject = true;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, ":p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'N':
			inject = false;
			break;
		case 'C':
			return cli_usage_error("repl",
					       "a prompt talks to one process, so --children is "
					       "not for repl; to run code in every process "
					       "of a job: probing eval -p PID --children CODE");
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option("repl", ch, true, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option("repl", ch, argv);
			if (rc)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error("repl", "unexpected argument '%s'", argv[optind]);
	if (livejob__wanted(lo.pid_arg ? lo.pid_arg : lo.t_arg, false))
		return cli_usage_error("repl",
				       "a prompt talks to one process: give one PID (to run "
				       "code in several: probing eval -p PID,PID... CODE)");
	rc = live__target("repl", lo.pid_arg, lo.t_arg, &t);
	if (rc)
		return rc;
	rc = live__connect("repl", &t, inject, &c);
	if (rc)
		return rc;
	return repl__run("repl", &t, c, lo.gil_ms);
}

COMMAND(repl, cmd_repl, "interactive Python prompt inside a running process", 80);
