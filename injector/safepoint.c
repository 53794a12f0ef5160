// SPDX-License-Identifier: MIT
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include <elfutils/libdwfl.h>

#include "elfsym.h"
#include "base/procmaps.h"
#include "safepoint.h"
#include "base/util.h"

#define MAX_FRAMES  256
#define STACK_CACHE (128 * 1024)

struct range {
	uint64_t lo, hi;
	const char *what; /* static string */
};

struct safepoint {
	pid_t pid;
	Dwfl *dwfl;
	bool attached;
	struct range *ranges;
	int nr, cap;
	/* The thread being checked. */
	pid_t tid;
	const struct user_regs_struct *regs;
	unsigned char *stack;
	uint64_t stack_lo, stack_len;
	/* Result of the walk. */
	const char *why;
	int frames;
};

/*
 * Functions of libc that must not be on the stack of the thread that runs dlopen: the
 * allocator (dlopen and our constructor allocate), the loader entry points that live in libc
 * since glibc 2.34 (they hold dl_load_lock), and functions that hold the locks dlopen or
 * pthread_create take (fork holds the allocator and loader locks across the atfork handlers;
 * pthread_create and thread exit hold the stack cache lock; exit runs the destructors that
 * dlclose also runs; the stdio list functions hold the global stdio lock).
 */
static const char *const libc_unsafe[] = {
	"malloc",
	"free",
	"calloc",
	"realloc",
	"reallocarray",
	"memalign",
	"posix_memalign",
	"aligned_alloc",
	"valloc",
	"pvalloc",
	"malloc_trim",
	"malloc_usable_size",
	"mallinfo",
	"mallinfo2",
	"malloc_info",
	"malloc_stats",
	"mallopt",
	"__libc_malloc",
	"__libc_free",
	"__libc_calloc",
	"__libc_realloc",
	"__libc_memalign",
	"cfree",
	"fork",
	"_Fork",
	"__libc_fork",
	"vfork",
	"pthread_create",
	"pthread_exit",
	"exit",
	"_exit",
	"quick_exit",
	"__cxa_finalize",
	"__call_tls_dtors",
	"dlopen",
	"dlmopen",
	"dlclose",
	"dlsym",
	"dlvsym",
	"dladdr",
	"dladdr1",
	"dlinfo",
	"dlerror",
	"dl_iterate_phdr",
	"__libc_dlopen_mode",
	"__libc_dlsym",
	"__libc_dlclose",
	"fflush",
	"fcloseall",
	"fopen",
	"fopen64",
	"fdopen",
	"freopen",
	"freopen64",
	"fclose",
	"popen",
	"pclose",
	"open_memstream",
	"fmemopen",
	"_IO_flush_all",
	"_IO_list_lock",
	"setenv",
	"unsetenv",
	"putenv",
	"clearenv",
};

/* What a preloaded allocator library (jemalloc, tcmalloc, mimalloc) exports. */
static const char *const alloc_unsafe[] = {
	"malloc",	  "free",	   "calloc", "realloc", "memalign",
	"posix_memalign", "aligned_alloc", "valloc", "pvalloc", "malloc_usable_size",
	"cfree",
};

static int add_range(struct safepoint *sp, uint64_t lo, uint64_t hi, const char *what)
{
	struct range *tmp;

	if (sp->nr == sp->cap) {
		int cap = sp->cap ? sp->cap * 2 : 64;

		tmp = realloc(sp->ranges, cap * sizeof(*tmp));
		if (!tmp)
			return -ENOMEM;
		sp->ranges = tmp;
		sp->cap = cap;
	}
	sp->ranges[sp->nr++] = (struct range){lo, hi, what};
	return 0;
}

static uint64_t read_at_base(pid_t pid)
{
	char fn[64];
	uint64_t *auxv, base = 0;
	size_t len, i;

	snprintf(fn, sizeof(fn), "/proc/%d/auxv", pid);
	auxv = (uint64_t *)read_file(fn, 0, &len);
	if (!auxv)
		return 0;
	for (i = 0; i + 1 < len / 8; i += 2) {
		if (auxv[i] == AT_NULL)
			break;
		if (auxv[i] == AT_BASE)
			base = auxv[i + 1];
	}
	free(auxv);
	return base;
}

static bool is_libc(const char *base)
{
	return !strcmp(base, "libc.so.6") || (!strncmp(base, "libc-2.", 7) && strstr(base, ".so"));
}

/* Add the ranges of @names defined by the file of mapping @m (offset-0 mapping). */
static int add_functions(struct safepoint *sp, const struct procmap *m, const char *const *names,
			 size_t n, const char *what)
{
	struct elfsym *e = NULL;
	uint64_t bias, value, size;
	size_t i;
	int fd, err = 0;

	fd = procmaps__open(sp->pid, m);
	if (fd < 0)
		return fd;
	e = elfsym__open_fd(fd);
	close(fd);
	if (!e)
		return -errno;
	if (elfsym__bias(e, m->start, m->offset, &bias)) {
		err = -ENOENT;
		goto cleanup;
	}
	if (!elfsym__is_dyn(e))
		bias = 0;
	for (i = 0; i < n; i++) {
		if (elfsym__lookup(e, names[i], NULL, &value, &size) || !size)
			continue;
		err = add_range(sp, bias + value, bias + value + size, what ? what : names[i]);
		if (err)
			goto cleanup;
	}
cleanup:
	elfsym__free(e);
	return err;
}

/* ---- libdw callbacks ------------------------------------------------------------------- */
static pid_t cur_pid; /* for find_elf: Dwfl callbacks have no user pointer */

static int find_elf(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr base,
		    char **file_name, Elf **elfp)
{
	char path[PATH_MAX + 64];
	int fd;

	if (name[0] == '/' && cur_pid > 0) {
		/* The target's view of the filesystem (it may live in another mount namespace). */
		snprintf(path, sizeof(path), "/proc/%d/root%s", cur_pid, name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			*elfp = elf_begin(fd, ELF_C_READ_MMAP, NULL);
			if (*elfp) {
				*file_name = strdup(path);
				return fd;
			}
			close(fd);
		}
	}
	return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
}

static int no_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
			char **debuginfo_file_name)
{
	return -1; /* .eh_frame is all the unwinder needs; never search for debug files */
}

static const Dwfl_Callbacks dwfl_cbs = {
	.find_elf = find_elf,
	.find_debuginfo = no_debuginfo,
};

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	struct safepoint *sp = arg;

	if (*thread_argp)
		return 0;
	*thread_argp = sp;
	return sp->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	struct safepoint *sp = arg;

	if (tid != sp->tid)
		return false;
	*thread_argp = sp;
	return true;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct safepoint *sp = arg;
	struct iovec local = {result, sizeof(*result)}, remote = {(void *)addr, sizeof(*result)};

	if (addr >= sp->stack_lo && addr - sp->stack_lo + 8 <= sp->stack_len) {
		memcpy(result, sp->stack + (addr - sp->stack_lo), 8);
		return true;
	}
	return process_vm_readv(sp->pid, &local, 1, &remote, 1, 0) == 8;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct safepoint *sp = arg;
	const struct user_regs_struct *r = sp->regs;
	/* DWARF register numbers of x86-64: rax rdx rcx rbx rsi rdi rbp rsp r8-r15, 16 = rip. */
	Dwarf_Word w[17] = {r->rax, r->rdx, r->rcx, r->rbx, r->rsi, r->rdi, r->rbp, r->rsp, r->r8,
			    r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rip};

	return dwfl_thread_state_registers(thread, 0, 17, w);
}

static const Dwfl_Thread_Callbacks thread_cbs = {
	.next_thread = next_thread,
	.get_thread = get_thread,
	.memory_read = memory_read,
	.set_initial_registers = set_initial_registers,
};

static int prewarm(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start, void *arg)
{
	const char *base = strrchr(name, '/');
	Dwarf_Addr bias;

	base = base ? base + 1 : name;
	/* Load the CFI of the modules every Python thread's stack goes through now, not while
	 * a thread is stopped. */
	if (is_libc(base) || strstr(base, "python") || !strncmp(base, "ld-", 3) ||
	    !strcmp(base, "[vdso]"))
		dwfl_module_eh_cfi(mod, &bias);
	return DWARF_CB_OK;
}

struct safepoint *safepoint__new(pid_t pid)
{
	struct safepoint *sp;
	struct procmaps pm = {};
	uint64_t at_base;
	const char *ldso = NULL;
	int i, err;

	sp = calloc(1, sizeof(*sp));
	if (!sp)
		return NULL;
	sp->pid = pid;
	err = procmaps__read(pid, &pm);
	if (err)
		goto fail;
	at_base = read_at_base(pid);
	for (i = 0; i < (int)pm.nr; i++)
		if (at_base && pm.maps[i].start == at_base && pm.maps[i].path[0] == '/')
			ldso = pm.maps[i].path;
	for (i = 0; i < (int)pm.nr; i++) {
		const struct procmap *m = &pm.maps[i];
		const char *base = procmaps__basename(m);
		bool musl = strstr(base, "musl") != NULL;

		if (m->path[0] != '/')
			continue;
		/* musl's loader is its libc: treat it like libc, by function. */
		if (ldso && !strcmp(m->path, ldso) && !musl && m->x) {
			err = add_range(sp, m->start, m->end, "the dynamic loader (ld.so)");
			if (err)
				goto fail;
		}
		if (m->offset != 0)
			continue;
		if (is_libc(base) || musl)
			err = add_functions(sp, m, libc_unsafe, ARRAY_SIZE(libc_unsafe), NULL);
		else if (strstr(base, "malloc")) /* libjemalloc, libtcmalloc*, libmimalloc */
			err = add_functions(sp, m, alloc_unsafe, ARRAY_SIZE(alloc_unsafe), NULL);
		if (err == -ENOMEM)
			goto fail;
		err = 0; /* a library we cannot read: unwinding still checks the rest */
	}
	procmaps__release(&pm);

	cur_pid = pid;
	sp->dwfl = dwfl_begin(&dwfl_cbs);
	if (!sp->dwfl) {
		err = -ENOMEM;
		goto fail;
	}
	if (dwfl_linux_proc_report(sp->dwfl, pid) || dwfl_report_end(sp->dwfl, NULL, NULL)) {
		err = -ESRCH;
		goto fail;
	}
	sp->attached = dwfl_attach_state(sp->dwfl, NULL, pid, &thread_cbs, sp);
	if (sp->attached)
		dwfl_getmodules(sp->dwfl, prewarm, NULL, 0);
	return sp;
fail:
	procmaps__release(&pm);
	safepoint__free(sp);
	errno = -err;
	return NULL;
}

void safepoint__free(struct safepoint *sp)
{
	if (!sp)
		return;
	if (sp->dwfl)
		dwfl_end(sp->dwfl);
	free(sp->ranges);
	free(sp->stack);
	free(sp);
}

static const char *classify(const struct safepoint *sp, uint64_t pc)
{
	int i;

	for (i = 0; i < sp->nr; i++)
		if (pc >= sp->ranges[i].lo && pc < sp->ranges[i].hi)
			return sp->ranges[i].what;
	return NULL;
}

static int frame_cb(Dwfl_Frame *state, void *arg)
{
	struct safepoint *sp = arg;
	Dwarf_Addr pc;
	bool activation;

	if (!dwfl_frame_pc(state, &pc, &activation))
		return DWARF_CB_ABORT;
	/* A return address points after the call: look up the call instruction itself. */
	sp->why = classify(sp, activation ? pc : pc - 1);
	if (sp->why || ++sp->frames >= MAX_FRAMES)
		return DWARF_CB_ABORT;
	return DWARF_CB_OK;
}

int safepoint__check(struct safepoint *sp, pid_t tid, const struct user_regs_struct *regs,
		     char *why, size_t whylen)
{
	struct iovec local, remote;
	ssize_t n;

	sp->tid = tid;
	sp->regs = regs;
	sp->why = NULL;
	sp->frames = 0;
	/* One read of the top of the stack serves most of the unwinder's memory reads. */
	if (!sp->stack) {
		sp->stack = malloc(STACK_CACHE);
		if (!sp->stack)
			return -ENOMEM;
	}
	sp->stack_lo = regs->rsp;
	local = (struct iovec){sp->stack, STACK_CACHE};
	remote = (struct iovec){(void *)regs->rsp, STACK_CACHE};
	n = process_vm_readv(sp->pid, &local, 1, &remote, 1, 0);
	if (n < 0) {
		/* The read stops at the end of the stack mapping only for partial reads: retry
		 * with what is left of the page. */
		remote.iov_len = local.iov_len = 4096 - (regs->rsp & 4095);
		n = process_vm_readv(sp->pid, &local, 1, &remote, 1, 0);
	}
	sp->stack_len = n > 0 ? n : 0;

	if (!sp->attached) {
		/* No unwinder: judge by where the thread stopped only. */
		sp->why = classify(sp, regs->rip);
	} else {
		cur_pid = sp->pid;
		dwfl_getthread_frames(sp->dwfl, tid, frame_cb, sp);
		if (!sp->frames && !sp->why)
			sp->why = classify(sp, regs->rip);
	}
	if (sp->why) {
		snprintf(why, whylen, "inside %s", sp->why);
		return 1;
	}
	return 0;
}
