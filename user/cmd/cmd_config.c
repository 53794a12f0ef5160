// SPDX-License-Identifier: MIT
/* probing config: show or change the agent's settings at run time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livejob.h"
#include "base/log.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing config -p PID[,PID...] [--children] [NAME=VALUE ...]\n"
		"\n"
		"Show the settings of the agent running in a process (name, value, default,\n"
		"description), or change some first. Settings take effect at once and last until\n"
		"the process exits. Helpers inside the agent may add their own settings.\n"
		"The agent must be running (probing inject -p PID).\n"
		"With several PIDs or --children (each PID and all its descendants now), every\n"
		"Python process in turn, under a header \"==> rank 3 (pid 1234) <==\".\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]  the process(es)\n"
		"      --children       also every descendant of each PID (its Python ones)\n"
		"  -t, --target T       a PID, or HOST:PORT of an agent serving TCP "
		"($PROBING_TOKEN)\n"
		"      --timeout SEC    how long to wait for the GIL (default 5)\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing config -p 1234\n"
		"  probing config -p 1234 memory_top=50 output_limit=4194304\n"
		"  probing config -p $(pgrep -f torchrun) --children torch_every=1\n");
}

/* The agent's answers come from inside the target: escaped (escape.h). */
static int print_setting(char **v, int n, void *ctx)
{
	struct strbuf e[4] = {{0}};
	int i;

	printf("%-22s %-12s %-12s %s\n", text_str(&e[0], v[0], 0),
	       v[1] ? text_str(&e[1], v[1], 0) : "null", v[2] ? text_str(&e[2], v[2], 0) : "null",
	       v[3] ? text_str(&e[3], v[3], 0) : "");
	for (i = 0; i < 4; i++)
		sb_free(&e[i]);
	return 0;
}

static int print_error(char **v, int n, void *ctx)
{
	struct strbuf e = {0};

	log_cmd("config", "%s", text_str(&e, v[0], 0));
	sb_free(&e);
	(*(int *)ctx)++;
	return 0;
}

struct config_req {
	const char *body;
	int gil_ms;
};

/* Send the settings request @ctx (a config_req) to the agent of @t and print its answer. */
static int config_one(const struct live_target *t, const void *ctx)
{
	const struct config_req *r = ctx;
	static const char *const spaths[] = {"$.name", "$.value", "$.default", "$.doc"};
	static const char *const epaths[] = {"$"};
	struct agent_client *c = NULL;
	char *json = NULL;
	int rc, errors = 0;

	rc = live__connect("config", t, false, &c);
	if (rc)
		goto cleanup;
	rc = live__request("config", t, c, "config", r->body, r->gil_ms, 30000, NULL, &json);
	if (rc)
		goto cleanup;
	jq_each(json, "$.errors", epaths, 1, print_error, &errors);
	printf("%-22s %-12s %-12s %s\n", "NAME", "VALUE", "DEFAULT", "DESCRIPTION");
	jq_each(json, "$.settings", spaths, 4, print_setting, NULL);
	if (errors)
		rc = EXIT_FAIL;
cleanup:
	free(json);
	agent_client__free(c);
	return rc;
}

static int cmd_config(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},	   {"target", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'}, {"children", no_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},	   {NULL, 0, NULL, 0},
	};
	struct live_opts lo = LIVE_OPTS_INIT;
	struct live_sel sel;
	struct config_req r;
	struct strbuf body = {0};
	int ch, rc, i;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, ":p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option("config", ch, true, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option("config", ch, argv);
			if (rc)
				return rc;
		}
	}
	rc = sb_puts(&body, "{\"set\": {");
	for (i = optind; !rc && i < argc; i++) {
		char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i]) {
			sb_free(&body);
			return cli_usage_error("config", "'%s' is not NAME=VALUE", argv[i]);
		}
		*eq = '\0';
		rc = sb_puts(&body, i > optind ? ", " : "");
		rc = rc ?: jq_quote(&body, argv[i]);
		rc = rc ?: sb_puts(&body, ": ");
		rc = rc ?: jq_quote(&body, eq + 1);
		*eq = '=';
	}
	if (rc || sb_puts(&body, "}}")) {
		sb_free(&body);
		return EXIT_FAIL;
	}
	rc = livejob__select("config", &lo, true, &sel);
	if (!rc) {
		r.body = sb_str(&body);
		r.gil_ms = lo.gil_ms;
		rc = livejob__run("config", &sel, config_one, &r);
	}
	livejob__sel_free(&sel);
	sb_free(&body);
	return rc;
}

COMMAND(config, cmd_config, "show or change the agent's settings in a process", 110);
