// SPDX-License-Identifier: MIT
/*
 * probing crashdump: capture a process that is crashing, started by the crash handler that
 * 'probing inject --crash' or 'probing run --crash' installed in it (injector/agent_crash.c,
 * injector/py/crash.py), while the crashing thread waits for it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/util.h"
#include "bpf/sampler.h"
#include "live/backtrace.h"
#include "live/crashsnap.h"

#define CMD "crashdump"

#define MAX_EXC 64 /* --exception given at most this often */

static const char usage_text[] =
	"Usage: probing crashdump -p PID --tid TID (--signal SIG | --exception JSON...) -o FILE\n"
	"\n"
	"Capture a crashing process: every thread's Python and native stacks and the local\n"
	"variables of its Python frames (read from outside, as 'probing backtrace --native\n"
	"--locals' reads them) go to the SQLite file FILE, and a summary to stderr. The crash\n"
	"handler installed by 'probing inject --crash' or 'probing run --crash' runs this\n"
	"while the crashing thread waits: there is no need to run it by hand.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID         the crashing process\n"
	"      --tid TID         the thread that crashed\n"
	"      --signal SIG      the fatal signal (number), with --code and --addr from its\n"
	"                        siginfo\n"
	"      --exception JSON  an uncaught exception: its traceback and locals, as the\n"
	"                        agent's exception hook wrote them (its thread: the JSON's\n"
	"                        tid, else TID); repeated for exceptions raised at about the\n"
	"                        same time in several threads (at most %d): one crash row each\n"
	"  -o, --output FILE     the crash file (SQLite; docs/sql.md \"Crash files\")\n"
	"  -h, --help            this help\n";

enum { OPT_TID = 256, OPT_SIGNAL, OPT_CODE, OPT_ADDR, OPT_EXC };

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"tid", required_argument, NULL, OPT_TID},
	{"signal", required_argument, NULL, OPT_SIGNAL},
	{"code", required_argument, NULL, OPT_CODE},
	{"addr", required_argument, NULL, OPT_ADDR},
	{"exception", required_argument, NULL, OPT_EXC},
	{"output", required_argument, NULL, 'o'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{},
};

static int cmd_crashdump(int argc, char **argv)
{
	struct bt_opts o = {.native = true,
			    .locals = true,
			    .py_depth = SAMPLER_MAX_PYDEPTH,
			    .max_repr = 200,
			    .waits = true,
			    .routines = true};
	struct crash_info ci = {0};
	struct crash_exc exc[MAX_EXC] = {0};
	struct bt_process *p = NULL;
	const char *out = NULL, *exc_path[MAX_EXC];
	char *json[MAX_EXC] = {0}, *v_tid, *v_rep;
	long pid = 0, v;
	struct timespec ts;
	int c, i, err, nexc = 0, rc = EXIT_FAIL;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":p:o:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_long(optarg, 1, 0x7fffffff, &pid))
				return cli_usage_error(CMD, "'%s' is not a process id", optarg);
			break;
		case OPT_TID:
			if (parse_long(optarg, 1, 0x7fffffff, &v))
				return cli_usage_error(CMD, "'%s' is not a thread id", optarg);
			ci.tid = v;
			break;
		case OPT_SIGNAL:
			if (parse_long(optarg, 1, 64, &v))
				return cli_usage_error(CMD, "'%s' is not a signal number", optarg);
			ci.signal = v;
			break;
		case OPT_CODE:
			if (parse_long(optarg, -1000, 1000, &v))
				return cli_usage_error(CMD, "'%s' is not a signal code", optarg);
			ci.code = v;
			break;
		case OPT_ADDR:
			ci.addr = strtoul(optarg, NULL, 0);
			break;
		case OPT_EXC:
			if (nexc == MAX_EXC)
				return cli_usage_error(CMD, "--exception given more than %d times",
						       MAX_EXC);
			exc_path[nexc++] = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			printf(usage_text, MAX_EXC);
			return EXIT_OK;
		default:
			return cli_bad_option(CMD, c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if (!pid || !ci.tid || !out)
		return cli_usage_error(CMD, "say which process, thread and file: -p PID --tid TID "
					    "-o FILE");
	if (!nexc == !ci.signal)
		return cli_usage_error(CMD, "say what happened: --signal SIG or --exception JSON");
	for (i = 0; i < nexc; i++) {
		json[i] = read_file(exc_path[i], 64 << 20, NULL);
		if (!json[i]) {
			log_cmd(CMD, "cannot read %s: %s", exc_path[i], strerror(errno));
			goto cleanup;
		}
		exc[i].json = json[i];
		v_tid = jq_text(json[i], "$.tid");
		v_rep = jq_text(json[i], "$.reported");
		exc[i].tid = v_tid && !parse_long(v_tid, 1, 0x7fffffff, &v) ? (pid_t)v : ci.tid;
		exc[i].reported = v_rep && strcmp(v_rep, "0");
		free(v_tid);
		free(v_rep);
	}
	ci.exc = exc;
	ci.nexc = nexc;
	clock_gettime(CLOCK_REALTIME, &ts);
	ci.time = ts.tv_sec + ts.tv_nsec / 1e9;
	if (cli_check_pid(CMD, pid))
		goto cleanup;
	err = backtrace__collect(pid, &o, &p, NULL, 0);
	if (err)
		goto cleanup;
	err = crashsnap__save(p, &ci, out);
	if (err)
		goto cleanup;
	crashsnap__summary(p, &ci, out, stderr);
	rc = EXIT_OK;
cleanup:
	backtrace__free(p);
	for (i = 0; i < nexc; i++)
		free(json[i]);
	return rc;
}

COMMAND(crashdump, cmd_crashdump, "capture a crashing process (run by the --crash handler)", 190);
