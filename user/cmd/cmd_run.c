// SPDX-License-Identifier: MIT
/* probing run: start a program with the agent preloaded (no ptrace needed). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netdb.h>
#include <sys/random.h>

#include "base/cli.h"
#include "injector/agent_crash.h"
#include "injector/hostport.h"
#include "live/live.h"
#include "base/log.h"
#include "base/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing run [--listen ADDR] [--crash[=FILE]] -- CMD [ARGS...]\n"
		"\n"
		"Run CMD with the probing agent preloaded (LD_PRELOAD, PROBING=1 in its "
		"environment),\n"
		"for machines or containers where ptrace is not allowed. Every Python process CMD\n"
		"starts (CMD itself, or the python a shell script runs) serves its agent from the\n"
		"start: then use 'probing eval/repl/query -p PID' as with an injected agent. "
		"Other\n"
		"programs ignore the library. probing replaces itself with CMD (same PID, exit\n"
		"status and signals).\n"
		"\n"
		"Options:\n"
		"      --listen ADDR    the first Python process also serves TCP on ADDR (PORT,\n"
		"                       HOST:PORT or [IPV6]:PORT; host 127.0.0.1 unless given);\n"
		"                       the token is printed on stderr, and again by 'probing\n"
		"                       inject -p PID --show-token'. The agent takes it out of "
		"the\n"
		"                       environment before the program runs: the processes it\n"
		"                       starts do not get it (nor a TCP port of their own)\n"
		"      --crash[=FILE]   crash capture in every Python process CMD starts: on a "
		"fatal\n"
		"                       signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) or an\n"
		"                       uncaught Python exception in any thread, every thread's\n"
		"                       Python and native stacks with their local variables go "
		"to\n"
		"                       FILE (SQLite; default probing-crash-PID.db in the "
		"working\n"
		"                       directory; %%p in FILE is the pid) and a summary to "
		"stderr;\n"
		"                       then the process ends as it would have (same signal, "
		"core\n"
		"                       dump or exit status). docs/live.md \"Crash capture\"\n"
		"  -h, --help           this help\n"
		"\n"
		"Examples:\n"
		"  probing run -- python3 train.py --epochs 10\n"
		"  probing run --listen 9400 -- python3 serve.py\n"
		"  probing run --crash -- python3 train.py\n");
}

/*
 * Check --listen @spec before anything runs (the agent inside the program could only say
 * so on the program's stderr): its form, that its host resolves and that it can be bound
 * now (a trial bind, released at once). The address to show goes to @shown. Return EXIT_OK,
 * or EXIT_USAGE / EXIT_FAIL with the reason printed.
 */
static int check_listen(const char *spec, char *shown, size_t len)
{
	struct addrinfo hints = {0}, *res = NULL, *ai;
	char host[256], port_s[8], why[300];
	unsigned int port;
	int rc, fd = -1, one = 1, err = 0;

	if (strlen(spec) > 200)
		return cli_usage_error("run", "bad --listen address: longer than 200 characters");
	if (hostport_parse(spec, false, true, host, sizeof(host), &port, why, sizeof(why)))
		return cli_usage_error("run", "bad --listen address: %s", why);
	snprintf(port_s, sizeof(port_s), "%u", port);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host[0] ? host : HOSTPORT_DEFAULT_HOST, port_s, &hints, &res);
	if (rc) {
		log_cmd("run", "bad --listen address '%s': %s", spec, gai_strerror(rc));
		return EXIT_FAIL;
	}
	for (ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen)) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		log_cmd("run", "cannot serve TCP on %s: %s", spec,
			strerror(err ? err : EADDRNOTAVAIL));
		return EXIT_FAIL;
	}
	close(fd);
	snprintf(shown, len, "%s%s%s:%s%s", strchr(host, ':') ? "[" : "",
		 host[0] ? host : HOSTPORT_DEFAULT_HOST, strchr(host, ':') ? "]" : "",
		 port ? port_s : "0", port ? "" : " (any free port: 'probing list' shows which)");
	return EXIT_OK;
}

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'L'},
		{"crash", optional_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *listen = NULL, *lib, *old, *crash_file = NULL;
	char self[PATH_MAX];
	bool crash = false;
	char abs[PATH_MAX], token[33];
	unsigned char rnd[16];
	struct strbuf pre = {0};
	char shown[400];
	int ch, i, rc;

	cli_getopt_reset();
	/* '+': stop at CMD, whose own options are not ours. */
	while ((ch = getopt_long(argc, argv, "+:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'L':
			listen = optarg;
			break;
		case 'C':
			if (crash)
				return cli_usage_error("run", "--crash given twice");
			crash = true;
			crash_file = optarg ? optarg : CRASH_DEFAULT_FILE;
			if (!*crash_file || strlen(crash_file) > 3000)
				return cli_usage_error("run", "bad --crash file name: %s",
						       *crash_file ? "too long" : "empty");
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("run", ch, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("run", "no command to run (probing run -- CMD ARGS)");
	if (listen) {
		rc = check_listen(listen, shown, sizeof(shown));
		if (rc)
			return rc;
	}
	lib = live__agent_path("run");
	if (!lib)
		return EXIT_FAIL;
	if (!realpath(lib, abs)) {
		log_cmd("run", "%s: %s", lib, strerror(errno));
		return EXIT_FAIL;
	}
	/* LD_PRELOAD splits on spaces and colons. */
	if (strpbrk(abs, " :\t")) {
		log_cmd("run",
			"the agent's path '%s' contains a space or a colon, which LD_PRELOAD "
			"cannot carry.",
			abs);
		fputs("Copy libprobing-agent.so elsewhere and set $PROBING_AGENT.\n", stderr);
		return EXIT_FAIL;
	}
	old = getenv("LD_PRELOAD");
	if (sb_puts(&pre, abs) || (old && *old && (sb_puts(&pre, ":") || sb_puts(&pre, old))))
		return EXIT_FAIL;
	if (setenv("LD_PRELOAD", sb_str(&pre), 1) || setenv("PROBING", "1", 1)) {
		log_cmd("run", "cannot set the environment: %s", strerror(errno));
		return EXIT_FAIL;
	}
	sb_free(&pre);
	/* Crash capture: the agent reads these in each Python process (injector/agent_crash.h);
	 * one exported in the caller's shell must not turn it on. */
	if (crash) {
		if (!realpath("/proc/self/exe", self)) {
			log_cmd("run", "cannot tell where probing is: %s", strerror(errno));
			return EXIT_FAIL;
		}
		if (setenv(CRASH_ENV_FILE, crash_file, 1) || setenv(CRASH_ENV_BIN, self, 1)) {
			log_cmd("run", "cannot set the environment: %s", strerror(errno));
			return EXIT_FAIL;
		}
	} else {
		unsetenv(CRASH_ENV_FILE);
		unsetenv(CRASH_ENV_BIN);
	}
	/* A PROBING_LISTEN exported in the caller's shell must not make the program listen. */
	if (!listen)
		unsetenv("PROBING_LISTEN");
	if (listen) {
		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
			log_cmd("run", "no randomness for a token: %s", strerror(errno));
			return EXIT_FAIL;
		}
		for (i = 0; i < 16; i++)
			snprintf(token + 2 * i, 3, "%02x", rnd[i]);
		if (setenv("PROBING_LISTEN", listen, 1) || setenv("PROBING_TOKEN", token, 1)) {
			log_cmd("run", "cannot set the environment: %s", strerror(errno));
			return EXIT_FAIL;
		}
		log_cmd("run", "the agent will serve TCP on %s; clients need PROBING_TOKEN=%s",
			shown, token);
	}
	pr_info("run: LD_PRELOAD=%s PROBING=1 %s", getenv("LD_PRELOAD"), argv[optind]);
	execvp(argv[optind], argv + optind);
	log_cmd("run", "cannot run '%s': %s", argv[optind], strerror(errno));
	return EXIT_FAIL;
}

COMMAND(run, cmd_run, "start a program with the agent preloaded (no ptrace needed)", 120);
