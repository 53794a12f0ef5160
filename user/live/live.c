// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "injector/agent.h"
#include "base/cli.h"
#include "injector/elfsym.h"
#include "injector/hostport.h"
#include "base/escape.h"
#include "base/jsonq.h"
#include "live/live.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/procmaps.h"
#include "base/util.h"

#define SOCKET_WAIT_MS 3000 /* for a freshly started agent to bind its socket */

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

int live__target(const char *cmd, const char *pid_arg, const char *t_arg, struct live_target *t)
{
	long v;

	memset(t, 0, sizeof(*t));
	if (pid_arg && t_arg)
		return cli_usage_error(cmd, "give the target once: -p PID or -t TARGET");
	if (!pid_arg && t_arg && all_digits(t_arg))
		pid_arg = t_arg;
	if (pid_arg) {
		if (parse_long(pid_arg, 1, 0x7fffffff, &v))
			return cli_usage_error(cmd, "'%s' is not a process id", pid_arg);
		t->pid = v;
		return EXIT_OK;
	}
	if (t_arg) {
		char host[256], why[300];
		unsigned int port;

		if (!strchr(t_arg, ':') || strlen(t_arg) >= sizeof(t->hostport))
			return cli_usage_error(cmd, "'%s' is neither a process id nor HOST:PORT",
					       t_arg);
		if (hostport_parse(t_arg, true, false, host, sizeof(host), &port, why, sizeof(why)))
			return cli_usage_error(cmd, "bad -t target: %s", why);
		snprintf(t->hostport, sizeof(t->hostport), "%s", t_arg);
		t->token = getenv("PROBING_TOKEN");
		return EXIT_OK;
	}
	return cli_usage_error(cmd, "which process? Give -p PID");
}

const char *live__describe(const struct live_target *t, char *buf, size_t len)
{
	char comm[64];

	if (t->pid) {
		procinfo_comm_shown(t->pid, comm, sizeof(comm));
		snprintf(buf, len, "process %d (%s)", t->pid, comm);
	} else {
		snprintf(buf, len, "the agent at %.100s", t->hostport);
	}
	return buf;
}

const char *live__agent_path(const char *cmd)
{
	static char path[PATH_MAX + 64];
	char self[PATH_MAX], *slash;
	const char *env = getenv("PROBING_AGENT");
	ssize_t n;

	if (env && *env) {
		if (access(env, R_OK)) {
			log_cmd(cmd,
				"the agent library %s (from $PROBING_AGENT) is missing or "
				"unreadable: %s",
				env, strerror(errno));
			return NULL;
		}
		snprintf(path, sizeof(path), "%s", env);
		return path;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		snprintf(path, sizeof(path), "%s/libprobing-agent.so", self);
		if (!access(path, R_OK))
			return path;
		snprintf(path, sizeof(path), "%s/../lib/probing/libprobing-agent.so", self);
		if (!access(path, R_OK))
			return path;
	}
	log_cmd(cmd,
		"the agent library libprobing-agent.so was not found next to the probing binary "
		"(%s) nor in %s/../lib/probing/.",
		n > 0 ? self : "?", n > 0 ? self : "?");
	fputs("Rebuild with 'make', reinstall with 'make install', or point $PROBING_AGENT at "
	      "it.\n",
	      stderr);
	return NULL;
}

int live__is_python(pid_t pid)
{
	struct procmaps pm = {};
	char exe[PATH_MAX] = "";
	int i, err, fd, found = 0;

	err = procmaps__read(pid, &pm);
	if (err)
		return err;
	for (i = 0; i < (int)pm.nr && !found; i++) {
		const char *b = procmaps__basename(&pm.maps[i]);

		/* Loaded as code: a tool reading the file (probing record maps it) is no Python. */
		if (pm.maps[i].x && !strncmp(b, "libpython3", 10))
			found = 1;
	}
	/* A python executable with the interpreter linked in (Debian's python3.11) exports the
	 * C API from the executable itself. */
	if (!found) {
		char fn[64];
		ssize_t n;

		snprintf(fn, sizeof(fn), "/proc/%d/exe", pid);
		n = readlink(fn, exe, sizeof(exe) - 1);
		if (n > 0) {
			exe[n] = '\0';
			if (n > 10 && !strcmp(exe + n - 10, " (deleted)"))
				exe[n - 10] = '\0';
		}
		for (i = 0; i < (int)pm.nr && !found; i++) {
			struct elfsym *e;

			if (pm.maps[i].offset || strcmp(pm.maps[i].path, exe))
				continue;
			fd = procmaps__open(pid, &pm.maps[i]);
			if (fd < 0)
				break;
			e = elfsym__open_fd(fd);
			close(fd);
			if (e && !elfsym__lookup(e, "Py_IsInitialized", NULL, NULL, NULL))
				found = 1;
			elfsym__free(e);
			break;
		}
	}
	procmaps__release(&pm);
	return found;
}

/* Try to connect for up to @ms; -ESRCH as soon as the process is gone (or a zombie). */
static int connect_wait(pid_t pid, int ms, struct agent_client **out)
{
	uint64_t end = now_mono_ns() + (uint64_t)ms * 1000000ULL;
	struct timespec ts = {0, 1000000};
	int err;

	for (;;) {
		err = agent_client__connect_pid(pid, 1000, out);
		if (!err || (err != -ECONNREFUSED && err != -ENOENT))
			return err;
		if (!procinfo_alive(pid))
			return -ESRCH;
		if (now_mono_ns() >= end)
			return err;
		nanosleep(&ts, NULL);
	}
}

/*
 * The injector's messages (and inject__check_permission's) are lines of ours with names of the
 * target's in them: "probing CMD: @lead<first line>", then the lines that say what to do as
 * they are, all escaped (each line on its own).
 */
static void print_lines(const char *cmd, const char *lead, const char *msg)
{
	struct strbuf e = {0};
	const char *s = text_str(&e, msg, TEXT_LINES), *nl = strchr(s, '\n');

	log_cmd(cmd, "%s%.*s", lead, nl ? (int)(nl - s) : (int)strlen(s), s);
	if (nl && nl[1])
		fprintf(stderr, "%s%s", nl + 1, s[strlen(s) - 1] == '\n' ? "" : "\n");
	sb_free(&e);
}

static void print_inject_error(const char *cmd, pid_t pid, int err, const struct inject_info *info)
{
	char lead[64];

	if (err == -ESRCH || err == -EPERM || err == -EBUSY || err == -EAGAIN) {
		print_lines(cmd, "", info->error);
		return;
	}
	snprintf(lead, sizeof(lead), "cannot load the agent into process %d: ", pid);
	print_lines(cmd, lead, info->error[0] ? info->error : strerror(-err));
}

int live__ensure_agent(const char *cmd, pid_t pid, enum live_agent_state *state,
		       struct inject_info *info)
{
	struct inject_info local;
	struct agent_client *c = NULL;
	char mapped[PATH_MAX], comm[64], msg[1024];
	const char *lib;
	int err;

	if (!info)
		info = &local;
	memset(info, 0, sizeof(*info));
	err = inject__check_permission(pid, msg, sizeof(msg));
	if (err) {
		print_lines(cmd, "", msg);
		return EXIT_FAIL;
	}
	/* Serving already? Then there is nothing to do (injecting twice is a no-op). */
	if (!agent_client__connect_pid(pid, 1000, &c)) {
		agent_client__free(c);
		*state = LIVE_ALREADY;
		return EXIT_OK;
	}
	err = live__is_python(pid);
	if (err == -ESRCH) {
		log_cmd(cmd, "process %d has exited", pid);
		return EXIT_FAIL;
	}
	if (err == 0) {
		procinfo_comm_shown(pid, comm, sizeof(comm));
		log_cmd(cmd,
			"process %d (%s) is not a Python process (no libpython and no Python C API "
			"in its executable).",
			pid, comm);
		fprintf(stderr,
			"The agent serves CPython 3.8-3.13 processes; for native code use 'probing "
			"record -p %d'.\n",
			pid);
		return EXIT_FAIL;
	}
	err = inject__find_module(pid, AGENT_LIB_PREFIX, mapped, sizeof(mapped));
	if (err == 1) {
		/* Loaded but silent: a child forked from a process with the agent, or a process
		 * started with the agent preloaded but PROBING unset. Start its thread. */
		err = inject__call(pid, mapped, AGENT_START_SYM, info);
		if (err) {
			print_inject_error(cmd, pid, err, info);
			return EXIT_FAIL;
		}
		*state = LIVE_RESTARTED;
	} else {
		lib = live__agent_path(cmd);
		if (!lib)
			return EXIT_FAIL;
		err = inject__dlopen(pid, lib, info);
		if (err) {
			print_inject_error(cmd, pid, err, info);
			return EXIT_FAIL;
		}
		*state = LIVE_INJECTED;
	}
	pr_info("agent %s in process %d by thread %d in %.1f ms (thread stopped %.2f ms%s)",
		*state == LIVE_INJECTED ? "loaded" : "started", pid, info->tid,
		info->total_ns / 1e6, info->stopped_ns / 1e6,
		info->copied ? ", library copied" : "");
	err = connect_wait(pid, SOCKET_WAIT_MS, &c);
	agent_client__free(c);
	if (err == -ESRCH) {
		log_cmd(cmd, "process %d exited while its agent was starting", pid);
		return EXIT_FAIL;
	}
	if (err) {
		log_cmd(cmd,
			"the agent was loaded into process %d but its socket @%s%d does not answer "
			"(%s).",
			pid, AGENT_SOCK_PREFIX, (int)agent_client__ns_pid(pid), strerror(-err));
		fputs("Is the process in another network namespace that probing cannot enter? Run "
		      "probing as root.\n",
		      stderr);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

void live__tcp_error(const char *cmd, const struct live_target *t, int err)
{
	const char *hp = t->hostport, *colon = strrchr(hp, ':');
	int hostlen = colon ? (int)(colon - hp) : (int)strlen(hp);

	if (err == -EACCES) {
		log_cmd(cmd, "the agent at %s refused the token.", hp);
		fputs("Set $PROBING_TOKEN to the token 'probing inject --listen' printed ('probing "
		      "inject -p PID --show-token' prints it again).\n",
		      stderr);
	} else if (err == -EAGAIN) {
		log_cmd(cmd,
			"the agent at %s did not look at the token: too many failed "
			"authentications came from this address lately.",
			hp);
		fputs("Wait a few seconds, and check $PROBING_TOKEN ('probing inject -p PID "
		      "--show-token' prints the right one).\n",
		      stderr);
	} else if (err == -ENXIO) {
		log_cmd(cmd, "cannot find the host '%.*s' of %s: no such host name.", hostlen, hp,
			hp);
		fputs("Check the name, or give the agent's IP address (-t ADDRESS:PORT).\n",
		      stderr);
	} else if (err == -EHOSTDOWN) {
		log_cmd(cmd, "cannot find the host '%.*s' of %s: the name service did not answer.",
			hostlen, hp, hp);
		fputs("Try again, or give the agent's IP address (-t ADDRESS:PORT).\n", stderr);
	} else if (err == -ECONNREFUSED) {
		log_cmd(cmd, "nothing accepts connections at %s.", hp);
		fputs("Is an agent serving TCP there ('probing inject -p PID --listen "
		      "[HOST:]PORT')? Check the port.\n",
		      stderr);
	} else if (err == -ETIMEDOUT)
		log_cmd(cmd,
			"%s did not answer in time: a wrong address, or a firewall dropping the "
			"connection.",
			hp);
	else
		log_cmd(cmd, "cannot connect to the agent at %s: %s", hp, strerror(-err));
}

int live__connect(const char *cmd, const struct live_target *t, bool inject,
		  struct agent_client **out)
{
	enum live_agent_state st;
	char desc[128];
	int err;

	if (!t->pid) {
		err = agent_client__connect_tcp(t->hostport, t->token, 5000, out);
		if (!err)
			return EXIT_OK;
		live__tcp_error(cmd, t, err);
		return EXIT_FAIL;
	}
	if (inject) {
		err = live__ensure_agent(cmd, t->pid, &st, NULL);
		if (err)
			return err;
	}
	err = agent_client__connect_pid(t->pid, 2000, out);
	if (!err)
		return EXIT_OK;
	if (err == -ESRCH)
		log_cmd(cmd, "no such process: %d", t->pid);
	else if (err == -ECONNREFUSED || err == -ENOENT) {
		log_cmd(cmd, "the agent is not loaded in %s.",
			live__describe(t, desc, sizeof(desc)));
		fprintf(stderr, "Load it with 'probing inject -p %d'.\n", t->pid);
	} else
		log_cmd(cmd, "cannot connect to the agent of %s: %s",
			live__describe(t, desc, sizeof(desc)), strerror(-err));
	return EXIT_FAIL;
}

int live__request(const char *cmd, const struct live_target *t, struct agent_client *c,
		  const char *kind, const char *body, int gil_ms, int run_ms,
		  volatile sig_atomic_t *interrupt, char **json)
{
	struct agent_reply r = {0};
	struct strbuf esc = {0};
	char desc[128], *e;
	int err;

	*json = NULL;
	err = agent_client__request(c, kind, body, gil_ms, run_ms, interrupt, &r);
	if (err == -ETIMEDOUT && agent_client__hung(c)) {
		live__describe(t, desc, sizeof(desc));
		log_cmd(cmd,
			"the agent in %s did not get the GIL within %.1f s: the target looks hung "
			"(a thread holds the GIL and does not release it, e.g. a long call into C "
			"code), or the agent is busy with another request.",
			desc, gil_ms / 1000.0);
		if (t->pid && strcmp(cmd, "backtrace"))
			fprintf(stderr,
				"See what every thread is doing with 'probing backtrace -p %d'.\n",
				t->pid);
		return EXIT_FAIL;
	}
	if (err) {
		live__describe(t, desc, sizeof(desc));
		if (err == -ECONNRESET || err == -EPIPE)
			log_cmd(cmd,
				"the agent in %s closed the connection (did the process exit?)",
				desc);
		else if (err == -ETIMEDOUT)
			log_cmd(cmd, "%s did not answer within %.1f s", desc, run_ms / 1000.0);
		else
			log_cmd(cmd, "request to %s failed: %s", desc, strerror(-err));
		return EXIT_FAIL;
	}
	if (r.type == FRAME_RESULT) {
		*json = r.data;
		return EXIT_OK;
	}
	live__describe(t, desc, sizeof(desc));
	/* What the agent says comes from inside the target: escaped (escape.h). */
	if (r.type == FRAME_PYERROR) {
		e = jq_text(r.data, "$.error");
		log_cmd(cmd, "the agent in %s failed: %s", desc, text_str(&esc, e ? e : r.data, 0));
		free(e);
		e = jq_text(r.data, "$.traceback");
		if (e && log_verbosity > 0)
			fputs(text_str(&esc, e, TEXT_LINES), stderr);
		free(e);
	} else {
		log_cmd(cmd, "%s: %s", desc, text_str(&esc, r.data, 0));
	}
	sb_free(&esc);
	agent_reply__free(&r);
	return EXIT_FAIL;
}

int live__shared_option(const char *cmd, int ch, bool timeout, struct live_opts *o)
{
	switch (ch) {
	case 'p':
		o->pid_arg = optarg;
		return EXIT_OK;
	case 't':
		o->t_arg = optarg;
		return EXIT_OK;
	case 'v':
		log_verbosity++;
		return EXIT_OK;
	case 'C':
		o->children = true;
		return EXIT_OK;
	case 'T':
		if (timeout)
			return live__parse_timeout(cmd, optarg, &o->gil_ms);
		return LIVE_OPT_NOT_SHARED;
	default:
		return LIVE_OPT_NOT_SHARED;
	}
}

int live__parse_timeout(const char *cmd, const char *arg, int *ms)
{
	double s;

	if (parse_seconds(arg, 0.01, 86400, &s))
		return cli_usage_error(cmd, "bad --timeout '%s' (seconds, e.g. 5 or 0.5)", arg);
	*ms = (int)(s * 1000);
	return EXIT_OK;
}

void live__print_output(const char *json)
{
	char *v = jq_text(json, "$.stdout");

	if (v)
		fputs(v, stdout);
	free(v);
	fflush(stdout);
	v = jq_text(json, "$.stderr");
	if (v)
		fputs(v, stderr);
	free(v);
}
