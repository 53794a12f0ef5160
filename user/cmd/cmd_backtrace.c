// SPDX-License-Identifier: MIT
/* probing backtrace: every thread's current stack of a running process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/backtrace.h"
#include "live/agent_client.h"
#include "base/cli.h"
#include "live/live.h"
#include "live/tasks.h"
#include "base/log.h"
#include "bpf/sampler.h"
#include "pyoffsets/pyoffsets.h"
#include "base/util.h"

#define CMD "backtrace"

static const char usage_text[] =
	"Usage: probing backtrace -p PID [--native] [--locals [--inject]] [--tasks] [--depth N]\n"
	"\n"
	"Print the current stack of every thread of a running process: its Python frames\n"
	"(CPython " PY_VERSIONS
	"), read from outside without stopping it or loading anything into\n"
	"it, and with --native its native frames too (C extensions, libraries, the\n"
	"interpreter), merged the way 'probing record' merges them. For --native each thread\n"
	"is held still with ptrace for a moment (well under a millisecond) while its registers\n"
	"and stack are copied; nothing in it is changed and an interrupted system call resumes\n"
	"as if nothing happened. A hung process is fine: no cooperation from it is needed.\n"
	"A process that runs no Python gets its native stacks (--native is implied).\n"
	"\n"
	"--locals adds each Python frame's local variables (module-level frames: the module's\n"
	"data). Read from outside, simple values (None, bool, int, float, str, bytes) get\n"
	"their repr and containers their length; other objects show as <Type object at ADDR>.\n"
	"When the probing agent runs in the process (probing inject), every value gets its\n"
	"full repr() computed inside it, if the agent can take the GIL within 1 s; a process\n"
	"that holds the GIL (hung in C code) still gets the outside view.\n"
	"\n"
	"--tasks adds every pending asyncio task, under the thread running its event loop:\n"
	"its name, its state (running, waiting, ready), what it waits on (a task, a gather's\n"
	"tasks, a future) and its coroutine chain with file:line; tasks a task waits for are\n"
	"shown under it. Read from outside too (CPython 3.8-3.13 with the _asyncio\n"
	"accelerator); tasks only the agent can read are read by it when it runs.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID     the process (-t PID works too)\n"
	"      --native      also native frames (needs ptrace: same user, or root)\n"
	"      --locals      also local variables of Python frames\n"
	"      --inject      with --locals: load the agent if it is not running, for full reprs\n"
	"      --max-repr N  longest repr read from outside, in characters (default 200)\n"
	"      --tasks       also the asyncio tasks of every event loop\n"
	"      --depth N     Python frames per thread at most (default 1024)\n"
	"  -v, --verbose     more diagnostics\n"
	"  -h, --help        this help\n"
	"\n"
	"Examples:\n"
	"  probing backtrace -p 1234\n"
	"  sudo probing backtrace -p 1234 --native\n"
	"  probing backtrace -p 1234 --locals\n"
	"  probing backtrace -p 1234 --tasks\n"
	"  probing query -p 1234 \"SELECT thread, depth, func, lineno FROM python.backtrace\"\n";

enum { OPT_NATIVE = 256, OPT_DEPTH, OPT_LOCALS, OPT_INJECT, OPT_MAX_REPR, OPT_TASKS };

#define AGENT_GIL_MS 1000 /* a hung process must not hang backtrace */

static const struct option long_opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"target", required_argument, NULL, 't'},
	{"native", no_argument, NULL, OPT_NATIVE},
	{"depth", required_argument, NULL, OPT_DEPTH},
	{"locals", no_argument, NULL, OPT_LOCALS},
	{"inject", no_argument, NULL, OPT_INJECT},
	{"max-repr", required_argument, NULL, OPT_MAX_REPR},
	{"tasks", no_argument, NULL, OPT_TASKS},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{},
};

/*
 * Full reprs from the agent, when it runs (or --inject loads it) and can take the GIL soon;
 * otherwise the outside reads stay, with a note saying why on stderr.
 */
static void agent_locals(struct bt_process *p, bool inject)
{
	struct live_target t = {.pid = p->pid};
	struct agent_client *c = NULL;
	char *json = NULL;
	int n;

	if (agent_client__connect_pid(p->pid, 1000, &c)) {
		if (!inject)
			return; /* no agent: the outside view is the answer */
		if (live__connect(CMD, &t, true, &c)) {
			pr_warn("%s: locals read from outside only", CMD);
			return;
		}
	}
	if (live__request(CMD, &t, c, "rows", "{\"table\": \"python.locals\"}", AGENT_GIL_MS, 10000,
			  NULL, &json)) {
		pr_warn("%s: locals read from outside only (simple values)", CMD);
		goto out;
	}
	n = backtrace__use_agent_locals(p, json);
	if (n < 0)
		pr_warn("%s: the agent's answer was not understood (%s); locals read from outside",
			CMD, strerror(-n));
	else
		pr_debug("%s: full reprs from the agent for %d frames", CMD, n);
out:
	free(json);
	agent_client__free(c);
}

int cmd_backtrace(int argc, char **argv)
{
	struct bt_opts o = {.py_depth = SAMPLER_MAX_PYDEPTH, .max_repr = 200};
	struct bt_process *p = NULL;
	bool inject = false, tasks = false;
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
		case OPT_LOCALS:
			o.locals = true;
			break;
		case OPT_INJECT:
			inject = true;
			break;
		case OPT_TASKS:
			tasks = true;
			break;
		case OPT_MAX_REPR:
			if (parse_long(optarg, 16, 1 << 20, &v))
				return cli_usage_error(CMD, "--max-repr '%s' must be from 16 to %d",
						       optarg, 1 << 20);
			o.max_repr = v;
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
	if (inject && !o.locals)
		return cli_usage_error(CMD,
				       "--inject goes with --locals (full reprs from the agent)");
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
	if (o.locals && p->python[0])
		agent_locals(p, inject);
	backtrace__print(p, stdout);
	if (tasks && p->python[0])
		tasks__print(pid, stdout);
	backtrace__free(p);
	return EXIT_OK;
}

COMMAND(backtrace, cmd_backtrace, "print every thread's current stack (Python and native)", 50);
