// SPDX-License-Identifier: MIT
/* probing serve: a web UI for recordings and for the Python processes of this machine. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/log.h"
#include "injector/hostport.h"
#include "report/recording.h"
#include "serve/api.h"
#include "serve/http.h"

#define MAX_FILES 32

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing serve [-i FILE]... [--listen ADDR] [FILE...]\n"
		"\n"
		"Serve a web UI for recordings and for the Python processes of this machine, from\n"
		"this binary (no build step, nothing fetched from the network): flame graphs you\n"
		"can zoom, search, filter by process, rank, thread and time range, and compare\n"
		"between two ranks or two recordings; samples per second over the recording; a "
		"SQL\n"
		"console with CSV download; the Python processes of this machine grouped by job,\n"
		"each one's backtrace on demand, and the PyTorch hooks' step and module times\n"
		"(python.torch_trace) with the Chrome/Perfetto trace one click away.\n"
		"\n"
		"The first line printed on stdout is the URL to open; it holds a token made for\n"
		"this run, which every request must carry (the page keeps it in a cookie): other\n"
		"users of this machine cannot use the server, even on loopback. Recordings are "
		"only\n"
		"read. Ctrl-C (or SIGTERM) stops it. See docs/serve.md.\n"
		"\n"
		"Options:\n"
		"  -i, --input FILE   a recording to serve (several: -i a.db -i b.db, or FILEs)\n"
		"      --listen ADDR  where to listen: PORT, HOST:PORT or [IPV6]:PORT; the "
		"default\n"
		"                     is 127.0.0.1 on a free port. Any other address than "
		"loopback\n"
		"                     is reachable from the network: the token still guards it, "
		"but\n"
		"                     HTTP is not encrypted (prefer an SSH tunnel: ssh -L)\n"
		"  -v, --verbose      log every request on stderr\n"
		"  -h, --help         show this help\n"
		"\n"
		"Examples:\n"
		"  probing serve -i app.db\n"
		"  probing serve -i before.db -i after.db --listen 8080\n"
		"  sudo probing serve          # live only: every Python process on this "
		"machine\n");
}

static const struct option options[] = {
	{"input", required_argument, NULL, 'i'},
	{"listen", required_argument, NULL, 'L'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* Check that @path is a recording we can read; its absolute path (malloc'd), or NULL. */
static char *check_file(const char *path)
{
	sqlite3 *db = NULL;
	char *abs;

	if (recording__open(path, &db))
		return NULL;
	recording__close(db);
	abs = realpath(path, NULL);
	if (!abs)
		pr_warn("cannot resolve %s: %s", path, strerror(errno));
	return abs;
}

static int cmd_serve(int argc, char **argv)
{
	const char *listen = HOSTPORT_LISTEN_DEFAULT, *given[MAX_FILES];
	char *files[MAX_FILES], url[512];
	struct http_server *srv = NULL;
	int c, n = 0, i, sig, ret = EXIT_FAIL;
	sigset_t stop;

	cli_getopt_reset();
	while ((c = getopt_long(argc, argv, ":i:vh", options, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (n == MAX_FILES)
				return cli_usage_error("serve", "at most %d recordings", MAX_FILES);
			given[n++] = optarg;
			break;
		case 'L':
			listen = optarg;
			break;
		case 'v':
			log_verbosity++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return cli_bad_option("serve", c, argv);
		}
	}
	{
		char host[256], msg[256];
		unsigned int port;

		if (hostport_parse(listen, false, true, host, sizeof(host), &port, msg,
				   sizeof(msg)))
			return cli_usage_error("serve", "invalid --listen: %s", msg);
	}
	for (; optind < argc; optind++) {
		if (n == MAX_FILES)
			return cli_usage_error("serve", "at most %d recordings", MAX_FILES);
		given[n++] = argv[optind];
	}
	/* Every recording is checked before anything listens: a bad one is a clear error. */
	for (i = 0; i < n; i++) {
		files[i] = check_file(given[i]);
		if (!files[i]) {
			while (i--)
				free(files[i]);
			return EXIT_FAIL;
		}
	}
	api__init((const char *const *)files, n);

	/* Stop on these in this thread (sigwait); the server's threads inherit the mask. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (http__start(listen, api__handle, &srv, url, sizeof(url)))
		goto cleanup;
	printf("%s\n", url);
	fflush(stdout);
	log_cmd("serve",
		"serving %d recording%s and the Python processes of this machine; open the URL "
		"above (Ctrl-C to stop)",
		n, n == 1 ? "" : "s");
	if (!http__loopback(srv))
		log_cmd("serve",
			"listening on %s, reachable from other machines: anyone with the URL can "
			"use it, and HTTP is not encrypted",
			listen);
	while (sigwait(&stop, &sig))
		;
	log_cmd("serve", "stopping (%s)", strsignal(sig));
	api__stop_all();
	http__stop(srv);
	ret = EXIT_OK;
cleanup:
	for (i = 0; i < n; i++)
		free(files[i]);
	return ret;
}

COMMAND(serve, cmd_serve, "web UI for recordings and live Python processes", 130);
