// SPDX-License-Identifier: MIT
/* probing eval: run Python code in a running process and print the result. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livejob.h"
#include "base/log.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing eval -p PID[,PID...] [--children] [OPTIONS] CODE\n"
		"       probing -t PID|HOST:PORT eval CODE\n"
		"\n"
		"Run Python CODE inside a running process, in its __main__ namespace (the "
		"script's\n"
		"globals are visible), injecting the agent first if it is not loaded. Statements\n"
		"print what they write to stdout/stderr; an expression last prints its repr(), as\n"
		"Python's prompt does ('import gc; len(gc.get_objects())' prints the count), but\n"
		"not the None of a call that printed ('print(2)' prints 2). An exception prints\n"
		"its traceback on stderr and exits with status 1. CODE '-' is read from stdin.\n"
		"The code runs on the agent's own thread, holding the GIL like any thread.\n"
		"\n"
		"With several PIDs or --children (each PID and all its descendants now: the\n"
		"ranks of a job under their launcher), CODE runs in every Python process in\n"
		"turn, each one's output under a header \"==> rank 3 (pid 1234) <==\" (the rank\n"
		"from its environment: torchrun, Slurm, Open MPI, PMI). The exit status is 1 if\n"
		"it failed in any rank (a process without a rank among ranks, the job's launcher,\n"
		"is reported, not counted: torchrun has no torch.distributed of its own).\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]  the process(es)\n"
		"      --children       also every descendant of each PID (its Python ones)\n"
		"  -t, --target T       a PID, or HOST:PORT of an agent serving TCP (token in\n"
		"                       $PROBING_TOKEN)\n"
		"      --timeout SEC    how long to wait for the GIL before saying the target "
		"looks\n"
		"                       hung (default 5)\n"
		"      --no-inject      fail instead of loading the agent\n"
		"  -v                   more diagnostics (repeat for more)\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing eval -p 1234 'import gc; len(gc.get_objects())'\n"
		"  probing eval -p 1234 'import threading; print(threading.enumerate())'\n"
		"  probing eval -p 1234 'model.training'          # a global of the script\n"
		"  probing eval -p 1234 - < snippet.py\n"
		"  probing eval -p $(pgrep -f torchrun) --children "
		"'torch.distributed.get_rank()'\n");
}

static char *read_stdin(void)
{
	struct strbuf sb = {0};
	char buf[65536];
	ssize_t n;

	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || sb_append(&sb, buf, n)) {
			sb_free(&sb);
			return NULL;
		}
	}
	return sb.buf ? sb.buf : strdup("");
}

/* What eval runs, and how. */
struct eval_req {
	const char *code;
	bool inject;
	int gil_ms;
};

/* Run @r->code in @t and print what came back; an exit status. */
static int eval_one(const struct live_target *t, const void *ctx)
{
	const struct eval_req *r = ctx;
	struct agent_client *c = NULL;
	struct strbuf body = {0};
	char *json = NULL, *v;
	int rc;

	rc = live__connect("eval", t, r->inject, &c);
	if (rc)
		goto cleanup;
	if (sb_puts(&body, "{\"mode\": \"eval\", \"code\": ") || jq_quote(&body, r->code) ||
	    sb_puts(&body, "}")) {
		rc = EXIT_FAIL;
		goto cleanup;
	}
	/* Once the GIL came, the code may run as long as it likes (Ctrl-C here interrupts it:
	 * the agent sees the connection close and raises KeyboardInterrupt in it). */
	rc = live__request("eval", t, c, "eval", sb_str(&body), r->gil_ms, -1, NULL, &json);
	if (rc)
		goto cleanup;
	live__print_output(json);
	v = jq_text(json, "$.value");
	if (v)
		printf("%s\n", v);
	free(v);
	v = jq_text(json, "$.exception");
	if (v) {
		fflush(stdout);
		fputs(v, stderr);
		free(v);
		rc = EXIT_FAIL;
	}
cleanup:
	free(json);
	sb_free(&body);
	agent_client__free(c);
	return rc;
}

static int cmd_eval(int argc, char **argv)
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
	struct eval_req r = {.inject = true};
	struct live_sel sel;
	char *code = NULL;
	int ch, rc;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, "+:p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'N':
			r.inject = false;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option("eval", ch, true, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option("eval", ch, argv);
			if (rc)
				return rc;
		}
	}
	if (optind >= argc)
		return cli_usage_error("eval", "no CODE to run");
	if (optind + 1 < argc)
		return cli_usage_error("eval", "give CODE as one argument (quote it)");
	rc = livejob__select("eval", &lo, true, &sel);
	if (rc) {
		livejob__sel_free(&sel);
		return rc;
	}
	code = strcmp(argv[optind], "-") ? strdup(argv[optind]) : read_stdin();
	if (!code) {
		pr_warn("eval: cannot read the code: %s", strerror(errno));
		livejob__sel_free(&sel);
		return EXIT_FAIL;
	}
	r.code = code;
	r.gil_ms = lo.gil_ms;
	rc = livejob__run("eval", &sel, eval_one, &r);
	livejob__sel_free(&sel);
	free(code);
	return rc;
}

COMMAND(eval, cmd_eval, "run Python code in a running process and print the result", 70);
