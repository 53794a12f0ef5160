// SPDX-License-Identifier: MIT
/* subcmd: probing's own commands as child processes, with a time limit and output caps. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "base/subcmd.h"

#define MAX_ARGS 64

/* A file holding @input, positioned at its start, to be the child's stdin. */
static int input_fd(const char *input, size_t len)
{
	int fd, err;

	if (!input)
		return open("/dev/null", O_RDONLY | O_CLOEXEC);
	fd = memfd_create("probing-input", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = write_all(fd, input, len);
	if (!err && lseek(fd, 0, SEEK_SET) < 0)
		err = -errno;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/* In the child, between fork and exec: async-signal-safe calls only. */
static void __attribute__((noreturn)) exec_child(int in, int out, int err, char *const *argv)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigset_t none;
	int s;

	setpgid(0, 0);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(127);
	syscall(SYS_close_range, 3, ~0U, 0);
	for (s = 1; s < NSIG; s++)
		sigaction(s, &dfl, NULL); /* fails harmlessly for SIGKILL, SIGSTOP, RT internals */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv("/proc/self/exe", argv);
	_exit(127);
}

int subcmd__stop(pid_t pid)
{
	if (pid <= 0)
		return -EINVAL;
	return kill(-pid, SIGTERM) ? -errno : 0;
}

/* Append what @fd has to @sb (up to @cap bytes kept; the rest read and dropped). */
static ssize_t drain(int fd, struct strbuf *sb, size_t cap, bool *over)
{
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));
	size_t keep;

	if (n <= 0)
		return n < 0 && (errno == EINTR || errno == EAGAIN) ? 1 : n;
	keep = sb->len >= cap ? 0 : min((size_t)n, cap - sb->len);
	if (keep < (size_t)n && over)
		*over = true;
	if (keep && sb_append(sb, buf, keep))
		return -1;
	return n;
}

int subcmd__run(const char *const *args, const struct subcmd_opts *o, struct subcmd_result *r)
{
	char *argv[MAX_ARGS + 2];
	int in = -1, out[2] = {-1, -1}, errp[2] = {-1, -1}, i, err = 0, wstatus = 0;
	size_t cap = o->max_out ? o->max_out : SUBCMD_MAX_OUT;
	uint64_t deadline = 0, kill_at = 0;
	bool out_open = true, err_open = true, stopping = false;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	argv[0] = "probing";
	for (i = 0; args[i]; i++) {
		if (i >= MAX_ARGS)
			return -E2BIG;
		argv[i + 1] = (char *)args[i];
	}
	argv[i + 1] = NULL;
	in = input_fd(o->input, o->input_len);
	if (in < 0)
		return in;
	if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
		err = -errno;
		goto cleanup;
	}
	pid = fork();
	if (pid < 0) {
		err = -errno;
		goto cleanup;
	}
	if (!pid)
		exec_child(in, out[1], errp[1], argv);
	setpgid(pid, pid); /* also here: no kill(-pid) may miss it */
	close(out[1]);
	close(errp[1]);
	out[1] = errp[1] = -1;
	if (o->on_pid)
		o->on_pid(pid, o->ctx);
	if (o->timeout_ms > 0)
		deadline = now_mono_ns() + (uint64_t)o->timeout_ms * 1000000;

	while (out_open || err_open) {
		struct pollfd p[3] = {
			{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}, {-1, POLLRDHUP, 0}};
		uint64_t now = now_mono_ns(), next = kill_at ? kill_at : deadline;
		int wait = -1;

		if (!out_open)
			p[0].fd = -1;
		if (!err_open)
			p[1].fd = -1;
		if (o->watch_fd >= 0 && !stopping)
			p[2].fd = o->watch_fd;
		if (next)
			wait = next <= now ? 0 : (int)min((next - now) / 1000000 + 1, 60000ull);
		if (poll(p, 3, wait) < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		now = now_mono_ns();
		if (kill_at && now >= kill_at) {
			kill(-pid, SIGKILL);
			kill_at = 0;
		}
		if (!stopping && deadline && now >= deadline) {
			r->timed_out = true;
			goto stop;
		}
		if (!stopping && p[2].revents) {
			r->hung_up = true;
			goto stop;
		}
		if (p[0].revents) {
			if (o->on_out && !stopping) {
				char buf[65536];
				ssize_t n = read(out[0], buf, sizeof(buf));

				if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
					out_open = false;
				} else if (n > 0 && o->on_out(buf, n, o->ctx)) {
					r->hung_up = true;
					goto stop;
				}
			} else {
				ssize_t n = drain(out[0], &r->out, stopping ? r->out.len : cap,
						  &r->truncated);

				if (n <= 0)
					out_open = false;
				if (r->truncated && !stopping)
					goto stop;
			}
		}
		if (p[1].revents && drain(errp[0], &r->err, SUBCMD_MAX_ERR, NULL) <= 0)
			err_open = false;
		continue;
stop:
		stopping = true;
		kill(-pid, SIGTERM);
		kill_at = now_mono_ns() + (uint64_t)SUBCMD_KILL_MS * 1000000;
	}
	if (err)
		kill(-pid, SIGKILL);
	while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
		;
	if (o->on_pid)
		o->on_pid(0, o->ctx);
	r->status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
	if (err)
		subcmd__result_free(r);
cleanup:
	if (in >= 0)
		close(in);
	for (i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	return err;
}

void subcmd__result_free(struct subcmd_result *r)
{
	sb_free(&r->out);
	sb_free(&r->err);
}
