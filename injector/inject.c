// SPDX-License-Identifier: MIT
/* The ptrace injector: see inject.h for the whole procedure and its guarantees. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "elfsym.h"
#include "base/escape.h"
#include "inject.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/procmaps.h"
#include "safepoint.h"
#include "trampoline.h"
#include "base/util.h"

#define STOP_TIMEOUT_MS 2000  /* for a thread to reach its interrupt stop */
#define CALL_TIMEOUT_MS 15000 /* for dlopen + constructors to return */
#define PARK_MS		50    /* a thread done with its call waits that long for us */
#define POLL_NS		10000 /* how often we look whether the call is done */
#define ROUNDS		25    /* passes over the candidate threads (~0.3 s in all) */
#define MAX_CANDIDATES	16    /* threads tried per pass */
#define MIN_STACK_ROOM	(64 * 1024)
#define RED_ZONE	128
#define XSTATE_MAX	(64 * 1024)

#define EFLAGS_TF (1u << 8)
#define EFLAGS_DF (1u << 10)

/* ---- small helpers ---------------------------------------------------------------------- */

static int yama_scope(void)
{
	char *s = read_file("/proc/sys/kernel/yama/ptrace_scope", 64, NULL);
	int v = -1;

	if (s) {
		v = atoi(s);
		free(s);
	}
	return v;
}

static void seterr(struct inject_info *info, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void seterr(struct inject_info *info, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(info->error, sizeof(info->error), fmt, ap);
	va_end(ap);
}

/* ---- permissions ------------------------------------------------------------------------ */

int inject__check_permission(pid_t pid, char *msg, size_t len)
{
	char *uids = NULL, comm[64], tcomm[64];
	unsigned long ru = 0, eu = 0, su = 0;
	unsigned long long tracer = 0;
	uid_t me = geteuid();
	char st;
	int scope, err = 0;

	if (kill(pid, 0) && errno == ESRCH) {
		snprintf(msg, len,
			 "no such process: %d\nCheck the PID (e.g. with 'ps aux' or 'pgrep -f "
			 "NAME').",
			 pid);
		return -ESRCH;
	}
	st = procinfo_state(pid, 0);
	uids = procinfo_status_field(pid, 0, "Uid");
	if (!st || !uids) {
		snprintf(msg, len, "no such process: %d (it has just exited?)", pid);
		err = -ESRCH;
		goto cleanup;
	}
	procinfo_comm_shown(pid, comm, sizeof(comm));
	if (st == 'Z' || st == 'X') {
		snprintf(msg, len, "process %d (%s) has exited (it is a zombie)", pid, comm);
		err = -ESRCH;
		goto cleanup;
	}
	sscanf(uids, "%lu %lu %lu", &ru, &eu, &su);
	if (me != 0 && (ru != me || eu != me || su != me)) {
		snprintf(msg, len,
			 "permission denied: process %d (%s) belongs to uid %lu and you are uid "
			 "%u.\n"
			 "Only the process's owner or root may attach to it: run probing as that "
			 "user, or with sudo.",
			 pid, comm, eu, me);
		err = -EPERM;
		goto cleanup;
	}
	procinfo_status_number(pid, 0, "TracerPid", 10, &tracer);
	if (tracer && tracer != (unsigned long long)getpid()) {
		procinfo_comm_shown(tracer, tcomm, sizeof(tcomm));
		snprintf(msg, len,
			 "process %d (%s) is already traced by process %llu (%s): a debugger or "
			 "tracer (gdb, strace, py-spy --native...) is attached, and a process can "
			 "have "
			 "only one.\nDetach it first, then try again.",
			 pid, comm, tracer, tcomm);
		err = -EBUSY;
		goto cleanup;
	}
	if (st == 'T' || st == 't') {
		snprintf(
			msg, len,
			"process %d (%s) is stopped (SIGSTOP, Ctrl-Z, or a debugger).\n"
			"Resume it first ('kill -CONT %d'); probing must not run code in a stopped "
			"process.",
			pid, comm, pid);
		err = -EAGAIN;
		goto cleanup;
	}
	scope = yama_scope();
	if (me != 0 && scope >= 1 && !(scope < 3 && procinfo_has_cap(getpid(), CAP_SYS_PTRACE))) {
		if (scope == 3)
			snprintf(msg, len,
				 "ptrace is disabled on this machine (kernel.yama.ptrace_scope = "
				 "3), "
				 "so the agent cannot be injected.\nStart the program with the "
				 "agent "
				 "preloaded instead: 'probing run -- CMD ARGS'.");
		else
			snprintf(msg, len,
				 "ptrace denied by Yama (kernel.yama.ptrace_scope = %d): %s.\n"
				 "Run probing with sudo, or start the program with 'probing run -- "
				 "CMD ARGS'%s.",
				 scope,
				 scope == 1 ? "a process may only trace its own descendants"
					    : "only processes with CAP_SYS_PTRACE may trace",
				 scope == 1 ? " (or set kernel.yama.ptrace_scope = 0)" : "");
		err = -EPERM;
		goto cleanup;
	}
cleanup:
	free(uids);
	return err;
}

/* Explain an EPERM from PTRACE_SEIZE after the pre-checks passed. */
static void explain_eperm(pid_t pid, struct inject_info *info)
{
	char msg[sizeof(info->error)];

	if (inject__check_permission(pid, msg, sizeof(msg))) {
		seterr(info, "%s", msg);
		return;
	}
	seterr(info,
	       "the kernel refused to let probing trace process %d (ptrace: EPERM).\n"
	       "Likely causes: the process is not dumpable (a setuid/setgid program, or it called "
	       "prctl(PR_SET_DUMPABLE, 0)); probing runs in a container without CAP_SYS_PTRACE; "
	       "or a security module (AppArmor, SELinux, seccomp) forbids ptrace.\n"
	       "Run probing as root on the host, or start the program with 'probing run -- CMD'.",
	       pid);
}

/* ---- finding dlopen in the target ------------------------------------------------------ */

struct loader_fns {
	uint64_t dlopen, dlerror; /* runtime addresses; dlerror may be 0 */
	int mode;		  /* dlopen's flags argument */
	char module[PATH_MAX];
};

static bool is_libc_name(const char *b)
{
	return !strcmp(b, "libc.so.6") || (!strncmp(b, "libc-2.", 7) && strstr(b, ".so")) ||
	       !strncmp(b, "libc.musl", 9) || !strncmp(b, "ld-musl", 7);
}

static bool is_libdl_name(const char *b)
{
	return !strcmp(b, "libdl.so.2") || (!strncmp(b, "libdl-", 6) && strstr(b, ".so"));
}

/* Look @name up in the file of mapping @m (offset 0): 0 and its runtime address, or -errno. */
static int resolve_in(pid_t pid, const struct procmap *m, const char *name, const char *version,
		      uint64_t *addr)
{
	struct elfsym *e;
	uint64_t bias = 0, value;
	int fd, err;

	fd = procmaps__open(pid, m);
	if (fd < 0)
		return fd;
	e = elfsym__open_fd(fd);
	close(fd);
	if (!e)
		return -errno;
	err = elfsym__lookup(e, name, version, &value, NULL);
	if (!err && elfsym__is_dyn(e))
		err = elfsym__bias(e, m->start, m->offset, &bias);
	if (!err)
		*addr = bias + value;
	elfsym__free(e);
	return err;
}

/*
 * glibc >= 2.34 and musl: dlopen/dlerror in libc. Older glibc: in libdl.so.2 when the
 * process has it (most Pythons do), else glibc's internal __libc_dlopen_mode (GLIBC_PRIVATE;
 * needs __RTLD_DLOPEN in its mode; no dlerror text then).
 */
static int find_loader(pid_t pid, struct loader_fns *lf, struct inject_info *info)
{
	struct procmaps pm = {};
	const struct procmap *libc = NULL, *libdl = NULL;
	int i, err;

	memset(lf, 0, sizeof(*lf));
	err = procmaps__read(pid, &pm);
	if (err) {
		seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
		return err;
	}
	for (i = 0; i < (int)pm.nr; i++) {
		const struct procmap *m = &pm.maps[i];
		const char *b = procmaps__basename(m);

		if (m->offset || m->path[0] != '/')
			continue;
		if (!libc && is_libc_name(b))
			libc = m;
		else if (!libdl && is_libdl_name(b))
			libdl = m;
	}
	if (!libc) {
		seterr(info,
		       "process %d has no C library mapped (a static executable?), so there is no "
		       "dlopen to load the agent with.\nStart it with 'probing run -- CMD' "
		       "instead.",
		       pid);
		err = -ENOEXEC;
		goto cleanup;
	}
	lf->mode = 2; /* RTLD_NOW, RTLD_LOCAL: the agent's symbols stay out of the global scope */
	if (!resolve_in(pid, libc, "dlopen", NULL, &lf->dlopen)) {
		resolve_in(pid, libc, "dlerror", NULL, &lf->dlerror);
		snprintf(lf->module, sizeof(lf->module), "%s", libc->path);
	} else if (libdl && !resolve_in(pid, libdl, "dlopen", NULL, &lf->dlopen)) {
		resolve_in(pid, libdl, "dlerror", NULL, &lf->dlerror);
		snprintf(lf->module, sizeof(lf->module), "%s", libdl->path);
	} else if (!resolve_in(pid, libc, "__libc_dlopen_mode", NULL, &lf->dlopen)) {
		lf->mode = 2 | (int)0x80000000; /* RTLD_NOW | __RTLD_DLOPEN (glibc dlfcn.h) */
		snprintf(lf->module, sizeof(lf->module), "%s", libc->path);
	} else {
		seterr(info,
		       "no dlopen found in process %d's C library (%s) nor in libdl: this libc is "
		       "not supported.\nStart the program with 'probing run -- CMD' instead.",
		       pid, libc->path);
		err = -ENOEXEC;
		goto cleanup;
	}
	pr_debug("inject: dlopen at %#" PRIx64 " in %s", lf->dlopen, lf->module);
cleanup:
	procmaps__release(&pm);
	return err;
}

/* ---- making the library reachable from the target -------------------------------------- */

static int copy_file(const char *src, const char *dst)
{
	char buf[65536];
	ssize_t n;
	int in = -1, out = -1, err = 0;

	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (out < 0) {
		err = -errno;
		goto cleanup;
	}
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto cleanup;
		}
		err = write_all(out, buf, n);
		if (err)
			goto cleanup;
	}
	/* Readable by the target whatever its uid and umask. */
	if (fchmod(out, 0644) || fsync(out))
		err = -errno;
cleanup:
	if (in >= 0)
		close(in);
	if (out >= 0) {
		close(out);
		if (err)
			unlink(dst);
	}
	return err;
}

/*
 * Decide the path the target will dlopen. @host_copy receives our path to the copy (to
 * unlink later) or "" when no copy was made.
 */
static int reach_library(pid_t pid, const char *abs, bool force_copy, struct inject_info *info,
			 char *host_copy, size_t hlen)
{
	static const char *const dirs[] = {"/dev/shm", "/tmp", "/var/tmp"};
	char there[PATH_MAX + 64];
	struct stat a, b;
	struct statvfs vfs;
	unsigned char rnd[8];
	size_t i;
	int err = -ENOENT;

	host_copy[0] = '\0';
	if (stat(abs, &a)) {
		err = -errno;
		seterr(info, "cannot use the agent library %s: %s", abs, strerror(errno));
		return err;
	}
	snprintf(there, sizeof(there), "/proc/%d/root%s", pid, abs);
	if (!force_copy && !stat(there, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
		snprintf(info->target_path, sizeof(info->target_path), "%s", abs);
		return 0;
	}
	/* Another mount namespace or root (container, chroot, a mount over our directory): the
	 * target sees something else at our path. Put a copy where it can see it. */
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint64_t t = now_mono_ns() ^ ((uint64_t)getpid() << 32);

		memcpy(rnd, &t, sizeof(rnd));
	}
	for (i = 0; i < ARRAY_SIZE(dirs); i++) {
		char name[96];

		snprintf(name, sizeof(name), "%s/libprobing-agent-%d-%02x%02x%02x%02x%02x%02x.so",
			 dirs[i], getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
		snprintf(there, sizeof(there), "/proc/%d/root%s", pid, dirs[i]);
		/* dlopen mmaps with PROT_EXEC: a noexec mount would refuse it. */
		if (statvfs(there, &vfs) || (vfs.f_flag & ST_NOEXEC))
			continue;
		snprintf(there, sizeof(there), "/proc/%d/root%s", pid, name);
		err = copy_file(abs, there);
		if (err)
			continue;
		snprintf(host_copy, hlen, "%s", there);
		snprintf(info->target_path, sizeof(info->target_path), "%s", name);
		info->copied = true;
		pr_debug("inject: copied the agent to %s (the target's view of the filesystem)",
			 name);
		return 0;
	}
	seterr(info,
	       "the agent library %s is not visible from process %d (it runs in another mount "
	       "namespace or root), and it could not be copied into the process's /dev/shm, "
	       "/tmp or /var/tmp (%s).",
	       abs, pid, strerror(-err));
	return err;
}

/* ---- threads ------------------------------------------------------------------------- */

struct cand {
	pid_t tid;
	int score; /* lower is better */
	long nr;   /* system call it sleeps in, -1 if running/unknown */
};

/* System calls that return -EINTR (not a -ERESTART* code) when a ptrace interrupt wakes
 * them, so the target would see EINTR unless we restart them by hand. */
static bool eintr_syscall(long nr)
{
	switch (nr) {
	case SYS_epoll_wait:
	case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
#endif
	case SYS_io_getevents:
#ifdef SYS_io_pgetevents
	case SYS_io_pgetevents:
#endif
	case SYS_semop:
	case SYS_semtimedop:
	case SYS_rt_sigtimedwait:
		return true;
	}
	return false;
}

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->score != y->score)
		return x->score - y->score;
	return x->tid - y->tid;
}

static int list_candidates(pid_t pid, struct cand **out, int *nr)
{
	char fn[96], *buf;
	struct cand *c = NULL, *tmp;
	struct dirent *de;
	int n = 0, cap = 0, err = 0;
	DIR *d;

	snprintf(fn, sizeof(fn), "/proc/%d/task", pid);
	d = opendir(fn);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	while ((de = readdir(d))) {
		pid_t tid = atoi(de->d_name);
		unsigned long long tracer = 0;
		char st;
		long nr_sc = -1;
		int score;

		if (tid <= 0)
			continue;
		st = procinfo_state(pid, tid);
		if (!st || st == 'Z' || st == 'X' || st == 'T' || st == 't')
			continue;
		if (!procinfo_status_number(pid, tid, "TracerPid", 10, &tracer) && tracer)
			continue;
		snprintf(fn, sizeof(fn), "/proc/%d/task/%d/syscall", pid, tid);
		buf = read_file(fn, 512, NULL);
		if (buf && buf[0] >= '0' && buf[0] <= '9')
			nr_sc = strtol(buf, NULL, 10);
		free(buf);
		if (st == 'D')
			score = 3; /* may take long to reach the stop */
		else if (nr_sc >= 0 && eintr_syscall(nr_sc))
			score = 2;
		else if (nr_sc >= 0)
			score = 0; /* asleep in a restartable call: it costs it nothing */
		else
			score = 1; /* running user code */
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			tmp = realloc(c, cap * sizeof(*c));
			if (!tmp) {
				err = -ENOMEM;
				goto cleanup;
			}
			c = tmp;
		}
		c[n++] = (struct cand){tid, score, nr_sc};
	}
	qsort(c, n, sizeof(*c), cand_cmp);
cleanup:
	closedir(d);
	if (err) {
		free(c);
		return err;
	}
	*out = c;
	*nr = n;
	return 0;
}

/* ---- one stopped thread ----------------------------------------------------------------- */

/* How a stopped thread is let go. */
enum fate {
	FATE_UNTOUCHED, /* its registers are as stopped (an EINTR call maybe rewound) */
	FATE_RESTORE,	/* registers, FP state, mask and stack are put back with ptrace */
	FATE_CURRENT,	/* it runs its own course (restoring itself, or still in the call) */
};

struct session {
	pid_t pid, tid;
	bool seized;  /* we are its tracer */
	bool stopped; /* it sits in a ptrace-stop */
	bool rewound; /* an EINTR call was rewound at the stop (see save_state) */
	enum fate fate;
	struct user_regs_struct regs; /* as stopped, before any change */
	unsigned char *xstate;
	size_t xstate_len;
	bool xstate_legacy; /* no XSAVE: the FXSAVE area (NT_PRFPREG) */
	uint64_t sigmask;
	bool have_mask;
	/* A borrowed call: its data block below the red zone, and what was there. */
	uint64_t d_addr;
	unsigned char *d_saved;
	size_t d_len;
	uint64_t token;
	uint64_t tramp; /* the trampoline's address in the target */
	struct tramp_code code;
	uint64_t t_stop;
	struct inject_info *info;
};

static sigset_t chld_set;

/*
 * $PROBING_INJECT_TEST_POINT=NAME[:MS] (tests only; inert when unset): at the named point of
 * a borrowed call or a hold, say so on stderr, wait MS milliseconds, then SIGKILL ourselves.
 * The target must come out of it unharmed. The points, in their order: stopped, installed,
 * staged, started, masked, running, parked, taken, fp-restored, mask-restored,
 * regs-restored (a borrowed call); held, released (a hold: backtrace --native).
 */
static void test_point(const char *name)
{
	static const char *spec;
	static bool looked;
	const char *colon;
	size_t n;
	long ms = 0;

	if (!looked) {
		spec = getenv("PROBING_INJECT_TEST_POINT");
		looked = true;
	}
	if (!spec)
		return;
	colon = strchr(spec, ':');
	n = colon ? (size_t)(colon - spec) : strlen(spec);
	if (n != strlen(name) || strncmp(spec, name, n))
		return;
	if (colon && parse_long(colon + 1, 0, 100000, &ms))
		ms = 0;
	fprintf(stderr, "probing: test point %s\n", name);
	fflush(stderr);
	if (ms) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	kill(getpid(), SIGKILL);
}

/*
 * How long a thread that finished its call waits for us before it restores itself.
 * $PROBING_INJECT_PARK_MS (tests only) changes it; 0 makes every thread restore itself.
 */
static long park_ms(void)
{
	const char *v = getenv("PROBING_INJECT_PARK_MS");
	long ms;

	if (v && !parse_long(v, 0, 10000, &ms))
		return ms;
	return PARK_MS;
}

/* Wait for a state change of traced thread @tid. 0, -ETIMEDOUT, -ESRCH (it exited). */
static int wait_stop(pid_t tid, int timeout_ms, int *status)
{
	uint64_t deadline = now_mono_ns() + (uint64_t)timeout_ms * 1000000ULL;

	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);
		uint64_t now, left;
		struct timespec ts;

		if (r == tid) {
			if (WIFEXITED(*status) || WIFSIGNALED(*status))
				return -ESRCH;
			return 0;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == ECHILD ? -ESRCH : -errno;
		now = now_mono_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		/* SIGCHLD (blocked during the critical section) wakes us at once; the short cap
		 * covers a SIGCHLD set to SIG_IGN or coalesced. */
		left = min(deadline - now, 2000000ULL);
		ts.tv_sec = 0;
		ts.tv_nsec = left;
		sigtimedwait(&chld_set, NULL, &ts);
	}
}

static bool is_group_stop_sig(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/* Seize @s->tid and bring it to an interrupt stop. */
static int seize_stop(struct session *s)
{
	int status, err, sig;

	if (ptrace(PTRACE_SEIZE, s->tid, 0, 0)) {
		err = -errno;
		if (err == -EPERM)
			explain_eperm(s->pid, s->info);
		else if (err == -ESRCH)
			seterr(s->info, "thread %d exited", s->tid);
		return err;
	}
	s->seized = true;
	if (ptrace(PTRACE_INTERRUPT, s->tid, 0, 0))
		return -errno;
	for (;;) {
		err = wait_stop(s->tid, STOP_TIMEOUT_MS, &status);
		if (err == -ETIMEDOUT) {
			seterr(s->info,
			       "thread %d of process %d did not stop within %d ms (uninterruptible "
			       "sleep in the kernel, or a frozen cgroup?)",
			       s->tid, s->pid, STOP_TIMEOUT_MS);
			return err;
		}
		if (err)
			return err;
		if (!WIFSTOPPED(status))
			continue;
		sig = WSTOPSIG(status);
		if ((status >> 16) == PTRACE_EVENT_STOP) {
			if (sig == SIGTRAP) {
				s->stopped = true;
				s->t_stop = now_mono_ns();
				s->info->threads_stopped++;
				return 0;
			}
			if (is_group_stop_sig(sig)) {
				/* Someone stopped the process (Ctrl-Z, SIGSTOP) just now. */
				s->stopped = true;
				s->t_stop = now_mono_ns();
				seterr(s->info,
				       "process %d was stopped (signal %d) during injection",
				       s->pid, sig);
				return -EAGAIN;
			}
		}
		/* A signal on its way to the thread: let it through untouched; our interrupt is
		 * still pending and stops the thread right after. */
		if (ptrace(PTRACE_CONT, s->tid, 0, (void *)(long)((status >> 16) ? 0 : sig)))
			return -errno;
	}
}

static int peek_regs(pid_t tid, struct user_regs_struct *r)
{
	return ptrace(PTRACE_GETREGS, tid, 0, r) ? -errno : 0;
}

/* Stopped inside one of the calls that return EINTR when stopped (eintr_syscall)? */
static bool in_eintr_call(const struct user_regs_struct *r)
{
	return (long)r->orig_rax >= 0 && (long)r->rax == -EINTR && eintr_syscall(r->orig_rax);
}

/* @r with its system call restarted by hand: what the kernel does for -ERESTARTNOINTR (back
 * over the 2-byte syscall instruction, the call's number in rax again). */
static struct user_regs_struct rewound(const struct user_regs_struct *r)
{
	struct user_regs_struct x = *r;

	x.rax = x.orig_rax;
	x.rip -= 2;
	return x;
}

/*
 * Is a signal pending for thread @tid that runs a handler once its mask is @mask? Then a call
 * it was stopped in returns EINTR for real, as the handler would have interrupted it anyway.
 * (Pending signals that are ignored are discarded when unblocked: they interrupt nothing.)
 */
static bool handler_pending(pid_t pid, pid_t tid, uint64_t mask)
{
	unsigned long long pnd = 0, shd = 0, cgt = 0;

	procinfo_status_number(pid, tid, "SigPnd", 16, &pnd);
	procinfo_status_number(pid, 0, "ShdPnd", 16, &shd);
	procinfo_status_number(pid, tid, "SigCgt", 16, &cgt);
	return (pnd | shd) & ~mask & cgt;
}

/*
 * Registers, extended FP state and signal mask of the stopped thread. A thread stopped in a
 * call that returns EINTR (see eintr_syscall) is rewound to restart the call at once, before
 * anything else, so that if we die from here on it resumes the call instead of seeing EINTR
 * (unless a handler is due to run: then the EINTR is genuine).
 */
static int save_state(struct session *s)
{
	struct iovec iov;

	if (peek_regs(s->tid, &s->regs))
		return -errno;
	if (ptrace(PTRACE_GETSIGMASK, s->tid, (void *)sizeof(s->sigmask), &s->sigmask))
		return -errno;
	s->have_mask = true;
	if (in_eintr_call(&s->regs) && !handler_pending(s->pid, s->tid, s->sigmask)) {
		struct user_regs_struct r = rewound(&s->regs);

		if (ptrace(PTRACE_SETREGS, s->tid, 0, &r))
			return -errno;
		s->rewound = true;
		pr_debug("inject: thread %d was in syscall %llu (returns EINTR when stopped): "
			 "restarting it",
			 s->tid, s->regs.orig_rax);
	}
	s->xstate = malloc(XSTATE_MAX);
	if (!s->xstate)
		return -ENOMEM;
	iov.iov_base = s->xstate;
	iov.iov_len = XSTATE_MAX;
	if (ptrace(PTRACE_GETREGSET, s->tid, (void *)(long)NT_X86_XSTATE, &iov)) {
		/* No XSAVE (very old CPU): the legacy FXSAVE area is all there is. */
		iov.iov_len = sizeof(struct user_fpregs_struct);
		if (ptrace(PTRACE_GETREGSET, s->tid, (void *)(long)NT_PRFPREG, &iov))
			return -errno;
		s->xstate_legacy = true;
	}
	s->xstate_len = iov.iov_len;
	return 0;
}

static int write_mem(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = {(void *)buf, len}, remote = {(void *)addr, len};
	size_t i;

	if (process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)len)
		return 0;
	/* Word-by-word pokes: process_vm_writev unavailable, or a read-only mapping (ptrace
	 * writes those as debuggers write breakpoints: the page becomes a private copy). */
	for (i = 0; i < len; i += 8) {
		long word;
		size_t n = min(len - i, (size_t)8);

		if (n < 8) {
			errno = 0;
			word = ptrace(PTRACE_PEEKDATA, pid, (void *)(addr + i), 0);
			if (errno)
				return -errno;
		}
		memcpy(&word, (const char *)buf + i, n);
		if (ptrace(PTRACE_POKEDATA, pid, (void *)(addr + i), (void *)word))
			return -errno;
	}
	return 0;
}

static int read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = {buf, len}, remote = {(void *)addr, len};
	size_t i;

	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len)
		return 0;
	for (i = 0; i < len; i += 8) {
		long word;

		errno = 0;
		word = ptrace(PTRACE_PEEKDATA, pid, (void *)(addr + i), 0);
		if (errno)
			return -errno;
		memcpy((char *)buf + i, &word, min(len - i, (size_t)8));
	}
	return 0;
}

/*
 * Put a thread that never ran our code back: only an EINTR call's rewind is decided again,
 * since a signal that runs a handler may have arrived meanwhile (@cur: what the thread has
 * now, @orig: as stopped, for a thread whose registers we rewound).
 */
static int release_regs(struct session *s, const struct user_regs_struct *cur,
			const struct user_regs_struct *orig, bool is_rewound)
{
	struct user_regs_struct r;
	bool genuine;

	if (is_rewound) {
		/* The call returned EINTR when we stopped it, and was rewound. */
		if (!handler_pending(s->pid, s->tid, s->sigmask))
			return 0;
		r = *orig;
	} else {
		if (!in_eintr_call(cur))
			return 0;
		genuine = handler_pending(s->pid, s->tid, s->sigmask);
		if (genuine)
			return 0;
		r = rewound(cur);
	}
	return ptrace(PTRACE_SETREGS, s->tid, 0, &r) ? -errno : 0;
}

/*
 * Put everything back as it was with ptrace (a thread stopped in the trampoline's park, or
 * that crashed in the call): FP state, then the mask, then the registers (the one change that
 * switches the thread back), then the stack bytes under the red zone. If we die in between,
 * the thread is still in the trampoline, which restores it by itself.
 */
static int restore_state(struct session *s)
{
	struct user_regs_struct r = s->regs;
	struct iovec iov;
	int err = 0;

	if (s->xstate && s->xstate_len) {
		iov.iov_base = s->xstate;
		iov.iov_len = s->xstate_len;
		if (ptrace(PTRACE_SETREGSET, s->tid,
			   (void *)(long)(s->xstate_legacy ? NT_PRFPREG : NT_X86_XSTATE), &iov))
			err = -errno;
	}
	test_point("fp-restored");
	if (s->have_mask &&
	    ptrace(PTRACE_SETSIGMASK, s->tid, (void *)sizeof(s->sigmask), &s->sigmask))
		err = -errno;
	test_point("mask-restored");
	/* The kernel restarts an interrupted call (its -ERESTART* code is in rax, its number in
	 * orig_rax) or delivers a signal that arrived meanwhile, with its own rules; an EINTR
	 * call is restarted by hand unless a handler is due. */
	if (in_eintr_call(&r) && !handler_pending(s->pid, s->tid, s->sigmask))
		r = rewound(&r);
	if (ptrace(PTRACE_SETREGS, s->tid, 0, &r))
		err = -errno;
	test_point("regs-restored");
	if (s->d_saved && write_mem(s->tid, s->d_addr, s->d_saved, s->d_len))
		pr_debug("inject: could not put back the stack of thread %d", s->tid);
	return err;
}

/*
 * Let the thread go as its fate says, then detach. A thread running (a failure in the middle
 * of a call) is stopped first; it is then left to its own course.
 */
static void session_end(struct session *s)
{
	struct user_regs_struct cur;
	int status, err = 0;
	uint64_t held;

	if (!s->seized)
		goto out;
	if (!s->stopped) {
		if (!ptrace(PTRACE_INTERRUPT, s->tid, 0, 0)) {
			while (!wait_stop(s->tid, STOP_TIMEOUT_MS, &status)) {
				if (WIFSTOPPED(status)) {
					s->stopped = true;
					break;
				}
			}
		}
		s->fate = FATE_CURRENT;
	}
	if (s->stopped) {
		switch (s->fate) {
		case FATE_UNTOUCHED:
			err = release_regs(s, &s->regs, &s->regs, s->rewound);
			break;
		case FATE_RESTORE:
			err = restore_state(s);
			break;
		case FATE_CURRENT:
			err = peek_regs(s->tid, &cur);
			if (!err)
				err = release_regs(s, &cur, &cur, false);
			break;
		}
		if (err)
			pr_warn("inject: could not fully restore thread %d: %s", s->tid,
				strerror(-err));
		held = now_mono_ns() - s->t_stop;
		if (held > s->info->stopped_ns)
			s->info->stopped_ns = held;
	}
	/* Detach even if not stopped (then the kernel detaches it when we exit). */
	ptrace(PTRACE_DETACH, s->tid, 0, 0);
out:
	free(s->xstate);
	free(s->d_saved);
	s->xstate = NULL;
	s->d_saved = NULL;
	s->seized = s->stopped = false;
}

/*
 * Room left below the stack pointer in its mapping ([stack] can grow: always enough). @pm
 * was read before the thread was stopped (stacks do not move); a thread born since then is
 * looked up in a fresh read.
 */
static bool stack_room_ok(pid_t pid, const struct procmaps *pm, uint64_t rsp, size_t need)
{
	struct procmaps fresh = {};
	const struct procmap *m = procmaps__find(pm, rsp);
	bool ok = false;

	if (!m && !procmaps__read(pid, &fresh))
		m = procmaps__find(&fresh, rsp);
	if (m && (!strcmp(m->path, "[stack]") || rsp - m->start >= need))
		ok = true;
	procmaps__release(&fresh);
	return ok;
}

/* ---- the trampoline in the target -------------------------------------------------------- */

static bool is_ldso_name(const char *b)
{
	return !strncmp(b, "ld-linux", 8) || !strncmp(b, "ld-musl", 7) || !strncmp(b, "ld-2.", 5);
}

/*
 * The unused end of the executable segment mapped by @m: the bytes from the segment's end
 * (p_vaddr + p_filesz) to the end of its last page belong to no segment and are never
 * executed or read through this mapping. Return 0 and where @len bytes (64-byte aligned) fit
 * there in *@addr, or -errno (-ENOSPC: too little room).
 */
static int segment_tail(pid_t pid, const struct procmap *m, size_t len, uint64_t *addr)
{
	uint64_t page = sysconf(_SC_PAGESIZE), bias, end, a;
	Elf64_Phdr ph[64];
	Elf64_Ehdr eh;
	int fd, i, err = -ENOSPC;

	fd = procmaps__open(pid, m);
	if (fd < 0)
		return fd;
	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    !eh.e_phnum || eh.e_phnum > ARRAY_SIZE(ph) ||
	    pread(fd, ph, eh.e_phnum * sizeof(ph[0]), eh.e_phoff) !=
		    (ssize_t)(eh.e_phnum * sizeof(ph[0]))) {
		err = -ENOEXEC;
		goto cleanup;
	}
	for (i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X) ||
		    (ph[i].p_offset & ~(page - 1)) != m->offset)
			continue;
		bias = m->start - (ph[i].p_vaddr & ~(page - 1));
		end = bias + ph[i].p_vaddr + ph[i].p_filesz;
		/* The mapping must end in the segment's last page (not split, not longer). */
		if (end > m->end || m->end - end >= page)
			continue;
		a = (m->end - len) & ~63ULL;
		if (a >= end && a + len <= m->end) {
			*addr = a;
			err = 0;
			break;
		}
	}
cleanup:
	close(fd);
	return err;
}

/*
 * Where the trampoline's code goes in process @pid: in the tail of the executable segment of
 * libc, else ld.so, else the executable, which are never unloaded, so the code cannot vanish
 * under a thread running it. Found before any thread is stopped. 0 or -errno (@info says).
 */
static int find_tramp_site(pid_t pid, uint64_t *site, struct inject_info *info)
{
	struct procmaps pm = {};
	struct tramp_code code;
	char exe[64];
	struct stat est;
	bool have_exe;
	int pass, i, err;

	tramp__code(&code);
	snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
	have_exe = !stat(exe, &est);
	err = procmaps__read(pid, &pm);
	if (err) {
		seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
		return err;
	}
	err = -ENOSPC;
	for (pass = 0; pass < 3 && err; pass++) {
		for (i = 0; i < (int)pm.nr && err; i++) {
			const struct procmap *m = &pm.maps[i];
			const char *b = procmaps__basename(m);
			bool match;

			if (!m->x || m->path[0] != '/')
				continue;
			if (pass == 0)
				match = is_libc_name(b);
			else if (pass == 1)
				match = is_ldso_name(b);
			else
				match = have_exe && m->inode == est.st_ino &&
					m->dev_major == major(est.st_dev) &&
					m->dev_minor == minor(est.st_dev);
			if (match && !segment_tail(pid, m, code.len, site))
				err = 0;
		}
	}
	procmaps__release(&pm);
	if (err)
		seterr(info,
		       "no room for probing's trampoline (%zu bytes) at the end of the code of "
		       "libc, ld.so or the executable of process %d",
		       code.len, pid);
	return err;
}

/*
 * Write into a read-only executable mapping of the traced process: through /proc/PID/mem,
 * which writes such pages for the tracer (FOLL_FORCE) in one call, else word by word with
 * PTRACE_POKEDATA (a kernel that forbids the former, proc_mem.force_override=never).
 */
static int write_code(pid_t pid, pid_t tid, uint64_t addr, const void *buf, size_t len)
{
	char fn[64];
	int fd;

	snprintf(fn, sizeof(fn), "/proc/%d/mem", pid);
	fd = open(fn, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = pwrite(fd, buf, len, (off_t)addr);

		close(fd);
		if (n == (ssize_t)len)
			return 0;
	}
	return write_mem(tid, addr, buf, len);
}

/*
 * Make sure the trampoline's code is at s->tramp (thread stopped, we are its tracer). The code
 * is the same for every call: it is written once (the page becomes a private copy, as with a
 * debugger's breakpoint) and left there, since a thread whose injector was killed may still
 * run it.
 */
static int install_trampoline(struct session *s)
{
	unsigned char *have;
	int err;

	tramp__code(&s->code);
	have = malloc(s->code.len);
	if (!have)
		return -ENOMEM;
	err = read_mem(s->tid, s->tramp, have, s->code.len);
	if (!err && memcmp(have, s->code.bytes, s->code.len)) {
		err = write_code(s->pid, s->tid, s->tramp, s->code.bytes, s->code.len);
		if (!err)
			err = read_mem(s->tid, s->tramp, have, s->code.len);
		if (!err && memcmp(have, s->code.bytes, s->code.len))
			err = -EIO;
	}
	free(have);
	if (err)
		seterr(s->info, "cannot write probing's trampoline into process %d: %s", s->pid,
		       strerror(-err));
	return err;
}

/* ---- a borrowed call --------------------------------------------------------------------- */

/*
 * The signal mask during a call: every signal but synchronous faults, so that no handler of
 * the target runs on the borrowed frame and nothing interrupts the loader's system calls.
 * Faults stay unblocked: a blocked forced fault would reset the target's handler
 * (force_sig_info_to_task sets SIG_DFL when the signal is blocked).
 */
static uint64_t call_mask(void)
{
	return ~((1ULL << (SIGSEGV - 1)) | (1ULL << (SIGBUS - 1)) | (1ULL << (SIGILL - 1)) |
		 (1ULL << (SIGFPE - 1)) | (1ULL << (SIGTRAP - 1)) | (1ULL << (SIGSYS - 1)));
}

struct call {
	uint64_t fn, arg1, err_fn;
	const char *str; /* arg0: a string copied into the target (NULL: arg0 = 0) */
	uint64_t ret, err_ret;
	bool ret_known;
};

static uint64_t xcr0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

/*
 * Write the data block of @c for the stopped thread below its red zone: the call, the
 * registers to come back to, the FP state, the masks. Save what was there.
 */
static int stage_call(struct session *s, const struct call *c, unsigned char **img_out)
{
	size_t xlen = s->xstate_len, slen = c->str ? strlen(c->str) + 1 : 0;
	size_t len = TR_XSAVE + ((xlen + 63) & ~63UL) + slen;
	uint64_t top = s->regs.rsp - RED_ZONE, base = (top - len) & ~63ULL;
	struct tramp_data *d;
	unsigned char *img;
	long ms = park_ms();
	int err;

	img = calloc(1, len);
	s->d_saved = malloc(len);
	if (!img || !s->d_saved) {
		free(img);
		return -ENOMEM;
	}
	err = read_mem(s->tid, base, s->d_saved, len);
	if (err) {
		free(img);
		free(s->d_saved);
		s->d_saved = NULL;
		return err;
	}
	s->d_addr = base;
	s->d_len = len;
	if (getrandom(&s->token, sizeof(s->token), 0) != sizeof(s->token))
		s->token = now_mono_ns() * 0x9e3779b97f4a7c15ULL;
	d = (struct tramp_data *)img;
	d->token = s->token;
	d->state = s->token + TR_CALLING;
	d->fn = c->fn;
	d->arg0 = c->str ? base + TR_XSAVE + ((xlen + 63) & ~63UL) : 0;
	d->arg1 = c->arg1;
	d->err_fn = c->err_fn;
	d->call_mask = call_mask();
	d->mask = s->sigmask;
	d->park_ts[0] = ms / 1000;
	d->park_ts[1] = (ms % 1000) * 1000000;
	d->mxcsr = 0x1f80; /* the ABI's default: all exceptions masked, round to nearest */
	tramp__set_regs(d, &s->regs, eintr_syscall(s->regs.orig_rax));
	memcpy(img + TR_XSAVE, s->xstate, xlen);
	if (s->xstate_legacy) {
		d->fxonly = 1;
	} else {
		/* The standard-format header as xrstor wants it: the component bits the CPU
		 * enables (XCR0), no compaction, reserved bytes zero. Restore what the thread had
		 * and reset what the call may have changed (x87, SSE, AVX, AVX-512) but the thread
		 * had in its initial state; leave alone what no call touches (PKRU, AMX tiles:
		 * reloading those the thread never used could fault). */
		uint64_t x = xcr0(), bv;

		if (xlen < 576) {
			free(img);
			return -EINVAL;
		}
		memcpy(&bv, img + TR_XSAVE + 512, 8);
		bv &= x;
		memcpy(img + TR_XSAVE + 512, &bv, 8);
		memset(img + TR_XSAVE + 520, 0, 56);
		d->rfbm = x & (bv | 0xe7);
	}
	if (c->str)
		memcpy(img + TR_XSAVE + ((xlen + 63) & ~63UL), c->str, slen);
	*img_out = img;
	return 0;
}

static bool is_fault_sig(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
	       sig == SIGTRAP || sig == SIGSYS;
}

/*
 * A signal-delivery-stop of the borrowed thread. A fault raised by the CPU while it runs the
 * call or the trampoline crashed the call: it is put back as it was (the fault discarded),
 * return -EFAULT. Any other signal is passed on untouched (the thread's own mask decides when
 * a handler runs): return 0, the thread running again.
 */
static int signal_stop(struct session *s, int sig)
{
	struct user_regs_struct r;
	uint64_t head[2] = {0, 0};
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	memset(&r, 0, sizeof(r));
	ptrace(PTRACE_GETSIGINFO, s->tid, 0, &si);
	peek_regs(s->tid, &r);
	read_mem(s->tid, s->d_addr, head, sizeof(head));
	if (is_fault_sig(sig) && si.si_code > 0 &&
	    (head[1] == s->token + TR_CALLING || r.rip - s->tramp < s->code.len)) {
		seterr(s->info,
		       "the call crashed in thread %d with signal %d (%s) at pc %#llx, address "
		       "%p; the fault was discarded and the thread restored",
		       s->tid, sig, strsignal(sig), r.rip, si.si_addr);
		s->fate = FATE_RESTORE;
		return -EFAULT;
	}
	if (ptrace(PTRACE_CONT, s->tid, 0, (void *)(long)sig))
		return -errno;
	s->stopped = false;
	return 0;
}

/*
 * Stop the running borrowed thread: our interrupt stop, or a group stop (either will do).
 * Signal-delivery-stops on the way go through signal_stop(). 0 or -errno.
 */
static int interrupt_stop(struct session *s)
{
	int status, err;

	if (ptrace(PTRACE_INTERRUPT, s->tid, 0, 0))
		return -errno;
	for (;;) {
		err = wait_stop(s->tid, STOP_TIMEOUT_MS, &status);
		if (err)
			return err;
		if (!WIFSTOPPED(status))
			continue;
		s->stopped = true;
		if (status >> 16)
			return 0;
		err = signal_stop(s, WSTOPSIG(status));
		if (err)
			return err;
	}
}

/*
 * The call has finished (or we gave up waiting): stop the thread and see where it is. In the
 * park: restore it with ptrace (the kernel's own restart rules then apply). Restoring itself:
 * let it finish. Elsewhere: back in its own code after restoring itself, or (@timed_out)
 * still in the call, which it will finish and then restore itself.
 */
static int take_over(struct session *s, struct call *c, bool timed_out)
{
	struct user_regs_struct cur;
	struct tramp_data d;
	uint64_t off;
	int err;

	err = interrupt_stop(s);
	if (err == -ESRCH)
		seterr(s->info, "process %d exited during the injection", s->pid);
	if (err)
		return err;
	err = peek_regs(s->tid, &cur);
	if (err)
		return err;
	memset(&d, 0, sizeof(d));
	read_mem(s->tid, s->d_addr, &d, sizeof(d));
	off = cur.rip - s->tramp;
	if (d.state == s->token + TR_PARKED || d.state == s->token + TR_RESTORING) {
		c->ret = d.result;
		c->err_ret = d.err_result;
		c->ret_known = true;
	}
	/* In our park: up to its first instruction after ppoll (where a stop in ppoll is), on
	 * our block (not in the park of an earlier call the thread was borrowed from). */
	if (off >= s->code.park && off <= s->code.restore && cur.rsp == s->d_addr) {
		test_point("taken");
		s->fate = FATE_RESTORE;
		return 0;
	}
	s->fate = FATE_CURRENT;
	if (d.state == s->token + TR_CALLING) {
		/* Still in the call (only after the time-out). */
		seterr(s->info,
		       "the call in thread %d did not return within %d s (a lock held by another "
		       "thread?); the thread was let go: it finishes the call, then restores "
		       "itself",
		       s->tid, CALL_TIMEOUT_MS / 1000);
		return -ETIMEDOUT;
	}
	pr_debug("inject: thread %d %s by itself", s->tid,
		 off < s->code.len ? "is restoring itself" : "restored itself");
	return timed_out && !c->ret_known ? -ETIMEDOUT : 0;
}

/*
 * Run @c on the stopped thread through the trampoline. The thread's registers change once
 * (rip, rsp into the trampoline) after everything it needs is in its memory; from then on it
 * finishes the call and restores itself even if we die. Return 0 (the results in @c) or
 * -errno with the reason; the session's fate says how the thread is let go.
 */
static int borrow_call(struct session *s, struct call *c)
{
	struct user_regs_struct r = s->regs;
	unsigned char *img = NULL;
	uint64_t deadline, slack, mask;
	struct tramp_data d;
	int status, err;

	s->fate = FATE_UNTOUCHED;
	if (s->regs.cs != 0x33) {
		seterr(s->info, "thread %d runs 32-bit code: not supported", s->tid);
		return -ENOEXEC;
	}
	err = install_trampoline(s);
	if (err)
		return err;
	test_point("installed");
	err = stage_call(s, c, &img);
	if (!err)
		err = write_mem(s->tid, s->d_addr, img, s->d_len);
	free(img);
	if (err) {
		seterr(s->info, "cannot write to the stack of thread %d: %s", s->tid,
		       strerror(-err));
		if (s->d_saved)
			s->fate = FATE_RESTORE;
		return err;
	}
	test_point("staged");
	r.rip = s->tramp;
	r.rsp = s->d_addr;
	r.rax = 0;
	/* Not in a system call any more: the kernel must not "restart" into the trampoline. */
	r.orig_rax = -1;
	r.eflags &= ~(EFLAGS_DF | EFLAGS_TF);
	s->fate = FATE_RESTORE;
	if (ptrace(PTRACE_SETREGS, s->tid, 0, &r))
		return -errno;
	test_point("started");
	/* Signals that arrive from now on stay pending until the thread's mask is back (the
	 * trampoline sets the same mask first thing, in case we die right here). */
	mask = call_mask();
	if (ptrace(PTRACE_SETSIGMASK, s->tid, (void *)sizeof(mask), &mask))
		return -errno;
	test_point("masked");
	if (ptrace(PTRACE_CONT, s->tid, 0, 0))
		return -errno;
	s->stopped = false;
	s->fate = FATE_CURRENT;
	test_point("running");
	/* Poll the block's state; a SIGCHLD (a stop) wakes us at once. */
	slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
	deadline = now_mono_ns() + (uint64_t)CALL_TIMEOUT_MS * 1000000ULL;
	for (;;) {
		struct timespec ts = {0, POLL_NS};
		pid_t w = waitpid(s->tid, &status, __WALL | WNOHANG);

		if (w == s->tid && (WIFEXITED(status) || WIFSIGNALED(status))) {
			seterr(s->info, "process %d exited during the injection", s->pid);
			err = -ESRCH;
			break;
		}
		if (w == s->tid && WIFSTOPPED(status)) {
			s->stopped = true;
			if ((status >> 16) == PTRACE_EVENT_STOP) {
				/* A group stop (SIGSTOP to the process): finish our call first;
				 * detaching later puts the thread back into the group stop. */
				if (ptrace(PTRACE_CONT, s->tid, 0, 0)) {
					err = -errno;
					break;
				}
				s->stopped = false;
				continue;
			}
			err = signal_stop(s, WSTOPSIG(status));
			if (err)
				break;
			continue;
		}
		if (w < 0 && errno != EINTR) {
			seterr(s->info, "process %d exited during the injection", s->pid);
			err = -ESRCH;
			break;
		}
		if (read_mem(s->tid, s->d_addr, &d, TR_FN)) {
			seterr(s->info, "process %d exited during the injection", s->pid);
			err = -ESRCH;
			break;
		}
		if (d.state != s->token + TR_CALLING) {
			if (d.state == s->token + TR_PARKED)
				test_point("parked");
			err = take_over(s, c, false);
			break;
		}
		if (now_mono_ns() >= deadline) {
			err = take_over(s, c, true);
			break;
		}
		sigtimedwait(&chld_set, NULL, &ts);
	}
	prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0);
	return err;
}

static int read_remote_string(pid_t pid, uint64_t addr, char *out, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		/* Never cross a page in one read: the string may end right before a hole. */
		size_t chunk = min(len - 1 - got, 4096 - ((addr + got) & 4095));
		char *nul;

		if (read_mem(pid, addr + got, out + got, chunk))
			break;
		nul = memchr(out + got, '\0', chunk);
		got += chunk;
		if (nul)
			return 0;
	}
	out[min(got, len - 1)] = '\0';
	return got ? 0 : -EFAULT;
}

/* ---- driving one operation on a safe thread --------------------------------------------- */

struct op {
	/* Called with the thread stopped at a safe point and its state saved. */
	int (*fn)(struct session *s, void *ctx);
	void *ctx;
};

/*
 * $PROBING_INJECT_DELAY_MS keeps the chosen thread stopped that long before the call: the
 * tests use it to deliver signals to probing inside the critical section for certain.
 */
static void hold_for_tests(void)
{
	const char *d = getenv("PROBING_INJECT_DELAY_MS");
	long ms;

	if (d && !parse_long(d, 1, 10000, &ms)) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
}

static int run_on_safe_thread(pid_t pid, const struct op *op, struct inject_info *info)
{
	static const int blocked_sigs[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGTSTP,
					   SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD};
	struct safepoint *spt = NULL;
	struct procmaps pm = {};
	struct cand *c = NULL;
	sigset_t block, old;
	char why[128] = "", lastwhy[256] = "";
	int nc = 0, round, i, err = -EBUSY, r;
	uint64_t site;
	size_t k;

	sigemptyset(&chld_set);
	sigaddset(&chld_set, SIGCHLD);
	sigemptyset(&block);
	for (k = 0; k < ARRAY_SIZE(blocked_sigs); k++)
		sigaddset(&block, blocked_sigs[k]);

	err = find_tramp_site(pid, &site, info);
	if (err)
		return err;
	err = -EBUSY;
	spt = safepoint__new(pid);
	if (!spt) {
		err = errno == ESRCH ? -ESRCH : -errno;
		seterr(info, "cannot read the mappings of process %d: %s", pid, strerror(errno));
		return err;
	}
	/* From here on, a thread of the target may be held: Ctrl-C or a kill of probing must
	 * wait until it is let go (they are delivered when the mask is restored). */
	sigprocmask(SIG_BLOCK, &block, &old);
	for (round = 0; round < ROUNDS && err == -EBUSY; round++) {
		free(c);
		c = NULL;
		procmaps__release(&pm);
		procmaps__read(pid, &pm);
		r = list_candidates(pid, &c, &nc);
		if (r) {
			err = r;
			seterr(info, "process %d exited", pid);
			break;
		}
		if (!nc) {
			err = -ESRCH;
			seterr(info, "process %d has no thread that can be attached", pid);
			break;
		}
		for (i = 0; i < nc && i < MAX_CANDIDATES; i++) {
			struct session s = {
				.pid = pid, .tid = c[i].tid, .tramp = site, .info = info};

			r = seize_stop(&s);
			if (!r)
				r = save_state(&s);
			if (r) {
				session_end(&s);
				if (r == -ESRCH && kill(pid, 0) == 0)
					continue; /* that thread exited; try the next */
				err = r;
				if (r == -ESRCH)
					seterr(info, "process %d exited during the injection", pid);
				goto done;
			}
			test_point("stopped");
			if (!stack_room_ok(pid, &pm, s.regs.rsp,
					   MIN_STACK_ROOM + s.xstate_len + PATH_MAX)) {
				snprintf(lastwhy, sizeof(lastwhy),
					 "thread %d: too little stack left below its stack pointer",
					 s.tid);
				session_end(&s);
				continue;
			}
			r = safepoint__check(spt, s.tid, &s.regs, why, sizeof(why));
			if (r == 1) {
				snprintf(lastwhy, sizeof(lastwhy), "thread %d was %s", s.tid, why);
				pr_debug("inject: %s; trying another", lastwhy);
				session_end(&s);
				continue;
			}
			/* A safe thread: run the operation, then put everything back. */
			info->tid = s.tid;
			hold_for_tests();
			err = op->fn(&s, op->ctx);
			session_end(&s);
			goto done;
		}
		/* Nobody was at a safe point: give the threads a moment to leave. The pause
		 * varies so that a thread allocating in a loop is not caught at the same phase
		 * every time. */
		if (round + 1 < ROUNDS) {
			struct timespec ts = {0, 1000000 + (now_mono_ns() % 20000000)};

			nanosleep(&ts, NULL);
		}
	}
	if (err == -EBUSY)
		seterr(info,
		       "no thread of process %d was at a point where loading a library is safe "
		       "(%s).\nThe process is busy in the allocator or the dynamic loader; "
		       "try again in a moment.",
		       pid, lastwhy[0] ? lastwhy : "none could be stopped");
done:
	/* Reap nothing else: discard the SIGCHLDs our tracing queued, then restore the mask. */
	{
		struct timespec zero = {0, 0};

		while (sigtimedwait(&chld_set, NULL, &zero) > 0)
			;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	free(c);
	procmaps__release(&pm);
	safepoint__free(spt);
	return err;
}

/* ---- the two operations ---------------------------------------------------------------- */

struct dlopen_ctx {
	const struct loader_fns *lf;
	const char *path;
};

/* Is a file the target sees at @path mapped into it? */
static bool path_mapped(pid_t pid, const char *path)
{
	struct procmaps pm = {};
	bool found = false;
	size_t i;

	if (procmaps__read(pid, &pm))
		return false;
	for (i = 0; i < pm.nr && !found; i++)
		found = !strcmp(pm.maps[i].path, path);
	procmaps__release(&pm);
	return found;
}

static int op_dlopen(struct session *s, void *ctx)
{
	struct dlopen_ctx *d = ctx;
	struct call c = {.fn = d->lf->dlopen,
			 .arg1 = (uint64_t)(unsigned int)d->lf->mode,
			 .err_fn = d->lf->dlerror,
			 .str = d->path};
	struct strbuf e = {0};
	char text[512] = "";
	int err;

	err = borrow_call(s, &c);
	if (err)
		return err;
	if (!c.ret_known) {
		/* The thread restored itself and went on before we read the result (we were
		 * late): the library's mapping tells. */
		if (path_mapped(s->pid, d->path))
			return 0;
		seterr(s->info,
		       "dlopen(\"%s\") failed in process %d (no error text: the thread "
		       "went on before probing could read it)",
		       d->path, s->pid);
		return -EIO;
	}
	s->info->ret = c.ret;
	if (c.ret)
		return 0;
	/* dlerror() ran right after, on the same thread (its state is thread-local). */
	if (c.err_ret)
		read_remote_string(s->pid, c.err_ret, text, sizeof(text));
	/* The text is the target's memory: escaped (escape.h), it cannot forge a line. */
	seterr(s->info, "dlopen(\"%s\") failed in process %d: %s", d->path, s->pid,
	       text[0] ? text_str(&e, text, 0) : "(no error text)");
	sb_free(&e);
	return -EIO;
}

struct call_ctx {
	uint64_t fn;
};

static int op_call(struct session *s, void *ctx)
{
	struct call_ctx *cc = ctx;
	struct call c = {.fn = cc->fn};
	int err;

	err = borrow_call(s, &c);
	s->info->ret = c.ret; /* 0 if we were too late to read it */
	return err;
}

static void info_reset(struct inject_info *info)
{
	memset(info, 0, sizeof(*info));
}

int inject__dlopen(pid_t pid, const char *lib, struct inject_info *info)
{
	struct loader_fns lf;
	struct dlopen_ctx ctx;
	struct op op = {op_dlopen, &ctx};
	char abs[PATH_MAX], host_copy[PATH_MAX + 64] = "";
	uint64_t t0 = now_mono_ns();
	int err;

	info_reset(info);
	err = inject__check_permission(pid, info->error, sizeof(info->error));
	if (err)
		goto out;
	if (!realpath(lib, abs)) {
		err = -errno;
		seterr(info, "agent library %s: %s", lib, strerror(errno));
		goto out;
	}
	err = find_loader(pid, &lf, info);
	if (err)
		goto out;
	err = reach_library(pid, abs, false, info, host_copy, sizeof(host_copy));
	if (err)
		goto out;
	ctx.lf = &lf;
	ctx.path = info->target_path;
	err = run_on_safe_thread(pid, &op, info);
	if (err == -EIO && !info->copied &&
	    (strstr(info->error, "cannot open shared object") ||
	     strstr(info->error, "Permission denied"))) {
		/* The target could not read our file (its uid cannot enter our directory):
		 * give it a copy it can read. */
		pr_debug("inject: %s; retrying with a copy", info->error);
		err = reach_library(pid, abs, true, info, host_copy, sizeof(host_copy));
		if (!err) {
			ctx.path = info->target_path;
			err = run_on_safe_thread(pid, &op, info);
		}
	}
out:
	/* The copy is mapped by now (or useless): do not leave files in the target's /tmp. */
	if (host_copy[0])
		unlink(host_copy);
	info->total_ns = now_mono_ns() - t0;
	return err;
}

int inject__call(pid_t pid, const char *module, const char *symbol, struct inject_info *info)
{
	struct procmaps pm = {};
	struct call_ctx ctx = {0};
	struct op op = {op_call, &ctx};
	uint64_t t0 = now_mono_ns();
	int i, err;

	info_reset(info);
	err = inject__check_permission(pid, info->error, sizeof(info->error));
	if (err)
		goto out;
	err = procmaps__read(pid, &pm);
	if (err) {
		seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
		goto out;
	}
	err = -ENOENT;
	for (i = 0; i < (int)pm.nr && err; i++)
		if (pm.maps[i].offset == 0 && !strcmp(pm.maps[i].path, module))
			err = resolve_in(pid, &pm.maps[i], symbol, NULL, &ctx.fn);
	if (err) {
		seterr(info, "cannot find %s in %s mapped in process %d: %s", symbol, module, pid,
		       strerror(-err));
		goto out;
	}
	err = run_on_safe_thread(pid, &op, info);
out:
	procmaps__release(&pm);
	info->total_ns = now_mono_ns() - t0;
	return err;
}

/* ---- holding a thread to look at it ---------------------------------------------------- */

static const int held_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE};

struct inject_hold {
	struct session s;
	sigset_t old_mask;
};

int inject__hold(pid_t pid, pid_t tid, struct user_regs_struct *regs, struct inject_hold **out,
		 struct inject_info *info)
{
	struct inject_hold *h;
	sigset_t block;
	size_t k;
	int err;

	info_reset(info);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->s.pid = pid;
	h->s.tid = tid;
	h->s.info = info;
	sigemptyset(&chld_set);
	sigaddset(&chld_set, SIGCHLD);
	sigemptyset(&block);
	for (k = 0; k < ARRAY_SIZE(held_sigs); k++)
		sigaddset(&block, held_sigs[k]);
	sigaddset(&block, SIGCHLD);
	sigprocmask(SIG_BLOCK, &block, &h->old_mask);
	err = seize_stop(&h->s);
	if (!err)
		err = save_state(&h->s);
	if (err) {
		inject__release(h);
		return err;
	}
	test_point("held");
	*regs = h->s.regs;
	*out = h;
	return 0;
}

void inject__release(struct inject_hold *h)
{
	struct timespec zero = {0, 0};

	if (!h)
		return;
	test_point("released");
	session_end(&h->s);
	while (sigtimedwait(&chld_set, NULL, &zero) > 0)
		;
	sigprocmask(SIG_SETMASK, &h->old_mask, NULL);
	free(h);
}

int inject__find_module(pid_t pid, const char *prefix, char *path, size_t len)
{
	struct procmaps pm = {};
	int i, err;

	err = procmaps__read(pid, &pm);
	if (err)
		return err;
	err = 0;
	for (i = 0; i < (int)pm.nr; i++) {
		if (pm.maps[i].path[0] != '/' ||
		    strncmp(procmaps__basename(&pm.maps[i]), prefix, strlen(prefix)))
			continue;
		snprintf(path, len, "%s", pm.maps[i].path);
		err = 1;
		break;
	}
	procmaps__release(&pm);
	return err;
}
