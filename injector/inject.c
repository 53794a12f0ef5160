// SPDX-License-Identifier: MIT
/*
 * The ptrace injector: see inject.h for the whole procedure and its guarantees. This file
 * checks the permissions, finds dlopen in the target and makes the library reachable from it;
 * how a thread is borrowed to make the call is borrow.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "borrow.h"
#include "elfsym.h"
#include "base/escape.h"
#include "inject.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "base/procmaps.h"
#include "base/util.h"

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

/* ---- finding dlopen in the target ------------------------------------------------------ */

struct loader_fns {
	uint64_t dlopen, dlerror; /* runtime addresses; dlerror may be 0 */
	int mode;		  /* dlopen's flags argument */
	char module[PATH_MAX];
};

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
		borrow__seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
		return err;
	}
	for (i = 0; i < (int)pm.nr; i++) {
		const struct procmap *m = &pm.maps[i];
		const char *b = procmaps__basename(m);

		if (m->offset || m->path[0] != '/')
			continue;
		if (!libc && borrow__is_libc(b))
			libc = m;
		else if (!libdl && is_libdl_name(b))
			libdl = m;
	}
	if (!libc) {
		borrow__seterr(
			info,
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
		borrow__seterr(
			info,
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
		borrow__seterr(info, "cannot use the agent library %s: %s", abs, strerror(errno));
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
	borrow__seterr(
		info,
		"the agent library %s is not visible from process %d (it runs in another mount "
		"namespace or root), and it could not be copied into the process's /dev/shm, "
		"/tmp or /var/tmp (%s).",
		abs, pid, strerror(-err));
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

static int op_dlopen(struct borrowed *s, void *ctx)
{
	struct dlopen_ctx *d = ctx;
	struct remote_call c = {.fn = d->lf->dlopen,
				.arg1 = (uint64_t)(unsigned int)d->lf->mode,
				.err_fn = d->lf->dlerror,
				.str = d->path};
	struct strbuf e = {0};
	char text[512] = "";
	int err;

	err = borrow__call(s, &c);
	if (err)
		return err;
	if (!c.ret_known) {
		/* The thread restored itself and went on before we read the result (we were
		 * late): the library's mapping tells. */
		if (path_mapped(s->pid, d->path))
			return 0;
		borrow__seterr(s->info,
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
		borrow__read_string(s->pid, c.err_ret, text, sizeof(text));
	/* The text is the target's memory: escaped (escape.h), it cannot forge a line. */
	borrow__seterr(s->info, "dlopen(\"%s\") failed in process %d: %s", d->path, s->pid,
		       text[0] ? text_str(&e, text, 0) : "(no error text)");
	sb_free(&e);
	return -EIO;
}

struct call_ctx {
	uint64_t fn;
};

static int op_call(struct borrowed *s, void *ctx)
{
	struct call_ctx *cc = ctx;
	struct remote_call c = {.fn = cc->fn};
	int err;

	err = borrow__call(s, &c);
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
	struct borrow_op op = {op_dlopen, &ctx};
	char abs[PATH_MAX], host_copy[PATH_MAX + 64] = "";
	uint64_t t0 = now_mono_ns();
	int err;

	info_reset(info);
	err = inject__check_permission(pid, info->error, sizeof(info->error));
	if (err)
		goto cleanup;
	if (!realpath(lib, abs)) {
		err = -errno;
		borrow__seterr(info, "agent library %s: %s", lib, strerror(errno));
		goto cleanup;
	}
	err = find_loader(pid, &lf, info);
	if (err)
		goto cleanup;
	err = reach_library(pid, abs, false, info, host_copy, sizeof(host_copy));
	if (err)
		goto cleanup;
	ctx.lf = &lf;
	ctx.path = info->target_path;
	err = borrow__on_safe_thread(pid, &op, info);
	if (err == -EIO && !info->copied &&
	    (strstr(info->error, "cannot open shared object") ||
	     strstr(info->error, "Permission denied"))) {
		/* The target could not read our file (its uid cannot enter our directory):
		 * give it a copy it can read. */
		pr_debug("inject: %s; retrying with a copy", info->error);
		err = reach_library(pid, abs, true, info, host_copy, sizeof(host_copy));
		if (!err) {
			ctx.path = info->target_path;
			err = borrow__on_safe_thread(pid, &op, info);
		}
	}
cleanup:
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
	struct borrow_op op = {op_call, &ctx};
	uint64_t t0 = now_mono_ns();
	int i, err;

	info_reset(info);
	err = inject__check_permission(pid, info->error, sizeof(info->error));
	if (err)
		goto cleanup;
	err = procmaps__read(pid, &pm);
	if (err) {
		borrow__seterr(info, "cannot read /proc/%d/maps: %s", pid, strerror(-err));
		goto cleanup;
	}
	err = -ENOENT;
	for (i = 0; i < (int)pm.nr && err; i++)
		if (pm.maps[i].offset == 0 && !strcmp(pm.maps[i].path, module))
			err = resolve_in(pid, &pm.maps[i], symbol, NULL, &ctx.fn);
	if (err) {
		borrow__seterr(info, "cannot find %s in %s mapped in process %d: %s", symbol,
			       module, pid, strerror(-err));
		goto cleanup;
	}
	err = borrow__on_safe_thread(pid, &op, info);
cleanup:
	procmaps__release(&pm);
	info->total_ns = now_mono_ns() - t0;
	return err;
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
