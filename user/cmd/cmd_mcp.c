// SPDX-License-Identifier: MIT
/* probing mcp: a Model Context Protocol server on stdio, for AI assistants. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "mcp/mcp.h"
#include "mcp/tools.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing mcp [--allow-eval] [-v]\n"
		"\n"
		"Serve probing's diagnostics to an AI assistant with the Model Context Protocol:\n"
		"JSON-RPC 2.0 messages on stdin and stdout, one per line (the assistant starts\n"
		"this command itself). Tools, each run as a probing command of its own:\n"
		"  list_processes         the Python processes of this machine, grouped by job\n"
		"  backtrace              every thread's stack of a process (and its children,\n"
		"                         or its whole job), read from outside\n"
		"  record_and_summarize   sample a process for N seconds (needs root), then the\n"
		"                         top functions by self and inclusive samples, threads,\n"
		"                         and waits when the recording has thread states\n"
		"  query                  SQL on a recording (read-only) or a live process's "
		"tables\n"
		"  eval                   Python code run inside a process: only with "
		"--allow-eval\n"
		"Nothing else is offered: the tools read, and eval, which can change the process,\n"
		"must be allowed. Up to 4 calls run at once, each answered when it ends;\n"
		"notifications/cancelled stops one. Recordings made by record_and_summarize are\n"
		"removed when the server ends. See docs/serve.md for a client configuration, e.g.\n"
		"  {\"mcpServers\": {\"probing\": {\"command\": \"probing\", \"args\": "
		"[\"mcp\"]}}}\n"
		"\n"
		"Options:\n"
		"      --allow-eval  offer the eval tool\n"
		"  -v, --verbose     log each tool call on stderr\n"
		"  -h, --help        show this help\n");
}

static const struct option options[] = {
	{"allow-eval", no_argument, NULL, 'E'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void on_signal(int sig)
{
	mcp__stop();
}

static int cmd_mcp(int argc, char **argv)
{
	struct tools_opts o = {0};
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: reading ends */
	int c, err;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":vh", options, NULL)) != -1) {
		switch (c) {
		case 'E':
			o.allow_eval = true;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("mcp", c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("mcp", "unexpected argument '%s'", argv[optind]);
	tools__init(&o);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	pr_info("mcp: serving on stdio%s", o.allow_eval ? " (eval allowed)" : "");
	err = mcp__serve(stdin, stdout);
	tools__cleanup();
	if (err) {
		pr_warn("mcp: cannot write to stdout: %s", strerror(-err));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

COMMAND(mcp, cmd_mcp, "Model Context Protocol server on stdio, for AI assistants", 140);
