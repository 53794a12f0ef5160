// SPDX-License-Identifier: MIT
/*
 * agent_crash: the fatal-signal side of crash capture (agent_crash.h).
 *
 * The handler runs on the crashing thread and uses only async-signal-safe calls: write,
 * prctl, vfork, execve, waitpid, kill, nanosleep, clock_gettime, sigaction. Everything it
 * needs (the program, its argument strings) is prepared before a crash, at install time.
 *
 * Guards:
 *  - while it runs every fatal signal is blocked on that thread (sa_mask): a fault inside the
 *    handler itself gets the kernel's default action at once (a blocked synchronous fault is
 *    never queued), so the process dies of it as it would have without us;
 *  - a fatal signal delivered again to the thread that is capturing (a handler that chains
 *    back to us, an abort() in the capture) skips the capture: previous disposition, re-raise;
 *  - another thread that crashes meanwhile waits for the capture, then takes its course;
 *  - 'probing crashdump' gets CRASH_TIMEOUT_S to finish, then is killed.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "agent_crash.h"

#define CRASH_TIMEOUT_S 60
#define PATH_LEN	4096

extern char **environ;

static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
#define NFATAL ((int)(sizeof(fatal_sigs) / sizeof(fatal_sigs[0])))

static struct {
	bool installed;
	char bin[PATH_LEN];
	char file[PATH_LEN];
	char tmpl[PATH_LEN]; /* the file as given: "%p" is the pid */
	char pid[16];
	struct sigaction old[NFATAL];
	atomic_int busy; /* the tid of the thread capturing, 0 when none */
} cr;

/* ---- async-signal-safe helpers ----------------------------------------------------------- */

static void say(const char *s)
{
	size_t n = strlen(s);

	while (n) {
		ssize_t w = write(2, s, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

/* @v in decimal into @buf (at least 24 bytes). */
static char *fmt_long(char *buf, long long v)
{
	char tmp[24];
	int n = 0, o = 0;
	unsigned long long u = v < 0 ? -(unsigned long long)v : (unsigned long long)v;

	do {
		tmp[n++] = '0' + u % 10;
		u /= 10;
	} while (u);
	if (v < 0)
		buf[o++] = '-';
	while (n)
		buf[o++] = tmp[--n];
	buf[o] = '\0';
	return buf;
}

static char *fmt_hex(char *buf, unsigned long long v)
{
	char tmp[20];
	int n = 0, o = 0;

	do {
		tmp[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	buf[o++] = '0';
	buf[o++] = 'x';
	while (n)
		buf[o++] = tmp[--n];
	buf[o] = '\0';
	return buf;
}

static const char *sig_name(int sig)
{
	return crash_signal_name(sig) ?: "?";
}

static int fatal_index(int sig)
{
	int i;

	for (i = 0; i < NFATAL; i++)
		if (fatal_sigs[i] == sig)
			return i;
	return -1;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Put back the disposition of every fatal signal as we found it. */
static void restore_all(void)
{
	int i;

	for (i = 0; i < NFATAL; i++)
		sigaction(fatal_sigs[i], &cr.old[i], NULL);
}

/*
 * Run probing crashdump on this process and wait for it (CRASH_TIMEOUT_S at most). How it
 * went is said on stderr when it failed; its own summary goes to stderr too.
 */
static void capture(int sig, const siginfo_t *si, pid_t tid)
{
	char tid_s[24], sig_s[24], code_s[24], addr_s[24];
	char *argv[] = {"probing", "crashdump", "-p",  cr.pid,	 "--tid",
			tid_s,	   "--signal",	sig_s, "--code", code_s,
			"--addr",  addr_s,	"-o",  cr.file,	 NULL};
	sigset_t none;
	double end;
	pid_t child, r;
	int st = 0, err;
	bool done = false, timed_out = false;

	fmt_long(tid_s, tid);
	fmt_long(sig_s, sig);
	fmt_long(code_s, si ? si->si_code : 0);
	fmt_hex(addr_s, si ? (unsigned long long)(uintptr_t)si->si_addr : 0);
	/* Where Yama restricts ptrace to ancestors, let the capturing child read us. */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	child = vfork();
	if (child == 0) {
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(2, 1); /* its summary and messages: on the target's stderr */
		execve(cr.bin, argv, environ);
		_exit(127);
	}
	err = errno;
	if (child < 0) {
		say("probing: crash capture failed: cannot start probing crashdump: ");
		say(strerror(err));
		say("\n");
		goto cleanup;
	}
	end = mono_s() + CRASH_TIMEOUT_S;
	while (!done) {
		r = waitpid(child, &st, WNOHANG | __WALL);
		if (r == child) {
			done = true;
			break;
		}
		if (r < 0 && errno == ECHILD) {
			/* SIGCHLD ignored (reaped by the kernel) or reaped by someone else. */
			if (kill(child, 0) && errno == ESRCH) {
				st = 0;
				break;
			}
		} else if (r < 0 && errno != EINTR) {
			break;
		}
		if (mono_s() > end) {
			kill(child, SIGKILL);
			timed_out = true;
			waitpid(child, &st, __WALL);
			break;
		}
		nap_ms(5);
	}
	if (timed_out) {
		say("probing: crash capture failed: probing crashdump took longer than 60 s and "
		    "was stopped\n");
	} else if (done && WIFEXITED(st) && WEXITSTATUS(st) == 127) {
		say("probing: crash capture failed: cannot run ");
		say(cr.bin);
		say("\n");
	} else if (done && WIFEXITED(st) && WEXITSTATUS(st)) {
		say("probing: crash capture failed (probing crashdump exited with status ");
		say(fmt_long(code_s, WEXITSTATUS(st)));
		say(")\n");
	} else if (done && WIFSIGNALED(st)) {
		say("probing: crash capture failed: probing crashdump was killed by signal ");
		say(fmt_long(code_s, WTERMSIG(st)));
		say("\n");
	}
cleanup:
	prctl(PR_SET_PTRACER, 0, 0, 0, 0);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno, idx = fatal_index(sig), expect = 0;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	/* Sent by kill/raise/abort (not a fault the instruction would repeat): raise it again. */
	bool sent = !si || si->si_code <= 0;
	char buf[24];

	(void)uc;
	if (!atomic_compare_exchange_strong(&cr.busy, &expect, tid)) {
		if (expect != tid) {
			/* Another thread is capturing: wait for it (it ends the process). */
			while (atomic_load(&cr.busy))
				nap_ms(10);
		} else {
			say("probing: fatal signal while capturing a crash: not captured again\n");
			restore_all();
		}
		goto chain;
	}
	say("probing: fatal signal ");
	say(sig_name(sig));
	say(" in thread ");
	say(fmt_long(buf, tid));
	say(" of process ");
	say(cr.pid);
	say(": capturing every thread's stack into ");
	say(cr.file);
	say("\n");
	capture(sig, si, tid);
	restore_all();
	atomic_store(&cr.busy, 0);
chain:
	/* The disposition we found is back (SIG_DFL: the process dies of @sig, with its core
	 * dump; a previous handler: it runs). A fault is raised again by the instruction that
	 * caused it when we return; a sent signal is sent again, delivered once we return. */
	if (idx >= 0 && sent)
		syscall(SYS_tgkill, getpid(), tid, sig);
	errno = saved;
}

/* ---- installing ------------------------------------------------------------------------- */

static void set_file(const char *file)
{
	size_t o = 0;
	const char *s;

	if (file != cr.tmpl)
		snprintf(cr.tmpl, sizeof(cr.tmpl), "%s", file);
	snprintf(cr.pid, sizeof(cr.pid), "%d", (int)getpid());

	/* "%p": this process's pid (one file per process of a job started by probing run). */
	for (s = file; *s && o + 16 < sizeof(cr.file); s++) {
		if (s[0] == '%' && s[1] == 'p') {
			o += snprintf(cr.file + o, sizeof(cr.file) - o, "%s", cr.pid);
			s++;
		} else {
			cr.file[o++] = *s;
		}
	}
	cr.file[o] = '\0';
}

int agent_crash_install(const char *bin, const char *file, char *was, size_t waslen, char *err,
			size_t errlen)
{
	struct sigaction sa;
	char abs[PATH_LEN];
	int i;

	if (!bin || bin[0] != '/' || strlen(bin) >= sizeof(cr.bin) || access(bin, X_OK)) {
		snprintf(
			err, errlen,
			"the process cannot run %s (it captures the crash): is it in another mount "
			"namespace? Install probing at the same path inside it",
			bin ? bin : "(no path)");
		return -EINVAL;
	}
	if (!file || !*file || strlen(file) >= sizeof(cr.file) - 64) {
		snprintf(err, errlen, "no crash file, or a name too long");
		return -EINVAL;
	}
	/* A relative name: in the working directory of the process, now. */
	if (file[0] != '/') {
		if (!getcwd(abs, sizeof(abs)) ||
		    strlen(abs) + strlen(file) + 2 >= sizeof(cr.file) - 64) {
			snprintf(err, errlen,
				 "cannot tell the working directory of the process: %s",
				 strerror(errno));
			return -EINVAL;
		}
		strcat(abs, "/");
		strcat(abs, file);
		file = abs;
	}
	if (was && waslen)
		snprintf(was, waslen, "%s", cr.installed ? cr.file : "");
	snprintf(cr.bin, sizeof(cr.bin), "%s", bin);
	set_file(file);
	if (cr.installed)
		return 1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < NFATAL; i++)
		sigaddset(&sa.sa_mask, fatal_sigs[i]);
	for (i = 0; i < NFATAL; i++) {
		if (sigaction(fatal_sigs[i], &sa, &cr.old[i])) {
			snprintf(err, errlen, "sigaction(%s): %s", sig_name(fatal_sigs[i]),
				 strerror(errno));
			while (i--)
				sigaction(fatal_sigs[i], &cr.old[i], NULL);
			return -EINVAL;
		}
	}
	cr.installed = true;
	return 0;
}

bool agent_crash_installed(char *file, size_t len)
{
	if (cr.installed && file && len)
		snprintf(file, len, "%s", cr.file);
	return cr.installed;
}

void agent_crash_atfork_child(void)
{
	if (cr.installed)
		set_file(cr.tmpl);
	atomic_store(&cr.busy, 0);
}
