// SPDX-License-Identifier: MIT
/* Borrowing one thread of a running process with ptrace: see borrow.h and inject.h. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "borrow.h"
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

void borrow__seterr(struct inject_info *info, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(info->error, sizeof(info->error), fmt, ap);
	va_end(ap);
}

/* Explain an EPERM from PTRACE_SEIZE after the pre-checks passed. */
static void explain_eperm(pid_t pid, struct inject_info *info)
{
	char msg[sizeof(info->error)];

	if (inject__check_permission(pid, msg, sizeof(msg))) {
		borrow__seterr(info, "%s", msg);
		return;
	}
	borrow__seterr(
		info,
		"the kernel refused to let probing trace process %d (ptrace: EPERM).\n"
		"Likely causes: the process is not dumpable (a setuid/setgid program, or it called "
		"prctl(PR_SET_DUMPABLE, 0)); probing runs in a container without CAP_SYS_PTRACE; "
		"or a security module (AppArmor, SELinux, seccomp) forbids ptrace.\n"
		"Run probing as root on the host, or start the program with 'probing run -- CMD'.",
		pid);
}

bool borrow__is_libc(const char *b)
{
	return !strcmp(b, "libc.so.6") || (!strncmp(b, "libc-2.", 7) && strstr(b, ".so")) ||
	       !strncmp(b, "libc.musl", 9) || !strncmp(b, "ld-musl", 7);
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

/*
 * The threads of @pid that could be borrowed (neither stopped, traced nor exiting), the
 * cheapest first, into *@out (*@nr of them; freed by the caller). 0, or -ESRCH when the
 * process is gone or every thread of it is a zombie (it is exiting), or another -errno.
 */
static int list_candidates(pid_t pid, struct cand **out, int *nr)
{
	char fn[96], *buf;
	struct cand *c = NULL, *tmp;
	struct dirent *de;
	int n = 0, cap = 0, err = 0, alive = 0;
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
		alive += procinfo_state_alive(st);
		if (!procinfo_state_alive(st) || st == 'T' || st == 't')
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
	if (!alive)
		err = -ESRCH; /* every thread gone or a zombie: the process is exiting */
	else
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
	pr_warn("test point %s", name);
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
static int seize_stop(struct borrowed *s)
{
	int status, err, sig;

	if (ptrace(PTRACE_SEIZE, s->tid, 0, 0)) {
		err = -errno;
		if (err == -EPERM)
			explain_eperm(s->pid, s->info);
		else if (err == -ESRCH)
			borrow__seterr(s->info, "thread %d exited", s->tid);
		return err;
	}
	s->seized = true;
	if (ptrace(PTRACE_INTERRUPT, s->tid, 0, 0))
		return -errno;
	for (;;) {
		err = wait_stop(s->tid, STOP_TIMEOUT_MS, &status);
		if (err == -ETIMEDOUT) {
			borrow__seterr(s->info,
				       "thread %d of process %d did not stop within %d ms "
				       "(uninterruptible "
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
				borrow__seterr(
					s->info,
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
static int save_state(struct borrowed *s)
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
static int release_regs(struct borrowed *s, const struct user_regs_struct *cur,
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
static int restore_state(struct borrowed *s)
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
static void session_end(struct borrowed *s)
{
	struct user_regs_struct cur;
	int status, err = 0;
	uint64_t held;

	if (!s->seized)
		goto cleanup;
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
cleanup:
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
		borrow__seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
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
				match = borrow__is_libc(b);
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
		borrow__seterr(
			info,
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
static int install_trampoline(struct borrowed *s)
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
		borrow__seterr(s->info, "cannot write probing's trampoline into process %d: %s",
			       s->pid, strerror(-err));
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
static int stage_call(struct borrowed *s, const struct remote_call *c, unsigned char **img_out)
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
static int signal_stop(struct borrowed *s, int sig)
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
		borrow__seterr(
			s->info,
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
static int interrupt_stop(struct borrowed *s)
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
static int take_over(struct borrowed *s, struct remote_call *c, bool timed_out)
{
	struct user_regs_struct cur;
	struct tramp_data d;
	uint64_t off;
	int err;

	err = interrupt_stop(s);
	if (err == -ESRCH)
		borrow__seterr(s->info, "process %d exited during the injection", s->pid);
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
		borrow__seterr(
			s->info,
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
 * Stage @c on the stopped thread and set it running in the trampoline. The fate follows each
 * step: untouched until its registers change, then restored with ptrace, and once it runs,
 * left to its own course. 0 or -errno.
 */
static int start_call(struct borrowed *s, struct remote_call *c)
{
	struct user_regs_struct r = s->regs;
	unsigned char *img = NULL;
	uint64_t mask;
	int err;

	s->fate = FATE_UNTOUCHED;
	if (s->regs.cs != 0x33) {
		borrow__seterr(s->info, "thread %d runs 32-bit code: not supported", s->tid);
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
		borrow__seterr(s->info, "cannot write to the stack of thread %d: %s", s->tid,
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
	return 0;
}

/*
 * The running borrowed thread stopped (@status from waitpid). A group stop (SIGSTOP to the
 * process): finish our call first; detaching later puts the thread back into the group stop.
 * A signal: signal_stop(). 0 with the thread running again, or -errno.
 */
static int call_stopped(struct borrowed *s, int status)
{
	s->stopped = true;
	if ((status >> 16) == PTRACE_EVENT_STOP) {
		if (ptrace(PTRACE_CONT, s->tid, 0, 0))
			return -errno;
		s->stopped = false;
		return 0;
	}
	return signal_stop(s, WSTOPSIG(status));
}

/*
 * Wait for the call started on @s to finish (its block's state leaves TR_CALLING), or for
 * CALL_TIMEOUT_MS, then take the thread over. The block's state is polled; a SIGCHLD (a stop)
 * wakes us at once. Return 0 (the results in @c) or -errno.
 */
static int wait_call(struct borrowed *s, struct remote_call *c)
{
	uint64_t deadline, slack;
	struct tramp_data d;
	int status, err;

	slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0);
	deadline = now_mono_ns() + (uint64_t)CALL_TIMEOUT_MS * 1000000ULL;
	for (;;) {
		struct timespec ts = {0, POLL_NS};
		pid_t w = waitpid(s->tid, &status, __WALL | WNOHANG);

		if (w == s->tid && WIFSTOPPED(status)) {
			err = call_stopped(s, status);
			if (err)
				break;
			continue;
		}
		if ((w == s->tid && (WIFEXITED(status) || WIFSIGNALED(status))) ||
		    (w < 0 && errno != EINTR) || read_mem(s->tid, s->d_addr, &d, TR_FN)) {
			borrow__seterr(s->info, "process %d exited during the injection", s->pid);
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

int borrow__call(struct borrowed *s, struct remote_call *c)
{
	int err = start_call(s, c);

	return err ? err : wait_call(s, c);
}

int borrow__read_string(pid_t pid, uint64_t addr, char *out, size_t len)
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

/* Choosing a thread: what stays the same while the candidates are tried. */
struct pick {
	pid_t pid;
	uint64_t site; /* the trampoline's address */
	struct safepoint *spt;
	const struct borrow_op *op;
	struct inject_info *info;
	char lastwhy[256]; /* why the last candidate was passed over */
};

#define TRY_NEXT 1 /* try_thread: this thread will not do, try the next */

/*
 * Stop thread @tid (@pm: the maps read before this round) and, at a safe point, run the
 * operation on it. Return TRY_NEXT (passed over, let go; p->lastwhy says why, or it exited),
 * else what the operation returned, or -errno when the stop failed.
 */
static int try_thread(struct pick *p, const struct procmaps *pm, pid_t tid)
{
	struct borrowed s = {.pid = p->pid, .tid = tid, .tramp = p->site, .info = p->info};
	char why[128] = "";
	int r, err;

	r = seize_stop(&s);
	if (!r)
		r = save_state(&s);
	if (r) {
		session_end(&s);
		if (r == -ESRCH && kill(p->pid, 0) == 0)
			return TRY_NEXT; /* that thread exited; try the next */
		if (r == -ESRCH)
			borrow__seterr(p->info, "process %d exited during the injection", p->pid);
		return r;
	}
	test_point("stopped");
	if (!stack_room_ok(p->pid, pm, s.regs.rsp, MIN_STACK_ROOM + s.xstate_len + PATH_MAX)) {
		snprintf(p->lastwhy, sizeof(p->lastwhy),
			 "thread %d: too little stack left below its stack pointer", s.tid);
		session_end(&s);
		return TRY_NEXT;
	}
	r = safepoint__check(p->spt, s.tid, &s.regs, why, sizeof(why));
	if (r == 1) {
		snprintf(p->lastwhy, sizeof(p->lastwhy), "thread %d was %s", s.tid, why);
		pr_debug("inject: %s; trying another", p->lastwhy);
		session_end(&s);
		return TRY_NEXT;
	}
	/* A safe thread: run the operation, then put everything back. */
	p->info->tid = s.tid;
	hold_for_tests();
	err = p->op->fn(&s, p->op->ctx);
	session_end(&s);
	return err;
}

/*
 * Up to ROUNDS passes over the threads of p->pid, each of the first MAX_CANDIDATES tried in
 * turn (list_candidates: the cheapest to borrow first). Return what the operation returned,
 * or -errno with p->info->error set (-EBUSY: none was at a safe point).
 */
static int try_rounds(struct pick *p)
{
	struct procmaps pm = {};
	struct cand *c = NULL;
	int nc = 0, round, i, err = -EBUSY, r;

	for (round = 0; round < ROUNDS && err == -EBUSY; round++) {
		free(c);
		c = NULL;
		procmaps__release(&pm);
		procmaps__read(p->pid, &pm);
		r = list_candidates(p->pid, &c, &nc);
		if (r) {
			err = r;
			borrow__seterr(p->info, "process %d exited", p->pid);
			break;
		}
		if (!nc) {
			err = -ESRCH;
			borrow__seterr(p->info, "process %d has no thread that can be attached",
				       p->pid);
			break;
		}
		for (i = 0; i < nc && i < MAX_CANDIDATES; i++) {
			r = try_thread(p, &pm, c[i].tid);
			if (r != TRY_NEXT) {
				err = r;
				goto cleanup;
			}
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
		borrow__seterr(p->info,
			       "no thread of process %d was at a point where loading a library is "
			       "safe (%s).\nThe process is busy in the allocator or the dynamic "
			       "loader; try again in a moment.",
			       p->pid, p->lastwhy[0] ? p->lastwhy : "none could be stopped");
cleanup:
	free(c);
	procmaps__release(&pm);
	return err;
}

int borrow__on_safe_thread(pid_t pid, const struct borrow_op *op, struct inject_info *info)
{
	static const int blocked_sigs[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGTSTP,
					   SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD};
	struct pick p = {.pid = pid, .op = op, .info = info};
	struct timespec zero = {0, 0};
	sigset_t block, old;
	int err;
	size_t k;

	sigemptyset(&chld_set);
	sigaddset(&chld_set, SIGCHLD);
	sigemptyset(&block);
	for (k = 0; k < ARRAY_SIZE(blocked_sigs); k++)
		sigaddset(&block, blocked_sigs[k]);

	err = find_tramp_site(pid, &p.site, info);
	if (err)
		return err;
	p.spt = safepoint__new(pid);
	if (!p.spt) {
		err = errno == ESRCH ? -ESRCH : -errno;
		borrow__seterr(info, "cannot read the mappings of process %d: %s", pid,
			       strerror(errno));
		return err;
	}
	/* From here on, a thread of the target may be held: Ctrl-C or a kill of probing must
	 * wait until it is let go (they are delivered when the mask is restored). */
	sigprocmask(SIG_BLOCK, &block, &old);
	err = try_rounds(&p);
	/* Reap nothing else: discard the SIGCHLDs our tracing queued, then restore the mask. */
	while (sigtimedwait(&chld_set, NULL, &zero) > 0)
		;
	sigprocmask(SIG_SETMASK, &old, NULL);
	safepoint__free(p.spt);
	return err;
}

/* ---- holding a thread to look at it ---------------------------------------------------- */

static const int held_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE};

struct inject_hold {
	struct borrowed s;
	sigset_t old_mask;
};

int inject__hold(pid_t pid, pid_t tid, struct user_regs_struct *regs, struct inject_hold **out,
		 struct inject_info *info)
{
	struct inject_hold *h;
	sigset_t block;
	size_t k;
	int err;

	memset(info, 0, sizeof(*info));
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
