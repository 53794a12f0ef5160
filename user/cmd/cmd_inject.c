// SPDX-License-Identifier: MIT
/* probing inject: load the agent into a running Python process (idempotent). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "injector/agent.h"
#include "injector/agent_crash.h"
#include "base/cli.h"
#include "injector/hostport.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "live/livejob.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "live/repl.h"
#include "pyoffsets/pyoffsets.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing inject -p PID [--listen ADDR] [--repl] "
		"[--torch[=on|off|wait|status]]\n"
		"                      [--crash[=FILE]]\n"
		"       probing inject -p PID[,PID...] --children [--torch[=MODE]] "
		"[--crash[=FILE]]\n"
		"       probing inject -p PID --show-token\n"
		"\n"
		"Load the probing agent into a running CPython " PY_VERSIONS
		" process and print its\n"
		"status. Nothing is loaded twice: if the agent already runs, its status is "
		"printed.\n"
		"The agent is a small library loaded with dlopen() by one of the process's "
		"threads\n"
		"(borrowed for about a millisecond through ptrace, then put back exactly as it "
		"was);\n"
		"it serves the abstract Unix socket @probing-PID to the process's owner and root.\n"
		"Only the owner of the process or root may inject.\n"
		"\n"
		"With several PIDs or --children (each PID and all its descendants now: every\n"
		"rank of a job under its launcher), the agent (and with --torch the hooks) goes\n"
		"into every Python process in turn, each one's status under a header\n"
		"\"==> rank 3 (pid 1234) <==\"; processes without Python are left out. Then\n"
		"'probing query -p PID --children SQL' reads every rank's live tables at once.\n"
		"The PyTorch hooks number training steps from the optimizer's own count where it\n"
		"has one, so that the same step has the same number on every rank, however late\n"
		"each was injected (docs/torch.md).\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]  the process(es)\n"
		"  -t, --target PID     the same\n"
		"      --children       also every descendant of each PID (its Python ones)\n"
		"      --listen ADDR    also serve TCP on ADDR: PORT, HOST:PORT or [IPV6]:PORT "
		"(host\n"
		"                       127.0.0.1 unless given; 0.0.0.0 for every interface; port\n"
		"                       0 for any free one). Clients need the printed token:\n"
		"                       PROBING_TOKEN=... probing -t HOST:PORT eval ...\n"
		"                       One address per process: the same ADDR (or port 0)\n"
		"                       again prints it, another one is refused.\n"
		"                       A client must send the token within 2 s of connecting;\n"
		"                       an address that sent 5 wrong ones waits (1 try per 2 s).\n"
		"      --show-token     print the TCP address and token of the agent of PID (its\n"
		"                       owner or root only, over the Unix socket); loads nothing\n"
		"      --repl           then open an interactive prompt in the process\n"
		"      --torch[=MODE]   PyTorch per-module timings (docs/torch.md), table\n"
		"                       python.torch_trace:\n"
		"                         on      install the hooks (the default MODE); fails if "
		"the\n"
		"                                 process has not imported torch\n"
		"                         wait    the same, or, if torch is not imported yet, "
		"install\n"
		"                                 them as soon as the process imports it\n"
		"                         off     remove every hook: the model runs exactly as "
		"before\n"
		"                                 (the rows recorded so far stay readable)\n"
		"                         status  show the hooks' state\n"
		"                       Settings: probing config -p PID torch_every=N ...\n"
		"      --crash[=FILE]   crash capture: on a fatal signal (SIGSEGV, SIGBUS, "
		"SIGABRT,\n"
		"                       SIGFPE, SIGILL) or an uncaught Python exception in any\n"
		"                       thread, every thread's Python and native stacks with "
		"their\n"
		"                       local variables go to FILE (SQLite, a backtrace snapshot;\n"
		"                       default probing-crash-PID.db; a relative FILE is in the\n"
		"                       process's working directory; %%p in FILE is the pid) and\n"
		"                       a summary to its stderr; then the process ends as it\n"
		"                       would have (same signal, core dump or exit status).\n"
		"                       Again: the new FILE replaces the old one (docs/live.md\n"
		"                       \"Crash capture\")\n"
		"  -v                   more diagnostics: timings, the thread used (-vv: details)\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing inject -p 1234\n"
		"  probing inject -p 1234 --repl\n"
		"  probing inject -p 1234 --listen 9400\n"
		"  probing inject -p 1234 --show-token\n"
		"  probing inject -p 1234 --torch\n"
		"  probing query -p 1234 \"SELECT module, stage, AVG(duration) FROM "
		"python.torch_trace\n"
		"                          GROUP BY module, stage ORDER BY 3 DESC LIMIT 10\"\n"
		"  probing export -p 1234 --format chrome -o steps.json\n"
		"  probing inject -p 1234 --torch=off\n"
		"  probing inject -p $(pgrep -f torchrun) --children --torch\n"
		"  probing inject -p 1234 --crash\n"
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

enum torch_mode {
	TORCH_NONE,
	TORCH_ON,
	TORCH_WAIT,
	TORCH_OFF,
	TORCH_STATUS,
};

static void print_torch_state(const char *json)
{
	long long every = 0, step = 0, rows = 0, dropped = 0, errors = 0;
	char *mode = jq_text(json, "$.mode"), *err = jq_text(json, "$.last_error");
	struct strbuf e = {0};

	jq_int(json, "$.every", &every);
	jq_int(json, "$.step", &step);
	jq_int(json, "$.rows", &rows);
	jq_int(json, "$.dropped", &dropped);
	jq_int(json, "$.errors", &errors);
	if (every == 1)
		printf("  %-10s every step (probing config -p PID torch_every=N)\n", "recording");
	else
		printf("  %-10s one step in %lld (probing config -p PID torch_every=N)\n",
		       "recording", every);
	if (mode && !step)
		printf("  %-10s none yet: recording starts with the next optimizer step or "
		       "top-level "
		       "call of the model\n",
		       "step");
	else if (mode)
		printf("  %-10s %lld (counted by %s)\n", "step", step,
		       !strcmp(mode, "optimizer") ? "optimizer steps"
						  : "top-level calls of the model, until an "
						    "optimizer step is seen");
	printf("  %-10s %lld in python.torch_trace, %lld dropped\n", "rows", rows, dropped);
	if (errors)
		printf("  %-10s %lld, recording stopped: %s\n", "errors", errors,
		       text_str(&e, err, 0));
	free(mode);
	free(err);
	sb_free(&e);
}

/*
 * Run --torch=MODE on the agent @c of @t; print what happened. Return an exit status: not
 * having torch to hook is a failed operation (1), with the way out in the message.
 */
static int torch_request(const struct live_target *t, struct agent_client *c, enum torch_mode m)
{
	const char *kind = m == TORCH_OFF      ? "torch.remove"
			   : m == TORCH_STATUS ? "torch.status"
					       : "torch.install";
	char *json = NULL, *v = NULL, *reason = NULL, desc[128];
	struct strbuf e = {0}; /* the agent's answers come from inside the target: escaped */
	int rc;

	/* Installing scans the process's objects once (gc): allow it time on a big process. */
	rc = live__request("inject", t, c, kind, m == TORCH_WAIT ? "{\"wait\": true}" : "{}",
			   LIVE_GIL_TIMEOUT_MS, 120000, NULL, &json);
	if (rc)
		return rc;
	live__describe(t, desc, sizeof(desc));
	reason = jq_text(json, "$.reason");
	if (reason) {
		if (!strcmp(reason, "not_imported")) {
			log_cmd("inject", "torch is not imported in %s: there is nothing to hook.",
				desc);
			fputs("Use --torch=wait to install the hooks as soon as it imports "
			      "torch.\n",
			      stderr);
		} else
			log_cmd("inject", "%s: %s", desc,
				text_str(&e, (v = jq_text(json, "$.error")) ? v : reason, 0));
		rc = EXIT_FAIL;
		goto cleanup;
	}
	if (m == TORCH_OFF) {
		long long rows = 0;

		jq_int(json, "$.rows", &rows);
		if (jq_bool(json, "$.removed"))
			printf("torch: hooks removed; %lld rows stay in python.torch_trace\n",
			       rows);
		else if (jq_bool(json, "$.was_waiting"))
			printf("torch: no longer waiting for 'import torch'\n");
		else
			printf("torch: no hooks were installed\n");
		goto cleanup;
	}
	if (jq_bool(json, "$.waiting")) {
		printf("torch: waiting for the process to import torch; the hooks are installed "
		       "then\n");
		goto cleanup;
	}
	if (!jq_bool(json, "$.installed")) {
		v = jq_text(json, "$.last_error");
		printf("torch: no hooks installed%s%s\n", v ? "; " : "",
		       v ? text_str(&e, v, 0) : "");
		goto cleanup;
	}
	v = jq_text(json, "$.torch");
	if (m == TORCH_STATUS || jq_bool(json, "$.already")) {
		printf("torch: hooks installed (torch %s)\n", text_str(&e, v, 0));
	} else {
		long long mods = 0, roots = 0;
		char *h;

		jq_int(json, "$.modules", &mods);
		jq_int(json, "$.roots", &roots);
		printf("torch: hooks installed (torch %s; %lld modules in %lld module trees "
		       "named)\n",
		       text_str(&e, v, 0), mods, roots);
		h = jq_text(json, "$.module_hooks");
		printf("  %-10s %s\n", "forward", text_str(&e, h, 0));
		free(h);
		h = jq_text(json, "$.backward_hooks");
		printf("  %-10s %s\n", "backward", text_str(&e, h, 0));
		free(h);
		h = jq_text(json, "$.optimizer_hooks");
		printf("  %-10s %s\n", "optimizer", text_str(&e, h, 0));
		free(h);
	}
	print_torch_state(json);
cleanup:
	free(v);
	free(reason);
	free(json);
	sb_free(&e);
	return rc;
}

static int parse_torch(const char *arg, enum torch_mode *m)
{
	if (!arg || !strcmp(arg, "on"))
		*m = TORCH_ON;
	else if (!strcmp(arg, "wait"))
		*m = TORCH_WAIT;
	else if (!strcmp(arg, "off"))
		*m = TORCH_OFF;
	else if (!strcmp(arg, "status"))
		*m = TORCH_STATUS;
	else
		return cli_usage_error("inject", "bad --torch='%s': use on, wait, off or status",
				       arg);
	return 0;
}

/* Print the TCP address and token of the agent of @t (--show-token): never loads it. */
static int show_token(const struct live_target *t)
{
	struct agent_client *c = NULL;
	char *json = NULL, *addr = NULL, *tok = NULL;
	unsigned long ru, eu, su;
	char *uids;
	int rc, err;

	/* The agent refuses other users itself; said here first, in words, also when the
	 * agent is too busy to say it (a flood of connections holds its slots). */
	uids = procinfo_status_field(t->pid, 0, "Uid");
	if (geteuid() && uids && sscanf(uids, "%lu %lu %lu", &ru, &eu, &su) == 3 &&
	    (ru != geteuid() || eu != geteuid() || su != geteuid())) {
		log_cmd("inject",
			"permission denied: process %d belongs to uid %lu and you are uid %u.",
			t->pid, eu, (unsigned)geteuid());
		fputs("Only its owner or root may read its agent's token.\n", stderr);
		free(uids);
		return EXIT_FAIL;
	}
	free(uids);
	err = agent_client__connect_pid(t->pid, 2000, &c);
	if (err == -ECONNREFUSED || err == -ENOENT) {
		log_cmd("inject", "the agent is not loaded in process %d: it serves no TCP port.",
			t->pid);
		fprintf(stderr, "Start one with 'probing inject -p %d --listen ADDR'.\n", t->pid);
		return EXIT_FAIL;
	}
	if (err) {
		log_cmd("inject", "cannot connect to the agent of process %d: %s", t->pid,
			strerror(-err));
		return EXIT_FAIL;
	}
	rc = live__request("inject", t, c, "token", "", 3000, 3000, NULL, &json);
	if (!rc) {
		addr = jq_text(json, "$.listen");
		tok = jq_text(json, "$.token");
		printf("  %-8s %s  token %s\n", "tcp", addr ? addr : "?", tok ? tok : "?");
	}
	free(addr);
	free(tok);
	free(json);
	agent_client__free(c);
	return rc;
}

/*
 * --crash[=FILE]: have the agent of @t install crash capture (injector/agent_crash.c,
 * injector/py/crash.py), writing @file (NULL: the default), and say what it did.
 */
static int crash_request(const struct live_target *t, struct agent_client *c, const char *file)
{
	struct strbuf body = {0}, e = {0}, e2 = {0};
	char self[PATH_MAX], *json = NULL, *now = NULL, *was = NULL;
	int rc = EXIT_FAIL;

	if (!realpath("/proc/self/exe", self)) {
		log_cmd("inject", "cannot tell where probing is: %s", strerror(errno));
		return EXIT_FAIL;
	}
	if (sb_puts(&body, "{\"file\": ") || jq_quote(&body, file ? file : CRASH_DEFAULT_FILE) ||
	    sb_puts(&body, ", \"bin\": ") || jq_quote(&body, self) || sb_puts(&body, "}"))
		goto cleanup;
	rc = live__request("inject", t, c, "crash.install", sb_str(&body), LIVE_GIL_TIMEOUT_MS,
			   10000, NULL, &json);
	if (rc)
		goto cleanup;
	now = jq_text(json, "$.file");
	was = jq_text(json, "$.was");
	if (jq_bool(json, "$.already") && was && now && strcmp(was, now))
		printf("crash: capture was already installed; it now writes %s (instead of %s)\n",
		       text_str(&e, now, 0), text_str(&e2, was, 0));
	else if (jq_bool(json, "$.already"))
		printf("crash: capture was already installed; it writes %s\n",
		       text_str(&e, now ? now : "?", 0));
	else
		printf("crash: capture installed: a fatal signal (SIGSEGV, SIGBUS, SIGABRT, "
		       "SIGFPE, "
		       "SIGILL)\n       or an uncaught exception writes every thread's stacks "
		       "to %s\n",
		       text_str(&e, now ? now : "?", 0));
cleanup:
	free(json);
	free(now);
	free(was);
	sb_free(&body);
	sb_free(&e);
	sb_free(&e2);
	return rc;
}

/* What inject does to each process. */
struct inject_req {
	const char *listen;
	enum torch_mode torch;
	bool repl;
	bool crash;
	const char *crash_file; /* --crash=FILE; NULL: the default */
};

static int inject_one(const struct live_target *tp, const void *ctx)
{
	const struct inject_req *r = ctx;
	const struct live_target t = *tp;
	const char *listen = r->listen;
	enum torch_mode torch = r->torch;
	bool repl = r->repl;
	struct agent_client *c = NULL;
	struct inject_info info;
	enum live_agent_state st;
	struct strbuf e = {0}, e2 = {0}; /* the agent's answers come from the target: escaped */
	char desc[128], *json = NULL, *v;
	double since = 0;
	int rc;

	if ((torch == TORCH_OFF || torch == TORCH_STATUS) && !listen && !repl &&
	    agent_client__connect_pid(t.pid, 1000, &c)) {
		/* No agent: no hooks. Do not load it just to say so. */
		if (kill(t.pid, 0) && errno == ESRCH) {
			log_cmd("inject", "no such process: %d", t.pid);
			return EXIT_FAIL;
		}
		printf("torch: the agent is not loaded in process %d: no hooks%s\n", t.pid,
		       torch == TORCH_OFF ? " to remove" : "");
		return EXIT_OK;
	}
	agent_client__free(c);
	c = NULL;
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
		printf("  %-8s %s\n", "python", text_str(&e, v, 0));
	} else {
		printf("  %-8s %s\n", "python", "not initialized yet");
	}
	free(v);
	v = jq_text(json, "$.socket");
	printf("  %-8s %s\n", "socket", text_str(&e, v, 0));
	free(v);
	jq_double(json, "$.since", &since);
	print_time("since", since);
	v = jq_text(json, "$.error");
	if (v)
		printf("  %-8s %s\n", "error", text_str(&e, v, 0));
	free(v);
	if (listen) {
		free(json);
		json = NULL;
		rc = live__request("inject", &t, c, "listen", listen, 3000, 3000, NULL, &json);
		if (rc)
			goto cleanup;
	}
	v = jq_text(json, listen ? "$.listen" : "$.tcp");
	if (v && listen) {
		char *tok = jq_text(json, "$.token");

		printf("  %-8s %s  token %s%s\n", "tcp", text_str(&e, v, 0),
		       tok ? text_str(&e2, tok, 0) : "?",
		       jq_bool(json, "$.already") ? "  (already served)" : "");
		free(tok);
	} else if (v) {
		printf("  %-8s %s  (token: probing inject -p %d --show-token)\n", "tcp", v, t.pid);
	}
	free(v);
	if (torch != TORCH_NONE) {
		rc = torch_request(&t, c, torch);
		if (rc)
			goto cleanup;
	}
	if (r->crash) {
		rc = crash_request(&t, c, r->crash_file);
		if (rc)
			goto cleanup;
	}
	fflush(stdout);
	if (repl) {
		rc = repl__run("inject", &t, c, LIVE_GIL_TIMEOUT_MS);
		c = NULL; /* repl__run frees it */
	}
cleanup:
	free(json);
	agent_client__free(c);
	sb_free(&e);
	sb_free(&e2);
	return rc;
}

/* What only a single process target allows: EXIT_OK or EXIT_USAGE (printed). */
static int inject_checks(const struct live_target *t, const char *listen, bool repl, bool token,
			 enum torch_mode torch, bool crash)
{
	char host[256], why[300];
	unsigned int port;

	if (!t->pid)
		return cli_usage_error("inject", "inject needs a process id, not HOST:PORT");
	if (listen &&
	    (strlen(listen) > 200 ||
	     hostport_parse(listen, false, true, host, sizeof(host), &port, why, sizeof(why))))
		return cli_usage_error("inject", "bad --listen address: %s",
				       strlen(listen) > 200 ? "longer than 200 characters" : why);
	if (token && (listen || repl || torch != TORCH_NONE || crash))
		return cli_usage_error("inject", "--show-token goes alone (with -p PID)");
	return EXIT_OK;
}

static int cmd_inject(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},	  {"target", required_argument, NULL, 't'},
		{"listen", required_argument, NULL, 'L'}, {"repl", no_argument, NULL, 'R'},
		{"torch", optional_argument, NULL, 'T'},  {"show-token", no_argument, NULL, 'S'},
		{"children", no_argument, NULL, 'C'},	  {"crash", optional_argument, NULL, 'K'},
		{"help", no_argument, NULL, 'h'},	  {NULL, 0, NULL, 0},
	};
	struct live_opts lo = LIVE_OPTS_INIT;
	const char *listen = NULL;
	struct live_sel sel;
	struct inject_req r;
	enum torch_mode torch = TORCH_NONE;
	bool repl = false, token = false, crash = false;
	const char *crash_file = NULL;
	int ch, rc;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, ":p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'L':
			listen = optarg;
			break;
		case 'R':
			repl = true;
			break;
		case 'S':
			token = true;
			break;
		case 'K':
			if (crash)
				return cli_usage_error("inject", "--crash given twice");
			crash = true;
			crash_file = optarg;
			if (crash_file && (!*crash_file || strlen(crash_file) > 3000))
				return cli_usage_error("inject", "bad --crash file name: %s",
						       *crash_file ? "too long" : "empty");
			break;
		case 'T':
			if (parse_torch(optarg, &torch))
				return EXIT_USAGE;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option("inject", ch, false, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option("inject", ch, argv);
			if (rc)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error("inject", "unexpected argument '%s'", argv[optind]);
	r.listen = listen;
	r.torch = torch;
	r.repl = repl;
	r.crash = crash;
	r.crash_file = crash_file;
	if (livejob__wanted(lo.pid_arg ? lo.pid_arg : lo.t_arg, lo.children) &&
	    (listen || repl || token))
		return cli_usage_error("inject", "--listen, --repl and --show-token are for one "
						 "process: not with --children or several PIDs");
	rc = livejob__select("inject", &lo, true, &sel);
	if (!rc && !sel.j.n)
		rc = inject_checks(&sel.t, listen, repl, token, torch, crash);
	/* --show-token: one process, as checked above. */
	if (!rc)
		rc = token ? show_token(&sel.t) : livejob__run("inject", &sel, inject_one, &r);
	livejob__sel_free(&sel);
	return rc;
}

COMMAND(inject, cmd_inject, "load the agent into a running Python process", 60);
