// SPDX-License-Identifier: MIT
/* probing list: the processes in which an agent is running; with --all every Python process. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "injector/agent.h"
#include "live/agent_client.h"
#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/util.h"
#include "live/pyscan.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing list [--all] [--format table|json] [--no-header]\n"
		"\n"
		"List the processes in which the probing agent is running: the owners of the\n"
		"listening abstract sockets @probing-... of this network namespace\n"
		"(/proc/net/unix), among the processes you may inspect. Columns: PID, since when\n"
		"the agent runs, Python version, TCP address if it serves one, command line. An\n"
		"agent that does not answer within a second is listed with PYTHON '(busy?)'.\n"
		"\n"
		"With --all, every Python process you may inspect, with the agent or not, grouped\n"
		"by distributed job (from the launchers' environment variables: torchrun, Slurm,\n"
		"Open MPI, PMI): columns PID, RANK, AGENT (yes/no), JOB, COMMAND; a job's "
		"launcher\n"
		"(torchrun) is listed first with RANK 'launcher', a rank's child processes that\n"
		"inherited its rank (DataLoader workers) as RANK 'N:worker'.\n"
		"\n"
		"Options:\n"
		"  -a, --all         every Python process, not only those with the agent\n"
		"  -f, --format F    table (default) or json: {\"processes\": [...], \"jobs\": "
		"[...]}\n"
		"                    with pid, ppid, uid, agent, command, job, rank, local_rank,\n"
		"                    world_size, host of each process (docs/serve.md)\n"
		"      --no-header   no header line\n"
		"  -h, --help        this help\n"
		"\n"
		"Examples:\n"
		"  probing list\n"
		"  probing list --all\n"
		"  probing list --no-header | awk '{print $1}'\n");
}

static char *cmdline(pid_t pid)
{
	char fn[64], *s;
	size_t len = 0, i;

	snprintf(fn, sizeof(fn), "/proc/%d/cmdline", pid);
	s = read_file(fn, 4096, &len);
	if (!s)
		return NULL;
	for (i = 0; i + 1 < len; i++)
		if ((unsigned char)s[i] < 0x20)
			s[i] = ' '; /* NULs between arguments, and newlines of 'python -c' code */
	return s;
}

/* --all and --format json: the Python processes (with an agent only, without --all). */
static int list_python(bool all, bool json, bool header)
{
	struct pyscan_proc *procs = NULL;
	struct strbuf out = {0}, e[2] = {{0}};
	int n = 0, i, k, err;

	err = pyscan__list(&procs, &n);
	if (err) {
		log_cmd("list", "cannot list the processes: %s", strerror(-err));
		return EXIT_FAIL;
	}
	if (!all) {
		for (i = k = 0; i < n; i++) {
			if (procs[i].agent) {
				struct pyscan_proc t = procs[k];

				procs[k++] = procs[i];
				procs[i] = t;
			}
		}
		for (i = k; i < n; i++) {
			free(procs[i].command);
			free(procs[i].job);
			jobinfo_free(&procs[i].id);
		}
		n = k;
	}
	if (json) {
		err = pyscan__json(procs, n, &out);
		if (!err)
			fputs(sb_str(&out), stdout);
	} else {
		if (header && n)
			printf("%-8s %-8s %-5s %-24s %s\n", "PID", "RANK", "AGENT", "JOB",
			       "COMMAND");
		for (i = 0; i < n; i++) {
			char rank[16] = "-";

			if (procs[i].launcher)
				snprintf(rank, sizeof(rank), "launcher");
			else if (procs[i].worker)
				snprintf(rank, sizeof(rank), "%d:worker", procs[i].id.rank);
			else if (procs[i].id.rank >= 0)
				snprintf(rank, sizeof(rank), "%d", procs[i].id.rank);
			/* The job and the command line come from the target: escaped. */
			printf("%-8d %-8s %-5s %-24s %s\n", (int)procs[i].pid, rank,
			       procs[i].agent ? "yes" : "no",
			       procs[i].job ? text_str(&e[0], procs[i].job, 0) : "-",
			       text_str(&e[1], procs[i].command, 0));
		}
		if (!n)
			log_cmd("list", "no Python process%s",
				all ? " that you may inspect" : " with a running agent");
	}
	pyscan__free(procs, n);
	sb_free(&out);
	sb_free(&e[0]);
	sb_free(&e[1]);
	if (err) {
		log_cmd("list", "out of memory");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

static int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {
		{"all", no_argument, NULL, 'a'},
		{"format", required_argument, NULL, 'f'},
		{"no-header", no_argument, NULL, 'H'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct strbuf e[3] = {{0}};
	pid_t *pids = NULL;
	bool header = true, all = false, json = false;
	int ch, n = 0, i, shown = 0, err;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, ":af:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'a':
			all = true;
			break;
		case 'f':
			if (strcmp(optarg, "table") && strcmp(optarg, "json"))
				return cli_usage_error(
					"list", "unknown --format '%s': use table or json", optarg);
			json = !strcmp(optarg, "json");
			break;
		case 'H':
			header = false;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("list", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("list", "unexpected argument '%s'", argv[optind]);
	if (all || json)
		return list_python(all, json, header);
	err = pyscan__agent_pids(&pids, &n);
	if (err) {
		log_cmd("list", "cannot read /proc/net/unix: %s", strerror(-err));
		return EXIT_FAIL;
	}
	for (i = 0; i < n; i++) {
		struct agent_client *c = NULL;
		struct agent_reply r = {0};
		char since[32] = "-", *ver = NULL, *tcp = NULL, *cmd;
		double t = 0;
		long long rpid = 0;
		time_t s;
		struct tm tm;

		if (i && pids[i] == pids[i - 1])
			continue;
		cmd = cmdline(pids[i]);
		if (!cmd)
			continue; /* exited meanwhile */
		if (!agent_client__connect_pid(pids[i], 1000, &c) &&
		    !agent_client__request(c, "hello", "", 1000, 1000, NULL, &r) &&
		    r.type == FRAME_RESULT && !jq_int(r.data, "$.pid", &rpid)) {
			ver = jq_text(r.data, "$.python");
			tcp = jq_text(r.data, "$.tcp");
			if (!jq_double(r.data, "$.since", &t)) {
				s = (time_t)t;
				if (localtime_r(&s, &tm))
					strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S", &tm);
			}
			if (ver)
				ver[strcspn(ver, " ")] = '\0';
		} else {
			ver = strdup("(busy?)");
		}
		agent_reply__free(&r);
		agent_client__free(c);
		if (header && !shown++)
			printf("%-8s %-19s %-9s %-21s %s\n", "PID", "SINCE", "PYTHON", "TCP",
			       "COMMAND");
		else if (!header)
			shown++;
		/* The command line, and what the agent answered, come from the target. */
		printf("%-8d %-19s %-9s %-21s %s\n", pids[i], since,
		       ver ? text_str(&e[0], ver, 0) : "-", tcp ? text_str(&e[1], tcp, 0) : "-",
		       text_str(&e[2], cmd, 0));
		free(ver);
		free(tcp);
		free(cmd);
	}
	free(pids);
	for (i = 0; i < (int)ARRAY_SIZE(e); i++)
		sb_free(&e[i]);
	if (!shown)
		log_cmd("list",
			"no process with a running agent (load one with 'probing inject -p PID')");
	return EXIT_OK;
}

COMMAND(list, cmd_list, "processes with the agent running (--all: every Python process)", 100);
