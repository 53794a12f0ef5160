// SPDX-License-Identifier: MIT
/* probing inject: load the agent into a running Python process (idempotent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "cli.h"
#include "jsonq.h"
#include "live.h"
#include "log.h"
#include "repl.h"
#include "util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing inject -p PID [--listen ADDR] [--repl]\n"
		"\n"
		"Load the probing agent into a running CPython 3.8-3.13 process and print its\n"
		"status. Nothing is loaded twice: if the agent already runs, its status is "
		"printed.\n"
		"The agent is a small library loaded with dlopen() by one of the process's "
		"threads\n"
		"(borrowed for about a millisecond through ptrace, then put back exactly as it "
		"was);\n"
		"it serves the abstract Unix socket @probing-PID to the process's owner and root.\n"
		"Only the owner of the process or root may inject.\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID        the process\n"
		"  -t, --target PID     the same\n"
		"      --listen ADDR    also serve TCP on ADDR: PORT or HOST:PORT (host 127.0.0.1\n"
		"                       unless given; 0.0.0.0 for every interface). Clients need "
		"the\n"
		"                       printed token: PROBING_TOKEN=... probing -t HOST:PORT eval "
		"...\n"
		"      --repl           then open an interactive prompt in the process\n"
		"  -v                   more diagnostics: timings, the thread used (-vv: details)\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing inject -p 1234\n"
		"  probing inject -p 1234 --repl\n"
		"  probing inject -p 1234 --listen 9400\n"
		"  PROBING_TOKEN=<token> probing -t 127.0.0.1:9400 eval 'threading.enumerate()'\n");
}

static void print_time(const char *label, double t)
{
	char buf[64];
	time_t s = (time_t)t;
	struct tm tm;

	if (!t || !localtime_r(&s, &tm))
		return;
	strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
	printf("  %-8s %s\n", label, buf);
}

static int cmd_inject(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},	  {"target", required_argument, NULL, 't'},
		{"listen", required_argument, NULL, 'L'}, {"repl", no_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},	  {NULL, 0, NULL, 0},
	};
	const char *pid_arg = NULL, *t_arg = NULL, *listen = NULL;
	struct live_target t;
	struct agent_client *c = NULL;
	struct inject_info info;
	enum live_agent_state st;
	char desc[128], *json = NULL, *v;
	double since = 0;
	bool repl = false;
	int ch, rc;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, "p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			pid_arg = optarg;
			break;
		case 't':
			t_arg = optarg;
			break;
		case 'L':
			listen = optarg;
			break;
		case 'R':
			repl = true;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("inject", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("inject", "unexpected argument '%s'", argv[optind]);
	rc = live__target("inject", pid_arg, t_arg, &t);
	if (rc)
		return rc;
	if (!t.pid)
		return cli_usage_error("inject", "inject needs a process id, not HOST:PORT");
	if (listen && (!*listen || strlen(listen) > 200))
		return cli_usage_error("inject", "bad --listen address '%s'", listen);

	rc = live__ensure_agent("inject", t.pid, &st, &info);
	if (rc)
		return rc;
	rc = live__connect("inject", &t, false, &c);
	if (rc)
		return rc;
	/* "hello" needs no GIL: the status prints even when the target is hung. */
	rc = live__request("inject", &t, c, "hello", "", 3000, 3000, NULL, &json);
	if (rc)
		goto cleanup;
	live__describe(&t, desc, sizeof(desc));
	if (st == LIVE_ALREADY)
		printf("agent: already running in %s\n", desc);
	else if (st == LIVE_RESTARTED)
		printf("agent: started in %s (the library was loaded but not serving)\n", desc);
	else
		printf("agent: loaded into %s in %.1f ms (thread %d held %.2f ms%s)\n", desc,
		       info.total_ns / 1e6, info.tid, info.stopped_ns / 1e6,
		       info.copied ? "; library copied into its filesystem" : "");
	v = jq_text(json, "$.python");
	if (v) {
		v[strcspn(v, " ")] = '\0';
		printf("  %-8s %s\n", "python", v);
	} else {
		printf("  %-8s %s\n", "python", "not initialized yet");
	}
	free(v);
	v = jq_text(json, "$.socket");
	printf("  %-8s %s\n", "socket", v ? v : "?");
	free(v);
	jq_double(json, "$.since", &since);
	print_time("since", since);
	v = jq_text(json, "$.error");
	if (v)
		printf("  %-8s %s\n", "error", v);
	free(v);
	if (listen) {
		free(json);
		json = NULL;
		rc = live__request("inject", &t, c, "listen", listen, 3000, 3000, NULL, &json);
		if (rc)
			goto cleanup;
	}
	v = jq_text(json, listen ? "$.listen" : "$.tcp");
	if (v) {
		char *tok = jq_text(json, "$.token");

		printf("  %-8s %s%s%s\n", "tcp", v, tok ? "  token " : "", tok ? tok : "");
		free(tok);
	}
	free(v);
	fflush(stdout);
	if (repl) {
		rc = repl__run("inject", &t, c, LIVE_GIL_TIMEOUT_MS);
		c = NULL; /* repl__run frees it */
	}
cleanup:
	free(json);
	agent_client__free(c);
	return rc;
}

COMMAND(inject, cmd_inject, "load the agent into a running Python process", 60);
