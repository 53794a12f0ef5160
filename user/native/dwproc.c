// SPDX-License-Identifier: MIT
/*
 * Modules are reported with dwfl_report_elf() from our own maps snapshot rather than
 * dwfl_linux_proc_report(): the snapshot outlives the process (samples are unwound after
 * the fact), ELF files are opened through /proc/PID/root (targets in other mount
 * namespaces) or /proc/PID/map_files (deleted files), and the vDSO is taken from our own
 * process (the kernel maps the same image into every process).
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <dwarf.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/bmap.h"
#include "native/cfirule.h"
#include "native/dwproc.h"
#include "base/log.h"
#include "base/procinfo.h"
#include "bpf/sampler.h"
#include "base/util.h"

/* A reported module's address range, for our own lookups. */
struct modrange {
	uint64_t start, end;
	Dwfl_Module *mod;
};

struct dwproc {
	pid_t pid;
	Dwfl *dwfl;
	struct procmaps maps;
	struct bmap *reported;	 /* (dev, inode, start of its first executable mapping) */
	struct modrange *ranges; /* sorted by start, non-overlapping */
	size_t nranges, capranges;
	uint64_t start_stack; /* the main thread's stack pointer at exec (argc); 0 unknown */
	uint64_t last_refresh_ns;
	unsigned int refresh_gap_ms; /* current back-off: 0 after a refresh found a module */
	bool attached;
	int refs;      /* its creator and the forked children sharing it (dwproc__share) */
	bool disowned; /* its creator let it go: the pid's maps no longer describe it */
	/* The sample being unwound (dwfl callbacks read these). */
	pid_t tid;
	const uint64_t *regs;
	const uint8_t *stack;
	uint64_t sp;
	size_t stack_len;
	struct dwproc_frame *out;
	int max, n;
	uint64_t last_sp; /* stack pointer of out[n - 1]; 0 if unknown */
	/* Save slots just below sp of a sample taken in an epilogue (released_slots), with
	 * the value each holds: the register it was restored into. */
	struct {
		uint64_t addr, val;
	} popped[6];
	int npopped;
	/* dwproc__unwind_checks: the offsets (from sp) of the words the unwind read */
	bool logging;
	uint32_t *reads;
	size_t nreads, capreads;
	/* Where separate debug files are looked for: this host's, then the process's own root
	 * (a container's /usr/lib/debug: Debian's libc6-dbg for its stripped libc). */
	Dwfl_Callbacks callbacks;
	char *debuginfo_path;
	/* The call-frame rules of the code addresses unwound (pc -> cfi_rule__pack), for
	 * fast_unwind; emptied when a module is reported (one may have moved) or it is full. */
	struct bmap *rules;
};

/* Rules kept per process before they are forgotten and read again. */
#define MAX_RULES 65536
/* The most frames the self-check compares (a longer unwind is not checked). */
#define MAX_NATIVE_CHECK 256

/* How stacks were unwound, for the self-check (PROBING_UNWIND_CHECK). */
static struct {
	int check, libdwfl_only; /* -1: not read yet */
	unsigned long fast, slow, differ, ns;
} unwinds = {.check = -1, .libdwfl_only = -1};

static const Dwfl_Callbacks dwfl_callbacks = {
	.find_elf = dwfl_linux_proc_find_elf, /* unused: every module comes with an fd */
	.find_debuginfo = dwfl_standard_find_debuginfo,
};

/* A memfd holding this process's vDSO image, created once; -1 if unavailable. */
static int vdso_fd(void)
{
	static int fd = -2;
	const Elf64_Ehdr *eh;
	size_t size;

	if (fd != -2)
		return fd;
	fd = -1;
	eh = (const Elf64_Ehdr *)getauxval(AT_SYSINFO_EHDR);
	if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return fd;
	/* The image ends with its section headers. */
	size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	if (size > (1 << 20))
		return fd;
	fd = memfd_create("probing-vdso", MFD_CLOEXEC);
	if (fd >= 0 && write_all(fd, eh, size)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Open the ELF file behind mapping @m of @pid; -errno on failure. */
static int open_mapped_file(pid_t pid, const struct procmap *m)
{
	int fd;

	if (!strcmp(m->path, "[vdso]")) {
		fd = vdso_fd();
		return fd < 0 ? -ENOENT : fcntl(fd, F_DUPFD_CLOEXEC, 0);
	}
	if (m->path[0] != '/')
		return -ENOENT;
	fd = procmaps__open(pid, m);
	/* The process may be gone: the path itself still names the file. */
	if (fd < 0 && !m->deleted && (fd = open(m->path, O_RDONLY | O_CLOEXEC)) < 0)
		fd = -errno;
	return fd;
}

/*
 * The load bias of the ELF in @fd, given that mapping @m maps it at file offset m->offset:
 * find the PT_LOAD segment that covers that offset.
 */
static int load_bias(int fd, const struct procmap *m, uint64_t *bias)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Phdr ph;
	size_t i, nph;
	int err = -ENOEXEC;

	if (!elf)
		return -ENOEXEC;
	if (elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &nph))
		goto cleanup;
	for (i = 0; i < nph; i++) {
		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (m->offset >= (ph.p_offset & ~4095ULL) &&
		    m->offset < ph.p_offset + ph.p_filesz) {
			*bias = m->start - m->offset - (ph.p_vaddr - ph.p_offset);
			err = 0;
			break;
		}
	}
cleanup:
	elf_end(elf);
	return err;
}

/*
 * Whether mapping @m is part of its file's image as the loader mapped it: the file's header
 * (offset 0) is mapped where @m's offset says the image begins. A page of a library mapped
 * again on its own elsewhere is not (libffi's static trampolines map a page of their
 * library's code next to other libraries): as a module, its image would span the libraries
 * around it, and libdwfl, which looks modules up by address, then finds none where they
 * overlap, and every unwind through them stops.
 */
static bool loaded_image(const struct procmaps *pm, const struct procmap *m)
{
	const struct procmap *h;

	if (!m->offset)
		return true;
	if (m->start < m->offset)
		return false;
	h = procmaps__find(pm, m->start - m->offset);
	return h && h->start == m->start - m->offset && !h->offset && h->inode == m->inode &&
	       h->dev_major == m->dev_major && h->dev_minor == m->dev_minor;
}

/* Key of a reported file: the same file mapped at another address is another module. */
struct report_key {
	uint64_t inode, start;
	uint32_t dev_major, dev_minor;
};

/* Insert @mod's range into the sorted table (ranges do not overlap: they are mappings). */
static int add_range(struct dwproc *dp, Dwfl_Module *mod)
{
	Dwarf_Addr lo, hi;
	size_t i;

	dwfl_module_info(mod, NULL, &lo, &hi, NULL, NULL, NULL, NULL);
	if (grow_array(&dp->ranges, &dp->capranges, dp->nranges + 1, sizeof(*dp->ranges)))
		return -ENOMEM;
	for (i = dp->nranges; i > 0 && dp->ranges[i - 1].start > lo; i--)
		dp->ranges[i] = dp->ranges[i - 1];
	dp->ranges[i] = (struct modrange){lo, hi, mod};
	dp->nranges++;
	return 0;
}

/*
 * Report every file with an executable mapping not reported yet. Modules are never removed
 * (libdwfl would free state the unwinder still points to, and queued samples may still need
 * a library that was unloaded since). We track what was reported ourselves: libdwfl's
 * address lookup is not reliable for addresses outside every module.
 */
static int report_modules(struct dwproc *dp)
{
	const struct procmap *m;
	struct report_key key;
	Dwfl_Module *mod;
	uint64_t bias;
	size_t i;
	int fd, inserted, added = 0;

	for (i = 0; i < dp->maps.nr; i++) {
		m = &dp->maps.maps[i];
		if (!m->x || !m->path[0] || (m->path[0] == '[' && strcmp(m->path, "[vdso]")) ||
		    !loaded_image(&dp->maps, m))
			continue;
		memset(&key, 0, sizeof(key));
		key.inode = m->inode;
		key.dev_major = m->dev_major;
		key.dev_minor = m->dev_minor;
		/* The file's first mapping: a shared object maps its header just before. */
		key.start = m->start - m->offset;
		if (!bmap__upsert(dp->reported, &key, sizeof(key), 0, &inserted))
			return -ENOMEM;
		if (!inserted)
			continue;
		fd = open_mapped_file(dp->pid, m);
		if (fd < 0) {
			pr_debug("pid %d: cannot open %s: %s", dp->pid, m->path, strerror(-fd));
			continue;
		}
		if (load_bias(fd, m, &bias)) {
			close(fd);
			continue;
		}
		/* The fd is consumed by libdwfl on success. */
		mod = dwfl_report_elf(dp->dwfl, m->path, m->path, fd, bias, true);
		if (!mod) {
			pr_debug("pid %d: cannot report %s: %s", dp->pid, m->path, dwfl_errmsg(-1));
			close(fd);
			continue;
		}
		if (add_range(dp, mod))
			return -ENOMEM;
		added++;
	}
	return added;
}

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	struct dwproc *dp = arg;

	if (*thread_argp)
		return 0;
	*thread_argp = dp;
	return dp->tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	*thread_argp = arg;
	return true;
}

/*
 * Memory reads during unwinding: only the stack copy taken at sample time is trusted, and
 * below it the save slots released_slots proved to hold what their registers hold.
 */
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct dwproc *dp = arg;
	int i;

	if (addr < dp->sp) {
		for (i = 0; i < dp->npopped; i++)
			if (dp->popped[i].addr == addr) {
				*result = dp->popped[i].val;
				return true;
			}
		return false;
	}
	if (addr + sizeof(*result) > dp->sp + dp->stack_len || addr + sizeof(*result) < addr)
		return false;
	memcpy(result, dp->stack + (addr - dp->sp), sizeof(*result));
	if (dp->logging &&
	    !grow_array(&dp->reads, &dp->capreads, dp->nreads + 1, sizeof(*dp->reads)))
		dp->reads[dp->nreads++] = (uint32_t)(addr - dp->sp);
	return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct dwproc *dp = arg;
	Dwarf_Word regs[DWREG_COUNT];
	int i;

	for (i = 0; i < DWREG_COUNT; i++)
		regs[i] = dp->regs[i];
	/*
	 * rip is a register too, not only the pc: the CFI of PLT stubs computes the CFA from it
	 * (rsp + 8, or + 16 past the push in the lazy-binding half). Without it the first
	 * unwinding step fails in every PLT stub, which libdwfl reports as the end of the
	 * stack; libraries built without -fno-semantic-interposition (libpython 3.8) spend
	 * a few percent of their time there.
	 */
	if (!dwfl_thread_state_registers(thread, 0, DWREG_COUNT, regs))
		return false;
	dwfl_thread_state_register_pc(thread, dp->regs[DWREG_RIP]);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = next_thread,
	.get_thread = get_thread,
	.memory_read = memory_read,
	.set_initial_registers = set_initial_registers,
};

/*
 * An x86_64 ELF for libdwfl's backend (register layout, default unwinder): our own
 * executable, opened once and kept for the life of the program. Passing it explicitly
 * keeps libdwfl from borrowing the backend of one of the target's modules.
 */
static Elf *backend_elf(void)
{
	static Elf *elf;
	int fd;

	if (!elf) {
		elf_version(EV_CURRENT);
		fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	}
	return elf;
}

static int attach(struct dwproc *dp)
{
	if (dp->attached)
		return 0;
	if (!dwfl_attach_state(dp->dwfl, backend_elf(), dp->pid, &thread_callbacks, dp)) {
		pr_debug("pid %d: dwfl_attach_state: %s", dp->pid, dwfl_errmsg(-1));
		return -ENOEXEC;
	}
	dp->attached = true;
	return 0;
}

struct dwproc *dwproc__new(pid_t pid)
{
	struct dwproc *dp;
	int err;

	dp = calloc(1, sizeof(*dp));
	if (!dp) {
		errno = ENOMEM;
		return NULL;
	}
	dp->pid = pid;
	dp->refs = 1;
	dp->reported = bmap__new();
	dp->rules = bmap__new();
	if (!dp->reported || !dp->rules) {
		err = -ENOMEM;
		goto fail;
	}
	err = procmaps__read(pid, &dp->maps);
	if (err)
		goto fail;
	if (procinfo_start_stack(pid, &dp->start_stack))
		dp->start_stack = 0;
	if (asprintf(&dp->debuginfo_path, ":.debug:/usr/lib/debug:/proc/%d/root/usr/lib/debug",
		     pid) < 0) {
		dp->debuginfo_path = NULL;
		err = -ENOMEM;
		goto fail;
	}
	dp->callbacks = dwfl_callbacks;
	dp->callbacks.debuginfo_path = &dp->debuginfo_path;
	dp->dwfl = dwfl_begin(&dp->callbacks);
	if (!dp->dwfl) {
		err = -ENOMEM;
		goto fail;
	}
	dwfl_report_begin(dp->dwfl);
	err = report_modules(dp);
	dwfl_report_end(dp->dwfl, NULL, NULL);
	if (err < 0)
		goto fail;
	dp->last_refresh_ns = now_mono_ns();
	return dp;
fail:
	dwproc__free(dp);
	errno = -err;
	return NULL;
}

static void release(struct dwproc *dp)
{
	if (--dp->refs > 0)
		return;
	if (dp->dwfl)
		dwfl_end(dp->dwfl);
	free(dp->debuginfo_path);
	procmaps__release(&dp->maps);
	bmap__free(dp->reported);
	bmap__free(dp->rules);
	free(dp->ranges);
	free(dp->reads);
	free(dp);
}

void dwproc__free(struct dwproc *dp)
{
	if (!dp)
		return;
	dp->disowned = true;
	release(dp);
}

struct dwproc *dwproc__share(struct dwproc *dp)
{
	dp->refs++;
	return dp;
}

void dwproc__unshare(struct dwproc *dp)
{
	if (dp)
		release(dp);
}

int dwproc__refresh(struct dwproc *dp, unsigned int max_interval_ms)
{
	struct procmaps fresh;
	uint64_t now = now_mono_ns();
	int err, added;

	if (dp->disowned || now - dp->last_refresh_ns < (uint64_t)dp->refresh_gap_ms * 1000000)
		return 0;
	dp->last_refresh_ns = now;
	err = procmaps__read(dp->pid, &fresh);
	if (err)
		return err;
	procmaps__release(&dp->maps);
	dp->maps = fresh;
	dwfl_report_begin_add(dp->dwfl);
	added = report_modules(dp);
	dwfl_report_end(dp->dwfl, NULL, NULL);
	if (added < 0)
		return added;
	/*
	 * While libraries keep appearing (a process starting: ld.so maps them one by one) look
	 * again at once; while nothing new is found (JIT code, an address really in no file)
	 * back off, doubling up to @max_interval_ms.
	 */
	if (added) {
		dp->refresh_gap_ms = 0;
		bmap__clear(dp->rules);
	} else {
		dp->refresh_gap_ms = dp->refresh_gap_ms ? dp->refresh_gap_ms * 2 : 1;
	}
	if (dp->refresh_gap_ms > max_interval_ms)
		dp->refresh_gap_ms = max_interval_ms;
	return 1;
}

static int frame_cb(Dwfl_Frame *state, void *arg)
{
	struct dwproc *dp = arg;
	Dwarf_Addr pc;
	Dwarf_Word sp;
	bool activation;

	if (!dwfl_frame_pc(state, &pc, &activation))
		return DWARF_CB_ABORT;
	if (dp->n >= dp->max)
		return DWARF_CB_ABORT;
	/* A zero return address ends the chain (e.g. thread start). */
	if (!pc && dp->n)
		return DWARF_CB_ABORT;
	dp->out[dp->n].pc = pc;
	dp->out[dp->n].activation = activation;
	dp->n++;
	if (dwfl_frame_reg(state, DWREG_RSP, &sp))
		sp = 0;
	dp->last_sp = sp;
	return DWARF_CB_OK;
}

/*
 * Whether the CFI of the code at @pc (exact: already adjusted for a return address) says
 * that its frame has no caller: the return address rule is "undefined". That is the ABI's
 * end-of-stack mark; glibc puts it on _start and on the child side of clone and clone3, and
 * it is in .eh_frame, so a stripped library has it too. Like libdwfl, the first CFI with an
 * entry for @pc decides: .eh_frame, then .debug_frame.
 */
static bool cfi_says_outermost(struct dwproc *dp, uint64_t pc)
{
	Dwfl_Module *mod = dwproc__module(dp, pc);
	Dwarf_Frame *frame;
	Dwarf_CFI *cfi;
	Dwarf_Addr bias;
	bool undefined;
	int32_t off;
	int which, ra;

	if (!mod)
		return false;
	for (which = 0; which < 2; which++) {
		cfi = which ? dwfl_module_dwarf_cfi(mod, &bias) : dwfl_module_eh_cfi(mod, &bias);
		if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame))
			continue;
		ra = dwarf_frame_info(frame, NULL, NULL, NULL);
		undefined = ra >= 0 && cfi_frame_reg(frame, ra, &off) == CFI_REG_UNDEFINED;
		free(frame);
		return undefined;
	}
	return false;
}

/*
 * Whether out[n - 1], where the unwind ended, is the thread's outermost frame (see
 * dwproc__unwind). @ended: the unwinder itself found no caller (not an error, not our
 * limit). Stopping for lack of copied stack also looks like "no caller" to libdwfl (a
 * return address it cannot read is as undefined as one the CFI declares so), hence the
 * CFI check.
 */
/* Whether out[n - 1] is the frame the kernel started the program in: nothing is above argc. */
static bool at_start_stack(const struct dwproc *dp)
{
	return dp->start_stack && dp->last_sp == dp->start_stack;
}

static bool reached_outermost(struct dwproc *dp, bool ended)
{
	const struct dwproc_frame *last = &dp->out[dp->n - 1];

	if (at_start_stack(dp))
		return true;
	return ended && cfi_says_outermost(dp, last->activation ? last->pc : last->pc - 1);
}

/* Whether @frame's CFA is rsp + 8: its function holds nothing on the stack but the return
 * address. */
static bool cfa_is_return_address(Dwarf_Frame *frame)
{
	int32_t off;
	bool rbp;

	return cfi_frame_cfa(frame, &rbp, &off) && !rbp && off == 8;
}

/*
 * The address where @frame's CFI says callee-saved register @reg of the caller is saved
 * (the rule "offset(N)"): 0 for any other rule. @cfa: the frame's CFA.
 */
static uint64_t save_slot(Dwarf_Frame *frame, int reg, uint64_t cfa)
{
	int32_t off;

	return cfi_frame_reg(frame, reg, &off) == CFI_REG_AT ? cfa + (int64_t)off : 0;
}

/*
 * Whether @frame (of @cfi) is an epilogue's, past
 * the instruction that released the stack frame: its CFA is rsp + 8, and the row before it
 * had another CFA (rbp + 16 before a `leave`, rsp + 16 before a `pop %rbp`).
 */
static bool frame_released(Dwarf_CFI *cfi, Dwarf_Frame *frame)
{
	Dwarf_Frame *before;
	Dwarf_Addr start;
	bool released;

	if (!cfa_is_return_address(frame) || dwarf_frame_info(frame, &start, NULL, NULL) < 0 ||
	    !start || dwarf_cfi_addrframe(cfi, start - 1, &before))
		return false;
	released = !cfa_is_return_address(before);
	free(before);
	return released;
}

/*
 * A sample taken in an epilogue, its stack frame already released: set dp->popped to the
 * save slots below the stack pointer that the CFI of its pc still names, each with the
 * value of its register.
 *
 * After `leave` or `pop %rbp` GCC's CFI only moves the CFA to rsp + 8: the rule for rbp
 * (and for registers restored before it) stays "saved at CFA - 16", now below the stack
 * pointer, outside the copy that starts there. libdwfl then cannot read the caller's rbp,
 * and a caller whose CFA is rbp + 16 (every function built with frame pointers: Debian's
 * python3.14 and python3.15 and their _PyEval_EvalFrameDefault) ends the unwind: a
 * leaf-only stack, for every sample between the `leave` and the `ret`. But a function
 * releases its frame only once it has restored the callee-saved registers from their slots
 * (popped with `pop`, `leave`, or reloaded with `mov` before it), so each register holds
 * what its slot holds. A function whose stack pointer never moves (CFA rsp + 8 throughout)
 * may keep saves in the red zone below it (GCC with -mtune that saves with `mov`) while
 * its body changes the registers: hence only after a row with another CFA. Nothing is
 * supplied anywhere else, and only for the callee-saved registers.
 */
static void released_slots(struct dwproc *dp, const uint64_t *regs)
{
	static const int saved[] = {DWREG_RBX, DWREG_RBP, DWREG_R12,
				    DWREG_R13, DWREG_R14, DWREG_R15};
	uint64_t pc = regs[DWREG_RIP], sp = regs[DWREG_RSP], slot;
	Dwfl_Module *mod = dwproc__module(dp, pc);
	Dwarf_Frame *frame;
	Dwarf_CFI *cfi;
	Dwarf_Addr bias;
	size_t i;
	int which;

	dp->npopped = 0;
	if (!mod)
		return;
	/* The CFI libdwfl will use: the first with an entry for pc (cfi_says_outermost). */
	for (which = 0; which < 2; which++) {
		cfi = which ? dwfl_module_dwarf_cfi(mod, &bias) : dwfl_module_eh_cfi(mod, &bias);
		if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame))
			continue;
		if (frame_released(cfi, frame))
			for (i = 0; i < ARRAY_SIZE(saved); i++) {
				slot = save_slot(frame, saved[i], sp + 8);
				if (slot && slot < sp && slot >= sp - 128)
					dp->popped[dp->npopped++] = (typeof(dp->popped[0])){
						.addr = slot, .val = regs[saved[i]]};
			}
		free(frame);
		return;
	}
}

/* The rule of code address @at (exact), from the cache or read and kept. */
static void rule_at(struct dwproc *dp, uint64_t at, struct cfi_rule *r)
{
	uint64_t *v = bmap__find(dp->rules, &at, sizeof(at)), packed;
	struct cfi_rule fresh;

	if (v) {
		cfi_rule__unpack(*v, r);
		return;
	}
	/* The module libdwfl would take (ours are the same ranges, reported the same way). */
	cfi_rule__read(dwfl_addrmodule(dp->dwfl, at), at, &fresh);
	packed = cfi_rule__pack(&fresh);
	if (bmap__size(dp->rules) >= MAX_RULES)
		bmap__clear(dp->rules);
	bmap__upsert(dp->rules, &at, sizeof(at), packed, NULL); /* ENOMEM: not kept */
	cfi_rule__unpack(packed, r);
}

/*
 * The unwind libdwfl gives (dp->out, dp->n, dp->last_sp), by the cached rules alone, for a
 * stack whose every frame has a simple rule (cfirule.h); -EAGAIN at the first that has not
 * (the caller unwinds with libdwfl). *@ended: no caller was found, as libdwfl ends an unwind
 * (a return address undefined, unreadable or 0; a CFA from an rbp it does not know: every
 * register of the caller unknown); *@outermost: the last frame's rule says it has no caller.
 * libdwfl reads every callee-saved register a frame saved; only rbp and rsp can be a CFA
 * here, so only they are followed, and only rbp's save slot is read besides the return
 * address (dwproc__unwind_checks proves its checks by unwinding again, this way too).
 */
static int fast_unwind(struct dwproc *dp, bool *ended, bool *outermost)
{
	uint64_t pc = dp->regs[DWREG_RIP], sp = dp->regs[DWREG_RSP], rbp = dp->regs[DWREG_RBP];
	bool rbp_known = true, activation = true;
	Dwarf_Word ra, w;
	struct cfi_rule r;
	uint64_t cfa;

	dp->n = 0;
	dp->last_sp = 0;
	*ended = *outermost = false;
	for (;;) {
		if (dp->n >= dp->max)
			return dp->n; /* frame_cb's limit: not an end */
		dp->out[dp->n].pc = pc;
		dp->out[dp->n].activation = activation;
		dp->n++;
		dp->last_sp = sp;
		rule_at(dp, activation ? pc : pc - 1, &r);
		if (!r.simple)
			return -EAGAIN;
		*outermost = r.outermost;
		if (r.outermost || (r.cfa_rbp && !rbp_known))
			break;
		cfa = (r.cfa_rbp ? rbp : sp) + (int64_t)r.cfa_off;
		if (!memory_read(NULL, cfa + (int64_t)r.ra_off, &ra, dp) || !ra)
			break;
		if (r.rbp == CFI_RBP_AT) {
			rbp_known = memory_read(NULL, cfa + (int64_t)r.rbp_off, &w, dp);
			rbp = w;
		} else if (r.rbp == CFI_RBP_UNDEFINED) {
			rbp_known = false;
		}
		sp = cfa;
		pc = ra;
		activation = false;
	}
	*ended = true;
	return dp->n;
}

/* Whether unwinds are checked against libdwfl's: the environment's PROBING_UNWIND_CHECK. */
static bool checking(void)
{
	if (unwinds.check < 0)
		unwinds.check = getenv("PROBING_UNWIND_CHECK") != NULL;
	return unwinds.check;
}

/*
 * An unwind as libdwfl does it, into dp->out. Return the number of frames; *@complete as
 * dwproc__unwind says.
 */
static int slow_unwind(struct dwproc *dp, pid_t tid, bool *complete)
{
	int ret;

	dp->n = 0;
	dp->last_sp = 0;
	ret = dwfl_getthread_frames(dp->dwfl, tid, frame_cb, dp);
	*complete = dp->n && reached_outermost(dp, ret == 0);
	return dp->n;
}

/*
 * A fast unwind (@fast, @n frames, @fast_complete) that differs from libdwfl's (dp->out) at
 * frame @at: a warning, and a line appended to the file PROBING_UNWIND_CHECK names if it is
 * an absolute path (tests read it).
 */
static void differ_note(struct dwproc *dp, pid_t tid, const struct dwproc_frame *fast, int n,
			bool fast_complete, int at)
{
	const char *path = getenv("PROBING_UNWIND_CHECK");
	char line[512];
	FILE *f;

	snprintf(line, sizeof(line),
		 "unwind self-check: pid %d tid %d rip %#" PRIx64 ": %d frames%s by the rules, "
		 "%d by libdwfl; first difference at frame %d (%#" PRIx64 " vs %#" PRIx64 ")",
		 dp->pid, tid, dp->regs[DWREG_RIP], n, fast_complete ? " (complete)" : "", dp->n,
		 at, at < n ? fast[at].pc : 0, at < dp->n ? dp->out[at].pc : 0);
	pr_warn("%s", line);
	if (path && path[0] == '/' && (f = fopen(path, "ae"))) {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
}

/* The fast unwind, checked against libdwfl's when asked (PROBING_UNWIND_CHECK). */
static int unwind_once(struct dwproc *dp, pid_t tid, bool *complete)
{
	struct dwproc_frame fast[MAX_NATIVE_CHECK];
	bool ended, outermost, fast_complete;
	int n, i;

	if (unwinds.libdwfl_only < 0)
		unwinds.libdwfl_only = getenv("PROBING_UNWIND_LIBDWFL") != NULL;
	n = unwinds.libdwfl_only ? -EAGAIN : fast_unwind(dp, &ended, &outermost);
	if (n < 0) {
		__atomic_add_fetch(&unwinds.slow, 1, __ATOMIC_RELAXED);
		return slow_unwind(dp, tid, complete);
	}
	__atomic_add_fetch(&unwinds.fast, 1, __ATOMIC_RELAXED);
	/* reached_outermost, the last frame's rule already known */
	*complete = n && (at_start_stack(dp) || (ended && outermost));
	if (!checking() || n > (int)ARRAY_SIZE(fast))
		return n;
	memcpy(fast, dp->out, sizeof(*fast) * n);
	fast_complete = *complete;
	slow_unwind(dp, tid, complete);
	for (i = 0; i < n && i < dp->n; i++)
		if (fast[i].pc != dp->out[i].pc || fast[i].activation != dp->out[i].activation)
			break;
	if (i == n && n == dp->n && fast_complete == *complete)
		return n;
	__atomic_add_fetch(&unwinds.differ, 1, __ATOMIC_RELAXED);
	differ_note(dp, tid, fast, n, fast_complete, i);
	return dp->n;
}

int dwproc__unwind(struct dwproc *dp, pid_t tid, const uint64_t *regs, const void *stack,
		   size_t stack_len, struct dwproc_frame *out, int max, bool *complete)
{
	uint64_t t0 = now_mono_ns();
	bool retried;
	int err;

	*complete = false;
	if (max <= 0)
		return 0;
	err = attach(dp);
	if (err) {
		/* Without a process state we can still name the interrupted frame. */
		out[0].pc = regs[DWREG_RIP];
		out[0].activation = true;
		return regs[DWREG_RIP] ? 1 : 0;
	}
	dp->tid = tid;
	dp->regs = regs;
	dp->stack = stack;
	dp->sp = regs[DWREG_RSP];
	dp->stack_len = stack_len;
	dp->out = out;
	dp->max = max;
	released_slots(dp, regs);
	for (retried = false;; retried = true) {
		unwind_once(dp, tid, complete);
		/*
		 * Stopped at an address in no known module: a library mapped since the maps
		 * were read (at start-up ld.so maps them after exec). If a refresh finds it,
		 * unwind again, so the stack goes on through it.
		 */
		if (*complete || retried || !dp->n || dwproc__module(dp, out[dp->n - 1].pc) ||
		    !dwproc__module_refreshed(dp, out[dp->n - 1].pc))
			break;
	}
	if (!dp->n && regs[DWREG_RIP]) {
		out[0].pc = regs[DWREG_RIP];
		out[0].activation = true;
		dp->n = 1;
	}
	__atomic_add_fetch(&unwinds.ns, now_mono_ns() - t0, __ATOMIC_RELAXED);
	return dp->n;
}

void dwproc__unwind_counts(struct dwproc_unwinds *out)
{
	out->by_rules = __atomic_load_n(&unwinds.fast, __ATOMIC_RELAXED);
	out->by_libdwfl = __atomic_load_n(&unwinds.slow, __ATOMIC_RELAXED);
	out->differ = __atomic_load_n(&unwinds.differ, __ATOMIC_RELAXED);
	out->ns = __atomic_load_n(&unwinds.ns, __ATOMIC_RELAXED);
	out->checked = checking();
}

Dwfl_Module *dwproc__module(struct dwproc *dp, uint64_t pc)
{
	size_t lo = 0, hi = dp->nranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pc < dp->ranges[mid].start)
			hi = mid;
		else if (pc >= dp->ranges[mid].end)
			lo = mid + 1;
		else
			return dp->ranges[mid].mod;
	}
	return NULL;
}

uint64_t dwproc__frame_outside(struct dwproc *dp, const struct dwproc_frame *frames, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		uint64_t pc = frames[i].activation ? frames[i].pc : frames[i].pc - 1;

		if (frames[i].pc > 4096 && !dwproc__module(dp, pc))
			return pc;
	}
	return 0;
}

Dwfl_Module *dwproc__module_refreshed(struct dwproc *dp, uint64_t pc)
{
	Dwfl_Module *mod = dwproc__module(dp, pc);

	if (!mod && pc > 4096 && dwproc__refresh(dp, REFRESH_MAX_GAP_MS) > 0)
		mod = dwproc__module(dp, pc);
	return mod;
}

/* Whether two unwinds gave the same frames. */
static bool same_frames(const struct dwproc_frame *a, int na, bool ca, const struct dwproc_frame *b,
			int nb, bool cb)
{
	int i;

	if (na != nb || ca != cb)
		return false;
	for (i = 0; i < na; i++)
		if (a[i].pc != b[i].pc || a[i].activation != b[i].activation)
			return false;
	return true;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* A value no stack word or register can be taken for: a non-canonical address. */
#define POISON(i) (0xdead000000000000ull | (uint64_t)(i))

int dwproc__unwind_checks(struct dwproc *dp, pid_t tid, const uint64_t *regs, const void *stack,
			  size_t stack_len, const struct dwproc_frame *frames, int n, bool complete,
			  uint32_t *off, uint64_t *val, int max)
{
	uint64_t sp = regs[DWREG_RSP], pregs[DWREG_COUNT], w;
	struct dwproc_frame *again = NULL;
	uint8_t *poisoned = NULL;
	size_t i, k, nreads;
	int m = 0, words, j, got, pass, ret = 0;
	bool done;

	if (n <= 0 || stack_len < 8 || stack_len > UINT32_MAX)
		return 0;
	/* One frame more than @n: an unwind that would go on further must not look the same. */
	again = malloc(sizeof(*again) * (n + 1));
	poisoned = malloc(stack_len);
	if (!again || !poisoned) {
		ret = -ENOMEM;
		goto cleanup;
	}
	/* The unwind again, noting what it reads; it must give the same frames. */
	dp->logging = true;
	dp->nreads = 0;
	got = dwproc__unwind(dp, tid, regs, stack, stack_len, again, n + 1, &done);
	dp->logging = false;
	if (!same_frames(frames, n, complete, again, got, done))
		goto cleanup;
	qsort(dp->reads, dp->nreads, sizeof(*dp->reads), cmp_u32);
	for (i = nreads = 0; i < dp->nreads; i++)
		if (!nreads || dp->reads[i] != dp->reads[nreads - 1])
			dp->reads[nreads++] = dp->reads[i];

	/* Words read that are a frame's return address or point into the stack are checked;
	 * every other word of the copy is poisoned. */
	for (i = 0; i + 8 <= stack_len; i += 8)
		w = POISON(i), memcpy(poisoned + i, &w, 8);
	memset(poisoned + i, 0xde, stack_len - i);
	for (i = 0; i < nreads; i++) {
		k = dp->reads[i];
		memcpy(&w, (const uint8_t *)stack + k, 8);
		for (j = 1; j < n; j++)
			if (!frames[j].activation && frames[j].pc == w)
				break;
		if (j == n && !(w >= sp && w <= sp + stack_len))
			continue;
		if (m >= max)
			goto cleanup;
		memcpy(poisoned + k, &w, 8);
		off[m] = (uint32_t)k;
		val[m++] = w;
	}
	words = m;
	/*
	 * Registers: rip and rsp are the key. First try with every other one poisoned; if the
	 * frames need one (a frame pointer), with those that point into the stack checked.
	 */
	for (pass = 0; pass < 2; pass++) {
		m = words;
		for (j = 0; j < DWREG_COUNT; j++) {
			pregs[j] = regs[j];
			if (j == DWREG_RIP || j == DWREG_RSP)
				continue;
			if (pass && regs[j] >= sp && regs[j] <= sp + stack_len) {
				if (m >= max)
					goto cleanup;
				off[m] = DWPROC_CHECK_REG | j;
				val[m++] = regs[j];
			} else {
				pregs[j] = POISON(0x100000000ull + j);
			}
		}
		/* Proof: from those alone the unwind gives the same frames. */
		got = dwproc__unwind(dp, tid, pregs, poisoned, stack_len, again, n + 1, &done);
		if (same_frames(frames, n, complete, again, got, done)) {
			ret = m;
			break;
		}
	}
cleanup:
	dp->logging = false;
	free(again);
	free(poisoned);
	return ret;
}
