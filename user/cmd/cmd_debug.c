// SPDX-License-Identifier: MIT
/*
 * probing debug: make a running Python process debuggable from VS Code (or any DAP client)
 * without restarting it: load the agent, start debugpy in the process listening on a TCP
 * port (loopback by default), print the launch.json "attach" configuration. The Python side
 * is injector/py/debug.py (request kinds debug.start and debug.status).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/util.h"
#include "injector/hostport.h"
#include "live/live.h"
#include "python/pyproc.h"

#define CMD	     "debug"
#define DEFAULT_PORT 5678  /* debugpy's customary port, what VS Code examples use */
#define START_MS     90000 /* debugpy starts its adapter, a Python process: under load, slow */
#define WAIT_POLL_MS 200

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing debug -p PID [--listen [HOST:]PORT] [--wait] [OPTIONS]\n"
		"       probing debug -p PID --stop\n"
		"\n"
		"Make a running Python process debuggable from VS Code or any DAP client, without\n"
		"restarting it: probing loads its agent into the process (as 'probing inject'),\n"
		"which starts debugpy there, listening on HOST:PORT (default 127.0.0.1:%d), and\n"
		"prints the launch.json configuration that attaches to it.\n"
		"\n"
		"debugpy is the process's own if its sys.path has one; otherwise Debian's\n"
		"python3-debugpy (/usr/lib/python3/dist-packages) when it is built for the\n"
		"process's Python version (3.11 on Debian 12). debugpy then stays loaded until "
		"the\n"
		"process exits or --stop ends it, listening on that one address: running probing\n"
		"debug again reports it. Its adapter runs as a separate Python process.\n"
		"\n"
		"While debugpy runs, every thread of the process runs under its trace function,\n"
		"client attached or not: Python code that calls many small functions runs several\n"
		"times slower (about 10x for the worst case, on 3.11). --stop ends debugging and\n"
		"gives the program its speed back; probing debug can start it again later.\n"
		"\n"
		"debugpy has no authentication: whoever can connect to the port can run any code "
		"in\n"
		"the process as its user. So the address must be a loopback one (127.0.0.1, ::1,\n"
		"localhost) unless --allow-remote is given. Prefer an SSH tunnel to a remote "
		"port.\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID        the process (-t PID works too)\n"
		"      --listen ADDR    PORT, HOST:PORT or [IPV6]:PORT; port 0 picks a free one\n"
		"      --wait           then wait until a DAP client attaches (Ctrl-C stops "
		"waiting;\n"
		"                       debugpy keeps listening)\n"
		"      --python PATH    the Python executable debugpy runs its adapter with\n"
		"                       (default: the process's sys.executable; for a program "
		"that\n"
		"                       embeds Python, pythonX.Y of its installation)\n"
		"      --allow-remote   accept a non-loopback address (read the warning above)\n"
		"      --stop           stop debugpy (started by probing debug): no listener, no\n"
		"                       trace function left in any thread\n"
		"      --timeout SEC    how long to wait for the GIL before saying the target "
		"looks\n"
		"                       hung (default 5)\n"
		"  -v                   more diagnostics\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing debug -p 1234                       # then attach from VS Code\n"
		"  probing debug -p 1234 --listen 5679 --wait\n"
		"  probing debug -p 1234 --stop                # done: full speed again\n"
		"  ssh -L 5678:127.0.0.1:5678 gpu-node         # reach a remote one through SSH\n"
		"\n"
		"The configuration printed has \"type\": \"debugpy\" (the VS Code Python Debugger\n"
		"extension); older versions of the Python extension call it \"python\".\n",
		DEFAULT_PORT);
}

enum { OPT_LISTEN = 256, OPT_WAIT, OPT_PYTHON, OPT_ALLOW_REMOTE, OPT_STOP };

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Is @host (brackets removed) a loopback address? Names other than localhost are not. */
static bool is_loopback(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (!strcmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

/* Print "@prefix<text field>\n" from the agent's answer, escaped (it comes from the target);
 * nothing when the field is empty. */
static void print_field(FILE *f, const char *prefix, const char *json, const char *path)
{
	struct strbuf e = {0};
	char *v = jq_text(json, path);

	if (v && *v)
		fprintf(f, "%s%s\n", prefix, text_str(&e, v, TEXT_LINES));
	free(v);
	sb_free(&e);
}

/*
 * The ident (pthread_t) of the target's main thread, read from outside: the agent needs it
 * when the program never imported threading (injector/py/debug.py). 0 if unknown.
 */
static uint64_t main_ident(pid_t pid)
{
	struct pyproc *pp = pyproc__open(pid);
	uint64_t v = 0;

	if (pp && pyproc__main_pthread(pp, &v))
		v = 0;
	pyproc__free(pp);
	return v;
}

static void print_attach(pid_t pid, const char *json, bool already)
{
	struct strbuf e[2] = {{0}};
	char *host = jq_text(json, "$.host"), *ver = jq_text(json, "$.debugpy");
	long long port = 0;
	double since = 0;

	jq_int(json, "$.port", &port);
	jq_double(json, "$.since", &since);
	if (already) {
		char when[64] = "?";
		time_t t = (time_t)since;
		struct tm tm;

		if (since > 0 && localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		printf("debugpy %s is already listening in process %d on %s:%lld (started by "
		       "probing at %s); %s.\n",
		       text_str(&e[0], ver, 0), pid, text_str(&e[1], host, 0), port, when,
		       jq_bool(json, "$.connected") ? "a client is attached"
						    : "no client is attached");
	} else {
		printf("debugpy %s is listening in process %d on %s:%lld.\n",
		       text_str(&e[0], ver, 0), pid, text_str(&e[1], host, 0), port);
	}
	print_field(stdout, "debugpy: ", json, "$.source");
	printf("Attach from VS Code with this configuration in .vscode/launch.json:\n"
	       "\n"
	       "    {\n"
	       "        \"name\": \"Attach to process %d (probing)\",\n"
	       "        \"type\": \"debugpy\",\n"
	       "        \"request\": \"attach\",\n"
	       "        \"connect\": {\"host\": \"%s\", \"port\": %lld},\n"
	       "        \"justMyCode\": false\n"
	       "    }\n",
	       pid, text_str(&e[0], host, 0), port);
	fflush(stdout);
	free(host);
	free(ver);
	sb_free(&e[0]);
	sb_free(&e[1]);
}

/* Poll debug.status until a client is attached. EXIT_OK, or EXIT_FAIL (Ctrl-C, an error). */
static int wait_for_client(const struct live_target *t, struct agent_client *c, int gil_ms)
{
	struct sigaction sa = {.sa_handler = on_sigint}, old;
	struct timespec ts = {0, WAIT_POLL_MS * 1000000L};
	char *json = NULL;
	int rc = EXIT_OK;

	sigaction(SIGINT, &sa, &old);
	log_cmd("debug", "waiting for a DAP client to attach (Ctrl-C to stop waiting; debugpy "
			 "keeps listening)...");
	for (;;) {
		rc = live__request(CMD, t, c, "debug.status", "{}", gil_ms, 10000, NULL, &json);
		if (rc)
			break;
		if (jq_bool(json, "$.connected")) {
			printf("A DAP client is attached.\n");
			break;
		}
		free(json);
		json = NULL;
		if (!interrupted)
			nanosleep(&ts, NULL);
		if (interrupted) {
			log_cmd("debug", "stopped waiting; debugpy still listens in process %d",
				t->pid);
			rc = EXIT_FAIL;
			break;
		}
	}
	free(json);
	sigaction(SIGINT, &old, NULL);
	return rc;
}

/* --stop: end what probing debug started. Loads nothing: no agent, nothing to stop. */
static int stop_debugging(const struct live_target *t, int gil_ms)
{
	struct agent_client *c = NULL;
	char *json = NULL, *err;
	struct strbuf e = {0};
	long long port = 0;
	int rc;

	if (agent_client__connect_pid(t->pid, 1000, &c)) {
		if (!procinfo_alive(t->pid)) {
			log_cmd("debug", "no such process: %d", t->pid);
			return EXIT_FAIL;
		}
		printf("debugpy was not started by probing in process %d: nothing to stop.\n",
		       t->pid);
		return EXIT_OK;
	}
	rc = live__request(CMD, t, c, "debug.stop", "{}", gil_ms, START_MS, NULL, &json);
	if (rc)
		goto cleanup;
	err = jq_text(json, "$.error");
	if (err) {
		log_cmd("debug", "cannot stop debugpy in process %d: %s", t->pid,
			text_str(&e, err, 0));
		free(err);
		rc = EXIT_FAIL;
	} else if (!jq_bool(json, "$.stopped")) {
		printf("debugpy was not started by probing in process %d: nothing to stop%s.\n",
		       t->pid,
		       jq_bool(json, "$.foreign") ? " (a debugger the program started runs there: "
						    "left alone)"
						  : "");
	} else {
		jq_int(json, "$.port", &port);
		printf("debugpy stopped in process %d: nothing listens on port %lld any more and "
		       "%s.\n",
		       t->pid, port,
		       jq_bool(json, "$.all_threads")
			       ? "no thread is traced"
			       : "new threads are not traced (the ones it traced keep a trace "
				 "function that does nothing until they end: Python 3.8)");
	}
cleanup:
	free(json);
	sb_free(&e);
	agent_client__free(c);
	return rc;
}

static int cmd_debug(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"target", required_argument, NULL, 't'},
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"wait", no_argument, NULL, OPT_WAIT},
		{"python", required_argument, NULL, OPT_PYTHON},
		{"allow-remote", no_argument, NULL, OPT_ALLOW_REMOTE},
		{"stop", no_argument, NULL, OPT_STOP},
		{"timeout", required_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct live_opts lo = LIVE_OPTS_INIT;
	struct live_target t;
	struct agent_client *c = NULL;
	struct strbuf body = {0}, e = {0};
	const char *listen = NULL, *python = NULL;
	char host[256], why[256], *json = NULL, *err = NULL;
	unsigned int port = DEFAULT_PORT;
	bool wait = false, remote_ok = false, stop = false, already;
	long long have_port = 0;
	int ch, rc;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, "+:p:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case OPT_LISTEN:
			listen = optarg;
			break;
		case OPT_WAIT:
			wait = true;
			break;
		case OPT_PYTHON:
			if (!*optarg || optarg[0] != '/')
				return cli_usage_error(
					CMD, "--python wants an absolute path, not '%s'", optarg);
			python = optarg;
			break;
		case OPT_ALLOW_REMOTE:
			remote_ok = true;
			break;
		case OPT_STOP:
			stop = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			rc = live__shared_option(CMD, ch, true, &lo);
			if (rc == LIVE_OPT_NOT_SHARED)
				return cli_bad_option(CMD, ch, argv);
			if (rc)
				return rc;
		}
	}
	if (optind < argc)
		return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	rc = live__target(CMD, lo.pid_arg, lo.t_arg, &t);
	if (rc)
		return rc;
	if (!t.pid)
		return cli_usage_error(CMD, "give a local process (-p PID): debugpy listens inside "
					    "it, where the agent runs");
	if (stop) {
		if (listen || wait || python || remote_ok)
			return cli_usage_error(CMD, "--stop takes no other option");
		return stop_debugging(&t, lo.gil_ms);
	}
	strcpy(host, HOSTPORT_DEFAULT_HOST);
	if (listen) {
		if (hostport_parse(listen, false, true, host, sizeof(host), &port, why,
				   sizeof(why)))
			return cli_usage_error(CMD, "bad --listen: %s", why);
		/* "localhost" may resolve to ::1 or 127.0.0.1 in the target: say which. */
		if (!host[0] || !strcmp(host, "localhost"))
			strcpy(host, HOSTPORT_DEFAULT_HOST);
	}
	if (!is_loopback(host)) {
		if (!remote_ok)
			return cli_usage_error(
				CMD,
				"%s is not a loopback address. debugpy has no authentication: "
				"anyone who can reach the port can run any code in the process. "
				"Add "
				"--allow-remote if that is really what you want (an SSH tunnel to "
				"a "
				"loopback port is safer)",
				text_str(&e, host, 0));
		log_cmd("debug",
			"WARNING: debugpy will listen on %s:%u, which is not a loopback address, "
			"and it has NO authentication: anyone who can reach that port can run any "
			"code in process %d as its user.",
			text_str(&e, host, 0), port, t.pid);
	}
	rc = live__connect(CMD, &t, true, &c);
	if (rc)
		goto cleanup;
	if (sb_puts(&body, "{\"host\": ") || jq_quote(&body, host) ||
	    sb_printf(&body, ", \"port\": %u, \"python\": ", port) ||
	    (python ? jq_quote(&body, python) : sb_puts(&body, "null")) ||
	    sb_printf(&body, ", \"main_ident\": %llu}", (unsigned long long)main_ident(t.pid))) {
		rc = EXIT_FAIL;
		goto cleanup;
	}
	rc = live__request(CMD, &t, c, "debug.start", sb_str(&body), lo.gil_ms, START_MS, NULL,
			   &json);
	if (rc)
		goto cleanup;
	print_field(stderr, "probing debug: what debugpy printed while it started:\n", json,
		    "$.notes");
	err = jq_text(json, "$.error");
	if (err) {
		log_cmd("debug", "cannot start debugpy in process %d: %s", t.pid,
			text_str(&e, err, 0));
		print_field(stderr, "What to do: ", json, "$.hint");
		rc = EXIT_FAIL;
		goto cleanup;
	}
	already = jq_bool(json, "$.already");
	jq_int(json, "$.port", &have_port);
	if (already && listen && port) {
		char *h = jq_text(json, "$.host");

		if (have_port != port || !h || strcmp(h, host)) {
			log_cmd("debug",
				"debugpy already listens in process %d on %s:%lld; it serves one "
				"address for the life of the process and cannot move to %s:%u. "
				"Attach to %s:%lld.",
				t.pid, text_str(&e, h, 0), have_port, host, port,
				text_str(&e, h, 0), have_port);
			free(h);
			rc = EXIT_FAIL;
			goto cleanup;
		}
		free(h);
	}
	print_attach(t.pid, json, already);
	if (wait && !jq_bool(json, "$.connected"))
		rc = wait_for_client(&t, c, lo.gil_ms);
cleanup:
	free(err);
	free(json);
	sb_free(&body);
	sb_free(&e);
	agent_client__free(c);
	return rc;
}

COMMAND(debug, cmd_debug, "make a running Python process debuggable from VS Code (debugpy)", 75);
