// SPDX-License-Identifier: MIT
/* probing backtrace: every thread's current stack of a running process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/backtrace.h"
#include "live/agent_client.h"
#include "live/btjob.h"
#include "live/crashsnap.h"
#include "live/livejob.h"
#include "base/cli.h"
#include "base/escape.h"
#include "base/jobinfo.h"
#include "base/outfile.h"
#include "base/procinfo.h"
#include "report/recording.h"
#include "live/live.h"
#include "live/tasks.h"
#include "base/log.h"
#include "bpf/sampler.h"
#include "pyoffsets/pyoffsets.h"
#include "base/util.h"

#define CMD "backtrace"

static const char usage_text[] =
	"Usage: probing backtrace -p PID[,PID...] [--children] [--native] [--format text|json]\n"
	"                         [-o FILE [--force]] [--locals [--inject]] [--tasks] [--depth N]\n"
	"       probing backtrace -i FILE [--format text|json]\n"
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
	"Each thread's header says its state and what it waits in, read from /proc without\n"
	"stopping it: the system call or wait channel and its kind (lock: a futex, a mutex,\n"
	"a condition; io: a socket, a pipe, a file, epoll; sleep; other), and whether it holds\n"
	"the GIL or waits for it. Threads without a name of their own are named by what they\n"
	"run: the function they were started with, or the callable of a std::thread\n"
	"(\"gloo::transport::tcp::Loop::run\", \"c10d::ProcessGroupGloo::runLoop\").\n"
	"\n"
	"A job: with several PIDs, or --children (each PID and all its descendants now, e.g.\n"
	"torchrun's pid), every thread of every process is read, each process named by its\n"
	"rank (\"rank 3 (pid 1234)\", from its environment: torchrun, Slurm, Open MPI, PMI).\n"
	"Threads whose stacks are identical are printed once, under a header saying which\n"
	"ranks and threads share that stack, largest group first; a rank whose main thread is\n"
	"where no other rank's is gets flagged as the odd one out. Processes that exit\n"
	"meanwhile are reported as gone.\n"
	"\n"
	"--locals adds each Python frame's local variables (module-level frames: the module's\n"
	"data). Read from outside, simple values (None, bool, int, float, str, bytes) get\n"
	"their repr and containers their length; other objects show as <Type object at ADDR>.\n"
	"When the probing agent runs in the process (probing inject), every value gets its\n"
	"full repr() computed inside it, if the agent can take the GIL within 1 s; a process\n"
	"that holds the GIL (hung in C code) still gets the outside view. One process only.\n"
	"\n"
	"--tasks adds every pending asyncio task, under the thread running its event loop:\n"
	"its name, its state (running, waiting, ready), what it waits on (a task, a gather's\n"
	"tasks, a future) and its coroutine chain with file:line; tasks a task waits for are\n"
	"shown under it. Read from outside too (CPython 3.8-3.13 with the _asyncio\n"
	"accelerator); tasks only the agent can read (3.14+, or without the accelerator)\n"
	"are read by it when it runs.\n"
	"\n"
	"Options:\n"
	"  -p, --pid PID[,PID...]  the processes (-t PID works too)\n"
	"      --children    also every descendant of each PID (a job's ranks under its\n"
	"                    launcher)\n"
	"      --native      also native frames (needs ptrace: same user, or root)\n"
	"  -f, --format FMT  text (default) or json: a list of processes with their threads\n"
	"                    and frames, innermost first (docs/live.md)\n"
	"  -o, --output FILE write a snapshot instead (SQLite: the same data as the JSON,\n"
	"                    docs/sql.md), for 'backtrace -i FILE' or 'query -i FILE' later\n"
	"      --force       replace FILE even if it is read-only\n"
	"  -i, --input FILE  show a snapshot written with -o, or a crash file (inject/run\n"
	"                    --crash: the crashed thread first, with its signal or exception)\n"
	"      --locals      also local variables of Python frames (one process, text; with\n"
	"                    -i, those a crash file holds)\n"
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
	"  probing backtrace -p $(pgrep -f torchrun) --children      # every rank of a job\n"
	"  probing backtrace -p 1234 --children --format json | jq '.[] | {rank, pid}'\n"
	"  probing backtrace -p 1234 --children -o node1.db && probing backtrace -i node1.db\n"
	"  probing query -i node1.db \"SELECT * FROM bt_groups\"\n"
	"  probing backtrace -i probing-crash-1234.db --locals    # after inject --crash\n"
	"  probing query -p 1234 \"SELECT thread, depth, func, lineno FROM python.backtrace\"\n";

enum {
	OPT_NATIVE = 256,
	OPT_DEPTH,
	OPT_LOCALS,
	OPT_INJECT,
	OPT_MAX_REPR,
	OPT_CHILDREN,
	OPT_FORCE,
	OPT_TASKS
};

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
	{"children", no_argument, NULL, OPT_CHILDREN},
	{"format", required_argument, NULL, 'f'},
	{"output", required_argument, NULL, 'o'},
	{"input", required_argument, NULL, 'i'},
	{"force", no_argument, NULL, OPT_FORCE},
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
		goto cleanup;
	}
	n = backtrace__use_agent_locals(p, json);
	if (n < 0)
		pr_warn("%s: the agent's answer was not understood (%s); locals read from outside",
			CMD, strerror(-n));
	else
		pr_debug("%s: full reprs from the agent for %d frames", CMD, n);
cleanup:
	free(json);
	agent_client__free(c);
}

/* What the command line asks for. */
struct bt_cmd {
	struct bt_opts o;
	const char *pids;   /* -p */
	const char *input;  /* -i */
	const char *output; /* -o */
	bool children, inject, json, force, tasks;
};

/* Print @j as asked: JSON, or the grouped view (one process: its threads one by one). */
static int show_job(const struct bt_cmd *bc, const struct bt_job *j)
{
	struct strbuf sb = {0};
	int err;

	if (bc->json) {
		err = btjob__json(j, &sb);
		if (!err)
			fputs(sb_str(&sb), stdout);
		sb_free(&sb);
		return err ? EXIT_FAIL : EXIT_OK;
	}
	if (j->nprocs == 1 && j->procs[0].bt)
		backtrace__print(j->procs[0].bt, stdout);
	else
		btjob__print(j, stdout);
	return EXIT_OK;
}

/* Does a thread of @j have local variables? */
static bool job_has_locals(const struct bt_job *j)
{
	for (int i = 0; i < j->nprocs; i++)
		for (int k = 0; j->procs[i].bt && k < j->procs[i].bt->nthreads; k++)
			if (j->procs[i].bt->threads[k].locals)
				return true;
	return false;
}

/* -i FILE: a snapshot read back. */
static int from_snapshot(const struct bt_cmd *bc)
{
	struct bt_job *j = NULL;
	struct strbuf e = {0};
	sqlite3 *db = NULL;
	int rc = EXIT_FAIL, crash;

	if (recording__open_kind(bc->input, RECORDING_BACKTRACE, &db, NULL))
		return EXIT_FAIL;
	if (btjob__load(db, bc->input, &j))
		goto cleanup;
	/* A crash file: the crashed thread first, marked; its locals when asked. */
	crash = crashsnap__load(db, bc->input, j, bc->o.locals);
	if (crash < 0)
		goto cleanup;
	if (bc->o.locals && !crash && btjob__load_locals(db, j)) {
		log_cmd(CMD, "%s: its table bt_locals is not as probing writes it",
			text_str(&e, bc->input, 0));
		goto cleanup;
	}
	if (bc->o.locals && !job_has_locals(j)) {
		log_cmd(CMD,
			"%s keeps no local variables (crash files of 'inject --crash' and 'run "
			"--crash' and the reports of 'probing watch' do); read them live: 'probing "
			"backtrace -p PID --locals'",
			text_str(&e, bc->input, 0));
		goto cleanup;
	}
	if (bc->o.locals && j->nprocs != 1) {
		log_cmd(CMD,
			"%s holds %d processes: --locals shows those of one; the table bt_locals "
			"has them all ('probing query -i %s \"SELECT * FROM bt_locals\"')",
			text_str(&e, bc->input, 0), j->nprocs, text_str(&e, bc->input, 0));
		goto cleanup;
	}
	rc = show_job(bc, j);
cleanup:
	btjob__free(j);
	recording__close(db);
	sb_free(&e);
	return rc;
}

/*
 * @pid runs no Python (its native stacks were shown): say so, and name the Python processes
 * under it, if any: a wrapper shell, a pyenv shim, 'sh -c', a launcher that forks.
 */
static void note_python_below(pid_t pid)
{
	struct strbuf e = {0};
	pid_t *pids = NULL;
	int n = 0, i, k = 0;
	char *cmd;

	if (jobinfo_descendants(pid, &pids, &n))
		n = 0;
	for (i = 1; i < n; i++) /* pids[0] is @pid */
		if (live__is_python(pids[i]) == 1)
			pids[k++] = pids[i];
	if (!k)
		log_cmd(CMD,
			"process %d runs no CPython 3.8-3.13 interpreter that probing can read, "
			"nor does any process under it: these are its native stacks",
			pid);
	else
		log_cmd(CMD,
			"process %d runs no Python (its native stacks are above); the Python "
			"process%s under it:",
			pid, k == 1 ? "" : "es");
	for (i = 0; i < k && i < 4; i++) {
		cmd = procinfo_cmdline(pids[i]);
		log_cmd(CMD, "  %s %d (%s): probing backtrace -p %d",
			procinfo_ppid(pids[i]) == pid ? "its child" : "a descendant", pids[i],
			cmd ? text_str(&e, cmd, 0) : "?", pids[i]);
		free(cmd);
	}
	if (k > 4)
		log_cmd(CMD, "  and %d more ('probing backtrace -p %d --children' shows them all)",
			k - 4, pid);
	free(pids);
	sb_free(&e);
}

/* One process, the way backtrace has always shown it (and the only way with --locals). */
static int one_process(struct bt_cmd *bc, pid_t pid)
{
	struct bt_process *p = NULL;
	bool not_python = false;
	char why[512];
	int err;

	err = backtrace__collect(pid, &bc->o, &p, why, sizeof(why));
	if (err == -ENOENT) {
		/* Not Python: its native stacks are what there is. */
		not_python = true;
		bc->o.native = true;
		err = backtrace__collect(pid, &bc->o, &p, NULL, 0);
	} else if (err) {
		pr_warn("%s", why);
	}
	if (err)
		return EXIT_FAIL;
	if (bc->o.locals && p->python[0])
		agent_locals(p, bc->inject);
	backtrace__print(p, stdout);
	if (bc->tasks && p->python[0])
		tasks__print(pid, stdout);
	backtrace__free(p);
	if (not_python) {
		fflush(stdout);
		note_python_below(pid);
	}
	return EXIT_OK;
}

/* Several processes (or JSON, or a snapshot): read them all, then compare. */
static int job(struct bt_cmd *bc, const struct job_procs *jp)
{
	struct bt_job *j = NULL;
	int i, read = 0, nthreads = 0, rc, err;

	err = btjob__collect(jp, &bc->o, &j);
	if (err) {
		log_cmd(CMD, "%s", strerror(-err));
		return EXIT_FAIL;
	}
	for (i = 0; i < j->nprocs; i++)
		if (j->procs[i].bt) {
			read++;
			nthreads += j->procs[i].bt->nthreads;
		}
	if (!read) {
		/* Nothing to show: say why, as for one process. */
		for (i = 0; i < j->nprocs; i++)
			log_cmd(CMD, "%s: %s", j->procs[i].label, j->procs[i].error);
		btjob__free(j);
		return EXIT_FAIL;
	}
	if (bc->output) {
		rc = btjob__save(j, bc->output,
				 bc->force ? OUTFILE_FORCE | OUTFILE_FORCE_HINT
					   : OUTFILE_FORCE_HINT)
			     ? EXIT_FAIL
			     : EXIT_OK;
		if (!rc)
			log_cmd(CMD, "snapshot of %d process%s (%d threads) written to %s", read,
				read == 1 ? "" : "es", nthreads, bc->output);
	} else {
		rc = show_job(bc, j);
	}
	btjob__free(j);
	return rc;
}

int cmd_backtrace(int argc, char **argv)
{
	struct bt_cmd bc = {.o = {.py_depth = SAMPLER_MAX_PYDEPTH,
				  .max_repr = 200,
				  .waits = true,
				  .routines = true}};
	struct job_procs jp = {0};
	long v;
	int c, rc;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":p:t:f:o:i:vh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'p':
		case 't':
			bc.pids = optarg;
			break;
		case OPT_NATIVE:
			bc.o.native = true;
			break;
		case OPT_DEPTH:
			if (parse_long(optarg, 1, SAMPLER_MAX_PYDEPTH, &v))
				return cli_usage_error(CMD, "depth '%s' must be from 1 to %d",
						       optarg, SAMPLER_MAX_PYDEPTH);
			bc.o.py_depth = v;
			break;
		case OPT_LOCALS:
			bc.o.locals = true;
			break;
		case OPT_INJECT:
			bc.inject = true;
			break;
		case OPT_TASKS:
			bc.tasks = true;
			break;
		case OPT_MAX_REPR:
			if (parse_long(optarg, 16, 1 << 20, &v))
				return cli_usage_error(CMD, "--max-repr '%s' must be from 16 to %d",
						       optarg, 1 << 20);
			bc.o.max_repr = v;
			break;
		case OPT_CHILDREN:
			bc.children = true;
			break;
		case 'f':
			if (strcmp(optarg, "text") && strcmp(optarg, "json"))
				return cli_usage_error(
					CMD, "unknown --format '%s': use text or json", optarg);
			bc.json = !strcmp(optarg, "json");
			break;
		case 'o':
			bc.output = optarg;
			break;
		case 'i':
			bc.input = optarg;
			break;
		case OPT_FORCE:
			bc.force = true;
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
	if (bc.input && (bc.pids || bc.output || bc.children || bc.o.native || bc.inject))
		return cli_usage_error(CMD, "-i FILE shows a snapshot: it goes without -p, "
					    "--children, --native, --inject and -o");
	if (bc.input && bc.o.locals && bc.json)
		return cli_usage_error(CMD, "--locals shows the variables as text: leave out "
					    "--format json (the table bt_locals of the file has "
					    "them for SQL)");
	if (bc.input)
		return from_snapshot(&bc);
	if (!bc.pids)
		return cli_usage_error(CMD, "say which process: -p PID");
	if (bc.inject && !bc.o.locals)
		return cli_usage_error(CMD,
				       "--inject goes with --locals (full reprs from the agent)");
	if (bc.output && bc.json)
		return cli_usage_error(CMD, "-o writes a snapshot file; --format json prints to "
					    "stdout: give one of them");
	if (bc.output && !strcmp(bc.output, "-"))
		return cli_usage_error(CMD, "a snapshot is a SQLite file: -o needs a file name");
	if (bc.force && !bc.output)
		return cli_usage_error(CMD, "--force goes with -o FILE");
	if (bc.tasks && (bc.children || strchr(bc.pids, ',') || bc.json || bc.output))
		return cli_usage_error(CMD, "--tasks shows the asyncio tasks of one process, as "
					    "text: give one PID, without --children, --format json "
					    "or -o (the live table python.tasks has them for SQL)");
	if (bc.o.locals && (bc.children || strchr(bc.pids, ',') || bc.json || bc.output))
		return cli_usage_error(CMD,
				       "--locals shows the variables of one process, as text: "
				       "give one PID, without --children, --format json or -o");
	rc = livejob__resolve_arg(CMD, bc.pids, bc.children, &jp);
	if (rc)
		return rc;
	livejob__note_unreadable(CMD, &jp);
	if (jp.n == 1 && !bc.json && !bc.output)
		rc = one_process(&bc, jp.p[0].pid);
	else
		rc = job(&bc, &jp);
	livejob__free(&jp);
	return rc;
}

COMMAND(backtrace, cmd_backtrace, "print every thread's current stack (Python and native)", 50);
