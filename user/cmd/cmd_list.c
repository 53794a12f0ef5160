// SPDX-License-Identifier: MIT
/* probing list: the processes in which an agent is running. */
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

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: probing list [--no-header]\n"
		"\n"
		"List the processes in which the probing agent is running: the owners of the\n"
		"listening abstract sockets @probing-... of this network namespace\n"
		"(/proc/net/unix), among the processes you may inspect. Columns: PID, since when\n"
		"the agent runs, Python version, TCP address if it serves one, command line. An\n"
		"agent that does not answer within a second is listed with PYTHON '(busy?)'.\n"
		"\n"
		"Options:\n"
		"      --no-header   no header line\n"
		"  -h, --help        this help\n"
		"\n"
		"Examples:\n"
		"  probing list\n"
		"  probing list --no-header | awk '{print $1}'\n");
}

static int pid_cmp(const void *a, const void *b)
{
	return *(const pid_t *)a - *(const pid_t *)b;
}

struct sock {
	unsigned long long ino;
	pid_t pid;
};

static int sock_cmp(const void *a, const void *b)
{
	const struct sock *x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int pid_of_sock(const struct sock *s, int n, unsigned long long ino)
{
	int lo = 0, hi = n - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (s[mid].ino == ino)
			return mid;
		if (s[mid].ino < ino)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/*
 * The processes that listen on an abstract socket named @probing-... in this network
 * namespace. The number in the name is the pid in the process's own pid namespace, so the
 * owner is found by the socket's inode among the file descriptors of every process we may
 * read.
 */
static int agent_pids(pid_t **out, int *nr)
{
	char *buf, *line, *save = NULL;
	struct sock *socks = NULL, *stmp;
	pid_t *pids = NULL, *tmp;
	int n = 0, cap = 0, ns = 0, scap = 0, i;
	struct dirent *pe, *fe;
	DIR *proc, *fds;

	buf = read_file("/proc/net/unix", 0, NULL);
	if (!buf)
		return -errno;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long flags = 0;
		unsigned long long ino;
		char path[256] = "";

		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %lx %*s %*s %llu %255s", &flags, &ino, path) < 3)
			continue;
		/* __SO_ACCEPTCON (0x10000): a listening socket. */
		if (!(flags & 0x10000) || path[0] != '@' ||
		    strncmp(path + 1, AGENT_SOCK_PREFIX, strlen(AGENT_SOCK_PREFIX)))
			continue;
		if (ns == scap) {
			scap = scap ? scap * 2 : 16;
			stmp = realloc(socks, scap * sizeof(*socks));
			if (!stmp)
				goto nomem;
			socks = stmp;
		}
		socks[ns++] = (struct sock){ino, 0};
	}
	free(buf);
	buf = NULL;
	*out = NULL;
	*nr = 0;
	if (!ns)
		return 0;
	qsort(socks, ns, sizeof(*socks), sock_cmp);
	proc = opendir("/proc");
	if (!proc)
		goto nomem;
	while ((pe = readdir(proc))) {
		char dir[300];
		pid_t pid = atoi(pe->d_name);

		if (pid <= 0)
			continue;
		snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
		fds = opendir(dir);
		if (!fds)
			continue; /* not ours to read */
		while ((fe = readdir(fds))) {
			char fn[600], link[64];
			unsigned long long ino;
			ssize_t l;

			snprintf(fn, sizeof(fn), "%s/%s", dir, fe->d_name);
			l = readlink(fn, link, sizeof(link) - 1);
			if (l <= 0)
				continue;
			link[l] = '\0';
			if (sscanf(link, "socket:[%llu]", &ino) != 1)
				continue;
			i = pid_of_sock(socks, ns, ino);
			if (i >= 0 && !socks[i].pid)
				socks[i].pid = pid;
		}
		closedir(fds);
	}
	closedir(proc);
	for (i = 0; i < ns; i++) {
		if (!socks[i].pid)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			tmp = realloc(pids, cap * sizeof(*pids));
			if (!tmp)
				goto nomem;
			pids = tmp;
		}
		pids[n++] = socks[i].pid;
	}
	free(socks);
	if (n)
		qsort(pids, n, sizeof(*pids), pid_cmp);
	*out = pids;
	*nr = n;
	return 0;
nomem:
	free(buf);
	free(socks);
	free(pids);
	return -ENOMEM;
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

static int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {
		{"no-header", no_argument, NULL, 'H'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct strbuf e[3] = {{0}};
	pid_t *pids = NULL;
	bool header = true;
	int ch, n = 0, i, shown = 0, err;

	cli_getopt_reset();
	while ((ch = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (ch) {
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
	err = agent_pids(&pids, &n);
	if (err) {
		fprintf(stderr, "probing list: cannot read /proc/net/unix: %s\n", strerror(-err));
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
		fprintf(stderr, "probing list: no process with a running agent "
				"(load one with 'probing inject -p PID')\n");
	return EXIT_OK;
}

COMMAND(list, cmd_list, "processes in which the agent is running", 100);
