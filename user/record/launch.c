// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "record/launch.h"

/* In the child: wait for the go, then exec; report a failed exec through @errw. */
static void __attribute__((noreturn)) run_child(char **argv, int gor, int errw)
{
	char c;
	int e;

	/* Wait until the parent has made us a target (or died: the pipe closes then too). */
	while (read(gor, &c, 1) < 0 && errno == EINTR)
		;
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	execvp(argv[0], argv);
	e = errno;
	if (write(errw, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

int launch__start(struct launch *l, char **argv)
{
	int go[2] = {-1, -1}, err[2] = {-1, -1}, e;
	pid_t pid;

	if (pipe2(go, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		e = errno;
		goto fail;
	}
	pid = fork();
	if (pid < 0) {
		e = errno;
		goto fail;
	}
	if (pid == 0) {
		close(go[1]);
		close(err[0]);
		run_child(argv, go[0], err[1]);
	}
	close(go[0]);
	close(err[1]);
	l->pid = pid;
	l->release = go[1];
	l->errfd = err[0];
	return 0;
fail:
	if (go[0] >= 0) {
		close(go[0]);
		close(go[1]);
	}
	if (err[0] >= 0) {
		close(err[0]);
		close(err[1]);
	}
	return -e;
}

int launch__release(struct launch *l)
{
	int e = 0;

	close(l->release);
	l->release = -1;
	/* Closed by a successful exec (close-on-exec), or it brings the exec's errno. */
	if (read(l->errfd, &e, sizeof(e)) != sizeof(e))
		e = 0;
	close(l->errfd);
	l->errfd = -1;
	if (e) {
		waitpid(l->pid, NULL, 0);
		l->pid = 0;
	}
	return -e;
}

bool launch__reaped(struct launch *l)
{
	struct rusage ru = {};

	if (l->pid <= 0 || wait4(l->pid, NULL, WNOHANG, &ru) != l->pid)
		return false;
	l->pid = 0;
	l->cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
		 (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	return true;
}

void launch__end(struct launch *l)
{
	if (l->pid > 0 && !waitpid(l->pid, NULL, WNOHANG)) {
		/* Never released, it must not start the command now: no closing the pipe first. */
		kill(l->pid, l->release >= 0 ? SIGKILL : SIGTERM);
		waitpid(l->pid, NULL, 0);
	}
	l->pid = 0;
	if (l->release >= 0)
		close(l->release);
	if (l->errfd >= 0)
		close(l->errfd);
	l->release = l->errfd = -1;
}
